"""VOP3P: packed 16-bit math, packed f32 (gfx90a+), dot products and mixed-precision FMA.

Each source supplies a low and a high half: op_sel picks the half used for the low result,
op_sel_hi the half for the high result; neg / neg_hi negate them (floats). clamp: float results
go to [0, 1] (valu_ops.clamp01), integer results saturate. gfx11+ VOP3P DPP (v_dot2_*_e64_dpp,
v_fma_mix*_e64_dpp, ...) permutes source 0 and masks the write like any DPP instruction."""

from __future__ import annotations

import struct

import numpy as np

from tiledsl.backends.rocm.emulator import crosslane
from tiledsl.backends.rocm.emulator.executor import builder
from tiledsl.backends.rocm.emulator.fma64 import sum_to_odd
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.emulator.operands import M32, inline_bits, vdst
from tiledsl.backends.rocm.emulator.valu_ops import clamp01

_PK16 = {
    "v_pk_add_f16": ("f16", np.add), "v_pk_mul_f16": ("f16", np.multiply),
    "v_pk_fma_f16": ("f16", lambda a, b, c: sum_to_odd(a.astype(np.float64) * b, c)),
    "v_pk_max_f16": ("f16", np.fmax), "v_pk_min_f16": ("f16", np.fmin),
    "v_pk_max_num_f16": ("f16", np.fmax), "v_pk_min_num_f16": ("f16", np.fmin),
    "v_pk_maximum_f16": ("f16", np.maximum), "v_pk_minimum_f16": ("f16", np.minimum),
    "v_pk_add_u16": ("u16", lambda a, b: a.astype(np.int64) + b),
    "v_pk_sub_u16": ("u16", lambda a, b: a.astype(np.int64) - b),
    "v_pk_add_i16": ("i16", lambda a, b: a.astype(np.int64) + b),
    "v_pk_sub_i16": ("i16", lambda a, b: a.astype(np.int64) - b),
    "v_pk_mul_lo_u16": ("u16", lambda a, b: a.astype(np.int64) * b),
    "v_pk_max_u16": ("u16", np.maximum), "v_pk_min_u16": ("u16", np.minimum),
    "v_pk_max_i16": ("i16", np.maximum), "v_pk_min_i16": ("i16", np.minimum),
    "v_pk_lshlrev_b16": ("u16", lambda s, a: a.astype(np.int64) << (s.astype(np.int64) & 15)),
    "v_pk_lshrrev_b16": ("u16", lambda s, a: a.astype(np.int64) >> (s.astype(np.int64) & 15)),
    "v_pk_ashrrev_i16": ("i16", lambda s, a: a.astype(np.int64) >> (s.astype(np.int64) & 15)),
    "v_pk_mad_u16": ("u16", lambda a, b, c: a.astype(np.int64) * b + c),
    "v_pk_mad_i16": ("i16", lambda a, b, c: a.astype(np.int64) * b + c),
}
_PK32 = {"v_pk_add_f32": np.add, "v_pk_mul_f32": np.multiply,
         "v_pk_fma_f32": lambda a, b, c: sum_to_odd(a.astype(np.float64) * b, c), "v_pk_mov_b32": None}
_NARGS = {n: (3 if "fma" in n or "mad" in n else 2) for n in (*_PK16, *_PK32)}
_NARGS["v_pk_mov_b32"] = 2
# Packed integer ops whose clamp saturates each half (the min/max cannot overflow, so it is a no-op
# there); shifts and the low-half multiply have no saturating meaning and are refused with clamp.
_PK_SAT = {"v_pk_add_u16", "v_pk_sub_u16", "v_pk_add_i16", "v_pk_sub_i16", "v_pk_mad_u16", "v_pk_mad_i16",
           "v_pk_max_u16", "v_pk_min_u16", "v_pk_max_i16", "v_pk_min_i16"}


def _raw32(enc, ctx, lit, typ="pk16"):
    """Closure returning a u32 lane array (or int) for a packed source."""
    if enc >= 256:
        r = enc - 256
        return lambda w: w.v[r]
    if enc < 128:
        return lambda w: w.s[enc]
    c = inline_bits(enc, typ)
    if c is None:
        if enc == 255:
            c = lit
        else:
            raise UnsupportedInstruction(f"packed operand encoding {enc}")
    return lambda w: c


