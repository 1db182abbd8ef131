"""The 8-bit float conversions: v_cvt_pk_{fp8,bf8}_f32 (two f32 -> one packed 16-bit half),
v_cvt_f32_{fp8,bf8} (one byte -> f32) and v_cvt_pk_f32_{fp8,bf8} (two bytes -> two f32); at the end,
gfx950's scaled fp8/bf8/fp4 conversions (v_cvt_scalef32_*).

The format is the arch's flavour (arch table `fp8_flavour`): "fnuz" on gfx942 (e4m3 bias 8,
e5m2 bias 16, a single NaN 0x80, no infinities, no -0) and "ocp" on gfx950/gfx1201 (e4m3fn:
bias 7, NaN 0x7F/0xFF, no infinities; e5m2: IEEE-like with infinities). `fp8` is e4m3, `bf8` e5m2.

Narrowing (f32 -> 8 bits) rounds to nearest, ties to even, with subnormals. Without the VOP3
clamp bit it does not saturate: a value that rounds past the largest finite one becomes the
flavour's overflow code -- NaN (0x80) for FNUZ, NaN (0x7F | sign) for OCP e4m3, infinity
(0x7C | sign) for OCP e5m2 -- the same results as ml_dtypes' float8 casts. With clamp, finite
values saturate to +-max (infinities still give the overflow code, NaN stays NaN). A NaN input
gives FNUZ 0x80 and OCP 0xFF (e4m3) / 0xFE (e5m2) whatever its sign (RDNA4 hardware captures
show the canonical NaN with the sign bit set). Widening (8 bits -> f32) is exact.

Encodings: the narrowing writes the low (op_sel[3] = 0) or high 16-bit half of VDST and keeps
the other half. The widening picks its byte with SDWA src0_sel (gfx9) or the VOP3 byte_sel
(gfx12: op_sel bits 11 and 12 hold byte_sel bits 1 and 0); the packed widening its word with
SDWA src0_sel WORD_0/1 or VOP3 op_sel[0].
"""

from __future__ import annotations

import functools

import numpy as np

from tiledsl.backends.rocm.emulator import crosslane
from tiledsl.backends.rocm.emulator.executor import builder
from tiledsl.backends.rocm.emulator.matrix import MX_NARROW, fp8_table
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.emulator.operands import bf16_bits, vdst, vsrc

_SDWA_DWORD = 6


@functools.cache
def _finite_codes(kind: str, flavour: str) -> tuple[np.ndarray, int]:
    """Values of the non-negative finite codes 0, 1, ... in increasing order, extended by the
    value one step past the largest (the code an unbounded exponent would give next), and the
    count of finite codes."""
    table = fp8_table(kind, flavour).astype(np.float64)
    n = 0
    while n < 128 and np.isfinite(table[n]):
        n += 1
    vals = table[:n]
    return np.append(vals, 2 * vals[-1] - vals[-2]), n


def narrow(x: np.ndarray, kind: str, flavour: str, saturate: bool = False) -> np.ndarray:
    """f32 values -> 8-bit codes (uint8), rounding to nearest even; see the module docstring."""
    x = np.asarray(x, dtype=np.float32)
    vals, n = _finite_codes(kind, flavour)
    a = np.abs(x.astype(np.float64))
    hi = np.clip(np.searchsorted(vals, a, side="left"), 1, n)  # vals[hi - 1] < a <= vals[hi]
    lo = hi - 1
    d_lo, d_hi = a - vals[lo], vals[hi] - a
    code = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo)
    code = np.where(a == 0, 0, code)
    over = (code >= n) | (a > vals[n])
    neg = np.signbit(x)
    if flavour == "fnuz":
        overflow_code, nan_code = 0x80, 0x80
        signed = np.where(neg & (code != 0), code | 0x80, code)
    else:
        overflow_code = 0x7F if kind == "fp8" else 0x7C
        nan_code = 0xFF if kind == "fp8" else 0xFE
        signed = np.where(neg, code | 0x80, code)
        overflow_code = np.where(neg, overflow_code | 0x80, overflow_code)
    if saturate:
        sat = np.where(neg, (n - 1) | 0x80, n - 1)
        out = np.where(over & np.isfinite(x), sat, np.where(over, overflow_code, signed))
    else:
        out = np.where(over, overflow_code, signed)
    out = np.where(np.isinf(x), overflow_code, out)
    return np.where(np.isnan(x), nan_code, out).astype(np.uint8)


