"""Operand access, pre-bound at decode time: every source becomes a closure `read(wave)` and
every destination a closure `write(wave, value, mask)`. Binding once per instruction (not per
execution) is what keeps the interpreter fast.

Registers: SGPRs live in a Python list `w.s` indexed by the operand encoding (0..127, which also
covers VCC 106/107, TTMPs, M0, EXEC 126/127); VGPRs in a uint32 array `w.v[reg, lane]` with
typed views (vf: f32, vi: i32, h: u16 halves, hf: f16 halves). AGPRs are rows 256..511 of `w.v`.
"""

from __future__ import annotations

import struct

import numpy as np

from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction

M32 = 0xFFFFFFFF
M64 = (1 << 64) - 1

_F32 = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0}
INV_2PI_F32 = 0x3E22F983
INV_2PI_F64 = 0x3FC45F306DC9C882
INV_2PI_F16 = 0x3118
SRC_SHARED_BASE, SRC_SHARED_LIMIT, SRC_PRIVATE_BASE, SRC_PRIVATE_LIMIT = 235, 236, 237, 238
SHARED_APERTURE = 0x1000_0000_0000  # flat addresses of LDS: aperture base + LDS offset
PRIVATE_APERTURE = 0x2000_0000_0000

WIDE = {"u64": 2, "i64": 2, "f64": 2, "b64": 2}


