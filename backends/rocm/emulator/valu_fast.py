"""Specialised handlers for the VALU instructions that dominate compiled kernels (64-bit address
arithmetic, byte permutes, shifts). The generic path in valu.py converts every operand to int64
and splits 64-bit values into halves, which costs tens of microseconds per instruction; these
handlers do the same arithmetic in as few numpy calls as possible.

A builder returns None when the instruction uses a modifier it does not handle (DPP, SDWA, abs,
neg, clamp, omod, op_sel); valu.py then binds the generic handler. Semantics are unchanged.
"""

from __future__ import annotations

import numpy as np

from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.emulator.operands import M64, mask_to_int, scalar_reader, scalar_writer, vdst, vsrc
from tiledsl.backends.rocm.emulator.valu_ops import OPS
from tiledsl.backends.rocm.emulator.valu_ops import _perm as _perm_generic

FAST: dict[str, object] = {}


def fast(*names: str):
    def deco(fn):
        for n in names:
            FAST[n] = fn
        return fn
    return deco


def plain(inst, vop3b: bool = False) -> bool:
    """No DPP/SDWA and no VOP3 modifiers (VOP3B reuses the abs/op_sel bits for sdst)."""
    if inst.dpp is not None or inst.sdwa is not None:
        return False
    f = inst.f
    if inst.fam != "VOP3":
        return True
    if f["neg"] or f["clamp"] or f["omod"]:
        return False
    return vop3b or not (f["abs"] or f["opsel"])


