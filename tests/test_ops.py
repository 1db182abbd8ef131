"""tiledsl.ops.fmha_fwd: argument validation (before any launch) and end-to-end runs on the
emulator through the public API, against the numpy reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.ops import fmha_fwd
from tiledsl.reference import fmha_fwd_reference

pytestmark = pytest.mark.emulator


def qkv(b=1, sq=20, sk=24, hq=2, hk=1, d=64, dv=None, dtype=np.float16, seed=0):
    rng = np.random.default_rng(seed)
    dv = d if dv is None else dv
    return (rng.standard_normal((b, sq, hq, d)).astype(dtype),
            rng.standard_normal((b, sk, hk, d)).astype(dtype),
            rng.standard_normal((b, sk, hk, dv)).astype(dtype))


BAD = [
    (lambda q, k, v: dict(q=q.astype(np.float32)),
     r"q: expected dtype float16, bfloat16 or float8_e4m3 \(fp8\), got float32"),
    (lambda q, k, v: dict(k=k.astype(ml_dtypes.bfloat16)),
     r"k: expected dtype float16 \(the dtype of q\), got bfloat16"),
    (lambda q, k, v: dict(q=q[0]), r"q: expected 4 dims \[B, S, H, D\], got shape"),
    (lambda q, k, v: dict(k=np.zeros((1, 24, 1, 32), np.float16)), "k: head dim 32 differs from q's head dim 64"),
    (lambda q, k, v: dict(q=np.zeros((1, 20, 3, 64), np.float16), k=np.zeros((1, 24, 2, 64), np.float16),
                          v=np.zeros((1, 24, 2, 64), np.float16)),
     r"k: the number of query heads \(3\) must be a multiple of key/value heads, got 2"),
    (lambda q, k, v: dict(q=np.zeros((1, 4, 2, 300), np.float16), k=np.zeros((1, 4, 1, 300), np.float16),
                          v=np.zeros((1, 4, 1, 300), np.float16)), "q: head dim 300 is not supported"),
    (lambda q, k, v: dict(v=np.zeros((1, 23, 1, 64), np.float16)), "v: expected the batch, sequence and head"),
    (lambda q, k, v: dict(window=(-2, 0)), "window: window sizes must be >= -1"),
    (lambda q, k, v: dict(window=(1.5, 0)), "window: expected a pair of ints"),
    (lambda q, k, v: dict(window=(True, 0)), r"window: expected a pair of ints \(left, right\), got \(True, 0\)"),
    (lambda q, k, v: dict(window=(0, 2**33)), r"window: expected sizes below 2\*\*31 \(-1 for unlimited\)"),
    (lambda q, k, v: dict(causal="diagonal"), "causal: expected a bool, .top_left. or .bottom_right., got .diagonal."),
    (lambda q, k, v: dict(softcap=-1.0), "softcap: expected a finite number >= 0"),
    (lambda q, k, v: dict(scale=float("nan")), "scale: expected a finite number"),
    (lambda q, k, v: dict(scale=1e39), "scale: expected a finite number within f32 range, got 1e"),
    (lambda q, k, v: dict(scale=True), "scale: expected a finite number within f32 range, got True"),
    (lambda q, k, v: dict(softcap=True), "softcap: expected a finite number >= 0 within f32 range"),
    (lambda q, k, v: dict(softcap=1e6), "softcap: expected at most 1000 .0 = off., got 1000000.0"),
    (lambda q, k, v: dict(causal=1.0), "causal: expected a bool, 'top_left' or 'bottom_right', got 1.0"),
    (lambda q, k, v: dict(return_lse="yes"), "return_lse: expected a bool, got 'yes'"),
    (lambda q, k, v: dict(q=np.broadcast_to(q[:, :1], (1, 2**30, 2, 64))),
     r"q: 1 x 1073741824 x 2 x 64 elements \(batch x sequence x heads x head dim\) exceed the kernels' i32"),
    (lambda q, k, v: dict(sink=np.array([0.0, np.inf])), "sink: head 1 has logit inf"),
    (lambda q, k, v: dict(sink=np.array([1e300, 0.0])), r"sink: head 0 has logit 1e\+300 \(as f32: inf\)"),
    (lambda q, k, v: dict(sink=np.array([np.nan, 0.0])), "sink: head 0 has logit nan"),
    (lambda q, k, v: dict(arch="gfx800"), "arch: expected one of gfx90a, gfx942, gfx950, gfx1100, gfx1201, got"),
    (lambda q, k, v: dict(sink=np.zeros(3, np.float32)), r"sink: expected a float array of shape \(2,\)"),
    (lambda q, k, v: dict(layout="sbhd"), "layout: expected 'bshd' or 'bhsd'"),
    (lambda q, k, v: dict(q=np.zeros((1, 20, 0, 64), np.float16), k=np.zeros((1, 24, 0, 64), np.float16),
                          v=np.zeros((1, 24, 0, 64), np.float16)), "k: expected at least one key/value head, got 0"),
    (lambda q, k, v: dict(num_splits=np.int64(-1)), r"num_splits: expected an int >= 0"),
    (lambda q, k, v: dict(arch=None), "arch: expected one of"),
    (lambda q, k, v: dict(q=q[0], k=k[0], v=v[0], cu_seqlens_q=np.array([0, 5, 3], np.int32),
                          cu_seqlens_k=np.array([0, 5, 9], np.int32)), r"cu_seqlens_q: must be non-decreasing"),
    (lambda q, k, v: dict(q=q[0], k=k[0], v=v[0], cu_seqlens_q=np.array([0, 5, 30], np.int32),
                          cu_seqlens_k=np.array([0, 5, 9], np.int32)), "cu_seqlens_q: the last offset 30 is past"),
    (lambda q, k, v: dict(q=q[0], k=k[0], v=v[0], cu_seqlens_q=np.array([1, 5], np.int32),
                          cu_seqlens_k=np.array([0, 5], np.int32)), "cu_seqlens_q: must start at 0"),
    (lambda q, k, v: dict(q=q[0], k=k[0], v=v[0], cu_seqlens_q=np.array([0, 5], np.int32)),
     "group mode needs both"),
    (lambda q, k, v: dict(q=q[0], k=k[0], v=v[0], cu_seqlens_q=np.array([0, 5, 9], np.int32),
                          cu_seqlens_k=np.array([0, 5, 9], np.int32), max_seqlen_q=2),
     r"max_seqlen_q: expected an int >= the longest sequence \(5\), got 2"),
]


def test_max_seqlen_past_the_rows_is_the_rows():
    """A max_seqlen bound larger than the tensor (a model's context length, or 2**31 - 1) sizes
    the grid by the rows there are: the same result, where 2**31 - 1 could not launch."""
    q, k, v = qkv(sq=20, sk=24)
    cu = dict(cu_seqlens_q=np.array([0, 5, 20], np.int32), cu_seqlens_k=np.array([0, 9, 24], np.int32))
    dev = EmulatorDevice("gfx942")
    want = fmha_fwd(q[0], k[0], v[0], causal=True, device=dev, **cu)
    got = fmha_fwd(q[0], k[0], v[0], causal=True, device=dev, max_seqlen_q=2**31 - 1, max_seqlen_k=4096, **cu)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("change,message", BAD, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD)])
def test_bad_arguments_are_value_errors(change, message: str) -> None:
    q, k, v = qkv()
    kwargs = dict(q=q, k=k, v=v, arch="gfx942")
    kwargs.update(change(q, k, v))
    with pytest.raises(ValueError, match=message):
        fmha_fwd(kwargs.pop("q"), kwargs.pop("k"), kwargs.pop("v"), **kwargs)


NUM_SPLITS_SIZES = dict(batch=1, nhead_q=4, max_seqlen_q=1, max_seqlen_k=4096, hdim_q=128)
BAD_NUM_SPLITS = [
    (dict(arch="gfx9"), "arch: expected one of gfx90a, gfx942, gfx950, gfx1100, gfx1201, got 'gfx9'"),
    (dict(batch=-1), "batch: expected an int >= 0, got -1"),
    (dict(max_seqlen_k="4096"), "max_seqlen_k: expected an int >= 0, got '4096'"),
    (dict(hdim_q=True), "hdim_q: expected an int >= 0, got True"),
    (dict(hdim_v=512), "hdim_v: head dim 512 is not supported: expected 1..256"),
    (dict(nhead_k=3), r"nhead_k: expected a divisor of nhead_q \(4\), got 3"),
    (dict(window=5), "window: expected a pair of ints"),
    (dict(causal="yes"), "causal: expected a bool"),
]


@pytest.mark.parametrize("change,message", BAD_NUM_SPLITS, ids=[m.split(":")[0] for _, m in BAD_NUM_SPLITS])
def test_num_splits_bad_arguments_are_value_errors(change, message: str) -> None:
    from tiledsl.ops import fmha_num_splits

    kwargs = {"arch": "gfx942", **NUM_SPLITS_SIZES, **change}
    with pytest.raises(ValueError, match=message):
        fmha_num_splits(kwargs.pop("arch"), **kwargs)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_api_bhsd_gqa_lse(arch: str) -> None:
    """bhsd views, GQA, LSE, a sink and a bottom-right causal mask with seqlen_q != seqlen_k."""
    q, k, v = qkv(sq=20, sk=37, hq=4, hk=2, d=64, dtype=np.float16, seed=1)
    qb, kb, vb = (x.transpose(0, 2, 1, 3) for x in (q, k, v))  # [B, H, S, D] views
    sink = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    out, lse = fmha_fwd(qb, kb, vb, causal=True, sink=sink, return_lse=True, layout="bhsd",
                        device=EmulatorDevice(arch))
    ref, ref_lse = fmha_fwd_reference(qb, kb, vb, causal=True, sink=sink, return_lse=True, layout="bhsd")
    assert out.shape == ref.shape and out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_api_scale_of_any_sign(arch: str) -> None:
    """Plain logits leave the scale to exp2's argument (one fma per element, the row max taken
    unscaled), which needs a positive scale: a negative one negates Q, a zero one runs as the least
    normal f32. Both give the reference's softmax (for 0, the mean of the visible values)."""
    q, k, v = qkv(sq=33, sk=45, hq=2, hk=1, d=32, seed=5)  # the d32-causal variant of test_api_head_dims
    dev = EmulatorDevice(arch)
    for scale in (-0.4, 0.0):
        out = fmha_fwd(q, k, v, causal=True, scale=scale, device=dev)
        ref = fmha_fwd_reference(q, k, v, causal=True, scale=scale)
        np.testing.assert_allclose(out.astype(np.float64), ref, atol=4e-3, rtol=4e-3, err_msg=f"scale {scale}")


