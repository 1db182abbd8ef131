"""Code our compiler did not write: Triton's tutorial kernels (tests/third_party/kernels.py),
compiled by Triton for every arch (tests/third_party/regenerate.py), run on the emulator and
compared with numpy. Each case is checked independently (the backward gets its statistics from
numpy, not from the forward kernel), so a failure names one kernel on one arch."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

pytestmark = pytest.mark.emulator

CORPUS = Path(__file__).resolve().parent / "third_party"
CORE = ("vector_add", "softmax", "layer_norm_fwd", "layer_norm_bwd_dx", "layer_norm_bwd_dwdb", "matmul",
        "attn_fwd", "attn_bwd_preprocess", "attn_bwd", "math_f32", "int_ops", "conversions", "scan_sort",
        "atomics", "dot_bf16", "dot_i8", "dot_f32", "rand", "math_f64", "math_16bit", "atomics_more",
        "scan_custom", "gather_wide", "math_special", "dot_f16_acc", "reshape_ops")
# Variants on the archs where they compile to something else (regenerate.py VARIANTS): Triton's
# asynchronous copies (global/buffer loads straight into LDS) on gfx942/gfx950, an fp8 matmul on
# gfx950 (ds_read_b64_tr_b8), TF32 (refused: check_refused) and FNUZ fp8 dots on gfx942, an OCP
# fp8 WMMA on gfx1201.
EXTRA = {"gfx942": ("matmul_async_buffer", "matmul_async_global", "dot_tf32", "dot_fp8_fnuz", "fp8_casts_fnuz",
                    "fp8_casts_bf8_fnuz"),
         "gfx950": ("matmul_async_buffer", "matmul_async_global", "matmul_fp8", "dot_scaled_fp4",
                    "dot_scaled_fp8_fp4", "dot_scaled_bf8", "fp8_casts_e4m3", "fp8_casts_e5m2"),
         "gfx1201": ("dot_fp8", "fp8_casts_e4m3", "fp8_casts_e5m2")}
PAIRS = [(arch, case) for arch in ARCH_NAMES for case in CORE + EXTRA.get(arch, ())]
F16, F32 = np.float16, np.float32
LOG2E = 1.4426950408889634


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_corpus_is_complete(arch):
    """Every case was compiled for every arch (regenerate.py writes them all)."""
    want = set(CORE + EXTRA.get(arch, ()))
    assert {p.stem for p in (CORPUS / arch).glob("*.hsaco")} == want
    assert {p.stem for p in (CORPUS / arch).glob("*.json")} == want


def run_case(arch: str, case: str, arrays: dict[str, np.ndarray], supported: bool = True) -> dict[str, np.ndarray]:
    """Launch one corpus kernel with `arrays` as its pointer arguments (by name) and the scalar
    values recorded at compile time; returns every array as it is after the launch. supported:
    first check that the emulator models every instruction of the kernel."""
    meta = json.loads((CORPUS / arch / f"{case}.json").read_text())
    dev = EmulatorDevice(arch)
    kern = dev.kernel((CORPUS / arch / f"{case}.hsaco").read_bytes(), meta["kernel"])
    if supported:
        assert dev.unsupported(kern) == []
    bufs = {name: dev.to_device(np.ascontiguousarray(a), name) for name, a in arrays.items()}
    assert set(bufs) == set(meta["pointers"])
    values = [bufs[n].addr if n in bufs else meta["values"][n] for n in meta["args"]]
    # Triton appends its global and profile scratch pointers; these kernels use neither.
    args = [a for a in kern.meta[".args"] if not a.get(".value_kind", "").startswith("hidden_")]
    scratch = dev.alloc(max(64, meta["global_scratch_size"] * int(np.prod(meta["grid"]))), "scratch")
    values += [scratch.addr] * (len(args) - len(values))
    ka = bytearray(args[-1][".offset"] + args[-1][".size"])
    for arg, value in zip(args, values, strict=True):
        fmt = "<Q" if arg[".size"] == 8 else "<f" if isinstance(value, float) else "<i"
        struct.pack_into(fmt, ka, arg[".offset"], value)
    dev.launch(kern, tuple(meta["grid"]), tuple(meta["block"]), bytes(ka), dynamic_lds=meta["shared"])
    return {n: dev.from_device(b, arrays[n].dtype, arrays[n].shape) for n, b in bufs.items()}


def _rng(case: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, case)))  # a fixed seed per case


def check_vector_add(arch, case):
    rng = _rng(case)
    x, y = rng.standard_normal(1000, F32), rng.standard_normal(1000, F32)
    out = run_case(arch, case, {"x_ptr": x, "y_ptr": y, "out_ptr": np.zeros(1000, F32)})["out_ptr"]
    np.testing.assert_array_equal(out, x + y)


def check_softmax(arch, case):
    rng = _rng(case)
    x = (rng.standard_normal((48, 128)) * 3).astype(F32)
    out = run_case(arch, case, {"in_ptr": x, "out_ptr": np.full((48, 128), 7.0, F32)})["out_ptr"]
    e = np.exp(x[:, :100].astype(np.float64) - x[:, :100].max(1, keepdims=True))
    np.testing.assert_allclose(out[:, :100], e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-9)
    np.testing.assert_array_equal(out[:, 100:], 7.0)  # masked columns untouched


def _layer_norm_inputs(case):
    rng = _rng(case)
    x = np.zeros((32, 208), F16)
    x[:, :200] = (rng.standard_normal((32, 200)) * 2 + 0.5).astype(F16)
    w = (1 + 0.1 * rng.standard_normal(200)).astype(F16)
    b = (0.1 * rng.standard_normal(200)).astype(F16)
    return rng, x, w, b


def _stats(x):
    xf = x[:, :200].astype(np.float64)
    mean = xf.mean(1)
    return xf, mean, 1 / np.sqrt(((xf - mean[:, None]) ** 2).mean(1) + 1e-5)


def check_layer_norm_fwd(arch, case):
    _, x, w, b = _layer_norm_inputs(case)
    got = run_case(arch, case, {"X": x, "Y": np.zeros_like(x), "W": w, "B": b, "Mean": np.zeros(32, F32),
                                "Rstd": np.zeros(32, F32)})
    xf, mean, rstd = _stats(x)
    np.testing.assert_allclose(got["Mean"], mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["Rstd"], rstd, rtol=1e-5)
    y = (xf - mean[:, None]) * rstd[:, None] * w.astype(np.float64) + b.astype(np.float64)
    np.testing.assert_allclose(got["Y"][:, :200].astype(F32), y, rtol=2e-3, atol=2e-3)  # one f16 rounding


def check_layer_norm_bwd_dx(arch, case):
    rng, x, w, _ = _layer_norm_inputs(case)
    dy = np.zeros_like(x)
    dy[:, :200] = rng.standard_normal((32, 200)).astype(F16)
    xf, mean, rstd = _stats(x)
    got = run_case(arch, case, {"DX": np.zeros_like(x), "DY": dy, "DW": np.zeros((8, 200), F16),
                                "DB": np.zeros((8, 200), F16), "X": x, "W": w, "Mean": mean.astype(F32),
                                "Rstd": rstd.astype(F32), "Lock": np.zeros(16, np.int32)})
    xhat = (xf - mean[:, None]) * rstd[:, None]
    wdy = w.astype(np.float64) * dy[:, :200]
    c1, c2 = (xhat * wdy).mean(1, keepdims=True), wdy.mean(1, keepdims=True)
    np.testing.assert_allclose(got["DX"][:, :200].astype(F32), (wdy - (xhat * c1 + c2)) * rstd[:, None],
                               rtol=2e-3, atol=2e-3)
    # Rows g, g + 8, ... add into slot g under the lock, each partial rounded to f16, then the sum.
    # The lock admits the rows in whatever order they arrive (on a GPU as in lockstep), so the
    # reference adds them in launch order and allows for the roundings falling otherwise.
    dw, db = np.zeros((8, 200), F16), np.zeros((8, 200), F16)
    for row in range(32):
        g = row % 8
        pdw, pdb = (dy[row, :200] * xhat[row]).astype(F16), dy[row, :200]
        dw[g], db[g] = (pdw, pdb) if row < 8 else ((pdw + dw[g]).astype(F16), (pdb + db[g]).astype(F16))
    # Up to four f16 roundings per slot, each a half-ulp (2**-11) that may fall either way.
    np.testing.assert_allclose(got["DW"].astype(F32), dw.astype(F32), rtol=4e-3, atol=4e-3)
    np.testing.assert_allclose(got["DB"].astype(F32), db.astype(F32), rtol=4e-3, atol=4e-3)
    np.testing.assert_array_equal(got["Lock"], [0] * 8 + [1] * 8)  # locks released, every slot written


def check_layer_norm_bwd_dwdb(arch, case):
    rng = _rng(case)
    dw, db = (rng.standard_normal((8, 200)).astype(F16) for _ in range(2))
    got = run_case(arch, case, {"DW": dw, "DB": db, "FINAL_DW": np.zeros(200, F16), "FINAL_DB": np.zeros(200, F16)})
    np.testing.assert_allclose(got["FINAL_DW"].astype(F32), dw.astype(F32).sum(0), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got["FINAL_DB"].astype(F32), db.astype(F32).sum(0), rtol=2e-3, atol=2e-3)


def check_matmul(arch, case):
    rng = _rng("matmul")
    a, b = rng.standard_normal((96, 128)).astype(F16), rng.standard_normal((128, 160)).astype(F16)
    got = run_case(arch, case, {"A": a, "B": b, "C": np.zeros((96, 160), F16)})["C"]
    np.testing.assert_allclose(got.astype(F32), a.astype(F32) @ b.astype(F32), rtol=1e-3, atol=1e-3)


def check_matmul_fp8(arch, case):
    import ml_dtypes

    rng = _rng(case)
    e4m3 = ml_dtypes.float8_e4m3fn  # gfx950's fp8 is OCP e4m3 (Triton's fp8e4nv)
    a, b = rng.standard_normal((96, 128)).astype(e4m3), rng.standard_normal((128, 160)).astype(e4m3)
    got = run_case(arch, case, {"A": a.view(np.uint8), "B": b.view(np.uint8), "C": np.zeros((96, 160), F16)})["C"]
    np.testing.assert_allclose(got.astype(F32), a.astype(F32) @ b.astype(F32), rtol=1e-3, atol=1e-3)


H, S, D = 2, 128, 64
SCALE = D ** -0.5


def _attention_inputs(n: int) -> list[np.ndarray]:
    rng = _rng("attention")
    return [rng.standard_normal((H, S, D)).astype(F16) for _ in range(n)]


def _attention_reference(q, k, v):
    """P (causal softmax of q.k * scale), the output, and M = log2 of the softmax denominators
    in the kernel's base-2 units."""
    s = np.einsum("hid,hjd->hij", q.astype(np.float64), k.astype(np.float64)) * SCALE
    s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    p = np.exp(s - lse[..., None])
    return p, p @ v.astype(np.float64), lse * LOG2E


