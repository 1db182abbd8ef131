"""Helpers shared by our passes: walking ops, reading tile types, errors with DSL locations."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from mlir import ir

from tiledsl.backends.rocm.arch import Arch
from tiledsl.errors import CompileError, SourceError, SourceLocation
from tiledsl.ir.dialect import dtype_of
from tiledsl.options import CompileOptions


@dataclass(frozen=True)
class PassContext:
    """What every pass is given besides the module: `pass(module, context)`."""

    arch: Arch
    options: CompileOptions
    source: str | None = None  # the DSL text, for error carets
    # What the passes found that the manifest records: lower-to-gpu sets "buffer_args", the
    # kernel arguments it addresses with buffer instructions (indices into the kernarg layout).
    facts: dict[str, object] = field(default_factory=dict)


def ops_in(block: ir.Block) -> list[ir.Operation]:
    return [op.operation for op in block.operations]


def walk_blocks(op: ir.Operation) -> Iterator[ir.Block]:
    for region in op.regions:
        for block in region.blocks:
            yield block
            for inner in ops_in(block):
                yield from walk_blocks(inner)


def kernel_funcs(module: ir.Module) -> list[ir.Operation]:
    return [op.operation for op in module.body.operations
            if op.operation.name == "func.func" and "tile.kernel" in op.operation.attributes]


def tile_shape(t: ir.Type) -> tuple[int, ...]:
    return tuple(ir.RankedTensorType(t).shape)


def tile_dtype(t: ir.Type) -> str:
    return dtype_of(ir.RankedTensorType(t).element_type) if isinstance(t, ir.RankedTensorType) else dtype_of(t)


def is_tile(v: ir.Value) -> bool:
    return isinstance(v.type, ir.RankedTensorType)


def as_operation(x: object) -> ir.Operation | None:
    """x's Operation: an OpView unwrapped; an Operation or None as it is."""
    return x.operation if hasattr(x, "operation") else x


def defining_op(v: ir.Value) -> ir.Operation | None:
    """The op that defines v (None for block arguments); OpViews unwrapped."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        return None
    return as_operation(owner)


def ancestor_in(op: ir.Operation, block: ir.Block) -> ir.Operation | None:
    """op's ancestor that is an op of `block` (op itself if it is one); None if op is not inside it."""
    op = as_operation(op)
    while op is not None and op.parent is not None:
        if op.block == block:
            return op
        op = as_operation(op.parent)
    return None


def loop_of(op: ir.Operation) -> ir.Operation | None:
    """The innermost scf.for around op."""
    parent = op.parent
    while parent is not None and parent.operation.name != "scf.for":
        parent = parent.parent
    return None if parent is None else parent.operation


def defined_inside(v: ir.Value, loop: ir.Operation) -> bool:
    """v is defined in the loop's body (its induction variable and iteration arguments included)."""
    owner = v.owner
    op = as_operation(owner.owner) if isinstance(owner, ir.Block) else as_operation(owner).parent
    while op is not None:
        if op == loop:
            return True
        op = op.parent
    return False


def loop_invariant(v: ir.Value, loop: ir.Operation) -> bool:
    """v does not change in the loop: defined outside it, or scalar arithmetic on such values
    (`seqlen_q - 1` written inside the loop: LLVM hoists it)."""
    if not defined_inside(v, loop):
        return True
    op = defining_op(v)
    return op is not None and op.name.startswith("arith.") and not op.regions and \
        all(loop_invariant(x, loop) for x in op.operands)


def clone_op(op: ir.Operation, mapping: dict[ir.Value, ir.Value]) -> ir.Operation:
    """A copy of op at the insertion point, its operands replaced through `mapping`."""
    attrs = {a: op.attributes[a] for a in op.attributes}
    return ir.Operation.create(op.name, results=[r.type for r in op.results],
                               operands=[mapping.get(v, v) for v in op.operands], attributes=attrs,
                               loc=op.location)


def constant_int(v: ir.Value) -> int | None:
    """v's value if it is an integer/bool constant or a splat of one (true is 1), else None."""
    op = defining_op(v)
    if op is None or op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    if isinstance(attr, ir.DenseIntElementsAttr) and attr.is_splat:
        attr = attr.get_splat_value()
    if isinstance(attr, ir.BoolAttr):
        return int(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    return None


def is_positive_zero(v: ir.Value) -> bool:
    """v is the constant +0 (integer or float): what an out-of-range buffer load returns."""
    op = defining_op(v)
    if op is None or op.name != "arith.constant":
        return False
    attr = op.attributes["value"]
    if isinstance(attr, ir.FloatAttr):
        return attr.value == 0.0 and math.copysign(1.0, attr.value) > 0
    return isinstance(attr, ir.IntegerAttr | ir.BoolAttr) and int(attr.value) == 0


def tensor_pointer(ptr: ir.Value) -> ir.Value:
    """The tensor argument a memory op's pointer addresses (through a tile.view of it)."""
    op = defining_op(ptr)
    return op.operands[0] if op is not None and op.name == "tile.view" else ptr


def reshaped_source(v: ir.Value, names: tuple[str, ...] = ("tile.broadcast", "tile.expand_dims")) -> ir.Value:
    """The value v was made from by the shape ops `names` (itself when none)."""
    op = defining_op(v)
    while op is not None and op.name in names:
        v = op.operands[0]
        op = defining_op(v)
    return v


def splat_scalar(v: ir.Value) -> ir.Value | None:
    """The scalar a `tile.splat` v was made from (through broadcasts and expand_dims of it), or None."""
    op = defining_op(reshaped_source(v))
    return op.operands[0] if op is not None and op.name == "tile.splat" else None


def uniform_constant_int(v: ir.Value) -> int | None:
    """constant_int of v, or of the scalar a `tile.splat` v was made from (through broadcasts and
    expand_dims of it: where(PAD_D, mask, true)[None, :] is still true)."""
    scalar = splat_scalar(v)
    return constant_int(reshaped_source(v) if scalar is None else scalar)


def constant_trip_count(lb: ir.Value, ub: ir.Value, step: ir.Value) -> int | None:
    """Iterations of a loop whose bounds and positive step are integer constants, else None."""
    start, end, stride = (uniform_constant_int(v) for v in (lb, ub, step))
    if start is None or end is None or stride is None or stride <= 0:
        return None
    return max(0, -(-(end - start) // stride))


def source_location(op: ir.Operation) -> SourceLocation | None:
    """The DSL file:line:col an op was emitted from (from its MLIR location), if known."""
    m = re.search(r'loc\("([^"]+)":(\d+):(\d+)', str(op.location))
    return SourceLocation(m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def op_error(op: ir.Operation, message: str, source: str | None = None, pass_name: str = "") -> Exception:
    loc = source_location(op)
    if loc is not None:
        return SourceError(message, loc, source)
    return CompileError(pass_name or op.name, message)