@pytest.mark.parametrize("arch", ["gfx90a", "gfx1201"])
def test_api_varlen_window_softcap_bf16(arch: str) -> None:
    rng = np.random.default_rng(2)
    cu_q, cu_k = np.array([0, 7, 7, 30], np.int32), np.array([0, 12, 20, 41], np.int32)
    q = rng.standard_normal((30, 2, 80)).astype(ml_dtypes.bfloat16)  # head dim 80 runs padded at 128
    k = rng.standard_normal((41, 1, 80)).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal((41, 1, 80)).astype(ml_dtypes.bfloat16)
    out = fmha_fwd(q, k, v, window=(5, 3), softcap=20.0, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                   device=EmulatorDevice(arch))
    ref = fmha_fwd_reference(q, k, v, window=(5, 3), softcap=20.0, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=2e-2, rtol=2e-2)


def test_api_device_arrays() -> None:
    """Inputs already on the device are used in place and the outputs stay there."""
    from tiledsl.device_array import DeviceArray

    dev = EmulatorDevice("gfx942")
    q, k, v = qkv(sq=33, sk=40, hq=2, hk=2, d=64, seed=3)
    dq, dk, dv = (DeviceArray.from_numpy(dev, x) for x in (q, k, v))
    out, lse = fmha_fwd(dq, dk, dv, return_lse=True)
    assert isinstance(out, DeviceArray) and isinstance(lse, DeviceArray)
    ref, ref_lse = fmha_fwd_reference(q, k, v, return_lse=True)
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(lse.numpy(), ref_lse, atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match="k: expected a DeviceArray like q, got ndarray"):
        fmha_fwd(dq, k, dv)


