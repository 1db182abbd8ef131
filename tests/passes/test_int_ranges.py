"""Unit tests of passes/int_ranges.py: compile-time bounds of i32 values (never a guess about
wrapping) and the loop-index limits fold-scalars' clamp rewrite relies on, on hand-written IR."""

from __future__ import annotations

import pytest
from mlir import ir

from tiledsl.ir.dialect import new_context
from tiledsl.passes.common import as_operation, kernel_funcs, ops_in, walk_blocks
from tiledsl.passes.int_ranges import FULL, I32_MAX, IntRanges, loop_index_of

pytestmark = pytest.mark.passes

# %n (argument 0) is one the launchers check is not negative; %m (argument 1) is not.
SOURCE = """
module attributes {tile.arch = "gfx942"} {
  func.func @k(%n: i32, %m: i32, %p: !llvm.ptr<1>) attributes {tile.kernel, tile.waves = 1 : i32,
      tile.nonnegative_args = array<i32: 0>} {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c32 = arith.constant 32 : i32
    %big = arith.constant 2147483000 : i32
    %true = arith.constant true
    %a = "tile.arange"() {start = 0 : i32, name = "arange"} : () -> tensor<32xi32>
    %loaded = "tile.load"(%p, %c0, %true, %c0) {name = "loaded"} : (!llvm.ptr<1>, i32, i1, i32) -> i32
    %n1 = arith.subi %n, %c1 {name = "n-1"} : i32
    %wraps = arith.addi %n, %big {name = "n+big"} : i32
    %q = arith.divsi %n, %c32 {name = "n/32"} : i32
    %q32 = arith.muli %q, %c32 {name = "n/32*32"} : i32
    %low = arith.maxsi %m, %c0 {name = "max(m,0)"} : i32
    %pid = "tile.program_id"() {axis = 0 : i32, name = "pid"} : () -> i32
    %live = arith.cmpi slt, %pid, %n : i32
    %bound = arith.minsi %m, %loaded {name = "min(m,loaded)"} : i32
    %end = arith.select %live, %bound, %c0 {name = "end"} : i32
    %masked = arith.andi %m, %c32 {name = "m&32"} : i32
    scf.for %i = %low to %end step %c32 : i32 {
      %s = "tile.splat"(%i) {name = "splat-i"} : (i32) -> tensor<32xi32>
      %rows = arith.addi %s, %a {name = "i+arange"} : tensor<32xi32>
    }
    scf.for %j = %m to %n step %c32 : i32 {
      %j1 = arith.addi %j, %c1 {name = "j+1"} : i32
    }
    %n1_left = arith.addi %c1, %q {name = "1+n/32"} : i32
    scf.for %k = %c0 to %n1_left step %c32 : i32 {
    }
    return
  }
}
"""


@pytest.fixture(scope="module")
def analysed() -> tuple[dict[str, tuple[int, int]], list[dict[str, int]]]:
    with new_context(), ir.Location.unknown():
        module = ir.Module.parse(SOURCE)
        fn = kernel_funcs(module)[0]
        ranges = IntRanges(fn)
        found, limits = {}, []
        for block in walk_blocks(fn):
            for op in ops_in(block):
                if "name" in op.attributes:
                    found[ir.StringAttr(op.attributes["name"]).value] = ranges.of(op.results[0])
                if op.name == "scf.for":
                    index = op.regions[0].blocks[0].arguments[0]
                    assert as_operation(loop_index_of(index)) == op
                    names = {}
                    for v, k in ranges.index_limits(op).items():
                        owner = v.owner
                        if isinstance(owner, ir.Block):
                            names[f"arg{v.arg_number}"] = k
                        elif "name" in owner.attributes:
                            names[ir.StringAttr(owner.attributes["name"]).value] = k
                    limits.append(names)
        return found, limits


@pytest.mark.parametrize(("name", "want"), [
    ("arange", (0, 31)),
    ("loaded", FULL),
    ("n-1", (-1, I32_MAX - 1)),
    ("n+big", FULL),                   # could wrap: the whole range, not a wrapped interval
    ("n/32", (0, I32_MAX // 32)),
    ("n/32*32", (0, I32_MAX // 32 * 32)),
    ("max(m,0)", (0, I32_MAX)),
    ("pid", (0, I32_MAX)),
    ("end", FULL),                      # a select: both choices' bounds
    ("m&32", (0, 32)),
    ("splat-i", (0, I32_MAX - 32)),     # the index: from the start, below 2^31 - step
    ("i+arange", (0, I32_MAX - 1)),     # so this sum cannot wrap
    ("j+1", (FULL[0] + 1, I32_MAX - 31)),  # j in [m, 2^31 - 1 - 32] with m unknown: j + 1 cannot wrap
])
def test_bounds(analysed, name: str, want: tuple[int, int]) -> None:
    found, _ = analysed
    assert found[name] == want


def test_index_limits(analysed) -> None:
    """In the first loop, i < end = select(live, min(m, loaded), 0): the choice 0 leaves the loop
    empty (it starts at max(m, 0) >= 0), so i <= m - 1 and i <= loaded - 1. The second loop's
    index is below its end, the argument %n; the third's below 1 + n/32 (a constant on the left,
    a sum that cannot wrap), so at most n/32."""
    _, limits = analysed
    assert limits[0] == {"end": -1, "min(m,loaded)": -1, "arg1": -1, "loaded": -1}
    assert limits[1] == {"arg0": -1}
    assert limits[2] == {"1+n/32": -1, "n/32": 0}
