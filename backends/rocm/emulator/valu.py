"""VALU framework: binds VOP1/VOP2/VOPC/VOP3/VOP3B/VOPD instructions (with DPP, SDWA, true16,
op_sel and float modifiers) to the lane-wise semantics in valu_ops.py."""

from __future__ import annotations

import numpy as np

from tiledsl.backends.rocm.emulator import crosslane
from tiledsl.backends.rocm.emulator.executor import _mask_cache, builder
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.emulator.operands import (
    M32,
    mask_to_int,
    scalar_reader,
    scalar_writer,
    vdst,
    vsrc,
)
from tiledsl.backends.rocm.emulator.valu_fast import FAST
from tiledsl.backends.rocm.emulator.valu_ops import CARRY, FCMP, ICMP, OPS, clamp01
from tiledsl.backends.rocm.emulator.vop3p import _dot_parts

FLOATS = ("f32", "f16", "f64", "bf16")
HALF = ("f16", "u16", "i16", "bf16")
VOP3B = {"v_div_scale_f32", "v_div_scale_f64", "v_mad_u64_u32", "v_mad_i64_i32", "v_mad_co_u64_u32",
         "v_mad_co_i64_i32"}


def _srcs(inst):
    f = inst.f
    return [f.get("src0"), f.get("src1"), f.get("src2")]


def typed_from_bits(raw, typ):
    """u32 lane bits (array or int) -> typed lane values (16-bit types use the low half)."""
    a = np.asarray(raw, dtype=np.uint32)
    if typ in ("b32", "u32"):
        return a
    if typ == "i32":
        return a.view(np.int32)
    if typ == "f32":
        return a.view(np.float32)
    lo = (a & np.uint32(0xFFFF)).astype(np.uint16)
    if typ == "u16":
        return lo
    if typ == "i16":
        return lo.view(np.int16)
    if typ == "f16":
        return lo.view(np.float16)
    if typ == "bf16":
        return (lo.astype(np.uint32) << np.uint32(16)).view(np.float32)
    raise UnsupportedInstruction(f"SDWA/DPP operand of type {typ}")


def lanes(x, W: int) -> np.ndarray:
    """`x` as one value per lane; np.broadcast_to costs ~9 us, so only call it for scalars."""
    return x if getattr(x, "shape", None) == (W,) else np.broadcast_to(np.asarray(x), (W,))


def bits_from_typed(val, typ, W):
    v = lanes(val, W)
    if typ == "f32":
        return v.astype(np.float32).view(np.uint32)
    if typ == "f16":
        return v.astype(np.float16).view(np.uint16).astype(np.uint32)
    if typ == "bf16":
        from tiledsl.backends.rocm.emulator.operands import bf16_bits
        return bf16_bits(v).astype(np.uint32)
    if typ in ("u16", "i16"):
        return (v.astype(np.int64) & 0xFFFF).astype(np.uint32)
    return v.astype(np.int64).astype(np.uint32) if v.dtype.kind in "iu" else v.astype(np.uint32)


def _reader(inst, ctx, i, enc, typ):
    """Source `i` of type `typ` with every modifier of the encoding applied."""
    f, fam, gen = inst.f, inst.fam, ctx.gen
    hi = False
    if typ in HALF:
        if fam in ("VOP3", "VOP3P"):
            hi = bool(f.get("opsel", 0) >> i & 1)
        elif gen != "gfx9" and enc is not None and enc >= 256 and inst.sdwa is None:
            hi = bool((enc - 256) & 0x80)
            enc = 256 + ((enc - 256) & 0x7F)
    if inst.sdwa is not None and i < 2:
        rd = _sdwa_reader(inst, ctx, i, enc, typ)
    elif inst.dpp is not None and i == 0:
        rd = crosslane.dpp_reader(inst, ctx, enc, typ, hi)
    else:
        rd = vsrc(enc, typ, ctx, inst.lit, hi)
    neg = absm = 0
    if typ in FLOATS:
        if fam == "VOP3" and inst.name not in VOP3B:
            absm, neg = f["abs"] >> i & 1, f["neg"] >> i & 1
        elif fam == "VOP3":
            neg = f["neg"] >> i & 1
        elif inst.dpp is not None and "neg0" in inst.dpp and i < 2:
            absm, neg = inst.dpp[f"abs{i}"], inst.dpp[f"neg{i}"]
        elif inst.sdwa is not None and i < 2:
            absm, neg = inst.sdwa[f"abs{i}"], inst.sdwa[f"neg{i}"]
    elif typ in ("b32", "u32") and fam == "VOP3" and inst.name not in VOP3B and (f["abs"] | f["neg"]) >> i & 1:
        # Float modifiers on a bit-typed operand (v_cndmask_b32 |x|): act on the sign bit.
        a_bit, n_bit = f["abs"] >> i & 1, f["neg"] >> i & 1
        return lambda w: _bits_mod(rd(w), a_bit, n_bit)
    if absm and neg:
        return lambda w: -np.abs(rd(w))
    if absm:
        return lambda w: np.abs(rd(w))
    if neg:
        return lambda w: -rd(w)
    return rd