HEAD_DIMS = [(32, 32, np.float16, True), (192, 128, ml_dtypes.bfloat16, False), (256, 256, np.float16, True)]


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("d,dv,dtype,causal", HEAD_DIMS, ids=["d32-causal", "d192-dv128", "d256-causal"])
def test_api_head_dims(arch: str, d: int, dv: int, dtype: type, causal: bool) -> None:
    """The head-dim rows the feature tests do not reach (those run 64 and 128, padded 48 and 96):
    32, 192 with a 128 value head dim (padded to 256/128) and 256, through the public API."""
    q, k, v = qkv(sq=33, sk=45, hq=2, hk=1, d=d, dv=dv, dtype=dtype, seed=d)
    out = fmha_fwd(q, k, v, causal=causal, device=EmulatorDevice(arch))
    ref = fmha_fwd_reference(q, k, v, causal=causal)
    assert out.shape == (1, 33, 2, dv)
    tol = 4e-3 if dtype == np.float16 else 2e-2
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=tol, rtol=tol)


def test_numpy_views_scalars_and_small_device_arrays_are_taken() -> None:
    """What a caller has at hand is accepted as it is: reversed numpy views (copied: numpy inputs
    are copied to the device anyway), numpy ints and bools for counts and flags, and DeviceArrays
    for the small arguments the host reads (sink, cu_seqlens): the same results as the plain
    call. Freed ones and non-finite slopes on the device are errors naming the argument."""
    from tiledsl.device_array import DeviceArray

    dev = EmulatorDevice("gfx942")
    q, k, v = qkv(b=2, sq=20, sk=24, seed=11)
    sink = np.array([0.25, -1.0], np.float32)
    want = fmha_fwd(q, k, v, causal=True, sink=sink, device=dev)
    got = fmha_fwd(q[::-1].copy()[::-1], k[:, ::-1].copy()[:, ::-1], v, causal=True, device=dev,
                   sink=DeviceArray.from_numpy(dev, sink), num_splits=np.int64(1))
    np.testing.assert_array_equal(got, want)
    bhsd = fmha_fwd(*(x.transpose(0, 2, 1, 3)[:, :, ::-1].copy()[:, :, ::-1] for x in (q, k, v)), layout="bhsd",
                    causal=True, sink=sink, device=dev)
    np.testing.assert_array_equal(bhsd.transpose(0, 2, 1, 3), want)
    cu = np.array([0, 9, 20], np.int32)
    packed = dict(cu_seqlens_q=cu, cu_seqlens_k=np.array([0, 11, 24], np.int32))
    plain = fmha_fwd(q[0], k[0], v[0], device=dev, **packed)
    on_dev = {name: DeviceArray.from_numpy(dev, x) for name, x in packed.items()}
    np.testing.assert_array_equal(fmha_fwd(q[0][::-1].copy()[::-1], k[0], v[0], device=dev, **on_dev), plain)
    on_dev["cu_seqlens_k"].free()
    with pytest.raises(ValueError, match="cu_seqlens_k: its DeviceArray was freed"):
        fmha_fwd(q[0], k[0], v[0], device=dev, **on_dev)
    slopes = DeviceArray.from_numpy(dev, np.array([0.5, np.nan], np.float32))
    dq, dk, dv = (DeviceArray.from_numpy(dev, x) for x in (q, k, v))
    with pytest.raises(ValueError, match="alibi_slopes: slope 1 is nan as f32; expected finite slopes"):
        fmha_fwd(dq, dk, dv, alibi_slopes=slopes)
    keep = fmha_fwd(q, k, v, dropout_p=0.5, seed=3, return_dropout_mask=np.True_, device=dev)[1]
    assert keep.dtype == np.bool_ and keep.any() and not keep.all()


