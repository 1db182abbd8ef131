"""Attention bias and ALiBi (docs/bias.md): fmha_fwd / fmha_bwd / fmha_fwd_kvcache with `bias=` and
`alibi_slopes=` on the emulator against the float64 reference, on every arch: odd sequence lengths
(not multiples of the tiles, and not of the 8-key groups the bias is read in), GQA, masks, group
mode with an empty sequence, broadcast and strided biases, split-KV, GQA packing, the bias
gradient summed over broadcast dims (deterministic), bad arguments, and the compile checks (no
VGPR spills at head dims 64 and 128)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _fmha_util import assert_grads_close, check_out_lse

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.device_array import DeviceArray
from tiledsl.ops import fmha_bwd, fmha_bwd_plan, fmha_fwd, fmha_fwd_kvcache
from tiledsl.reference import fmha_bwd_reference, fmha_fwd_kvcache_reference, fmha_fwd_reference

pytestmark = pytest.mark.emulator

BF16 = ml_dtypes.bfloat16
TOL = {np.dtype(np.float16): 4e-3, np.dtype(BF16): 2e-2}


def rand(rng, shape, dtype=np.float16):
    return rng.standard_normal(shape).astype(dtype)


def f64(x):
    return None if x is None else np.asarray(x, np.float64)


def ref_fwd(q, k, v, **kw):
    kw = {n: f64(x) if isinstance(x, np.ndarray) and n in ("bias", "alibi_slopes", "sink") else x
          for n, x in kw.items()}
    return fmha_fwd_reference(f64(q), f64(k), f64(v), return_lse=True, **kw)


def run_fwd(arch, q, k, v, **kw):
    out, lse = fmha_fwd(q, k, v, return_lse=True, device=EmulatorDevice(arch), **kw)
    want, want_lse = ref_fwd(q, k, v, **{n: x for n, x in kw.items() if n not in ("num_splits", "max_seqlen_q",
                                                                                   "max_seqlen_k")})
    check_out_lse(out, lse, want, want_lse, TOL[q.dtype])
    return out, lse


# -- forward, every arch ------------------------------------------------------------------------
# Each arch runs a different mix, so that together they cover both dtypes of q, f32 and q-dtype
# biases, broadcasts over batch / heads / query rows, bshd and bhsd, every mask kind and soft-cap.
TENSOR_CASES = {
    "gfx90a": dict(dtype=np.float16, bias_dtype=np.float32, bias_shape=(1, 4, 37, 75), causal=True),
    "gfx942": dict(dtype=BF16, bias_dtype=BF16, bias_shape=(2, 1, 37, 75), causal="top_left", softcap=5.0),
    "gfx950": dict(dtype=np.float16, bias_dtype=np.float16, bias_shape=(2, 4, 1, 75), window=(20, 7)),
    "gfx1100": dict(dtype=np.float16, bias_dtype=np.float32, bias_shape=(37, 75), layout="bhsd"),
    "gfx1201": dict(dtype=BF16, bias_dtype=np.float32, bias_shape=(2, 4, 37, 75), causal=True, sink=True),
}


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_fwd_bias_tensor_odd_lengths_gqa(arch):
    c = dict(TENSOR_CASES[arch])
    rng = np.random.default_rng(ARCH_NAMES.index(arch))
    dt, layout = c.pop("dtype"), c.pop("layout", "bshd")
    bias = rng.standard_normal(c.pop("bias_shape")).astype(c.pop("bias_dtype"))
    shapes = [(2, 37, 4, 64), (2, 75, 2, 64), (2, 75, 2, 64)]
    q, k, v = (rand(rng, s, dt) for s in shapes)
    if layout == "bhsd":
        q, k, v = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
    if c.pop("sink", False):
        c["sink"] = rng.standard_normal(4).astype(np.float32)
    run_fwd(arch, q, k, v, bias=bias, layout=layout, **c)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_fwd_alibi_group_mode_with_an_empty_sequence(arch):
    rng = np.random.default_rng(10 + ARCH_NAMES.index(arch))
    dt = BF16 if ARCH_NAMES.index(arch) % 2 else np.float16
    cu_q = np.array([0, 33, 33, 103], np.int32)  # the middle sequence has no query
    cu_k = np.array([0, 50, 61, 100], np.int32)
    q, k, v = rand(rng, (103, 6, 48), dt), rand(rng, (100, 2, 48), dt), rand(rng, (100, 2, 48), dt)
    slopes = rng.uniform(0.05, 0.5, (3, 6)).astype(np.float32)  # [batch, Hq]
    mask = [dict(causal=True), dict(causal="top_left", softcap=5.0), dict(window=(40, 3)), dict(), dict()]
    run_fwd(arch, q, k, v, alibi_slopes=slopes, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
            **mask[ARCH_NAMES.index(arch)])


# -- forward, the other paths ---------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_split_kv_and_gqa_packing_with_bias_and_alibi(arch):
    rng = np.random.default_rng(20)
    q, k, v = rand(rng, (2, 5, 8, 64)), rand(rng, (2, 333, 2, 64)), rand(rng, (2, 333, 2, 64))
    bias = rand(rng, (2, 8, 5, 333), np.float32)
    run_fwd(arch, q, k, v, bias=bias, num_splits=3)  # packed GQA rows (5 x 4 per kv head), 3 splits
    run_fwd(arch, q, k, v, alibi_slopes=rng.uniform(0.01, 0.2, 8).astype(np.float32), causal=True, num_splits=2)


def test_bias_group_mode_layout_and_strided_views():
    """Group mode reads [Hq, total_q, K] with K >= the longest key sequence: here a user-strided
    view (every other column of a wider array, K = 61: padded), then rows starting off a 16-byte
    boundary; batch mode with key strides other than 1."""
    rng = np.random.default_rng(21)
    cu_q, cu_k = np.array([0, 9, 9, 40], np.int32), np.array([0, 61, 70, 100], np.int32)
    q, k, v = rand(rng, (40, 2, 32)), rand(rng, (100, 1, 32)), rand(rng, (100, 1, 32))
    wide = rand(rng, (2, 40, 130), np.float32)
    run_fwd("gfx942", q, k, v, bias=wide[:, :, ::2][:, :, :61], cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)
    run_fwd("gfx942", q, k, v, bias=wide[:1, :, 3:67], cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)  # unaligned rows
    # Batch mode: a transposed bias (key stride 20) and one broadcast over the keys (stride 0): the
    # variant for a key stride other than 1.
    q, k, v = rand(rng, (1, 20, 2, 32)), rand(rng, (1, 48, 1, 32)), rand(rng, (1, 48, 1, 32))
    for bias in (np.swapaxes(rand(rng, (1, 2, 48, 20), np.float32), 2, 3), rand(rng, (2, 20, 1), np.float32)):
        run_fwd("gfx942", q, k, v, bias=bias, causal=True)


def test_bias_device_arrays_in_place_and_copied():
    """A DeviceArray bias whose key rows are not a multiple of 8 is read in place when its buffer
    extends 7 keys past its last row, else copied; the outputs stay on the device."""
    dev = EmulatorDevice("gfx1201")
    rng = np.random.default_rng(22)
    q, k, v = rand(rng, (1, 30, 2, 64)), rand(rng, (1, 45, 2, 64)), rand(rng, (1, 45, 2, 64))
    bias = rand(rng, (1, 2, 30, 45), np.float32)
    want, want_lse = ref_fwd(q, k, v, bias=bias)
    qd, kd, vd = (DeviceArray.from_numpy(dev, x) for x in (q, k, v))
    roomy = DeviceArray.from_numpy(dev, np.concatenate([bias.ravel(), np.zeros(8, np.float32)]))
    views = [DeviceArray.from_numpy(dev, bias),  # no room: copied
             DeviceArray(roomy.buffer, bias.shape, bias.dtype, (2 * 30 * 45, 30 * 45, 45, 1), 0)]
    for bd in views:
        out, lse = fmha_fwd(qd, kd, vd, bias=bd, return_lse=True, device=dev)
        assert isinstance(out, DeviceArray)
        check_out_lse(out.numpy(), lse.numpy(), want, want_lse, 4e-3)
    slopes = DeviceArray.from_numpy(dev, np.array([0.3, 0.1], np.float32))
    out = fmha_fwd(qd, kd, vd, alibi_slopes=slopes, device=dev)
    np.testing.assert_allclose(np.asarray(out.numpy(), np.float64),
                               ref_fwd(q, k, v, alibi_slopes=np.array([0.3, 0.1]))[0], atol=4e-3)


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_decode_with_alibi(paged):
    rng = np.random.default_rng(23 + paged)
    b, hq, hk, d, page = 2, 8, 2, 64, 16
    lens = np.array([37, 90], np.int32)
    q = rand(rng, (b, 1, hq, d))
    k_new, v_new = rand(rng, (b, 1, hk, d)), rand(rng, (b, 1, hk, d))
    slopes = rng.uniform(0.01, 0.3, hq).astype(np.float32)
    if paged:
        k_cache, v_cache = rand(rng, (16, page, hk, d)), rand(rng, (16, page, hk, d))
        table = rng.permutation(16)[:12].reshape(2, 6).astype(np.int32)
        kw = dict(block_table=table)
    else:
        k_cache, v_cache = rand(rng, (b, 128, hk, d)), rand(rng, (b, 128, hk, d))
        kw = {}
    k_ref, v_ref = k_cache.copy(), v_cache.copy()
    out, lse = fmha_fwd_kvcache(q, k_cache, v_cache, cache_seqlens=lens, k=k_new, v=v_new, causal=True,
                                alibi_slopes=slopes, return_lse=True, device=EmulatorDevice("gfx942"), **kw)
    want, want_lse = fmha_fwd_kvcache_reference(q, k_ref, v_ref, cache_seqlens=lens, k=k_new, v=v_new, causal=True,
                                                alibi_slopes=slopes, return_lse=True, **kw)
    check_out_lse(out, lse, want, want_lse, 4e-3)


# -- backward -------------------------------------------------------------------------------------
def run_bwd(arch, do, q, k, v, *, deterministic=False, device=None, **kw):
    """The kernels' gradients and the reference's, from the reference forward's out and LSE."""
    want_out, want_lse = ref_fwd(q, k, v, **{n: x for n, x in kw.items() if n != "return_dbias"})
    out, lse = want_out.astype(q.dtype), want_lse.astype(np.float32)
    got = fmha_bwd(do, q, k, v, out, lse, deterministic=deterministic, device=device or EmulatorDevice(arch), **kw)
    ref = fmha_bwd_reference(f64(do), f64(q), f64(k), f64(v),
                             **{n: f64(x) if n in ("bias", "alibi_slopes") else x for n, x in kw.items()})
    return got, ref


