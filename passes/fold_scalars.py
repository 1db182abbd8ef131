"""fold-scalars: scalar terms of an integer sum meet the smallest tile of the sum.

`(n0 + ns)[None, :] - rows[:, None] - shift + wl` adds two scalars to an [M, N] tile, an operation
per element each, where the same scalars added to the [N] vector `ns` before it is broadcast cost
N / M as much; and a scalar that meets a tile inside a loop as a splat of its own is held by LLVM
as one register per element once the splat is hoisted. So, for each maximal tree of i32 adds and
subtracts on one tile shape:

- its scalar terms (splats) are summed as scalars first, in one scalar expression;
- that sum joins the term broadcast from the fewest elements (through its own adds and subtracts:
  `n0 + ns` becomes `ns + (n0 + sum)`, one vector add), or, without a broadcast term, the tree
  takes one splat instead of several.

Integer adds wrap, so any order gives the same bits. Floats are left alone (their sums round).

Before the sums, a clamp of a sum moves its scalar out: `minimum(m0 + ms, seqlen - 1)` becomes
`minimum(ms, seqlen - 1 - m0) + m0` (and `maximum` alike), so that m0 stays a scalar term of what
uses the clamp (an address: lower-to-gpu keeps it in the scalar base) instead of a per-element
splat held across the loop. The two agree only where neither `m0 + ms` nor `seqlen - 1 - m0`
wraps, which the rewrite requires of the values' bounds (passes/int_ranges.py): with m0 a loop's
index, `ms` an arange below its step, and the loop ending at `min(.., seqlen)`, it holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith

from tiledsl.ir.dialect import int_attr, tile_op
from tiledsl.passes import layouts as L
from tiledsl.passes.common import (
    PassContext,
    clone_op,
    constant_int,
    defining_op,
    is_tile,
    kernel_funcs,
    loop_invariant,
    loop_of,
    ops_in,
    splat_scalar,
    tile_shape,
    walk_blocks,
)
from tiledsl.passes.int_ranges import FULL, IntRanges, constant_offset, loop_index_of

_SUMS = ("arith.addi", "arith.subi")
_MEMORY = ("tile.load", "tile.store", "tile.atomic_add")
Term = tuple[int, ir.Value, bool]  # (sign +1/-1, value, is a scalar)
Cost = Callable[[ir.Value], int]  # what computing a tile costs: its elements, or registers per lane


def fold_scalars(module: ir.Module, ctx: PassContext) -> int:
    """Before layouts: clamps of sums first, then sums, where a term costs its elements and the
    sum holding the loop index is preferred."""
    clamps = 0
    for fn in kernel_funcs(module):
        ranges = IntRanges(fn)
        rewritten = [op for block in list(walk_blocks(fn)) for op in ops_in(block) if _clamp_outward(op, ranges)]
        # Erased only now: the ranges are memoized by value, and a value created after an erase may
        # reuse an erased one's storage (and so its stale bounds).
        for op in rewritten:
            _erase_unused(op)
        clamps += len(rewritten)
    return clamps + _fold_all(module, lambda fn: _elements, regs_first=False)


def fold_scalars_laid_out(module: ir.Module, ctx: PassContext) -> int:
    """fold-scalars-laid-out, after assign-layouts: the same rewrite where a term costs its
    registers per lane in its layout, the cheapest first. An accumulator layout may hold the row
    vector in fewer registers than the key vector (gfx12's WMMA): the scalars, loop index included,
    move there, one op per row register instead of per key register each iteration. Off with
    `CompileOptions.fold_laid_out` (the driver's retry when a kernel spills)."""
    if not ctx.options.fold_laid_out:
        return 0

    def cost_of(fn: ir.Operation) -> Cost:
        threads = L.Threads(ctx.arch.wave_size, int_attr(fn, "tile.waves"))
        return lambda v: L.num_regs(L.layout_of(v.type), tile_shape(v.type), threads)
    folded = _fold_all(module, cost_of, regs_first=True)
    ctx.facts["laid_out_folds"] = folded  # the driver's spill retry is worth it only if nonzero
    return folded


def _fold_all(module: ir.Module, cost_of: Callable[[ir.Operation], Cost], regs_first: bool) -> int:
    replaced = []
    for fn in kernel_funcs(module):
        cost = cost_of(fn)
        for block in list(walk_blocks(fn)):
            for op in ops_in(block):
                if op.name in _SUMS and _is_root(op) and _fold(op, cost, regs_first):
                    replaced.append(op)
    for op in replaced:
        _erase_unused(op)
    return len(replaced)


_CLAMPS = ("arith.minsi", "arith.maxsi")


def _clamp_outward(op: ir.Operation, ranges: IntRanges) -> bool:
    """`clamp(t + s, c)` as `clamp(t, c - s) + s` (s, c scalars, t a tile, the sum used only here),
    where neither `t + s` nor `c - s` can wrap; True if op's uses now take the new form (op is left
    for the caller to erase)."""
    if op.name not in _CLAMPS or not _i32_tile(op.result):
        return False
    for i in (0, 1):
        total, bound = op.operands[i], splat_scalar(op.operands[1 - i])
        add = defining_op(total)
        if bound is None or add is None or add.name != "arith.addi" or not _single_use(total):
            continue
        for j in (0, 1):
            s, t = splat_scalar(add.operands[j]), add.operands[1 - j]
            if s is None or splat_scalar(t) is not None or t.type != op.result.type:
                continue
            if ranges.of(add.result) == FULL or not _difference_exact(bound, s, ranges):
                continue
            with ir.InsertionPoint(op), op.location:
                splat = tile_op("splat", [arith.SubIOp(bound, s).result], [t.type]).result
                clamped = (arith.MinSIOp if op.name == "arith.minsi" else arith.MaxSIOp)(t, splat).result
                new = arith.AddIOp(clamped, tile_op("splat", [s], [t.type]).result).result
            op.result.replace_all_uses_with(new)
            return True
    return False


def _difference_exact(c: ir.Value, s: ir.Value, ranges: IntRanges) -> bool:
    """Can `c - s` not wrap? By their bounds; or, with s a loop's index that the loop keeps at most
    x + limit, and c = x + k through constant sums: in the loop x >= s - limit, so if none of
    those sums wraps there, c - s >= k - limit."""
    (c_lo, c_hi), (s_lo, s_hi) = ranges.of(c), ranges.of(s)
    if ranges.of(c) != FULL and ranges.of(s) != FULL and c_lo - s_hi >= FULL[0] and c_hi - s_lo <= FULL[1]:
        return True
    loop = loop_index_of(s)
    if loop is None or c_hi - s_lo > FULL[1]:
        return False
    limits = ranges.index_limits(loop)
    x, offsets = c, [0]  # c = x + offsets[-1], each partial sum x + offsets[i] an op of the chain
    while x not in limits:
        found = constant_offset(x)
        if found is None or len(offsets) > 16:
            return False
        x = found[0]
        offsets = [o + found[1] for o in offsets] + [0]
    x_lo, x_hi = max(ranges.of(x)[0], s_lo - limits[x]), ranges.of(x)[1]
    exact = all(FULL[0] <= x_lo + o and x_hi + o <= FULL[1] for o in offsets)
    return exact and offsets[0] - limits[x] >= FULL[0]


def _erase_unused(op: ir.Operation) -> None:
    """A replaced sum and the terms only it used (pure ops: the rest of the kernel is untouched)."""
    if not op.name.startswith(("arith.", "tile.splat", "tile.broadcast", "tile.expand_dims")) or \
            any(list(r.uses) for r in op.results):
        return
    operands = [defining_op(v) for v in op.operands]
    op.erase()
    for owner in operands:
        if owner is not None:
            _erase_unused(owner)


def _i32_tile(v: ir.Value) -> bool:
    return is_tile(v) and ir.RankedTensorType(v.type).element_type == ir.IntegerType.get_signless(32)


def _is_root(op: ir.Operation) -> bool:
    """An i32 tile sum not itself a term of a larger one (of the same shape), nor an address:
    lower-to-gpu splits those into a scalar base and per-lane offsets itself."""
    if not _i32_tile(op.result):
        return False
    uses = list(op.result.uses)
    if any(u.owner.name in _MEMORY for u in uses):
        return False
    return not (len(uses) == 1 and uses[0].owner.name in _SUMS and uses[0].owner.result.type == op.result.type)


def _terms(v: ir.Value, sign: int, shared: bool = False) -> list[Term]:
    """v as a signed sum of scalars (the operands of splats) and tiles of v's shape, through sums
    used only there (any sum with `shared`: a new sum is built beside one used elsewhere)."""
    op = defining_op(v)
    if op is not None and op.name in _SUMS and op.result.type == v.type and (shared or _single_use(v)):
        return _terms(op.operands[0], sign) + _terms(op.operands[1], -sign if op.name == "arith.subi" else sign)
    if op is not None and op.name == "tile.splat":
        return [] if constant_int(op.operands[0]) == 0 else [(sign, op.operands[0], True)]
    return [(sign, v, False)]


def _single_use(v: ir.Value) -> bool:
    return len(list(v.uses)) == 1


def _broadcast_source(v: ir.Value) -> tuple[ir.Value, list[ir.Operation]] | None:
    """The tile v is a broadcast or expand_dims of (no larger than v), and the ops from it to v."""
    chain = []
    op = defining_op(v)
    while op is not None and op.name in ("tile.broadcast", "tile.expand_dims"):
        chain.append(op)
        v = op.operands[0]
        op = defining_op(v)
    if not chain:
        return None
    return v, chain[::-1]


def _elements(v: ir.Value) -> int:
    return math.prod(tile_shape(v.type))


def _scalar_sum(terms: list[Term]) -> ir.Value:
    """The signed sum of scalar terms as scalar ops, positive terms first."""
    terms = sorted(terms, key=lambda t: -t[0])
    acc = terms[0][1] if terms[0][0] > 0 else arith.ConstantOp(ir.IntegerType.get_signless(32), 0).result
    for sign, value, _ in terms if terms[0][0] < 0 else terms[1:]:
        acc = (arith.AddIOp if sign > 0 else arith.SubIOp)(acc, value).result
    return acc


def _build(tiles: list[Term], scalar: ir.Value | None, t: ir.Type) -> ir.Value | None:
    """positive tiles + scalar - negative tiles; None if it would need a negation."""
    pos = [v for s, v, _ in tiles if s > 0]
    neg = [v for s, v, _ in tiles if s < 0]
    if pos:
        acc = pos[0]
        rest = pos[1:] + ([tile_op("splat", [scalar], [t]).result] if scalar is not None else [])
    elif scalar is not None:
        acc, rest = tile_op("splat", [scalar], [t]).result, []
    else:
        return None
    for v in rest:
        acc = arith.AddIOp(acc, v).result
    for v in neg:
        acc = arith.SubIOp(acc, v).result
    return acc


def _rechain(value: ir.Value, chain: list[ir.Operation]) -> ir.Value:
    """`value` through copies of the broadcast / expand_dims ops of `chain`."""
    for op in chain:
        value = clone_op(op, {op.operands[0]: value}).result
    return value


def _fold(root: ir.Operation, cost: Cost, regs_first: bool) -> int:
    """Rewrite one sum; 1 if it was."""
    terms = _terms(root.result, 1)
    scalars = [t for t in terms if t[2]]
    # Terms broadcast (or expanded) from a tile no larger than the root's, and sums used elsewhere
    # too that hold a scalar (a new sum beside them takes the root's scalars into that one).
    spread = []
    for term in terms:
        found = None if term[2] else _broadcast_source(term[1])
        if found is None and not term[2] and any(t[2] for t in _terms(term[1], 1, shared=True)):
            found = (term[1], [])
        if found is not None and cost(found[0]) <= cost(root.result):
            spread.append((term, *found))
    if not spread:
        if len(scalars) < 2:
            return 0
        with ir.InsertionPoint(root), root.location:
            new = _build([t for t in terms if not t[2]], _scalar_sum(scalars), root.result.type)
        if new is None:
            return 0
        root.result.replace_all_uses_with(new)
        return 1
    # The term whose sum already holds a scalar (the loop index, typically) takes the others: one
    # splat instead of several, and the sum varies with the loop as it did; among those (or
    # none), the one broadcast from the fewest elements.
    loop = loop_of(root)

    def preference(entry: tuple) -> tuple:
        own = [t for t in _terms(entry[1], 1, shared=True) if t[2]]
        varies = loop is not None and any(not loop_invariant(t[1], loop) for t in own)
        if regs_first:
            return cost(entry[1]), not own, not varies
        return not own, not varies, cost(entry[1])

    target = min(spread, key=preference)
    t_term, t_src, t_chain = target
    inner = _terms(t_src, t_term[0], shared=True)
    gathered = list(scalars)
    rest: list[Term] = [t for t in terms if not t[2] and all(t is not s[0] for s in spread)]
    lifted: list[tuple[int, list[Term], ir.Value, list[ir.Operation]]] = []  # terms giving up their scalars
    for entry in spread:
        if entry is target:
            continue
        term, src, chain = entry
        own = _terms(src, 1, shared=True)
        tiles = [t for t in own if not t[2]]
        # Liftable: a sum with a scalar and a tile; used only here, or else one tile once the
        # scalars are gone (used as it is: `ns` of `n0 + ns`, a sum CSE shares with the kernel's
        # other uses, costs no new op).
        if any(t[2] for t in own) and tiles and (_single_use(src) or len(tiles) == 1):
            gathered += [(sign * term[0], value, True) for sign, value, scalar in own if scalar]
            if all(t[0] < 0 for t in tiles):  # `c - ns` leaves `-ns`: subtract `ns` instead
                lifted.append((-term[0], [(-t[0], t[1], t[2]) for t in tiles], src, chain))
            else:
                lifted.append((term[0], tiles, src, chain))
        else:
            rest.append(term)
    merges = any(t[2] for t in inner)
    if not t_chain:  # a sum used elsewhere too: worth it only to make a loop-invariant splat vary
        merges = loop is not None and all(loop_invariant(t[1], loop) for t in gathered) \
            and any(t[2] and not loop_invariant(t[1], loop) for t in inner)
    if not gathered or not (merges or cost(t_src) < cost(root.result)):
        return 0  # no scalar to move, or no cheaper place for it
    with ir.InsertionPoint(root), root.location:
        # The target first, then the terms that gave up their scalars: the order a kernel
        # writes by hand (`(rows - n0)[:, None] - ns[None, :]`), which LLVM schedules best. No build
        # needs a negation: the target holds the gathered scalars, each lifted term a positive tile,
        # and the root the target with sign +1.
        new_src = _build([t for t in inner if not t[2]], _scalar_sum(gathered + [t for t in inner if t[2]]),
                         t_src.type)
        assert new_src is not None
        target_term = (1, _rechain(new_src, t_chain), False)
        for sign, tiles, src, chain in lifted:
            rest.append((sign, _rechain(_build(tiles, None, src.type), chain), False))
        new = _build(rest + [target_term], None, root.result.type)
    assert new is not None
    root.result.replace_all_uses_with(new)
    return 1
