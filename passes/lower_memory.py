"""Global-memory rules of lower-to-gpu (passes/lower_to_gpu.py): loads, stores and atomic adds.

A tile access becomes vector accesses where passes/axis_info.py proves contiguity, alignment and a
uniform mask; the accesses of one contiguous group share one address and differ by immediate
offsets. A group under a lane-dependent mask is a buffer access whose offset one select moves out
of range (docs/compiler.md, the kernel ABI); under a uniform mask, one branch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from mlir import ir
from mlir.dialects import arith, llvm, rocdl, scf, vector

from tiledsl.errors import CompileError
from tiledsl.ir.dialect import int_attr
from tiledsl.lang.ast import DTYPE_BYTES
from tiledsl.passes.common import (
    defining_op,
    is_positive_zero,
    is_tile,
    reshaped_source,
    tensor_pointer,
    tile_dtype,
    uniform_constant_int,
)
from tiledsl.passes.lane_exchange import perm_halves
from tiledsl.passes.lower_fp8 import from_memory, memory_type, to_memory
from tiledsl.passes.offset_deltas import Coefficients, coefficients, nonnegative, nonnegative_args, register_delta

if TYPE_CHECKING:
    from tiledsl.passes.lower_to_gpu import _Lowering


def i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def c32(v: int) -> ir.Value:
    return arith.ConstantOp(i32(), v).result


def gep(base: ir.Value, offset: ir.Value, elt: ir.Type) -> ir.Value:
    return llvm.getelementptr(base.type, base, [offset], [-2147483648], elt, 0)


# -- rules ------------------------------------------------------------------------------------------

def _masked_value(lw: _Lowering, mask: ir.Value) -> Callable[[int], ir.Value] | None:
    """Register i's mask bit, computed where it is asked for; None when the mask is `true`."""
    if uniform_constant_int(mask) == 1:
        return None
    m = lw.v(mask)
    return (lambda i: _element(m, i)) if isinstance(m.type, ir.VectorType) else (lambda i: m)


def _element(v: ir.Value, i: int) -> ir.Value:
    """Element i of a lowered vector. A compare is redone on the elements right here instead of
    extracted from the whole-vector compare: every live i1 takes a scalar register (a pair on
    wave64), and a vector compare makes them all live at once, before the first use."""
    op = v.owner.operation if isinstance(v, ir.OpResult) else None
    if op is not None and op.name == "arith.cmpi":
        a, b = op.operands
        return arith.CmpIOp(op.attributes["predicate"], _element(a, i), _element(b, i)).result
    if op is not None and op.name == "vector.shuffle" and op.operands[0] == op.operands[1]:
        src = op.operands[0]
        return _element(src, ir.DenseI64ArrayAttr(op.attributes["mask"])[i] % ir.VectorType(src.type).shape[0])
    if op is not None and op.name == "vector.broadcast" and not isinstance(op.operands[0].type, ir.VectorType):
        return op.operands[0]
    return vector.ExtractOp(v, [], [i]).result