def pair_buffer(W: int, dtype=np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """A 64-bit lane buffer and its (2, W) uint32 view shaped like a VGPR pair, preallocated per
    bound instruction: moving a pair in or out is then one strided copy, with no temporaries
    and no view/reshape calls per execution (each costs about a microsecond)."""
    buf = np.empty(W, dtype)
    return buf, buf.view(np.uint32).reshape(W, 2).T


def read64(enc: int, ctx, lit):
    """u64 source: a VGPR pair as a uint64 lane array (a buffer reused by this closure; consume it
    before the next call), else a Python int."""
    if enc >= 256:
        r = enc - 256
        buf, rows = pair_buffer(ctx.wave_size)

        def rd(w):
            rows[...] = w.v[r:r + 2]
            return buf
        return rd
    return scalar_reader(enc, ctx, lit, "u64")


def write64(d: int, ctx):
    """(out, store): compute the uint64 result into `out`, then `store(w)` writes it to the VGPR
    pair d, d+1 under EXEC."""
    out, rows = pair_buffer(ctx.wave_size)

    def store(w):
        if w.full:
            w.v[d:d + 2] = rows
        else:
            np.copyto(w.v[d:d + 2], rows, where=w.mask)
    return out, store


@fast("v_mad_u64_u32", "v_mad_co_u64_u32", "v_mad_i64_i32", "v_mad_co_i64_i32")
def _mad64(inst, ctx):
    """v_mad_u64_u32 / v_mad_i64_i32: D = S0 * S1 + S2 in 64 bits, and the carry-out -- bit 64 of
    the 65-bit result ({D1.u1, D0.u64} = 65'B(S0 * S1 + S2) in the ISA) -- into the SGPR (pair)
    sdst. Every form is bound here (never the generic VOP3B path, which has no carry)."""
    core = mad64_core(inst, ctx)
    swr = scalar_writer(inst.f["sdst"], ctx, ctx.wave_size == 64)
    nxt = ctx.nxt

    def h(w):
        co = core(w)
        if co is not None:
            swr(w, mask_to_int(co if w.full else co & w.mask))
        return nxt
    h.core = core  # lockstep_ops.mad64 spreads the carries over the member waves itself
    return h


def mad64_core(inst, ctx):
    """`core(w)`: computes and writes D, returns the carry-out lanes (bool array), or None when
    sdst is the null register. clamp saturates D to the 64-bit range (carry / signed overflow)."""
    f, W = inst.f, ctx.wave_size
    if inst.dpp is not None or inst.sdwa is not None or f["neg"] or f["omod"]:
        raise UnsupportedInstruction(f"{inst.raw_name}: DPP/SDWA, neg or omod on a 64-bit integer mad")
    signed = "i64" in inst.name
    a = vsrc(f["src0"], "i32" if signed else "u32", ctx, inst.lit)
    b = vsrc(f["src1"], "i32" if signed else "u32", ctx, inst.lit)
    c = read64(f["src2"], ctx, inst.lit)
    out, store = write64(f["vdst"], ctx)
    prod = np.empty(W, np.int64 if signed else np.uint64)
    cbuf = np.empty(W, np.uint64)
    clamp, no_co = bool(f["clamp"]), f["sdst"] == ctx.null_sgpr

    def core(w):
        np.multiply(a(w), b(w), out=prod, dtype=prod.dtype)  # exact: |S0 * S1| < 2**64 (2**62 signed)
        cbuf[...] = c(w)  # (an int operand is a 64-bit pattern; uint64 arithmetic wraps silently)
        p = prod.view(np.uint64)
        np.add(p, cbuf, out=out)
        if signed:  # bit 64 of the 65-bit sum is its sign: the wrapped sign, flipped by an overflow
            sp, sc, so = (x.view(np.int64) < 0 for x in (p, cbuf, out))
            ovf = (sp == sc) & (so != sp)
            co = so ^ ovf
            if clamp:
                out[...] = np.where(ovf, np.where(sp, np.uint64(1 << 63), np.uint64((1 << 63) - 1)), out)
        else:
            co = out < p
            if clamp:
                out[co] = np.uint64(M64)
        store(w)
        return None if no_co else co
    return core


def _shift64(inst, ctx, src, amt, mask, left, add=None):
    f, nxt = inst.f, ctx.nxt
    a = read64(f[src], ctx, inst.lit)
    s = vsrc(f[amt], "u32", ctx, inst.lit)
    c = read64(f[add], ctx, inst.lit) if add else None
    out, store = write64(f["vdst"], ctx)
    shift = np.left_shift if left else np.right_shift

    def h(w):
        x, n = a(w), s(w)
        n = n & mask  # uint64 << uint32 stays uint64
        if isinstance(x, np.ndarray):
            shift(x, n, out=out)
        elif isinstance(n, np.ndarray):
            shift(np.uint64(x), n, out=out)
        else:
            out[...] = ((x << n) if left else (x >> n)) & M64
        if c is not None:
            np.add(out, c(w), out=out)
        store(w)
        return nxt
    return h


@fast("v_lshl_add_u64")
def _lshl_add_u64(inst, ctx):
    return _shift64(inst, ctx, "src0", "src1", 7, True, "src2") if plain(inst) else None


@fast("v_lshlrev_b64", "v_lshrrev_b64")
def _shift_b64(inst, ctx):
    return _shift64(inst, ctx, "src1", "src0", 63, inst.name == "v_lshlrev_b64") if plain(inst) else None


@fast("v_ashrrev_i32", "v_lshrrev_b32", "v_lshlrev_b32")
def _shift32(inst, ctx):
    if not plain(inst):
        return None
    f, nxt, name = inst.f, ctx.nxt, inst.name
    signed = name == "v_ashrrev_i32"
    s = vsrc(f["src0"], "u32", ctx, inst.lit)
    a = vsrc(f["src1"], "i32" if signed else "u32", ctx, inst.lit)
    wr = vdst(f["vdst"], "i32" if signed else "u32", ctx)
    scalar_t = np.int32 if signed else np.uint32
    left = name == "v_lshlrev_b32"

    def h(w):
        x, n = a(w), s(w) & 31
        if not isinstance(x, np.ndarray):
            x = scalar_t(x)  # a Python int against a uint32 shift array would not promote safely
        wr(w, x << n if left else x >> n)
        return nxt
    return h


@fast("v_perm_b32")
def _perm(inst, ctx):
    """Byte shuffle with a wave-uniform selector (constant or SGPR) of plain byte picks, which is
    what LLVM emits: a few masked shifts, planned once per selector value. Other selectors (sign
    replication, constants, per-lane VGPR selectors) take the generic path."""
    f, nxt = inst.f, ctx.nxt
    if not plain(inst) or f["src2"] >= 256:
        return None
    sel = scalar_reader(f["src2"], ctx, inst.lit, "u32")
    a, b = vsrc(f["src0"], "u32", ctx, inst.lit), vsrc(f["src1"], "u32", ctx, inst.lit)
    wr = vdst(f["vdst"], "u32", ctx)
    plans: dict[int, list | None] = {}

    def h(w):
        code = sel(w)
        terms = plans.get(code, False)
        if terms is False:
            terms = plans[code] = _perm_plan(code)
        x, y = a(w), b(w)
        if terms is None:
            wr(w, _perm_generic(x, y, code))
            return nxt
        words = (y if isinstance(y, np.ndarray) else np.uint32(y), x if isinstance(x, np.ndarray) else np.uint32(x))
        r = None
        for src, shift, m in terms:
            t = words[src]
            t = (t >> shift if shift > 0 else t << -shift if shift < 0 else t) & np.uint32(m)
            r = t if r is None else r | t
        wr(w, r)
        return nxt
    return h


def _perm_plan(code: int):
    """[(source 0=src1/1=src0, right shift, mask)] for selector `code`, or None if a byte is not a
    plain pick. Output byte k is byte p = code[k] of {src0 (bytes 4-7), src1 (bytes 0-3)}; runs of
    output bytes moving by the same shift from the same word share one mask."""
    terms: list[tuple[int, int, int]] = []
    for k in range(4):
        p = (code >> (8 * k)) & 0xFF
        if p >= 8:
            return None
        src, shift = p // 4, 8 * (p % 4 - k)
        for i, (s0, sh0, m0) in enumerate(terms):
            if s0 == src and sh0 == shift:
                terms[i] = (s0, sh0, m0 | 0xFF << (8 * k))
                break
        else:
            terms.append((src, shift, 0xFF << (8 * k)))
    return terms


def _const_lanes(enc: int, ctx, lit, reader):
    """A constant operand (inline or literal) as a read-only uint32 lane array: numpy is about
    twice as fast on two arrays as on an array and a Python scalar."""
    if 128 <= enc <= 255 and enc not in (251, 252, 253):
        c = np.full(ctx.wave_size, reader(None), dtype=np.uint32)
        c.setflags(write=False)
        return lambda w: c
    return reader


@fast("v_cndmask_b32")
def _cndmask(inst, ctx):
    if not plain(inst):
        return None
    from tiledsl.backends.rocm.emulator.valu import _mask_reader

    f, nxt = inst.f, ctx.nxt
    a = _const_lanes(f["src0"], ctx, inst.lit, vsrc(f["src0"], "b32", ctx, inst.lit))
    b = _const_lanes(f["src1"], ctx, inst.lit, vsrc(f["src1"], "b32", ctx, inst.lit))
    m = _mask_reader(inst, ctx, f.get("src2"))
    d = f["vdst"]
    if f["src0"] == 128:  # select(m, x, 0), how LLVM zeroes out-of-range lanes: x * m is one ufunc
        def h0(w):
            y = b(w)
            if w.full:
                np.multiply(y, m(w), out=w.v[d], casting="unsafe")
            else:
                np.copyto(w.v[d], y * m(w), where=w.mask, casting="unsafe")
            return nxt
        return h0

    def h(w):
        r = np.where(m(w), b(w), a(w))
        if w.full:
            w.v[d] = r
        else:
            np.copyto(w.v[d], r, where=w.mask, casting="unsafe")
        return nxt
    return h


@fast("v_cndmask_b16")
def _cndmask16(inst, ctx):
    """gfx11+ VOP3 16-bit select on low halves (op_sel 0), zeroing form: y * mask into the half row."""
    f = inst.f
    if not plain(inst) or inst.fam != "VOP3" or ctx.gen == "gfx9" or f["src0"] != 128:
        return None
    from tiledsl.backends.rocm.emulator.valu import _mask_reader

    nxt, d = ctx.nxt, f["vdst"]
    b = vsrc(f["src1"], "u16", ctx, inst.lit)
    m = _mask_reader(inst, ctx, f["src2"])

    def h(w):
        if w.full:
            np.multiply(b(w), m(w), out=w.h[d, 0::2], casting="unsafe")
        else:
            np.copyto(w.h[d, 0::2], b(w) * m(w), where=w.mask, casting="unsafe")
        return nxt
    return h


@fast("v_pack_b32_f16", "v_cvt_pk_f16_f32")
def _pack_f16(inst, ctx):
    """Two values rounded to f16 into the halves of one dword: assigned into a reused buffer's
    f16 halves (the assignment rounds like astype) instead of packing through int64."""
    if inst.dpp is not None or inst.sdwa is not None:
        return None
    from tiledsl.backends.rocm.emulator.valu import _reader, _writer

    dt, sts, _ = OPS[inst.name]
    f, nxt = inst.f, ctx.nxt
    if inst.fam == "VOP3" and (f["clamp"] or f["omod"]):
        return None
    r0, r1 = (_reader(inst, ctx, i, f[f"src{i}"], sts[i]) for i in range(2))
    wr = _writer(inst, ctx, dt)
    buf = np.empty(ctx.wave_size, np.uint32)
    lo, hi = buf.view(np.float16)[0::2], buf.view(np.float16)[1::2]

    def h(w):
        lo[...] = r0(w)
        hi[...] = r1(w)
        wr(w, buf)
        return nxt
    return h

