"""How far each register's offset lies past the lane's first, as uniform values.

A tile of offsets that is affine in the element's coordinates, with coefficients that are the same
in every lane (integer constants and products of scalars: `rows[:, None] * stride + cols[None, :]`),
differs between two registers of a lane by the same amount in every lane: layouts are linear, so a
register's coordinate is the lane's base plus a constant of the register (passes/layouts.py). For a
buffer access (passes/lower_memory.py) that amount can go into the instruction's scalar offset
while one VGPR offset serves all the lane's registers: LLVM otherwise holds one VGPR per vector
access when the offsets are loop-invariant (docs/compiler.md, "Row masks as buffer bounds").
"""

from __future__ import annotations

from mlir import ir

from tiledsl.ir.dialect import int_attr
from tiledsl.passes.common import defining_op, is_tile, splat_scalar, tile_shape, uniform_constant_int

Monomial = tuple[ir.Value, ...]  # a product of scalars (tile IR); () is the integer 1
Coefficients = dict[int, dict[Monomial, int]]  # axis of the accessed tile -> its coefficient

_MAX_DEPTH = 48  # deeper offset expressions are left as they are (no recursion limit to meet)


def coefficients(offsets: ir.Value) -> Coefficients | None:
    """The offsets tile's coefficient on each axis of its shape, or None where it is not affine
    with uniform coefficients in the forms known here (aranges, splats, integer constants, sums,
    products by a uniform factor, and the shape ops between them)."""
    if not is_tile(offsets) or not isinstance(ir.RankedTensorType(offsets.type).element_type, ir.IntegerType):
        return None
    return _coefficients(offsets, list(range(len(tile_shape(offsets.type)))), 0)


def _scaled(c: Coefficients, factor: int | ir.Value) -> Coefficients:
    out: Coefficients = {}
    for axis, terms in c.items():
        for mono, k in terms.items():
            key, k2 = (mono, k * factor) if isinstance(factor, int) else (mono + (factor,), k)
            if k2:
                out.setdefault(axis, {})[key] = out.get(axis, {}).get(key, 0) + k2
    return out


def _sum(a: Coefficients, b: Coefficients, sign: int) -> Coefficients:
    out = {axis: dict(terms) for axis, terms in a.items()}
    for axis, terms in b.items():
        for mono, k in terms.items():
            out.setdefault(axis, {})[mono] = out.get(axis, {}).get(mono, 0) + sign * k
    return out


def _coefficients(v: ir.Value, axes: list[int | None], depth: int) -> Coefficients | None:
    """`axes[j]`: the accessed tile's axis that axis j of v becomes (None: broadcast from size 1,
    so v does not vary along it)."""
    if depth > _MAX_DEPTH:
        return None
    if uniform_constant_int(v) is not None or splat_scalar(v) is not None:
        return {}
    op = defining_op(v)
    if op is None:
        return None
    name = op.name
    if name == "tile.arange":
        return {} if axes[0] is None else {axes[0]: {(): 1}}
    if name == "tile.convert_layout":
        return _coefficients(op.operands[0], axes, depth + 1)
    if name == "tile.broadcast":
        src = op.operands[0]
        s, r = tile_shape(src.type), tile_shape(v.type)
        if len(s) != len(r):
            return None
        return _coefficients(src, [None if s[j] == 1 and r[j] != 1 else axes[j] for j in range(len(s))], depth + 1)
    if name == "tile.expand_dims":
        e = int_attr(op, "axis")
        return _coefficients(op.operands[0], axes[:e] + axes[e + 1:], depth + 1)
    if name in ("arith.addi", "arith.subi"):
        a, b = (_coefficients(x, axes, depth + 1) for x in op.operands)
        if a is None or b is None:
            return None
        return _sum(a, b, 1 if name == "arith.addi" else -1)
    if name == "arith.muli":
        for x, y in (op.operands, reversed(list(op.operands))):
            factor = uniform_constant_int(y)
            if factor is None:
                factor = splat_scalar(y)
            if factor is not None:
                c = _coefficients(x, axes, depth + 1)
                return None if c is None else _scaled(c, factor)
        return None
    if name.startswith("arith.") and all(not is_tile(x) or _coefficients(x, axes, depth + 1) == {}
                                         for x in op.operands):
        return {}  # an elementwise function of values that are the same in every element
    return None


def nonnegative_args(fn: ir.Operation) -> frozenset[int]:
    """The kernel arguments the launchers check are not negative (emit's `tile.nonnegative_args`)."""
    if "tile.nonnegative_args" not in fn.attributes:
        return frozenset()
    return frozenset(ir.DenseI32ArrayAttr(fn.attributes["tile.nonnegative_args"]))


def nonnegative(v: ir.Value, args: frozenset[int], depth: int = 0) -> bool:
    """Is the scalar v known not to be negative: such an argument, a constant, or a product or
    sum of those (strides passed in units and multiplied back, emit's scaled_arg)."""
    if isinstance(v, ir.BlockArgument):  # the kernel's, not a loop's
        return v.arg_number in args and v.owner.owner.operation.name == "func.func"
    c = uniform_constant_int(v)
    if c is not None:
        return c >= 0
    op = defining_op(v)
    return (depth < _MAX_DEPTH and op is not None and op.name in ("arith.muli", "arith.addi")
            and all(nonnegative(x, args, depth + 1) for x in op.operands))


def register_delta(c: Coefficients, reg_delta: list[int]) -> tuple[int, dict[Monomial, int]]:
    """The offset of a register past the lane's first, given its coordinate's distance from the
    first's (`reg_delta`, one per axis): an integer part and the scalars' part, {monomial: k}."""
    constant, scalars = 0, {}
    for axis, terms in c.items():
        for mono, k in terms.items():
            if not mono:
                constant += k * reg_delta[axis]
            elif k * reg_delta[axis]:
                scalars[mono] = scalars.get(mono, 0) + k * reg_delta[axis]
    return constant, {m: k for m, k in scalars.items() if k}