def check_attn_fwd(arch, case):
    q, k, v = _attention_inputs(3)
    got = run_case(arch, case, {"Q": q, "K": k, "V": v, "Out": np.zeros_like(q), "M": np.zeros((H, S), F32)})
    _, out, m = _attention_reference(q, k, v)
    np.testing.assert_allclose(got["M"], m, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["Out"].astype(F32), out, rtol=0, atol=4e-3)  # P rounded to f16


def check_attn_bwd_preprocess(arch, case):
    o, do = _attention_inputs(2)
    got = run_case(arch, case, {"Out": o, "DO": do, "Delta": np.zeros((H, S), F32)})["Delta"]
    np.testing.assert_allclose(got, (o.astype(np.float64) * do).sum(-1), rtol=1e-5, atol=1e-5)


def check_attn_bwd(arch, case):
    q, k, v, do = _attention_inputs(4)
    p, out, m = _attention_reference(q, k, v)
    delta = (out.astype(F16).astype(np.float64) * do).sum(-1)
    got = run_case(arch, case, {"Q": q, "K": k, "V": v, "DO": do, "DQ": np.zeros_like(q), "DK": np.zeros_like(q),
                                "DV": np.zeros_like(q), "M": m.astype(F32), "D": delta.astype(F32)})
    d64 = do.astype(np.float64)
    dp = d64 @ v.astype(np.float64).transpose(0, 2, 1)
    ds = p * (dp - delta[..., None])
    want = {"DV": p.transpose(0, 2, 1) @ d64, "DK": SCALE * ds.transpose(0, 2, 1) @ q.astype(np.float64),
            "DQ": SCALE * ds @ k.astype(np.float64)}
    for name, ref in want.items():  # P and dS are rounded to f16 before their products
        np.testing.assert_allclose(got[name].astype(F32), ref, rtol=0, atol=5e-3, err_msg=name)


