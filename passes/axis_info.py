"""Facts about i32/i1 tiles along their last axis, for vector memory access (like Triton's AxisInfo).

For a tile value v with last-axis size N, all powers of two:
  contig -- in every aligned group of `contig` elements along the last axis, values are consecutive
            (v[j + 1] = v[j] + 1): offsets that can be one vector access;
  const  -- in every aligned group of `const` elements, values are equal (a mask uniform over a
            vector);
  div    -- every group's first element is a multiple of `div` (the access's alignment).
Scalars have only `div`. Unknown values get the weakest facts (1, 1, 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from tiledsl.passes.common import constant_int, defining_op, is_tile, tile_shape

BIG = 1 << 30  # "divisible by anything we care about" (the constant 0)


@dataclass(frozen=True)
class AxisInfo:
    contig: int = 1
    const: int = 1
    div: int = 1


def _pow2(x: int) -> int:
    return BIG if x == 0 else min(abs(x) & -abs(x), BIG)


class AxisAnalysis:
    def __init__(self) -> None:
        self.memo: dict[ir.Value, AxisInfo] = {}

    def info(self, v: ir.Value) -> AxisInfo:
        if v not in self.memo:
            self.memo[v] = self._compute(v)
        return self.memo[v]

    def _compute(self, v: ir.Value) -> AxisInfo:
        op = defining_op(v)
        if op is None:
            return self._block_argument(v)
        n = tile_shape(v.type)[-1] if is_tile(v) and tile_shape(v.type) else 1
        name = op.name
        c = constant_int(v)
        if c is not None:
            return AxisInfo(1, n, _pow2(c))
        if name == "tile.arange":
            start = ir.IntegerAttr(op.attributes["start"]).value
            return AxisInfo(n, 1, _pow2(start))
        if name == "tile.splat":
            return AxisInfo(1, n, self.info(op.operands[0]).div)
        if name in ("tile.broadcast", "tile.convert_layout"):
            src = op.operands[0]
            if name == "tile.broadcast" and tile_shape(src.type)[-1] == 1 and n > 1:
                return AxisInfo(1, n, self._each(src))
            return self.info(src)
        if name == "tile.expand_dims":
            src = op.operands[0]
            if ir.IntegerAttr(op.attributes["axis"]).value == len(tile_shape(v.type)) - 1:
                return AxisInfo(1, 1, self._each(src))  # a new size-1 last axis
            return self.info(src)
        if name in ("arith.addi", "arith.subi"):
            a, b = self.info(op.operands[0]), self.info(op.operands[1])
            contig = max(min(a.contig, b.const), min(b.contig, a.const)) if name == "arith.addi" \
                else min(a.contig, b.const)
            return AxisInfo(contig, min(a.const, b.const), min(a.div, b.div))
        if name == "arith.muli":
            a, b = self.info(op.operands[0]), self.info(op.operands[1])
            ca, cb = constant_int(op.operands[0]), constant_int(op.operands[1])
            if cb == 1:
                return a
            if ca == 1:
                return b
            return AxisInfo(1, min(a.const, b.const), min(a.div * b.div, BIG))
        if name == "arith.cmpi" and (g := self._uniform_compare(op)) > 1:
            return AxisInfo(1, g, 1)
        if name in ("arith.minsi", "arith.maxsi"):  # each element is one of the operands' elements
            a, b = self.info(op.operands[0]), self.info(op.operands[1])
            return AxisInfo(1, min(a.const, b.const), min(a.div, b.div))
        if name in ("arith.andi", "arith.ori", "arith.xori", "arith.cmpi", "arith.cmpf", "arith.select"):
            infos = [self.info(x) for x in op.operands]
            return AxisInfo(1, min(i.const for i in infos), 1)
        return AxisInfo()

    def _block_argument(self, v: ir.Value) -> AxisInfo:
        """A loop's induction variable is lb + k * step: divisible by what divides both. Other
        block arguments (kernel arguments, loop-carried values) are unknown."""
        arg = ir.BlockArgument(v)
        parent = arg.owner.owner
        parent = getattr(parent, "operation", parent)
        if parent is None or parent.name != "scf.for" or arg.arg_number != 0:
            return AxisInfo()
        step = constant_int(parent.operands[2])
        if step is None:
            return AxisInfo()
        return AxisInfo(div=min(self.info(parent.operands[0]).div, _pow2(step)))

    def _uniform_compare(self, op: ir.Operation) -> int:
        """Groups over which `x < d` (or `x >= d`, `d > x`, `d <= x`) is uniform: x consecutive
        from a multiple of g in each group of g, and d constant there and a multiple of g, so no
        group straddles d (an index against a bound known to be a multiple of the vector)."""
        pred = ir.IntegerAttr(op.attributes["predicate"]).value
        # arith.cmpi predicates: slt 2, sle 3, sgt 4, sge 5, ult 6, ule 7, ugt 8, uge 9.
        if pred in (2, 5, 6, 9):
            x, d = self.info(op.operands[0]), self.info(op.operands[1])
        elif pred in (3, 4, 7, 8):
            d, x = self.info(op.operands[0]), self.info(op.operands[1])
        else:
            return 1
        return min(x.contig, x.div, d.const, d.div)

    def _each(self, v: ir.Value) -> int:
        """A power of two dividing every element of v (not just each group's first)."""
        i = self.info(v)
        return i.div if i.contig == 1 else 1
