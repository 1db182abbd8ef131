"""The forward's P rounded toward zero (a config row's p_toward_zero, fmha_fwd.tile's P_TOWARD_ZERO,
lifted by its mean loss first) is as accurate as P rounded to nearest even, on every arch, and the
output does not depend on whether the LSE is returned. Toward zero uncompensated would shrink every
output by about 3.5e-4 of itself: the signed error's mean tells it apart."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.kernels import fmha_configs
from tiledsl.library import clear_plan_caches
from tiledsl.ops import fmha_fwd
from tiledsl.reference import fmha_fwd_reference

pytestmark = pytest.mark.emulator


def _forward(arch: str, toward_zero: bool, monkeypatch: pytest.MonkeyPatch, *args, **kw):
    """fmha_fwd with its config rows' p_toward_zero set as asked (its plans, which hold their
    kernels, built anew before and after)."""
    row = fmha_configs.fmha_config
    clear_plan_caches()
    try:
        with monkeypatch.context() as m:
            m.setattr(fmha_configs, "fmha_config", lambda *a, **k: replace(row(*a, **k), p_toward_zero=toward_zero))
            return fmha_fwd(*args, device=EmulatorDevice(arch), **kw)
    finally:
        clear_plan_caches()


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_p_toward_zero_is_as_accurate_as_nearest_even(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(17)
    q, k, v = (rng.standard_normal((1, s, 2, 64)).astype(np.float16) for s in (96, 300, 300))
    q *= np.float16(2.0)  # sharper rows: P's mantissas spread over many binades
    want, want_lse = fmha_fwd_reference(*(x.astype(np.float64) for x in (q, k, v)), return_lse=True)
    mean_abs, signed = {}, {}
    for toward_zero in (False, True):
        out = _forward(arch, toward_zero, monkeypatch, q, k, v)
        out_lse, lse = _forward(arch, toward_zero, monkeypatch, q, k, v, return_lse=True)
        np.testing.assert_array_equal(out, out_lse)  # the same output with or without the LSE
        np.testing.assert_allclose(lse, want_lse, atol=1e-4, rtol=1e-5)
        err = np.asarray(out, np.float64) - want
        assert np.abs(err).max() <= 4e-3, np.abs(err).max()
        mean_abs[toward_zero] = np.abs(err).mean()
        signed[toward_zero] = (err * np.sign(want)).mean()
    assert mean_abs[True] <= 1.1 * mean_abs[False], mean_abs
    assert abs(signed[True]) <= 0.2 * mean_abs[True], (signed, mean_abs)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_p_toward_zero_keeps_a_lone_key_exact(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One key: P is 1 (lifted: 1 + 3.5e-4, which rounds back to 1), so the output is v exactly."""
    rng = np.random.default_rng(18)
    q, k, v = (rng.standard_normal((2, s, 2, 64)).astype(np.float16) for s in (33, 1, 1))
    out = _forward(arch, True, monkeypatch, q, k, v)
    out_lse, _ = _forward(arch, True, monkeypatch, q, k, v, return_lse=True)
    for o in (out, out_lse):
        np.testing.assert_array_equal(o, np.broadcast_to(v, o.shape))