def widen(codes: np.ndarray, kind: str, flavour: str) -> np.ndarray:
    """8-bit codes -> f32 values (exact)."""
    return fp8_table(kind, flavour)[np.asarray(codes, dtype=np.uint8)]


def _kind(name: str) -> str:
    return "bf8" if "bf8" in name else "fp8"


def _flavour(inst, ctx) -> str:
    flavour = ctx.image.arch.fp8_flavour
    if flavour is None:
        raise UnsupportedInstruction(f"{inst.raw_name}: {ctx.arch} has no 8-bit float format")
    return flavour


@builder("v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32")
def _b_narrow(inst, ctx):
    from tiledsl.backends.rocm.emulator.valu import _reader

    f, nxt = inst.f, ctx.nxt
    kind, flavour = _kind(inst.name), _flavour(inst, ctx)
    if inst.fam != "VOP3" or f["omod"] or f["opsel"] & 7:
        raise UnsupportedInstruction(f"{inst.raw_name} with omod or source op_sel")
    a = _reader(inst, ctx, 0, f["src0"], "f32")
    b = _reader(inst, ctx, 1, f["src1"], "f32")
    saturate = bool(f["clamp"])
    wr = vdst(f["vdst"], "u16", ctx, hi=bool(f["opsel"] & 8))
    # gfx12's _e64_dpp form: source 0 is permuted by _reader; the write obeys the DPP lane mask
    dm = crosslane.dpp_write_mask(inst, ctx) if inst.dpp is not None else None
    W = ctx.wave_size

    def h(w):
        lo = narrow(np.broadcast_to(a(w), (W,)), kind, flavour, saturate).astype(np.uint16)
        hi = narrow(np.broadcast_to(b(w), (W,)), kind, flavour, saturate).astype(np.uint16)
        if dm is None:
            wr(w, lo | (hi << np.uint16(8)))
        else:
            wr(w, lo | (hi << np.uint16(8)), dm(w))
        return nxt
    return h


def _source_bytes(inst, ctx, size: int) -> tuple[int, str]:
    """(first byte, how it was selected) of a widening's source: SDWA src0_sel, gfx12 byte_sel,
    gfx9 VOP3 op_sel (not modelled) or byte 0."""
    f = inst.f
    if inst.sdwa is not None:
        sd = inst.sdwa
        if sd["dst_sel"] != _SDWA_DWORD or sd["clamp"] or sd["omod"] or sd["neg0"] or sd["abs0"] or sd["sext0"]:
            raise UnsupportedInstruction(f"{inst.raw_name} with SDWA dst_sel/clamp/omod/modifiers")
        sel = sd["sel0"]
        if size == 1 and sel < 4:
            return sel, "sdwa"
        if size == 2 and sel in (4, 5):
            return 2 * (sel - 4), "sdwa"
        if sel == _SDWA_DWORD:
            return 0, "sdwa"
        raise UnsupportedInstruction(f"{inst.raw_name} with SDWA src0_sel {sel}")
    if inst.fam == "VOP3":
        if f["clamp"] or f["omod"] or f["abs"] or f["neg"]:
            raise UnsupportedInstruction(f"{inst.raw_name} with clamp, omod or source modifiers")
        sel = f["opsel"]
        if sel and ctx.gen == "gfx9":
            raise UnsupportedInstruction(f"{inst.raw_name} with op_sel on {ctx.arch}")
        if size == 1:
            return ((sel & 1) << 1) | ((sel >> 1) & 1), "byte_sel"
        return 2 * (sel & 1), "op_sel"
    return 0, "e32"


