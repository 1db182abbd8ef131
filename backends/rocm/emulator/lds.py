"""LDS (DS encoding): loads, stores, 2-address forms, atomics, and the lane permutes
ds_swizzle_b32 / ds_permute_b32 / ds_bpermute_b32. gfx11+ names (ds_load_*, ds_store_*,
*_2addr_*) are mapped onto the gfx9 spellings."""

from __future__ import annotations

import re

import numpy as np

from tiledsl.backends.rocm.emulator.executor import builder
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction, window
from tiledsl.backends.rocm.emulator.operands import M32
from tiledsl.backends.rocm.emulator.vmem import _deliver, _gather_data, _lds_access, getter, putter

# ndarray.min/max go through a Python wrapper; the bare reductions cost a microsecond less.
_MIN, _MAX = np.minimum.reduce, np.maximum.reduce

_KIND = {"b8": (1, False), "u8": (1, False), "i8": (1, True), "b16": (2, False), "u16": (2, False),
         "i16": (2, True), "b32": (4, False), "b64": (8, False), "b96": (12, False), "b128": (16, False)}


def canonical(name: str) -> str:
    n = name.replace("ds_load_", "ds_read_").replace("ds_store_", "ds_write_")
    n = n.replace("_2addr_stride64_", "2st64_").replace("_2addr_", "2_")
    n = n.replace("ds_cmpstore", "ds_cmpst").replace("ds_storexchg", "ds_wrxchg")
    return n


