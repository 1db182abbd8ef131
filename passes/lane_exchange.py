"""Layout conversions that exchange registers between the lanes of a wave instead of going
through LDS.

gfx11's WMMA accumulator gives a lane every other row of one column of a 16x16 block, the lanes 16
apart holding the rows in between, while an A operand wants each lane to hold a whole row (both
halves of the wave holding it: gfx11 operands hold every value twice). Attention's P tile goes
from one to the other every key block. Every value a lane needs is then in its own registers or in
those of the lane 16 away, so one `v_permlanex16_b32` per 32-bit word (a lane reads a lane of the
other 16 in its row of 32) and a byte permute per destination word do what an LDS store, a wait
and a load did (stage-lds leaves such conversions to lower-to-gpu).

`exchange_map` finds such conversions from the two layouts' coordinates: for each destination
register, the source register a lane takes from itself and the one it takes from the lane `xor`
away, each the same in every lane that takes it (one instruction serves the whole wave), and which
lanes take which (the same lanes in every wave).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Hashable
from typing import NamedTuple

import numpy as np
from mlir import ir
from mlir.dialects import arith, llvm, rocdl, vector

from tiledsl.backends.rocm.arch import Arch
from tiledsl.options import CompileOptions
from tiledsl.passes import layouts as L


class Exchange(NamedTuple):
    """Destination register j of a lane is its own source register own[j] where the lane's bit
    of takes_own[j] is set, else source register other[j] of the lane `xor` away (-1: no lane
    takes that side)."""

    xor: int
    own: tuple[int, ...]
    other: tuple[int, ...]
    takes_own: tuple[int, ...]  # bit l: lane l of every wave takes its own register


def lane_exchange(src: L.Layout, dst: L.Layout, shape: tuple[int, ...], threads: L.Threads, arch: Arch,
                  options: CompileOptions) -> Exchange | None:
    """The exchange that converts src to dst on this arch, or None (LDS then)."""
    if not (options.lane_exchange and arch.permlanex16 and threads.wave_size == 32):
        return None
    return exchange_map(src, dst, shape, threads, 16)


def word_relabelling(acc: L.Layout, shape: tuple[int, ...], threads: L.Threads, arch: Arch,
                     options: CompileOptions) -> tuple[int, ...] | None:
    """For a dot accumulator [M, N] whose 16-bit values become the A operand of a later dot (P of
    P V): a relabelling of its N index (permk images; the dot relabels its B operand alike) under
    which every word of the operand is one whole 16-bit-pair word of the accumulator's, the same
    word in every lane, each half of the wave taking its own and the other half the other's. Each
    word is then one `ds_swizzle_b32` (`lower_exchange`), on the LDS crossbar, where the natural
    order needs a `v_permlanex16_b32` and a byte permute on the vector ALU that gfx11's WMMAs
    share. None when the operand needs no exchange, or no relabelling does it."""
    if not options.swizzle_exchange or not isinstance(acc, L.Mma) or len(shape) != 2 or shape[1] & (shape[1] - 1):
        return None
    opa = acc.with_kind("opa")
    if L.k_permutation(acc, opa, shape, 1, threads) is not None or lane_exchange(acc, opa, shape, threads, arch,
                                                                                 options) is None:
        return None  # the operand keeps the accumulator's registers (gfx12), or goes through LDS
    # Two of N's bits swapped: gfx11's wave half (the accumulator's rows alternate between the
    # halves) with the bit a register pair's two values differ in. Only swaps are tried: a search
    # over every permutation of 7 bits took 15 s where the swap is found in milliseconds.
    powers = [1 << i for i in range(shape[1].bit_length() - 1)]
    for i, j in itertools.combinations(range(len(powers)), 2):
        images = list(powers)
        images[i], images[j] = images[j], images[i]
        ex = exchange_map(L.PermK(1, tuple(images), acc), opa, shape, threads, 16)
        if ex is not None and all(_whole_word(ex, range(q, q + 2)) for q in range(0, len(ex.own), 2)):
            return tuple(images)
    return None


@functools.lru_cache(maxsize=1024)
def exchange_map(src: L.Layout, dst: L.Layout, shape: tuple[int, ...], threads: L.Threads,
                 xor: int) -> Exchange | None:
    """See the module docstring; None when some value is neither in a lane's own registers nor in
    the lane `xor` away, or when a register would need different sources in different lanes.
    Cached: stage-lds asks for every conversion it would stage, lower-to-gpu again for those it
    left."""
    es = L.element_indices(src, shape, threads)  # [threads, src regs]
    ed = L.element_indices(dst, shape, threads)  # [threads, dst regs]
    count, nregs = es.shape
    where = np.full((count, int(np.prod(shape))), -1)  # the first source register of each thread holding a value
    for r in reversed(range(nregs)):
        where[np.arange(count), es[:, r]] = r
    t = np.arange(count)[:, None]
    own, other = where[t, ed], where[t ^ xor, ed]
    if ((own < 0) & (other < 0)).any():
        return None
    takes = own >= 0
    ws = threads.wave_size
    regs: list[tuple[int, int, int]] = []
    for j in range(ed.shape[1]):
        lanes = takes[:, j].reshape(threads.waves, ws)
        mine, theirs = np.unique(own[takes[:, j], j]), np.unique(other[~takes[:, j], j])
        if len(mine) > 1 or len(theirs) > 1 or not (lanes == lanes[0]).all():
            return None
        regs.append((int(mine[0]) if len(mine) else -1, int(theirs[0]) if len(theirs) else -1,
                     sum(1 << lane for lane in range(ws) if lanes[0, lane])))
    own_regs, other_regs, masks = zip(*regs, strict=True)
    return Exchange(xor, own_regs, other_regs, masks)


def lower_exchange(vals: list[ir.Value], ex: Exchange, lane: ir.Value,
                   once: Callable[[Hashable, Callable[[], ir.Value]], ir.Value]) -> list[ir.Value]:
    """The destination registers from the source registers `vals` (one value each). The other
    lane's registers come in 32-bit words, one `v_permlanex16_b32` each (a 16-bit tile's pairs of
    registers share one). A 16-bit destination word whose two values come from one word of the
    lane's own and one of the other lane's is one `v_perm_b32` of the two, its byte selector
    chosen per lane; other registers are selects. once(key, build) gives build()'s value computed
    once before any loop (lane tests and selectors: loop-invariant)."""
    elt = vals[0].type
    bits = ir.IntegerType(elt).width if isinstance(elt, ir.IntegerType) else ir.FloatType(elt).width
    per_word = 32 // bits
    i32 = ir.IntegerType.get_signless(32)
    word_t = ir.VectorType.get([per_word], elt) if per_word > 1 else elt
    own_words: dict[int, ir.Value] = {}
    their_words: dict[int, ir.Value] = {}

    def own_word(w: int) -> ir.Value:
        if w not in own_words:
            members = vals[w * per_word:(w + 1) * per_word]
            word = members[0] if per_word == 1 else vector.FromElementsOp(word_t, members).result
            own_words[w] = word if word.type == i32 else llvm.bitcast(i32, word)
        return own_words[w]

    def their_word(w: int) -> ir.Value:
        if w not in their_words:
            their_words[w] = other_row(own_word(w))
        return their_words[w]

    def unpack(word: ir.Value) -> list[ir.Value]:
        back = word if per_word == 1 and elt == i32 else llvm.bitcast(word_t, word)
        return [back] if per_word == 1 else [vector.ExtractOp(back, [], [k]).result for k in range(per_word)]

    def lane_takes_own(mask: int) -> ir.Value:
        return once(("lane_bit", mask), lambda: lane_bit(lane, mask))

    out: list[ir.Value] = []
    for q in range(0, len(ex.own), per_word):
        group = range(q, min(q + per_word, len(ex.own)))
        if per_word == 2 and len(group) == 2 and (whole := _whole_word(ex, group)):
            word, mask = whole
            out.extend(unpack(_swizzle_halves(own_word(word), mask, ex.xor)))
            continue
        if per_word == 2 and len(group) == 2 and (perm := _perm_word(ex, group)):
            mine_w, theirs_w, selectors = perm
            sel = once(("perm", group.start, ex), lambda s=selectors, g=group: _selector(
                s, [lane_takes_own(ex.takes_own[j]) for j in g]))
            word = llvm.call_intrinsic(i32, "llvm.amdgcn.perm", [their_word(theirs_w), own_word(mine_w), sel], [], [])
            out.extend(unpack(word))
            continue
        for j in group:
            mine, theirs = ex.own[j], ex.other[j]
            take_other = unpack(their_word(theirs // per_word))[theirs % per_word] if theirs >= 0 else None
            if theirs < 0:
                out.append(vals[mine])
            elif mine < 0:
                out.append(take_other)
            else:
                out.append(arith.SelectOp(lane_takes_own(ex.takes_own[j]), vals[mine], take_other).result)
    return out


_LOW_HALF = (1 << 16) - 1  # lanes 0-15 of a wave32


def _whole_word(ex: Exchange, group: range) -> tuple[int, int] | None:
    """For a pair of 16-bit destination registers: (w, lanes) when both are source word w as it is
    (registers 2w, 2w+1 in order), lanes taking their own and the others the lane `xor` away's,
    with `lanes` one half of the wave (a swizzle reads lane l & 15, or l | 16)."""
    j0, j1 = group
    mask = ex.takes_own[j0]
    if ex.xor != 16 or ex.takes_own[j1] != mask or mask not in (_LOW_HALF, _LOW_HALF << 16):
        return None
    regs = (ex.own[j0], ex.own[j1])
    if regs != (ex.other[j0], ex.other[j1]) or regs[0] % 2 or regs[1] != regs[0] + 1:
        return None
    return regs[0] // 2, mask


def _swizzle_halves(word: ir.Value, own_lanes: int, xor: int) -> ir.Value:
    """Every lane's `word` from lane l & 15 (own_lanes the low half: they keep their own, the high
    half reads them) or lane l | 16 (the reverse): ds_swizzle_b32 in its bitmask mode, whose
    offset is and_mask | or_mask << 5 | xor_mask << 10 over the lane's 5 bits."""
    pattern = 0x0F if own_lanes == _LOW_HALF else 0x1F | xor << 5
    return rocdl.ds_swizzle(ir.IntegerType.get_signless(32), word, _c32(pattern))


