"""Batched handlers for lockstep.py beyond the lane-local VALU ones: matrix products and LDS
loads/stores run once for all member waves of a group.

They see a `BatchWave` (lockstep.py): the chunk's registers as `V3[reg, wave, lane]`, the member
waves `km`, and the chunk's LDS as one byte array holding each workgroup's LDS at `ldsbase`
(per lane). They compute what the ordinary handlers compute wave by wave, in the same float64
arithmetic; where an ordinary handler would report an error (an LDS access outside the
workgroup's LDS, an unreplicated gfx11 WMMA operand), they raise and lockstep hands the launch to
the ordinary path, which reports it exactly.
"""

from __future__ import annotations

import re

import numpy as np

from tiledsl.backends.rocm.emulator.executor import SCRATCH_TAG
from tiledsl.backends.rocm.emulator.memory import TAG_SHIFT, EmulatorError, window

_MIN, _MAX = np.minimum.reduce, np.maximum.reduce
PER_WAVE = -3  # returned by a batched handler that leaves this execution to the per-wave handlers


class NotBatched(EmulatorError):
    """A batched handler met something only the ordinary handler describes (a fault)."""


def batched(inst, ctx, ordinary):
    """A batched handler for `inst`, or None (then it runs per wave). `ordinary` is the instruction's
    ordinary handler (bound for one wave)."""
    if inst.name.startswith(("v_mfma", "v_wmma")):
        return _matrix(ordinary, ctx.nxt)
    if inst.fam == "DS":
        return _ds(inst, ctx)
    return None


# -- MFMA / WMMA --------------------------------------------------------------------------
def _block_index(rows, cols, r0, W2):
    """Flat index of (row, col) elements in the registers from r0 laid out row after row (W2
    columns per row), as `_elements` lays them out."""
    return (rows - r0) * W2 + cols


def _elements(V3, r0, n, km, all_in, dtype):
    """Registers r0..r0+n of the member waves as [element, wave] (`dtype` elements, row after row):
    taking whole rows of this layout is a fraction of the cost of a fancy index per wave."""
    blk = V3[r0:r0 + n] if all_in else V3[r0:r0 + n][:, km]
    blk = blk.view(dtype)
    return np.ascontiguousarray(blk.transpose(0, 2, 1)).reshape(-1, blk.shape[1])


