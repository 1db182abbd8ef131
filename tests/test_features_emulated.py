"""tests/kernels/features.tile (every builtin) runs on the emulator and matches numpy on each arch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.launcher import launch

pytestmark = pytest.mark.emulator
SOURCE = Path(__file__).resolve().parent / "kernels" / "features.tile"


def reference(x: np.ndarray, bias: float, flip: bool, nblocks: int, block_r: int):
    v = x.astype(np.float64)
    a = np.abs(v) + 1.0
    w = np.where(v > 0, np.sqrt(a), -np.log2(a))
    e = np.exp2(np.minimum(v, 4.0)) / a
    i = (v.astype(np.float32) * 8.0).astype(np.int32).astype(np.int64)  # truncation, like fptosi
    t = np.trunc(i / 3).astype(np.int64)
    q = t - 5 * np.trunc(t / 5).astype(np.int64) + (i >> 1) - (i << 1)  # // and % truncate
    y = w + e + q * 0.125 + bias
    if flip:
        y = -y
    if nblocks > 1:
        y = y + 0.5
    stats = np.stack([v.max(1), v.min(1), v.sum(1), (v > 0).sum(1)], axis=1)
    first = -(-x.shape[0] // block_r) * 1000 + max(x.shape[1], 3)
    return y, stats, v.sum(), first


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_features_match_numpy(arch: str, flip: bool) -> None:
    k = compile_source(SOURCE.read_text(), str(SOURCE), arch, {"FLIP": "true" if flip else "false"})
    rng = np.random.default_rng(3)
    rows, cols = 21, 50  # 2 row blocks of 16, the second partial; 50 of 64 columns
    x = (rng.standard_normal((rows, cols)) * 2).astype(np.float32)
    out = np.zeros_like(x)
    stats = np.zeros((rows, 4), np.float32)
    total = np.zeros(1, np.float32)
    first = np.zeros(1, np.int32)
    launch(k, x, out, stats, total, first, 0.25, device=EmulatorDevice(arch))
    y, st, tot, fi = reference(x, 0.25, flip, nblocks=2, block_r=16)
    np.testing.assert_allclose(out, y, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(stats, st, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(total[0], tot, rtol=1e-5, atol=1e-3)
    assert first[0] == fi


GRID3D = SOURCE.parent / "grid3d.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_program_ids_and_grid_sizes_on_every_axis(arch: str) -> None:
    """program_id and num_programs on each axis of a 3-D grid (num_programs reads the code
    object's hidden block counts, one u32 per axis)."""
    k = compile_source(GRID3D.read_text(), str(GRID3D), arch)
    gx, gy, gz = 3, 5, 2
    out = np.full((gx * gy * gz, 8), -7, np.int32)
    launch(k, out, gx, gy, gz, device=EmulatorDevice(arch))
    z, y, x = np.meshgrid(np.arange(gz), np.arange(gy), np.arange(gx), indexing="ij")
    want = np.stack([x.ravel(), y.ravel(), z.ravel()] + [np.full(x.size, n) for n in (gx, gy, gz)]
                    + [np.full(x.size, -1)] * 2, axis=1)
    np.testing.assert_array_equal(out, want)


BOOLS = SOURCE.parent / "bools.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_bool_tensors_hold_a_byte_per_element(arch: str) -> None:
    """Whole (vector) loads and stores of bools read and write a byte per element: as LLVM's
    `vector<N x i1>` they moved N packed bits, reading [1, 0, 0, ...] for [1, 1, 0, 0, 1, ...]."""
    k = compile_source(BOOLS.read_text(), str(BOOLS), arch, {})
    b = np.arange(64) % 3 != 0
    x = np.where(np.arange(64) % 4 < 2, 1.0, -1.0).astype(np.float32)
    out = np.zeros(64, bool)
    ints = np.full((3, 64), -7, np.int32)
    launch(k, b, x, out, ints, device=EmulatorDevice(arch))
    positive = x > 0
    np.testing.assert_array_equal(ints, np.stack([b, b & positive, positive | b]).astype(np.int32))
    np.testing.assert_array_equal(out.view(np.uint8), (~b).view(np.uint8))


COLUMN_REDUCE16 = SOURCE.parent / "column_reduce16.tile"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_16_bit_column_reductions(arch: str, dtype: str) -> None:
    """max/min of f16 and bf16 columns are exact, and their f32 sum within rounding (gfx950's
    permlane32 swap of 16-bit values was an invalid bitcast that crashed mlir-translate)."""
    import ml_dtypes

    k = compile_source(COLUMN_REDUCE16.read_text(), str(COLUMN_REDUCE16), arch, {"DT": dtype})
    npt = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    x = np.random.default_rng(5).standard_normal((64, 32)).astype(npt)
    r, s = np.zeros((2, 32), npt), np.zeros(32, np.float32)
    launch(k, x, r, s, device=EmulatorDevice(arch))
    np.testing.assert_array_equal(r.astype(np.float32), np.stack([x.max(0), x.min(0)]).astype(np.float32))
    np.testing.assert_allclose(s, x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)


F16_SUMS = SOURCE.parent / "f16_sums.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_sums_of_widened_f16_take_dot2(arch: str) -> None:
    """sum(cast(h, f32), axis) of an f16 tile takes one v_dot2_f32_f16 per pair of values (RDNA
    pairs them in v_dual_dot2acc_f32_f16, which the emulator lacked), with no conversions, and
    the sums are those of the exact values within f32 rounding, in both emulator modes."""
    k = compile_source(F16_SUMS.read_text(), str(F16_SUMS), arch, {})
    asm = str(k.asm)
    assert "v_cvt_f32_f16" not in asm
    threads = 2 * get_arch(arch).wave_size
    assert asm.count("dot2") >= 64 * 64 // threads, asm.count("dot2")  # a pair of each lane's values, both axes
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((64, 64)) * rng.choice([1e-3, 1.0, 300.0], (64, 64))).astype(np.float16)
    for lockstep in (False, True):
        rows, cols = np.zeros(64, np.float32), np.zeros(64, np.float32)
        launch(k, x, rows, cols, device=EmulatorDevice(arch, lockstep=lockstep))
        wide = x.astype(np.float64)
        np.testing.assert_allclose(rows, wide.sum(1), rtol=1e-6, atol=1e-4)
        np.testing.assert_allclose(cols, wide.sum(0), rtol=1e-6, atol=1e-4)


