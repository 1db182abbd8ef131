"""Dropout (docs/dropout.md): fmha_fwd / fmha_bwd with `dropout_p`, `seed`, `offset` on the emulator
against the float64 reference, whose keep bits are `tiledsl.reference.dropout_keep_mask` exactly,
on every arch: odd sequence lengths, GQA, masks, group mode with an empty sequence, split-KV, the
returned keep mask bit for bit, deterministic backward bitwise across schedules, bad arguments,
and the compile checks (no VGPR spills at head dims 64 and 128 in the forward, and in the
backward on CDNA)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _fmha_util import assert_grads_close, check_out_lse

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.device_array import DeviceArray
from tiledsl.fmha_bwd import BwdShape, build_plan
from tiledsl.ops import compile_fmha_fwd, fmha_bwd, fmha_bwd_plan, fmha_fwd
from tiledsl.reference import dropout_keep_mask, fmha_bwd_reference, fmha_fwd_reference, fmha_mask_params

pytestmark = pytest.mark.emulator

BF16 = ml_dtypes.bfloat16
TOL = {np.dtype(np.float16): 4e-3, np.dtype(BF16): 2e-2}
DROP = dict(dropout_p=0.3, seed=2**40 + 123, offset=5)


def rand(rng, shape, dtype=np.float16):
    return rng.standard_normal(shape).astype(dtype)


def f64(x):
    return np.asarray(x, np.float64)


# Each arch runs a different mix: together both dtypes, every mask kind, GQA and MQA, bhsd, soft-cap
# and a sink.
CASES = {
    "gfx90a": dict(dtype=np.float16, hk=2, causal=True),
    "gfx942": dict(dtype=BF16, hk=1, causal="top_left", softcap=5.0),
    "gfx950": dict(dtype=np.float16, hk=4, window=(20, 7)),
    "gfx1100": dict(dtype=np.float16, hk=2, layout="bhsd"),
    "gfx1201": dict(dtype=BF16, hk=2, causal=True, sink=True),
}


def _case(arch: str, seed: int = 0):
    case = dict(CASES[arch])
    dtype, hk, layout = case.pop("dtype"), case.pop("hk"), case.get("layout", "bshd")
    rng = np.random.default_rng(seed)
    b, sq, sk, hq, d = 2, 37, 75, 4, 64
    shape = (lambda s, h, dd: (b, s, h, dd)) if layout == "bshd" else (lambda s, h, dd: (b, h, s, dd))
    q, k, v = rand(rng, shape(sq, hq, d), dtype), rand(rng, shape(sk, hk, d), dtype), rand(rng, shape(sk, hk, d), dtype)
    do = rand(rng, shape(sq, hq, d), dtype)
    if case.pop("sink", False):
        case["sink"] = rng.standard_normal(hq).astype(np.float32)
    return q, k, v, do, case


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_forward_and_mask(arch: str) -> None:
    q, k, v, _, case = _case(arch)
    dev = EmulatorDevice(arch)
    out, lse, keep = fmha_fwd(q, k, v, return_lse=True, return_dropout_mask=True, device=dev, **case, **DROP)
    want, want_lse, want_keep = fmha_fwd_reference(f64(q), f64(k), f64(v), return_lse=True, return_dropout_mask=True,
                                                   **case, **DROP)
    check_out_lse(out, lse, want, want_lse, TOL[q.dtype])
    assert keep.dtype == np.bool_ and keep.shape == (2, 4, 37, 75)
    np.testing.assert_array_equal(keep, want_keep)
    np.testing.assert_array_equal(keep, dropout_keep_mask(DROP["seed"], DROP["offset"], 2, 4, 37, 75, 0.3))
    # The drop is live: without it the output is another one.
    plain = fmha_fwd(q, k, v, device=dev, **case)
    assert np.abs(f64(plain) - want).max() > 20 * TOL[q.dtype]


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_backward(arch: str) -> None:
    q, k, v, do, case = _case(arch, seed=1)
    dev = EmulatorDevice(arch)
    out, lse = fmha_fwd(q, k, v, return_lse=True, device=dev, **case, **DROP)
    got = fmha_bwd(do, q, k, v, out, lse, device=dev, **case, **DROP)
    ref = fmha_bwd_reference(f64(do), f64(q), f64(k), f64(v), **case, **DROP)
    assert_grads_close(got, ref, q.dtype)
    # The backward draws the bits again: without them the gradients are other ones.
    wrong = fmha_bwd(do, q, k, v, out, lse, device=dev, **case)
    assert np.abs(f64(wrong[2]) - ref[2]).max() > 10 * TOL[q.dtype] * max(np.abs(ref[2]).max(), 1.0)


def test_deterministic_backward_is_bitwise_across_schedules() -> None:
    q, k, v, do, case = _case("gfx942", seed=2)
    runs = []
    for s in (1, 2):
        dev = EmulatorDevice("gfx942", schedule="shuffle", seed=s)
        out, lse = fmha_fwd(q, k, v, return_lse=True, device=dev, **case, **DROP)
        runs.append(fmha_bwd(do, q, k, v, out, lse, deterministic=True, device=dev, **case, **DROP))
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint16), np.asarray(b).view(np.uint16))


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_group_mode_with_an_empty_sequence(arch: str) -> None:
    rng = np.random.default_rng(3)
    cu_q, cu_k = np.array([0, 13, 13, 50], np.int32), np.array([0, 40, 47, 107], np.int32)
    hq, hk, d = 4, 2, 64
    q, k, v = rand(rng, (50, hq, d)), rand(rng, (107, hk, d)), rand(rng, (107, hk, d))
    do = rand(rng, (50, hq, d))
    kw = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True, **DROP)
    dev = EmulatorDevice(arch)
    out, lse, keep = fmha_fwd(q, k, v, return_lse=True, return_dropout_mask=True, device=dev, **kw)
    want, want_lse, want_keep = fmha_fwd_reference(f64(q), f64(k), f64(v), return_lse=True,
                                                   return_dropout_mask=True, **kw)
    check_out_lse(out, lse, want, want_lse, TOL[q.dtype])
    assert keep.shape == (hq, 50, 60)  # [Hq, total_q, max_seqlen_k]
    np.testing.assert_array_equal(keep, want_keep)
    seq2 = dropout_keep_mask(DROP["seed"], DROP["offset"], 3, hq, 37, 60, 0.3)[2]  # the third sequence's own
    np.testing.assert_array_equal(keep[:, 13:50, :60], seq2)
    got = fmha_bwd(do, q, k, v, out, lse, device=dev, **kw)
    assert_grads_close(got, fmha_bwd_reference(f64(do), f64(q), f64(k), f64(v), **kw), q.dtype)


def test_split_kv_and_device_arrays() -> None:
    rng = np.random.default_rng(4)
    q, k, v = rand(rng, (1, 3, 4, 64)), rand(rng, (1, 300, 2, 64)), rand(rng, (1, 300, 2, 64))
    dev = EmulatorDevice("gfx942")
    dq, dk, dv = (DeviceArray.from_numpy(dev, x) for x in (q, k, v))
    out, keep = fmha_fwd(dq, dk, dv, num_splits=3, return_dropout_mask=True, device=dev, **DROP)
    assert isinstance(out, DeviceArray) and isinstance(keep, DeviceArray)
    want, want_keep = fmha_fwd_reference(f64(q), f64(k), f64(v), return_dropout_mask=True, **DROP)
    np.testing.assert_allclose(f64(out.numpy()), want, atol=4e-3, rtol=4e-3)
    np.testing.assert_array_equal(keep.numpy(), want_keep)


def test_rate_and_p_zero() -> None:
    """The keep rate is 1 - p (p in 1/256 steps: 0.1 keeps 231/256); p = 0 compiles the variant
    without dropout."""
    keep = dropout_keep_mask(9, 0, 2, 4, 64, 256, 0.1)
    assert abs(keep.mean() - 231 / 256) < 0.004  # 131,072 draws: the standard error is 0.0008
    rng = np.random.default_rng(5)
    q, k, v = rand(rng, (1, 20, 2, 64)), rand(rng, (1, 20, 2, 64)), rand(rng, (1, 20, 2, 64))
    dev = EmulatorDevice("gfx1100")
    np.testing.assert_array_equal(fmha_fwd(q, k, v, dropout_p=0.0, seed=7, device=dev), fmha_fwd(q, k, v, device=dev))
    do = rand(rng, (1, 20, 2, 64))
    out, lse = fmha_fwd(q, k, v, return_lse=True, device=dev)
    plan = fmha_bwd_plan(do, q, k, v, out, lse, dropout_p=0.0, device=dev)
    assert "dropout" not in plan.info
    assert "dropout" in fmha_bwd_plan(do, q, k, v, out, lse, dropout_p=0.5, device=dev).info


@pytest.mark.parametrize("kwargs,message", [
    ({"dropout_p": 1.0}, r"dropout_p: expected a float in \[0, 1\), got 1.0"),
    ({"dropout_p": -0.1}, "dropout_p: expected a float"),
    ({"dropout_p": True}, "dropout_p: expected a float"),
    ({"dropout_p": 0.001}, r"dropout_p: 0.001 is below 1/256, the step of the keep test"),
    ({"dropout_p": "0.1"}, "dropout_p: expected a float"),
    ({"dropout_p": 0.1, "seed": -1}, r"seed: expected an int in \[0, 2\*\*64\), got -1"),
    ({"dropout_p": 0.1, "seed": 2**64}, "seed: expected an int"),
    ({"dropout_p": 0.1, "seed": 1.5}, "seed: expected an int"),
    ({"dropout_p": 0.1, "offset": 2**31}, r"offset: expected an int in \[0, 2\*\*31\)"),
    ({"return_dropout_mask": True}, "return_dropout_mask: needs dropout_p > 0"),
    ({"dropout_p": 0.1, "return_dropout_mask": 1}, "return_dropout_mask: expected a bool"),
])
def test_bad_arguments(kwargs: dict, message: str) -> None:
    q = np.zeros((1, 8, 2, 64), np.float16)
    with pytest.raises(ValueError, match=message):
        fmha_fwd(q, q, q, arch="gfx942", **kwargs)
    if "return_dropout_mask" not in kwargs:
        with pytest.raises(ValueError, match=message):
            fmha_bwd(q, q, q, q, q, np.zeros((1, 2, 8), np.float32), arch="gfx942", **kwargs)


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("hdim", [64, 128])
def test_no_spills(arch: str, hdim: int) -> None:
    """Forward dropout variants spill no VGPRs at head dims 64 and 128 (masked or not); the
    backward neither on CDNA (RDNA's known spills: fmha_bwd.BWD_DROPOUT_CONFIGS)."""
    for causal in (False, True):
        k = compile_fmha_fwd(arch, dtype="f16", hdim_q=hdim, hdim_v=hdim, mask=fmha_mask_params(causal), dropout=True)
        assert k.manifest["vgpr_spill_count"] == 0, (causal, k.manifest["vgpr_spill_count"])
        if get_arch(arch).is_cdna:
            shape = BwdShape(arch=arch, dtype="f16", hdim_q=hdim, hdim_v=hdim, hq=2, hk=2,
                             mask=fmha_mask_params(causal), softcap=False, sink=False, deterministic=False,
                             varlen=False, b=1, sq=64, seqlens_q=(64,), seqlens_k=(64,), contiguous=True, dropout=True)
            m = next(s for s in build_plan(shape).stages if s.name == "dq_dk_dv").kernel.manifest
            assert m["vgpr_spill_count"] == 0, (causal, m["vgpr_spill_count"])