def _operand(V3, r0, n, idx, shape, typ, km, all_in):
    """Operand elements [wave, i, k] of the member waves as float64 (as `_operand_gather` per wave)."""
    x = np.take(_elements(V3, r0, n, km, all_in, np.uint16 if typ in ("f16", "bf16") else np.float32), idx, axis=0)
    if typ == "f16":
        x = x.view(np.float16)
    elif typ == "bf16":
        x = (x.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return x.reshape(*shape, -1).transpose(2, 0, 1).astype(np.float64, order="C")


def _row_order(de, dl, W):
    """The permutation of D's rows that puts D = A @ B.T, flattened, in register order (register
    after register, lanes within), or None. It exists when each D element's flat register position
    is its row's start plus its column -- true of every MFMA/WMMA layout modelled -- so permuting A's
    rows once at bind time replaces a gather and a scatter of D and C per execution."""
    flat = (de - de.min()) * W + dl
    M, N = flat.shape
    starts = flat[:, 0]
    if not (flat - starts[:, None] == np.arange(N)).all():
        return None
    perm = np.argsort(starts)
    return perm if (starts[perm] == np.arange(M) * N).all() else None


def _matrix(ordinary, nxt):
    plan = getattr(ordinary, "plan", None)
    if plan is None:
        return None
    (ra, (ai, ak), ta), (rb, (bi, bk), tb) = plan["a"], plan["b"]
    ce, cval = plan["c"]
    de, dl = plan["d"]
    neg, cmod = plan["neg"], plan.get("cmod", 0)
    replicated, nrep, sa, sb = plan["replicated"]
    W = plan["W"]
    perm = _row_order(de, dl, W)
    if perm is None:
        return None
    ai, ak = ai[perm], ak[perm]
    # Operands as blocks of whole registers: rows r0..r0+n (16-bit elements: 2W columns a row).
    wa, wb = (2 * W if ta in ("f16", "bf16") else W), (2 * W if tb in ("f16", "bf16") else W)
    na, nb = int(ai.max()) + 1, int(bi.max()) + 1
    ia, ib = _block_index(ai, ak, 0, wa).reshape(-1), _block_index(bi, bk, 0, wb).reshape(-1)
    d0, nd = int(de.min()), int(de.max()) - int(de.min()) + 1
    c0 = int(ce.min()) if ce is not None else 0  # C's elements sit in its registers as D's in D's

    def h(w):
        V3, km = w.V3, w.km
        all_in = km.size == V3.shape[1]
        if replicated:  # gfx11: lanes 16-31 must repeat 0-15 (bit-equal here; anything else per wave)
            for r in (sa, sb):
                regs = V3[r:r + nrep] if all_in else V3[r:r + nrep][:, km]
                if not np.array_equal(regs[:, :, :16], regs[:, :, 16:]):
                    raise NotBatched("WMMA operand halves differ in bits")
        A = _operand(V3, ra, na, ia, ai.shape, ta, km, all_in)
        B = _operand(V3, rb, nb, ib, bi.shape, tb, km, all_in)
        if neg & 1:
            A = -A
        if neg & 2:
            B = -B
        # One product per wave, each the same float64 A @ B.T the ordinary handler computes (its
        # rows permuted), then C added and the sum rounded to f32 once, as there.
        D = np.matmul(A, B.transpose(0, 2, 1)).reshape(-1, nd, W)  # [wave, register, lane]
        Vf = V3.view(np.float32)
        if ce is not None:
            C = (Vf[c0:c0 + nd] if all_in else Vf[c0:c0 + nd, km]).transpose(1, 0, 2)
            if cmod & 2:  # WMMA's {NEG_HI[2], NEG[2]} = {ABS, NEG} on C (matrix._c_modified)
                C = np.abs(C)
            D += -C if cmod & 1 else C
        else:
            D += cval
        if all_in:
            Vf[d0:d0 + nd] = D.transpose(1, 0, 2)
        else:
            Vf[d0:d0 + nd, km] = D.transpose(1, 0, 2)
        return nxt
    return h


# -- LDS ----------------------------------------------------------------------------------
_KIND = {"b8": (1, False), "u8": (1, False), "i8": (1, True), "b16": (2, False), "u16": (2, False),
         "i16": (2, True), "b32": (4, False), "b64": (8, False), "b96": (12, False), "b128": (16, False)}


def _ds(inst, ctx):
    from tiledsl.backends.rocm.emulator.lds import canonical
    from tiledsl.backends.rocm.emulator.vmem import putter

    name = canonical(inst.name)
    m = re.match(r"ds_(read|write)(2st64|2)?_(b8|b16|b32|b64|b96|b128|u8|i8|u16|i16)(_d16(_hi)?)?$", name)
    if not m:
        return None
    f, nxt = inst.f, ctx.nxt
    acc = 256 if f.get("acc") else 0
    addr_r, d0, d1, vd = f["addr"], f["data0"] + acc, f["data1"] + acc, f["vdst"] + acc
    op, two, kind, d16, hi = m.group(1), m.group(2), m.group(3), bool(m.group(4)), bool(m.group(5))
    nbytes, signed = _KIND[kind]
    if name in ("ds_write_b8_d16_hi", "ds_write_b16_d16_hi"):
        d16, hi = True, True
    if two:
        scale = nbytes * (64 if two == "2st64" else 1)
        offs = (f["offset0"] * scale, f["offset1"] * scale)
    else:
        offs = (f["offset0"] | (f["offset1"] << 8),)
    span = max(offs) + nbytes
    if op == "read":
        moves = [(o, putter(vd + k * (nbytes // 4), nbytes, signed, d16, hi)) for k, o in enumerate(offs)]
    else:
        moves = [(o, _data(d0 if k == 0 else d1, nbytes, d16, hi)) for k, o in enumerate(offs)]

    def h(w):
        lanes = w.lanes
        if lanes.size == 0:
            return nxt
        sel = slice(None) if w.full else lanes
        base = w.v[addr_r][sel]
        if int(_MAX(base)) + span > w.lds_size:  # offsets are unsigned: only the top can overflow
            raise NotBatched("LDS access outside the workgroup's LDS")
        base = base + w.ldsbase[sel]  # int64: each lane's workgroup LDS in the chunk's array
        win = w.ldswin.get(nbytes)
        if win is None:
            win = window(w.ldsall, nbytes, w.ldswin)
        for o, mv in moves:
            if op == "read":
                mv(w, sel, win[base + o if o else base])
            else:
                win[base + o if o else base] = mv(w, sel)
        return nxt
    return h


def _data(s, nbytes, d16, hi):
    """`data(w, sel)`: the values to store from VGPR s.. as window elements (as vmem.getter, for
    any number of lanes)."""
    half, k = int(hi), nbytes // 4
    if nbytes < 4:
        return lambda w, sel: (w.h[s, half::2] if d16 or nbytes == 2 else w.v[s])[sel]
    if nbytes == 4:
        return lambda w, sel: w.v[s][sel]
    if nbytes == 8:
        return lambda w, sel: np.ascontiguousarray(w.v[s:s + 2].T[sel]).view(np.uint64).reshape(-1)
    return lambda w, sel: w.v[s:s + k].T[sel]


# -- lane masks: compares and v_cndmask --------------------------------------------------
def _lane_bits(r: np.ndarray, w, W: int) -> list[int]:
    """Each member wave's lane bitmask (lane i = bit i) of the chunk-wide bool vector `r`."""
    packed = np.packbits(r.reshape(-1, W)[w.km], axis=1, bitorder="little")
    return packed.view(np.uint64 if W == 64 else np.uint32).reshape(-1).tolist()


def _wave_mask(w, enc: int, W: int) -> np.ndarray:
    """The chunk-wide bool lane vector of each member wave's SGPR (pair) `enc` (non-members False)."""
    waves = w.waves
    if W == 64:
        vals = [waves[k].s[enc] | waves[k].s[enc + 1] << 32 for k in w.kl]
    else:
        vals = [waves[k].s[enc] for k in w.kl]
    bits = np.unpackbits(np.array(vals, dtype=np.uint64 if W == 64 else np.uint32).view(np.uint8)
                         .reshape(len(vals), -1), axis=1, bitorder="little").view(bool)
    m = np.zeros((w.V3.shape[1], W), dtype=bool)
    m[w.km] = bits
    return m.reshape(-1)


def compare(inst, ctx, wctx):
    """v_cmp/v_cmpx for all member waves: one comparison over the chunk's lanes, then each wave's
    bits to its SGPR (pair)/VCC and, for v_cmpx, its EXEC (as valu._b_cmp does per wave)."""
    from tiledsl.backends.rocm.emulator.operands import scalar_writer
    from tiledsl.backends.rocm.emulator.valu import CMPS, _reader, _srcs
    from tiledsl.backends.rocm.emulator.valu_ops import _class

    if inst.dpp is not None or inst.name not in CMPS:
        return None
    t, pred, x = CMPS[inst.name]
    f, nxt, W, NW = inst.f, ctx.nxt, wctx.wave_size, ctx.wave_size
    e0, e1, _ = _srcs(inst)
    a = _reader(inst, ctx, 0, e0, t)
    b = _reader(inst, ctx, 1, e1, "u32" if pred == "class" else t)
    if pred == "class":
        pred = _class
    if inst.fam == "VOP3":
        dst = scalar_writer(f["vdst"], wctx, W == 64)
    elif inst.sdwa is not None and inst.sdwa["sd"]:
        dst = scalar_writer(inst.sdwa["sdst"], wctx, W == 64)
    else:
        def dst(w, v):
            w.set_vcc(v)
    write_sdst = not x or wctx.gen == "gfx9"

    def h(w):
        r = pred(a(w), b(w))
        if r.shape != (NW,):
            r = np.broadcast_to(r, (NW,))
        if not w.full:
            r = r & w.mask
        waves = w.waves
        for k, bits in zip(w.kl, _lane_bits(r, w, W), strict=True):
            wv = waves[k]
            if write_sdst:
                dst(wv, bits)
            if x:
                wv.set_exec(bits)
        return nxt
    return h


def cndmask(inst, ctx, wctx):
    """v_cndmask_b32 for all member waves: each wave's mask SGPR (pair) or VCC as lanes, then one
    select (as valu_fast._cndmask does per wave)."""
    from tiledsl.backends.rocm.emulator.operands import vsrc
    from tiledsl.backends.rocm.emulator.valu_fast import plain

    if not plain(inst):
        return None
    f, nxt, W = inst.f, ctx.nxt, wctx.wave_size
    menc = f["src2"] if inst.fam == "VOP3" else 106  # e32 reads VCC
    if menc >= 128:
        return None
    a = vsrc(f["src0"], "b32", ctx, inst.lit)
    b = vsrc(f["src1"], "b32", ctx, inst.lit)
    d = f["vdst"]

    def h(w):
        r = np.where(_wave_mask(w, menc, W), b(w), a(w))
        if w.full:
            w.v[d] = r
        else:
            np.copyto(w.v[d], r, where=w.mask, casting="unsafe")
        return nxt
    return h


def tagged_addresses(w, sel, use_saddr: bool, saddr: int, va: int, k0: int, nbytes: int) -> np.ndarray | None:
    """The untagged addresses (int64) of the lanes `sel` of a global access of `nbytes` per lane,
    when every one carries a pointer argument's tag and lies inside that argument's region (the
    check `Regions.check` makes lane by lane); None otherwise (the caller runs it per wave)."""
    W = w.V3.shape[2]
    if use_saddr:  # a 32-bit unsigned VGPR offset from each wave's 64-bit SGPR base
        waves = w.waves
        base = np.zeros(w.V3.shape[1], dtype=np.int64)
        base[w.km] = [waves[k].s[saddr] | waves[k].s[saddr + 1] << 32 for k in w.kl]
        addr = np.repeat(base, W)[sel] + w.v[va][sel].astype(np.int64)
    else:
        addr = (w.v[va].astype(np.int64) | (w.v[va + 1].astype(np.int64) << 32))[sel]
    if k0:
        addr += k0
    return checked_addresses(w, addr, nbytes)


def buffer_addresses(w, sel, rsrc: int, soffset, va: int, k0: int, nbytes: int, gen: str):
    """(untagged addresses, in range) of the lanes `sel` of an `offen` buffer access through each
    wave's raw descriptor (base, num_records; stride 0): the lanes in range must pass
    checked_addresses, the others read 0 and drop writes. None where a descriptor field the
    ordinary handler models or refuses is set (a stride, swizzling, ADD_TID, gfx12's stride scale),
    a lane is partly in range, or a lane in range falls outside its tensor: the caller runs it per
    wave."""
    waves, n, W = w.waves, w.V3.shape[1], w.V3.shape[2]
    base, num, soff = (np.zeros(n, dtype=np.int64) for _ in range(3))
    special = 0xC000_0000 if gen != "gfx9" else 0x8000_0000
    for k in w.kl:
        d = waves[k].s
        raw = int(d[rsrc]) | (int(d[rsrc + 1]) & 0xFFFF) << 32
        raw_oob = gen == "gfx9" or (d[rsrc + 3] >> 28) & 3 == 3  # gfx10+: OOB_SELECT raw, else per wave
        if raw == SCRATCH_TAG or (d[rsrc + 1] >> 16) & 0x3FFF or d[rsrc + 1] & special \
                or d[rsrc + 3] & ((1 << 23) | 0x000C_0000) or not raw_oob:
            return None
        base[k] = w.mem.buffer_base(raw)
        num[k], soff[k] = int(d[rsrc + 2]), soffset(waves[k])
    off = k0 + w.v[va][sel].astype(np.int64)
    limit = np.repeat(num, W)[sel]
    ok = off + nbytes <= limit  # SOFFSET is not range-checked (vmem._buffer_address)
    if nbytes > 4 and (ok != (off + 4 <= limit)).any():
        return None  # a lane partly in range: the ordinary handler checks each dword
    real = checked_addresses(w, (np.repeat(base + soff, W)[sel] + off)[ok], nbytes)
    return None if real is None else (real, ok)


def checked_addresses(w, addr: np.ndarray, nbytes: int) -> np.ndarray | None:
    """`addr` (int64, tagged) untagged, when every one carries a pointer argument's tag and the
    access lies inside that argument's region; None otherwise."""
    from tiledsl.backends.rocm.emulator.memory import ADDR_MASK

    if addr.size == 0:
        return addr
    tags = addr >> TAG_SHIFT
    tmin, tmax = int(_MIN(tags)), int(_MAX(tags))
    mem = w.mem
    if tmin < 1 or tmax >= len(mem._bounds):
        return None
    real = addr & ADDR_MASK
    if tmin == tmax:
        r = mem.regions[tmin - 1]
        if int(_MIN(real)) < r.addr or int(_MAX(real)) + nbytes > r.addr + r.size:
            return None
    else:
        lo, hi_ = mem._lo.astype(np.int64)[tags], mem._hi.astype(np.int64)[tags]
        if ((real < lo) | (real + nbytes > hi_)).any():
            return None
    return real


# -- global memory --------------------------------------------------------------------------
def global_access(inst, ctx, wctx):
    """global_load/store for all member waves as one gather or scatter through the heap's byte
    window, when every active lane's address carries a pointer argument's tag and lies inside
    that argument's region -- the check `Regions.check` makes lane by lane. Anything else (an
    untagged address, a lane outside its region: a fault) runs per wave, the ordinary handlers
    making their checks and reporting their faults."""
    from tiledsl.backends.rocm.emulator.vmem import _parse_vmem, putter

    parsed = _parse_vmem(inst.name)
    if parsed is None or inst.fam.lower() != "global":
        return None
    op, nbytes, signed, d16, hi = parsed
    f, nxt = inst.f, ctx.nxt
    acc = 256 if f.get("acc") else 0
    d, s, va, k0 = f["vdst"] + acc, f["data"] + acc, f["addr"], f["offset"]
    saddr = f["saddr"]
    use_saddr = saddr != f["null"] and not (wctx.gen == "gfx9" and saddr == 0x7F)
    if use_saddr and saddr >= 128:
        return None
    put = putter(d, nbytes, signed, d16, hi) if op == "load" else None
    data = _data(s, nbytes, d16, hi) if op == "store" else None

    def h(w):
        lanes = w.lanes
        if lanes.size == 0:
            return nxt
        sel = slice(None) if w.full else lanes
        real = tagged_addresses(w, sel, use_saddr, saddr, va, k0, nbytes)
        if real is None:
            return PER_WAVE  # untagged, unknown tags or outside a region: the ordinary per-lane checks
        off, win = _heap_window(w.heap, real, nbytes)
        if op == "load":
            _count_loads(w.heap, off, w.lane_wave if w.full else w.lane_wave[lanes], nbytes)
            put(w, sel, win[off])
        else:
            win[off] = data(w, sel)
        return nxt
    return h


def _heap_window(heap, real: np.ndarray, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Heap offsets of untagged addresses, and the heap's window of `nbytes` elements."""
    win = heap.windows.get(nbytes)
    if win is None:
        win = window(heap.data, nbytes, heap.windows)
    return real - heap.base, win


def _count_loads(heap, off: np.ndarray, wave: np.ndarray, nbytes: int) -> None:
    """Traffic counts as the ordinary path keeps them: bytes, and distinct addresses per wave."""
    if off.size == 0:
        return
    heap.loaded_bytes += off.size * nbytes
    key = np.sort(off + (wave << TAG_SHIFT))  # sorting beats np.unique's hashing here
    heap.unique_loaded_bytes += (1 + int(np.count_nonzero(key[1:] != key[:-1]))) * nbytes


def buffer_access(inst, ctx, wctx):
    """buffer_load/store (offen, a raw descriptor) for all member waves, as global_access: lanes
    out of the descriptor's range read 0 and store nothing, as on the hardware; anything else
    runs per wave."""
    from tiledsl.backends.rocm.emulator.vmem import _parse_vmem, putter, soffset_reader

    parsed = _parse_vmem(inst.name)
    f = inst.f
    if parsed is None or inst.fam != "MUBUF" or f.get("idxen") or not f.get("offen") or f.get("lds") or f.get("tfe"):
        return None
    op, nbytes, signed, d16, hi = parsed
    nxt = ctx.nxt
    acc = 256 if f.get("acc") else 0
    d = f["vdata"] + acc
    soffset = soffset_reader(f, wctx)
    put = putter(d, nbytes, signed, d16, hi) if op == "load" else None
    data = _data(d, nbytes, d16, hi) if op == "store" else None

    def h(w):
        lanes = w.lanes
        if lanes.size == 0:
            return nxt
        sel = slice(None) if w.full else lanes
        got = buffer_addresses(w, sel, f["srsrc"], soffset, f["vaddr"], f["offset"], nbytes, wctx.gen)
        if got is None:
            return PER_WAVE
        real, ok = got
        off, win = _heap_window(w.heap, real, nbytes)
        if op == "load":
            _count_loads(w.heap, off, (w.lane_wave if w.full else w.lane_wave[lanes])[ok], nbytes)
            g = win[off]
            if not ok.all():
                full = np.zeros((ok.size, *g.shape[1:]), dtype=g.dtype)
                full[ok] = g
                g = full
            put(w, sel, g)
        else:
            win[off] = data(w, sel)[ok]
        return nxt
    return h


# -- carries and 64-bit multiply-adds ------------------------------------------------------
def carry(inst, ctx, wctx):
    """v_add_co/v_sub_co (with or without carry-in) for all member waves: one int64 sum over the
    chunk's lanes, each wave's carry bits to its SGPR (pair)/VCC (as valu._b_carry per wave)."""
    from tiledsl.backends.rocm.emulator.operands import M32, scalar_writer, vdst, vsrc
    from tiledsl.backends.rocm.emulator.valu_ops import CARRY

    if inst.name not in CARRY or inst.dpp is not None or inst.sdwa is not None:
        return None
    kind, cin = CARRY[inst.name]
    f, nxt, W, NW = inst.f, ctx.nxt, wctx.wave_size, ctx.wave_size
    if inst.fam == "VOP3" and f.get("clamp", 0):
        return None
    menc = (f["src2"] if inst.fam == "VOP3" else 106) if cin else None
    if menc is not None and menc >= 128:
        return None
    a, b = vsrc(f["src0"], "u32", ctx, inst.lit), vsrc(f["src1"], "u32", ctx, inst.lit)
    wr = vdst(f["vdst"], "u32", ctx)
    if inst.fam == "VOP3":
        no_co = f["sdst"] == wctx.null_sgpr
        cwr = scalar_writer(f["sdst"], wctx, W == 64)
    else:
        no_co = False

        def cwr(w, v):
            w.set_vcc(v)
    op = np.add if kind == "add" else np.subtract

    def h(w):
        x, y = a(w), b(w)
        if kind == "subrev":
            x, y = y, x
        r = op(x, y, dtype=np.int64)
        if cin:
            r = op(r, _wave_mask(w, menc, W), dtype=np.int64)
        if r.shape != (NW,):
            r = np.broadcast_to(r, (NW,))
        co = r > M32 if kind == "add" else r < 0
        wr(w, r)  # the u32 writer keeps the low 32 bits
        if not no_co:
            _spread_carries(co, w, W, cwr)
        return nxt
    return h


def _spread_carries(co, w, W: int, write) -> None:
    """Each member wave's carry-out lanes of the chunk (bool per lane) into its SGPR (pair)."""
    if not w.full:
        co = co & w.mask
    waves = w.waves
    for k, bits in zip(w.kl, _lane_bits(co, w, W), strict=True):
        write(waves[k], bits)


def mad64(inst, ctx, wctx):
    """v_mad_u64_u32 and friends: the ordinary builder's arithmetic over the chunk's lanes, then
    each member wave's carry-out lanes into its SGPR (pair) (as valu_fast._mad64 per wave)."""
    from tiledsl.backends.rocm.emulator.executor import BUILDERS
    from tiledsl.backends.rocm.emulator.operands import scalar_writer

    b = BUILDERS.get(inst.name)
    if b is None or inst.dpp is not None or inst.sdwa is not None:
        return None
    core = getattr(b(inst, ctx), "core", None)
    if core is None:
        return None
    swr = scalar_writer(inst.f["sdst"], wctx, wctx.wave_size == 64)
    nxt, W = ctx.nxt, wctx.wave_size

    def h(w):
        co = core(w)
        if co is not None:
            _spread_carries(co, w, W, swr)
        return nxt
    return h


# -- scratch (private memory) ----------------------------------------------------------------
def scratch_access(inst, ctx, wctx):
    """scratch_load/store for all member waves: each lane's private offset checked against the
    private segment as `vmem._private_access` checks it (any lane outside: per wave, where the
    ordinary handler reports the fault), then one gather or scatter over the chunk's scratch,
    which holds every wave's lanes one after another."""
    from tiledsl.backends.rocm.emulator.vmem import _deliver, _gather_data, _parse_vmem

    parsed = _parse_vmem(inst.name)
    if parsed is None or inst.fam != "SCRATCH":
        return None
    op, nbytes, signed, d16, hi = parsed
    f, nxt, W = inst.f, ctx.nxt, wctx.wave_size
    acc = 256 if f.get("acc") else 0
    d, s, va, off = f["vdst"] + acc, f["data"] + acc, f["addr"], f["offset"]
    saddr = f["saddr"]
    has_saddr = saddr != f["null"] and not (wctx.gen == "gfx9" and saddr == 0x7F)
    use_v = bool(f["sve"]) if wctx.image.arch.scratch_sve else not has_saddr
    if has_saddr and saddr >= 128:
        return None
    cols = np.arange(nbytes)

    def h(w):
        lanes = w.lanes
        if lanes.size == 0:
            return nxt
        scratch = w.scratch
        if scratch is None:
            return PER_WAVE
        o = np.full(lanes.size, off, dtype=np.int64)
        if has_saddr:
            waves = w.waves
            base = np.zeros(w.V3.shape[1], dtype=np.int64)
            base[w.km] = [waves[k].s[saddr] for k in w.kl]
            o += np.repeat(base, W)[lanes]
        if use_v:
            o += w.v[va, lanes]
        if int(_MIN(o)) < 0 or int(_MAX(o)) + nbytes > scratch.shape[1]:
            return PER_WAVE
        idx = o[:, None] + cols
        if op == "load":
            _deliver(w, d, scratch[lanes[:, None], idx], lanes, nbytes, signed, d16, hi)
        else:
            scratch[lanes[:, None], idx] = _gather_data(w, s, lanes, nbytes, d16, hi)
        return nxt
    return h