BWD_CASES = {  # bias broadcast dims, its dtype (None: q's), mask
    "gfx90a": dict(bias_shape=(1, 4, 45, 70), bias_dtype=np.float32, causal=True, deterministic=True),
    "gfx942": dict(bias_shape=(2, 1, 45, 70), bias_dtype=None, window=(30, 5)),
    "gfx950": dict(bias_shape=(2, 4, 45, 70), bias_dtype=np.float32, causal="top_left", softcap=5.0),
    "gfx1100": dict(bias_shape=(4, 45, 70), bias_dtype=None, causal=True, deterministic=True),
    "gfx1201": dict(bias_shape=(2, 4, 45, 70), bias_dtype=None, sink=True),
}


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_bwd_bias_gradient_summed_over_broadcast_dims(arch):
    c = dict(BWD_CASES[arch])
    rng = np.random.default_rng(30 + ARCH_NAMES.index(arch))
    dt = BF16 if arch in ("gfx942", "gfx1201") else np.float16
    q, k, v, do = rand(rng, (2, 45, 4, 64), dt), rand(rng, (2, 70, 2, 64), dt), rand(rng, (2, 70, 2, 64), dt), \
        rand(rng, (2, 45, 4, 64), dt)
    bias = rng.standard_normal(c.pop("bias_shape")).astype(c.pop("bias_dtype") or dt)
    if c.pop("sink", False):
        c["sink"] = rng.standard_normal(4).astype(np.float32)
    got, ref = run_bwd(arch, do, q, k, v, bias=bias, return_dbias=True, **c)
    dbias = got[-1]
    assert dbias.shape == bias.shape and dbias.dtype == bias.dtype
    names = ("dq", "dk", "dv", "dsink", "dbias") if "sink" in c else ("dq", "dk", "dv", "dbias")
    assert_grads_close(got, ref, dt, names)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_bwd_alibi_group_mode(arch):
    rng = np.random.default_rng(40 + ARCH_NAMES.index(arch))
    cu_q, cu_k = np.array([0, 30, 30, 71], np.int32), np.array([0, 21, 45, 110], np.int32)
    q, do = rand(rng, (71, 4, 32)), rand(rng, (71, 4, 32))
    k, v = rand(rng, (110, 1, 32)), rand(rng, (110, 1, 32))
    slopes = rng.uniform(0.05, 0.5, 4).astype(np.float32)
    got, ref = run_bwd(arch, do, q, k, v, alibi_slopes=slopes, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)
    assert_grads_close(got, ref, np.float16)