def _build_ds(inst, ctx):
    name = canonical(inst.name)
    f, nxt = inst.f, ctx.nxt
    if f.get("gds"):  # the global data share is not modelled: refuse rather than use the LDS
        raise UnsupportedInstruction(f"{inst.raw_name} with GDS")
    acc = 256 if f.get("acc") else 0
    addr_r, d0, d1, vd = f["addr"], f["data0"] + acc, f["data1"] + acc, f["vdst"] + acc
    off = f["offset0"] | (f["offset1"] << 8)
    m = re.match(r"ds_(read|write)(2st64|2)?_(b8|b16|b32|b64|b96|b128|u8|i8|u16|i16)(_d16(_hi)?)?$", name)
    if m:
        op, two, kind, d16, hi = m.group(1), m.group(2), m.group(3), bool(m.group(4)), bool(m.group(5))
        nbytes, signed = _KIND[kind]
        if name in ("ds_write_b8_d16_hi", "ds_write_b16_d16_hi"):
            d16, hi = True, True
        if two:
            scale = nbytes * (64 if two == "2st64" else 1)
            offs = (f["offset0"] * scale, f["offset1"] * scale)
        else:
            offs = (off,)

        def slow(w, lanes):  # per-lane checks: raises the fault naming the first bad lane
            base = w.v[addr_r, lanes].astype(np.int64)
            for k, o in enumerate(offs):
                idx = _lds_access(w, base + o, nbytes, "load" if op == "read" else "store")
                if op == "read":
                    _deliver(w, vd + k * (nbytes // 4), w.lds[idx], lanes, nbytes, signed, d16, hi)
                else:
                    w.lds[idx] = _gather_data(w, d0 if k == 0 else d1, lanes, nbytes, d16, hi)

        # One gather/scatter per address through a byte window of the LDS (see memory.window).
        if op == "read":
            moves = [(o, putter(vd + k * (nbytes // 4), nbytes, signed, d16, hi)) for k, o in enumerate(offs)]
        else:
            moves = [(o, getter(d0 if k == 0 else d1, nbytes, d16, hi)) for k, o in enumerate(offs)]
        span = max(offs) + nbytes

        def h(w):
            lanes = w.lanes
            if lanes.size == 0:
                return nxt
            sel = slice(None) if w.full else lanes
            base = w.v[addr_r][sel]
            if int(_MAX(base)) + span > w.lds.size:  # offsets are unsigned: only the top can overflow
                slow(w, lanes)
                return nxt
            base = base.astype(np.int64)
            win = w.ldswin.get(nbytes)
            if win is None:
                win = window(w.lds, nbytes, w.ldswin)
            for o, mv in moves:
                if op == "read":
                    mv(w, sel, win[base + o if o else base])
                else:
                    win[base + o if o else base] = mv(w, sel)
            return nxt
        return h
    if name in ("ds_read_b64_tr_b16", "ds_read_b64_tr_b8"):  # tr_b4 / b96_tr_b6: unverified, unsupported
        return _build_read_tr(inst, ctx, addr_r, vd, off, int(name.rsplit("_b", 1)[1]))
    if name in ("ds_swizzle_b32", "ds_permute_b32", "ds_bpermute_b32"):
        return _build_permute(name, inst, ctx, addr_r, d0, vd, off)
    m = re.match(r"ds_(add|sub|rsub|inc|dec|min|max|and|or|xor|mskor|wrxchg|cmpst)(_rtn)?_"
                 r"(u32|i32|b32|f32|u64|i64|b64|f64)$", name)
    if m:
        return _build_lds_atomic(m.group(1), bool(m.group(2)), m.group(3), inst, ctx, addr_r, d0, d1, vd, off)
    raise UnsupportedInstruction(f"LDS instruction {inst.name}")


def _build_permute(name, inst, ctx, addr_r, d0, vd, off):
    nxt, W = ctx.nxt, ctx.wave_size
    if name == "ds_swizzle_b32":
        src = swizzle_source(off, W)

        def h_sw(w):
            val = w.v[addr_r][src]  # ds_swizzle's source is the ADDR operand
            ok = w.mask[src]
            np.copyto(w.v[vd], np.where(ok, val, 0).astype(np.uint32), where=w.mask)
            return nxt
        return h_sw
    back = name == "ds_bpermute_b32"

    def h_perm(w):
        # ((addr + off) >> 2) % W in uint32: the wrap-around of addr + off only drops multiples of
        # 2**30 after the shift, which W divides.
        sel = ((w.v[addr_r] + off if off else w.v[addr_r]) >> 2) & (W - 1)
        if back and w.full:  # each lane reads from lane sel, all of them active
            w.v[vd] = w.v[d0][sel]
            return nxt
        if back:  # each lane reads from lane sel
            val = np.where(w.mask[sel], w.v[d0][sel], 0)
            np.copyto(w.v[vd], val.astype(np.uint32), where=w.mask)
        else:  # each active lane writes its data to lane sel
            out = np.zeros(W, dtype=np.uint32)
            act = w.lanes
            out[sel[act]] = w.v[d0][act]
            np.copyto(w.v[vd], out, where=w.mask)
        return nxt
    return h_perm


def swizzle_source(off: int, W: int) -> np.ndarray:
    """The lane each lane of ds_swizzle_b32 reads, for the 16-bit offset (the ISA's four modes, each
    within groups of 32 lanes except the quad mode's groups of 4):
    - offset >= 0xE000, FFT: lane i reads reverse5(i % 32) >> popcount(mask) | (i & mask), mask =
      offset[4:0];
    - 0xC000 <= offset < 0xE000, rotate: lane i reads (i & mask) | ((i +- n) & ~mask) within its 32,
      n = offset[9:5], towards higher lanes (a left rotation) when offset[10] is 0, lower when 1;
    - offset[15] (below 0xC000), quad permute: lane i reads lane offset[2k+1:2k] of its quad, k = i % 4;
    - otherwise bitmask: ((i % 32) & and) | or) ^ xor with the masks offset[4:0], [9:5], [14:10].
    The rotation wraps within the 32 (the ISA's examples: rotating left by 1, lane 31 reads lane 0)."""
    lanes = np.arange(W)
    group, i = lanes & ~31, lanes & 31
    if off >= 0xE000:
        mask = off & 0x1F
        rev = np.array([int(f"{k:05b}"[::-1], 2) for k in range(32)])[i]
        return group | (rev >> bin(mask).count("1")) | (i & mask)
    if off >= 0xC000:
        mask, n = off & 0x1F, (off >> 5) & 0x1F
        step = -n if off & 0x400 else n
        return group | (i & mask) | ((i + step) & ~mask & 31)
    if off & 0x8000:
        return (lanes & ~3) | ((off >> (2 * (lanes & 3))) & 3)
    and_m, or_m, xor_m = off & 0x1F, (off >> 5) & 0x1F, (off >> 10) & 0x1F
    return group | (((i & and_m) | or_m) ^ xor_m)


def _build_read_tr(inst, ctx, addr_r, vd, off, bits):
    """gfx950's ds_read_b64_tr_b16 / ds_read_b64_tr_b8 (CDNA4 ISA 11.4, "MFMA transpose load from
    LDS"): every lane reads 8 bytes -- n = 64/bits values consecutive along M (or N) -- and each
    group of 16 lanes shuffles its block so that every lane ends with n values consecutive along
    K, the MFMA operand layout. Source lane s of a group holds M = n*(s % (16/n)) .. +n-1 at
    K = s // (16/n); destination lane d receives, as value e, value d % n of source lane
    (16/n)*e + d//n (M = d, K = e). This is the lane mapping Triton's layout for these
    instructions assumes (lane bits below 16/n step M by n, the others step K; 16 lanes take
    part), validated on the hardware by Triton and here by its f16 attention and fp8 matmul
    (tests/test_third_party_corpus.py). The ISA requires EXEC to be all ones; anything else is
    refused."""
    nxt, W = ctx.nxt, ctx.wave_size
    n = 64 // bits
    d = np.arange(16)
    src = (16 // n) * np.arange(n)[None, :] + d[:, None] // n  # [dest lane, value e] -> source lane
    pick = (d % n)[:, None]  # [dest lane] -> which of the source lane's values
    dt = np.uint16 if bits == 16 else np.uint8

    def h(w):
        if not w.full:
            raise UnsupportedInstruction(f"{inst.raw_name} with EXEC 0x{w.exec:x}: the ISA requires every lane")
        idx = _lds_access(w, w.v[addr_r].astype(np.int64) + off, 8, "load")
        vals = np.ascontiguousarray(w.lds[idx]).view(dt).reshape(W // 16, 16, n)  # [group, lane, value]
        out = np.ascontiguousarray(vals[:, src, pick]).reshape(W, n)
        w.v[vd:vd + 2] = out.view(np.uint32).T
        return nxt
    return h


def _build_lds_atomic(op, rtn, t, inst, ctx, addr_r, d0, d1, vd, off):
    nxt = ctx.nxt
    nb = 8 if t.endswith("64") else 4
    dt = {"u32": np.uint32, "i32": np.int32, "b32": np.uint32, "f32": np.float32, "u64": np.uint64,
          "i64": np.int64, "b64": np.uint64, "f64": np.float64}[t]
    ndw = nb // 4

    def val(w, reg, lanes):
        raw = np.ascontiguousarray(w.v[reg:reg + ndw, lanes].T).reshape(-1)
        return raw.view(dt)

    def h(w):
        lanes = w.lanes
        if lanes.size == 0:
            return nxt
        offs = w.v[addr_r, lanes].astype(np.int64) + off
        _lds_access(w, offs, nb, "atomic")
        mem = w.lds
        a = val(w, d0, lanes)
        b = val(w, d1, lanes) if op in ("mskor", "cmpst") else None
        olds = np.zeros(lanes.size, dtype=dt)
        for i, o in enumerate(offs.tolist()):  # serialise the lanes in order
            cur = mem[o:o + nb].view(dt)[0]
            olds[i] = cur
            x = a[i]
            if op == "add":
                new = cur + x
            elif op == "sub":
                new = cur - x
            elif op == "rsub":
                new = x - cur
            elif op == "min":
                new = min(cur, x)
            elif op == "max":
                new = max(cur, x)
            elif op == "and":
                new = cur & x
            elif op == "or":
                new = cur | x
            elif op == "xor":
                new = cur ^ x
            elif op == "inc":
                new = 0 if cur >= x else cur + 1
            elif op == "dec":
                new = x if cur == 0 or cur > x else cur - 1
            elif op == "wrxchg":
                new = x
            elif op == "mskor":
                new = (cur & ~x) | b[i]
            elif op == "cmpst":  # gfx9 order: data0 = compare, data1 = new value
                cmp_v, src_v = (a[i], b[i]) if ctx.gen == "gfx9" else (b[i], a[i])
                new = src_v if cur == cmp_v else cur
            else:
                raise UnsupportedInstruction(f"LDS atomic {op}")
            mem[o:o + nb] = np.array([new], dtype=dt).view(np.uint8)
        if rtn:
            bits = olds.view(np.uint32).reshape(lanes.size, ndw)
            for k in range(ndw):
                w.v[vd + k, lanes] = bits[:, k] & M32
        return nxt
    return h


def _names():
    out = []
    for op in ("read", "write", "load", "store"):
        for two in ("", "2", "2st64", "_2addr", "_2addr_stride64"):
            for k in _KIND:
                out.append(f"ds_{op}{two}_{k}")
        for k in ("u8_d16", "u8_d16_hi", "i8_d16", "i8_d16_hi", "u16_d16", "u16_d16_hi", "b8_d16_hi", "b16_d16_hi"):
            out.append(f"ds_{op}_{k}")
    for op in ("add", "sub", "rsub", "inc", "dec", "min", "max", "and", "or", "xor", "mskor", "wrxchg", "cmpst",
               "cmpstore", "storexchg"):
        for t in ("u32", "i32", "b32", "f32", "u64", "i64", "b64", "f64"):
            out += [f"ds_{op}_{t}", f"ds_{op}_rtn_{t}"]
    return out + ["ds_swizzle_b32", "ds_permute_b32", "ds_bpermute_b32", "ds_read_b64_tr_b16",
                  "ds_read_b64_tr_b8"]


for _n in _names():
    builder(_n)(_build_ds)
