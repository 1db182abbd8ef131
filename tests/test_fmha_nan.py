"""A NaN among the inputs makes its rows NaN, as the reference's do (tests/test_reference.py), and
never a row of zeros: a NaN in a query row makes every logit of that row NaN, so its running max
stays -inf (maxNum skips NaN) like a row whose keys are all masked, and only the denominator (NaN,
not 0) tells the two apart. A NaN in a key reaches every row that sees that key."""

from __future__ import annotations

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.ops import fmha_fwd
from tiledsl.reference import fmha_fwd_reference

pytestmark = pytest.mark.emulator


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("splits", [1, 3])
def test_nan_inputs_give_nan_rows(arch, splits):
    rng = np.random.default_rng(41)
    q = rng.standard_normal((1, 16, 2, 64)).astype(np.float16)
    k, v = (rng.standard_normal((1, 40, 2, 64)).astype(np.float16) for _ in range(2))
    q[0, 3, 0, 5] = np.nan  # query row 3 of head 0
    k[0, 30, 1, 7] = np.nan  # key 30 of head 1: under the bottom-right causal mask, rows 6.. see it
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, num_splits=splits, arch=arch)
    ref_out, ref_lse = fmha_fwd_reference(q, k, v, causal=True, return_lse=True)
    nan_rows = np.isnan(ref_out).all(axis=-1)  # [B, S, H]
    assert nan_rows[0, 3, 0] and nan_rows[0, 6:, 1].all() and not nan_rows[0, :6, 1].any()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref_out))
    np.testing.assert_array_equal(np.isnan(lse), np.isnan(ref_lse))
    keep = ~nan_rows
    np.testing.assert_allclose(out[keep].astype(np.float64), ref_out[keep], atol=2e-3, rtol=2e-3)