def _src(inst, ctx, i, typ="pk16"):
    """Source i's 32 bits per lane; source 0 of a DPP form comes through the lane permutation."""
    enc = inst.f[f"src{i}"]
    if i == 0 and inst.dpp is not None:
        return crosslane.dpp_reader(inst, ctx, enc, "u32", False)
    return _raw32(enc, ctx, inst.lit, typ)


def _dpp_mask(inst, ctx):
    """The lanes a DPP form writes (EXEC, row/bank masks, bound_ctrl), or None without DPP."""
    return crosslane.dpp_write_mask(inst, ctx) if inst.dpp is not None else None


def _half(x, hi, typ):
    v = (np.asarray(x, dtype=np.uint32) >> np.uint32(16 if hi else 0)) & np.uint32(0xFFFF)
    v = v.astype(np.uint16)
    return v.view(np.float16) if typ == "f16" else v.view(np.int16) if typ == "i16" else v


def _halves(inst, i):
    f = inst.f
    opsel_hi = (f["opsel_hi"] | (f["opsel_hi2"] << 2)) >> i & 1
    return bool(f["opsel"] >> i & 1), bool(opsel_hi), bool(f["neg"] >> i & 1), bool(f["neg_hi"] >> i & 1)


@builder(*_PK16)
def _b_pk16(inst, ctx):
    typ, fn = _PK16[inst.name]
    f, nxt, n = inst.f, ctx.nxt, _NARGS[inst.name]
    isf = typ == "f16"
    clamp = f["clamp"]
    if not isf and (f["neg"] or f["neg_hi"]):
        raise UnsupportedInstruction(f"{inst.raw_name}: neg_lo/neg_hi on an integer packed op")
    if clamp and not isf and inst.name not in _PK_SAT:
        raise UnsupportedInstruction(f"{inst.raw_name}: clamp (saturation) is not modelled for this op")
    srcs = [(_src(inst, ctx, i), *_halves(inst, i)) for i in range(n)]
    wr = vdst(f["vdst"], "u32", ctx)
    dm = _dpp_mask(inst, ctx)
    lo_sat, hi_sat = (-32768, 32767) if typ == "i16" else (0, 65535)
    nan_to_zero = ctx.dx10_clamp

    def h(w):
        lo, hi = [], []
        for rd, sl, sh, nl, nh in srcs:
            x = rd(w)
            a, b = _half(x, sl, typ), _half(x, sh, typ)
            if isf:
                a, b = (-a if nl else a), (-b if nh else b)
            lo.append(a)
            hi.append(b)
        rl, rh = fn(*lo), fn(*hi)
        if isf:
            if clamp:
                rl, rh = clamp01(rl, nan_to_zero), clamp01(rh, nan_to_zero)
            bl = np.asarray(rl, dtype=np.float16).view(np.uint16).astype(np.uint32)
            bh = np.asarray(rh, dtype=np.float16).view(np.uint16).astype(np.uint32)
        else:
            rl, rh = np.asarray(rl).astype(np.int64), np.asarray(rh).astype(np.int64)
            if clamp:  # the exact int64 result, saturated (not the wrapped 16 bits)
                rl, rh = np.clip(rl, lo_sat, hi_sat), np.clip(rh, lo_sat, hi_sat)
            bl = (rl & 0xFFFF).astype(np.uint32)
            bh = (rh & 0xFFFF).astype(np.uint32)
        if dm is None:
            wr(w, bl | (bh << np.uint32(16)))
        else:
            wr(w, bl | (bh << np.uint32(16)), dm(w))
        return nxt
    return h


