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
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

pytestmark = pytest.mark.emulator

CORPUS = Path(__file__).resolve().parent / "third_party"
CORE = ("vector_add", "softmax", "layer_norm_fwd", "layer_norm_bwd_dx", "layer_norm_bwd_dwdb", "matmul",
        "attn_fwd", "attn_bwd_preprocess", "attn_bwd")
# Variants on the archs where they compile to something else (regenerate.py VARIANTS): Triton's
# asynchronous copies (global/buffer loads straight into LDS) on gfx942/gfx950, an fp8 matmul on
# gfx950 (ds_read_b64_tr_b8).
EXTRA = {"gfx942": ("matmul_async_buffer", "matmul_async_global"),
         "gfx950": ("matmul_async_buffer", "matmul_async_global", "matmul_fp8")}
PAIRS = [(arch, case) for arch in ARCH_NAMES for case in CORE + EXTRA.get(arch, ())]
F16, F32 = np.float16, np.float32
LOG2E = 1.4426950408889634


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_corpus_is_complete(arch):
    """Every case was compiled for every arch (regenerate.py writes them all)."""
    want = set(CORE + EXTRA.get(arch, ()))
    assert {p.stem for p in (CORPUS / arch).glob("*.hsaco")} == want
    assert {p.stem for p in (CORPUS / arch).glob("*.json")} == want


def run_case(arch: str, case: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Launch one corpus kernel with `arrays` as its pointer arguments (by name) and the scalar
    values recorded at compile time; returns every array as it is after the launch."""
    meta = json.loads((CORPUS / arch / f"{case}.json").read_text())
    dev = EmulatorDevice(arch)
    kern = dev.kernel((CORPUS / arch / f"{case}.hsaco").read_bytes(), meta["kernel"])
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


CHECKS = {"vector_add": check_vector_add, "softmax": check_softmax, "layer_norm_fwd": check_layer_norm_fwd,
          "layer_norm_bwd_dx": check_layer_norm_bwd_dx, "layer_norm_bwd_dwdb": check_layer_norm_bwd_dwdb,
          "matmul": check_matmul, "matmul_async_buffer": check_matmul, "matmul_async_global": check_matmul,
          "matmul_fp8": check_matmul_fp8,
          "attn_fwd": check_attn_fwd, "attn_bwd_preprocess": check_attn_bwd_preprocess, "attn_bwd": check_attn_bwd}


@pytest.mark.parametrize(("arch", "case"), PAIRS)
def test_triton_kernel_matches_numpy(arch, case):
    CHECKS[case](arch, case)
