"""LDS staging: turn every layout conversion that moves data between lanes into an LDS round trip.

`tile.convert_layout` whose source and destination registers live in different lanes (e.g. a
coalesced global tile into an MFMA/WMMA operand layout) becomes

    [tile.barrier ;] tile.local_store ; tile.barrier ; tile.local_load

All stagings share one arena, so the kernel's LDS is the largest single staging, or the cross-wave
reduction scratch, or (CompileOptions.loop_arena) a loop's stagings together where that costs no
workgroup per compute unit and saves barriers in the loop (_placement). Within it each staging
goes right after the one before it where there is room, else back to the start; the barrier
before a store is there only where the bytes it overwrites may have been read since the last
barrier, on some path through branches and loop iterations (_war_barriers). Stagings that take
turns in disjoint bytes (a step's Q, dO and dS tiles in a 33 KiB arena) then cost one barrier each
instead of two. With CompileOptions.merge_stores, a loop's later stagings whose tiles are at hand
at its first one store right after it, before its barrier, and read where they are without a
barrier of their own (_mergeable_stores). A staging that would store the bytes an earlier one of
its block stored (the same tile, laid out the same way) reads them instead, with no store and no
barrier (_shared_stagings). A staging whose lanes read back only their own wave's stores
(_wave_private) has a wave fence after its store instead of the barrier. A conversion marked
`tile.resident` (a loop-invariant tile hoisted by hoist-conversions) gets its own region below the
arena instead: it is stored once, before the loop, and read where it is used. Resident regions are
placed by lifetime (from the store to the last read, a read in a loop reaching that loop's end):
two that are never live together share bytes (a kernel with two walks one after another), since
each store is behind a barrier that every read of the region before it precedes. The other
stagings go above the regions live while theirs are (_floors), so a staging before a region's
store or after its last read may take its bytes. Rows are padded to
spread consecutive rows over the LDS banks, and where the banks allow, to a multiple of the reads'
vector width (_row_major_pitch: a 16-byte read of a lane on an 8-byte aligned row becomes two 8-byte
reads, with their offsets added in VALU past ds_read2's reach), unless that costs a workgroup per
compute unit (_align_rows). A tile stored transposed takes the padding or, unpadded, the swizzle of
its rows' 16-byte chunks whose store and reads cost the fewest LDS cycles (_cheapest_transposed,
CompileOptions.lds_swizzle). On archs that transpose in LDS reads (gfx950), a 16-bit
B operand [K, N] is stored row-major and marked `transpose_read` for lower-to-gpu. A tile that does
not fit the arch's LDS is a user error at the DSL location of the operation.
"""

from __future__ import annotations

import functools
from itertools import chain, combinations
from typing import NamedTuple

import numpy as np
from mlir import ir
from mlir.dialects import arith, scf

from tiledsl.backends.rocm.arch import Arch
from tiledsl.backends.rocm.lds_banks import lds_cycles
from tiledsl.errors import CompileError, SourceError
from tiledsl.ir.dialect import i32_attr, int_attr, tile_op
from tiledsl.lang.ast import DTYPE_BYTES
from tiledsl.options import CompileOptions
from tiledsl.passes import layouts as L
from tiledsl.passes.common import (
    PassContext,
    is_tile,
    kernel_funcs,
    op_error,
    ops_in,
    tile_dtype,
    tile_shape,
)
from tiledsl.passes.lane_exchange import lane_exchange