def test_bwd_group_mode_dbias_and_determinism():
    """Group mode: dbias of a [1, total_q, K] bias (shared by the heads) with K past the longest
    sequence, bitwise identical across shuffled schedules, with and without deterministic dQ."""
    rng = np.random.default_rng(50)
    cu_q, cu_k = np.array([0, 17, 17, 60], np.int32), np.array([0, 40, 52, 90], np.int32)
    q, do = rand(rng, (60, 2, 64)), rand(rng, (60, 2, 64))
    k, v = rand(rng, (90, 2, 64)), rand(rng, (90, 2, 64))
    bias = rand(rng, (1, 60, 43), np.float32)
    kw = dict(bias=bias, return_dbias=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)
    got, ref = run_bwd("gfx942", do, q, k, v, **kw)
    assert_grads_close(got, ref, np.float16, ("dq", "dk", "dv", "dbias"))
    assert not got[3][:, :, 40:].any()  # no sequence has a key there
    for det in (False, True):
        runs = [run_bwd("gfx942", do, q, k, v, deterministic=det,
                        device=EmulatorDevice("gfx942", schedule="shuffle", seed=s), **kw)[0][3] for s in (1, 2)]
        assert np.array_equal(runs[0].view(np.uint32), runs[1].view(np.uint32))
    plan = fmha_bwd_plan(do, q, k, v, np.zeros_like(q), np.zeros((2, 60), np.float32), device=EmulatorDevice("gfx942"),
                         **kw)
    assert plan.stage_names[-1] == "dbias" and plan.workspace.region("dbias_acc").zero