@builder("v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8")
def _b_widen(inst, ctx):
    if inst.dpp is not None:  # SDWA byte selects are handled by _source_bytes, DPP is not
        raise UnsupportedInstruction(f"{inst.raw_name}: DPP is not modelled")
    kind, flavour = _kind(inst.name), _flavour(inst, ctx)
    count = 2 if inst.name.startswith("v_cvt_pk_") else 1
    first, _ = _source_bytes(inst, ctx, count)
    raw = vsrc(inst.f["src0"], "u32", ctx, inst.lit)
    d, nxt, W = inst.f["vdst"], ctx.nxt, ctx.wave_size
    writers = [vdst(d + i, "f32", ctx) for i in range(count)]

    def h(w):
        bits = np.broadcast_to(np.asarray(raw(w), dtype=np.uint32), (W,))
        values = [widen((bits >> np.uint32(8 * (first + i))) & np.uint32(0xFF), kind, flavour) for i in range(count)]
        for wr, v in zip(writers, values, strict=True):  # both read before either writes (VDST may be the source)
            wr(w, v)
        return nxt
    return h


# gfx950's scaled 8-bit conversions (v_cvt_scalef32_pk_*: what Triton emits for every fp8 cast there,
# with scale 1.0, and what MX quantization kernels use with a power-of-two scale). The scale
# operand is an f32 of which only the exponent field E counts, a factor of 2^(E - 127) (LLVM's
# description: "multiplying by the exponent part of scale"): narrowing divides by it, then rounds
# as v_cvt_pk_fp8_f32 does (narrow(): nearest even, the overflow code, saturation with clamp);
# widening multiplies by it. Third-party kernels fall back on exactly this (x * 2^(127 - E), then a
# saturating cast) where the instruction is missing. The 16-bit result of a narrowing goes to the
# half VDST op_sel[3] picks (the other half kept); a widening reads the word op_sel[0] picks.
# The fp4 and single-byte f32 forms follow below; the stochastic-rounding, f16-destination byte
# and fp6 forms stay unmodelled.
def _scale_factor(bits) -> np.ndarray:
    e = (np.asarray(bits, dtype=np.uint32) >> np.uint32(23)) & np.uint32(0xFF)
    return np.exp2(e.astype(np.float64) - 127)


def _sources16(raw, typ: str) -> tuple[np.ndarray, np.ndarray]:
    """The two 16-bit floats (low, high) of packed 32-bit source words, as float64."""
    bits = np.asarray(raw, dtype=np.uint32)
    halves = (bits & np.uint32(0xFFFF), bits >> np.uint32(16))
    if typ == "bf16":
        return tuple((h << np.uint32(16)).view(np.float32).astype(np.float64) for h in halves)
    return tuple(h.astype(np.uint16).view(np.float16).astype(np.float64) for h in halves)


def _lane_words(read, w) -> np.ndarray:
    """A source's 32-bit words, one per lane (a scalar source repeated)."""
    return np.broadcast_to(np.asarray(read(w), dtype=np.uint32), (w.W,))


def _narrowing_inputs(inst, ctx, src_t: str):
    """w -> (first value, second value, scale factor), float64 per lane, of a scaled narrowing:
    two f32 sources and the scale third, or one packed 16-bit pair and the scale second."""
    f = inst.f
    reads = [vsrc(f[f"src{i}"], "u32", ctx, inst.lit) for i in range(3 if src_t == "f32" else 2)]

    def inputs(w):
        raw = [_lane_words(r, w) for r in reads]
        if src_t == "f32":
            x0, x1 = (v.view(np.float32).astype(np.float64) for v in raw[:2])
        else:
            x0, x1 = _sources16(raw[0], src_t)
        return x0, x1, _scale_factor(raw[-1])
    return inputs


def _write_pair(writers, out_t: str, vals, w) -> None:
    """Two widened values to VDST, VDST + 1 (f32) or packed into VDST (bf16/f16)."""
    if out_t == "f32":
        for wr, v in zip(writers, vals, strict=True):
            wr(w, v.astype(np.float32))
        return
    halves = [(bf16_bits(v) if out_t == "bf16" else v.astype(np.float16).view(np.uint16)).astype(np.uint32)
              for v in vals]
    writers[0](w, halves[0] | (halves[1] << np.uint32(16)))


@builder("v_cvt_scalef32_pk_fp8_f32", "v_cvt_scalef32_pk_bf8_f32", "v_cvt_scalef32_pk_fp8_bf16",
         "v_cvt_scalef32_pk_bf8_bf16", "v_cvt_scalef32_pk_fp8_f16", "v_cvt_scalef32_pk_bf8_f16")
