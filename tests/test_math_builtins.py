"""exp, log, tanh, rsqrt on the emulator against numpy on every arch, and masks that a bool
constexpr switches off cost nothing (issue 15: kernels say what they mean)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.isa_stats import count_instructions
from tiledsl.launcher import launch
from tiledsl.options import CompileOptions

pytestmark = pytest.mark.emulator
SOURCE = Path(__file__).resolve().parent / "kernels" / "math_masks.tile"


@pytest.mark.parametrize("extra", [False, True])
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_math_builtins_match_numpy(arch: str, extra: bool) -> None:
    k = compile_source(SOURCE.read_text(), str(SOURCE), arch, {"EXTRA": str(extra).lower()})
    x = np.concatenate([np.linspace(-12, 12, 97), [1e-30, -1e-7, 0.124, 0.126, -0.125, 80.0, -80.0, 0.0]])
    x = x.astype(np.float32)
    n, limit = len(x), 90
    y = np.full((4, n), -7.0, np.float32)
    launch(k, x, y, limit, device=EmulatorDevice(arch))
    v = x.astype(np.float64)
    with np.errstate(divide="ignore"):
        want = np.stack([np.exp(v), np.log(np.abs(v)), np.tanh(v), 1 / np.sqrt(np.abs(v))])
    done = np.arange(n) < (limit if extra else n)
    np.testing.assert_array_equal(y[:, ~done], -7.0)  # the constexpr-enabled mask held them back
    got, ref = y[:, done].astype(np.float64), want[:, done]
    finite = np.isfinite(ref) & (np.abs(ref) < 3e38)
    rel = np.abs(got[finite] - ref[finite]) / np.maximum(np.abs(ref[finite]), 1e-300)
    assert rel.max() < 2e-6, rel.max()  # tanh keeps its relative accuracy near 0 (1e-30 -> 1e-30)
    assert np.array_equal(np.isinf(got[~finite]), np.isinf(ref[~finite]))  # log(0) = -inf, rsqrt(0) = inf


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_fma_rounds_once(arch: str) -> None:
    """fma(a, b, c) is a * b + c with one rounding: (1 + 2^-13)^2 - 1 keeps its 2^-26 term, which a
    multiply and an add (the product rounded to f32 first) lose."""
    path = SOURCE.parent / "fma.tile"
    k = compile_source(path.read_text(), str(path), arch)
    rng = np.random.default_rng(3)
    s = np.float32(1 + 2**-13)
    x = np.concatenate([[s, -s], rng.standard_normal(98)]).astype(np.float32)
    z = np.concatenate([[-1.0, 1.0], rng.standard_normal(98)]).astype(np.float32)
    y = np.zeros_like(x)
    launch(k, x, z, y, s, device=EmulatorDevice(arch))
    want = (x.astype(np.float64) * np.float64(s) + z.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(y, want)
    assert y[0] == np.float32(2**-12 + 2**-26) and y[0] != np.float32(x[0] * s) - 1  # fused, not rounded twice


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_a_mask_switched_off_by_a_constexpr_costs_nothing(arch: str) -> None:
    """`ok & where(EXTRA, i < limit, true)` with EXTRA false compiles to the code of `i < N` alone."""
    plain = SOURCE.read_text().replace("(i < N) & where(EXTRA, i < limit, true)", "i < N")
    folded = compile_source(SOURCE.read_text(), str(SOURCE), arch, {"EXTRA": "false"})
    direct = compile_source(plain, str(SOURCE), arch, {"EXTRA": "false"})
    assert count_instructions(folded.asm).mnemonics == count_instructions(direct.asm).mnemonics


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_tanh_approx(arch: str) -> None:
    """tanh(x, approx=true) is 1 - 2 / (exp2(2 x log2e) + 1) alone: absolute error about 1e-7,
    exact limits, NaN kept. In tanh(v * c, approx=true) with a scalar c, each element is multiplied
    once (by c * 2 log2e): fewer vector instructions than the same product with c as a tile."""
    path = SOURCE.parent / "tanh_approx.tile"
    # Row masks kept per lane (disjoint_rows=False): as tile.views (tiledsl/ir/row_view.py) the loads
    # and stores take gfx1100's VALU count where LLVM schedules the two kernels apart by more than
    # the multiply (140 vs 131), which is not what this compares.
    options = CompileOptions.make(arch, disjoint_rows=False)
    kernels = [compile_source(path.read_text(), str(path), arch, {"SCALAR": flag}, options=options)
               for flag in ("true", "false")]
    x = np.concatenate([np.linspace(-9, 9, 997), [1e-30, -1e-7, 0.0, 80.0, -80.0, np.inf, -np.inf, np.nan]])
    x = x.astype(np.float32)
    c = np.float32(-0.37)
    want = np.tanh(x.astype(np.float64) * np.float64(c))
    for k in kernels:
        y = np.zeros_like(x)
        launch(k, x, y, c, device=EmulatorDevice(arch))
        assert np.array_equal(np.isnan(y), np.isnan(want))
        ok = ~np.isnan(want)
        assert np.abs(y[ok] - want[ok]).max() < 1e-6
        assert set(y[np.abs(want) == 1]) <= {-1.0, 1.0}  # exact limits
    valu = [count_instructions(k.asm).classes["valu"] for k in kernels]
    assert valu[0] < valu[1], valu


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_row_sums_add_in_packed_pairs(arch: str) -> None:
    """A sum over values a lane holds is a tree of two-lane adds on archs with packed f32
    (v_pk_add_f32: about half the adds of a chain), a chain elsewhere; both match numpy."""
    path = SOURCE.parent / "row_sums.tile"
    k = compile_source(path.read_text(), str(path), arch)
    rng = np.random.default_rng(5)
    rows, cols = 37, 121  # partial row block and masked columns
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[3] = 0.0
    x[4, :] = 1e-3
    x[4, 7] = 3e4
    y = np.full(rows, -7.0, np.float32)
    launch(k, x, y, device=EmulatorDevice(arch))
    want = x.astype(np.float64).sum(axis=1)
    assert y[3] == 0.0
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(x).sum(axis=1).max())
    counts = count_instructions(k.asm).mnemonics
    packed = sum(n for name, n in counts.items() if name.startswith("v_pk_add_f32"))
    if get_arch(arch).packed_f32:
        assert packed > 0, counts
    else:
        assert packed == 0, counts


def _f16_toward_zero(x: np.ndarray) -> np.ndarray:
    """The bits of cast(x, f16, approx=true): nearest even, then one step toward zero where that
    went past x; a finite value past f16's range gives the largest finite f16 of its sign."""
    with np.errstate(over="ignore", invalid="ignore"):
        near = x.astype(np.float16)
    bits = near.view(np.uint16).copy()
    past = np.isfinite(x) & (np.abs(near.astype(np.float64)) > np.abs(x.astype(np.float64)))
    bits[past] -= 1  # the magnitude's bits, one step down
    return bits


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_cast_approx_rounds_f16_toward_zero(arch: str) -> None:
    """cast(x, f16, approx=true): toward zero, bit for bit, on every arch, one v_cvt_pkrtz_f16_f32
    per pair of a lane's values (nearest even takes three instructions a pair but on gfx950);
    subnormal results, infinities and NaNs included. approx=false rounds to nearest even."""
    path = SOURCE.parent / "round_f16.tile"
    kernels = {flag: compile_source(path.read_text(), str(path), arch, {"APPROX": flag}) for flag in ("true", "false")}
    rng = np.random.default_rng(12)
    special = np.array([1.00048828125, -1.00048828125, 1.0009765625, 65504.0, 65519.0, 65520.0, 1e6, -1e6,
                        np.inf, -np.inf, np.nan, 0.0, -0.0, 6.1e-5, 3e-8, -3e-8, 1e-40, 2.0**-24 * 1.5],
                       np.float32)
    x = np.concatenate([special, rng.standard_normal(1000).astype(np.float32) * np.float32(100.0),
                        (rng.random(1000) * 2.0**-14).astype(np.float32)])
    with np.errstate(over="ignore", invalid="ignore"):
        nearest_even = x.astype(np.float16).view(np.uint16)
    for flag, want in (("true", _f16_toward_zero(x)), ("false", nearest_even)):
        y, t, u = np.zeros(len(x), np.float16), np.zeros(1, np.float16), np.zeros(64, np.float16)
        launch(kernels[flag], x, y, special[0], t, u, device=EmulatorDevice(arch))
        keep = ~np.isnan(x)
        np.testing.assert_array_equal(y.view(np.uint16)[keep], want[keep])
        assert np.isnan(y[~keep]).all()
        assert t.view(np.uint16)[0] == want[0]  # the scalar path
        np.testing.assert_array_equal(u.view(np.uint16)[keep[:64]], want[:64][keep[:64]])  # one value a lane
    assert _f16_toward_zero(special[:2]).view(np.float16).tolist() == [1.0, -1.0]  # a tie goes to zero
    assert _f16_toward_zero(special[4:8]).view(np.float16).tolist() == [65504.0, 65504.0, 65504.0, -65504.0]
    pairs = [str(kernels[f].asm).count("_rtz_f16_f32") + str(kernels[f].asm).count("pkrtz_f16_f32")
             for f in ("true", "false")]
    assert pairs[0] >= 2 and pairs[1] == 0, pairs  # the tile's two pairs a lane, and the scalar