def _vector_runs(lw: _Lowering, op: ir.Operation, tile: ir.Value, mask: ir.Value | None) -> list[tuple[int, int]]:
    """Split the lane's registers into (first, width) accesses: `width` consecutive registers
    become one vector access when the layout holds them at consecutive last-axis positions, the
    offsets are consecutive there (axis_info.contig), the mask is uniform over them (const) and
    the first address is aligned to the whole vector (div, and the layout's column bases).
    Tensor base pointers are 16-byte aligned (the launcher's buffers are)."""
    offsets = op.operands[1]
    if not is_tile(tile):
        return [(0, 1)]
    nregs = lw.regs(tile.type)
    lin = lw.lin(tile)
    eb = DTYPE_BYTES[tile_dtype(tile.type)]
    info = lw.axis.info(offsets)
    limit = min(info.contig, info.div, max(1, 16 // eb))
    if mask is not None:
        limit = min(limit, lw.axis.info(mask).const)
    for b in np.concatenate([lin.lane_bases[:, -1], lin.wave_bases[:, -1]]):
        if b:
            limit = min(limit, int(b) & -int(b))
    runs, i = [], 0
    while i < nregs:
        width = 1
        col = int(lin.regs[i, -1])
        align = (col & -col) if col else 1 << 30
        while width * 2 <= min(limit, align) and i + width * 2 <= nregs and all(
                (lin.regs[i + j, :-1] == lin.regs[i, :-1]).all() and lin.regs[i + j, -1] == col + j
                for j in range(width, width * 2)):
            width *= 2
        runs.append((i, width))
        i += width
    return runs


def _access_groups(lw: _Lowering, op: ir.Operation, tile: ir.Value, runs: list[tuple[int, int]],
                   mask: ir.Value | None) -> list[list[tuple[int, int]]]:
    """The (first, width) accesses grouped by the aligned group of last-axis elements they fall
    in, where the offsets are consecutive (axis_info.contig) and the mask is uniform (const). A
    group shares one address -- its first register's, plus constants that LLVM folds into the
    instructions' immediate offsets -- and one mask test."""
    if not is_tile(tile):
        return [runs]
    g = lw.axis.info(op.operands[1]).contig
    if mask is not None:
        g = min(g, lw.axis.info(mask).const)
    regs = lw.lin(tile).regs
    groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for run in runs:
        # Lane and register bits of a coordinate are disjoint, so registers share a key exactly
        # when their elements share an aligned group in every lane.
        groups.setdefault((*map(int, regs[run[0], :-1]), int(regs[run[0], -1]) // g), []).append(run)
    return list(groups.values())


def _group_deltas(lw: _Lowering, tile: ir.Value, group: list[tuple[int, int]]) -> list[int]:
    """Each access's last-axis distance (elements) from the group's first: constant offsets."""
    if not is_tile(tile):
        return [0]
    cols = lw.lin(tile).regs[:, -1]
    return [int(cols[first]) - int(cols[group[0][0]]) for first, _ in group]


def _group_addresses(lw: _Lowering, tile: ir.Value, group: list[tuple[int, int]], ptr: ir.Value,
                     offs: list[ir.Value], elt: ir.Type) -> list[ir.Value]:
    base = gep(ptr, offs[group[0][0]], elt)
    return [base if d == 0 else llvm.getelementptr(base.type, base, [], [d], elt, 0)
            for d in _group_deltas(lw, tile, group)]


def rule_view(lw: _Lowering, op: ir.Operation) -> None:
    """Nothing to emit here: each access through the view makes its buffer descriptor
    (_buffer_resource), which needs the access's element size."""


def _is_view(ptr: ir.Value) -> bool:
    op = defining_op(ptr)
    return op is not None and op.name == "tile.view"


def rule_load(lw: _Lowering, op: ir.Operation) -> None:
    offsets, mask, other = lw.v(op.operands[1]), op.operands[2], lw.v(op.operands[3])
    value_t = ir.RankedTensorType(op.result.type).element_type if is_tile(op.result) else op.result.type
    elt, other = memory_type(value_t), to_memory(other)  # 8-bit floats move as bytes
    masks = _masked_value(lw, mask)
    offs = lw.elems(offsets) if isinstance(offsets.type, ir.VectorType) else [offsets]
    eb = DTYPE_BYTES[tile_dtype(op.result.type)]
    out: list[ir.Value] = [None] * len(offs)  # type: ignore[list-item]
    # A lane-dependent mask goes through a buffer descriptor, its masked-off elements reading 0
    # (another fill is then one select per access: a branch per access before, which made a kernel
    # load with 0 and select -inf itself); a uniform one stays a branch, that skips the loads.
    # 8-bit values with another fill keep the branch: where the bytes are then used one by one,
    # LLVM splits a 16-byte buffer load into 16 byte loads (it does for a zero fill too), and
    # tests/kernels/fp8_misc.tile's 1.5-filled tile kept its 16-byte load only as a branch.
    fill = None if is_positive_zero(op.operands[3]) else other
    rsrc = _buffer_resource(lw, op.operands[0], eb) if _is_view(op.operands[0]) or (
        masks is not None and _per_lane(lw, mask) and _whole_bytes(elt, eb) and (fill is None or eb > 1)) else None
    split = _split_offsets(lw, rsrc, op.operands[1])
    runs = _vector_runs(lw, op, op.result, None if masks is None else mask)
    for group in _access_groups(lw, op, op.result, runs, None if masks is None else mask):
        types = [ir.VectorType.get([width], elt) if width > 1 else elt for _, width in group]

        def load_group(group=group, types=types) -> list[ir.Value]:
            addrs = _group_addresses(lw, op.result, group, lw.v(op.operands[0]), offs, elt)
            return [llvm.load(t, a, alignment=w * eb) for t, a, (_, w) in zip(types, addrs, group, strict=True)]

        if rsrc is not None:
            cond = masks(group[0][0]) if masks is not None else None
            loaded = _buffer_loads(lw, rsrc, split, op.result, group, types, offs, eb, cond, fill)
        elif masks is None:
            loaded = load_group()
        else:  # one test per group: a masked-off group reads nothing and takes `other`
            branch = scf.IfOp(masks(group[0][0]), types, has_else=True)
            with ir.InsertionPoint(branch.then_block):
                scf.YieldOp(load_group())
            with ir.InsertionPoint(branch.else_block):
                scf.YieldOp([other if t == elt else vector.BroadcastOp(t, other).result for t in types])
            loaded = list(branch.results)
        for (first, width), value in zip(group, loaded, strict=True):
            out[first:first + width] = lw.elems(value) if width > 1 else [value]
    lw.vmap[op.result] = from_memory(lw.pack(out, elt) if is_tile(op.result) else out[0], value_t)


def rule_write(kind: str):
    def rule(lw: _Lowering, op: ir.Operation) -> None:
        offsets, value, mask = lw.v(op.operands[1]), lw.v(op.operands[2]), op.operands[3]
        masks = _masked_value(lw, mask)
        owner = lw.owner_mask(op.operands[2]) if is_tile(op.operands[2]) else None
        offs = lw.elems(offsets) if isinstance(offsets.type, ir.VectorType) else [offsets]
        value = to_memory(value)
        vals = lw.elems(value) if isinstance(value.type, ir.VectorType) else [value]
        if not is_tile(op.operands[2]):  # a scalar write: one lane does it
            owner = arith.CmpIOp(arith.CmpIPredicate.eq, arith.AddIOp(lw.lane, lw.wave).result, c32(0)).result
        elt = vals[0].type
        # Atomics stay per element: there is no vector float atomic add on every target.
        runs = _vector_runs(lw, op, op.operands[2], None if masks is None else mask) if kind == "store" \
            else [(i, 1) for i in range(len(vals))]
        eb = DTYPE_BYTES[tile_dtype(op.operands[2].type)]
        # A store under a lane-dependent mask goes through a buffer descriptor (a uniform mask keeps
        # its branch). So does every f32 atomic add: a 32-bit offset per element instead of a 64-bit
        # address (two registers and a carry chain each, for one instruction per element), and a
        # masked-off element dropped without a branch.
        per_lane = owner is not None or (masks is not None and _per_lane(lw, mask))
        wanted = kind == "atomic" or _is_view(op.operands[0]) or (per_lane and _whole_bytes(elt, eb))
        rsrc = _buffer_resource(lw, op.operands[0], eb) if wanted else None
        split = _split_offsets(lw, rsrc, op.operands[1])
        for group in _access_groups(lw, op, op.operands[2], runs, None if masks is None else mask):
            cond = masks(group[0][0]) if masks is not None else None
            if owner is not None:
                cond = owner if cond is None else arith.AndIOp(cond, owner).result
            if rsrc is not None:
                _buffer_writes(kind, lw, rsrc, split, op.operands[2], group, vals, offs, eb, cond)
                continue
            # One test per group (masked stores are branches: exec-masked, no value to keep).
            with ir.InsertionPoint.current if cond is None else ir.InsertionPoint(scf.IfOp(cond).then_block):
                addrs = _group_addresses(lw, op.operands[2], group, lw.v(op.operands[0]), offs, elt)
                for (first, width), addr in zip(group, addrs, strict=True):
                    val = vals[first] if width == 1 else lw.pack(vals[first:first + width], elt)
                    _write(kind, addr, val, width * eb)
                if cond is not None:
                    scf.YieldOp([])
    return rule


def pack_stored(lw: _Lowering, vals: list[ir.Value], elt: ir.Type) -> ir.Value:
    """An LDS store's vector of registers. With CompileOptions.pack_by_perm, each word of two 16-bit
    values taken from two other words (gfx11's V tile, transposed on its way to LDS: a key pair
    per word where the loads hold a head-dim pair) is one v_perm_b32: with true16 codegen LLVM
    moves the halves instead, three v_mov_b16 per two words on the vector ALU the WMMAs share."""
    if lw.options.pack_by_perm and elt.width == 16 and len(vals) % 2 == 0:
        words = [_perm_word(vals[k], vals[k + 1]) for k in range(0, len(vals), 2)]
        if all(w is not None for w in words):
            packed = vector.FromElementsOp(ir.VectorType.get([len(words)], i32()), words).result
            return vector.BitCastOp(ir.VectorType.get([len(vals)], elt), packed).result
    return lw.pack(vals, elt)


def _extracted_half(v: ir.Value) -> tuple[ir.Value, int] | None:
    """(vector, position) when v is a static vector.extract from a 1-D vector of whole words."""
    op = v.owner.operation if isinstance(v, ir.OpResult) else None
    if op is None or op.name != "vector.extract" or len(op.operands) != 1:
        return None
    pos = list(ir.DenseI64ArrayAttr(op.attributes["static_position"]))
    src = op.operands[0]
    if len(pos) != 1 or ir.VectorType(src.type).rank != 1 or ir.VectorType(src.type).shape[0] % 2:
        return None
    return src, pos[0]


def _perm_word(low: ir.Value, high: ir.Value) -> ir.Value | None:
    """The i32 word (low, high) as one llvm.amdgcn.perm of the words that hold them; None unless
    both are extracted from vectors, or when they already are one word."""
    a, b = _extracted_half(low), _extracted_half(high)
    if a is None or b is None or (a[0] == b[0] and a[1] % 2 == 0 and b[1] == a[1] + 1):
        return None

    def word(src: ir.Value, pos: int) -> ir.Value:
        words = vector.BitCastOp(ir.VectorType.get([ir.VectorType(src.type).shape[0] // 2], i32()), src).result
        return vector.ExtractOp(words, [], [pos // 2]).result
    # The low half from the second operand (low's word), the high half from the first (high's).
    selector = perm_halves(2 * (a[1] % 2), 4 + 2 * (b[1] % 2))
    return llvm.call_intrinsic(i32(), "llvm.amdgcn.perm", [word(*b), word(*a), c32(selector)], [], [])


# Masked accesses through a buffer descriptor (CDNA3/CDNA4 ISA "buffer instructions", RDNA3/4
# "vector memory buffer instructions"): the descriptor covers [base, base + 2 GiB) and a masked-off
# lane's byte offset is moved to 2 GiB, out of range, where the hardware reads zeros and drops
# writes. One select per group instead of a branch, and no divergent control flow in the loop.
# The reach is the launchers' business: the manifest marks the tensors (see options.large_tensors).
_BUFFER_REACH = 0x8000_0000


def _whole_bytes(elt: ir.Type, eb: int) -> bool:
    """The element moves as `eb` whole bytes (not an i1, which memory holds as a byte)."""
    return elt.width == 8 * eb  # types are downcast: IntegerType, F16Type, BF16Type, F32Type


def _per_lane(lw: _Lowering, mask: ir.Value) -> bool:
    """The mask (tile IR) may differ between lanes: not a scalar, nor a splat of one (through
    broadcasts, expand_dims and layout conversions)."""
    op = defining_op(reshaped_source(mask, ("tile.broadcast", "tile.expand_dims", "tile.convert_layout")))
    return is_tile(mask) and not (op is not None and op.name == "tile.splat")


class _Buffer(NamedTuple):
    base: ir.Value  # the tensor argument's pointer
    records: ir.Value | None  # i32 NUM_RECORDS (unsigned, at most 2 GiB) at the view's end; None: the reach
    soffset: ir.Value  # i32 bytes every access adds past the range check (a view's start)
    word3: int

    def descriptor(self, records: ir.Value | None = None) -> ir.Value:
        # Made at each access, not once at the entry: a descriptor takes 4 scalar registers (a
        # pointer 2), and one made at the entry would hold them through the whole kernel; LLVM
        # hoists the ones in a loop to its preheader.
        i64 = ir.IntegerType.get_signless(64)
        records = records if records is not None else self.records
        records = arith.ConstantOp(i64, _BUFFER_REACH) if records is None else arith.ExtUIOp(i64, records)
        return rocdl.make_buffer_rsrc(ir.Type.parse("!llvm.ptr<8>"), self.base,
                                      arith.ConstantOp(ir.IntegerType.get_signless(16), 0).result, records.result,
                                      c32(self.word3))


def _buffer_resource(lw: _Lowering, ptr: ir.Value, eb: int) -> _Buffer | None:
    """A raw buffer over the kernel argument `ptr` (tile IR), or over a `tile.view` of one
    (NUM_RECORDS at the view's end, and the view's start as the accesses' SOFFSET, which the
    hardware adds to the address but leaves out of the range check: LLVM's buffer intrinsics, and
    the descriptor's base stays the tensor's, which the emulator matches to it), or None where
    buffer instructions may not address it (a large tensor, or a pointer that is not an argument).
    `eb`: the bytes of the accessed elements."""
    view, arg = defining_op(ptr) if _is_view(ptr) else None, tensor_pointer(ptr)
    if not isinstance(arg, ir.BlockArgument) or arg.owner != lw.fn.regions[0].blocks[0] \
            or arg.arg_number in lw.large_args:
        if view is not None:  # emit makes views of buffer arguments only
            raise CompileError("lower-to-gpu", "a tile.view of a pointer that buffer instructions may not address "
                               "(emit makes views of buffer-addressed arguments only)")
        return None
    lw.buffer_args.add(arg.arg_number)
    records, soffset = None, c32(0)
    if view is not None:
        lw.row_bounds.add((arg.arg_number, int_attr(view, "row_dim")))
        soffset = arith.MulIOp(lw.v(view.operands[1]), c32(eb)).result  # < 2 GiB: the span check
        # length >= 0 elements (row_view clamps it), at most 2 GiB (the launcher's span check holds
        # the tensor within that): scalar i32 math, which LLVM keeps on the scalar unit.
        length = arith.MinUIOp(lw.v(view.operands[2]), c32(_BUFFER_REACH // eb)).result
        records = arith.MulIOp(length, c32(eb)).result
    return _Buffer(lw.v(arg), records, soffset, lw.arch.buffer_word3)


def _buffer_int_type(nbytes: int) -> ir.Type:
    """The integer type buffer intrinsics move `nbytes` as (a vector of dwords from 8 bytes)."""
    if nbytes >= 8:
        return ir.VectorType.get([nbytes // 4], i32())
    return ir.IntegerType.get_signless(8 * nbytes)


class _Split(NamedTuple):
    """A view access's offsets, split (offset_deltas): their coefficient on each axis, and the
    products of scalars that cannot be negative (multiples of strides and shapes, which the
    launchers check): only those may move into SOFFSET, by positive multiples, since buffer
    addresses add SOFFSET unsigned."""

    coefficients: Coefficients
    movable: frozenset[tuple[ir.Value, ...]]


class _GroupAccess(NamedTuple):
    rsrc: ir.Value
    soffset: ir.Value
    offsets: list[ir.Value]  # each access's VGPR byte offset (the same, plus constants LLVM folds)


def _group_access(lw: _Lowering, buf: _Buffer, split: _Split | None, tile: ir.Value,
                  group: list[tuple[int, int]], offs: list[ir.Value], eb: int, cond: ir.Value | None) -> _GroupAccess:
    """A group's descriptor, SOFFSET and byte offsets: one select on the first offset (out of range
    when `cond` is false), the rest a constant past it (LLVM folds it into the instruction's offset
    field). With `split` (a view's offsets' coefficients, offset_deltas), the offset is the lane's
    first register's, shared by every group, and the group's distance from it that is not a small
    constant goes into SOFFSET, with NUM_RECORDS lowered by as much: the range check sees the same
    offsets, and the lane holds one VGPR for the tile where it held one per group."""
    deltas = _group_deltas(lw, tile, group)
    soffset, first, imm, rsrc = buf.soffset, offs[group[0][0]], 0, None
    moved = _moved_delta(lw, split, tile, group, deltas, eb)
    if moved is not None:
        first, (imm, extra) = offs[0], moved
        if extra is not None:
            soffset = arith.AddIOp(soffset, extra).result
            rsrc = buf.descriptor(_records_past(buf.records, extra))  # type: ignore[arg-type]
    rsrc = buf.descriptor() if rsrc is None else rsrc
    first = arith.MulIOp(first, c32(eb)).result
    if cond is not None:
        first = arith.SelectOp(cond, first, c32(_BUFFER_REACH - (1 << 32))).result
    offsets = [first if imm + d * eb == 0 else arith.AddIOp(first, c32(imm + d * eb)).result for d in deltas]
    return _GroupAccess(rsrc, soffset, offsets)


def _moved_delta(lw: _Lowering, split: _Split | None, tile: ir.Value, group: list[tuple[int, int]],
                 deltas: list[int], eb: int) -> tuple[int, ir.Value | None] | None:
    """How a group's offset past the lane's first register splits: (bytes left in the immediate
    offset, bytes moved into SOFFSET or None), or None where the group keeps its own offset (a
    negative part, or a product of scalars that may not move)."""
    if split is None:
        return None
    regs = lw.lin(tile).regs
    constant, scalars = register_delta(split.coefficients, [int(d) for d in regs[group[0][0]] - regs[0]])
    if constant < 0 or any(k < 0 for k in scalars.values()) or not split.movable.issuperset(scalars):
        return None
    if (constant + max(deltas)) * eb > lw.arch.buffer_offset_max:
        scalars, constant = {**scalars, (): constant}, 0
    terms = [_monomial(lw, mono, k * eb) for mono, k in scalars.items()]
    extra = terms[0] if terms else None
    for term in terms[1:]:
        extra = arith.AddIOp(extra, term).result
    return constant * eb, extra


def _records_past(records: ir.Value, extra: ir.Value) -> ir.Value:
    """NUM_RECORDS less `extra` bytes (i32), not below 0: `r - min(extra, r)`, signed, with `r` =
    `records` below 2 GiB (at most 2 GiB: an access at its last byte reads 0 in a view so split,
    where no aligned access of 2 bytes or more starts). Scalar minima, which the scalar unit has:
    a saturating subtract or a select of compares goes to the vector unit, and a descriptor
    computed there takes a loop over the lanes at every access."""
    r = arith.MinUIOp(records, c32(_BUFFER_REACH - 1)).result
    return arith.SubIOp(r, arith.MinSIOp(extra, r).result).result


def _monomial(lw: _Lowering, mono: tuple[ir.Value, ...], k: int) -> ir.Value:
    """k times the product of the scalars `mono` (tile IR), as i32 scalar math."""
    out = None
    for s in mono:
        out = lw.v(s) if out is None else arith.MulIOp(out, lw.v(s)).result
    if out is None:
        return c32(k)
    return out if k == 1 else arith.MulIOp(out, c32(k)).result


def _split_offsets(lw: _Lowering, buf: _Buffer | None, offsets: ir.Value) -> _Split | None:
    """How a view access's offsets split (offset_deltas), where every scalar in them is an i32
    (the offsets' own type); None for an access that is not through a view (records None)."""
    if buf is None or buf.records is None or not lw.options.split_view_offsets:
        return None
    c = coefficients(offsets)
    if c is None or any(s.type != i32() for terms in c.values() for mono in terms for s in mono):
        return None
    args = nonnegative_args(lw.fn)
    monos = {mono for terms in c.values() for mono in terms if mono}
    return _Split(c, frozenset(m for m in monos if all(nonnegative(s, args) for s in m)))


def _buffer_loads(lw: _Lowering, buf: _Buffer, split: _Split | None, tile: ir.Value,
                  group: list[tuple[int, int]], types: list[ir.Type], offs: list[ir.Value], eb: int,
                  cond: ir.Value, fill: ir.Value | None = None) -> list[ir.Value]:
    """The group's loads, masked-off ones reading 0, or `fill` (one select per access, on the
    loaded dwords)."""
    out = []
    access = _group_access(lw, buf, split, tile, group, offs, eb, cond)
    for (_, width), t, off in zip(group, types, access.offsets, strict=True):
        raw_t = _buffer_int_type(width * eb)
        raw = rocdl.raw_ptr_buffer_load(raw_t, access.rsrc, off, access.soffset, c32(0))
        if fill is not None:
            filled = fill if width == 1 else vector.BroadcastOp(t, fill).result
            raw = arith.SelectOp(cond, raw, llvm.bitcast(raw_t, filled)).result
        out.append(llvm.bitcast(t, raw))
    return out


def _buffer_writes(kind: str, lw: _Lowering, buf: _Buffer, split: _Split | None, tile: ir.Value,
                   group: list[tuple[int, int]], vals: list[ir.Value], offs: list[ir.Value], eb: int,
                   cond: ir.Value | None) -> None:
    access = _group_access(lw, buf, split, tile, group, offs, eb, cond)
    for (first, width), off in zip(group, access.offsets, strict=True):
        if kind == "atomic":  # f32, one element (buffer_atomic_add_f32 on every target)
            rocdl.raw_ptr_buffer_atomic_fadd(vals[first], access.rsrc, off, access.soffset, c32(0))
            continue
        val = vals[first] if width == 1 else lw.pack(vals[first:first + width], vals[0].type)
        rocdl.raw_ptr_buffer_store(llvm.bitcast(_buffer_int_type(width * eb), val), access.rsrc, off,
                                   access.soffset, c32(0))


def _write(kind: str, addr: ir.Value, val: ir.Value, align: int) -> None:
    if kind == "store":
        llvm.store(val, addr, alignment=align)
    else:
        # Device (coarse-grained) memory, denormals as the instruction treats them: without these
        # LLVM expands the add into a compare-and-swap loop on gfx90a and gfx11.
        rmw = llvm.atomicrmw(llvm.AtomicBinOp.fadd, addr, val, llvm.AtomicOrdering.monotonic, syncscope="agent")
        rmw.owner.attributes["rocdl.no_fine_grained_memory"] = ir.UnitAttr.get()
        rmw.owner.attributes["rocdl.ignore_denormal_mode"] = ir.UnitAttr.get()