def _b_scaled_narrow(inst, ctx):
    f, nxt = inst.f, ctx.nxt
    kind, flavour = _kind(inst.name.split("_pk_")[1]), _flavour(inst, ctx)
    src_t = inst.name.rsplit("_", 1)[1]
    if inst.fam != "VOP3" or inst.dpp is not None or f["omod"] or f["abs"] or f["neg"] or f["opsel"] & 7:
        raise UnsupportedInstruction(f"{inst.raw_name} with DPP, omod, source modifiers or source op_sel")
    inputs = _narrowing_inputs(inst, ctx, src_t)
    saturate = bool(f["clamp"])
    wr = vdst(f["vdst"], "u16", ctx, hi=bool(f["opsel"] & 8))

    def h(w):
        x0, x1, factor = inputs(w)
        with np.errstate(over="ignore"):
            lo = narrow((x0 / factor).astype(np.float32), kind, flavour, saturate).astype(np.uint16)
            hi = narrow((x1 / factor).astype(np.float32), kind, flavour, saturate).astype(np.uint16)
        wr(w, lo | (hi << np.uint16(8)))
        return nxt
    return h


@builder("v_cvt_scalef32_pk_f32_fp8", "v_cvt_scalef32_pk_f32_bf8", "v_cvt_scalef32_pk_bf16_fp8",
         "v_cvt_scalef32_pk_bf16_bf8", "v_cvt_scalef32_pk_f16_fp8", "v_cvt_scalef32_pk_f16_bf8")
def _b_scaled_widen(inst, ctx):
    f, nxt = inst.f, ctx.nxt
    out_t, src = inst.name.split("_pk_")[1].split("_")
    kind, flavour = _kind(src), _flavour(inst, ctx)
    if inst.fam != "VOP3" or inst.dpp is not None or f["clamp"] or f["omod"] or f["abs"] or f["neg"] \
            or f["opsel"] & ~1:
        raise UnsupportedInstruction(f"{inst.raw_name} with DPP, clamp, omod, source modifiers or op_sel")
    raw, scale = vsrc(f["src0"], "u32", ctx, inst.lit), vsrc(f["src1"], "u32", ctx, inst.lit)
    first = 2 * (f["opsel"] & 1)
    d = f["vdst"]
    writers = [vdst(d + i, "f32", ctx) for i in range(2)] if out_t == "f32" else [vdst(d, "u32", ctx)]

    def h(w):
        bits, factor = _lane_words(raw, w), _scale_factor(_lane_words(scale, w))
        with np.errstate(over="ignore"):
            vals = [widen((bits >> np.uint32(8 * (first + i))) & np.uint32(0xFF), kind, flavour).astype(np.float64)
                    * factor for i in range(2)]
            _write_pair(writers, out_t, vals, w)
        return nxt
    return h


@builder("v_cvt_scalef32_f32_fp8", "v_cvt_scalef32_f32_bf8")
def _b_scaled_widen_byte(inst, ctx):
    """One byte (op_sel[1:0] picks it) to f32, times the scale's exponent factor (CK's MX upcast)."""
    f, nxt = inst.f, ctx.nxt
    kind, flavour = _kind(inst.name.rsplit("_", 1)[1]), _flavour(inst, ctx)
    if inst.fam != "VOP3" or inst.dpp is not None or f["clamp"] or f["omod"] or f["abs"] or f["neg"] \
            or f["opsel"] & ~3:
        raise UnsupportedInstruction(f"{inst.raw_name} with DPP, clamp, omod, source modifiers or op_sel")
    raw, scale = vsrc(f["src0"], "u32", ctx, inst.lit), vsrc(f["src1"], "u32", ctx, inst.lit)
    shift, wr = np.uint32(8 * (f["opsel"] & 3)), vdst(f["vdst"], "f32", ctx)

    def h(w):
        bits, factor = _lane_words(raw, w), _scale_factor(_lane_words(scale, w))
        with np.errstate(over="ignore"):
            wr(w, (widen((bits >> shift) & np.uint32(0xFF), kind, flavour).astype(np.float64) * factor)
               .astype(np.float32))
        return nxt
    return h


# fp4 (OCP e2m1: 0, 0.5, 1, 1.5, 2, 3, 4, 6, then the same negated; no infinities or NaN): the
# values of its 16 codes, as the f8f6f4 MFMAs read them.
_FP4 = MX_NARROW["fp4"][1]