@builder(*_PK32)
def _b_pk32(inst, ctx):
    f, nxt, n = inst.f, ctx.nxt, _NARGS[inst.name]
    fn = _PK32[inst.name]
    if inst.dpp is not None or (fn is None and (f["neg"] or f["neg_hi"] or f["clamp"])):
        raise UnsupportedInstruction(f"{inst.raw_name}: DPP, or neg/clamp on the move, is not modelled")
    clamp, nan_to_zero = f["clamp"], ctx.dx10_clamp
    rds = []
    for i in range(n):
        enc = f[f"src{i}"]
        sl, sh, nl, nh = _halves(inst, i)
        if enc >= 256:
            r = enc - 256
            rds.append((lambda w, r=r, s=sl: w.v[r + s], lambda w, r=r, s=sh: w.v[r + s], nl, nh))
        elif enc < 128:
            rds.append((lambda w, e=enc, s=sl: w.s[e + s], lambda w, e=enc, s=sh: w.s[e + s], nl, nh))
        else:  # constants: the 32-bit value in both halves
            c = inline_bits(enc, "f32") if enc != 255 else inst.lit
            if c is None:
                raise UnsupportedInstruction(f"packed f32 operand {enc}")
            rds.append((lambda w, c=c: c, lambda w, c=c: c, nl, nh))
    d = f["vdst"]
    wlo, whi = vdst(d, "u32", ctx), vdst(d + 1, "u32", ctx)
    isf = fn is not None
    # Float sources as typed float32 values: register rows viewed as f32, scalars as np.float32.
    frds = []
    for i, (rl, rh, nl, nh) in enumerate(rds):
        enc = f[f"src{i}"]
        sl, sh = _halves(inst, i)[:2]
        if enc >= 256:
            frds.append((_f32_row(enc - 256 + sl), _f32_row(enc - 256 + sh), nl, nh))
        else:
            frds.append((_f32_scalar(rl, True), _f32_scalar(rh, True), nl, nh))

    def h(w):
        if not isf:  # v_pk_mov_b32: D.lo = S0 half op_sel[0], D.hi = S1 half op_sel[1] (not op_sel_hi)
            lo0, hi1 = rds[0][0](w), rds[1][0](w)
            lo0 = np.array(lo0, dtype=np.uint32)  # copy: the destination may overlap the source
            hi1 = np.array(hi1, dtype=np.uint32)
            wlo(w, lo0)
            whi(w, hi1)
            return nxt
        lo, hi = [], []
        for rl, rh, nl, nh in frds:
            a, b = rl(w), rh(w)
            lo.append(-a if nl else a)
            hi.append(-b if nh else b)
        rl, rh = fn(*lo), fn(*hi)  # fresh arrays: both computed before either half is written
        if clamp:  # in float64 for the fma: clamping before the f32 rounding gives the same value
            rl, rh = clamp01(rl, nan_to_zero), clamp01(rh, nan_to_zero)
        if w.full:  # the assignment rounds to f32 like astype (v_pk_fma computes in f64)
            w.vf[d] = rl
            w.vf[d + 1] = rh
        else:
            np.copyto(w.vf[d], rl, where=w.mask, casting="unsafe")
            np.copyto(w.vf[d + 1], rh, where=w.mask, casting="unsafe")
        return nxt
    return h


# Dot products: name -> element kind. The accumulating forms (dot2c/dot4c, gfx11's dot2acc) add
# into VDST; the others take S2.
_DOT = {"v_dot2_f32_f16": "f16", "v_dot2c_f32_f16": "f16", "v_dot2acc_f32_f16": "f16", "v_dot2_f32_bf16": "bf16",
        "v_dot2c_f32_bf16": "bf16", "v_dot4_i32_i8": "i8", "v_dot4c_i32_i8": "i8", "v_dot4_i32_iu8": "iu8",
        "v_dot4_u32_u8": "u8", "v_dot2_i32_i16": "i16", "v_dot2_u32_u16": "u16"}


def _dot_parts(x, kind):
    """The elements of packed u32 lanes as float64 / int64, lowest first."""
    x = np.asarray(x, dtype=np.uint32)
    if kind == "f16":
        return [_half(x, False, "f16").astype(np.float64), _half(x, True, "f16").astype(np.float64)]
    if kind == "bf16":
        return [((x << np.uint32(16)).view(np.float32)).astype(np.float64),
                ((x & np.uint32(0xFFFF0000)).view(np.float32)).astype(np.float64)]
    if kind in ("i8", "u8"):
        bs = [((x >> np.uint32(8 * k)) & np.uint32(0xFF)).astype(np.int64) for k in range(4)]
        return [(b ^ 0x80) - 0x80 for b in bs] if kind == "i8" else bs
    bs = [((x >> np.uint32(16 * k)) & np.uint32(0xFFFF)).astype(np.int64) for k in range(2)]
    return [(b ^ 0x8000) - 0x8000 for b in bs] if kind == "i16" else bs