def _perm_word(ex: Exchange, group: range) -> tuple[int, int, dict[tuple[bool, ...], int]] | None:
    """For a pair of 16-bit destination registers: the lane's own source word and the other
    lane's that hold both, and the v_perm_b32 byte selector for each way a lane may take them
    (own or other, per register; v_perm_b32 numbers the second operand's bytes 0-3 and the
    first's 4-7: the other lane's word goes first). None if they span more words."""
    mine = {ex.own[j] // 2 for j in group if ex.own[j] >= 0}
    theirs = {ex.other[j] // 2 for j in group if ex.other[j] >= 0}
    if len(mine) > 1 or len(theirs) > 1:
        return None
    selectors = {}
    for takes in ((True, True), (True, False), (False, True), (False, False)):
        if all((ex.own[j] if own else ex.other[j]) >= 0 for j, own in zip(group, takes, strict=True)):
            selectors[takes] = perm_halves(*(2 * (ex.own[j] % 2) if own else 4 + 2 * (ex.other[j] % 2)
                                             for j, own in zip(group, takes, strict=True)))
    return (next(iter(mine), next(iter(theirs), 0)), next(iter(theirs), next(iter(mine), 0)), selectors)


def perm_halves(low: int, high: int) -> int:
    """The v_perm_b32 byte selector whose result takes its low 16 bits from byte `low` (and the
    next) and its high 16 bits from byte `high` (and the next). v_perm_b32 numbers its second
    operand's bytes 0-3 and its first operand's bytes 4-7."""
    return low | (low + 1) << 8 | high << 16 | (high + 1) << 24


def _selector(selectors: dict[tuple[bool, ...], int], takes_own: list[ir.Value]) -> ir.Value:
    """The byte selector of this lane: the constant of the way it takes its two registers."""
    def pick(prefix: tuple[bool, ...]) -> ir.Value | None:
        if len(prefix) == len(takes_own):
            return _c32(selectors[prefix]) if prefix in selectors else None
        yes, no = pick((*prefix, True)), pick((*prefix, False))
        if yes is None or no is None:
            return yes if no is None else no
        return arith.SelectOp(takes_own[len(prefix)], yes, no).result
    return pick(())


def lane_bit(lane: ir.Value, mask: int) -> ir.Value:
    """i1: is this lane's bit of the wave32 mask set?"""
    shifted = arith.ShRUIOp(_c32(mask), lane).result
    return arith.CmpIOp(arith.CmpIPredicate.ne, arith.AndIOp(shifted, _c32(1)).result, _c32(0)).result


def other_row(word: ir.Value) -> ir.Value:
    """An i32 `word` as lane i ^ 16 holds it, in every lane of a wave32: one v_permlanex16_b32, lane
    i of each row of 16 reading lane i of the other row (selects 0..15 in order)."""
    i32 = ir.IntegerType.get_signless(32)
    return rocdl.permlanex16(i32, word, word, _c32(0x76543210), _c32(0xFEDCBA98), True, False)


def _c32(v: int) -> ir.Value:
    v &= 0xFFFFFFFF
    return arith.ConstantOp(ir.IntegerType.get_signless(32), v - (1 << 32) if v >= 1 << 31 else v).result