def _bits_mod(x, a_bit, n_bit):
    x = np.asarray(x, dtype=np.uint32)
    if a_bit:
        x = x & np.uint32(0x7FFFFFFF)
    if n_bit:
        x = x ^ np.uint32(0x80000000)
    return x


def _sdwa_reader(inst, ctx, i, enc, typ):
    sd = inst.sdwa
    sel, sext = sd[f"sel{i}"], sd[f"sext{i}"]
    raw = vsrc(enc, "u32", ctx, inst.lit)
    if sel == 6:
        return lambda w: typed_from_bits(raw(w), typ)
    shift, bits = (8 * sel, 8) if sel < 4 else (16 * (sel - 4), 16)

    def rd(w):
        v = (np.asarray(raw(w), dtype=np.uint32) >> np.uint32(shift)) & np.uint32((1 << bits) - 1)
        if sext:
            v = ((v.astype(np.int64) ^ (1 << (bits - 1))) - (1 << (bits - 1))).astype(np.uint32)
        return typed_from_bits(v, typ)
    return rd


def _mask_reader(inst, ctx, enc):
    """Lane-mask operand (v_cndmask / carry-in): VCC for e32, an SGPR (pair) for VOP3."""
    W = ctx.wave_size
    if inst.fam == "VOP3":
        bits = scalar_reader(enc, ctx, inst.lit, "b64" if W == 64 else "b32")
        return lambda w: _mask_cache(bits(w) & w.fullmask, W)
    return lambda w: _mask_cache(w.vcc() & w.fullmask, W)


# gfx9 16-bit results clear the high half of the destination, except these (CDNA3/CDNA4 ISA: "If
# OPSEL[3] is 0 Result is written to 16 LSBs of destination VGPR and hi 16 bits are preserved";
# LLVM's GCNSubtarget::zeroesHigh16BitsOfDest agrees) -- their _legacy forms do clear it.
GFX9_KEEP_HI = {"v_mad_f16", "v_mad_u16", "v_mad_i16", "v_fma_f16", "v_div_fixup_f16", "v_mac_f16", "v_madak_f16",
                "v_madmk_f16", "v_fmac_f16", "v_fmamk_f16", "v_fmaak_f16"}


def _writer(inst, ctx, typ):
    f, gen = inst.f, ctx.gen
    d = f.get("vdst", 0)
    if inst.sdwa is not None:
        return _sdwa_writer(inst, ctx, typ)
    hi = False
    zero_hi = False
    if typ in HALF:
        if inst.fam in ("VOP3", "VOP3P"):
            hi = bool(f.get("opsel", 0) >> 3 & 1)
        elif gen != "gfx9":
            hi, d = bool(d & 0x80), d & 0x7F
        zero_hi = gen == "gfx9" and not hi and not inst.name.startswith(("v_mov_b16", "v_fma_mix")) \
            and inst.name not in GFX9_KEEP_HI
    wr = vdst(d, typ, ctx, hi, zero_hi)
    if inst.dpp is not None:
        dm = crosslane.dpp_write_mask(inst, ctx)
        return lambda w, v, m=None: wr(w, v, dm(w))
    return wr


def _sdwa_writer(inst, ctx, typ):
    sd = inst.sdwa
    d, W = inst.f["vdst"], ctx.wave_size
    sel, unused = sd["dst_sel"], sd["dst_unused"]
    if sel == 6:
        shift, bits = 0, 32
    else:
        shift, bits = (8 * sel, 8) if sel < 4 else (16 * (sel - 4), 16)
    field = ((1 << bits) - 1) << shift

    def wr(w, val, m=None):
        b = bits_from_typed(val, typ, W).astype(np.int64)
        b = (b & ((1 << bits) - 1)) << shift
        if unused == 2:  # preserve
            b |= w.v[d].astype(np.int64) & ~field & M32
        elif unused == 1 and bits < 32:  # sign-extend above the field
            sign = (b >> (shift + bits - 1)) & 1
            b |= np.where(sign == 1, (M32 & ~((1 << (shift + bits)) - 1)), 0)
        row = w.v[d]
        np.copyto(row, b.astype(np.uint32), where=w.mask if m is None else m)
    return wr