def f2u(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def u2f(x: int) -> float:
    return struct.unpack("<f", struct.pack("<I", x & M32))[0]


def d2u(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def u2d(x: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", x & M64))[0]


def h2u(x: float) -> int:
    return int(np.float16(x).view(np.uint16))


def inline_bits(enc: int, typ: str) -> int | None:
    """The bit pattern of an inline constant for an operand of type `typ`, or None."""
    wide = typ in WIDE
    if 128 <= enc <= 192:
        return enc - 128
    if 193 <= enc <= 208:
        v = -(enc - 192)
        return v & (M64 if wide else M32)
    if enc in _F32:
        if typ in ("f64", "i64", "u64", "b64"):
            return d2u(_F32[enc])
        if typ in ("f16", "u16", "i16", "pk16"):
            b = h2u(_F32[enc])
            return b | (b << 16) if typ == "pk16" else b
        if typ == "bf16":
            return f2u(_F32[enc]) >> 16
        return f2u(_F32[enc])
    if enc == 248:
        return {"f64": INV_2PI_F64, "f16": INV_2PI_F16, "pk16": INV_2PI_F16}.get(typ, INV_2PI_F32)
    return None


def scalar_reader(enc: int, ctx, lit: int | None, typ: str = "b32"):
    """Closure returning the operand's bits as a Python int (64-bit when typ is 64-bit)."""
    wide = typ in WIDE
    if enc < 128:
        if wide:
            return lambda w: w.s[enc] | (w.s[enc + 1] << 32)
        return lambda w: w.s[enc]
    c = inline_bits(enc, typ)
    if c is not None:
        return lambda w: c
    if enc == 255:
        if lit is None:
            raise UnsupportedInstruction("literal operand without a literal dword")
        val = lit << 32 if typ == "f64" else lit
        return lambda w: val
    if enc == 253:
        return lambda w: w.scc
    if enc == 251:
        return lambda w: int(w.vcc() == 0)
    if enc == 252:
        return lambda w: int(w.exec == 0)
    if enc == SRC_SHARED_BASE:
        return lambda w: SHARED_APERTURE >> 32 if not wide else SHARED_APERTURE
    if enc == SRC_PRIVATE_BASE:
        return lambda w: PRIVATE_APERTURE >> 32 if not wide else PRIVATE_APERTURE
    if enc in (SRC_SHARED_LIMIT, SRC_PRIVATE_LIMIT):
        base = SHARED_APERTURE if enc == SRC_SHARED_LIMIT else PRIVATE_APERTURE
        lim = base + (1 << 32) - 1
        return lambda w: lim >> 32 if not wide else lim
    if enc == 239 and ctx.gen != "gfx9":  # src_pops_exiting_wave_id / reserved
        return lambda w: 0
    raise UnsupportedInstruction(f"{ctx.arch}: scalar operand encoding {enc} is not supported")


def scalar_writer(enc: int, ctx, wide: bool = False):
    """Closure storing a Python int into SGPR(s) `enc`; EXEC writes refresh the lane mask."""
    if enc == ctx.null_sgpr:
        return lambda w, v: None
    if wide:
        if enc == 126:
            def wr_exec(w, v):
                w.set_exec(v & M64)
            return wr_exec

        def wr64(w, v):
            w.s[enc] = v & M32
            w.s[enc + 1] = (v >> 32) & M32
        return wr64
    if enc in (126, 127):
        def wr_exec_half(w, v):
            s = w.s
            s[enc] = v & M32
            w.set_exec(s[126] | (s[127] << 32))
        return wr_exec_half

    def wr(w, v):
        w.s[enc] = v & M32
    return wr


# -- vector sources -----------------------------------------------------------------------
def _scalar_as(typ: str, bits_fn, hi: bool):
    """Adapt a scalar bit reader to a typed numpy-compatible scalar."""
    if typ in ("b32", "u32"):
        return bits_fn
    if typ == "i32":
        return lambda w: _s32(bits_fn(w))
    if typ == "f32":
        return lambda w: np.float32(u2f(bits_fn(w)))
    if typ in ("u64", "b64"):
        return bits_fn
    if typ == "i64":
        return lambda w: _s64(bits_fn(w))
    if typ == "f64":
        return lambda w: u2d(bits_fn(w))
    sh = 16 if hi else 0
    if typ == "u16":
        return lambda w: (bits_fn(w) >> sh) & 0xFFFF
    if typ == "i16":
        return lambda w: _s16((bits_fn(w) >> sh) & 0xFFFF)
    if typ == "f16":
        return lambda w: np.uint16((bits_fn(w) >> sh) & 0xFFFF).view(np.float16)
    if typ == "bf16":
        return lambda w: np.float32(u2f(((bits_fn(w) >> sh) & 0xFFFF) << 16))
    raise ValueError(typ)


def _s32(x: int) -> int:
    x &= M32
    return x - (1 << 32) if x >> 31 else x


def _s64(x: int) -> int:
    x &= M64
    return x - (1 << 64) if x >> 63 else x


def _s16(x: int) -> int:
    return x - (1 << 16) if x >> 15 else x


def vgpr_reader(r: int, typ: str, hi: bool = False):
    h = int(hi)
    if typ in ("b32", "u32"):
        return lambda w: w.v[r]
    if typ == "f32":
        return lambda w: w.vf[r]
    if typ == "i32":
        return lambda w: w.vi[r]
    if typ in ("u64", "b64"):
        return lambda w: w.v[r].astype(np.uint64) | (w.v[r + 1].astype(np.uint64) << np.uint64(32))
    if typ == "i64":
        return lambda w: (w.v[r].astype(np.uint64) | (w.v[r + 1].astype(np.uint64) << np.uint64(32))).view(np.int64)
    if typ == "f64":
        return lambda w: (w.v[r].astype(np.uint64) | (w.v[r + 1].astype(np.uint64) << np.uint64(32))).view(np.float64)
    if typ == "u16":
        return lambda w: w.h[r, h::2]
    if typ == "i16":
        return lambda w: w.h[r, h::2].view(np.int16)
    if typ == "f16":
        return lambda w: w.hf[r, h::2]
    if typ == "bf16":
        return lambda w: (w.h[r, h::2].astype(np.uint32) << 16).view(np.float32)
    raise ValueError(typ)


def vsrc(enc: int, typ: str, ctx, lit: int | None, hi: bool = False, acc: bool = False):
    """Typed reader for a VALU source operand (VGPR row view, or a scalar for SGPR/constants)."""
    if enc >= 256:
        return vgpr_reader(enc - 256 + (256 if acc else 0), typ, hi)
    if typ in ("f16", "u16", "i16", "bf16"):
        bits = scalar_reader(enc, ctx, lit, typ)
    else:
        bits = scalar_reader(enc, ctx, lit, typ)
    return _scalar_as(typ, bits, hi and (enc < 128 or enc == 255))


# -- vector destinations ------------------------------------------------------------------
def _write_row(row, val, w, m):
    if m is None:
        if w.full:
            row[...] = val
            return
        m = w.mask
    np.copyto(row, val, where=m, casting="unsafe")


def vdst(r: int, typ: str, ctx, hi: bool = False, zero_hi: bool = False):
    """Writer `(w, value, mask=None)` for a VGPR destination of type `typ`."""
    if typ in ("b32", "u32"):
        def wr_u32(w, val, m=None):
            if not isinstance(val, np.ndarray):
                val = int(val) & M32
            _write_row(w.v[r], val, w, m)
        return wr_u32
    if typ == "i32":
        def wr_i32(w, val, m=None):
            if not isinstance(val, np.ndarray):
                val = _s32(int(val))
            _write_row(w.vi[r], val, w, m)
        return wr_i32
    if typ == "f32":
        return lambda w, val, m=None: _write_row(w.vf[r], val, w, m)
    if typ in ("u64", "b64", "i64", "f64"):
        def wr64(w, val, m=None):
            if isinstance(val, np.ndarray):
                bits = val.astype(np.float64 if typ == "f64" else val.dtype).view(np.uint64) \
                    if val.dtype.itemsize == 8 else val.astype(np.uint64)
            elif typ == "f64":
                bits = np.uint64(d2u(float(val)))
            else:
                bits = np.uint64(int(val) & M64)
            _write_row(w.v[r], (bits & np.uint64(M32)).astype(np.uint32), w, m)
            _write_row(w.v[r + 1], (bits >> np.uint64(32)).astype(np.uint32), w, m)
        return wr64
    if typ in ("f16", "u16", "i16", "bf16"):
        h = int(hi)

        def wr16(w, val, m=None):
            if typ == "bf16":
                val = bf16_bits(val)
            elif typ == "f16":
                val = np.asarray(val, dtype=np.float16).view(np.uint16)
            elif not isinstance(val, np.ndarray):
                val = int(val) & 0xFFFF
            elif val.dtype != np.uint16:
                val = val.astype(np.uint16)
            if zero_hi:  # gfx9: 16-bit VALU results clear the high half (u16 -> u32 zero-extends)
                _write_row(w.v[r], val if isinstance(val, np.ndarray) else np.asarray(val).astype(np.uint32), w, m)
            else:
                _write_row(w.h[r, h::2], val, w, m)
        return wr16
    raise ValueError(typ)


def bf16_bits(x) -> np.ndarray:
    """f32 -> bf16 bit pattern, round to nearest even (NaN stays NaN)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, (u >> np.uint32(16)) | np.uint32(0x40), rounded).astype(np.uint16)


_BITCHARS = bytes.maketrans(b"\x00\x01", b"01")


def mask_to_int(b: np.ndarray) -> int:
    """Bool lane array -> bitmask (lane i is bit i). Bools are bytes 0/1: reversed and spelled as a
    binary literal they parse in a third of the time np.packbits takes."""
    if b.dtype != np.bool_:
        b = b.astype(bool)
    return int(b.tobytes()[::-1].translate(_BITCHARS), 2)
