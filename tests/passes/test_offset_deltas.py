"""Unit tests of passes/offset_deltas.py: the per-axis coefficients of an offsets tile, which split a
view access's offsets into one VGPR per lane and a uniform distance per vector (lower-to-gpu)."""

from __future__ import annotations

import pytest
from mlir import ir

from tiledsl.ir.dialect import new_context
from tiledsl.passes.common import kernel_funcs, ops_in, walk_blocks
from tiledsl.passes.offset_deltas import coefficients, register_delta

pytestmark = pytest.mark.passes

# Each value to check is the result of an op whose `name` attribute labels it.
SOURCE = """
module attributes {tile.arch = "gfx942"} {
  func.func @k(%s: i32, %t: i32, %p: !llvm.ptr<1>) attributes {tile.kernel, tile.waves = 1 : i32} {
    %c3 = arith.constant 3 : i32
    %rows = "tile.arange"() {start = 5 : i32} : () -> tensor<16xi32>
    %cols = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32>
    %r1 = "tile.expand_dims"(%rows) {axis = 1 : i32} : (tensor<16xi32>) -> tensor<16x1xi32>
    %r2 = "tile.broadcast"(%r1) : (tensor<16x1xi32>) -> tensor<16x32xi32>
    %c1 = "tile.expand_dims"(%cols) {axis = 0 : i32} : (tensor<32xi32>) -> tensor<1x32xi32>
    %c2 = "tile.broadcast"(%c1) : (tensor<1x32xi32>) -> tensor<16x32xi32>
    %ss = "tile.splat"(%s) : (i32) -> tensor<16x32xi32>
    %st = "tile.splat"(%t) : (i32) -> tensor<16x32xi32>
    %s3 = "tile.splat"(%c3) : (i32) -> tensor<16x32xi32>
    %rs = arith.muli %r2, %ss : tensor<16x32xi32>
    %off = arith.addi %rs, %c2 {name = "rows*s+cols"} : tensor<16x32xi32>
    %rst = arith.muli %rs, %st : tensor<16x32xi32>
    %rev = arith.subi %s3, %c2 : tensor<16x32xi32>
    %mixed = arith.addi %rst, %rev {name = "rows*s*t+3-cols"} : tensor<16x32xi32>
    %c3t = arith.muli %s3, %c2 : tensor<16x32xi32>
    %moved = arith.addi %c3t, %st {name = "3*cols+t"} : tensor<16x32xi32>
    %sq = arith.muli %r2, %c2 {name = "rows*cols"} : tensor<16x32xi32>
    %div = arith.divsi %r2, %s3 {name = "rows/3"} : tensor<16x32xi32>
    %flat = arith.addi %ss, %st {name = "s+t"} : tensor<16x32xi32>
    %fv = arith.divsi %flat, %s3 {name = "(s+t)/3"} : tensor<16x32xi32>
    return
  }
}
"""


@pytest.fixture(scope="module")
def found() -> dict[str, object]:
    with new_context(), ir.Location.unknown():
        module = ir.Module.parse(SOURCE)
        out: dict[str, object] = {}
        for fn in kernel_funcs(module):
            names = {str(a): f"%{n}" for a, n in zip(fn.regions[0].blocks[0].arguments, "st", strict=False)}
            for block in walk_blocks(fn):
                for op in ops_in(block):
                    if "name" in op.attributes:
                        c = coefficients(op.results[0])
                        # Scalars by name, so the result outlives the context.
                        out[ir.StringAttr(op.attributes["name"]).value] = None if c is None else {
                            axis: {tuple(names.get(str(s), "?") for s in mono): k for mono, k in terms.items()}
                            for axis, terms in c.items()}
        return out


def test_row_offsets_take_the_stride_on_the_row_axis(found) -> None:
    assert found["rows*s+cols"] == {0: {("%s",): 1}, 1: {(): 1}}


def test_products_of_scalars_and_negative_constants(found) -> None:
    assert found["rows*s*t+3-cols"] == {0: {("%s", "%t"): 1}, 1: {(): -1}}
    assert found["3*cols+t"] == {1: {(): 3}}


def test_uniform_functions_have_no_coefficients(found) -> None:
    assert found["s+t"] == {}
    assert found["(s+t)/3"] == {}


def test_non_affine_offsets_are_not_split(found) -> None:
    assert found["rows*cols"] is None
    assert found["rows/3"] is None


def test_register_delta_splits_constants_from_scalars() -> None:
    with new_context(), ir.Location.unknown():
        module = ir.Module.parse(SOURCE)
        fn = kernel_funcs(module)[0]
        op = next(op for b in walk_blocks(fn) for op in ops_in(b)
                  if "name" in op.attributes and ir.StringAttr(op.attributes["name"]).value == "rows*s*t+3-cols")
        c = coefficients(op.results[0])
        assert c is not None
        constant, scalars = register_delta(c, [4, 8])
        assert constant == -8
        assert list(scalars.values()) == [4] and len(next(iter(scalars))) == 2
        assert register_delta(c, [0, 0]) == (0, {})
