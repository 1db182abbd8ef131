"""Unit tests of passes/axis_info.py: the contiguity, uniformity and divisibility facts that decide
vector widths and mask tests in lower-to-gpu, on small hand-written tile IR."""

from __future__ import annotations

import pytest
from mlir import ir

from tiledsl.ir.dialect import new_context
from tiledsl.passes.axis_info import BIG, AxisAnalysis, AxisInfo
from tiledsl.passes.common import kernel_funcs, ops_in, walk_blocks

pytestmark = pytest.mark.passes

# Each value to check is the result of an op whose `name` attribute labels it (the analysis
# ignores unknown attributes).
SOURCE = """
module attributes {tile.arch = "gfx942"} {
  func.func @k(%n: i32) attributes {tile.kernel, tile.waves = 1 : i32} {
    %c8 = arith.constant 8 : i32
    %c0 = arith.constant 0 : i32
    %c16 = arith.constant 16 : i32
    %a = "tile.arange"() {start = 0 : i32, name = "arange"} : () -> tensor<64xi32>
    %a16 = "tile.arange"() {start = 16 : i32, name = "arange16"} : () -> tensor<64xi32>
    %s8 = "tile.splat"(%c8) {name = "splat8"} : (i32) -> tensor<64xi32>
    %sn = "tile.splat"(%n) {name = "splatn"} : (i32) -> tensor<64xi32>
    %n8 = arith.muli %n, %c8 {name = "n8"} : i32
    %sn8 = "tile.splat"(%n8) {name = "splatn8"} : (i32) -> tensor<64xi32>
    %sum = arith.addi %a16, %s8 {name = "arange16+8"} : tensor<64xi32>
    %diff = arith.subi %s8, %a {name = "8-arange"} : tensor<64xi32>
    %prod = arith.muli %a, %s8 {name = "arange*8"} : tensor<64xi32>
    %one = arith.constant {name = "ones"} dense<1> : tensor<64xi32>
    %same = arith.muli %a16, %one {name = "arange16*1"} : tensor<64xi32>
    %lt_n = arith.cmpi slt, %a, %sn {name = "arange<n"} : tensor<64xi32>
    %lt_n8 = arith.cmpi slt, %a, %sn8 {name = "arange<8n"} : tensor<64xi32>
    %ge_n8 = arith.cmpi sle, %sn8, %a {name = "8n<=arange"} : tensor<64xi32>
    %eq = arith.cmpi eq, %a, %sn8 {name = "arange==8n"} : tensor<64xi32>
    %both = arith.andi %lt_n8, %ge_n8 {name = "and"} : tensor<64xi1>
    %row = "tile.expand_dims"(%a) {axis = 0 : i32, name = "row"} : (tensor<64xi32>) -> tensor<1x64xi32>
    %rows = "tile.broadcast"(%row) {name = "rows"} : (tensor<1x64xi32>) -> tensor<32x64xi32>
    %col = "tile.expand_dims"(%s8) {axis = 1 : i32, name = "col"} : (tensor<64xi32>) -> tensor<64x1xi32>
    %cols = "tile.broadcast"(%col) {name = "cols"} : (tensor<64x1xi32>) -> tensor<64x64xi32>
    %acol = "tile.expand_dims"(%a) {axis = 1 : i32, name = "arange-col"} : (tensor<64xi32>) -> tensor<64x1xi32>
    scf.for %i = %c0 to %n step %c16 : i32 {
      %iv = "tile.splat"(%i) {name = "splat-iv"} : (i32) -> tensor<64xi32>
      %off = arith.addi %iv, %a {name = "iv+arange"} : tensor<64xi32>
    }
    return
  }
}
"""


@pytest.fixture(scope="module")
def infos() -> dict[str, AxisInfo]:
    with new_context(), ir.Location.unknown():
        module = ir.Module.parse(SOURCE)
        analysis = AxisAnalysis()
        out = {}
        for fn in kernel_funcs(module):
            for block in walk_blocks(fn):
                for op in ops_in(block):
                    if "name" in op.attributes:
                        out[ir.StringAttr(op.attributes["name"]).value] = analysis.info(op.results[0])
        return out


@pytest.mark.parametrize("name, expected", [
    ("arange", AxisInfo(64, 1, BIG)),           # 0, 1, 2, ...: one run, starts at 0
    ("arange16", AxisInfo(64, 1, 16)),
    ("splat8", AxisInfo(1, 64, 8)),
    ("splatn", AxisInfo(1, 64, 1)),             # an unknown scalar: uniform, nothing known to divide it
    ("n8", AxisInfo(1, 1, 8)),                  # scalars carry only div
    ("splatn8", AxisInfo(1, 64, 8)),
    ("arange16+8", AxisInfo(64, 1, 8)),         # consecutive + uniform stays consecutive
    ("8-arange", AxisInfo(1, 1, 8)),            # uniform - consecutive descends: not contiguous
    ("arange*8", AxisInfo(1, 1, BIG)),          # strided: no longer one vector
    ("arange16*1", AxisInfo(64, 1, 16)),        # times 1 keeps every fact
    ("arange<n", AxisInfo(1, 1, 1)),            # a bound not known to be a multiple of anything
    ("arange<8n", AxisInfo(1, 8, 1)),           # a multiple of 8: uniform over aligned groups of 8
    ("8n<=arange", AxisInfo(1, 8, 1)),          # the same test written the other way round
    ("arange==8n", AxisInfo(1, 1, 1)),          # equality picks single elements
    ("and", AxisInfo(1, 8, 1)),
    ("rows", AxisInfo(64, 1, BIG)),             # a row broadcast down keeps its last-axis facts
    ("cols", AxisInfo(1, 64, 8)),               # a column broadcast across is uniform along rows
    ("arange-col", AxisInfo(1, 1, 1)),          # a new size-1 last axis: only what divides every value
    ("splat-iv", AxisInfo(1, 64, 16)),          # 0 + k * 16
    ("iv+arange", AxisInfo(64, 1, 16)),
])
def test_axis_facts(infos: dict[str, AxisInfo], name: str, expected: AxisInfo) -> None:
    assert infos[name] == expected