# Row k of math_f32's output: (reference in f64, the error allowed in units in the last place of
# the f32 result, an absolute error allowed besides). 0, 0: correctly rounded (equal to the f32
# rounding of the exact value). The allowances are the functions' own accuracy as Triton and ocml
# compute them (exp as exp2 of x * log2(e), log as log2 times ln 2: an absolute error near 1), not
# the emulator's: a wrong instruction misses by far more.
MATH_F32 = (
    (lambda x, y: np.exp(x), 4, 0), (lambda x, y: np.log(np.abs(x) + 0.5), 4, 3e-7),
    (lambda x, y: np.sqrt(np.abs(x)), 1, 0), (lambda x, y: 1 / np.sqrt(np.abs(x) + 0.25), 2, 0),
    (lambda x, y: np.sin(x), 2, 0), (lambda x, y: np.cos(x), 2, 0),
    (lambda x, y: x / y, 1, 0), (lambda x, y: x / y, 0, 0), (lambda x, y: np.floor(x * np.float32(3.7)), 0, 0),
    (lambda x, y: np.ceil(x * np.float32(3.7)), 0, 0), (lambda x, y: _erf(x), 2, 0),
    (lambda x, y: np.tanh(x), 2, 0), (lambda x, y: (np.abs(x) + 0.5) ** y, 4, 0),
    (lambda x, y: 1 / (1 + np.exp(-x)), 4, 0), (lambda x, y: x * y + 0.25, 0, 0),
    (lambda x, y: np.maximum(x, y), 0, 0), (lambda x, y: np.minimum(x, y), 0, 0),
    (lambda x, y: np.arctan2(x, y), 2, 0), (lambda x, y: np.log1p(np.abs(x)), 2, 0),
    (lambda x, y: np.expm1(x * 0.5), 2, 0))


def _erf(x):
    from math import erf

    return np.vectorize(erf)(x)


def check_math_f32(arch, case):
    rng = _rng(case)
    x = (rng.standard_normal(1000) * 2).astype(F32)
    y = (np.sign(rng.standard_normal(1000)) * (0.5 + np.abs(rng.standard_normal(1000)))).astype(F32)
    out = run_case(arch, case, {"X": x, "Y": y, "Out": np.zeros((len(MATH_F32), 1000), F32)})["Out"]
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    _assert_rows(out, [(fn(x64, y64), ulps, atol) for fn, ulps, atol in MATH_F32], F32, x)


def _assert_rows(out, rows, dtype, x) -> None:
    """Row k of `out` (values of `dtype`) against rows[k] = (reference in f64, ulps, atol): equal to
    the reference rounded to `dtype` where ulps and atol are 0, else within ulps units in the last
    place of the result plus atol (an infinity must be matched exactly). x: the inputs, for the
    message."""
    for k, (want, ulps, atol) in enumerate(rows):
        want = np.asarray(want, np.float64)
        if ulps == 0 and atol == 0:
            np.testing.assert_array_equal(out[k], want.astype(dtype), err_msg=f"row {k}")
            continue
        finite = np.isfinite(want)
        with np.errstate(invalid="ignore"):
            err = np.where(out[k] == want, 0.0, np.abs(out[k] - want))
        allowed = np.where(finite, ulps * np.spacing(np.abs(np.where(finite, want, 0)).astype(dtype))
                           .astype(np.float64) + atol, 0)
        off = np.nonzero(~(err <= allowed))[0]
        assert len(off) == 0, f"row {k}: {len(off)} values off, e.g. {out[k][off[0]]!r} for {want[off[0]]!r} " \
            f"(x = {x[off[0]]!r})"