def test_bwd_dbias_plan_full_f32_bias():
    """A full-shape f32 bias: dS^T goes keys-major to the workspace, the dbias stage writes it
    back (no sum); the workspace needs no zeroing in batch mode without a mask."""
    rng = np.random.default_rng(51)
    q, k, v, do = rand(rng, (1, 20, 2, 32)), rand(rng, (1, 33, 1, 32)), rand(rng, (1, 33, 1, 32)), \
        rand(rng, (1, 20, 2, 32))
    bias = rand(rng, (1, 2, 20, 33), np.float32)
    plan = fmha_bwd_plan(do, q, k, v, do, np.zeros((1, 2, 20), np.float32), bias=bias, return_dbias=True,
                         arch="gfx1201")
    region = plan.workspace.region("dbias_acc")
    assert plan.stage_names[-1] == "dbias" and region.shape == (1, 2, 33, 20) and not region.zero
    got, ref = run_bwd("gfx1201", do, q, k, v, bias=bias, return_dbias=True)
    assert_grads_close(got, ref, np.float16, ("dq", "dk", "dv", "dbias"))


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_bias_over_one_key_and_broadcast_over_keys(arch):
    """A bias whose key dim is 1: with a single key (Sk = 1) the kernels' groups of 8 keys are read
    through a stride-0 view, not past the bias's end; broadcast over 24 keys, the backward runs its
    general-stride variant with the call's contiguous copies, whose head-dim strides are 1."""
    rng = np.random.default_rng(12)
    q, do = rand(rng, (1, 64, 2, 32)), rand(rng, (1, 64, 2, 32))
    for keys in (1, 24):
        k, v = rand(rng, (1, keys, 1, 32)), rand(rng, (1, keys, 1, 32))
        bias = rng.standard_normal((1, 2, 64, 1)).astype(np.float32)
        out = fmha_fwd(q, k, v, bias=bias, arch=arch)
        np.testing.assert_allclose(out.astype(np.float64), ref_fwd(q, k, v, bias=bias)[0], atol=2e-3, rtol=2e-3)
        got, ref = run_bwd(arch, do, q, k, v, bias=bias)
        assert_grads_close(got, ref, np.float16)


# -- bad arguments --------------------------------------------------------------------------------
def _bias(shape, dtype=np.float32):
    return np.zeros(shape, dtype)