# Integer ops whose clamp bit saturates the result (ISA "ALU clamp bit usage": integer results are
# clamped to the largest / smallest representable value) -- LLVM's [us]add.sat / [us]sub.sat.
# Their sources are widened to int64 first, so the sum cannot wrap before it is saturated.
INT_CLAMP = {"v_add_u32", "v_sub_u32", "v_subrev_u32", "v_add_nc_u32", "v_sub_nc_u32", "v_subrev_nc_u32",
             "v_add_i32", "v_sub_i32", "v_add_nc_i32", "v_sub_nc_i32", "v_add3_u32", "v_add_u16", "v_sub_u16",
             "v_add_nc_u16", "v_sub_nc_u16", "v_mad_u32_u24", "v_mad_i32_i24"}
# Float -> integer conversions saturate anyway; their clamp bit only enables the INEXACT exception
# (the ISA's notes on each of these).
_CLAMP_IS_EXCEPTION_ONLY = {"v_cvt_i32_f32", "v_cvt_u32_f32", "v_cvt_i32_f64", "v_cvt_u32_f64", "v_cvt_u16_f16",
                            "v_cvt_i16_f16"}
_INT_RANGE = {"u32": (0, M32), "i32": (-2**31, 2**31 - 1), "u16": (0, 65535), "i16": (-32768, 32767)}


def _post(inst, ctx, dt, fn):
    """Output modifiers: omod and clamp. Float results: omod scales, clamp goes to [0, 1] (valu_ops.
    clamp01); integer results: clamp saturates (INT_CLAMP). Anything else is refused."""
    f = inst.f
    omod = f.get("omod", 0) if inst.fam == "VOP3" else (inst.sdwa or {}).get("omod", 0)
    clamp = f.get("clamp", 0) if inst.fam in ("VOP3", "VOP3P") else (inst.sdwa or {}).get("clamp", 0)
    if not (omod or clamp):
        return fn
    if clamp and not omod and inst.name in _CLAMP_IS_EXCEPTION_ONLY:
        return fn
    if dt not in FLOATS:
        if omod or dt not in _INT_RANGE or inst.name not in INT_CLAMP:
            raise UnsupportedInstruction(f"{inst.raw_name}: {'omod' if omod else 'clamp'} on a {dt} result "
                                         "is not modelled")
        lo, hi = _INT_RANGE[dt]

        def sat(*a):
            wide = [x.astype(np.int64) if isinstance(x, np.ndarray) else int(x) for x in a]
            return np.clip(np.asarray(fn(*wide), dtype=np.int64), lo, hi)
        return sat
    scale = {0: None, 1: 2.0, 2: 4.0, 3: 0.5}[omod]
    nan_to_zero = ctx.dx10_clamp

    def post(*a):
        r = fn(*a)
        if scale is not None:
            r = r * r.dtype.type(scale) if isinstance(r, np.ndarray) else r * scale
        if clamp:
            r = clamp01(r, nan_to_zero)
        return r
    return post


def build_alu(inst, ctx, spec):
    special = FAST.get(inst.name)
    if special is not None:
        h = special(inst, ctx)
        if h is not None:
            return h
    dt, sts, fn = spec
    name, f, nxt = inst.name, inst.f, ctx.nxt
    encs = _srcs(inst)
    if "mac" in name and "mix" not in name:  # accumulate into the destination register
        encs = [encs[0], encs[1], 256 + f["vdst"] if inst.fam != "VOP3P" else encs[2]]
        if inst.fam == "VOPD":
            raise UnsupportedInstruction("VOPD mac")
    if name in ("v_fmamk_f32", "v_madmk_f32", "v_fmamk_f16", "v_madmk_f16"):
        encs = [encs[0], 255, encs[1]]
    if name in ("v_fmaak_f32", "v_madak_f32", "v_fmaak_f16", "v_madak_f16"):
        encs = [encs[0], encs[1], 255]
    readers = []
    for i, typ in enumerate(sts):
        if typ == "mask":
            readers.append(_mask_reader(inst, ctx, encs[2]))
        else:
            readers.append(_reader(inst, ctx, i, encs[i], typ))
    ufunc = fn if fn in _OUT_UFUNCS and len(readers) < 3 else None
    fn = _post(inst, ctx, dt, fn)
    wr = _writer(inst, ctx, dt)
    if ufunc is not None and fn is ufunc and dt in _ROWS and inst.dpp is None and inst.sdwa is None \
            and name not in VOP3B:
        return _build_out(inst, ctx, ufunc, readers, wr, _ROWS[dt])
    if inst.fam == "VOP3" and name in VOP3B:
        swr = scalar_writer(f["sdst"], ctx, ctx.wave_size == 64)
        base_wr = wr

        def wr(w, v, m=None):
            base_wr(w, v, m)
            swr(w, 0)
    if len(readers) == 1:
        r0 = readers[0]

        def h1(w):
            wr(w, fn(r0(w)))
            return nxt
        return h1
    if len(readers) == 2:
        r0, r1 = readers

        def h2(w):
            wr(w, fn(r0(w), r1(w)))
            return nxt
        return h2
    r0, r1, r2 = readers

    def h3(w):
        wr(w, fn(r0(w), r1(w), r2(w)))
        return nxt
    return h3


