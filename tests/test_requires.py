"""requires(...): kernel preconditions the launcher checks (and divisibility the compiler uses)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.errors import SourceError
from tiledsl.lang.checker import bind
from tiledsl.lang.parser import parse
from tiledsl.launcher import launch

pytestmark = pytest.mark.emulator
SOURCE = Path(__file__).resolve().parent / "kernels" / "requires.tile"


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_requirements_are_checked_before_the_launch(arch: str) -> None:
    k = compile_source(SOURCE.read_text(), str(SOURCE), arch)
    assert k.manifest["requires"] == ["(COLS <= 128)", "(COLS % 4 == 0)", "((limit > 0) and (limit <= COLS))"]
    assert k.manifest["dim_units"] == {"COLS": 4}  # requires(COLS % 4 == 0): passed in units of 4
    dev = EmulatorDevice(arch)
    x = np.random.default_rng(0).random((3, 100), np.float32)
    y = np.zeros_like(x)
    launch(k, x, y, 60, device=dev)
    np.testing.assert_array_equal(y[:, :60], 2 * x[:, :60])
    assert not y[:, 60:].any()
    for shape, limit, message in (
            ((3, 200), 5, r"rows\(\) requires \(COLS <= 128\), but COLS = 200 \(from x.shape\[1\]\)"),
            ((3, 98), 5, r"rows\(\) requires \(COLS % 4 == 0\), but COLS = 98"),
            ((3, 100), 0, r"requires \(\(limit > 0\) and \(limit <= COLS\)\), but COLS = 100 .*, limit = 0")):
        with pytest.raises(ValueError, match=message):
            launch(k, np.zeros(shape, np.float32), np.zeros(shape, np.float32), limit, device=dev)
    assert dev.launches == [] or len(dev.launches) == 1  # the refused calls never launched


def test_requirements_fold_with_the_constexprs() -> None:
    kernel = parse(SOURCE.read_text(), str(SOURCE))
    bound = bind(kernel, {"BLOCK_C": 256}, get_arch("gfx942"))
    assert len(bound.kernel.requires) == 3 and bound.dim_units == {"COLS": 4}
    src = "kernel k[B: int = 64](x: tensor[f32](N)) grid(1) requires(B >= 128, N % 3 == 0) {\n}\n"
    with pytest.raises(SourceError) as err:
        bind(parse(src, "k.tile"), {}, get_arch("gfx942"))
    assert err.value.message == "this kernel requires a condition that is false for this variant (B=64)"
    assert (err.value.loc.line, err.value.loc.col) == (1, 59)
    bound = bind(parse(src, "k.tile"), {"B": 128}, get_arch("gfx942"))
    assert len(bound.kernel.requires) == 1 and bound.dim_units == {}  # 3 is not a power of two: checked only


def test_bool_constexprs_fold_out_of_and_or() -> None:
    """`PAD or N == 64`: nothing to check with PAD, the comparison without it (and/or with a
    compile-time operand fold away, so the rest can go to the manifest)."""
    from tiledsl.grid import render_condition

    src = ("kernel k[PAD: bool = false, D: int = 64](x: tensor[f32](N)) grid(1)\n"
           "  requires(PAD or N == D, not PAD or N > 0, N <= 4096 or PAD) {\n}\n")
    for pad, want in ((False, ["(N == 64)", "(N <= 4096)"]), (True, ["(N > 0)"])):
        bound = bind(parse(src, "k.tile"), {"PAD": pad}, get_arch("gfx1201"))
        assert [render_condition(r) for r in bound.kernel.requires] == want, pad


@pytest.mark.parametrize("cond,message", [
    ("x", "requires(...) cannot use 'x' (a tensor argument)"),
    ("N + 1", "requires(...) takes conditions (i1 scalars such as N % 8 == 0 or M <= 4096), got i32 scalar"),
    ("load(x[0]) > 0.0", "requires(...) cannot"),
    ("alpha > 1.0", "requires(...) compares i32 values (shape symbols, i32 arguments, constants); 'alpha' is f32"),
])
def test_bad_requirements(cond: str, message: str) -> None:
    src = f"kernel k(x: tensor[f32](N), alpha: f32) grid(1) requires({cond}) {{\n}}\n"
    with pytest.raises(SourceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bind(parse(src, "k.tile"), {}, get_arch("gfx942"))


TRUNCATING = """
kernel k(x: tensor[i32](N), y: tensor[i32](M)) grid((N - 8) // 2 + 4) requires((N - 8) % 4 == -3, M % 4 == 0) {
    let i = arange(0, 64);
    store(x[i], i * 0 + 7, mask=i < N);
}
"""


def test_host_formulas_truncate_like_the_kernel_language() -> None:
    """The kernel language's // and % truncate toward zero; the manifest's formulas are evaluated
    with flooring ones (Python's, csrc/grid.c's). Where an operand may be negative the compiler
    writes the truncating forms: at N = 1, (N - 8) // 2 + 4 is 1 workgroup (flooring: 0, and the
    kernel never ran) and (N - 8) % 4 == -3 holds (flooring: refused). Sizes keep the plain form."""
    k = compile_source(TRUNCATING, "trunc.tile", "gfx942")
    assert k.manifest["grid"][0] == "(N - 8) / 2 + 4"
    assert k.manifest["requires"] == ["((N - 8) - 4 * ((N - 8) / 4) == -3)", "(M % 4 == 0)"]
    x, y = np.zeros(1, np.int32), np.zeros(4, np.int32)
    launch(k, x, y, device=EmulatorDevice("gfx942"))
    assert x.tolist() == [7]


def test_a_formula_too_long_for_the_launcher_is_a_located_error() -> None:
    """The launchers read formulas of at most 2000 characters: a longer grid is refused where it is
    written (it compiled, and then no launcher could load it)."""
    terms = " + ".join(["N"] * 600)  # nested 600 deep: under the parser's limit of 1000
    src = (f"kernel k(x: tensor[f32](N)) grid(cdiv({terms}, 64)) {{\n"
           "    store(x[arange(0, 64)], zeros([64], f32));\n}\n")
    with pytest.raises(SourceError, match=r"long.tile:1:34: error: this grid expression is 2407 characters as a host "
                                          r"formula, more than the 2000 a launcher reads") as info:
        compile_source(src, "long.tile", "gfx942")
    assert "^" in str(info.value)