F32_SUMS = SOURCE.parent / "f32_sums.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_tree_sums(arch: str) -> None:
    """CompileOptions.tree_sums: a lane's f32 values summed as a tree, the same sums within f32
    rounding; RDNA pairs more of the adds in dual-issue instructions than a chain allows; CDNA's
    packed adds already sum as a tree, so its code is the same either way."""
    from tiledsl.options import CompileOptions

    kernels = [compile_source(F32_SUMS.read_text(), str(F32_SUMS), arch, {},
                              CompileOptions.make(arch, {}, tree_sums=tree), cache=None) for tree in (False, True)]
    x = np.random.default_rng(9).standard_normal((64, 64)).astype(np.float32)
    for k in kernels:
        rows, cols = np.zeros(64, np.float32), np.zeros(64, np.float32)
        launch(k, x, rows, cols, device=EmulatorDevice(arch))
        np.testing.assert_allclose(rows, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(cols, x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)
    chain, tree = (str(k.asm) for k in kernels)
    if get_arch(arch).packed_f32:
        assert chain == tree
    else:
        assert tree.count("v_dual_add_f32") > chain.count("v_dual_add_f32"), \
            (tree.count("v_dual_add_f32"), chain.count("v_dual_add_f32"))


F16_DIV = SOURCE.parent / "f16_div.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_f16_division(arch: str) -> None:
    """Quotients within one f16 rounding of the exact ones, and IEEE's special cases exactly
    (the emulator lacked v_div_fixup_f16)."""
    k = compile_source(F16_DIV.read_text(), str(F16_DIV), arch, {})
    inf, nan = np.inf, np.nan
    special_a = np.array([1, -1, 0, 0, inf, inf, 1, -2, nan, 3, 60000, 1e-4, -0.0, 5], np.float16)
    special_b = np.array([0, 0, 0, 5, inf, 2, inf, -inf, 1, nan, 0.01, 1e4, 3, -0.0], np.float16)
    rng = np.random.default_rng(6)
    a = np.concatenate([special_a, (rng.standard_normal(100) * 100).astype(np.float16)])
    b = np.concatenate([special_b, (rng.standard_normal(100) * 10).astype(np.float16)])
    q = np.zeros_like(a)
    launch(k, a, b, q, device=EmulatorDevice(arch))
    with np.errstate(all="ignore"):
        exact = a.astype(np.float64) / b.astype(np.float64)
        want = exact.astype(np.float16)
    n = len(special_a)
    np.testing.assert_array_equal(q[:n], want[:n])  # NaN where NaN, signed zeros and infinities
    assert np.array_equal(np.signbit(q[:n]), np.signbit(want[:n]))
    ulp = np.spacing(np.abs(want[n:]).astype(np.float16)).astype(np.float64)
    assert (np.abs(q[n:].astype(np.float64) - exact[n:]) <= ulp).all()


FOLDING = SOURCE.parent / "folding.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_folded_constants_equal_run_time_values(arch: str) -> None:
    """A folded expression equals the same one computed at run time: f32 rounding at each float
    step (double precision gave 16777218), shift counts modulo 32 (a folded 1 << 32 was 0, the
    hardware's 1)."""
    k = compile_source(FOLDING.read_text(), str(FOLDING), arch, {})
    f, i = np.zeros(2, np.float32), np.zeros(5, np.int32)
    launch(k, f, i, 16777216.0, 1.0, 3, 32, 33, device=EmulatorDevice(arch))
    assert f.tolist() == [16777216.0, 16777216.0]
    assert i.tolist() == [1, 3, 5 >> 1, 15 >> 1, -3]


LOOP_STEPS = SOURCE.parent / "loop_steps.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_run_time_loop_steps(arch: str) -> None:
    """Trip counts of range(lo, hi, step) with run-time bounds and steps; a step of 0 (which never
    ended) or below runs no iterations."""
    k = compile_source(LOOP_STEPS.read_text(), str(LOOP_STEPS), arch, {})
    dev = EmulatorDevice(arch)
    for lo, hi, step, want in ((0, 10, 3, 4), (-5, 5, 1, 10), (7, 3, 1, 0), (0, 10, 0, 0), (0, 10, -2, 0)):
        o = np.full(1, -1, np.int32)
        launch(k, o, lo, hi, step, device=dev)
        assert o[0] == want, (lo, hi, step)


NARROW = """kernel narrow(x: tensor[i32](64), o: tensor[i32](4, 64)) grid(1) waves(1) {
    let c = arange(0, 64);
    let v = load(x[c]);
    store(o[0, c], c // -3);
    store(o[1, c], (v & 255) // -3 + (v & 63) // 5);
    store(o[2, c], (c // -3) * 7 + (v & 127) % -7);
    store(o[3, c], maximum(minimum(v & 255, 100), 3) * (v & 15) + 11);
}
"""


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_arithmetic_llvm_narrows_to_16_bits(arch: str) -> None:
    """i32 arithmetic on values LLVM can bound to 16 bits runs as 16-bit instructions
    (v_ashrrev_i16 for a small range divided by a negative constant, 16-bit mads and min/max):
    the emulator runs them (it refused v_ashrrev_i16, so such a kernel failed at launch)."""
    k = compile_source(NARROW, "narrow.tile", arch)
    assert "v_ashrrev_i16" in k.asm  # the form this covers (LLVM 22 on every arch)
    x = np.random.default_rng(5).integers(-2**31, 2**31, 64, dtype=np.int64).astype(np.int32)
    out = np.zeros((4, 64), np.int32)
    launch(k, x, out, device=EmulatorDevice(arch))
    c, v = np.arange(64), x.astype(np.int64)

    def tdiv(a, b):  # the kernel language's // and % truncate toward zero
        return np.trunc(a / b).astype(np.int64)
    want = [tdiv(c, -3), tdiv(v & 255, -3) + tdiv(v & 63, 5),
            tdiv(c, -3) * 7 + ((v & 127) - -7 * tdiv(v & 127, -7)),
            np.maximum(np.minimum(v & 255, 100), 3) * (v & 15) + 11]
    np.testing.assert_array_equal(out, np.array(want))


INT_TO_BF16 = """kernel ibf(n: tensor[i32](64), o: tensor[bf16](2, 64)) grid(1) waves(1) {
    let c = arange(0, 64);
    store(o[0, c], cast(load(n[c]), bf16));
    store(o[1, c], full([64], cast(16842753, bf16), bf16));
}
"""


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_int_to_bf16_folds_as_it_runs(arch: str) -> None:
    """cast(i32, bf16) goes through f32 at run time; folded, LLVM rounded once: 2^24 + 2^16 + 1
    gave 16777216 computed and 16908288 folded. Both now round to f32 first, then to bf16 (the
    reference says so itself: ml_dtypes 0.7's astype from i32 rounds once)."""
    import ml_dtypes

    k = compile_source(INT_TO_BF16, "ibf.tile", arch)
    n = np.array([16842753, -16842753, 2**31 - 1, 3, -(2**31), 16908289] * 11, np.int32)[:64]
    out = np.zeros((2, 64), ml_dtypes.bfloat16)
    launch(k, n, out, device=EmulatorDevice(arch))
    twice = n.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(out[0].astype(np.float32), twice)
    assert (out[1].astype(np.float32) == 16777216.0).all()
