"""gfx12's scalar float instructions (RDNA4 ISA, SALU floating point): conversions and rounding
(SOP1), f16 arithmetic and the fused multiply-adds (SOP2), and the float compares (SOPC). LLVM
selects them for uniform float math on gfx12 (a scale negated or clamped once per workgroup).

An f16 result fills the low half of the SGPR and zeroes the high half; f16 operands are read from
the low half. The arithmetic is numpy's IEEE arithmetic in the operand's format (round to nearest
even); fma rounds once (the product is exact in f64, so only the sum rounds there).
"""

from __future__ import annotations

import numpy as np

from tiledsl.backends.rocm.emulator.executor import builder
from tiledsl.backends.rocm.emulator.fma64 import sum_to_odd
from tiledsl.backends.rocm.emulator.operands import M32, scalar_reader, scalar_writer


def _f32(bits: int) -> np.float32:
    return np.uint32(bits & M32).view(np.float32)


def _f16(bits: int) -> np.float16:
    return np.uint16(bits & 0xFFFF).view(np.float16)


def _bits32(x) -> int:
    return int(np.float32(x).view(np.uint32))


def _bits16(x) -> int:
    return int(np.float16(x).view(np.uint16))


def _extreme(a, b, smaller: bool):
    """IEEE 754-2019 minimum/maximum: NaN if either is NaN, -0 below +0."""
    if np.isnan(a) or np.isnan(b):
        return a.dtype.type(np.nan)
    if a == b:  # equal values differ only in the sign of a zero
        return a if bool(np.signbit(a)) == smaller else b
    return min(a, b) if smaller else max(a, b)


def _minimum(a, b):
    return _extreme(a, b, True)


def _maximum(a, b):
    return _extreme(a, b, False)


# -- SOP1: conversions and rounding -------------------------------------------------------------
# name -> (source format, destination format, function on the numpy value)
_SOP1 = {
    "s_cvt_f16_f32": ("f32", "f16", np.float16),
    "s_cvt_f32_f16": ("f16", "f32", np.float32),
    "s_cvt_hi_f32_f16": ("f16hi", "f32", np.float32),
}
for _t in ("f32", "f16"):
    _SOP1.update({f"s_ceil_{_t}": (_t, _t, np.ceil), f"s_floor_{_t}": (_t, _t, np.floor),
                  f"s_trunc_{_t}": (_t, _t, np.trunc), f"s_rndne_{_t}": (_t, _t, np.rint)})


@builder(*_SOP1)
def _b_sop1_float(inst, ctx):
    f, nxt = inst.f, ctx.nxt
    src_t, dst_t, fn = _SOP1[inst.name]
    rd = scalar_reader(f["src0"], ctx, inst.lit, "f16" if src_t == "f16hi" else src_t)
    wr = scalar_writer(f["sdst"], ctx)
    read = {"f32": _f32, "f16": _f16, "f16hi": lambda b: _f16(b >> 16)}[src_t]
    out = _bits32 if dst_t == "f32" else _bits16

    def h(w):
        wr(w, out(fn(read(rd(w)))))
        return nxt
    return h


# -- SOP2: f16 arithmetic, minimum/maximum, fused multiply-adds ----------------------------------
_BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "min_num": np.fmin, "max_num": np.fmax, "minimum": _minimum, "maximum": _maximum}
_SOP2 = {f"s_{op}_f16": ("f16", fn) for op, fn in _BINARY.items()}
_SOP2.update({"s_minimum_f32": ("f32", _minimum), "s_maximum_f32": ("f32", _maximum)})


@builder(*_SOP2)
def _b_sop2_float(inst, ctx):
    f, nxt = inst.f, ctx.nxt
    t, fn = _SOP2[inst.name]
    a, b = scalar_reader(f["src0"], ctx, inst.lit, t), scalar_reader(f["src1"], ctx, inst.lit, t)
    wr = scalar_writer(f["sdst"], ctx)
    read, out = (_f32, _bits32) if t == "f32" else (_f16, _bits16)

    def h(w):
        with np.errstate(all="ignore"):
            wr(w, out(fn(read(a(w)), read(b(w)))))
        return nxt
    return h


def _fma(a, b, c, dtype):
    return dtype(sum_to_odd(np.float64(a) * np.float64(b), c))  # one rounding: see fma64.sum_to_odd


@builder("s_fmac_f32", "s_fmac_f16", "s_fmaak_f32", "s_fmamk_f32")
def _b_sop2_fma(inst, ctx):
    """fmac: D = S0 * S1 + D; fmaak: D = S0 * S1 + K; fmamk: D = S0 * K + S1 (K: the literal)."""
    f, nxt, name = inst.f, ctx.nxt, inst.name
    t = "f16" if name.endswith("f16") else "f32"
    a, b = scalar_reader(f["src0"], ctx, inst.lit, t), scalar_reader(f["src1"], ctx, inst.lit, t)
    d = scalar_reader(f["sdst"], ctx, None, t)
    wr = scalar_writer(f["sdst"], ctx)
    read, out, dtype = (_f32, _bits32, np.float32) if t == "f32" else (_f16, _bits16, np.float16)
    k = inst.lit

    def h(w):
        x, y = read(a(w)), read(b(w))
        if name == "s_fmaak_f32":
            r = _fma(x, y, _f32(k), dtype)
        elif name == "s_fmamk_f32":
            r = _fma(x, _f32(k), y, dtype)
        else:
            r = _fma(x, y, read(d(w)), dtype)
        wr(w, out(r))
        return nxt
    return h


# -- SOPC: float compares (ordered, and the negated forms that are true when unordered) ----------
_ORDERED = {"eq": lambda a, b: a == b, "lg": lambda a, b: a < b or a > b, "gt": lambda a, b: a > b,
            "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
            "o": lambda a, b: not (np.isnan(a) or np.isnan(b)), "u": lambda a, b: bool(np.isnan(a) or np.isnan(b))}
_COMPARE = dict(_ORDERED)
for _c in ("ge", "lg", "gt", "le", "eq", "lt"):
    _COMPARE[f"n{_c}"] = (lambda fn: lambda a, b: not fn(a, b))(_ORDERED[_c])


@builder(*(f"s_cmp_{c}_{t}" for c in _COMPARE for t in ("f32", "f16")))
def _b_sopc_float(inst, ctx):
    f, nxt = inst.f, ctx.nxt
    _, _, c, t = inst.name.split("_")
    cmp = _COMPARE[c]
    a, b = scalar_reader(f["src0"], ctx, inst.lit, t), scalar_reader(f["src1"], ctx, inst.lit, t)
    read = _f32 if t == "f32" else _f16

    def h(w):
        w.scc = int(bool(cmp(read(a(w)), read(b(w)))))
        return nxt
    return h
