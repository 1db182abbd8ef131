"""Memory instructions: scalar loads (SMEM), global/flat/scratch, buffer (MUBUF/VBUFFER) and LDS (DS).

Every lane's access is checked: global addresses against the region of the pointer argument they
derive from (its tag, `memory.Regions`) or, untagged, against the runtime's allocations; LDS
offsets against the workgroup's LDS size, scratch against the private segment size. A violation
raises MemoryFault naming the lowest bad lane (and for global memory the tensor and element); the
executor adds kernel, workgroup, wave and instruction.
"""

from __future__ import annotations

import re

import numpy as np

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.backends.rocm.emulator.executor import SCRATCH_TAG, builder, lds_fault
from tiledsl.backends.rocm.emulator.memory import MemoryFault, UnsupportedInstruction, window
from tiledsl.backends.rocm.emulator.operands import (
    M32,
    PRIVATE_APERTURE,
    SHARED_APERTURE,
    _s64,
    bf16_bits,
    scalar_writer,
)
from tiledsl.backends.rocm.emulator.operands import scalar_reader as sread

# ndarray.min/max go through a Python wrapper; the bare reductions cost a microsecond less.
_MIN, _MAX = np.minimum.reduce, np.maximum.reduce

_SIZE = {"ubyte": (1, False), "sbyte": (1, True), "ushort": (2, False), "sshort": (2, True), "dword": (4, False),
         "dwordx2": (8, False), "dwordx3": (12, False), "dwordx4": (16, False), "u8": (1, False), "i8": (1, True),
         "u16": (2, False), "i16": (2, True), "b8": (1, False), "b16": (2, False), "b32": (4, False),
         "b64": (8, False), "b96": (12, False), "b128": (16, False), "byte": (1, False), "short": (2, False),
         "dwordx8": (32, False), "dwordx16": (64, False), "b256": (32, False), "b512": (64, False)}


# -- scalar memory ------------------------------------------------------------------------
@builder(*[f"s_load_{s}" for s in ("dword", "dwordx2", "dwordx4", "dwordx8", "dwordx16", "b32", "b64", "b96",
                                   "b128", "b256", "b512", "u8", "i8", "u16", "i16")],
         *[f"s_buffer_load_{s}" for s in ("dword", "dwordx2", "dwordx4", "dwordx8", "dwordx16", "b32", "b64",
                                          "b96", "b128", "b256", "b512")])