# Element-wise ufuncs whose result is the destination type: with full EXEC they write straight
# into the destination register row (out=), saving the temporary and the copy. casting="unsafe"
# matches the writers, which store with a C cast.
_OUT_UFUNCS = {np.add, np.subtract, np.multiply, np.fmax, np.fmin, np.maximum, np.minimum, np.bitwise_and,
               np.bitwise_or, np.bitwise_xor, np.floor, np.ceil, np.trunc}
_ROWS = {"u32": lambda w, d: w.v[d], "b32": lambda w, d: w.v[d], "i32": lambda w, d: w.vi[d],
         "f32": lambda w, d: w.vf[d]}


def _build_out(inst, ctx, ufunc, readers, wr, row):
    d, nxt = inst.f["vdst"], ctx.nxt
    if len(readers) == 1:
        r0 = readers[0]

        def h1(w):
            if w.full:
                ufunc(r0(w), out=row(w, d), casting="unsafe")
            else:
                wr(w, ufunc(r0(w)))
            return nxt
        return h1
    r0, r1 = readers

    def h2(w):
        if w.full:
            ufunc(r0(w), r1(w), out=row(w, d), casting="unsafe")
        else:
            wr(w, ufunc(r0(w), r1(w)))
        return nxt
    return h2


for _n in OPS:
    builder(_n)(lambda inst, ctx: build_alu(inst, ctx, OPS[inst.name]))


