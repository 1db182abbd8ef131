"""Software pipelining of `scf.for` loops marked `tile.stages = S` (S >= 2).

The global loads of iteration i+S-1 are issued at the top of iteration i and carried in registers
through the loop, so their latency overlaps the math of S-1 iterations:

    prologue:  p0 = load(it 0) ... p(S-2) = load(it S-2)     (masked off past the end, with the
                                                               loads their addresses depend on)
    loop i:    next = load(it min(i+S-1, last))
               body, using p0 instead of load(it i)
               yield ..., p1, ..., p(S-2), next

Inside the loop the look-ahead is clamped to the last iteration rather than masked: the loop runs
that iteration, so its addresses are as valid as the program's own, and the final S-1 iterations
load the last tile again (values never used) instead of testing a mask around every vector
access of every iteration (a branch and zeroed registers per access on the GPU). Loops with a
step that is not a positive constant keep the mask.

A load qualifies when it stands in the loop's body (not in a branch), is not marked
`prefetch=false` (attribute `prefetch = false`: a tile whose registers a look-ahead copy would
double), its address/mask computation depends only on the induction variable and values defined
outside the loop, and the loop does not write to the same tensor.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from tiledsl.ir.dialect import int_attr, tile_op
from tiledsl.passes.common import (
    PassContext,
    ancestor_in,
    as_operation,
    clone_op,
    defining_op,
    is_tile,
    kernel_funcs,
    ops_in,
    tensor_pointer,
    walk_blocks,
)


def pipeline_loops(module: ir.Module, ctx: PassContext) -> int:
    count = 0
    for fn in kernel_funcs(module):
        loops = [op for b in walk_blocks(fn) for op in ops_in(b)
                 if op.name == "scf.for" and "tile.stages" in op.attributes and int_attr(op, "tile.stages") >= 2]
        for loop in loops:
            count += _pipeline(loop, int_attr(loop, "tile.stages"))
    return count


def pipelined_loop(load: ir.Operation) -> ir.Operation | None:
    """The loop that may pipeline this load: the `stages(S >= 2)` loop whose body holds it, unless
    the load says prefetch=false. Loads in branches and other loops stay in their iteration."""
    if "prefetch" in load.attributes and not ir.BoolAttr(load.attributes["prefetch"]).value:
        return None
    parent = load.parent.operation if load.parent is not None else None
    if parent is None or parent.name != "scf.for" or "tile.stages" not in parent.attributes \
            or int_attr(parent, "tile.stages") < 2:
        return None
    return parent


def _slice(load: ir.Operation, body: ir.Block) -> list[ir.Operation] | None:
    """Ops of `body` the load depends on, in program order; None if it depends on carried values."""
    inside = {op: i for i, op in enumerate(ops_in(body))}
    carried = list(body.arguments)[1:]
    needed: set[ir.Operation] = set()
    stack = [load]
    while stack:
        op = stack.pop()
        for v in op.operands:
            if any(v == c for c in carried):
                return None
            owner = defining_op(v)
            if owner is not None and owner in inside and owner not in needed:
                if len(owner.regions):
                    return None
                needed.add(owner)
                stack.append(owner)
    return sorted(needed, key=lambda o: inside[o])


def _written_ptrs(body: ir.Block) -> list[ir.Value]:
    out = []
    for op in ops_in(body):
        if op.name in ("tile.store", "tile.atomic_add"):
            out.append(tensor_pointer(op.operands[0]))
        for region in op.regions:
            for b in region.blocks:
                out.extend(_written_ptrs(b))
    return out


def _issue(load: ir.Operation, deps: list[ir.Operation], iv_value: ir.Value, iv: ir.Value,
           ub: ir.Value | None) -> ir.Value:
    """Clone the load and its address computation with `iv` := iv_value, masked off past `ub`
    (None: iv_value is a valid iteration, no mask). Loads the address depends on (a paged table's
    entries) are masked too: an iteration past `ub` may not exist at all (a loop that runs none),
    and its indices may lie outside their tensor."""
    in_range = arith.CmpIOp(arith.CmpIPredicate.slt, iv_value, ub).result if ub is not None else None
    mapping: dict = {iv: iv_value}
    for op in deps + [load]:
        if in_range is not None and op.name == "tile.load":
            _mask_with(op, mapping, in_range)
        new = clone_op(op, mapping)
        for old, nv in zip(op.results, new.results, strict=True):
            mapping[old] = nv
    return mapping[load.result]


def _mask_with(load: ir.Operation, mapping: dict, in_range: ir.Value) -> None:
    """Map the load's mask, in the clone about to be made, to itself and `in_range`."""
    mask = mapping.get(load.operands[2], load.operands[2])
    cond = tile_op("splat", [in_range], [mask.type]).result if is_tile(mask) else in_range
    mapping[load.operands[2]] = arith.AndIOp(mask, cond).result


def _positive_constant(v: ir.Value) -> bool:
    owner = defining_op(v)
    return owner is not None and owner.name == "arith.constant" and ir.IntegerAttr(owner.attributes["value"]).value > 0


