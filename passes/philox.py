"""Philox-4x32-10 in IR: its rounds (the emitter's `philox` and the lowering of `philox_bits` build
them), and the lowering rule of tile.philox_bits.

`philox_bits(key0, key1, j, c1, c2, c3)` is word (j mod 4) of Philox for counter (j >> 2, c1, c2,
c3) (tiledsl.reference.philox_bits), so 4 consecutive j share one call. The rule computes one call
per group of 4 elements that a lane holds in its registers when it can prove they form one group:
j is `s + coordinate` along one axis of the tile with s a multiple of 4 (an arange plus a scalar the
axis analysis knows to be a multiple of 4), the other operands do not vary along that axis, and the
layout gives each lane whole aligned groups of 4 along it. Otherwise each element makes its own
call and picks its word: the same bits, four times the work.
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


def _words(k0: ir.Value, k1: ir.Value, j: ir.Value, c1: ir.Value, c2: ir.Value,
           c3: ir.Value) -> tuple[ir.Value, ...]:
    return philox_rounds((k0, k1), (arith.ShRUIOp(j, _i32(2)).result, c1, c2, c3), const=_i32, umulhi=_umulhi)


def _pick(words: tuple[ir.Value, ...], j: ir.Value) -> ir.Value:
    """words[j & 3] for a run-time j."""
    q = arith.AndIOp(j, _i32(3)).result

    def eq(k: int) -> ir.Value:
        return arith.CmpIOp(arith.CmpIPredicate.eq, q, _i32(k)).result

    low = arith.CmpIOp(arith.CmpIPredicate.ult, q, _i32(2)).result
    return arith.SelectOp(low, arith.SelectOp(eq(0), words[0], words[1]).result,
                          arith.SelectOp(eq(2), words[2], words[3]).result).result


def rule_philox_bits(lw: Any, op: ir.Operation) -> None:
    vals = [lw.v(x) for x in op.operands]  # key0, key1, j, c1, c2, c3
    rt = lw.lowered_type(op.result.type)
    if not isinstance(rt, ir.VectorType):
        lw.vmap[op.result] = _pick(_words(*vals), vals[2])
        return
    scalars = [lw.splats.get(x) for x in vals]

    def elem(i: int, r: int) -> ir.Value:
        return scalars[i] if scalars[i] is not None else vector.ExtractOp(vals[i], [], [r]).result

    n = ir.VectorType(rt).shape[0]
    out: list[ir.Value | None] = [None] * n
    groups = _groups(lw, op)
    if groups is None:
        for r in range(n):
            args = [elem(i, r) for i in range(6)]
            out[r] = _pick(_words(*args), args[2])
    else:
        for members in groups:
            first = members[0][0]
            words = _words(*(elem(i, first) for i in range(6)))
            for r, q in members:
                out[r] = words[q]
    lw.vmap[op.result] = lw.pack(out, ir.VectorType(rt).element_type)


def _strip(v: ir.Value, names: tuple[str, ...]) -> ir.Value:
    while (op := defining_op(v)) is not None and op.name in names:
        v = op.operands[0]
    return v


def _aligned_axis(lw: Any, j: ir.Value, rank: int) -> int | None:
    """The axis along which j = s + coordinate with s a multiple of 4, or None."""
    v = _strip(j, ("tile.convert_layout", "tile.broadcast"))
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


def _groups(lw: Any, op: ir.Operation) -> list[list[tuple[int, int]]] | None:
    """Registers grouped by the Philox call they share, each with its word, or None."""
    shape = tile_shape(op.result.type)
    axis = _aligned_axis(lw, op.operands[2], len(shape))
    if axis is None or shape[axis] % 4:
        return None
    if not all(_constant_along(op.operands[i], axis) for i in (0, 1, 3, 4, 5)):
        return None
    lin = lw.lin(op.result)
    if any(int(b[axis]) % 4 for b in (*lin.lane_bases, *lin.wave_bases)):
        return None
    groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for r in range(lin.regs.shape[0]):
        offs = [int(x) for x in lin.regs[r]]
        key = tuple(o // 4 if d == axis else o for d, o in enumerate(offs))
        groups.setdefault(key, []).append((r, offs[axis] % 4))
    return list(groups.values())