# -- carries ------------------------------------------------------------------------------
@builder(*CARRY)
def _b_carry(inst, ctx):
    crosslane.refuse_dpp_sdwa(inst)
    kind, cin = CARRY[inst.name]
    f, nxt, W = inst.f, ctx.nxt, ctx.wave_size
    e0, e1, e2 = _srcs(inst)
    a, b = vsrc(e0, "u32", ctx, inst.lit), vsrc(e1, "u32", ctx, inst.lit)
    c = _mask_reader(inst, ctx, e2) if cin else None
    wr = vdst(f["vdst"], "u32", ctx)
    if inst.fam == "VOP3":
        cwr = scalar_writer(f["sdst"], ctx, W == 64)
    else:
        def cwr(w, v):
            w.set_vcc(v)
    clamp = inst.fam == "VOP3" and f.get("clamp", 0)
    op = np.add if kind == "add" else np.subtract
    d = f["vdst"]
    no_co = inst.fam == "VOP3" and f["sdst"] == ctx.null_sgpr  # carry-out discarded (gfx11+ null)
    aliased = d in {e - 256 for e in (e0, e1) if e is not None and e >= 256}

    def h_nocin(w):
        # uint32 arithmetic (straight into the destination row unless it is a source); the carry
        # is the unsigned wrap-around: a sum below an addend, a subtrahend above the minuend.
        x, y = a(w), b(w)
        if kind == "subrev":
            x, y = y, x
        if not isinstance(x, np.ndarray) and not isinstance(y, np.ndarray):
            return h(w)
        if w.full and not aliased:
            r = op(x, y, out=w.v[d], casting="unsafe")
            co = None if no_co else (r < x if isinstance(x, np.ndarray) else r < y) if kind == "add" else x < y
        else:  # the carry is taken before the write, which may overwrite a source
            r = op(x, y, casting="unsafe", dtype=np.uint32)
            co = None if no_co else (r < x if isinstance(x, np.ndarray) else r < y) if kind == "add" else x < y
            if w.full:
                w.v[d] = r
            else:
                np.copyto(w.v[d], r, where=w.mask)
        if co is not None:
            cwr(w, mask_to_int(co if w.full else co & w.mask))
        return nxt

    def h_cin_noco(w):
        # Carry-out discarded (the high half of a 64-bit add on gfx11+): x + y + cin modulo 2**32,
        # computed in place like any wrapping uint32 add.
        x, y = a(w), b(w)
        if kind == "subrev":
            x, y = y, x
        if w.full:
            r = op(x, y, out=w.v[d], casting="unsafe", dtype=np.uint32)
            op(r, c(w), out=r, casting="unsafe")
        else:  # lanes of their own (both sources may be scalars: a row to add the carries to)
            r = np.array(np.broadcast_to(op(x, y, casting="unsafe", dtype=np.uint32), (W,)))
            op(r, c(w), out=r, casting="unsafe")
            np.copyto(w.v[d], r, where=w.mask)
        return nxt

    def h_cin(w):
        x, y = a(w), b(w)
        if kind == "subrev":
            x, y = y, x
        r = op(x, y, dtype=np.int64)
        if r.shape != (W,):
            return h(w)
        op(r, c(w), out=r)
        wr(w, r)  # the u32 writer keeps the low 32 bits
        co = r > M32 if kind == "add" else r < 0
        cwr(w, mask_to_int(co if w.full else co & w.mask))
        return nxt

    def h(w):
        x, y = a(w), b(w)
        if kind == "subrev":
            x, y = y, x
        # One ufunc does the int64 widening of both operands (no wrap-around, so the carry is visible).
        r = op(x, y, dtype=np.int64)
        if c is not None:
            r = op(r, c(w), dtype=np.int64)
        co = r > M32 if kind == "add" else r < 0
        if r.shape != (W,):
            r, co = lanes(r, W), lanes(co, W)
        if clamp:
            r = np.clip(r, 0, M32)
        wr(w, r)  # the u32 writer keeps the low 32 bits
        cwr(w, mask_to_int(co if w.full else co & w.mask))
        return nxt
    if clamp:
        return h
    if c is None:
        return h_nocin
    return h_cin_noco if no_co else h_cin


# -- compares -----------------------------------------------------------------------------
def _cmp_names():
    out = {}
    for t in ("f16", "f32", "f64"):
        for c in FCMP:
            out[f"v_cmp_{c}_{t}"] = (t, FCMP[c], False)
            out[f"v_cmpx_{c}_{t}"] = (t, FCMP[c], True)
    for t in ("i16", "u16", "i32", "u32", "i64", "u64"):
        for c in ICMP:
            out[f"v_cmp_{c}_{t}"] = (t, ICMP[c], False)
            out[f"v_cmpx_{c}_{t}"] = (t, ICMP[c], True)
    for t in ("f16", "f32", "f64"):
        out[f"v_cmp_class_{t}"] = (t, "class", False)
        out[f"v_cmpx_class_{t}"] = (t, "class", True)
    return out


CMPS = _cmp_names()


@builder(*CMPS)
def _b_cmp(inst, ctx):
    from tiledsl.backends.rocm.emulator.valu_ops import _class

    t, pred, x = CMPS[inst.name]
    f, nxt, W, gen = inst.f, ctx.nxt, ctx.wave_size, ctx.gen
    e0, e1, _ = _srcs(inst)
    a = _reader(inst, ctx, 0, e0, t)
    b = _reader(inst, ctx, 1, e1, "u32" if pred == "class" else t)
    if pred == "class":
        pred = _class
    if inst.fam == "VOP3":
        dst = scalar_writer(f["vdst"], ctx, W == 64)
    elif inst.sdwa is not None and inst.sdwa["sd"]:
        dst = scalar_writer(inst.sdwa["sdst"], ctx, W == 64)
    else:
        def dst(w, v):
            w.set_vcc(v)
    write_sdst = not x or gen == "gfx9"
    dm = crosslane.dpp_write_mask(inst, ctx) if inst.dpp is not None else None

    def h(w):
        r = pred(a(w), b(w))
        if r.shape != (W,):
            r = lanes(r, W)
        if dm is not None:
            r = r & dm(w)
        elif not w.full:
            r = r & w.mask
        bits = mask_to_int(r)
        if write_sdst:
            dst(w, bits)
        if x:
            w.set_exec(bits)
        return nxt
    return h