def _pipeline(loop: ir.Operation, stages: int) -> int:
    body = loop.regions[0].blocks[0]
    iv = body.arguments[0]
    written = _written_ptrs(body)
    loads = []
    for op in ops_in(body):
        if op.name == "tile.load" and pipelined_loop(op) is not None \
                and not any(tensor_pointer(op.operands[0]) == w for w in written):
            deps = _slice(op, body)
            if deps is not None:
                loads.append((op, deps))
    if not loads:
        return 0
    lb, ub, step = loop.operands[0], loop.operands[1], loop.operands[2]
    inits = list(loop.operands)[3:]
    with ir.InsertionPoint(loop), loop.location:
        prefetched = []
        for d in range(stages - 1):
            at = arith.AddIOp(lb, arith.MulIOp(step, arith.ConstantOp(step.type, d).result).result).result
            prefetched.append([_issue(ld, deps, at, iv, ub) for ld, deps in loads])
        flat = [v for stage in prefetched for v in stage]
        last = None
        if _positive_constant(step):  # the last iteration lb + (ub - lb - 1) // step * step
            one = arith.ConstantOp(step.type, 1).result
            trips = arith.DivSIOp(arith.SubIOp(arith.SubIOp(ub, lb).result, one).result, step).result
            last = arith.AddIOp(lb, arith.MulIOp(trips, step).result).result
        new_loop = scf.ForOp(lb, ub, step, inits + flat)
        new_loop.operation.attributes["tile.pipelined"] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(32), stages)
        if "tile.reuse" in loop.attributes:
            new_loop.operation.attributes["tile.reuse"] = ir.UnitAttr.get()
    new_body = new_loop.body
    n_old = len(inits)
    old_yield = ops_in(body)[-1]
    for op in ops_in(body):
        op.detach_from_parent()
        new_body.append(op)
    for old, new in zip(list(body.arguments), list(new_body.arguments)[: n_old + 1], strict=True):
        old.replace_all_uses_with(new)
    carried = list(new_body.arguments)[n_old + 1:]
    new_iv = new_body.arguments[0]
    first = ops_in(new_body)[0]
    with ir.InsertionPoint(first), loop.location:
        ahead = arith.AddIOp(new_iv, arith.MulIOp(step, arith.ConstantOp(step.type, stages - 1).result).result).result
        if last is not None:
            ahead = arith.MinSIOp(ahead, last).result
        nxt = [_issue(ld, deps, ahead, new_iv, None if last is not None else ub) for ld, deps in loads]
    for i, (ld, _) in enumerate(loads):
        ld.result.replace_all_uses_with(carried[i])
        ld.erase()
    nl = len(loads)
    with ir.InsertionPoint(old_yield), loop.location:
        scf.YieldOp(list(old_yield.operands) + carried[nl:] + nxt)
    old_yield.erase()
    for old, new in zip(loop.results, list(new_loop.results)[:n_old], strict=True):
        old.replace_all_uses_with(new)
    loop.erase()
    _erase_dead(new_body)
    return len(loads)


def _erase_dead(block: ir.Block) -> None:
    changed = True
    while changed:
        changed = False
        for op in reversed(ops_in(block)):
            if op.name.startswith(("arith.", "tile.splat", "tile.broadcast", "tile.expand_dims", "tile.arange")) \
                    and len(op.results) and all(not list(r.uses) for r in op.results):
                op.erase()
                changed = True


def place_lookahead_loads(module: ir.Module, ctx: PassContext) -> int:
    """In loops marked `stages(2, reuse=true)`, move each look-ahead load to just after the last
    read of the tile it replaces (after stage-lds, that read is usually the tile's LDS store).

    pipeline-loops issues the look-ahead at the top of the body, while the previous tile still
    waits in registers for its LDS store: both live at once, and since LLVM does not unroll the
    loop to rename them, every iteration ends copying the new tile into the old one's registers
    (gfx950 hdim 128: 37 v_mov per 32 MFMAs). Issued after that store, the load reuses the
    registers, but its latency overlaps less of an iteration, and LLVM schedules the loop
    differently: the timing model finds it faster in some kernels and slower in others, so the
    kernel asks for it (fmha_configs rows)."""
    moved = 0
    for fn in kernel_funcs(module):
        for block in list(walk_blocks(fn)):
            for op in ops_in(block):
                if op.name == "scf.for" and "tile.reuse" in op.attributes:
                    moved += _place_in(op.regions[0].blocks[0])
    return moved


def _place_in(body: ir.Block) -> int:
    ops = ops_in(body)
    yield_op = ops[-1]
    moved = 0
    for slot, v in enumerate(yield_op.operands):
        load = defining_op(v)
        if load is None or load.name != "tile.load" or _has_other_users(load, yield_op):
            continue
        replaced = body.arguments[slot + 1]
        ops = ops_in(body)
        readers = {ancestor_in(use.owner, body) for use in replaced.uses} - {yield_op}
        last = max((ops.index(op) for op in readers), default=-1)
        if last <= ops.index(load):
            continue
        group = _exclusive_slice(load, body)
        anchor = ops[last + 1]
        for op in group:
            op.move_before(anchor)
        moved += 1
    return moved


def _has_other_users(op: ir.Operation, allowed: ir.Operation) -> bool:
    return any(as_operation(use.owner) != allowed for r in op.results for use in r.uses)


# Ops that stay where they are: LDS accesses and barriers are ordered with each other (a paged
# cache's page numbers reach the key addresses through an LDS staging), and stores are side effects.
_PINNED = ("tile.local_load", "tile.local_store", "tile.barrier", "tile.wave_fence", "tile.store", "tile.atomic_add")


def _exclusive_slice(load: ir.Operation, body: ir.Block) -> list[ir.Operation]:
    """The load and the movable ops of `body` that only it (directly or through them) uses, in
    order. A pinned op the load needs stays, and its value is still there when the load moves."""
    ops = ops_in(body)
    group = {load}
    for op in reversed(ops[:ops.index(load)]):
        users = [use.owner for r in op.results for use in r.uses]
        if op.name not in _PINNED and not len(op.regions) and users \
                and all(ancestor_in(u, body) in group for u in users):
            group.add(op)
    return [op for op in ops if op in group]