def _bf16_ties_away(x: np.ndarray) -> np.ndarray:
    """The bits of cast(x, bf16, approx=true): half a bf16 ulp added to the f32 bits, high half kept."""
    return ((x.view(np.uint32).astype(np.uint64) + 0x8000) >> 16).astype(np.uint16)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_cast_approx_rounds_bf16_ties_away(arch: str) -> None:
    """cast(x, bf16, approx=true): ties away from zero, bit for bit, where the arch has no bf16
    convert (fewer vector instructions than nearest even there); nearest even and the same code
    where it has one (gfx950). A tie is the only finite value that differs, infinities stay, and
    a NaN behaves as docs/language.md states."""
    import ml_dtypes

    path = SOURCE.parent / "round_bf16.tile"
    kernels = {flag: compile_source(path.read_text(), str(path), arch, {"APPROX": flag}) for flag in ("true", "false")}
    rng = np.random.default_rng(11)
    ties = np.array([0x3F808000, 0xBF808000, 0x3F818000, 0x00008000, 0x7F7F8000, 0x7F7F7FFF],
                    np.uint32).view(np.float32)
    # quiet NaNs of arithmetic and widened from bf16 (stay NaN), then ones that become infinities
    # and zeros (docs/language.md)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7FFF0000, 0xFF810000, 0x7F800001, 0xFF807FFF, 0x7FFFFFFF,
                     0x7FFF8000], np.uint32).view(np.float32)
    x = np.concatenate([ties, nans, np.array([np.inf, -np.inf, 0.0, -0.0, 1e-40, -3e38], np.float32),
                        rng.standard_normal(997).astype(np.float32) * np.float32(1e3),
                        rng.integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    with np.errstate(invalid="ignore"):  # the NaNs
        nearest_even = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    approx_bits = nearest_even if get_arch(arch).bf16_convert else _bf16_ties_away(x)
    for flag, want in (("true", approx_bits), ("false", nearest_even)):
        y = np.zeros(len(x), ml_dtypes.bfloat16)
        t = np.zeros(1, ml_dtypes.bfloat16)
        launch(kernels[flag], x, y, ties[0], t, device=EmulatorDevice(arch))
        got = y.view(np.uint16)
        exact = flag == "true" and not get_arch(arch).bf16_convert  # NaNs too; nearest even: any NaN
        keep = ~np.isnan(x) | exact
        np.testing.assert_array_equal(got[keep], want[keep])
        assert exact or np.isnan(y[np.isnan(x)].astype(np.float32)).all()
        assert t.view(np.uint16)[0] == want[0]  # the scalar path
    assert _bf16_ties_away(ties[:1])[0] == 0x3F81 and nearest_even[0] == 0x3F80  # the tie itself
    approx_nan = _bf16_ties_away(nans).view(ml_dtypes.bfloat16).astype(np.float32)
    assert np.isnan(approx_nan[:4]).all() and np.isinf(approx_nan[4:6]).all() and (approx_nan[6:] == 0).all()
    valu = [count_instructions(kernels[f].asm).classes["valu"] for f in ("true", "false")]
    if get_arch(arch).bf16_convert:
        assert kernels["true"].asm == kernels["false"].asm
    else:
        assert valu[0] < valu[1], valu