def _dot_source(inst, ctx, i, kind):
    """Reader of source i (0 or 1) as its list of elements, with the VOP3P modifiers applied:
    two-element kinds take op_sel / op_sel_hi (which half feeds element 0 / 1) and, for floats,
    neg_lo / neg_hi (negate element 0 / 1); the byte forms take neither (iu8's neg_lo[i] is the
    signedness of source i, read by the caller)."""
    rd = _src(inst, ctx, i)
    if inst.fam != "VOP3P":
        return lambda w: _dot_parts(rd(w), kind)
    sl, sh, nl, nh = _halves(inst, i)
    isf = kind in ("f16", "bf16")
    if kind in ("i8", "u8"):
        if sl or not sh:
            raise UnsupportedInstruction(f"{inst.raw_name}: op_sel on a byte dot product")
        if nh or (nl and inst.name != "v_dot4_i32_iu8"):
            raise UnsupportedInstruction(f"{inst.raw_name}: neg_lo/neg_hi on an integer dot product")
        return lambda w: _dot_parts(rd(w), kind)
    if not isf and (nl or nh):
        raise UnsupportedInstruction(f"{inst.raw_name}: neg_lo/neg_hi on an integer dot product")
    if (sl, sh, nl, nh) == (False, True, False, False):
        return lambda w: _dot_parts(rd(w), kind)
    pick = (int(sl), int(sh))
    sign = (-1.0 if nl else 1.0, -1.0 if nh else 1.0)

    def read(w):
        parts = _dot_parts(rd(w), kind)
        out = [parts[pick[0]], parts[pick[1]]]
        return [p * s if s < 0 else p for p, s in zip(out, sign, strict=True)] if isf else out
    return read


@builder(*_DOT)
def _b_dot(inst, ctx):
    f, nxt, name = inst.f, ctx.nxt, inst.name
    kind = _DOT[name]
    isf = kind in ("f16", "bf16")
    accum_dst = "dot2c" in name or "dot4c" in name or "dot2acc" in name
    if inst.sdwa is not None:
        raise UnsupportedInstruction(f"{inst.raw_name}: SDWA on a dot product is not modelled")
    if inst.dpp is not None and any(inst.dpp.get(k) for k in ("neg0", "abs0", "neg1", "abs1")):
        raise UnsupportedInstruction(f"{inst.raw_name}: DPP neg/abs modifiers on a dot product")
    if inst.fam == "VOP3" and (f["abs"] or f["neg"] or f["opsel"] or f["omod"]):
        raise UnsupportedInstruction(f"{inst.raw_name}: VOP3 abs/neg/op_sel/omod on a dot product")
    neg_c = False
    if inst.fam == "VOP3P":
        nl2, nh2 = f["neg"] >> 2 & 1, f["neg_hi"] >> 2 & 1
        if f["opsel"] >> 2 & 1 or not f["opsel_hi2"]:
            raise UnsupportedInstruction(f"{inst.raw_name}: op_sel/op_sel_hi on the 32-bit accumulator")
        # gfx11/gfx12 negate the f32 accumulator with both bits (how LLVM folds fneg); the CDNA ISA
        # says its modifiers do not apply to S2 (v_dot2_f32_bf16); other combinations are unknown.
        if nl2 or nh2:
            if not isf or ctx.gen == "gfx9" or nl2 != nh2:
                raise UnsupportedInstruction(f"{inst.raw_name}: neg_lo[2]={nl2} neg_hi[2]={nh2} on the accumulator")
            neg_c = True
    signed = kind in ("i8", "i16", "iu8")
    if kind == "iu8":  # signedness of each source from neg_lo
        ka = "i8" if f["neg"] & 1 else "u8"
        kb = "i8" if f["neg"] & 2 else "u8"
    else:
        ka = kb = kind
    ea, eb = _dot_source(inst, ctx, 0, ka), _dot_source(inst, ctx, 1, kb)
    e2 = (lambda w: w.v[f["vdst"]]) if accum_dst else _raw32(f["src2"], ctx, inst.lit, "f32")
    wr = vdst(f["vdst"], "u32", ctx)
    dm = _dpp_mask(inst, ctx)
    clamp, nan_to_zero = f.get("clamp", 0), ctx.dx10_clamp
    lo, hi = (-2**31, 2**31 - 1) if signed else (0, M32)

    def h(w):
        pa, pb = ea(w), eb(w)
        c = np.asarray(e2(w), dtype=np.uint32)
        acc = c.view(np.float32).astype(np.float64) if isf else \
            (c.view(np.int32) if signed else c).astype(np.int64)
        if neg_c:
            acc = -acc
        for a, b in zip(pa, pb, strict=True):
            acc = acc + a * b
        if isf:
            if clamp:
                acc = clamp01(acc, nan_to_zero)
            r = np.asarray(acc, dtype=np.float32).view(np.uint32)
        else:
            if clamp:  # saturate the exact sum to the 32-bit result type
                acc = np.clip(acc, lo, hi)
            r = (acc & 0xFFFFFFFF).astype(np.uint32)
        if dm is None:
            wr(w, r)
        else:
            wr(w, r, dm(w))
        return nxt
    return h