def check_math_f64(arch, case):
    import math
    from fractions import Fraction

    rng = _rng(case)
    x = rng.standard_normal(500) * 2
    y = np.sign(rng.standard_normal(500)) * (0.5 + np.abs(rng.standard_normal(500)))
    # Large arguments take sin's Payne-Hanek reduction (v_trig_preop_f64's segments of 2/pi).
    big = [1e5, -3e7, 3e9, 1e12, 1e15, 2.0**53, 1e17, 1e20, 1e30, 4e200, -1e300, 123456789.123]
    x[:len(big)], y[:len(big)] = big, 0.75
    out = run_case(arch, case, {"X": x, "Y": y, "Out": np.zeros((9, 500))})["Out"]
    # (reference: exact Python/numpy f64, or glibc's libm within 1 ulp; ulps allowed)
    rows = [(x / y, 0), (np.sqrt(np.abs(x)), 0), ([math.exp(v) if v < 700 else math.inf for v in x], 2),
            ([math.log(abs(v) + 0.5) for v in x], 2), ([math.sin(v) for v in x], 2),
            ([(abs(a) + 0.5) ** b for a, b in zip(x, y, strict=True)], 2),
            ([float(Fraction(a) * Fraction(b) + Fraction(1, 4)) for a, b in zip(x, y, strict=True)], 0),
            (np.floor(x * 3.7), 0), (x * y - x, 0)]
    _assert_rows(out, [(want, ulps, 0) for want, ulps in rows], np.float64, x)


def check_math_16bit(arch, case):
    import ml_dtypes

    bf = ml_dtypes.bfloat16
    rng = _rng(case)
    h = (rng.standard_normal(1000) * 4).astype(F16)
    b = (rng.standard_normal(1000) * 4).astype(bf)
    got = run_case(arch, case, {"H": h, "B": b.view(np.uint16), "HOut": np.zeros((6, 1000), F16),
                                "BOut": np.zeros((5, 1000), np.uint16)})
    h64, b64 = h.astype(np.float64), b.astype(np.float64)

    def ulp(v, dt):
        mant, emin = (10, -14) if dt == F16 else (7, -126)
        return 2.0 ** (np.maximum(np.floor(np.log2(np.maximum(np.abs(v), 1e-300))), emin) - mant)

    def rounded(v, dt):
        return np.asarray(v, np.float64).astype(F32).astype(dt).astype(np.float64) if dt == bf else \
            np.asarray(v, np.float64).astype(dt).astype(np.float64)

    hout, bout = got["HOut"].astype(np.float64), got["BOut"].view(bf).astype(np.float64)
    hh, bb = rounded(h64 * h64, F16), rounded(b64 * b64, bf)
    # (output, candidate results (exact values, rounded here to the dtype), dtype, ulps allowed):
    # fused or op by op, each rounding Triton may do is a candidate; f16 division goes through
    # f32's approximate reciprocal (1 ulp), with its denominator |h| + 1 rounded to f16 first.
    checks = [(hout[0], [h64 * h64 + h64, hh + h64], F16, 0), (hout[1], [h64 * h64 - h64], F16, 0),
              (hout[2], [np.maximum(h64, -h64 * 0.5)], F16, 0),
              (hout[3], [h64 / rounded(np.abs(h64) + 1, F16)], F16, 1), (hout[4], [b64], F16, 0),
              (hout[5], [np.exp(h64)], F16, 1),
              (bout[0], [b64 * b64 + b64, bb + b64], bf, 0), (bout[1], [np.minimum(b64, -b64)], bf, 0),
              (bout[2], [b64 * 1.5], bf, 0), (bout[3], [h64], bf, 0), (bout[4], [np.abs(b64) + 1], bf, 0)]
    for k, (row, candidates, dt, ulps) in enumerate(checks):
        ok = np.zeros(row.shape, bool)
        with np.errstate(invalid="ignore", over="ignore"):
            for exact in candidates:
                want = rounded(exact, dt)
                ok |= (row == want) | (np.abs(row - want) <= ulps * ulp(want, dt))
        assert ok.all(), f"check {k}: {np.count_nonzero(~ok)} off, e.g. {row[~ok][0]} for {candidates[0][~ok][0]}"


def check_atomics_more(arch, case):
    n = 1024
    swapped = np.concatenate([np.arange(n, dtype=np.int32) * 7, np.zeros(n, np.int32)])
    got = run_case(arch, case, {"Flags": np.zeros(64, np.int32), "Swapped": swapped,
                                "Winners": np.full(n, -1, np.int32), "HalfSums": np.zeros(64, F16),
                                "Order": np.zeros(64, np.int64)})
    lanes = np.arange(n)
    winners = np.nonzero(got["Winners"] == 1)[0]
    assert set(np.unique(got["Winners"])) <= {0, 1}
    np.testing.assert_array_equal(np.sort(winners % 64), np.arange(64))  # one winner per slot
    np.testing.assert_array_equal(got["Flags"][winners % 64], winners + 1)  # ... whose value stuck
    np.testing.assert_array_equal(got["Swapped"][:n], lanes * 2)
    np.testing.assert_array_equal(got["Swapped"][n:], lanes * 7)  # exchange returns the old value
    np.testing.assert_array_equal(got["HalfSums"], np.full(64, 16.0, F16))
    np.testing.assert_array_equal(got["Order"], (16 * np.arange(64) + 64 * 120).astype(np.int64) << 33)