FWD_BAD = [
    (dict(bias=_bias((2, 2, 20, 24)), alibi_slopes=np.ones(2, np.float32)), "bias and alibi_slopes: give at most one"),
    (dict(bias=_bias((1, 2, 20, 24), np.float64)),
     "bias: expected dtype float16 .the dtype of q. or float32, got float64"),
    (dict(bias=_bias((1, 2, 20, 24), BF16)), "bias: expected dtype float16 .the dtype of q. or float32, got bfloat16"),
    (dict(bias=_bias((1, 3, 20, 24))), r"bias: expected a shape broadcastable to \[B, Hq, Sq, Sk\] = \[1, 2, 20, 24\], "
                                      r"got \(1, 3, 20, 24\)"),
    (dict(bias=_bias((1, 1, 2, 20, 24))), "bias: expected a shape broadcastable to"),
    (dict(bias=[[0.0]]), "bias: expected a numpy array or DeviceArray, got list"),
    (dict(alibi_slopes=np.ones(3, np.float32)), r"alibi_slopes: expected a float array of shape \(2,\) or \(1, 2\)"),
    (dict(alibi_slopes=np.array([1.0, np.nan])), "alibi_slopes: slope .* is nan"),
    (dict(alibi_slopes=np.ones(2, np.int32)), "alibi_slopes: expected a float array"),
]


@pytest.mark.parametrize("kw, message", FWD_BAD, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(FWD_BAD)])
def test_bad_forward_arguments_are_value_errors(kw, message):
    rng = np.random.default_rng(0)
    q, k, v = rand(rng, (1, 20, 2, 64)), rand(rng, (1, 24, 1, 64)), rand(rng, (1, 24, 1, 64))
    with pytest.raises(ValueError, match=message):
        fmha_fwd(q, k, v, arch="gfx942", **kw)


@pytest.mark.parametrize("keys", [24, 20])  # 20: a padded copy of the bias is read back first
def test_bias_on_another_device_or_freed_is_refused(keys):
    from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
    from tiledsl.device_array import DeviceArray

    rng = np.random.default_rng(0)
    dev, other = EmulatorDevice("gfx942"), EmulatorDevice("gfx90a")
    q, k, v = (DeviceArray.from_numpy(dev, rand(rng, s)) for s in ((1, 20, 2, 64), (1, keys, 1, 64), (1, keys, 1, 64)))
    elsewhere = DeviceArray.from_numpy(other, _bias((1, 2, 20, keys)))
    with pytest.raises(ValueError, match=r"argument 'bias': a DeviceArray of .*gfx90a.*, but the call runs on"):
        fmha_fwd(q, k, v, bias=elsewhere, device=dev)
    freed = DeviceArray.from_numpy(dev, _bias((1, 2, 20, keys)))
    freed.free()
    with pytest.raises(ValueError, match=r"argument 'bias': its DeviceArray was freed"):
        fmha_fwd(q, k, v, bias=freed, device=dev)
    sink = DeviceArray.from_numpy(other, np.zeros(2, np.float32))  # read back to check it: on the call's device too
    with pytest.raises(ValueError, match=r"argument 'sink': a DeviceArray of .*gfx90a"):
        fmha_fwd(q, k, v, sink=sink, device=dev)


