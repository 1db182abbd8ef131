"""Loads straight into LDS (CDNA's "LDS DMA"): `buffer_load_* ... lds` (MUBUF with the LDS bit,
gfx90a+) and `global_load_lds_*` (gfx942+), which fast CDNA kernels use to stage tiles without
passing them through VGPRs (Triton's asynchronous copies, CK's async loads).

The memory side is the ordinary load's -- the same address, provenance checks and, for buffers,
range checking (an out-of-range lane reads zero). The LDS side, from the CDNA3/CDNA4 ISA (9.1.9
"Memory Buffer Load to LDS", 10.3 "Addressing"): each active lane writes its data at

    LDS_ADDR = M0 offset + instruction offset + lane * 4        (ubyte .. dword)
                                              + lane * 16       (dwordx3, dwordx4: gfx950)

where the M0 offset is M0[15:0] as a byte offset for buffers (M0[17:0] on gfx950, whose LDS is
160 KiB) and M0[17:2] * 4 for global loads; dwordx3 writes three dwords of its 16-byte slot and
skips the fourth. The VDATA/VDST field is ignored. Inactive lanes write nothing.

Not modelled (raises UnsupportedInstruction): the sub-dword forms (ubyte/sbyte/ushort/sshort: the
manuals do not say what lands in the rest of the lane's dword), buffer_load_format_x, scratch
and private-buffer (scratch descriptor) sources, and loads to LDS on archs without them.
"""

from __future__ import annotations

import numpy as np

from tiledsl.backends.rocm.emulator.executor import builder
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.emulator.vmem import (
    _SIZE,
    _address_fn,
    _buffer_address,
    _global_rw,
    _lds_access,
    buffer_read_in_range,
)

# The forms with a global_load_lds_* opcode (the decoder's tables say which exist per arch).
_KINDS = ("ubyte", "sbyte", "ushort", "sshort", "dword", "dwordx3", "dwordx4")


def _lds_offsets(inst, ctx, nbytes: int, m0_mask: int):
    """Closure (w, lanes) -> int64 LDS byte offsets of the active `lanes`."""
    stride = 16 if nbytes > 4 else 4
    off, m0 = inst.f["offset"], ctx.m0

    def lds(w, lanes):
        return (w.s[m0] & m0_mask) + off + lanes.astype(np.int64) * stride
    return lds


def _check(inst, ctx, kind: str) -> int:
    """Bytes per lane, or UnsupportedInstruction for the forms this module does not model."""
    if ctx.gen != "gfx9":
        raise UnsupportedInstruction(f"{inst.raw_name}: loads to LDS are a CDNA feature")
    if kind not in ("dword", "dwordx3", "dwordx4"):
        raise UnsupportedInstruction(f"{inst.raw_name}: a sub-dword or format load to LDS (not modelled)")
    if kind != "dword" and ctx.arch != "gfx950":  # the MUBUF LDS bit takes x3/x4 from CDNA4 on
        raise UnsupportedInstruction(f"{inst.raw_name} ... lds: three or four dwords to LDS need gfx950")
    return _SIZE[kind][0]


def _store_lds(w, lds_off, raw: np.ndarray, nbytes: int) -> None:
    idx = _lds_access(w, lds_off, nbytes, "store (load to LDS)")
    w.lds[idx] = raw


def build_buffer_lds(inst, ctx, kind: str):
    """`buffer_load_<kind> ... lds`: called by vmem for a MUBUF load with the LDS bit set."""
    nbytes = _check(inst, ctx, kind)
    addr_fn = _buffer_address(inst, ctx, nbytes)
    lds_fn = _lds_offsets(inst, ctx, nbytes, 0x3FFFF if ctx.arch == "gfx950" else 0xFFFF)
    nxt = ctx.nxt

    def h(w):
        lanes = w.lanes
        if lanes.size == 0:
            return nxt
        addrs, ok, scratch = addr_fn(w, lanes)
        if scratch:
            raise UnsupportedInstruction(f"{inst.raw_name}: a load to LDS from the private segment")
        raw = buffer_read_in_range(w, lanes, addrs, ok, nbytes)  # out-of-range lanes (or dwords) read zero
        _store_lds(w, lds_fn(w, lanes), raw, nbytes)
        return nxt
    return h


@builder(*(f"global_load_lds_{k}" for k in _KINDS))
def _b_global_lds(inst, ctx):
    nbytes = _check(inst, ctx, inst.name.rsplit("_", 1)[1])
    addr_fn = _address_fn(inst, ctx)
    lds_fn = _lds_offsets(inst, ctx, nbytes, 0x3FFFC)
    nxt = ctx.nxt

    def h(w):
        lanes = w.lanes
        if lanes.size == 0:
            return nxt
        raw = _global_rw(w, lanes, addr_fn(w, lanes), nbytes, False)
        _store_lds(w, lds_fn(w, lanes), raw, nbytes)
        return nxt
    return h


@builder(*(f"scratch_load_lds_{k}" for k in _KINDS))
def _b_scratch_lds(inst, ctx):
    raise UnsupportedInstruction(f"{inst.raw_name}: a load to LDS from the private segment (not modelled)")
