"""8-bit floats (f8e4m3, f8e5m2) in the tile language, on every arch of the table.

Where the arch has an fp8 format (gfx942: FNUZ, gfx950 and gfx1201: OCP; tiledsl/fp8.py) the
kernels of tests/kernels/fp8_*.tile run on the emulator and are checked against ml_dtypes in the
arch's flavour: loads and stores move the bytes unchanged, casts to f8 round to nearest even
without saturating (bit for bit equal to ml_dtypes' casts; a NaN becomes the flavour's NaN),
casts from f8 are exact, and dot runs the arch's fp8 matrix instruction. Elsewhere (gfx90a,
gfx1100) every f8 value is a located checker error naming dtype and arch.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.errors import SourceError, TileError
from tiledsl.ir.emit import emit_tile_mlir
from tiledsl.lang.checker import bind
from tiledsl.lang.parser import parse
from tiledsl.launcher import launch, numpy_dtype
from tiledsl.options import CompileOptions

KERNELS = Path(__file__).resolve().parent / "kernels"
FP8_ARCHS = [a for a in ARCH_NAMES if get_arch(a).fp8_flavour]
NO_FP8_ARCHS = [a for a in ARCH_NAMES if not get_arch(a).fp8_flavour]
DTYPES = ("f8e4m3", "f8e5m2")
MANTISSA_BITS = {"f8e4m3": 3, "f8e5m2": 2}


def compile_kernel(name: str, arch: str, **defines: object):
    path = KERNELS / name
    return compile_source(path.read_text(), str(path), arch, {k: str(v).lower() if isinstance(v, bool) else str(v)
                                                             for k, v in defines.items()})


def special_values() -> np.ndarray:
    """Zeros, infinities, NaN, each flavour's largest values, the ties around them and between
    neighbours, subnormals and values below the smallest subnormal, both signs."""
    edges = [0.0, np.inf, np.nan, 1.0, 1.0625, 1.125, 1.1875, 0.3, 240.0, 247.9, 248.0, 256.0, 448.0, 463.9, 464.0,
             480.0, 57344.0, 59391.0, 59392.0, 61440.0, 1e6, 2.0**-9, 2.0**-10, 1.5 * 2.0**-10, 2.0**-16, 2.0**-17,
             2.0**-18, 3 * 2.0**-18, 1e-30]
    return np.array(edges + [-e for e in edges], np.float32)


# -- the dtype mapping per arch ----------------------------------------------------------------
@pytest.mark.frontend
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_numpy_and_mlir_types_follow_the_flavour(arch: str) -> None:
    flavour = get_arch(arch).fp8_flavour
    if flavour is None:
        with pytest.raises(TileError, match="f8e4m3 has no meaning without an arch with 8-bit floats"):
            numpy_dtype("f8e4m3", arch)
        return
    want = {"fnuz": ("float8_e4m3fnuz", "float8_e5m2fnuz"), "ocp": ("float8_e4m3fn", "float8_e5m2")}[flavour]
    assert [numpy_dtype(dt, arch) for dt in DTYPES] == [np.dtype(getattr(ml_dtypes, n)) for n in want]
    src = (KERNELS / "fp8_casts.tile").read_text()
    bound = bind(parse(src, "fp8_casts.tile"), {"DT": "f8e5m2"}, get_arch(arch))
    mlir = emit_tile_mlir(bound, get_arch(arch), CompileOptions(arch))
    assert ("f8E5M2FNUZ" in mlir) == (flavour == "fnuz") and ("f8E5M2>" in mlir) == (flavour == "ocp")


# -- memory and casts ---------------------------------------------------------------------------
@pytest.mark.emulator
@pytest.mark.parametrize("arch", FP8_ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("src", ["f32", "f16", "bf16", "i32"])
def test_load_store_and_casts(arch: str, dtype: str, src: str) -> None:
    """fp8_casts.tile: y = x (every byte code, NaNs included), w = cast(x, f32), q = cast(s, DT)
    and back = cast(q, SRC). Casts to f8 equal ml_dtypes' (round to nearest even, overflow to
    NaN or, on OCP e5m2, infinity) bit for bit; from f8 they are exact."""
    k = compile_kernel("fp8_casts.tile", arch, DT=dtype, SRC=src)
    kind = "bf8" if dtype == "f8e5m2" else "fp8"
    assert f"v_cvt_pk_{kind}_f32" in k.asm and f"v_cvt_pk_f32_{kind}" in k.asm
    f8, st = numpy_dtype(dtype, arch), numpy_dtype(src)
    rng = np.random.default_rng(len(arch) * 7 + len(src))
    n = 1500
    x = np.concatenate([np.arange(256, dtype=np.uint8), rng.integers(0, 256, n - 256, dtype=np.uint8)]).view(f8)
    if src == "i32":  # around the f8 range: exact in f32, larger values overflow
        s = np.concatenate([[0, 1, -1, 240, 241, 248, 448, 464, 57344, 61440, 2**31 - 1, -2**31],
                            rng.integers(-70000, 70000, n - 12)]).astype(np.int32)
    else:
        special = special_values()
        rnd = rng.standard_normal(n - len(special)) * 10.0 ** rng.integers(-6, 6, n - len(special))
        with np.errstate(over="ignore"):  # large values become f16 infinities
            s = np.concatenate([special, rnd]).astype(st)
    y, w, q, back = np.zeros(n, f8), np.zeros(n, np.float32), np.zeros(n, f8), np.zeros(n, st)
    launch(k, x, y, w, s, q, back, device=EmulatorDevice(arch))
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))
    np.testing.assert_array_equal(w, x.astype(np.float32))  # NaN where x is a NaN code
    s32 = s.astype(np.float32)
    nan = np.isnan(s32)
    want = s32.astype(f8)
    np.testing.assert_array_equal(q.view(np.uint8)[~nan], want.view(np.uint8)[~nan])
    assert np.isnan(q[nan].astype(np.float32)).all()
    q32 = q.astype(np.float32)
    if src == "i32":  # f32 -> i32 truncates; NaN and infinities have no i32 value
        finite = np.isfinite(q32)
        np.testing.assert_array_equal(back[finite], q32[finite].astype(np.int32))
    else:
        # Every f8 value is exact in f16, bf16 and f32 (compared as f32: numpy's NaN-aware equality)
        np.testing.assert_array_equal(back.astype(np.float32), q32.astype(st).astype(np.float32))


@pytest.mark.emulator
@pytest.mark.parametrize("arch", FP8_ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_vector_access_where_full_and_scalars(arch: str, dtype: str) -> None:
    k = compile_kernel("fp8_misc.tile", arch, DT=dtype)
    assert "global_load_dwordx4" in k.asm or "global_load_b128" in k.asm  # 16 f8 values per lane and access
    f8 = numpy_dtype(dtype, arch)
    x = (np.random.default_rng(3).standard_normal((13, 48)) * 4).astype(f8)
    y, s = np.zeros((13, 48), f8), np.zeros(4, f8)
    launch(k, x, y, s, device=EmulatorDevice(arch))
    want = x.copy()
    want[:, :8] = 2.0
    np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8))
    xf = x.astype(np.float32)
    scalars = np.array([xf[0, 1], xf[0, 1] * 3, max(xf.max(), 1.5), 0.3], np.float32).astype(f8)
    np.testing.assert_array_equal(s.view(np.uint8), scalars.view(np.uint8))


# -- dot ------------------------------------------------------------------------------------------
GEMMS = [  # (M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, WAVES, TRANS_B)
    (64, 64, 64, 64, 64, 64, 4, False),
    (64, 64, 64, 64, 64, 64, 4, True),
    (80, 48, 96, 32, 64, 64, 2, False),  # three workgroups along M; the edges in M, N and K masked
    (64, 64, 64, 32, 32, 32, 1, True),
]


@pytest.mark.emulator
@pytest.mark.parametrize("arch", FP8_ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", GEMMS, ids=[f"{c[0]}x{c[1]}x{c[2]}-{c[6]}w{'-tb' if c[7] else ''}" for c in GEMMS])
def test_dot(arch: str, dtype: str, case: tuple) -> None:
    """fp8_gemm.tile against float64. The f8 operands are exact, so are their products in f32;
    only the f32 accumulation rounds: at most one rounding per addition, so each element is within
    K * 2^-24 * (|A| @ |B|) of the exact sum (a wrong operand layout errs by O(|A| @ |B|))."""
    m, n, kd, bm, bn, bk, waves, trans_b = case
    k = compile_kernel("fp8_gemm.tile", arch, DT=dtype, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, WAVES=waves,
                       TRANS_B=trans_b)
    names = {op.isa_name for op in get_arch(arch).matrix_ops_for(dtype)}
    assert any(name in k.asm for name in names), f"none of {names} in the ISA"
    f8 = numpy_dtype(dtype, arch)
    rng = np.random.default_rng(m + n + kd + waves)
    a, b = rng.standard_normal((m, kd)).astype(f8), rng.standard_normal((kd, n)).astype(f8)
    c = np.zeros((m, n), np.float32)
    launch(k, a, b, np.ascontiguousarray(b.T), c, device=EmulatorDevice(arch))
    af, bf = a.astype(np.float64), b.astype(np.float64)
    bound = kd * 2.0**-24 * (np.abs(af) @ np.abs(bf))
    err = np.abs(c - af @ bf)
    assert (err <= bound).all(), f"max error {err.max()} (bound there {bound.flat[err.argmax()]})"


@pytest.mark.emulator
@pytest.mark.parametrize("arch", FP8_ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("waves, size", [(4, 64), (2, 32), (1, 32)])
def test_chained_dot(arch: str, dtype: str, waves: int, size: int) -> None:
    """fp8_chain.tile: O = cast(Q @ K^T * scale, DT) @ V, P kept in registers as an A operand.
    Small integer inputs make every f32 sum exact whatever its order, so P is one known rounding
    of an exact S and O must equal the float64 reference exactly."""
    k = compile_kernel("fp8_chain.tile", arch, DT=dtype, WAVES=waves, M=size, N=size, D=size)
    f8 = numpy_dtype(dtype, arch)
    rng = np.random.default_rng(waves + size)
    q, kk, v = (rng.integers(-3, 4, (size, size)).astype(np.float32).astype(f8) for _ in range(3))
    o = np.zeros((size, size), np.float32)
    launch(k, q, kk, v, o, 0.125, device=EmulatorDevice(arch))
    qf, kf, vf = (x.astype(np.float64) for x in (q, kk, v))
    p = (qf @ kf.T * 0.125).astype(np.float32).astype(f8).astype(np.float64)
    np.testing.assert_array_equal(o, p @ vf)


@pytest.mark.emulator
@pytest.mark.parametrize("arch", FP8_ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_f8_tiles_through_loops_branches_and_layouts(arch: str, dtype: str) -> None:
    """fp8_flow.tile against numpy. Inputs are halves of small integers, exact in both 8-bit
    formats, so every product and sum is exact in f32: the results must match exactly."""
    k = compile_kernel("fp8_flow.tile", arch, DT=dtype)
    f8 = numpy_dtype(dtype, arch)
    rng = np.random.default_rng(17)
    x = (rng.integers(-6, 7, (64, 64)) / 2).astype(np.float32)
    b = rng.random((64, 64)) < 0.5
    y, nonzero, n = np.zeros((64, 64), np.float32), np.zeros((64, 64), bool), 5
    launch(k, x, y, b, nonzero, n, device=EmulatorDevice(arch))

    def to8(a: np.ndarray) -> np.ndarray:
        return a.astype(np.float32).astype(f8)

    q = to8(x)
    wide = np.where(x > 0, q, np.broadcast_to(to8(x[:, 0])[:, None], (64, 64)))
    acc = q
    for i in range(n):
        acc = np.where(x > i, wide, acc)
    acc = to8(acc.astype(np.float32) * 2)
    np.testing.assert_array_equal(nonzero, acc.astype(np.float32) != 0)
    a64, q64 = acc.astype(np.float64), q.astype(np.float64)
    p = a64 @ to8(x + b.astype(np.float32)).astype(np.float64)
    np.testing.assert_array_equal(y, q64 @ a64.T + p)


@pytest.mark.emulator
@pytest.mark.parametrize("arch", FP8_ARCHS)
def test_gemm_example_in_f8(arch: str) -> None:
    """examples/gemm.tile with DT=f8e4m3: pipelined loads (stages 2), dot with trans_b, and the
    f32 result scaled and cast back to f8. Each output is the f8 rounding (half an f8 ulp,
    2^-4 relative for 3 mantissa bits) of a value within K * 2^-24 * S of the exact one
    (S = alpha * |A| @ |B|^T), plus half the smallest subnormal near zero."""
    path = Path(__file__).resolve().parent.parent / "examples" / "gemm.tile"
    k = compile_source(path.read_text(), str(path), arch, {"DT": "f8e4m3"})
    f8 = numpy_dtype("f8e4m3", arch)
    rng = np.random.default_rng(11)
    batch, m, n, kd, alpha = 2, 70, 64, 96, 0.5
    a, b = rng.standard_normal((batch, m, kd)).astype(f8), rng.standard_normal((batch, n, kd)).astype(f8)
    c = np.zeros((batch, m, n), f8)
    launch(k, a, b, c, alpha, device=EmulatorDevice(arch))
    af, bf = a.astype(np.float64), b.astype(np.float64)
    exact = alpha * af @ bf.transpose(0, 2, 1)
    s = alpha * np.abs(af) @ np.abs(bf).transpose(0, 2, 1)
    tiny = float(ml_dtypes.finfo(f8).smallest_subnormal)
    bound = 2.0**-4 * (np.abs(exact) + kd * 2.0**-24 * s) + kd * 2.0**-24 * s + tiny / 2
    err = np.abs(c.astype(np.float64) - exact)
    assert (err <= bound).all(), f"max error {err.max()}"


# -- refusals -------------------------------------------------------------------------------------
def _error(src: str, arch: str) -> SourceError:
    with pytest.raises(SourceError) as info:
        bind(parse(src, "k.tile"), {}, get_arch(arch))
    return info.value


@pytest.mark.frontend
@pytest.mark.parametrize("arch", NO_FP8_ARCHS)
@pytest.mark.parametrize("body, col, what", [
    ("store(w[i], cast(load(x[i]), f32));", 24, "load: 'x' holds f8e4m3"),
    ("store(y[i], 0);", 8, "store: 'y' holds f8e4m3"),
    ("store(w[i], cast(cast(load(w[i]), f8e4m3), f32));", 36, "cast to f8e4m3"),
    ("store(w[i], cast(zeros([64], f8e4m3), f32));", 31, "zeros(..., f8e4m3)"),
    ("store(w[i], cast(full([64], 1.0, f8e4m3), f32));", 35, "full(..., f8e4m3)"),
])
def test_no_fp8_arch_refuses_f8(arch: str, body: str, col: int, what: str) -> None:
    src = ("kernel k(x: tensor[f8e4m3](N), y: tensor[f8e4m3](N), w: tensor[f32](N))"
           f" grid(1) {{\n let i = arange(0, 64);\n {body}\n}}\n")
    err = _error(src, arch)
    assert err.message == (f"{what}: {arch} has no 8-bit float instructions, so it cannot hold f8e4m3 values "
                           "(fp8 needs gfx942, gfx950 or gfx1201)")
    assert (err.loc.line, err.loc.col) == (3, col)
    assert "^" in str(err) and "f16 or bf16" in str(err)


@pytest.mark.frontend
@pytest.mark.parametrize("arch", NO_FP8_ARCHS)
def test_no_fp8_arch_refuses_the_dot_example(arch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tiledsl.cli import main

    path = Path(__file__).resolve().parent.parent / "examples" / "gemm.tile"
    assert main(["compile", str(path), "--arch", arch, "-D", "DT=f8e5m2", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"gemm.tile:17:23: error: load: 'a' holds f8e5m2: {arch} has no 8-bit float instructions" in err
    assert "^" in err and "Traceback" not in err


@pytest.mark.frontend
@pytest.mark.parametrize("arch", FP8_ARCHS)
@pytest.mark.parametrize("expr, col, message", [
    ("v + v", 14, "'+' has no f8e4m3 form"),
    ("-v", 15, "'-' has no f8e4m3 form"),
    ("maximum(v, v)", 14, "maximum has no f8e4m3 form"),
    ("abs(v)", 18, "abs has no f8e4m3 form"),
    ("cast(v < v, f8e4m3)", 19, "'<' has no f8e4m3 form"),
])
def test_f8_has_no_arithmetic(arch: str, expr: str, col: int, message: str) -> None:
    src = (f"kernel k(x: tensor[f8e4m3](N)) grid(1) {{\n let i = arange(0, 64);\n let v = load(x[i]);\n"
           f" store(x[i], {expr});\n}}\n")
    err = _error(src, arch)
    assert err.message.startswith(message + ": 8-bit floats are loaded, stored, cast and multiplied with dot")
    assert (err.loc.line, err.loc.col) == (4, col) and "cast(x, f32)" in (err.hint or "")


@pytest.mark.frontend
@pytest.mark.parametrize("arch", FP8_ARCHS)
def test_f8_literals_must_fit(arch: str) -> None:
    flavour = get_arch(arch).fp8_flavour
    src = ("kernel k(x: tensor[f8e4m3](N)) grid(1) {\n let i = arange(0, 64);\n"
           " store(x[i], load(x[i], other=OTHER));\n}\n")
    bind(parse(src.replace("OTHER", "240.0"), "k.tile"), {}, get_arch(arch))
    err = _error(src.replace("OTHER", "500.0"), arch)
    largest = {"fnuz": 240, "ocp": 448}[flavour]
    assert err.message == (f"500.0 is out of range for f8e4m3 (with load from 'x'): f8e4m3 on {arch} is "
                           f"{flavour.upper()}, whose largest value is {largest} (and which has no infinity)")
    assert (err.loc.line, err.loc.col) == (3, 31)


# -- the launcher's flavour check ----------------------------------------------------------------
@pytest.mark.emulator
@pytest.mark.parametrize("arch", FP8_ARCHS)
def test_wrong_flavour_array_is_refused(arch: str) -> None:
    k = compile_kernel("fp8_misc.tile", arch, DT="f8e4m3")
    flavour = get_arch(arch).fp8_flavour
    want, other = (("float8_e4m3fnuz", "float8_e4m3fn") if flavour == "fnuz" else
                   ("float8_e4m3fn", "float8_e4m3fnuz"))
    wrong = np.zeros((16, 16), getattr(ml_dtypes, other))
    good = np.zeros((16, 16), getattr(ml_dtypes, want))
    with pytest.raises(ValueError) as info:
        launch(k, wrong, good, np.zeros(4, good.dtype), device=EmulatorDevice(arch))
    assert str(info.value) == (f"argument 'x': expected dtype f8e4m3 ({want}, the {flavour.upper()} flavour of "
                               f"{arch}), got {other}")
