"""The FMHA forward kernel runs on the emulator and matches the float64 reference on every arch.

Each arch runs the four feature variants of _fmha_util.py (the ones test_fmha_compile.py compiles,
so a process running both compiles each once), f16 at one head dim and bf16 at the other, with
run-time arguments that reach the edge cases: sequence lengths that are not multiples of the
tiles, seqlen_q != seqlen_k, rows with no key at all, empty sequences in group mode, GQA/MQA,
padded head dims, bhsd strides. The output starts as NaN, so an element the kernel does not write
fails the test; the emulator's sanitizer fails it on any access outside the tensors.
"""

from __future__ import annotations

import zlib
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from _fmha_util import FEATURES, actual_hdim, compiled_variant

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.launcher import launch
from tiledsl.reference import fmha_fwd_reference

pytestmark = pytest.mark.emulator

TOLERANCE = {"f16": 4e-3, "bf16": 2e-2}  # max abs error of O (inputs ~N(0, 1)); LSE: 1e-4

# Run-time arguments per variant (its constexprs come from FEATURES).
RUNS: dict[tuple[str, bool], dict[str, Any]] = {
    ("f16", False): dict(batch=2, sq=70, sk=90, hq=4, hk=2, softcap=5.0, scale=0.5, sink=True),
    ("bf16", False): dict(lens_q=[37, 0, 100, 5], lens_k=[50, 20, 130, 0], hq=2, hk=1, window=(37, 11)),
    ("f16", True): dict(batch=1, sq=90, sk=40, hq=3, hk=1, causal=True, sink=True, layout="bhsd"),
    ("bf16", True): dict(lens_q=[64, 65, 1], lens_k=[1, 200, 64], hq=2, hk=2, causal="top_left", window=(40, -1),
                         softcap=5.0, scale=0.5),
}


def run_case(arch: str, dtype: str, hdim: int, causal: bool) -> None:
    r = RUNS[(dtype, causal)]
    feats = FEATURES[(dtype, causal)]
    kernel = compiled_variant(arch, dtype, hdim, causal)
    rng = np.random.default_rng(zlib.crc32(f"{arch}{dtype}{hdim}{causal}".encode()))
    npdt = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    d, hq, hk = actual_hdim(hdim, dtype, causal), r["hq"], r["hk"]
    varlen = "lens_q" in r
    if varlen:
        cu_q = np.cumsum([0, *r["lens_q"]]).astype(np.int32)
        cu_k = np.cumsum([0, *r["lens_k"]]).astype(np.int32)
        batch, sq, sk, max_sq = 1, int(cu_q[-1]), int(cu_k[-1]), max(r["lens_q"])
        nseq = len(r["lens_q"])
    else:
        batch, sq, sk = r["batch"], r["sq"], r["sk"]
        cu_q = cu_k = np.zeros(batch + 1, np.int32)  # not read in batch mode
        max_sq, nseq = sq, batch
    q, k, v = (rng.standard_normal((batch, s, h, d)).astype(npdt) for s, h in ((sq, hq), (sk, hk), (sk, hk)))
    if r.get("layout") == "bhsd":  # bhsd storage, passed as [B, S, H, D] views with their strides
        q, k, v = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3) for x in (q, k, v))
    out = np.full((batch, sq, hq, d), np.nan, npdt)
    lse = np.full((batch, hq, sq), np.nan, np.float32)
    sink = rng.standard_normal(hq).astype(np.float32)
    scale = r.get("scale", 1 / np.sqrt(d))
    softcap = r.get("softcap", 0.0)
    window = r.get("window", (-1, -1))
    # The kernel's own argument convention: a causal kind takes (window_left, 0).
    left, right = window[0], (0 if r.get("causal") else window[1])
    unused_acc = np.zeros((1, batch, hq, sq, d), np.float32), np.zeros((1, batch, hq, sq), np.float32)
    no_cache = np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros((1, 1), np.int32)
    no_bias = np.zeros((1, 1, 1, 1), np.float32), np.zeros((1, hq), np.float32)
    launch(kernel, q, k, v, out, lse, sink, *unused_acc, cu_q, cu_k, *no_cache, *no_bias, scale, softcap, left, right,
           nseq, max_sq, 1, 0, 0, 1, 0, 0, 0, 0, 1.0, 1.0, 1.0, device=EmulatorDevice(arch))

    f64 = [np.asarray(x, np.float64) for x in (q, k, v)]
    kw = dict(scale=scale, causal=r.get("causal", False), window=window, softcap=softcap,
              sink=sink if feats.get("sink") else None, return_lse=True)
    if varlen:
        want, want_lse = fmha_fwd_reference(*(x[0] for x in f64), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **kw)
        want, want_lse = want[None], want_lse[None]
    else:
        want, want_lse = fmha_fwd_reference(*f64, **kw)
    got = np.asarray(out, np.float64)
    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} output elements never written"
    err = np.abs(got - want).max()
    assert err <= TOLERANCE[dtype], f"max |out - reference| = {err:.3e} above {TOLERANCE[dtype]}"
    empty = np.isneginf(want_lse)
    if feats.get("lse"):
        assert np.array_equal(np.isneginf(lse), empty), "LSE -inf exactly for the rows with no key"
        with np.errstate(invalid="ignore"):  # -inf - -inf on the empty rows, masked out
            lse_err = np.abs(np.where(empty, 0.0, lse - want_lse)).max()
        assert lse_err <= 1e-4, f"max |lse - reference| = {lse_err:.3e}"
    rows_without_keys = np.broadcast_to(empty.transpose(0, 2, 1)[..., None], got.shape)
    assert not got[rows_without_keys].any(), "rows with no allowed key must be 0"


CASES = [(arch, dt, h, c) for i, arch in enumerate(ARCH_NAMES) for dt in ("f16", "bf16")
         for c in (False, True) for h in [(64, 128)[(i + (dt == "bf16")) % 2]]]


@pytest.mark.parametrize("arch,dtype,hdim,causal", CASES,
                         ids=[f"{a}-{d}-d{h}-{'causal' if c else 'nocausal'}" for a, d, h, c in CASES])
def test_fmha_matches_reference(arch: str, dtype: str, hdim: int, causal: bool) -> None:
    run_case(arch, dtype, hdim, causal)