@builder("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16", "v_mad_mix_f32", "v_mad_mixlo_f16",
         "v_mad_mixhi_f16")
def _b_mix(inst, ctx):
    f, nxt, name = inst.f, ctx.nxt, inst.name
    rds = []
    for i in range(3):
        sl, sh, nl, _ = _halves(inst, i)
        # op_sel_hi[i] = 1: the source is f16 (op_sel[i] picks its half); 0: it is f32.
        # neg_hi doubles as the per-source abs modifier of the mix instructions.
        rds.append((_raw32(f[f"src{i}"], ctx, inst.lit, "f16" if sh else "f32"), sh, sl, nl, f["neg_hi"] >> i & 1))
    d = f["vdst"]
    mode = "f32" if name.endswith("f32") else "lo" if "mixlo" in name else "hi"
    half = 1 if mode == "hi" else 0
    clamp = f["clamp"]
    # Typed sources without conversions: f16 halves and f32 rows are views; the products and the
    # sum are taken in float64 inside the ufuncs (dtype=), exactly as converting first would.
    typed = []
    for i, (raw, is16, sel, neg, absm) in enumerate(rds):
        enc = f[f"src{i}"]
        if i == 0 and inst.dpp is not None:  # the permuted 32 bits, then the half or the whole
            rd = _dpp_typed(_src(inst, ctx, 0), is16, sel)
        elif enc >= 256:
            rd = _f16_half(enc - 256, int(sel)) if is16 else _f32_row(enc - 256)
        elif is16:
            rd = _f16_scalar(raw, 16 if sel else 0)
        else:
            rd = _f32_scalar(raw)
        typed.append((rd, neg, absm))
    (ra, na_, aa), (rb, nb_, ab), (rc, nc_, ac) = typed
    dm = _dpp_mask(inst, ctx)
    nan_to_zero = ctx.dx10_clamp

    def val(rd, neg, absm, w):
        v = rd(w)
        if absm:
            v = np.abs(v)
        return -v if neg else v

    def h(w):
        r = np.multiply(val(ra, na_, aa, w), val(rb, nb_, ab, w), dtype=np.float64)
        r = sum_to_odd(r, val(rc, nc_, ac, w))  # one rounding to f32 below (fmas_f32 in the ISA)
        if clamp:
            r = clamp01(r, nan_to_zero)
        if mode == "f32":
            row = w.vf[d]
        else:
            r = np.asarray(r, dtype=np.float32)  # f64 -> f32 -> f16, as the generic path rounds
            row = w.hf[d, half::2]
        if dm is not None:
            np.copyto(row, r, where=dm(w), casting="unsafe")
        elif w.full:
            row[...] = r
        else:
            np.copyto(row, r, where=w.mask, casting="unsafe")
        return nxt
    return h


def _dpp_typed(raw, is16, sel):
    """A mix source read through DPP (u32 lanes) as f16 half `sel` or as f32."""
    if is16:
        return lambda w: _half(raw(w), sel, "f16")
    return lambda w: np.asarray(raw(w), dtype=np.uint32).view(np.float32)


def _f32_row(r):
    return lambda w: w.vf[r]


def _f16_half(r, sel):
    return lambda w: w.hf[r, sel::2]


# Scalar sources go through struct (exact, and ~1 us cheaper than building a numpy scalar and
# viewing it); mix sources stay Python floats, packed-f32 sources become np.float32 (astype is used).
def _f32_scalar(raw, np_scalar=False):
    if np_scalar:
        return lambda w: np.float32(_S32.unpack(_U32.pack(raw(w) & 0xFFFFFFFF))[0])
    return lambda w: _S32.unpack(_U32.pack(raw(w) & 0xFFFFFFFF))[0]


def _f16_scalar(raw, shift):
    # A table, not struct: Python's f16 unpacking drops NaN payloads, numpy's conversion keeps them.
    return lambda w: _F16_AS_F64[(raw(w) >> shift) & 0xFFFF]


_S32, _U32 = struct.Struct("<f"), struct.Struct("<I")
_F16_AS_F64 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float64)
