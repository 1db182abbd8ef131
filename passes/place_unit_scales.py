"""place-unit-scales: with CompileOptions.skip_unit_scales, an online-softmax rescale moves up to
where its factor is ready.

The rescale is a tile its loop carries times a broadcast factor (`acc * alpha[:, None]`), which
lower-to-gpu wraps in a branch that a wave whose factors are all exactly 1 skips (rule_mulf).
Written where the kernel uses it, as the P.V dot's accumulator after the exponentials of P, that
branch would cut the loop body between the exponentials and the dot, which the scheduler
interleaves. The pass gathers the multiply and the pure ops its factor is computed by right after
the last op they take an input from (the row max), in their order, ahead of whatever stood
between (the exponentials): the branch then stands between the row max and the exponentials, and
a kernel writes `dot(p, v, acc * alpha[:, None])` whether it skips or not.
"""

from __future__ import annotations

from mlir import ir

from tiledsl.passes.common import PassContext, defining_op, is_tile, kernel_funcs, ops_in, reshaped_source, walk_blocks

_MOVABLE = ("arith.", "math.", "tile.broadcast", "tile.expand_dims", "tile.convert_layout", "tile.splat")


def place_unit_scales(module: ir.Module, ctx: PassContext) -> int:
    if not ctx.options.skip_unit_scales:
        return 0
    moved = 0
    for fn in kernel_funcs(module):
        for block in list(walk_blocks(fn)):
            for op in ops_in(block):
                if op.name == "arith.mulf" and _rescales_carried_tile(op):
                    moved += _move_up(op)
    return moved


def _rescales_carried_tile(op: ir.Operation) -> bool:
    """op multiplies a tile its loop carries by a broadcast of a tile of lower rank (rule_mulf's
    candidates, which it then tests by registers per lane)."""
    if not is_tile(op.result):
        return False
    for x, other in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
        carried = isinstance(x, ir.BlockArgument) and x.owner.owner.name == "scf.for" and x.arg_number > 0
        factor = reshaped_source(other, ("tile.broadcast", "tile.expand_dims", "tile.convert_layout"))
        if carried and factor != other and is_tile(factor) \
                and ir.RankedTensorType(factor.type).rank < ir.RankedTensorType(op.result.type).rank:
            return True
    return False


def _move_up(mul: ir.Operation) -> int:
    """Gather the multiply and the movable ops of its block it depends on (its cone) right after
    the last op of the block the cone takes an input from, in their order: the ops in between
    that the cone does not need (the exponentials) then follow it. Returns how many ops moved."""
    block = mul.block
    cone, stack = {mul}, [mul]
    while stack:
        for v in stack.pop().operands:
            producer = defining_op(v)
            if producer is not None and producer.block == block and producer not in cone \
                    and producer.name.startswith(_MOVABLE) and not len(producer.regions):
                cone.add(producer)
                stack.append(producer)
    ops = ops_in(block)
    inputs = [ops.index(p) for op in cone for p in map(defining_op, op.operands)
              if p is not None and p.block == block and p not in cone]
    anchor = max(inputs, default=-1)
    between = ops[anchor + 1:ops.index(mul) + 1]
    gathered = [op for op in between if op in cone]
    if gathered == between[:len(gathered)]:
        return 0  # nothing the cone does not need stands between them
    for i, op in enumerate(gathered):
        if i == 0 and anchor < 0:
            op.move_before(ops[0])
        else:
            op.move_after(gathered[i - 1] if i else ops[anchor])
    return len(gathered)