def test_rows_with_no_key_are_0_whatever_the_masked_keys_hold() -> None:
    """Causal with more queries than keys: the first rows see no key, and give 0 (LSE -inf) even
    where a key they cannot see holds NaN (0 * NaN would be NaN); the other rows match the
    reference, NaN where they see it."""
    q, k, v = qkv(sq=16, sk=8, hq=1, hk=1, d=64, seed=5)
    v[0, 7, 0, 3] = np.nan
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice("gfx942"))
    ref = fmha_fwd_reference(q, k, v, causal=True)
    assert np.isneginf(lse[0, 0, :8]).all() and not out[0, :8].any()
    np.testing.assert_array_equal(np.isnan(out[0, 8:]), np.isnan(ref[0, 8:]))


def test_prebuilt_variants_load_without_compiling(tmp_path, monkeypatch, capsys) -> None:
    """`tiledsl prebuild fmha_fwd` fills a cache; fmha_fwd pointed at it loads, never compiles."""
    from tiledsl import driver
    from tiledsl.cli import main

    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path))  # restored afterwards (prebuild sets it for its builders)
    status = main(["prebuild", "fmha_fwd", "--arch", "gfx942", "--dtype", "f16", "--hdim", "64",
                   "--mask", "causal", "--with", "lse", "--cache-dir", str(tmp_path)])
    assert status == 0, capsys.readouterr().err
    assert "2 variants in" in capsys.readouterr().out

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled at run time although the variant was prebuilt")

    monkeypatch.setattr(driver, "run_stages", no_compiling)
    q, k, v = qkv(sq=20, sk=30, d=64, seed=3)
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice("gfx942"))
    ref, ref_lse = fmha_fwd_reference(q, k, v, causal=True, return_lse=True)
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=4e-3, rtol=4e-3)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)
    with pytest.raises(AssertionError, match="prebuilt"):  # a variant not prebuilt would compile
        fmha_fwd(q, k, v, device=EmulatorDevice("gfx942"))


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_api_any_strides(arch: str) -> None:
    """Strided head dims (q[..., ::2]), a Fortran-ordered k and a -inf sink (a head without a sink)
    run the general-stride variants and match the reference (README: any strides). Under the mask
    gfx1201's variant spilled 3 registers and was refused: general-stride variants accept spills."""
    rng = np.random.default_rng(7)
    wide = rng.standard_normal((1, 21, 2, 128)).astype(np.float16)
    q = wide[..., ::2]
    k = np.asfortranarray(rng.standard_normal((1, 26, 1, 64)).astype(np.float16))
    v = rng.standard_normal((1, 26, 1, 64)).astype(np.float16)
    sink = np.array([-np.inf, 0.5], np.float32)
    out = fmha_fwd(q, k, v, causal=True, sink=sink, device=EmulatorDevice(arch))
    ref = fmha_fwd_reference(q, k, v, causal=True, sink=sink)
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=2e-3, rtol=2e-3)