def padded_row(shape: tuple[int, ...], elem_bytes: int, pad: bool) -> int:
    cols = shape[-1]
    return cols + (max(1, 4 // elem_bytes) * 2 if pad and len(shape) == 2 else 0)


def stage_lds(module: ir.Module, ctx: PassContext) -> int:
    arch, options, source = ctx.arch, ctx.options, ctx.source
    stagings = _stagings(module, options, arch)
    staged = {op for ops in stagings.values() for op in ops}
    align = _align_rows(stagings, options, arch)
    resident = 0  # bytes of the resident regions, which come first; the arena follows them
    residents: dict[ir.Operation, Residents] = {}
    for fn in kernel_funcs(module):
        threads = L.Threads(arch.wave_size, int_attr(fn, "tile.waves"))
        residents[fn] = _place_residents(fn, threads, options, arch, source, align)
        resident = max(resident, residents[fn].top)
    module.operation.attributes["tile.lds_arena"] = i32_attr(resident)
    need = resident
    for fn in kernel_funcs(module):
        threads = L.Threads(arch.wave_size, int_attr(fn, "tile.waves"))
        sizes: dict[ir.Operation, int] = {}  # the arena bytes each staging or cross-wave reduction takes
        stored: dict[ir.Operation, tuple] = {}  # a staging's bytes: its source and how it is laid out
        private: set[ir.Operation] = set()  # stagings whose lanes read back only their own wave's stores
        for op in _program_order(fn)[0]:  # pre-order: program order
            if op.name == "tile.convert_layout":
                src = op.operands[0]
                shape = tile_shape(src.type)
                sl, dl = L.layout_of(src.type), L.layout_of(op.result.type)
                if op in staged:
                    attrs, sizes[op] = _staging(op, 0, threads, options, arch, source, align)
                    ctx.facts["lds_swizzles"] = ctx.facts.get("lds_swizzles", 0) + ("swizzle" in attrs)
                    if options.wave_private_stagings and _wave_private(sl, dl, shape, threads):
                        private.add(op)
                    else:  # a wave-private staging's bytes are not read by other layouts' lanes
                        stored[op] = (src, ir.IntegerAttr(attrs["row_stride"]).value, "transposed" in attrs,
                                   str(attrs.get("swizzle")))
            elif op.name == "tile.reduce" and is_tile(op.operands[0]):
                lin = L.linear(L.layout_of(op.operands[0].type), tile_shape(op.operands[0].type), threads)
                axis = int_attr(op, "axis")
                if any(b[axis] for b in lin.wave_bases):
                    outs = L.num_regs(L.layout_of(op.result.type), tile_shape(op.result.type), threads) \
                        if is_tile(op.result) else 1
                    sizes[op] = threads.count * outs * 4
                    _check(op, resident + sizes[op], arch, source)
        if any("tile.held" in op.attributes for op in sizes):
            ctx.facts["lds_if_resident"] = max(ctx.facts.get("lds_if_resident", 0), _lds_if_resident(sizes, resident))
        shared: dict[ir.Operation, ir.Operation] = {}  # staging -> the one whose stored bytes it reads
        merged: dict[ir.Operation, list[ir.Operation]] = {}  # staging -> those whose stores join its own
        if options.lds_spread:
            shared = _shared_stagings(stored)
            merged = _mergeable_stores(fn, sizes, shared, private) if options.merge_stores else {}
        floors = _floors(sizes, shared, merged, residents[fn], resident)
        for op in sizes:
            if op.name == "tile.convert_layout":
                _check(op, floors[op] + sizes[op], arch, source)
        limit = max((floors[op] + n for op, n in sizes.items()), default=resident)
        need = max(need, limit)
        if options.lds_spread:
            limit, at, (war, entry_barriers), shared, merged = _placement(
                fn, sizes, floors, limit, resident, shared, private, merged, residents[fn].reads, threads, arch,
                options.loop_arena or options.merge_stores)
            need = max(need, limit)
        else:  # every staging at its floor, behind a barrier
            at, war, entry_barriers, private = dict(floors), set(sizes), set(), set()
        for loop in entry_barriers:
            _first_iteration_barrier(loop)
        followers = {f for fs in merged.values() for f in fs}
        for op in sizes:
            if op.name == "tile.convert_layout":
                joined = [(f, at[f]) for f in merged.get(op, ())]
                _stage_convert(op, at[op], op in war, op in shared or op in followers, op in private,
                               joined, threads, options, arch, source, align)
    module.operation.attributes["tile.lds_bytes"] = i32_attr(need)
    return need


def _floors(sizes: dict[ir.Operation, int], shared: dict[ir.Operation, ir.Operation],
            merged: dict[ir.Operation, list[ir.Operation]], residents: Residents,
            resident: int) -> dict[ir.Operation, int]:
    """The lowest byte each staging may take: above every resident region live while its bytes
    are (from its store to its last read: that of a staging that reads its bytes or stores with
    it), and the arena's start for a cross-wave reduction (its lowering's slots). A staging before
    a resident tile's store or after its last read may take the region's bytes: the store has a
    barrier first, and _war_barriers sees the region's reads. A tile loaded before a loop for a
    dot there, and converted again for a dot inside it (a layout of its own), then takes LDS for
    one staging at a time, where the two regions did not fit gfx11's LDS."""
    order = residents.order
    life = {op: [order[op], order[op]] for op in sizes if op.name == "tile.convert_layout"}
    for reader, writer in shared.items():
        life[writer][1] = max(life[writer][1], order[reader])
    for first, fs in merged.items():
        for f in fs:  # stored with `first`, read where it stands
            life[first][1] = max(life[first][1], order[f])
            life[f][0] = min(life[f][0], order[first])
    floors = {}
    for op in sizes:
        if op.name != "tile.convert_layout":
            floors[op] = resident
            continue
        lo, hi = life[op]
        floors[op] = max((top for start, end, top in residents.spans if start <= hi and lo <= end), default=0)
    return floors


def _needs_staging(op: ir.Operation, threads: L.Threads, options: CompileOptions, arch: Arch) -> bool:
    """Whether a tile.convert_layout moves values between lanes through LDS (neither a renaming
    of registers nor a lane exchange)."""
    src = op.operands[0]
    shape = tile_shape(src.type)
    sl, dl = L.layout_of(src.type), L.layout_of(op.result.type)
    return L.register_map(sl, shape, dl, shape, threads) is None \
        and lane_exchange(sl, dl, shape, threads, arch, options) is None


def _stagings(module: ir.Module, options: CompileOptions, arch: Arch) -> dict[ir.Operation, list[ir.Operation]]:
    """Per kernel function, in program order, the conversions that move values through LDS:
    decided once, since each asks for a lane exchange first."""
    out = {}
    for fn in kernel_funcs(module):
        threads = L.Threads(arch.wave_size, int_attr(fn, "tile.waves"))
        out[fn] = [op for op in _program_order(fn)[0]
                   if op.name == "tile.convert_layout" and _needs_staging(op, threads, options, arch)]
    return out


def _align_rows(stagings: dict[ir.Operation, list[ir.Operation]], options: CompileOptions, arch: Arch) -> bool:
    """Whether stagings may pad their rows to the reads' vector width (_row_major_pitch): unless
    the wider rows would leave fewer waves per SIMD room in a compute unit's LDS (up to the arch's
    most, or the kernel's occupancy target), the LDS estimated each way as every resident region
    and the largest other staging."""
    def lds(ops: list[ir.Operation], threads: L.Threads, align: bool) -> int:
        resident = arena = 0
        for op in ops:
            try:
                size = -(-_staging(op, 0, threads, options, arch, None, align)[1] // 16) * 16
            except (SourceError, CompileError):  # too large this way: the staging itself says so
                size = arch.lds_bytes + 1
            if "tile.resident" in op.attributes:
                resident += size
            else:
                arena = max(arena, size)
        return resident + arena

    def waves(need: int, threads: L.Threads, most: int) -> int:  # -1: does not fit at all
        return -1 if need > arch.lds_bytes else min(most, arch.occupancy(1, need, threads.waves))

    for fn, ops in stagings.items():
        threads = L.Threads(arch.wave_size, int_attr(fn, "tile.waves"))
        most = int_attr(fn, "tile.occupancy") if "tile.occupancy" in fn.attributes else arch.max_waves_per_simd
        if waves(lds(ops, threads, True), threads, most) < waves(lds(ops, threads, False), threads, most):
            return False
    return True


def _lds_if_resident(sizes: dict[ir.Operation, int], resident: int) -> int:
    """About the LDS bytes with hoist-conversions' held tiles (`tile.held`) kept resident instead
    (CompileOptions.resident_operands): a region of their own each, 16-byte aligned, and an arena
    sized by the other stagings. For the driver's choice (lifetimes could overlap regions)."""
    held = [op for op in sizes if "tile.held" in op.attributes]
    regions = sum(-(-sizes[op] // 16) * 16 for op in held)
    return resident + regions + max((n for op, n in sizes.items() if op not in held), default=0)


def _shared_stagings(stored: dict[ir.Operation, tuple]) -> dict[ir.Operation, ir.Operation]:
    """Stagings that would store the bytes an earlier one of the same block stored (the same tile,
    laid out the same way: gfx950's Q read as dot operands of both orientations): they read those
    bytes instead, with no store and no barrier. Maps each to the staging that stores them."""
    first: dict[tuple, ir.Operation] = {}
    shared = {}
    for op, key in stored.items():
        key = (*key, op.operation.block)
        if key in first:
            shared[op] = first[key]
        else:
            first[key] = op
    return shared


def _arena_offsets(sizes: dict[ir.Operation, int], floors: dict[ir.Operation, int], limit: int,
                   shared: dict[ir.Operation, ir.Operation],
                   merged: dict[ir.Operation, list[ir.Operation]] | None = None) -> dict[ir.Operation, int]:
    """LDS offsets, in program order: each staging right after the one before it where there is
    room below `limit` (at least the largest staging above its floor, _floors), else at its floor.
    Stagings that follow one another in disjoint bytes need no barrier between the first one's
    reads and the second one's store (_war_barriers). Cross-wave reductions keep their floor (their
    lowering's slots).
    A staging in `shared` reads the bytes of the one it maps to, which the stagings between the
    two must not overwrite; where one cannot avoid them, that sharing is dropped (the staging
    stores its own copy) and the placement starts again. A staging in `merged`'s lists is stored
    with the one it is listed under (_mergeable_stores): it is placed right after it and its bytes
    are kept from the stagings up to its own place; where they do not fit, it is dropped from the
    list (it stores where it is) and the placement starts again."""
    merged = {} if merged is None else merged
    order = list(sizes)
    index = {op: i for i, op in enumerate(order)}
    while True:
        at: dict[ir.Operation, int] = {}
        end = 0  # where the previous one ends
        clash = None
        for i, op in enumerate(order):
            if op in shared:
                at[op] = at[shared[op]]
                continue
            if op in at:  # stored with an earlier staging
                continue
            # Bytes stored earlier that a later staging still reads.
            pinned = {(at[w], at[w] + sizes[w]) for r, w in shared.items() if w in at and index[r] > i}
            pinned |= {(at[f], at[f] + sizes[f]) for fs in merged.values() for f in fs if f in at and index[f] > i}
            group = [op, *merged.get(op, ())]  # stored together, one after another
            size = sum(-(-sizes[g] // 16) * 16 for g in group[:-1]) + sizes[group[-1]]
            spot = None
            floor = max(floors[g] for g in group)
            if op.name == "tile.convert_layout":
                for start in (max(-(-end // 16) * 16, floor), floor):
                    while any(lo < start + size and start < hi for lo, hi in pinned):
                        start = max(-(-hi // 16) * 16 for lo, hi in pinned if lo < start + size and start < hi)
                    if start + size <= limit:
                        spot = start
                        break
            elif not any(lo < floor + size and floor < hi for lo, hi in pinned):
                spot = floor
            if spot is None:
                clash = group[-1] if len(group) > 1 else next(chain(
                    (r for r, w in shared.items() if w in at and index[r] > i),
                    (f for fs in merged.values() for f in fs if f in at and index[f] > i)))
                break
            for g in group:
                at[g] = spot
                end = spot + sizes[g]
                spot = -(-end // 16) * 16
        if clash is None:
            return at
        if clash in shared:
            del shared[clash]
        else:
            for fs in merged.values():
                if clash in fs:
                    fs.remove(clash)


class Placement(NamedTuple):
    """Where stage-lds puts a kernel function's stagings (_placement)."""

    limit: int  # the byte the stagings stay below
    at: dict[ir.Operation, int]  # each staging's offset in the LDS
    found: Found  # the barriers their stores need first
    shared: dict[ir.Operation, ir.Operation]  # stagings that read an earlier one's bytes
    merged: dict[ir.Operation, list[ir.Operation]]  # stagings stored with an earlier one


def _placement(fn: ir.Operation, sizes: dict[ir.Operation, int], floors: dict[ir.Operation, int], limit: int,
               resident: int, shared: dict[ir.Operation, ir.Operation], private: set[ir.Operation],
               merged: dict[ir.Operation, list[ir.Operation]], resident_reads: dict[ir.Operation, tuple[int, int]],
               threads: L.Threads, arch: Arch, loop_arena: bool) -> Placement:
    """The byte the stagings stay below, each staging's offset, the barriers they need, the
    stagings that still read an earlier one's bytes and those still stored with an earlier one
    (`_arena_offsets` may drop some of `shared` and `merged`). The limit is the lowest that holds
    each staging above its floor, or with `loop_arena` higher where a loop's stagings then each get bytes of
    their own and fewer of them need a barrier before their store in every iteration, as long as
    the wider arena costs no workgroup per compute unit (waves per SIMD within the LDS, up to the
    kernel's occupancy target): gfx1201's hdim-128 forward stages K and V in the bytes its Q took
    before the loop, each behind two barriers where disjoint bytes need one. Of the sizes tried, the
    one whose loops have the fewest barriers per iteration (merged stores save theirs) wins."""
    most = int_attr(fn, "tile.occupancy") if "tile.occupancy" in fn.attributes else arch.max_waves_per_simd

    def waves(top: int) -> int:
        return min(most, arch.occupancy(1, top, threads.waves))

    def place(top: int) -> Placement:
        kept, joined = dict(shared), {op: list(fs) for op, fs in merged.items()}
        at = _arena_offsets(sizes, floors, top, kept, joined)
        joined = {op: fs for op, fs in joined.items() if fs}
        spans = {op: (at[op], at[op] + n) for op, n in sizes.items()}
        return Placement(top, at, _war_barriers(fn, spans, set(kept), private, joined, resident_reads), kept, joined)

    # Each staging's innermost loop (None outside loops).
    loop_of = {op: next((a for a in _ancestors(op) if a.name == "scf.for"), None) for op in sizes}

    def in_loops(p: Placement) -> int:  # barriers that run every iteration
        followers = {f for fs in p.merged.values() for f in fs}
        looped = [op for op, loop in loop_of.items() if loop is not None]
        return sum(op in p.found.war for op in looped) + sum(
            op not in p.shared and op not in followers and op not in private for op in looped)

    best = place(limit)
    if not loop_arena:
        return best
    loop_bytes: dict[ir.Operation, int] = {}
    for op, n in sizes.items():
        loop = loop_of[op]
        if loop is not None and op.name == "tile.convert_layout" and op not in shared:
            loop_bytes[loop] = loop_bytes.get(loop, 0) + -(-n // 16) * 16
    for size in sorted(set(loop_bytes.values())):
        top = resident + size
        if top <= limit or top > arch.lds_bytes or waves(top) < waves(limit):
            continue
        wider = place(top)
        if in_loops(wider) < in_loops(best):
            best = wider
    return best


def _mergeable_stores(fn: ir.Operation, sizes: dict[ir.Operation, int], shared: dict[ir.Operation, ir.Operation],
                      private: set[ir.Operation]) -> dict[ir.Operation, list[ir.Operation]]:
    """Per loop body, the later stagings whose stores can join the first staging's, before its
    barrier (CompileOptions.merge_stores): those directly in the body whose tile is already at
    hand there (a loop-carried tile, such as a pipelined loop's look-ahead loads, or one from
    before the loop or from earlier in the body). Their reads stay where they are, without a
    barrier of their own: the backward's key walk stores Q and dO, each in both orientations, at
    the top of the step behind one barrier where each took its own."""
    merged: dict[ir.Operation, list[ir.Operation]] = {}
    for loop in (op for op in _program_order(fn)[0] if op.name == "scf.for"):
        body = loop.regions[0].blocks[0]
        ops = list(ops_in(body))
        stagings = [op for op in ops if op in sizes and op.name == "tile.convert_layout"
                    and op not in shared and op not in private]
        if len(stagings) < 2:
            continue
        followers = [op for op in stagings[1:] if _at_hand(op.operands[0], loop, ops, stagings[0])]
        if followers:
            merged[stagings[0]] = followers
    return merged


def _at_hand(value: ir.Value, loop: ir.Operation, body_ops: list[ir.Operation], at: ir.Operation) -> bool:
    """Is `value` defined where op `at`, directly in the loop's body (`body_ops`), can use it?"""
    if isinstance(value, ir.BlockArgument):  # the body's own, or an enclosing region's
        owner = value.owner.owner.operation
        return owner == loop.operation or owner in {a.operation for a in _ancestors(at)}
    op = value.owner.operation
    if op.parent.operation == loop.operation:  # in the body: before `at`
        return body_ops.index(op) < body_ops.index(at)
    return loop.operation not in {a.operation for a in _ancestors(op)}


class Found(NamedTuple):
    """What _war_barriers finds: stagings whose store needs a barrier first, and loops that need
    one in their first iteration only."""

    war: set[ir.Operation]
    first_iteration: set[ir.Operation]


def _wave_private(src: L.Layout, dst: L.Layout, shape: tuple[int, ...], threads: L.Threads) -> bool:
    """Does every lane of the destination read only elements that its own wave stored, each
    element held by one wave in the source? Then the staging needs no workgroup barrier after its
    store (a wave's LDS accesses complete in the order it issues them), and its bytes are only
    ever written and read by one wave each, across iterations too. gfx11's P tile, from the WMMA
    accumulator to an operand, is one: rows stay with their wave, values move between its lanes."""
    flat = L.element_indices(src, shape, threads)
    wave = np.arange(threads.count) // threads.wave_size
    owner = np.full(int(np.prod(shape)), -1)
    owner[flat] = np.broadcast_to(wave[:, None], flat.shape)
    if (owner[flat] != wave[:, None]).any():  # an element held by two waves: both would store it
        return False
    return bool((owner[L.element_indices(dst, shape, threads)] == wave[:, None]).all())


def _war_barriers(fn: ir.Operation, spans: dict[ir.Operation, tuple[int, int]],
                  readers: set[ir.Operation], private: set[ir.Operation] = frozenset(),
                  merged: dict[ir.Operation, list[ir.Operation]] | None = None,
                  resident_reads: dict[ir.Operation, tuple[int, int]] | None = None) -> Found:
    """The stagings whose store needs a barrier first: LDS bytes it overwrites may have been read
    since the last barrier, by this wave or (on any path through branches and loop iterations)
    another. A staging's reads all precede the next barrier or LDS store in program order (a dot
    reading its operand fragment by fragment comes before either, lower-to-gpu), and every
    barrier waits for the wave's LDS accesses, so `dirty`, the byte spans read since the last
    barrier, is all a store must not overlap. `readers` only read (shared stagings): no store,
    no barrier. `private` stagings (_wave_private) have no barrier after their store: their spans
    join `dirty` marked as theirs, and a private store need not wait for its own earlier reads
    (each byte is stored and read by one wave, in order). `merged` stagings are stored with the one
    they are listed under, before its barrier, and only read where they are. `resident_reads` are
    the reads of resident regions (_place_residents), whose bytes a staging outside their lifetime
    may take (_floors).

    Also returns the loops that get a barrier in their first iteration only instead: where a store
    in the body needs one only because of bytes read before the loop (a tile staged once before
    the loop, in the bytes the loop's stagings reuse), one barrier replaces one per iteration
    (_first_iteration_barrier)."""

    merged = merged or {}
    resident_reads = resident_reads or {}
    readers = readers | {f for fs in merged.values() for f in fs}

    def overlaps(dirty: frozenset, span: tuple[int, int], op: ir.Operation) -> bool:
        return any(lo < span[1] and span[0] < hi and (reader is None or reader != op) for lo, hi, reader in dirty)

    def visit(block: ir.Block, dirty: frozenset, found: Found) -> frozenset:
        for op in ops_in(block):
            if op in readers:
                dirty = dirty | {(*spans[op], None)}
            elif op in resident_reads:
                dirty = dirty | {(*resident_reads[op], None)}
            elif op in private:
                if overlaps(dirty, spans[op], op):
                    found.war.add(op)
                    dirty = frozenset()
                dirty = dirty | {(*spans[op], op)}  # no barrier after the store: earlier reads stay
            elif op in spans:
                stored = [op, *merged.get(op, ())]
                if op.name == "tile.convert_layout" and any(overlaps(dirty, spans[s], s) for s in stored):
                    found.war.add(op)
                # A barrier after the stores (a reduction: before, too), then their reads.
                dirty = frozenset((*spans[s], None) for s in stored)
            elif op.name == "tile.barrier":
                dirty = frozenset()
            elif op.name == "scf.if":  # an empty else region passes `dirty` through
                dirty = frozenset().union(*(visit(r.blocks[0], dirty, found) if len(r.blocks) else dirty
                                            for r in op.regions))
            elif op.name == "scf.for":
                entered, out = iterations(op, dirty)
                if dirty:
                    cleared, out_cleared = iterations(op, frozenset())
                    if entered.war != cleared.war:  # a barrier in the first iteration instead
                        found.first_iteration.add(op)
                        entered, out = cleared, out_cleared
                found.war.update(entered.war)
                found.first_iteration.update(entered.first_iteration)
                dirty = dirty | out  # `dirty` itself: the loop may run no iteration (nor its first-iteration barrier)
            elif op.regions:
                raise AssertionError(f"stage-lds: no barrier analysis for {op.name}")
        return dirty

    def iterations(loop: ir.Operation, entry: frozenset) -> tuple[Found, frozenset]:
        """What the body needs, entered with `entry` read, and the spans read at its end."""
        into = entry
        while True:  # the body's entry sees what the previous iteration left
            found = Found(set(), set())
            out = visit(loop.regions[0].blocks[0], into, found)
            if out <= into:
                return found, out
            into = into | out

    found = Found(set(), set())
    visit(fn.regions[0].blocks[0], frozenset(), found)
    return found


def _first_iteration_barrier(loop: ir.Operation) -> None:
    """A barrier at the top of the loop's first iteration: `if iv == lb { barrier }`. Not just
    before the loop: LLVM sinks LDS reads whose values only the loop uses past a barrier into the
    loop's preheader (MachineSink moves loads past no store, and a barrier stores nothing), where
    a wave could read them after another one passed the barrier and overwrote them in the loop."""
    body = loop.regions[0].blocks[0]
    with ir.InsertionPoint.at_block_begin(body), loop.location:
        first = arith.CmpIOp(arith.CmpIPredicate.eq, body.arguments[0], loop.operands[0]).result
        branch = scf.IfOp(first, has_else=True)
        with ir.InsertionPoint(branch.then_block):
            tile_op("barrier", [], [])
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([])


def _staging(op: ir.Operation, at: int, threads: L.Threads, options: CompileOptions, arch: Arch,
             source: str | None, align: bool) -> tuple[dict[str, ir.Attribute], int]:
    """The local_store/local_load attributes of staging op's tile at byte `at`, and its size;
    align: rows may be padded to the reads' vector width (_row_major_pitch)."""
    src = op.operands[0]
    shape = tile_shape(src.type)
    eb = DTYPE_BYTES[tile_dtype(src.type)]
    # Store the tile column by column when the destination holds runs along axis 0 (a B operand
    # [K, N] read from a row-major tile): its reads become vectors instead of one per element.
    # Each wave reads its whole operand while the writes are shared, so the reads decide.
    dst_lin = L.linear(L.layout_of(op.result.type), shape, threads)
    transposed = len(shape) == 2 and _runs(dst_lin, 0) > _runs(dst_lin, 1)
    # Where the arch transposes in the read (gfx950), such a tile is stored row-major instead, with
    # vector stores, and each 4 registers of a lane come from one transpose read.
    read_transposed = transposed and _transpose_readable(dst_lin, shape, eb, arch, options)
    transposed = transposed and not read_transposed
    stored = (shape[1], shape[0]) if transposed else shape
    row = padded_row(stored, eb, options.lds_padding)
    swizzle = None
    if transposed and options.lds_padding:
        row, swizzle = _transposed_layout(op, threads, arch, align, options.lds_swizzle)
    elif len(shape) == 2 and options.lds_padding:
        row = _row_major_pitch(op, threads, options, arch, align)
    rows = stored[0] if len(shape) == 2 else 1
    size = rows * row * eb
    _check(op, at + size, arch, source)
    attrs = {"offset": i32_attr(at // eb), "row_stride": i32_attr(row)}  # offsets count elements
    if transposed:
        attrs["transposed"] = ir.UnitAttr.get()
    if swizzle is not None:
        attrs["swizzle"] = ir.DenseI32ArrayAttr.get([swizzle.chunk, *swizzle.masks])
    if read_transposed:  # the local_load's; the store ignores it
        attrs["transpose_read"] = ir.UnitAttr.get()
    return attrs, size


def _row_major_pitch(op: ir.Operation, threads: L.Threads, options: CompileOptions, arch: Arch,
                     align: bool) -> int:
    """The row length (elements) of a 2-D tile staged row-major. Stagings of one source in one
    block share a row length (one may read what another stored, _shared_stagings): one already made
    gives it; else the padding (8-byte steps, up to a quarter of the row) whose stores and reads take
    the fewest LDS cycles with bank conflicts (the timing model's rule, `lds_banks`); among equals,
    with `align`, one whose rows keep every access's vectors aligned; then the usual one, then the
    smallest. A transpose read's lanes cover a few rows, 8 bytes each: at hdim 128 (256-byte rows)
    gfx950's 64 banks want those rows 16 banks apart, where the usual 8-byte padding puts them 2
    apart (4-way conflicts; the backward's hdim 128 plan modeled 19-33 % faster without them). A
    lane's 16-byte read (gfx950's and gfx11's dot operands) from an 8-byte aligned row is two 8-byte
    reads (ds_read2_b64), whose offsets reach 2 KiB, so LLVM adds the rest in VALU: at 16 bytes of
    padding instead of 8, gfx950's hdim 64 forward issues 10 fewer instructions per key block (12
    fewer address adds) and models 957.5 -> 1016.6 TFLOP/s (B 2, H 16, S 2048)."""
    src = op.operands[0]
    shape = tile_shape(src.type)
    eb = DTYPE_BYTES[tile_dtype(src.type)]
    cols, usual = shape[-1], padded_row(shape, eb, True)
    me = op.operation
    members = [me]
    for use in src.uses:
        user = use.owner.operation
        if user == me or user.block != me.block:
            continue
        if user.name == "tile.local_store" and "transposed" not in user.attributes:
            return ir.IntegerAttr(user.attributes["row_stride"]).value
        if user.name == "tile.convert_layout":
            members.append(user)
    reads = []
    for m in members:
        dst_lin = L.linear(L.layout_of(m.result.type), shape, threads)
        if _runs(dst_lin, 0) <= _runs(dst_lin, 1):  # read along rows: vectors of consecutive registers
            run = _run_length(dst_lin, eb)
            reads.append((dst_lin, run * eb, dst_lin.num_regs // run))
        elif _transpose_readable(dst_lin, shape, eb, arch, options):
            reads.append((L.transpose_read_source(dst_lin), 8, dst_lin.num_regs // L.TRANSPOSE_READ_VALUES))
    src_lin = L.linear(L.layout_of(src.type), shape, threads)
    run = _run_length(src_lin, eb)
    accesses = reads + [(src_lin, run * eb, src_lin.num_regs // run)]
    banks = arch.timing.lds_bytes_per_clk // 4

    def cost(pad: int) -> tuple[int, int, bool, int]:
        cycles = split = 0
        for lin, nbytes, count in accesses:
            coord = L.lane_coords(lin, arch.wave_size)
            cycles += count * lds_cycles((coord[:, 0] * (cols + pad) + coord[:, 1]) * eb, nbytes, banks)
            split += count if align and (cols + pad) * eb % nbytes else 0
        return cycles, split, cols + pad != usual, pad
    return cols + min(range(0, cols // 4 + 1, 8 // eb), key=cost)


def _transposed_layout(op: ir.Operation, threads: L.Threads, arch: Arch, align: bool,
                       swizzles: bool) -> tuple[int, L.Swizzle | None]:
    """The row length (elements) and swizzle of a 2-D tile staged transposed (a B operand [K, N]
    whose lanes read along K, stored column by column): _cheapest_transposed of its layouts."""
    src = op.operands[0]
    return _cheapest_transposed(str(L.layout_of(src.type)), str(L.layout_of(op.result.type)), tile_shape(src.type),
                                DTYPE_BYTES[tile_dtype(src.type)], threads, arch.timing.lds_bytes_per_clk // 4,
                                align, swizzles)


@functools.lru_cache(maxsize=256)
def _cheapest_transposed(src: str, dst: str, shape: tuple[int, ...], eb: int, threads: L.Threads, banks: int,
                         align: bool, swizzles: bool) -> tuple[int, L.Swizzle | None]:
    """Of the paddings (8-byte steps, up to a quarter of the row) and, for unpadded rows, a swizzle
    whose flips are the parity of one or two row bits per chunk bit (searched one chunk bit at a
    time, the others kept), the one whose store and reads take the fewest LDS cycles with bank
    conflicts over `banks` (`lds_banks`, as the timing model prices them); among equals, with
    `align`, the one whose reads take the fewest vector accesses (a 16-byte read of a lane from an
    8-byte aligned row is two 8-byte reads, whose offsets past ds_read2's reach cost VALU adds);
    then the fewest base addresses a lane keeps (one per flip); then the usual padding, then the
    smallest. Padding spreads the rows of a read over the banks but, 8 bytes a row, splits its
    16-byte vectors, and puts a store's lanes (rows 8 apart in V's coalesced layout) on the same
    banks; a swizzle can spread both."""
    rows, cols = shape[0], shape[1]  # stored as cols rows of `rows` elements
    usual = padded_row((cols, rows), eb, True)
    accesses = [(L.linear(L.as_layout(src), shape, threads), True), (L.linear(L.as_layout(dst), shape, threads), False)]
    lanes = [L.lane_coords(lin, threads.wave_size) for lin, _ in accesses]

    def cost(pad: int, swizzle: L.Swizzle | None) -> tuple[int, int, int, bool, int]:
        weights = np.array([1, rows + pad])
        vectors = 0
        flips = set()
        by_width: dict[int, list[np.ndarray]] = {}  # each run's lane addresses, by its bytes
        for (lin, by_address), coords in zip(accesses, lanes, strict=True):
            for run in L.lds_runs(lin, weights, 0, eb, by_address=by_address, swizzle=swizzle, major=1):
                at = coords + lin.regs[run.regs[0]]
                by_width.setdefault(len(run.regs) * eb, []).append(
                    L.swizzled_offsets(at[:, 1], at[:, 0], rows + pad, swizzle) * eb)
                vectors += not by_address
                flips.add((by_address, run.flips))
        # One call per width: a wave's lanes fill whole bank groups, so the runs' groups stay apart.
        cycles = sum(lds_cycles(np.concatenate(a), nbytes, banks) for nbytes, a in by_width.items())
        return cycles, vectors if align else 0, len(flips), rows + pad != usual, pad

    candidates = [(cost(pad, None), pad, None) for pad in range(0, rows // 4 + 1, 8 // eb)]
    chunk = 16 // eb
    field_bits = next((b for b in (2, 1) if rows % (chunk << b) == 0), 0)  # chunk bits a row can permute
    if swizzles and field_bits and all(L.swizzle_fits(lin) for lin, _ in accesses):
        # One chunk bit's mask at a time, the others' kept, twice round (not every combination:
        # a compile's time).
        bits = [1 << b for b in range(cols.bit_length() - 1)]
        masks = bits + [a | b for a, b in combinations(bits, 2)]
        chosen = [0] * field_bits
        for i in list(range(field_bits)) * 2:
            tried = [(cost(0, L.Swizzle(chunk, (*chosen[:i], m, *chosen[i + 1:]))), m) for m in masks
                     if m not in chosen[:i] + chosen[i + 1:]]
            chosen[i] = min(tried)[1]
        swizzle = L.Swizzle(chunk, tuple(chosen))
        candidates.append((cost(0, swizzle), 0, swizzle))
    _, pad, swizzle = min(candidates, key=lambda c: c[0])
    return rows + pad, swizzle


def _run_length(lin: L.Linear, eb: int) -> int:
    """Registers of a lane at consecutive addresses along axis 1, from the first, up to 16 bytes."""
    run = 1
    while run < lin.num_regs and run * eb < 16 and (lin.regs[run] - lin.regs[0]).tolist() == [0, run]:
        run *= 2
    return run


def _transpose_readable(dst_lin: L.Linear, shape: tuple[int, ...], elem_bytes: int, arch: Arch,
                        options: CompileOptions) -> bool:
    """Can transpose reads fill layout dst_lin from the row-major tile? Every source lane's 8
    bytes must be aligned: its column a multiple of 4, and so the row stride (the arena offsets
    are 16-byte aligned)."""
    if not (L.transpose_reads(arch, options.transpose_reads, elem_bytes) and shape[1] % 4 == 0):
        return False
    src = L.transpose_read_source(dst_lin)
    if src is None:
        return False
    cols = np.concatenate([src.lane_bases, src.wave_bases, src.regs[0::L.TRANSPOSE_READ_VALUES]])[:, 1]
    return bool((cols % L.TRANSPOSE_READ_VALUES == 0).all())


def _program_order(fn: ir.Operation) -> tuple[dict[ir.Operation, int], dict[ir.Operation, int]]:
    """Each op's position in a pre-order walk, and the last position inside it (its regions)."""
    first: dict[ir.Operation, int] = {}
    last: dict[ir.Operation, int] = {}
    stack: list[tuple[ir.Operation, bool]] = [(fn, False)]
    while stack:
        op, done = stack.pop()
        if done:
            last[op] = len(first) - 1
            continue
        first[op] = len(first)
        stack.append((op, True))
        inner = [o for region in op.regions for block in region.blocks for o in ops_in(block)]
        stack.extend((o, False) for o in reversed(inner))
    return first, last


def _ancestors(op: ir.Operation) -> list[ir.Operation]:
    chain = []
    while op.name != "func.func":
        op = op.parent
        chain.append(op)
    return chain


def _live_end(op: ir.Operation, first: dict[ir.Operation, int], last: dict[ir.Operation, int]) -> int:
    """Where a resident tile's last read may happen: a read inside a loop the store is outside of
    happens again until that loop ends."""
    outside = set(_ancestors(op))
    end = first[op]
    for use in op.result.uses:
        user = use.owner.operation
        loops = [a for a in _ancestors(user) if a not in outside and a.name == "scf.for"]
        end = max(end, last[loops[-1]] if loops else first[user])
    return end


class Residents(NamedTuple):
    """A kernel function's resident regions (_place_residents)."""

    top: int  # the byte they reach
    spans: list[tuple[int, int, int]]  # per region: first and last program position it is live, the byte it reaches
    order: dict[ir.Operation, int]  # every op's program position, as the spans count them
    reads: dict[ir.Operation, tuple[int, int]]  # the regions' reads (tile.local_load) and their bytes


def _place_residents(fn: ir.Operation, threads: L.Threads, options: CompileOptions, arch: Arch,
                     source: str | None, align: bool) -> Residents:
    """Stage fn's resident conversions, placing each region first-fit among the regions still
    live at its store."""
    first, last = _program_order(fn)
    residents = sorted((op for op in first if op.name == "tile.convert_layout" and "tile.resident" in op.attributes),
                       key=first.__getitem__)
    live: list[tuple[int, int, int]] = []  # (last position, offset, bytes)
    spans = []
    reads: dict[ir.Operation, tuple[int, int]] = {}
    top = 0
    for op in residents:
        start, end = first[op], _live_end(op, first, last)
        size = -(-_staging(op, 0, threads, options, arch, source, align)[1] // 16) * 16  # 16-byte aligned regions
        live = sorted((r for r in live if r[0] >= start), key=lambda r: r[1])
        at = 0
        for _, offset, taken in live:
            if at + size <= offset:
                break
            at = max(at, offset + taken)
        reads.update(dict.fromkeys(_stage_resident(op, at, threads, options, arch, source, align), (at, at + size)))
        live.append((end, at, size))
        spans.append((start, end, at + size))
        top = max(top, at + size)
    return Residents(top, spans, first, reads)


def _stage_resident(op: ir.Operation, at: int, threads: L.Threads, options: CompileOptions, arch: Arch,
                    source: str | None, align: bool) -> list[ir.Operation]:
    """Store the tile once where the conversion stands; each user reads it back. Returns the reads."""
    attrs, size = _staging(op, at, threads, options, arch, source, align)
    with ir.InsertionPoint(op), op.location:
        tile_op("barrier", [], [])
        tile_op("local_store", [op.operands[0]], [], attrs)
        tile_op("barrier", [], [])
    loads = []
    for use in list(op.result.uses):
        user = use.owner.operation
        with ir.InsertionPoint(user), op.location:
            loads.append(tile_op("local_load", [], [op.result.type], attrs))
            user.operands[use.operand_number] = loads[-1].result
    op.erase()
    return [load.operation for load in loads]


def _stage_convert(op: ir.Operation, at: int, war_barrier: bool, reads_only: bool, private: bool,
                   joined: list[tuple[ir.Operation, int]], threads: L.Threads, options: CompileOptions, arch: Arch,
                   source: str | None, align: bool) -> None:
    """The store (unless an earlier staging stored these bytes or stores this one's: `reads_only`)
    and those of the later stagings `joined` to it (with their offsets), the barriers (a
    wave-private staging: a wave fence after the store), and the load."""
    attrs, _size = _staging(op, at, threads, options, arch, source, align)
    with ir.InsertionPoint(op), op.location:
        if not reads_only:
            if war_barrier:
                tile_op("barrier", [], [])
            tile_op("local_store", [op.operands[0]], [], attrs)
            for follower, offset in joined:
                follower_attrs = _staging(follower, offset, threads, options, arch, source, align)[0]
                tile_op("local_store", [follower.operands[0]], [], follower_attrs)
            tile_op("wave_fence" if private else "barrier", [], [])
        new = tile_op("local_load", [], [op.result.type], attrs)
    op.result.replace_all_uses_with(new.result)
    op.erase()


def _runs(lin: L.Linear, axis: int) -> int:
    """How many consecutive register pairs of a layout step by +1 along `axis` only."""
    unit = [0] * lin.regs.shape[1]
    unit[axis] = 1
    steps = lin.regs[1:] - lin.regs[:-1]
    return int((steps == unit).all(axis=1).sum())


def _check(op: ir.Operation, size: int, arch: Arch, source: str | None) -> None:
    if size > arch.lds_bytes:
        raise op_error(op, f"this tile needs {size} bytes of LDS to change layout, but {arch.name} has "
                           f"{arch.lds_bytes} bytes per workgroup; use smaller block sizes",
                       source, "stage-lds")