def narrow_fp4(x: np.ndarray) -> np.ndarray:
    """f32/f64 values -> e2m1 codes: nearest, ties to the even code, anything past 6 (infinities
    too) saturating to +-6, as the OCP MX conversion defines. A NaN has no fp4 code and how the
    hardware maps it is not documented: refused."""
    x = np.asarray(x, dtype=np.float64)
    if np.isnan(x).any():
        raise UnsupportedInstruction("a NaN converted to fp4: the hardware's result is not documented")
    a = np.minimum(np.abs(x), 6.0)
    mags = _FP4[:8]  # the positive codes, in increasing order
    hi = np.clip(np.searchsorted(mags, a, side="left"), 1, 7)  # mags[hi - 1] < a <= mags[hi]
    lo = hi - 1
    code = np.where((mags[hi] - a < a - mags[lo]) | ((mags[hi] - a == a - mags[lo]) & (hi % 2 == 0)), hi, lo)
    code = np.where(a == 0, 0, code)
    return (code | np.where(np.signbit(x), 8, 0)).astype(np.uint8)


@builder("v_cvt_scalef32_pk_fp4_f32", "v_cvt_scalef32_pk_fp4_f16", "v_cvt_scalef32_pk_fp4_bf16")
def _b_scaled_narrow_fp4(inst, ctx):
    """Two values (two f32 sources, or one packed 16-bit pair) divided by the scale's exponent
    factor, to two e2m1 nibbles (the first low) in the byte of VDST that op_sel[3:2] picks."""
    f, nxt = inst.f, ctx.nxt
    src_t = inst.name.rsplit("_", 1)[1]
    if inst.fam != "VOP3" or inst.dpp is not None or f["clamp"] or f["omod"] or f["abs"] or f["neg"] \
            or f["opsel"] & 3:
        raise UnsupportedInstruction(f"{inst.raw_name} with DPP, clamp, omod, source modifiers or source op_sel")
    inputs = _narrowing_inputs(inst, ctx, src_t)
    shift = np.uint32(8 * (f["opsel"] >> 2 & 3))
    d = f["vdst"]
    old, wr = vsrc(256 + d, "u32", ctx, None), vdst(d, "u32", ctx)

    def h(w):
        x0, x1, factor = inputs(w)
        byte = narrow_fp4(x0 / factor).astype(np.uint32) | narrow_fp4(x1 / factor).astype(np.uint32) << 4
        kept = _lane_words(old, w) & ~(np.uint32(0xFF) << shift)
        wr(w, kept | (byte << shift))
        return nxt
    return h


@builder("v_cvt_scalef32_pk_f32_fp4", "v_cvt_scalef32_pk_f16_fp4", "v_cvt_scalef32_pk_bf16_fp4")
def _b_scaled_widen_fp4(inst, ctx):
    """The two e2m1 nibbles of the source byte op_sel[1:0] picks, times the scale's exponent factor:
    two f32 (VDST, VDST + 1) or one packed 16-bit pair."""
    f, nxt = inst.f, ctx.nxt
    out_t = inst.name.split("_pk_")[1].split("_")[0]
    if inst.fam != "VOP3" or inst.dpp is not None or f["clamp"] or f["omod"] or f["abs"] or f["neg"] \
            or f["opsel"] & ~3:
        raise UnsupportedInstruction(f"{inst.raw_name} with DPP, clamp, omod, source modifiers or op_sel")
    raw, scale = vsrc(f["src0"], "u32", ctx, inst.lit), vsrc(f["src1"], "u32", ctx, inst.lit)
    shift, d = np.uint32(8 * (f["opsel"] & 3)), f["vdst"]
    writers = [vdst(d + i, "f32", ctx) for i in range(2)] if out_t == "f32" else [vdst(d, "u32", ctx)]

    def h(w):
        byte = (_lane_words(raw, w) >> shift) & np.uint32(0xFF)
        factor = _scale_factor(_lane_words(scale, w))
        with np.errstate(over="ignore"):
            vals = [_FP4[(byte >> np.uint32(4 * i)) & np.uint32(0xF)] * factor for i in range(2)]
            _write_pair(writers, out_t, vals, w)
        return nxt
    return h