def _b_smem(inst, ctx):
    f, nxt = inst.f, ctx.nxt
    kind = inst.name.rsplit("_", 1)[1]
    nbytes, signed = _SIZE[kind]
    buffer = inst.name.startswith("s_buffer")
    sb, sd = f["sbase"], f["sdata"]
    off = f["offset"]
    soff = f["soff_reg"]
    soff_rd = sread(soff, ctx, None) if soff is not None and soff != ctx.null_sgpr else None
    ndw = max(1, nbytes // 4)

    def h(w):
        s = w.s
        if buffer:
            base = s[sb] | ((s[sb + 1] & 0xFFFF) << 32)
            limit = s[sb + 2]
        else:
            base = s[sb] | (s[sb + 1] << 32)
        o = (off or 0) + (soff_rd(w) if soff_rd else 0)
        addr = (base + o) & ~3 if nbytes >= 4 else base + o
        if buffer and o + nbytes > limit:
            vals = [0] * ndw
        else:
            p = w.mem.scalar(addr, nbytes)
            raw = w.heap.data[p:p + nbytes]
            if nbytes < 4:
                v = int.from_bytes(raw.tobytes(), "little", signed=signed) & M32
                vals = [v]
            else:
                vals = raw.view(np.uint32).tolist()
        s[sd:sd + ndw] = vals
        return nxt
    return h


@builder("s_memtime", "s_memrealtime", "s_getreg_b32_const")
def _b_time(inst, ctx):
    wr = scalar_writer(inst.f["sdata"], ctx, True)
    nxt = ctx.nxt
    return lambda w: (wr(w, w.count), nxt)[1]


@builder("s_dcache_inv", "s_dcache_wb", "s_dcache_inv_vol", "s_dcache_wb_vol", "s_dcache_discard",
         "s_dcache_discard_x2", "buffer_wbinvl1", "buffer_wbinvl1_vol", "buffer_inv", "buffer_wbl2",
         "buffer_gl0_inv", "buffer_gl1_inv", "global_inv", "global_wb", "global_wbinv", "buffer_invl2")
def _b_cache(inst, ctx):
    nxt = ctx.nxt
    return lambda w: nxt


# -- vector memory: shared helpers --------------------------------------------------------
def _parse_vmem(name: str):
    """flat/global/scratch/buffer mnemonic -> (op, nbytes, signed, d16, hi)."""
    m = re.match(r"(?:global|flat|scratch|buffer)_(load|store)_(.*)$", name)
    if not m:
        return None
    op, rest = m.groups()
    if "lds" in rest:  # global_load_lds_*: loads into LDS, lds_dma.py (never a register load)
        return None
    d16 = "d16" in rest
    hi = "_hi" in rest or rest.endswith("hi")
    kind = re.sub(r"(_?d16|_hi|_?lds)", "", rest).strip("_")
    if kind.startswith(("format", "lds")):
        return None
    kind = {"short": "ushort", "byte": "ubyte"}.get(kind, kind) if op == "load" else kind
    if kind not in _SIZE:
        return None
    nbytes, signed = _SIZE[kind]
    return op, nbytes, signed, d16, hi


def _deliver(w, d, raw, lanes, nbytes, signed, d16, hi):
    """Write loaded bytes [n, nbytes] of `lanes` to VGPR d.. (zero/sign extension, d16 halves)."""
    if nbytes >= 4:
        vals = np.ascontiguousarray(raw).view(np.uint32).reshape(len(lanes), nbytes // 4)
        for k in range(nbytes // 4):
            w.v[d + k, lanes] = vals[:, k]
        return
    v = raw[:, 0].astype(np.int64) if nbytes == 1 else np.ascontiguousarray(raw).view(np.uint16)[:, 0].astype(np.int64)
    if signed:
        bits = 8 * nbytes
        v = (v ^ (1 << (bits - 1))) - (1 << (bits - 1))
    if d16:
        half = 1 if hi else 0
        w.h[d, 2 * lanes + half] = (v & 0xFFFF).astype(np.uint16)
    else:
        w.v[d, lanes] = (v & M32).astype(np.uint32)


def _gather_data(w, s, lanes, nbytes, d16, hi):
    """Bytes [n, nbytes] to store from VGPR s.. for `lanes`."""
    if nbytes >= 4:
        return np.ascontiguousarray(w.v[s:s + nbytes // 4, lanes].T).view(np.uint8).reshape(len(lanes), nbytes)
    src = w.v[s, lanes] >> np.uint32(16) if (d16 and hi) else w.v[s, lanes]
    return np.ascontiguousarray(src).view(np.uint8).reshape(len(lanes), 4)[:, :nbytes]


def _lds_access(w, offs, nbytes, what):
    """Check LDS offsets (int64 array) and return byte index matrix [n, nbytes]."""
    bad = (offs < 0) | (offs + nbytes > w.lds.size)
    if bad.any():
        raise lds_fault(w, bad, offs, nbytes, what)
    return offs[:, None] + np.arange(nbytes)


def _private_access(w, lanes, offs, nbytes, what):
    if w.scratch is None:
        raise MemoryFault(f"scratch {what}, but the kernel has no private segment")
    bad = (offs < 0) | (offs + nbytes > w.scratch.shape[1])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise MemoryFault(f"scratch {what} of {nbytes} bytes at private offset {int(offs[i])} (lane {int(lanes[i])})"
                          f" is outside the {w.scratch.shape[1]}-byte private segment")
    return lanes[:, None], offs[:, None] + np.arange(nbytes)


def _global_rw(w, lanes, addrs, nbytes, store, data=None, flat=False):
    """Load (returns bytes) or store `data` at 64-bit addresses; flat addresses may hit LDS/scratch."""
    if flat:
        ap = addrs >> np.uint64(44)
        in_lds = ap == np.uint64(SHARED_APERTURE >> 44)
        in_prv = ap == np.uint64(PRIVATE_APERTURE >> 44)
        if in_lds.any() or in_prv.any():
            out = np.zeros((len(lanes), nbytes), dtype=np.uint8)
            for sel, base in ((in_lds, SHARED_APERTURE), (in_prv, PRIVATE_APERTURE)):
                if sel.any():
                    offs = (addrs[sel] - np.uint64(base)).astype(np.int64)
                    if base == SHARED_APERTURE:
                        idx = _lds_access(w, offs, nbytes, "flat access")
                        if store:
                            w.lds[idx] = data[sel]
                        else:
                            out[sel] = w.lds[idx]
                    else:
                        li, idx = _private_access(w, lanes[sel], offs, nbytes, "flat access")
                        if store:
                            w.scratch[li, idx] = data[sel]
                        else:
                            out[sel] = w.scratch[li, idx]
            rest = ~(in_lds | in_prv)
            if rest.any():
                sub = _global_rw(w, lanes[rest], addrs[rest], nbytes, store, None if data is None else data[rest])
                if not store:
                    out[rest] = sub
            return out
    addrs = w.mem.check(lanes, addrs, nbytes, "store" if store else "load")
    if store:
        w.heap.scatter(addrs, data)
        return None
    return w.heap.gather(addrs, nbytes)


# -- FLAT / GLOBAL / SCRATCH --------------------------------------------------------------
_ATOMIC = {"add": lambda m, d: m + d, "sub": lambda m, d: m - d, "and": lambda m, d: m & d,
           "or": lambda m, d: m | d, "xor": lambda m, d: m ^ d, "swap": lambda m, d: d,
           "umin": min, "umax": max, "min": None, "max": None, "smin": None, "smax": None}


def _vmem_names():
    out = []
    for sp in ("global", "flat", "scratch", "buffer"):
        for op in ("load", "store"):
            for k in _SIZE:
                out.append(f"{sp}_{op}_{k}")
            for k in ("ubyte_d16", "ubyte_d16_hi", "sbyte_d16", "sbyte_d16_hi", "short_d16", "short_d16_hi",
                      "byte_d16_hi", "d16_u8", "d16_i8", "d16_b16", "d16_hi_u8", "d16_hi_i8", "d16_hi_b16",
                      "d16_hi_b8", "d16_hi_b16"):
                out.append(f"{sp}_{op}_{k}")
    return out


def _address_fn(inst, ctx):
    """Closure (w, lanes) -> uint64 addresses (or private offsets for scratch)."""
    f = inst.f
    fam = inst.fam
    off = f["offset"]
    saddr = f["saddr"]
    has_saddr = saddr != f["null"] and not (ctx.gen == "gfx9" and saddr == 0x7F)
    va = f["addr"]
    if fam == "SCRATCH":
        use_v = bool(f["sve"]) if ctx.image.arch.scratch_sve else not has_saddr
        sr = sread(saddr, ctx, None) if has_saddr else None

        def scr(w, lanes):
            o = np.full(len(lanes), off + (sr(w) if sr else 0), dtype=np.int64)
            if use_v:
                o = o + w.v[va, lanes].astype(np.int64)
            return o
        return scr
    if has_saddr:
        sr = sread(saddr, ctx, None, "b64")

        def gs(w, lanes):
            return np.uint64(sr(w)) + w.v[va, lanes].astype(np.uint64) + np.uint64(off & ((1 << 64) - 1)) \
                if off >= 0 else np.uint64(sr(w)) + w.v[va, lanes].astype(np.uint64) - np.uint64(-off)
        return gs

    def gv(w, lanes):
        a = w.v[va, lanes].astype(np.uint64) | (w.v[va + 1, lanes].astype(np.uint64) << np.uint64(32))
        return a + np.uint64(off) if off >= 0 else a - np.uint64(-off)
    return gv


def _build_vmem(inst, ctx):
    parsed = _parse_vmem(inst.name)
    if parsed is None:
        raise UnsupportedInstruction(f"memory instruction {inst.name}")
    op, nbytes, signed, d16, hi = parsed
    f, nxt = inst.f, ctx.nxt
    if f.get("lds") and inst.fam == "MUBUF":  # the LDS bit: the data goes to LDS at M0, not to VDATA
        if op != "load" or d16:
            raise UnsupportedInstruction(f"{inst.raw_name} with the LDS bit")
        from tiledsl.backends.rocm.emulator.lds_dma import build_buffer_lds
        return build_buffer_lds(inst, ctx, inst.name.split("_", 2)[2])
    _refuse_modifiers(inst)
    acc = 256 if f.get("acc") else 0
    if inst.fam in ("MUBUF",):
        addr_fn = _buffer_address(inst, ctx, nbytes)
        d, s = f["vdata"] + acc, f["vdata"] + acc
        space = "buffer"
    else:
        d, s = f["vdst"] + acc, f["data"] + acc
        space = inst.fam.lower()
        if space in ("global", "flat"):
            return _build_global(inst, ctx, op, nbytes, signed, d16, hi, d, s, space == "flat")
        addr_fn = _address_fn(inst, ctx)

    def h(w):
        lanes = w.lanes
        if lanes.size == 0:
            return nxt
        if space == "buffer":
            addrs, ok, scratch = addr_fn(w, lanes)
        else:
            addrs, ok, scratch = addr_fn(w, lanes), None, space == "scratch"
        if op == "load":
            if scratch:
                li, idx = _private_access(w, lanes, _as_i64(addrs), nbytes, "load")
                raw = w.scratch[li, idx]
            elif ok is not None and not ok.all():
                raw = buffer_read_in_range(w, lanes, addrs, ok, nbytes)
            else:
                raw = _global_rw(w, lanes, addrs, nbytes, False)
            _deliver(w, d, raw, lanes, nbytes, signed, d16, hi)
        else:
            data = _gather_data(w, s, lanes, nbytes, d16, hi)
            if scratch:
                li, idx = _private_access(w, lanes, _as_i64(addrs), nbytes, "store")
                w.scratch[li, idx] = data
            elif ok is not None and ok.ndim == 2:
                for k, sel in enumerate(ok.T):
                    if sel.any():
                        _global_rw(w, lanes[sel], addrs[sel] + np.uint64(4 * k), 4, True,
                                   np.ascontiguousarray(data[sel, 4 * k:4 * k + 4]))
            elif ok is not None and not ok.all():
                if ok.any():
                    _global_rw(w, lanes[ok], addrs[ok], nbytes, True, data[ok])
            else:
                _global_rw(w, lanes, addrs, nbytes, True, data)
        return nxt
    return h


def _refuse_modifiers(inst) -> None:
    """Decoded bits that change what a memory instruction does and that the handlers here do not
    model: TFE (an extra status dword after the data, gfx11/gfx12 buffers) and gfx90a's FLAT LDS
    bit (data to LDS instead of VDST). Cache-policy bits (GLC/SLC/DLC, SC0/SC1/NT, TH/SCOPE) only
    change caching, except that GLC/SC0/TH[0] asks an atomic for its old value (handled there)."""
    if inst.f.get("tfe"):
        raise UnsupportedInstruction(f"{inst.raw_name} with TFE (texture-fail status dword)")
    if inst.f.get("lds"):
        raise UnsupportedInstruction(f"{inst.raw_name} with the LDS bit")


def _heap_offsets(inst, ctx):
    """Closure (w, tag) -> int64 heap offsets (address - heap base - tag, wrapping like the 64-bit
    address) of all W lanes of a global/flat access; inactive lanes hold garbage the caller drops.
    `tag` is the tag offset the caller expects the addresses to carry (memory.Regions)."""
    f = inst.f
    k0 = f["offset"]
    saddr, va, W = f["saddr"], f["addr"], ctx.wave_size
    if saddr != f["null"] and not (ctx.gen == "gfx9" and saddr == 0x7F):
        sr = sread(saddr, ctx, None, "b64")

        def gs(w, tag):  # a 32-bit unsigned VGPR offset from a 64-bit SGPR base
            return w.v[va].astype(np.int64) + _s64(sr(w) + k0 - w.heap.base - tag)
        return gs
    # One strided copy turns the VGPR pair into per-lane 64-bit values (cheaper than shifting
    # halves); the buffer is reused by every execution of this instruction.
    buf = np.empty(W, np.int64)
    rows = buf.view(np.uint32).reshape(W, 2).T

    def gv(w, tag):
        rows[...] = w.v[va:va + 2]
        return np.add(buf, _s64(k0 - w.heap.base - tag), out=buf)
    return gv


def putter(d, nbytes, signed, d16, hi):
    """`put(w, sel, g)`: deliver gathered window elements `g` (one per lane of `sel`, a slice for
    full EXEC or the active lane indices) to VGPR d.. with zero/sign extension or into a d16 half."""
    half, k = int(hi), nbytes // 4
    if d16:
        sx = np.int8 if signed and nbytes == 1 else None

        def put(w, sel, g):
            w.h[d, half::2][sel] = g if sx is None else g.view(sx).astype(np.int16).view(np.uint16)
    elif nbytes < 4:
        sx = {1: np.int8, 2: np.int16}[nbytes] if signed else None

        def put(w, sel, g):
            if sx is None:
                w.v[d, sel] = g
            else:
                w.vi[d, sel] = g.view(sx)
    elif nbytes == 4:
        def put(w, sel, g):
            w.v[d, sel] = g
    else:
        def put(w, sel, g):
            w.v[d:d + k, sel] = (g.view(np.uint32).reshape(g.shape[0], 2) if k == 2 else g).T
    return put


def getter(s, nbytes, d16, hi):
    """`data(w, sel)`: the values to store from VGPR s.. as window elements (truncated on store)."""
    half, k = int(hi), nbytes // 4
    if nbytes < 4:
        def data(w, sel):
            return (w.h[s, half::2] if d16 or nbytes == 2 else w.v[s])[sel]
    elif nbytes == 4:
        def data(w, sel):
            return w.v[s][sel]
    elif nbytes == 8:
        buf = np.empty(64, np.uint64)  # reused: the caller stores it before the next call
        rows = buf.view(np.uint32).reshape(64, 2).T

        def data(w, sel):
            W = w.W
            rows[:, :W] = w.v[s:s + 2]
            return buf[:W][sel]
    else:
        def data(w, sel):
            return w.v[s:s + k].T[sel]
    return data


def _build_global(inst, ctx, op, nbytes, signed, d16, hi, d, s, flat):
    """Global/flat access as one gather or scatter through a byte window of the heap, once the
    lanes' min and max show the access lies inside one region (or, untagged, one allocation);
    otherwise (a fault, lanes through different pointers, or flat addresses in LDS/scratch) the
    per-lane path with its error messages."""
    nxt, offsets = ctx.nxt, _heap_offsets(inst, ctx)
    put, data = putter(d, nbytes, signed, d16, hi), getter(s, nbytes, d16, hi)
    # The region this instruction touched last: heap-offset bounds without the tag, the tag offset
    # (subtracted from the addresses up front: no extra pass over the lanes while the region holds)
    # and the launch's checks it belongs to.
    last = [0, 0, 0, None]

    def slow(w, lanes, off):
        addrs = off.view(np.uint64) + np.uint64(w.heap.base)
        if op == "load":
            raw = _global_rw(w, lanes, addrs, nbytes, False, flat=flat)
            _deliver(w, d, raw, lanes, nbytes, signed, d16, hi)
        else:
            _global_rw(w, lanes, addrs, nbytes, True, _gather_data(w, s, lanes, nbytes, d16, hi), flat=flat)

    def h(w):
        lanes = w.lanes
        if lanes.size == 0:
            return nxt
        tag = last[2]
        off = offsets(w, tag)
        sel = slice(None) if w.full else lanes
        if sel is lanes:
            off = off[lanes]
        lo, end = int(_MIN(off)), int(_MAX(off)) + nbytes
        if not (last[0] <= lo and end <= last[1] and last[3] is w.mem):
            b = w.mem.match(lo + tag, end + tag)
            if b is None:
                slow(w, lanes, off + tag if tag else off)
                return nxt
            if b[2] != tag:
                off = off + (tag - b[2])
            last[:] = b[0] - b[2], b[1] - b[2], b[2], w.mem
        heap = w.heap
        win = heap.windows.get(nbytes)
        if win is None:
            win = window(heap.data, nbytes, heap.windows)
        if op == "load":
            heap.count_load(off, nbytes)
            put(w, sel, win[off])
        else:
            win[off] = data(w, sel)
        return nxt
    return h


def _as_i64(a):
    return np.asarray(a).astype(np.int64)


for _n in _vmem_names():
    builder(_n)(_build_vmem)


def soffset_reader(f, ctx):
    """A buffer instruction's SOFFSET as `(wave) -> int`: 0 when the field names the null SGPR."""
    return sread(f["soffset"], ctx, None) if f["soffset"] != ctx.null_sgpr else (lambda w: 0)


def _buffer_address(inst, ctx, nbytes, per_dword: bool = True):
    """MUBUF/VBUFFER: base + soffset + inst offset + vaddr (offen) + index * stride (idxen).
    Returns (addresses, in range, private?). In range is per lane, or, where a raw multi-dword
    access is partly in range, per lane and dword (lanes x nbytes // 4): the hardware checks each
    dword of a load/store-dword-x2/x3/x4 on its own (LLVM AMDGPUUsage, "relaxed buffer OOB
    mode"; RDNA3/4 ISA, range checking). per_dword=False (atomics) checks the access whole."""
    f = inst.f
    r = f["srsrc"]
    soff = soffset_reader(f, ctx)
    off, offen, idxen, va = f["offset"], f["offen"], f["idxen"], f["vaddr"]

    def addr(w, lanes):
        s = w.s
        base = s[r] | ((s[r + 1] & 0xFFFF) << 32)
        stride = (s[r + 1] >> 16) & 0x3FFF
        num = s[r + 2]
        # The range check sees the instruction offset and VADDR's offset, not SOFFSET (LLVM's
        # buffer intrinsics: "soffset ... excluded from bounds checking and swizzling").
        o = np.full(lanes.size, off, dtype=np.int64)
        k = 0
        idx = None
        if idxen:
            idx = w.v[va, lanes].astype(np.int64)
            k = 1
        if offen:
            o = o + w.v[va + k, lanes].astype(np.int64)
        scratch = base == SCRATCH_TAG
        ok = None if scratch else _in_range(inst, ctx, s[r + 3], o, idx, stride, num, nbytes, per_dword)
        if idx is not None:
            o = o + idx * stride
        o = o + soff(w)
        if scratch:
            return o, None, True
        if s[r + 1] & swizzle or s[r + 3] & (1 << 23) or s[r + 3] & scale:
            raise UnsupportedInstruction(f"{inst.raw_name}: a buffer descriptor with swizzling, ADD_TID_ENABLE or a "
                                         f"stride scale (0x{s[r + 1]:08x}, 0x{s[r + 3]:08x}): not modelled")
        return (np.uint64(w.mem.buffer_base(base)) + o.astype(np.uint64)), ok, False
    # Descriptor fields that change the address and are not modelled (CDNA3/4 ISA table 48, RDNA3/4
    # V#): swizzle enable (bit 63; bits 63:62 on gfx11+), ADD_TID_ENABLE (bit 119), gfx12's stride
    # scale (bits 115:114). Checked when the instruction runs, since descriptors live in SGPRs.
    swizzle = 0x8000_0000 if ctx.gen == "gfx9" else 0xC000_0000
    scale = 0x000C_0000 if ctx.gen == "gfx12" else 0
    return addr


def buffer_read_in_range(w, lanes, addrs, ok, nbytes: int) -> np.ndarray:
    """Bytes [lanes, nbytes] of a buffer load: what `ok` (_buffer_address: per lane, or per lane
    and dword) puts in range, zeros elsewhere."""
    raw = np.zeros((lanes.size, nbytes), dtype=np.uint8)
    if ok.ndim == 2:
        for k, sel in enumerate(ok.T):
            if sel.any():
                raw[sel, 4 * k:4 * k + 4] = _global_rw(w, lanes[sel], addrs[sel] + np.uint64(4 * k), 4, False)
    elif ok.any():
        raw[ok] = _global_rw(w, lanes[ok], addrs[ok], nbytes, False)
    return raw


def _in_range(inst, ctx, word3: int, o, idx, stride: int, num: int, nbytes: int, per_dword: bool):
    """Which lanes of a buffer access are in range (see _buffer_address). gfx9 checks the index
    against NUM_RECORDS where the descriptor has a stride and the instruction an index, else the
    offset. gfx10+ choose by the descriptor's OOB_SELECT (word 3, bits 29:28; Mesa's
    ac_descriptors and AMD's RDNA ISA): 1 index only, 2 nothing unless NUM_RECORDS is 0, 3 the
    offset (raw); 0 (index and offset against the stride) and 3 with an index are refused, their
    exact rule not being modelled."""
    mode = 3 if ctx.gen == "gfx9" else (word3 >> 28) & 3
    if mode == 1:
        return (np.zeros(o.size, np.int64) if idx is None else idx) < num
    if mode == 2:
        return np.full(o.size, num != 0)
    if ctx.gen == "gfx9" and idx is not None and stride:
        return idx < num
    if mode == 0 or idx is not None and ctx.gen != "gfx9":
        raise UnsupportedInstruction(f"{inst.raw_name}: a buffer descriptor with OOB_SELECT {mode}"
                                     f"{' and an index (IDXEN)' if mode == 3 else ''}: its range check is not modelled")
    ok = o + nbytes <= num
    if per_dword and nbytes > 4 and not ok.all():
        each = o[:, None] + np.arange(4, nbytes + 1, 4) <= num
        if (each.any(1) != ok).any():
            return each
    return ok


# -- global/flat/buffer atomics -----------------------------------------------------------
def _atomic_info(name):
    m = re.match(r"(global|flat|buffer)_atomic_([a-z]+?)(?:_x2|_(?:[uib]|f)(32|64)|_pk_add_[bf]+16)?$", name)
    if not m:
        return None
    sp, op = m.group(1), m.group(2)
    wide = name.endswith(("_x2", "64"))
    return sp, op, wide


def _build_atomic(inst, ctx):
    name = inst.name
    pk = re.match(r"(global|flat|buffer)_atomic_pk_add_(f16|bf16)$", name)
    info = (pk.group(1), "pk_add_" + pk.group(2), False) if pk else _atomic_info(name)
    if info is None or "fmin" in name or "fmax" in name:
        raise UnsupportedInstruction(f"atomic {name}")
    _refuse_modifiers(inst)
    sp, op, wide = info
    isf = name.endswith("_f32") or "add_f32" in name
    flush = isf and get_arch(ctx.arch).atomic_fadd_flushes_denormals
    f, nxt = inst.f, ctx.nxt
    nb = 8 if wide else 4
    ret = bool(f.get("glc"))
    if sp == "buffer":
        afn = _buffer_address(inst, ctx, nb, per_dword=False)  # atomics: all or nothing
        d = s = f["vdata"]
    else:
        afn0 = _address_fn(inst, ctx)
        afn = None
        d, s = f["vdst"], f["data"]
    opname = {"smin": "min", "smax": "max", "umin": "umin", "umax": "umax", "min": "min", "max": "max",
              "inc": "inc", "dec": "dec", "cmpswap": "cmpswap", "add": "add", "sub": "sub", "and": "and",
              "or": "or", "xor": "xor", "swap": "swap"}.get(op, op)
    if name.endswith(("_u32", "_u64")) and op in ("min", "max"):
        opname = "u" + op
    mask = (1 << (8 * nb)) - 1

    def h(w):
        lanes = w.lanes
        if lanes.size == 0:
            return nxt
        if afn is not None:
            addrs, ok, _ = afn(w, lanes)
            lanes, addrs = lanes[ok], addrs[ok]
        else:
            addrs = afn0(w, lanes)
        addrs = w.mem.check(lanes, addrs, nb, "atomic")
        heap = w.heap.data
        old_vals = []
        for lane, a in zip(lanes.tolist(), addrs.tolist(), strict=True):  # lanes in order, as a serialisation
            p = a - w.heap.base
            old = int.from_bytes(heap[p:p + nb].tobytes(), "little")
            dv = int(w.v[s, lane]) | (int(w.v[s + 1, lane]) << 32 if wide else 0)
            new = _apply_atomic(opname, old, dv, nb, isf, int(w.v[s + (2 if wide else 1), lane]) |
                                (int(w.v[s + 3, lane]) << 32 if wide else 0) if opname == "cmpswap" else 0,
                                flush)
            heap[p:p + nb] = np.frombuffer((new & mask).to_bytes(nb, "little"), np.uint8)
            old_vals.append(old)
        if ret:
            for lane, old in zip(lanes.tolist(), old_vals, strict=True):
                w.v[d, lane] = old & M32
                if wide:
                    w.v[d + 1, lane] = old >> 32
        return nxt
    return h


def _flush_denormal(x: np.float32) -> np.float32:
    return np.float32(np.copysign(0.0, x)) if 0 < abs(x) < np.finfo(np.float32).tiny else x


def _pk_add(old: int, dv: int, bf16: bool) -> int:
    """Packed f16/bf16 add of two dwords, each half rounded to nearest even once, denormals kept
    (CDNA3/4 ISA 9.2: PK_ADD_F16/BF16 in the L2 do not flush). The f32 sum of two 16-bit floats
    rounds to the same 16-bit value as the exact sum: when it is inexact, the smaller addend lies
    far below the result's half-ulp, so no tie can form."""
    h = np.array([old & 0xFFFF, old >> 16, dv & 0xFFFF, (dv >> 16) & 0xFFFF], np.uint16)
    f = (h.astype(np.uint32) << 16).view(np.float32) if bf16 else h.view(np.float16).astype(np.float32)
    r = f[:2] + f[2:]
    out = bf16_bits(r) if bf16 else r.astype(np.float16).view(np.uint16)
    return int(out[0]) | int(out[1]) << 16


def _apply_atomic(op, old, dv, nb, isf, cmp, flush=False):
    if op.startswith("pk_add_"):
        return _pk_add(old, dv & M32, op.endswith("bf16"))
    bits = 8 * nb
    sign = 1 << (bits - 1)
    if isf:  # f32 arithmetic (one rounding), denormals flushed in and out where the arch does
        a, b = np.array([old, dv & M32], np.uint32).view(np.float32)
        if flush:
            a, b = _flush_denormal(a), _flush_denormal(b)
        r = {"add": a + b, "min": min(a, b), "max": max(a, b), "sub": a - b}.get(op, b)
        if flush:
            r = _flush_denormal(np.float32(r))
        return int(np.array(r, np.float32).view(np.uint32))
    if op == "cmpswap":
        # data = {src, cmp}: store src if memory equals cmp
        return dv if old == cmp else old
    if op in ("min", "max"):
        so, sd = (old ^ sign) - sign, (dv ^ sign) - sign
        return dv if (sd < so if op == "min" else sd > so) else old
    if op == "umin":
        return min(old, dv)
    if op == "umax":
        return max(old, dv)
    if op == "inc":
        return 0 if old >= dv else old + 1
    if op == "dec":
        return dv if old == 0 or old > dv else old - 1
    return _ATOMIC[op](old, dv)


for _sp in ("global", "flat", "buffer"):
    for _op in ("add", "sub", "smin", "umin", "smax", "umax", "and", "or", "xor", "swap", "cmpswap", "inc", "dec"):
        builder(f"{_sp}_atomic_{_op}", f"{_sp}_atomic_{_op}_x2")(_build_atomic)
    for _op, _t in (("add", "u32"), ("sub", "u32"), ("min", "i32"), ("min", "u32"), ("max", "i32"), ("max", "u32"),
                    ("and", "b32"), ("or", "b32"), ("xor", "b32"), ("swap", "b32"), ("cmpswap", "b32"),
                    ("inc", "u32"), ("dec", "u32"), ("add", "u64"), ("sub", "u64"), ("min", "i64"),
                    ("min", "u64"), ("max", "i64"), ("max", "u64"), ("and", "b64"), ("or", "b64"), ("xor", "b64"),
                    ("swap", "b64"), ("cmpswap", "b64"), ("inc", "u64"), ("dec", "u64"), ("add", "f32"),
                    ("pk_add", "f16"), ("pk_add", "bf16")):
        builder(f"{_sp}_atomic_{_op}_{_t}")(_build_atomic)


from tiledsl.backends.rocm.emulator import lds_dma  # noqa: E402,F401  (registers global_load_lds_*)