def check_scan_custom(arch, case):
    rng = _rng(case)
    x = rng.standard_normal((8, 128)).astype(F32)
    got = run_case(arch, case, {"X": x, "Out": np.zeros((16, 128), F32), "Hist": np.zeros((8, 16), np.int32)})
    np.testing.assert_array_equal(got["Out"][:8], np.maximum.accumulate(x, axis=1))
    np.testing.assert_allclose(got["Out"][8:], np.cumprod(1 + 0.01 * x.astype(np.float64), axis=1), rtol=2e-6)
    bins = (np.abs(x) * F32(4)).astype(np.int32) % 16
    np.testing.assert_array_equal(got["Hist"], [np.bincount(r, minlength=16) for r in bins])


def check_gather_wide(arch, case):
    rng = _rng(case)
    src = rng.standard_normal(4096).astype(F32)
    idx = rng.integers(0, 5000, 1000).astype(np.int32)
    got = run_case(arch, case, {"Src": src, "Idx": idx, "Out": np.zeros(2000, F32)})["Out"]
    far = idx.astype(np.int64) * 1048583
    np.testing.assert_array_equal(got[:1000], src[far % 4096] * 2)
    np.testing.assert_array_equal(got[1000:], (far >> 20).astype(F32))


def check_dot_scaled(arch, case):
    """MX-scaled dot (v_mfma_scale_f32_*_f8f6f4): every 32 K values of a row of A (a column of B)
    times 2^(scale byte - 127); fp4 packs two values a byte along K, the even one low."""
    import ml_dtypes

    meta = json.loads((CORPUS / arch / f"{case}.json").read_text())["constexprs"]
    M, N, K = meta["M"], meta["N"], meta["K"]
    types = {"e2m1": ml_dtypes.float4_e2m1fn, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
    rng = _rng(case)

    def operand(fmt, rows, cols):  # values [rows, cols] (cols along K) and their bytes, K packed
        vals = (rng.standard_normal((rows, cols)) * 2).astype(types[fmt])
        codes = vals.view(np.uint8)
        if fmt == "e2m1":
            codes = (codes[:, 0::2] & 0xF) | (codes[:, 1::2] & 0xF) << 4
        return vals.astype(np.float64), np.ascontiguousarray(codes)

    a, a_bytes = operand(meta["FA"], M, K)
    bt, bt_bytes = operand(meta["FB"], N, K)  # B transposed: [N, K]
    sa = rng.integers(118, 136, (M, K // 32)).astype(np.uint8)
    sb = rng.integers(118, 136, (N, K // 32)).astype(np.uint8)
    got = run_case(arch, case, {"A": a_bytes, "AS": sa, "B": np.ascontiguousarray(bt_bytes.T), "BS": sb,
                                "C": np.zeros((M, N), F32)})["C"]
    a_s = a * np.repeat(np.exp2(sa.astype(np.float64) - 127), 32, axis=1)
    b_s = bt * np.repeat(np.exp2(sb.astype(np.float64) - 127), 32, axis=1)
    want = a_s @ b_s.T
    bound = 1e-6 * (np.abs(a_s) @ np.abs(b_s).T)  # f32 accumulation, element by element
    assert (np.abs(got - want) <= bound).all(), np.abs(got - want).max()


def _erfinv(u: float) -> float:
    import math

    x = 0.0
    for _ in range(60):  # Newton on erf(x) = u, in f64
        x -= (math.erf(x) - u) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


def _j0(x: float) -> float:
    """Bessel J0 by the trapezoidal rule on (1/pi) int_0^pi cos(x sin t) dt (exact to f64 here)."""
    t = (np.arange(400) + 0.5) * np.pi / 400
    return float(np.mean(np.cos(x * np.sin(t))))


def _y0(x: float) -> float:
    """Bessel Y0 from its series (2/pi)(ln(x/2) + gamma) J0(x) + (2/pi) sum (-1)^(k+1) H_k (x^2/4)^k / k!^2."""
    import math

    total, term, harmonic = 0.0, 1.0, 0.0
    for k in range(1, 60):
        term *= -(x * x / 4) / (k * k)
        harmonic += 1 / k
        total -= term * harmonic
    return 2 / math.pi * ((math.log(x / 2) + 0.5772156649015329) * _j0(x) + total)


def check_math_special(arch, case):
    import math

    rng = _rng(case)
    x = (rng.standard_normal(1000) * 1.5).astype(F32)
    x = np.clip(x, -3.2, 3.2)  # 0.3 x stays inside (-1, 1); j0/y0 within the series' reach
    y = (np.sign(rng.standard_normal(1000)) * (0.5 + np.abs(rng.standard_normal(1000)))).astype(F32)
    out = run_case(arch, case, {"X": x, "Y": y, "Out": np.zeros((22, 1000), F32)})["Out"]
    xs, ys = x.astype(np.float64), y.astype(np.float64)

    def f32(v):  # an argument the kernel computes in f32, widened
        return np.asarray(v, F32).astype(np.float64)
    u = f32(x * F32(0.3))
    f = np.vectorize
    # (reference in f64, ulps of the f32 result, absolute error allowed besides): ocml's accuracy
    # (1-4 ulp); absolute allowances where a function crosses zero (j0, y0, lgamma, log10).
    rows = [(np.arcsin(u), 4, 0), (np.arccos(u), 4, 0), (np.arctan(xs), 4, 0), (np.tan(xs), 4, 0),
            (np.sinh(xs), 4, 0), (np.cosh(xs), 4, 0), (np.arcsinh(xs), 4, 0),
            (np.arccosh(f32(np.abs(x) + F32(1))), 4, 0),
            (np.arctanh(u), 4, 0), (f(_erfinv)(u), 4, 0), (f(math.erfc)(xs), 4, 0),
            (f(math.lgamma)(f32(np.abs(x) + F32(0.1))), 4, 2e-7), (f(_j0)(xs), 8, 2e-7),
            (f(_y0)(f32(np.abs(x) + F32(0.1))), 8, 2e-7), (np.hypot(xs, ys), 2, 0),
            (np.fmod((x * F32(7)).astype(np.float64), ys), 0, 0), (np.nextafter(x, y), 0, 0),
            (np.frexp(xs)[1] - 1, 0, 0), (np.rint(x * F32(3)), 0, 0), (np.copysign(x, y), 0, 0),
            (np.log10(f32(np.abs(x) + F32(0.01))), 4, 2e-7), (np.exp2(xs), 2, 0)]
    _assert_rows(out, rows, F32, x)


def check_dot_f16_acc(arch, case):
    rng = _rng(case)
    a, bt = rng.standard_normal((32, 64)).astype(F16), rng.standard_normal((32, 64)).astype(F16)
    got = run_case(arch, case, {"A": a, "B": bt, "C": np.zeros((32, 32), F16)})["C"].astype(np.float64)
    want = a.astype(np.float64) @ bt.astype(np.float64).T
    # an f32 accumulation (Triton's dot accumulates in f32 on every arch, then converts), rounded
    # to f16 once: within one f16 ulp of the exact product
    assert (np.abs(got - want) <= np.spacing(np.abs(want).astype(F16)).astype(np.float64)).all()


def check_reshape_ops(arch, case):
    rng = _rng(case)
    R, C = 32, 64
    x = rng.standard_normal((R, C)).astype(F32)
    idx = rng.integers(0, C, (R, C)).astype(np.int32)
    out = run_case(arch, case, {"X": x, "Idx": idx, "Out": np.zeros(5 * R * C, F32)})["Out"]
    np.testing.assert_array_equal(out[:R * C].reshape(C, R), x.T)
    np.testing.assert_array_equal(out[R * C:2 * R * C].reshape(C, R), x.T * 2)
    np.testing.assert_array_equal(out[2 * R * C:3 * R * C].reshape(2, R, C // 2),
                                  x.reshape(R, 2, C // 2).transpose(1, 0, 2))
    pairs = x.reshape(R, C // 2, 2)
    np.testing.assert_array_equal(out[3 * R * C:4 * R * C].reshape(R, C), pairs[:, :, ::-1].reshape(R, C))
    np.testing.assert_array_equal(out[4 * R * C:].reshape(R, C), np.take_along_axis(x, idx, axis=1))


def check_fp8_casts(arch, case):
    """f32 and bf16 to the arch's fp8 and back: nearest even (ml_dtypes' casts), ties and
    subnormals included; inputs inside the format's range (overflow is the instruction's choice)."""
    import ml_dtypes

    if arch in ("gfx942", "gfx950"):  # CDNA: Triton sets MODE.FP16_OVFL first
        check_fp8_casts_refused(arch, case)
        return
    dt = {"fp8_casts_e4m3": ml_dtypes.float8_e4m3fn, "fp8_casts_e5m2": ml_dtypes.float8_e5m2,
          "fp8_casts_fnuz": ml_dtypes.float8_e4m3fnuz, "fp8_casts_bf8_fnuz": ml_dtypes.float8_e5m2fnuz}[case]
    rng = _rng(case)
    x = (rng.standard_normal(1000) * 20).astype(F32)
    codes = np.arange(1, 120, dtype=np.uint8)  # positive finite codes common to all four formats
    grid = codes.view(dt).astype(F32)
    mids = (grid[:-1] + grid[1:]) / 2  # ties between neighbours, exactly representable in f32
    x[:len(mids)], x[200:200 + len(mids)] = mids, -mids
    x[400:400 + len(grid)] = grid * F32(1.0000001)
    got = run_case(arch, case, {"X": x, "Q8": np.zeros(1000, np.uint8), "Back": np.zeros(2000, F32)})
    want = x.astype(dt)
    np.testing.assert_array_equal(got["Q8"], want.view(np.uint8))
    np.testing.assert_array_equal(got["Back"][:1000], want.astype(F32))
    np.testing.assert_array_equal(got["Back"][1000:], x.astype(ml_dtypes.bfloat16).astype(dt).astype(F32))


def check_fp8_casts_refused(arch, case):
    """Triton's fp8 casts on gfx942/gfx950 first set MODE.FP16_OVFL (overflowing results saturate):
    the emulator does not model that mode, so the launch must stop there by name, not run on
    with overflow giving NaN or infinity where the hardware would saturate."""
    x = np.linspace(-30, 30, 1000).astype(F32)
    with pytest.raises(UnsupportedInstruction, match="FP16_OVFL"):
        run_case(arch, case, {"X": x, "Q8": np.zeros(1000, np.uint8), "Back": np.zeros(2000, F32)})


def _wrap32(v):
    return (np.asarray(v, np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def check_int_ops(arch, case):
    rng = _rng(case)
    a = rng.integers(-2**31 + 1, 2**31, 1000).astype(np.int32)
    b = np.where(rng.random(1000) < 0.5, rng.integers(-300, 300, 1000),
                 rng.integers(-2**31 + 1, 2**31, 1000)).astype(np.int32)
    b[b == 0] = 7
    a[:8] = [0, 1, -1, 2**31 - 1, -2**31 + 1, 12345, -12345, 65536]
    b[:8] = [5, -1, 3, -2, 2**31 - 1, -7, 7, 65536]
    got = run_case(arch, case, {"A": a, "B": b, "Out": np.zeros((16, 1000), np.int32),
                                "Wide": np.zeros((2, 1000), np.int64)})
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    q = np.sign(a64) * np.sign(b64) * (np.abs(a64) // np.abs(b64))  # C division: toward zero
    ua, ub = a.view(np.uint32).astype(np.uint64), b.view(np.uint32).astype(np.uint64)
    sh = b64 & 31
    want = [q, a64 - b64 * q, ua // ub, ua % ub, a64 >> sh, ua >> sh.astype(np.uint64), a64 << sh,
            (ua * ub) >> np.uint64(32), a64 * b64, a ^ b, a & ~b, np.abs(a64), np.minimum(a, b),
            np.maximum(ua, ub), [bin(v).count("1") for v in a.view(np.uint32)],
            [32 - int(v).bit_length() for v in a.view(np.uint32)]]
    for k, w in enumerate(want):
        np.testing.assert_array_equal(got["Out"][k], _wrap32(w), err_msg=f"row {k}")
    wide = a64 * b64 + (a64 << 20)
    np.testing.assert_array_equal(got["Wide"][0], wide)
    np.testing.assert_array_equal(got["Wide"][1], np.sign(wide) * (np.abs(wide) // 7))


def check_conversions(arch, case):
    import ml_dtypes

    rng = _rng(case)
    x = (rng.standard_normal(1000) * 3000).astype(F32)
    # Ties and their neighbours for f16 (1 + k/2048: halfway between f16 values near 1) and
    # bf16 (halfway at bit 15), f16 subnormals, signed zeros.
    ties = np.float32(1) + np.arange(-8, 8, dtype=F32) * np.float32(2.0 ** -11)
    bties = (np.arange(16, dtype=np.uint32) * 0x8000 + 0x3F800000).view(F32)
    x[:16], x[16:32], x[32:40] = ties, bties, [6e-8, -6e-8, 3e-5, 1e-7, 0.0, -0.0, 2.5, -3.5]
    got = run_case(arch, case, {"X": x, "F16Out": np.zeros(1000, F16), "BF16Out": np.zeros(1000, np.uint16),
                                "IntOut": np.zeros((2, 1000), np.int32), "F32Out": np.zeros((2, 1000), F32)})
    h, bf = x.astype(F16), x.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got["F16Out"].view(np.uint16), h.view(np.uint16))
    np.testing.assert_array_equal(got["BF16Out"], bf.view(np.uint16))
    i = np.trunc(x).astype(np.int32)
    np.testing.assert_array_equal(got["IntOut"][0], i)
    np.testing.assert_array_equal(got["IntOut"][1], (i & 255) + np.trunc(h.astype(F32)).astype(np.int32) * 1000)
    np.testing.assert_array_equal(got["F32Out"][0], h.astype(F32) + bf.astype(F32))
    np.testing.assert_array_equal(got["F32Out"][1], _wrap32(i.astype(np.int64) * 3 + 1).astype(F32) * F32(0.5))


def check_scan_sort(arch, case):
    rng = _rng(case)
    x = rng.standard_normal((8, 128)).astype(F32)
    ints = rng.integers(-50, 50, (8, 128)).astype(np.int32)
    got = run_case(arch, case, {"X": x, "Ints": ints, "CumF": np.zeros_like(x), "CumI": np.zeros_like(ints),
                                "Sorted": np.zeros_like(x), "ArgMax": np.zeros(8, np.int32),
                                "ArgMin": np.zeros(8, np.int32)})
    bound = 1e-6 * np.abs(x).sum(1, keepdims=True)  # summed in another order than numpy's
    assert (np.abs(got["CumF"] - np.cumsum(x.astype(np.float64), 1)) <= bound).all()  # each row its own
    np.testing.assert_array_equal(got["CumI"], np.cumsum(ints, 1))
    np.testing.assert_array_equal(got["Sorted"], np.sort(x, 1))
    np.testing.assert_array_equal(got["ArgMax"], x.argmax(1))
    np.testing.assert_array_equal(got["ArgMin"], ints.argmin(1))  # ties: the first


def check_atomics(arch, case):
    rng = _rng(case)
    keys = rng.integers(0, 16, 1000).astype(np.int32)
    keys[keys == 13] = 12  # bin 13 stays empty
    vals = rng.integers(0, 100, 1000).astype(np.int32)
    got = run_case(arch, case, {"Keys": keys, "Vals": vals, "Hist": np.zeros(16, np.int32),
                                "Sums": np.zeros(16, F32), "Maxes": np.full(16, -1, np.int32),
                                "Counter": np.zeros(1, np.int32), "Olds": np.full(1000, -1, np.int32)})
    np.testing.assert_array_equal(got["Hist"], np.bincount(keys, minlength=16))
    np.testing.assert_array_equal(got["Sums"], np.bincount(keys, vals, minlength=16).astype(F32))
    maxes = np.full(16, -1, np.int32)
    np.maximum.at(maxes, keys, vals)
    np.testing.assert_array_equal(got["Maxes"], maxes)
    assert got["Counter"][0] == 1000
    np.testing.assert_array_equal(np.sort(got["Olds"]), np.arange(1000))  # each lane saw its own old value


def check_dot(arch, case):
    import ml_dtypes

    rng = _rng(case)
    kind = case.split("_")[1]
    if kind == "i8":
        a, b = (rng.integers(-128, 128, s).astype(np.int8) for s in ((32, 64), (64, 32)))
        got = run_case(arch, case, {"A": a, "B": b, "C": np.zeros((32, 32), np.int32)})["C"]
        np.testing.assert_array_equal(got, a.astype(np.int32) @ b.astype(np.int32))
        return
    dt = {"bf16": ml_dtypes.bfloat16, "f32": F32, "fp8": ml_dtypes.float8_e4m3fn}[kind]
    if case == "dot_fp8_fnuz":
        dt = ml_dtypes.float8_e4m3fnuz  # gfx942's fp8
    a, b = (rng.standard_normal(s).astype(dt) for s in ((32, 64), (64, 32)))
    bits = {2: np.uint16, 1: np.uint8, 4: F32}[a.itemsize]
    got = run_case(arch, case, {"A": a.view(bits), "B": b.view(bits), "C": np.zeros((32, 32), F32)})["C"]
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


def _philox(seed: int, c0: np.ndarray) -> np.ndarray:
    """Triton's randint (triton/language/random.py): ten Philox-4x32 rounds of (offset, 0, 0, 0)
    under the seed's two halves; the first word."""
    m32 = np.uint64(0xFFFFFFFF)
    c = [c0.astype(np.uint64), *(np.zeros_like(c0, np.uint64) for _ in range(3))]
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    ra, rb = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    for _ in range(10):
        p0, p2 = ra * c[0], rb * c[2]
        c = [(p2 >> np.uint64(32)) ^ c[1] ^ k0, p2 & m32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & m32]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m32, (k1 + np.uint64(0xBB67AE85)) & m32
    return c[0].astype(np.uint32)


def check_rand(arch, case):
    seed = 20261201
    got = run_case(arch, case, {"Ints": np.zeros(1000, np.int32), "Floats": np.zeros(1000, F32)})
    offs = np.arange(1000, dtype=np.uint32)
    np.testing.assert_array_equal(got["Ints"], _philox(seed, offs).view(np.int32))
    x = _philox(seed, offs + 1000).view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x).astype(F32)
    np.testing.assert_array_equal(got["Floats"], x * F32(4.6566127342e-10))


def check_refused(arch, case):
    """A kernel whose instructions the emulator does not model must be refused by name before it
    runs, not run wrongly. gfx942's XF32 MFMAs (TF32 dots): how they cut an f32 to XF32's 10
    mantissa bits (truncation or rounding) is not documented anywhere we can cite, so the emulator
    refuses them rather than guess."""
    meta = json.loads((CORPUS / arch / f"{case}.json").read_text())
    dev = EmulatorDevice(arch)
    kern = dev.kernel((CORPUS / arch / f"{case}.hsaco").read_bytes(), meta["kernel"])
    refused = dev.unsupported(kern)
    assert refused and all("_xf32" in r for r in refused), refused
    with pytest.raises(UnsupportedInstruction, match="v_mfma_f32_.*_xf32"):
        run_case(arch, case, {"A": np.ones((32, 64), F32), "B": np.ones((64, 32), F32),
                              "C": np.zeros((32, 32), F32)}, supported=False)


CHECKS = {"vector_add": check_vector_add, "softmax": check_softmax, "layer_norm_fwd": check_layer_norm_fwd,
          "layer_norm_bwd_dx": check_layer_norm_bwd_dx, "layer_norm_bwd_dwdb": check_layer_norm_bwd_dwdb,
          "matmul": check_matmul, "matmul_async_buffer": check_matmul, "matmul_async_global": check_matmul,
          "matmul_fp8": check_matmul_fp8,
          "attn_fwd": check_attn_fwd, "attn_bwd_preprocess": check_attn_bwd_preprocess, "attn_bwd": check_attn_bwd,
          "math_f32": check_math_f32, "int_ops": check_int_ops, "conversions": check_conversions,
          "scan_sort": check_scan_sort, "atomics": check_atomics, "dot_bf16": check_dot, "dot_i8": check_dot,
          "dot_f32": check_dot, "dot_tf32": check_refused, "dot_scaled_fp4": check_dot_scaled,
          "dot_scaled_fp8_fp4": check_dot_scaled, "dot_scaled_bf8": check_dot_scaled, "dot_fp8_fnuz": check_dot,
          "dot_fp8": check_dot,
          "rand": check_rand, "math_f64": check_math_f64, "math_16bit": check_math_16bit,
          "atomics_more": check_atomics_more, "scan_custom": check_scan_custom, "gather_wide": check_gather_wide,
          "math_special": check_math_special, "dot_f16_acc": check_dot_f16_acc, "reshape_ops": check_reshape_ops,
          "fp8_casts_e4m3": check_fp8_casts, "fp8_casts_e5m2": check_fp8_casts,
          "fp8_casts_fnuz": check_fp8_casts, "fp8_casts_bf8_fnuz": check_fp8_casts}


@pytest.mark.parametrize(("arch", "case"), PAIRS)
def test_triton_kernel_matches_numpy(arch, case):
    CHECKS[case](arch, case)