# -- VOPD (gfx11+ dual issue): both halves read their sources before either writes ----------
def _dot2acc(kind: str):
    """VOPD's v_dual_dot2acc_f32_{f16,bf16}: D += S0.lo * S1.lo + S0.hi * S1.hi, exact products and
    sum rounded once to f32, as the VOP3P dot products (vop3p._b_dot)."""
    def fn(a, b, c):
        pa, pb = _dot_parts(a, kind), _dot_parts(b, kind)
        return (np.asarray(c, np.float32).astype(np.float64) + pa[0] * pb[0] + pa[1] * pb[1]).astype(np.float32)
    return ("f32", ("u32", "u32", "f32"), fn)


_VOPD_DOT = {"v_dot2acc_f32_f16": _dot2acc("f16"), "v_dot2acc_f32_bf16": _dot2acc("bf16")}


@builder("vopd")
def _b_vopd(inst, ctx):
    from dataclasses import replace

    xname, yname = (n.replace("v_dual_", "v_") for n in inst.xy)
    f = inst.f
    halves = []
    for nm, s0, s1, d in ((xname, f["src0"], f["src1"], f["vdst"]), (yname, f["src0y"], f["src1y"], f["vdsty"])):
        sub = replace(inst, fam="VOP2", name=nm, f={"src0": s0, "src1": s1, "vdst": d}, dpp=None, sdwa=None)
        spec = _VOPD_DOT.get(nm) or OPS.get(nm)
        if spec is None:
            raise UnsupportedInstruction(f"VOPD half {nm}")
        dt, sts, fn = spec
        encs = [s0, s1]
        if "mac" in nm or nm in _VOPD_DOT:
            encs.append(256 + d)
        elif nm in ("v_fmamk_f32",):
            encs = [s0, 255, s1]
        elif nm in ("v_fmaak_f32",):
            encs = [s0, s1, 255]
        elif nm == "v_cndmask_b32":
            encs.append(None)
        rds = [(_mask_reader(sub, ctx, None) if t == "mask" else vsrc(encs[i], t, ctx, inst.lit))
               for i, t in enumerate(sts)]
        halves.append((rds, fn, vdst(d, dt, ctx)))
    (rx, fx, wx), (ry, fy, wy) = halves
    nxt = ctx.nxt

    def h(w):
        # Both halves read before either writes. X is written first, so only a Y result that is
        # a view of a register (a move) needs a copy; computed results are fresh arrays.
        vy = fy(*[r(w) for r in ry])
        if isinstance(vy, np.ndarray) and vy.base is not None:
            vy = vy.copy()
        wx(w, fx(*[r(w) for r in rx]))
        wy(w, vy)
        return nxt
    return h


@builder("v_bitop3_b32", "v_bitop3_b16")
def _bitop3(inst, ctx):
    """gfx950's three-input bitwise op: result bit i is TTBL[S0[i] << 2 | S1[i] << 1 | S2[i]]. The
    8-bit table lives in the VOP3 modifier fields (bits [2:0] in neg, [5:3] in abs, [7:6] in omod),
    so those are not modifiers here. The b16 form works on 16-bit halves picked by op_sel (and
    writes one like any 16-bit VOP3 op)."""
    f, nxt = inst.f, ctx.nxt
    typ, dt = ("u16", np.uint16) if inst.name.endswith("b16") else ("u32", np.uint32)
    if inst.dpp is not None or inst.sdwa is not None or f["clamp"] or (f["opsel"] and typ == "u32"):
        raise UnsupportedInstruction(f"{inst.name} with DPP/SDWA, clamp or op_sel on {ctx.arch}")
    table = f["neg"] | f["abs"] << 3 | f["omod"] << 6
    if typ == "u16":
        a, b, c = (_reader(inst, ctx, i, f[s], typ) for i, s in enumerate(("src0", "src1", "src2")))
        wr = _writer(inst, ctx, typ)
    else:
        a, b, c = (vsrc(f[s], typ, ctx, inst.lit) for s in ("src0", "src1", "src2"))
        wr = vdst(f["vdst"], typ, ctx)
    minterms = [i for i in range(8) if table >> i & 1]

    def h(w):
        x, y, z = (np.asarray(r(w)).astype(dt) for r in (a, b, c))
        out = np.zeros(np.broadcast(x, y, z).shape, dt)
        for i in minterms:
            out |= (x if i & 4 else ~x) & (y if i & 2 else ~y) & (z if i & 1 else ~z)
        wr(w, out)
        return nxt
    return h
