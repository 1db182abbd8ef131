"""fp8 forward (docs/fp8.md): fmha_fwd with e4m3 q/k/v on gfx942 (FNUZ), gfx950 and gfx1201 (OCP),
against the float64 reference on the dequantized inputs, with a tolerance derived from e4m3
rounding (below); the refusals on gfx90a/gfx1100, for the wrong flavour, bad descales and outputs,
the backward and the KV cache; no VGPR spills at head dims 64 and 128.

Tolerance. q, k, v are exact e4m3 values and their products are exact in the f32 accumulation,
so the logits and the LSE carry only f32 rounding. The one coarse step is P: each element p of
exp2(s - m) in [0, 1] (m the running max) is rounded as p * p_scale to e4m3, with p_scale the
format's largest value. A normal e4m3 value has 3 mantissa bits, so that rounding errs by at most
2^-4 relative; below the smallest normal it errs by at most half the subnormal step (2^-10 for
OCP e4m3, 2^-11 for FNUZ), i.e. 2^-10 / p_scale in P's units. The row's normalizer l >= 1 (its max
term is exactly 1) is f32. So, per output element, with P the exact probabilities and V = v * v_descale:
    |out - ref| <= 2^-4 (P |V|) + 2^-10 / p_scale * sum_j |V_j| + ulp(out) / 2 + 1e-5,
the last two for the bf16/f16 output's rounding and the f32 sums. A bug (a descale, a scale or a
mask wrong) moves outputs by far more than this."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.fp8 import fp8_format
from tiledsl.ops import compile_fmha_fwd, fmha_bwd, fmha_fwd, fmha_fwd_kvcache
from tiledsl.reference import fmha_fwd_reference, fmha_mask_params

pytestmark = pytest.mark.emulator

FP8_ARCHS = ["gfx942", "gfx950", "gfx1201"]


def e4m3(arch: str):
    return getattr(ml_dtypes, fp8_format("f8e4m3", get_arch(arch).fp8_flavour).numpy)


def tolerance(arch: str, q, k, v, descales, out, **kw) -> np.ndarray:
    """The bound of the module docstring, per output element (bshd): P |V| is the reference's
    output with |V| for V (with dropout: the kept P, rescaled, which is what is rounded)."""
    p_scale = fp8_format("f8e4m3", get_arch(arch).fp8_flavour).max
    deq = [x.astype(np.float64) * d for x, d in zip((q, k, v), descales, strict=True)]
    p_abs_v = fmha_fwd_reference(deq[0], deq[1], np.abs(deq[2]), **kw)
    hq, hk = q.shape[-2], k.shape[-2]
    col_sums = np.repeat(np.abs(deq[2]).sum(axis=-3, keepdims=True), hq // hk, axis=-2)  # sum_j |V_j|
    rescale = 1.0 / (1.0 - kw.get("dropout_p", 0.0))
    ulp = 2.0**-8 if out.dtype == ml_dtypes.bfloat16 else 2.0**-10
    return 2.0**-4 * p_abs_v + 2.0**-10 / p_scale * rescale * col_sums + ulp / 2 * np.abs(out.astype(np.float64)) \
        + 1e-5


def _check(arch: str, q, k, v, descales=(1.0, 1.0, 1.0), **kw) -> None:
    scales = dict(zip(("q_descale", "k_descale", "v_descale"), descales, strict=True))
    out, lse = fmha_fwd(q, k, v, return_lse=True, device=EmulatorDevice(arch), **scales, **kw)
    assert out.dtype == (np.float16 if kw.get("out_dtype") == "f16" else ml_dtypes.bfloat16)
    kw = {n: (x.astype(np.float64) if isinstance(x, np.ndarray) else x) for n, x in kw.items() if n != "out_dtype"}
    deq = [x.astype(np.float64) * d for x, d in zip((q, k, v), descales, strict=True)]
    want, want_lse = fmha_fwd_reference(*deq, return_lse=True, **kw)
    err = np.abs(out.astype(np.float64) - want)
    tol = tolerance(arch, q, k, v, descales, out, **kw)
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert (err <= tol).all(), f"worst excess {np.max(err - tol)} at {worst}"
    assert err.max() > 0  # P really was rounded to e4m3 (bit-exact would mean it was not)
    finite = np.isfinite(want_lse)
    assert np.array_equal(np.isfinite(lse), finite)
    np.testing.assert_allclose(lse[finite], want_lse[finite], atol=1e-4, rtol=1e-5)


def _inputs(arch: str, shape_q, shape_kv, seed=0, scale=2.0):
    rng = np.random.default_rng(seed)
    f8 = e4m3(arch)
    return [(rng.standard_normal(s) * scale).astype(f8) for s in (shape_q, shape_kv, shape_kv)]


@pytest.mark.parametrize("arch", FP8_ARCHS)
@pytest.mark.parametrize("opts", [
    {"causal": True},
    {"window": (30, 5), "out_dtype": "f16"},
    {},
])
def test_forward_within_e4m3_bound(arch: str, opts: dict) -> None:
    q, k, v = _inputs(arch, (2, 45, 4, 64), (2, 83, 2, 64))
    _check(arch, q, k, v, (0.5, 0.25, 0.75), **opts)


@pytest.mark.parametrize("arch", FP8_ARCHS)
def test_features(arch: str) -> None:
    """Soft-cap with a sink, ALiBi, an f32 bias, dropout: each as with f16, within the bound."""
    rng = np.random.default_rng(2)
    q, k, v = _inputs(arch, (2, 33, 4, 64), (2, 70, 2, 64), seed=3)
    for kw in (dict(softcap=5.0, sink=rng.standard_normal(4).astype(np.float32)),
               dict(alibi_slopes=np.full(4, 0.1, np.float32), causal=True),
               dict(bias=rng.standard_normal((1, 4, 33, 70)).astype(np.float32)),
               dict(dropout_p=0.2, seed=5)):
        _check(arch, q, k, v, **kw)


@pytest.mark.parametrize("arch", FP8_ARCHS)
def test_group_mode_split_kv_and_padded_head_dim(arch: str) -> None:
    """Group mode with an empty sequence and split-KV at head dim 80 (padded to 128): against the
    reference within a relative bound (the per-element bound is checked above)."""
    rng = np.random.default_rng(1)
    f8 = e4m3(arch)
    cu_q, cu_k = np.array([0, 13, 13, 40], np.int32), np.array([0, 50, 57, 160], np.int32)
    q, k, v = ((rng.standard_normal(s) * 2).astype(f8) for s in ((40, 4, 80), (160, 2, 80), (160, 2, 80)))
    dev = EmulatorDevice(arch)
    out = fmha_fwd(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True, num_splits=2, device=dev)
    want = fmha_fwd_reference(*(x.astype(np.float64) for x in (q, k, v)), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                              causal=True)
    # 2^-4 relative per P element, the V rows of one head at most max|v|: a coarse bound.
    assert np.abs(out.astype(np.float64) - want).max() <= 2.0**-4 * np.abs(v.astype(np.float64)).max() + 1e-2


@pytest.mark.parametrize("call,message", [
    (lambda q, h: fmha_fwd(q["ocp"], q["ocp"], q["ocp"], arch="gfx90a"),
     "q: float8_e4m3fn needs fp8 matrix instructions, which gfx90a does not have"),
    (lambda q, h: fmha_fwd(q["ocp"], q["ocp"], q["ocp"], arch="gfx1100"), "which gfx1100 does not have"),
    (lambda q, h: fmha_fwd(q["ocp"], q["ocp"], q["ocp"], arch="gfx942"),
     r"q: gfx942 takes float8_e4m3fnuz \(its FNUZ e4m3\), got float8_e4m3fn"),
    (lambda q, h: fmha_fwd(q["fnuz"], q["fnuz"], q["fnuz"], arch="gfx950"), "q: gfx950 takes float8_e4m3fn"),
    (lambda q, h: fmha_fwd(q["ocp"], q["ocp"], h, arch="gfx950"), "v: expected dtype float8_e4m3fn"),
    (lambda q, h: fmha_fwd(q["ocp"], q["ocp"], q["ocp"], arch="gfx950", q_descale=0.0),
     "q_descale: expected a positive"),
    (lambda q, h: fmha_fwd(q["ocp"], q["ocp"], q["ocp"], arch="gfx950", k_descale=np.ones(2)), "k_descale: expected"),
    (lambda q, h: fmha_fwd(q["ocp"], q["ocp"], q["ocp"], arch="gfx950", v_descale="1"), "v_descale: expected"),
    (lambda q, h: fmha_fwd(q["ocp"], q["ocp"], q["ocp"], arch="gfx950", out_dtype="f8e4m3"), "out_dtype: expected"),
    (lambda q, h: fmha_fwd(q["ocp"], q["ocp"], q["ocp"], arch="gfx950", q_descale=1e30, k_descale=1e30),
     r"scale \* q_descale \* k_descale: 0.125 \* 1e\+30 \* 1e\+30 = 1.25e\+59 does not fit in f32"),
    (lambda q, h: fmha_fwd(h, h, h, arch="gfx950", v_descale=2.0), "v_descale: only for fp8 q/k/v"),
    (lambda q, h: fmha_fwd(h, h, h, arch="gfx950", out_dtype="bf16"), "out_dtype: only for fp8 q/k/v"),
    (lambda q, h: fmha_fwd(q["ocp"], q["ocp"], q["ocp"], arch="gfx950", bias=q["ocp"][:, :, :, :8]),
     "bias: expected dtype float32 with fp8"),
    (lambda q, h: fmha_bwd(*(q["ocp"],) * 5, np.zeros((1, 2, 8), np.float32), arch="gfx950"),
     r"q: expected dtype float16 or bfloat16, got float8_e4m3fn \(fp8 is forward only"),
    (lambda q, h: fmha_fwd_kvcache(q["ocp"], q["ocp"], q["ocp"], cache_seqlens=np.array([4], np.int32),
                                   arch="gfx950"), "q: expected dtype float16 or bfloat16"),
])
def test_refusals(call, message: str) -> None:
    q = {"ocp": np.zeros((1, 8, 2, 64), ml_dtypes.float8_e4m3fn), "fnuz": np.zeros((1, 8, 2, 64),
                                                                                   ml_dtypes.float8_e4m3fnuz)}
    with pytest.raises(ValueError, match=message):
        call(q, np.zeros((1, 8, 2, 64), np.float16))


@pytest.mark.parametrize("arch", FP8_ARCHS)
@pytest.mark.parametrize("hdim", [64, 128])
def test_no_vgpr_spills(arch: str, hdim: int) -> None:
    for causal in (False, True):
        k = compile_fmha_fwd(arch, dtype="f8e4m3", hdim_q=hdim, hdim_v=hdim, mask=fmha_mask_params(causal))
        assert k.manifest["vgpr_spill_count"] == 0, causal
        assert any(op.isa_name in k.asm for op in get_arch(arch).matrix_ops_for("f8e4m3"))
