"""Compile-time bounds of i32 values, and what a loop's bounds say about its index.

`IntRanges.of(v)` is an interval [lo, hi] that holds every value v (every element of a tile) can
take, wherever v is defined. Integer arithmetic in the language wraps, so a node whose exact
result could leave the i32 range gets the whole range: bounds are never a guess about wrapping.
Sources of knowledge: constants, aranges, kernel arguments the launchers check are not negative
(`tile.nonnegative_args`), program ids, minimum/maximum, quotients by a positive divisor, and a
loop's index, which lies between the loop's bounds and, by the language's loop precondition
(docs/language.md: the index must not pass 2^31 - 1), at most 2^31 - 1 - step.

Inside a loop's body the index is also below the upper bound itself, a relation no interval
holds: `index_limits` lists the values the index is provably below (each with an offset), which
lets a pass show that `seqlen - 1 - index` cannot wrap when the loop ends at `min(.., seqlen)`.
"""

from __future__ import annotations

from mlir import ir

from tiledsl.passes.common import as_operation, defining_op, uniform_constant_int
from tiledsl.passes.offset_deltas import nonnegative_args

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
FULL = (I32_MIN, I32_MAX)
Range = tuple[int, int]
_PASS_THROUGH = ("tile.splat", "tile.broadcast", "tile.expand_dims", "tile.convert_layout")


def _fit(lo: int, hi: int) -> Range:
    """[lo, hi] if every value in it is an i32 (no wrap), else the whole range."""
    return (lo, hi) if I32_MIN <= lo <= hi <= I32_MAX else FULL


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def loop_index_of(v: ir.Value) -> ir.Operation | None:
    """The scf.for whose induction variable v is (with a positive constant step), or None."""
    if not isinstance(v, ir.BlockArgument) or v.arg_number != 0:
        return None
    loop = as_operation(v.owner.owner)
    if loop is None or loop.name != "scf.for":
        return None
    step = uniform_constant_int(loop.operands[2])
    return loop if step is not None and step > 0 else None


def constant_offset(v: ir.Value) -> tuple[ir.Value, int] | None:
    """(x, k) where v is `x + k` or `x - k` written with a constant k (an i32 op: it may wrap), or
    None."""
    op = defining_op(v)
    if op is None or op.name not in ("arith.addi", "arith.subi"):
        return None
    a, b = op.operands
    k = uniform_constant_int(b)
    if k is not None:
        return a, (k if op.name == "arith.addi" else -k)
    k = uniform_constant_int(a)
    return (b, k) if k is not None and op.name == "arith.addi" else None


class IntRanges:
    """Bounds of the i32 values of one kernel function (memoized)."""

    def __init__(self, fn: ir.Operation):
        self.fn = fn
        self.nonnegative = nonnegative_args(fn)
        self.memo: dict[ir.Value, Range] = {}

    def of(self, v: ir.Value) -> Range:
        if v not in self.memo:
            self.memo[v] = self._compute(v)
        return self.memo[v]

    def _compute(self, v: ir.Value) -> Range:
        c = uniform_constant_int(v)
        if c is not None:
            return c, c
        op = defining_op(v)
        if op is None:
            return self._block_argument(v)
        name = op.name
        if name == "tile.arange":
            start = ir.IntegerAttr(op.attributes["start"]).value
            return _fit(start, start + ir.RankedTensorType(v.type).shape[0] - 1)
        if name in _PASS_THROUGH:
            return self.of(op.operands[0])
        if name == "tile.program_id":
            return 0, I32_MAX
        if name == "arith.select":
            (alo, ahi), (blo, bhi) = self.of(op.operands[1]), self.of(op.operands[2])
            return min(alo, blo), max(ahi, bhi)
        if name not in _BINARY:
            return FULL
        return _BINARY[name](self.of(op.operands[0]), self.of(op.operands[1]))

    def _block_argument(self, v: ir.BlockArgument) -> Range:
        owner = as_operation(v.owner.owner)
        if owner is not None and owner.name == "func.func":
            return (0, I32_MAX) if v.arg_number in self.nonnegative else FULL
        loop = loop_index_of(v)
        if loop is None:
            return FULL  # a loop-carried value, or another region's argument
        step = uniform_constant_int(loop.operands[2])
        lo = self.of(loop.operands[0])[0]
        hi = min(self.of(loop.operands[1])[1] - 1, I32_MAX - step)
        return lo, max(lo, hi)

    def index_limits(self, loop: ir.Operation) -> dict[ir.Value, int]:
        """{x: k} such that, inside `loop`'s body, its index is at most x + k. From the upper bound
        (index <= ub - 1) through minima (below both operands), constant offsets, and selects (below
        both choices, or the one choice left when the other would leave the loop empty)."""
        limits: dict[ir.Value, int] = {}
        lb_lo = self.of(loop.operands[0])[0]

        def below(x: ir.Value, k: int, depth: int) -> None:
            if x in limits and limits[x] <= k:
                return
            limits[x] = k
            op = defining_op(x)
            if op is None or depth > 16:
                return
            if op.name == "arith.minsi":
                for operand in op.operands:
                    below(operand, k, depth + 1)
            elif constant_offset(x) is not None and self._exact(op):
                y, c = constant_offset(x)
                below(y, k + c, depth + 1)
            elif op.name == "arith.select":
                a, b = op.operands[1], op.operands[2]
                if self.of(b)[1] <= lb_lo:  # choosing b leaves the loop empty: in the body, a
                    below(a, k, depth + 1)
                elif self.of(a)[1] <= lb_lo:
                    below(b, k, depth + 1)

        below(loop.operands[1], -1, 0)
        return limits

    def _exact(self, op: ir.Operation) -> bool:
        """The sum or difference cannot wrap (its bounds are not the whole range from wrapping)."""
        return self.of(op.result) != FULL


def _add(a: Range, b: Range) -> Range:
    return _fit(a[0] + b[0], a[1] + b[1])


def _sub(a: Range, b: Range) -> Range:
    return _fit(a[0] - b[1], a[1] - b[0])


def _mul(a: Range, b: Range) -> Range:
    corners = [x * y for x in a for y in b]
    return _fit(min(corners), max(corners))


def _div(a: Range, b: Range) -> Range:
    if b[0] <= 0:
        return FULL  # a zero divisor is undefined, INT_MIN / -1 wraps
    corners = [_trunc_div(x, y) for x in a for y in b]
    return min(corners), max(corners)


def _and(a: Range, b: Range) -> Range:
    """x & y with either known not negative lies in [0, that one's bound]."""
    bounds = [r[1] for r in (a, b) if r[0] >= 0]
    return (0, min(bounds)) if bounds else FULL


_BINARY = {
    "arith.addi": _add,
    "arith.subi": _sub,
    "arith.muli": _mul,
    "arith.divsi": _div,
    "arith.minsi": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "arith.maxsi": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    "arith.andi": _and,
}
