"""Philox-4x32-10 in IR: its rounds (the emitter's `philox` and the lowering of `philox_byte` build
them), and the lowering rule of tile.philox_byte.

`philox_byte(key0, key1, j, i, c2, c3)` is byte (j mod 4) of word (i mod 4) of Philox for counter
(j >> 2, i >> 2, c2, c3) (tiledsl.reference.philox_byte): a 4 x 4 block of (j, i) shares one call.
The rule computes one call per group of elements a lane holds that it can prove to share one:
along an axis where j (or i) is `s + coordinate` with s a multiple of 4 (an arange plus a scalar
the axis analysis knows to be a multiple of 4), the other operands do not vary, and the layout
gives each lane whole aligned groups of 4, registers 4 apart in that coordinate's low bits share
the call; each then picks its word and byte by its own coordinate, known when compiling. Elsewhere
each element makes its own call and picks at run time: the same bits, more work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlir import ir
from mlir.dialects import arith, vector

from tiledsl.passes.common import constant_int, defining_op, tile_shape

PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # the round multipliers
PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # the key's Weyl increments

Combine = Callable[[Callable[[ir.Value, ir.Value], ir.Value], ir.Value, ir.Value], ir.Value]


def _direct(make: Callable[[ir.Value, ir.Value], ir.Value], a: ir.Value, b: ir.Value) -> ir.Value:
    return make(a, b)


def philox_rounds(key: tuple[ir.Value, ir.Value], counter: tuple[ir.Value, ir.Value, ir.Value, ir.Value], *,
                  const: Callable[[int], ir.Value], umulhi: Callable[[ir.Value, ir.Value], ir.Value],
                  combine: Combine = _direct) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    """The 4 output words of Philox-4x32-10 (Salmon et al., SC'11): 10 rounds of two 32x32->64
    multiplies and xors, the key bumped by the Weyl constants between rounds. `combine(make, a,
    b)` builds `make(a, b)`, broadcasting a scalar to a tile where the emitter needs it."""
    k0, k1 = key
    c0, c1, c2, c3 = counter
    m0, m1, w0, w1 = (const(x) for x in (*PHILOX_M, *PHILOX_W))

    def mul(a: ir.Value, b: ir.Value) -> ir.Value:
        return arith.MulIOp(a, b).result

    def xor(a: ir.Value, b: ir.Value) -> ir.Value:
        return arith.XOrIOp(a, b).result

    def add(a: ir.Value, b: ir.Value) -> ir.Value:
        return arith.AddIOp(a, b).result

    for r in range(10):
        hi0, hi1 = combine(umulhi, m0, c0), combine(umulhi, m1, c2)
        lo0, lo1 = combine(mul, m0, c0), combine(mul, m1, c2)
        c0, c1, c2, c3 = (combine(xor, combine(xor, hi1, c1), k0), lo1,
                          combine(xor, combine(xor, hi0, c3), k1), lo0)
        if r < 9:
            k0, k1 = combine(add, k0, w0), combine(add, k1, w1)
    return c0, c1, c2, c3


def _i32(x: int) -> ir.Value:
    t = ir.IntegerType.get_signless(32)
    return arith.ConstantOp(t, ir.IntegerAttr.get(t, x - (1 << 32) if x >= 1 << 31 else x)).result


def _umulhi(a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.MulUIExtendedOp(a, b).high


def _words(k0: ir.Value, k1: ir.Value, j: ir.Value, i: ir.Value, c2: ir.Value,
           c3: ir.Value) -> tuple[ir.Value, ...]:
    two = _i32(2)
    return philox_rounds((k0, k1), (arith.ShRUIOp(j, two).result, arith.ShRUIOp(i, two).result, c2, c3),
                         const=_i32, umulhi=_umulhi)


def _word(words: tuple[ir.Value, ...], i: ir.Value | int) -> ir.Value:
    """words[i & 3]: indexed when compiling for a known i, else selected at run time."""
    if isinstance(i, int):
        return words[i & 3]
    q = arith.AndIOp(i, _i32(3)).result

    def eq(k: int) -> ir.Value:
        return arith.CmpIOp(arith.CmpIPredicate.eq, q, _i32(k)).result

    low = arith.CmpIOp(arith.CmpIPredicate.ult, q, _i32(2)).result
    return arith.SelectOp(low, arith.SelectOp(eq(0), words[0], words[1]).result,
                          arith.SelectOp(eq(2), words[2], words[3]).result).result


def _byte(word: ir.Value, j: ir.Value | int) -> ir.Value:
    """Byte (j & 3) of word, as an i32 in 0..255."""
    if isinstance(j, int):
        shift = _i32(8 * (j & 3))
    else:
        shift = arith.ShLIOp(arith.AndIOp(j, _i32(3)).result, _i32(3)).result
    return arith.AndIOp(arith.ShRUIOp(word, shift).result, _i32(255)).result


def rule_philox_byte(lw: Any, op: ir.Operation) -> None:
    vals = [lw.v(x) for x in op.operands]  # key0, key1, j, i, c2, c3
    rt = lw.lowered_type(op.result.type)
    if not isinstance(rt, ir.VectorType):
        lw.vmap[op.result] = _byte(_word(_words(*vals), vals[3]), vals[2])
        return
    scalars = [lw.splats.get(x) for x in vals]

    def elem(k: int, r: int) -> ir.Value:
        return scalars[k] if scalars[k] is not None else vector.ExtractOp(vals[k], [], [r]).result

    n = ir.VectorType(rt).shape[0]
    out: list[ir.Value | None] = [None] * n
    for members in _groups(lw, op):
        first = members[0][0]
        words = _words(*(elem(k, first) for k in range(6)))
        # A member whose i (or j) is not fixed when compiling has the group's i (or j): the
        # group only spans axes along which it is constant. So pick at run time once per group.
        word_any = _word(words, elem(3, first)) if any(m[2] is None for m in members) else None
        for r, j_low, i_low in members:
            word = words[i_low] if i_low is not None else word_any
            out[r] = _byte(word, j_low if j_low is not None else elem(2, first))
    lw.vmap[op.result] = lw.pack(out, ir.VectorType(rt).element_type)


def _strip(v: ir.Value, names: tuple[str, ...]) -> ir.Value:
    while (op := defining_op(v)) is not None and op.name in names:
        v = op.operands[0]
    return v


def _aligned_axis(lw: Any, x: ir.Value, rank: int) -> int | None:
    """The axis along which x = s + coordinate with s a multiple of 4, or None."""
    v = _strip(x, ("tile.convert_layout", "tile.broadcast"))
    axis = 0
    if rank == 2:
        op = defining_op(v)
        if op is None or op.name != "tile.expand_dims":
            return None
        axis = 1 - ir.IntegerAttr(op.attributes["axis"]).value
        v = op.operands[0]
    elif rank != 1:
        return None
    v = _strip(v, ("tile.convert_layout",))
    op = defining_op(v)
    if op is None:
        return None
    if op.name == "tile.arange":
        return axis if ir.IntegerAttr(op.attributes["start"]).value % 4 == 0 else None
    if op.name != "arith.addi":
        return None
    a, b = (_strip(x, ("tile.convert_layout",)) for x in op.operands)
    for ramp, offset in ((a, b), (b, a)):
        rop, oop = defining_op(ramp), defining_op(offset)
        if rop is None or rop.name != "tile.arange" or ir.IntegerAttr(rop.attributes["start"]).value % 4:
            continue
        if oop is not None and oop.name == "tile.splat" and lw.axis.info(oop.operands[0]).div % 4 == 0:
            return axis
        c = constant_int(offset)
        if c is not None and c % 4 == 0:
            return axis
    return None


def _constant_along(v: ir.Value, axis: int) -> bool:
    """Does v not vary along `axis` (a splat, a constant, or a broadcast of size 1 there)?"""
    v = _strip(v, ("tile.convert_layout",))
    op = defining_op(v)
    if op is None:
        return False
    if op.name == "tile.splat" or constant_int(v) is not None:
        return True
    return op.name == "tile.broadcast" and tile_shape(op.operands[0].type)[axis] == 1


Member = tuple[int, int | None, int | None]  # register, j & 3 and i & 3 when known when compiling


def _groups(lw: Any, op: ir.Operation) -> list[list[Member]]:
    """The registers of the result grouped by the Philox call they can share (a group of one
    where nothing is provable), each with j & 3 and i & 3 where the layout fixes them."""
    shape = tile_shape(op.result.type)
    lin = lw.lin(op.result)
    rank = len(shape)
    aligned = {role: _aligned_axis(lw, op.operands[k], rank) for role, k in (("j", 2), ("i", 3))}

    def whole_groups(d: int) -> bool:  # each lane holds aligned groups of 4 along d
        return shape[d] % 4 == 0 and not any(int(b[d]) % 4 for b in (*lin.lane_bases, *lin.wave_bases))

    def groupable(d: int) -> bool:
        if not whole_groups(d):
            return False
        for role, k in (("j", 2), ("i", 3)):
            if aligned[role] != d and not _constant_along(op.operands[k], d):
                return False
        return all(_constant_along(op.operands[k], d) for k in (0, 1, 4, 5))

    grouped = [groupable(d) for d in range(rank)]
    low = {role: d if d is not None and whole_groups(d) else None for role, d in aligned.items()}
    groups: dict[tuple[int, ...], list[Member]] = {}
    for r in range(lin.regs.shape[0]):
        offs = [int(x) for x in lin.regs[r]]
        key = tuple(o // 4 if grouped[d] else o for d, o in enumerate(offs)) if any(grouped) else (r,)
        j_low = offs[low["j"]] % 4 if low["j"] is not None else None
        i_low = offs[low["i"]] % 4 if low["i"] is not None else None
        groups.setdefault(key, []).append((r, j_low, i_low))
    return list(groups.values())