def test_bad_group_mode_bias_and_backward_arguments():
    rng = np.random.default_rng(0)
    cu_q, cu_k = np.array([0, 5, 12], np.int32), np.array([0, 9, 20], np.int32)
    q, k, v = rand(rng, (12, 2, 32)), rand(rng, (20, 1, 32)), rand(rng, (20, 1, 32))
    with pytest.raises(ValueError, match=r"bias: expected a shape broadcastable to \[Hq, total_q, >= max seqlen_k\] "
                                         r"= \[2, 12, >= 11\] \(group mode\), got \(2, 12, 10\)"):
        fmha_fwd(q, k, v, bias=_bias((2, 12, 10)), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, arch="gfx942")
    q, k, v = rand(rng, (1, 20, 2, 64)), rand(rng, (1, 24, 1, 64)), rand(rng, (1, 24, 1, 64))
    out, lse = np.zeros_like(q), np.zeros((1, 2, 20), np.float32)
    bad = [
        (dict(return_dbias=True), r"return_dbias: needs a bias tensor \(bias=...\); got none"),
        (dict(return_dbias=True, alibi_slopes=np.ones(2, np.float32)), "ALiBi slopes get no gradient"),
        (dict(return_dbias=1, bias=_bias((1, 2, 20, 24))), "return_dbias: expected a bool, got 1"),
        (dict(return_dbias=True, bias=_bias((1, 2, 1, 24))), r"return_dbias: the bias \(1, 2, 1, 24\) is broadcast "
                                                            "over query or key positions"),
        (dict(bias=_bias((1, 2, 20, 23))), r"bias: expected a shape broadcastable to \[B, Hq, Sq, Sk\]"),
    ]
    for kw, message in bad:
        with pytest.raises(ValueError, match=message):
            fmha_bwd(q, q, k, v, out, lse, arch="gfx942", **kw)
    with pytest.raises(ValueError, match="bias: fmha_fwd_kvcache takes no bias tensor"):
        fmha_fwd_kvcache(q, k, v, cache_seqlens=np.array([4], np.int32), bias=_bias((1, 2, 20, 24)), arch="gfx942")
    dev = EmulatorDevice("gfx942")
    with pytest.raises(ValueError, match="bias: expected a DeviceArray like q, got ndarray"):
        fmha_fwd(*(DeviceArray.from_numpy(dev, x) for x in (q, k, v)), bias=_bias((1, 2, 20, 24)), device=dev)


# -- compile checks -------------------------------------------------------------------------------
# Per arch and head dim, each bias kind with one of the feature mixes of tests/_fmha_util.py (the
# general-stride variant, contiguous head dims; the bias rows 16-byte aligned, as tiledsl.ops pads them).
SPILL_CASES = [(arch, hdim, kind, mix) for arch in ARCH_NAMES for hdim, pairs in (
    (64, (("tensor", ("bf16", False)), ("alibi", ("f16", True)))),
    (128, (("tensor", ("bf16", True)), ("alibi", ("f16", False))))) for kind, mix in pairs]


@pytest.mark.compile
@pytest.mark.parametrize("arch,hdim,kind,mix", SPILL_CASES,
                         ids=[f"{a}-d{h}-{k}-{m[0]}-{'causal' if m[1] else 'nocausal'}" for a, h, k, m in SPILL_CASES])
def test_bias_variants_compile_without_vgpr_spills(arch, hdim, kind, mix):
    from _fmha_util import FEATURES, actual_hdim

    from tiledsl.ops import compile_fmha_fwd
    from tiledsl.reference import fmha_mask_params

    f = FEATURES[mix]
    d = actual_hdim(hdim, *mix)
    kernel = compile_fmha_fwd(arch, dtype=mix[0], hdim_q=d, hdim_v=d,
                              mask=fmha_mask_params(f.get("causal", False), f.get("window", (-1, -1))),
                              varlen=f.get("varlen", False), lse=f.get("lse", False), sink=f.get("sink", False),
                              softcap=f.get("softcap", 0.0), contiguous=True,
                              aligned=("bias",) if kind == "tensor" else (), bias=kind, bias_dtype="f32")
    m = kernel.manifest
    figures = (f"{m['vgpr_count']} VGPRs, spills {m['vgpr_spill_count']} VGPR / {m['sgpr_spill_count']} SGPR "
               f"(SGPR spills go to VGPR lanes, not memory)")
    assert m["vgpr_spill_count"] == 0 and m["private_segment_size"] == 0, figures