def test_calls_past_the_buffer_reach_compile_without_buffer_accesses() -> None:
    """A tensor spanning more than 2 GiB (a large KV cache, say) makes the call's plan compile
    every stage with 64-bit global addresses: the launcher would refuse it to buffer accesses."""
    import dataclasses

    from tiledsl.fmha_splitkv import SplitShape, attention_stages
    from tiledsl.ops import spans_large
    from tiledsl.reference import fmha_mask_params

    base = np.zeros(8, np.float16)
    huge = np.lib.stride_tricks.as_strided(base, shape=(1, 2, 1, 64), strides=(0, 2**31, 128, 2))  # 2^31 + 128 bytes
    assert spans_large(huge) and not spans_large(base, np.zeros((64, 1024, 8, 128), np.float16)[:, :, :, :80])
    assert not spans_large(np.lib.stride_tricks.as_strided(base, shape=(1, 2, 1, 64), strides=(0, 2**31 - 128, 128, 2)))
    shape = SplitShape(arch="gfx90a", dtype="f16", hdim_q=80, hdim_v=80, mask=fmha_mask_params(True), varlen=False,
                       lse=False, sink=False, softcap=False, contiguous=True, aligned=("k", "o", "q", "v"),
                       num_splits=1, b=1, hq=2, sq=64)

    def buffered(s: SplitShape) -> set[str]:
        (stage,) = attention_stages(s)
        return {t["name"] for t in stage.kernel.manifest["tensors"] if t["buffer"]}

    assert {"k", "v"} <= buffered(shape)  # the padded head dim's masked K/V loads
    assert buffered(dataclasses.replace(shape, large=True)) == set()