# -- registry -------------------------------------------------------------------------------------
def test_registry_bias_variants_are_what_the_calls_load(tmp_path, monkeypatch):
    """`tiledsl prebuild` of bias variants builds every kernel the calls then load (a bias of q's
    dtype or f32; dbias direct, or summed over the batch), and variant_of names them."""
    from tiledsl import driver
    from tiledsl.prebuild import prebuild_variants
    from tiledsl.registry import Signature, Variant, parse_variant_key, variant_of

    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path))
    sig = dict(hdim_q=32, hdim_v=32, mask="causal")
    wanted = [Variant("gfx1201", Signature("fmha_fwd", lse=True, bias="tensor", **sig)),
              Variant("gfx1201", Signature("fmha_bwd", bias="tensor", **sig)),
              Variant("gfx1201", Signature("fmha_fwd", bias="alibi", **sig))]
    assert [parse_variant_key(v.key()) for v in wanted] == wanted
    assert wanted[2].key() == "gfx1201/fmha_fwd-f16-batch-d32-causal-bias_alibi"
    results = prebuild_variants(wanted, jobs=2, progress=False)
    assert not any(r.error for r in results), [r.error for r in results]

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled at run time although the variant was prebuilt")

    monkeypatch.setattr(driver, "run_stages", no_compiling)
    rng = np.random.default_rng(60)
    q, k, v, do = (rand(rng, (2, 40, 2, 32)) for _ in range(4))
    dev = EmulatorDevice("gfx1201")
    for bias in (rand(rng, (1, 2, 40, 40)), rand(rng, (2, 2, 40, 40), np.float32)):
        out, lse = fmha_fwd(q, k, v, bias=bias, causal=True, return_lse=True, device=dev)
        got = fmha_bwd(do, q, k, v, out, lse, bias=bias, causal=True, return_dbias=True, device=dev)
        ref = fmha_bwd_reference(*(f64(x) for x in (do, q, k, v)), bias=f64(bias), causal=True, return_dbias=True)
        assert_grads_close(got, ref, np.float16, ("dq", "dk", "dv", "dbias"))
    fmha_fwd(q, k, v, alibi_slopes=np.array([0.5, 0.25], np.float32), causal=True, device=dev)

    from tiledsl.fmha_bwd import BwdShape
    from tiledsl.fmha_splitkv import SplitShape
    from tiledsl.reference import fmha_mask_params

    mask = fmha_mask_params(True)
    bwd = BwdShape(arch="gfx1201", dtype="f16", hdim_q=32, hdim_v=32, hq=2, hk=2, mask=mask, softcap=False, sink=False,
                   deterministic=False, varlen=False, b=2, sq=40, seqlens_q=(40, 40), seqlens_k=(40, 40),
                   contiguous=True, bias="tensor", dbias="reduce", dbias_sum=(0,), dbias_cols=40)
    fwd = SplitShape(arch="gfx1201", dtype="f16", hdim_q=32, hdim_v=32, mask=mask, varlen=False, lse=False, sink=False,
                     softcap=False, contiguous=True, aligned=(), num_splits=1, b=2, hq=2, sq=40, bias="alibi")
    assert variant_of(bwd) == wanted[1] and variant_of(fwd) == wanted[2]


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("hdim", [64, 128])
def test_bwd_bias_variants_compile_without_vgpr_spills(arch, hdim):
    """dq_dk_dv with a bias tensor and dbias, and the most register-hungry features (bf16, causal,
    group mode, soft-cap, deterministic); the rows of the tile table that admit spills (RDNA at
    hdim 128, like the plain backward) are the only exception."""
    from tiledsl.fmha_bwd import bwd_config, plan_from_sizes
    from tiledsl.reference import fmha_mask_params

    plan = plan_from_sizes(arch, dtype="bf16", hdim_q=hdim, hdim_v=hdim, hq=4, hk=1, seqlens_q=(100, 60),
                           seqlens_k=(90, 70), varlen=True, mask=fmha_mask_params(True), softcap=True,
                           deterministic=True, bias="tensor", bias_dtype="f32", dbias="reduce", dbias_sum=(1,))
    assert plan.stage_names == ["dot_do_o", "dq_dk_dv", "convert_dq", "dbias"]
    m = plan.stages[1].kernel.manifest
    assert m["vgpr_spill_count"] == 0 or bwd_config(arch, hdim, hdim, dbias=True).spills, \
        f"{m['vgpr_count']} VGPRs, spills {m['vgpr_spill_count']} VGPR / {m['sgpr_spill_count']} SGPR"
    for stage in plan.stages[2:]:
        assert stage.kernel.manifest["vgpr_spill_count"] == 0, stage.name
    # A bias without its gradient runs the plain or bias row (gfx90a's plain row spilled 75-81 VGPRs).
    plan = plan_from_sizes(arch, dtype="f16", hdim_q=hdim, hdim_v=hdim, hq=4, hk=4, seqlens_q=(256,),
                           seqlens_k=(256,), varlen=False, mask=fmha_mask_params(True), softcap=True,
                           bias="tensor", bias_dtype="f32")
    m = plan.stages[1].kernel.manifest
    assert m["vgpr_spill_count"] == 0 or bwd_config(arch, hdim, hdim, bias=True).spills, \
        f"{m['vgpr_count']} VGPRs, spills {m['vgpr_spill_count']} VGPR / {m['sgpr_spill_count']} SGPR"
