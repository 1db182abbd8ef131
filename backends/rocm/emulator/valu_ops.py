"""Semantics of the lane-wise VALU instructions: name -> (dst type, source types, function).

Functions take numpy arrays (one value per lane) or scalars of the declared source types and
return the destination value; the framework in valu.py handles encodings, modifiers, exec
masking and write-back. Types: f32 f64 f16 bf16 i32 u32 b32 i64 u64 b64 i16 u16.
"""

from __future__ import annotations

import numpy as np

from tiledsl.backends.rocm.emulator.fma64 import fma64, sum_to_odd

U32, U64 = np.uint32, np.uint64


def _u(x):
    return np.asarray(x).astype(np.uint32) if isinstance(x, np.ndarray) else np.uint32(int(x) & 0xFFFFFFFF)


def _i(x):
    return np.asarray(x).astype(np.int64)


def _f32(x):
    return np.asarray(x, dtype=np.float32)


def _sh(x, m):
    return _u(x) & U32(m)


def _sh64(s):
    return (_i(s) & 63).astype(np.uint64)


def _exp2(x):
    return np.exp2(_f32(x))


def _log2(x):
    return np.log2(_f32(x))


def _rcp(x):
    return np.float32(1) / _f32(x)


def _rsq(x):
    return np.float32(1) / np.sqrt(_f32(x))


def _sqrt(x):
    return np.sqrt(_f32(x))


def _cvt_i32(x, lo=-2**31, hi=2**31 - 1):
    """f32/f64 -> integer conversion: truncate, saturate, NaN -> 0 (as the hardware does)."""
    a = np.asarray(x, dtype=np.float64)
    r = np.clip(np.trunc(np.nan_to_num(a, nan=0.0, posinf=hi, neginf=lo)), lo, hi)
    return r.astype(np.int64)


def _cvt_u32(x):
    return _cvt_i32(x, 0, 2**32 - 1)


def _rndne(x):
    return np.rint(x)


def _fract(x):
    return x - np.floor(x)


def _frexp_mant(x):
    m, _ = np.frexp(x)
    return np.where(np.isfinite(x), m, x)


def _frexp_exp(x):
    _, e = np.frexp(np.asarray(x))
    return np.where(np.isfinite(x), e, 0)


def _two_over_pi_bits(bits: int) -> int:
    """floor(2/pi * 2^bits): the first `bits` fraction bits of 2/pi (an integer below 2^bits), from
    Machin's pi = 16 atan(1/5) - 4 atan(1/239) in integer fixed point with 64 guard bits."""
    scale = bits + 64

    def atan_inv(n: int) -> int:  # atan(1/n) * 2^scale
        total, power, k, sign = 0, (1 << scale) // n, 1, 1
        while power:
            total += sign * (power // k)
            power //= n * n
            k, sign = k + 2, -sign
        return total

    pi = 16 * atan_inv(5) - 4 * atan_inv(239)
    return (2 << (scale + bits)) // pi


# v_trig_preop_f64's table: 37 words of 2/pi (1184 bits), as the hardware and LLVM's constant folder
# hold it (a segment reaching past it gives 0).
_TRIG_PREOP_BITS = 37 * 32
_TWO_OVER_PI = _two_over_pi_bits(_TRIG_PREOP_BITS)
assert _TWO_OVER_PI >> (_TRIG_PREOP_BITS - 64) == 0xA2F9836E4E441529  # 2/pi = 0.a2f9836e4e441529...


def _trig_preop(x, seg):
    """v_trig_preop_f64: the 53 bits of 2/pi's fraction starting at bit 53 * segment (plus
    exponent - 1077 for inputs above 2^53, so that x times the segments loses nothing), as an f64
    of their true weight (scaled up by 2^128 for inputs of exponent 1968 and up); 0 when the
    segment runs past the table; a NaN input comes back quiet (LLVM folds it the same way)."""
    xs, segs = np.atleast_1d(np.asarray(x, np.float64)), np.atleast_1d(_i(seg))
    xs, segs = np.broadcast_arrays(xs, segs)
    out = np.empty(xs.shape, np.float64)
    for j, (v, s) in enumerate(zip(xs.ravel(), segs.ravel(), strict=True)):
        if np.isnan(v):
            out.flat[j] = v
            continue
        exponent = (int(np.float64(v).view(np.uint64)) >> 52) & 0x7FF
        shift = (int(s) & 31) * 53 + max(0, exponent - 1077)
        if (shift >> 5) + 2 >= _TRIG_PREOP_BITS // 32:
            out.flat[j] = 0.0
            continue
        segment = (_TWO_OVER_PI >> (_TRIG_PREOP_BITS - shift - 53)) & ((1 << 53) - 1)
        out.flat[j] = np.ldexp(float(segment), -53 - shift + (128 if exponent >= 1968 else 0))
    return out.reshape(np.shape(x)) if np.ndim(x) else out[0]


def _ldexp(x, e):
    return np.ldexp(x, np.clip(_i(e), -1000, 1000))


def _med3(a, b, c):
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def _fmed3(a, b, c):
    """v_med3_f32/f16 (and gfx12's _num forms): the median, except that a NaN among the inputs
    makes it v_min3 of the three (the ISA's pseudo-code; v_min ignores a quiet NaN operand)."""
    med = np.fmax(np.fmin(a, b), np.fmin(np.fmax(a, b), c))
    nan = np.isnan(a) | np.isnan(b) | np.isnan(c)
    if not np.any(nan):
        return med
    return np.where(nan, np.fmin(np.fmin(a, b), c), med)


def clamp01(r, nan_to_zero: bool = True):
    """The VALU clamp of a float result: into [0, 1], -0 to +0 (as LLVM folds clamp(-0)), and a
    NaN to 0 under MODE.DX10_CLAMP (HSA kernels' default, and always on gfx12) or kept otherwise."""
    r = np.asarray(r)
    t = r.dtype.type
    out = np.where(r > 0, np.minimum(r, t(1)), t(0))
    if not nan_to_zero:
        out = np.where(np.isnan(r), r, out)
    return out


def _bfe_u(a, off, w):
    if not isinstance(off, np.ndarray) and not isinstance(w, np.ndarray):  # the usual constant field
        o, n = int(off) & 31, int(w) & 31
        return (a >> o) & ((1 << n) - 1)
    o, n = _i(off) & 31, _i(w) & 31
    return np.where(n == 0, 0, (_i(_u(a)) >> o) & ((np.int64(1) << n) - 1))


def _bfe_i(a, off, w):
    # The ISA shifts S0 as a signed value: a field reaching past bit 31 fills with the sign bit.
    o, n = _i(off) & 31, _i(w) & 31
    v = (_i(np.asarray(_u(a)).astype(np.int32)) >> o) & ((np.int64(1) << n) - 1)
    sign = np.int64(1) << np.maximum(n - 1, 0)
    return np.where(n == 0, 0, (v ^ sign) - sign)


def _alignbit(a, b, c):
    v = (_i(_u(a)).astype(np.uint64) << U64(32)) | _i(_u(b)).astype(np.uint64)
    return (v >> (_i(c) & 31).astype(np.uint64)).astype(np.uint32)


def _alignbyte(a, b, c):
    v = (_i(_u(a)).astype(np.uint64) << U64(32)) | _i(_u(b)).astype(np.uint64)
    return (v >> ((_i(c) & 3) * 8).astype(np.uint64)).astype(np.uint32)


def _perm(a, b, sel):
    """v_perm_b32: byte select from {a, b} (b is bytes 0-3, a bytes 4-7) with constant codes."""
    src = (_i(_u(a)).astype(np.uint64) << U64(32)) | _i(_u(b)).astype(np.uint64)
    sel = _i(_u(sel))
    uniform = np.ndim(sel) == 0 or bool((sel == np.ravel(sel)[0]).all())
    code = int(np.ravel(sel)[0])
    if uniform and all(((code >> (8 * k)) & 0xFF) < 8 for k in range(4)):
        # The common case (LLVM's byte shuffles): one constant selector of plain byte picks.
        fast = np.zeros(src.shape, dtype=np.uint64)
        for byte in range(4):
            s_k = (code >> (8 * byte)) & 0xFF
            fast |= ((src >> U64(8 * s_k)) & U64(0xFF)) << U64(8 * byte)
        return fast.astype(np.uint32)
    out = np.zeros(np.broadcast(src, sel).shape, dtype=np.int64)
    for byte in range(4):
        s = (sel >> (8 * byte)) & 0xFF
        picked = ((src >> (np.minimum(s, 7) * 8).astype(np.uint64)) & U64(0xFF)).astype(np.int64)
        sign_of = lambda k: np.where(((src >> U64(8 * k + 7)) & U64(1)).astype(bool), 0xFF, 0)  # noqa: E731
        val = np.where(s < 8, picked, 0)
        val = np.where(s == 8, sign_of(1), val)
        val = np.where(s == 9, sign_of(3), val)
        val = np.where(s == 10, sign_of(5), val)
        val = np.where(s == 11, sign_of(7), val)
        val = np.where(s == 12, 0, val)
        val = np.where(s >= 13, 0xFF, val)
        out |= (val & 0xFF) << (8 * byte)
    return out.astype(np.uint32)


def _ffbh_u(a):
    a = _i(_u(a))
    bl = np.floor(np.log2(np.maximum(a, 1))).astype(np.int64)
    return np.where(a == 0, -1, 31 - bl)


def _ffbl(a):
    a = _i(_u(a))
    low = a & -a
    return np.where(a == 0, -1, np.floor(np.log2(np.maximum(low, 1))).astype(np.int64))


def _ffbh_i(a):
    a = _i(np.asarray(a).astype(np.int32))
    inv = np.where(a < 0, ~a, a)
    r = _ffbh_u(inv)
    return np.where((a == 0) | (a == -1), -1, r)


def _bcnt(a, b):
    a = np.asarray(_u(a)).astype(np.uint64)
    cnt = np.zeros(a.shape, dtype=np.int64)
    for sh in range(32):
        cnt += ((a >> U64(sh)) & U64(1)).astype(np.int64)
    return cnt + _i(_u(b))


def _mul24(a, b, signed):
    if not signed:
        return np.multiply(a & 0xFFFFFF, b & 0xFFFFFF, dtype=np.int64)
    def ext(x):
        x = _i(_u(x)) & 0xFFFFFF
        return (x ^ 0x800000) - 0x800000 if signed else x
    return ext(a) * ext(b)


def _mulhi_u(a, b):
    return ((_i(_u(a)).astype(np.uint64) * _i(_u(b)).astype(np.uint64)) >> U64(32)).astype(np.uint32)


def _mulhi_i(a, b):
    return ((_i(np.asarray(a).astype(np.int32)) * _i(np.asarray(b).astype(np.int32))) >> 32).astype(np.int64)


def _class(x, mask):
    """v_cmp_class: IEEE class bits: 0 sNaN 1 qNaN 2 -inf 3 -norm 4 -denorm 5 -0 6 +0 7 +denorm 8 +norm 9 +inf."""
    x = np.asarray(x)
    m = _i(_u(mask))
    tiny = np.finfo(x.dtype).tiny if x.dtype.kind == "f" else np.finfo(np.float32).tiny
    neg = np.signbit(x)
    nan = np.isnan(x)
    inf = np.isinf(x)
    zero = x == 0
    den = ~nan & ~inf & ~zero & (np.abs(x) < tiny)
    nor = ~nan & ~inf & ~zero & ~den
    bits = [nan, nan, inf & neg, nor & neg, den & neg, zero & neg, zero & ~neg, den & ~neg, nor & ~neg, inf & ~neg]
    r = np.zeros(np.broadcast(x, m).shape, dtype=bool)
    for i, b in enumerate(bits):
        r |= b & (((m >> i) & 1) == 1)
    return r


def _div_scale(a, b, c):
    # The scaling only matters for denormal/huge operands; the quotient sequence LLVM emits is
    # numerically correct with scale 1 for ordinary values, which is what we model.
    return a


def _div_fixup(a, b, c):
    """V_DIV_FIXUP (the ISA's pseudo-code): a = approximate quotient, b = denominator, c =
    numerator. NaNs, zeros and infinities among b and c give IEEE's quotient; otherwise the
    magnitude of a with the sign of b xor c. (LLVM's f16 division rounds a -0 quotient's
    correction to +0 before this fixup, which puts the sign back: -0 / 3 is -0.)"""
    with np.errstate(all="ignore"):
        exact = c / b
    sign = np.signbit(b) ^ np.signbit(c)
    signed = np.where(sign, -np.abs(a), np.abs(a))
    special = np.isnan(b) | np.isnan(c) | (b == 0) | (c == 0) | np.isinf(b) | np.isinf(c) | np.isnan(a)
    return np.where(special, exact, signed)


F = "f32"
OPS: dict[str, tuple[str, tuple[str, ...], object]] = {
    # f32 arithmetic
    "v_add_f32": (F, (F, F), np.add), "v_sub_f32": (F, (F, F), np.subtract),
    "v_subrev_f32": (F, (F, F), lambda a, b: b - a), "v_mul_f32": (F, (F, F), np.multiply),
    "v_mul_legacy_f32": (F, (F, F), lambda a, b: np.where((a == 0) | (b == 0), np.float32(0), a * b)),
    "v_mul_dx9_zero_f32": (F, (F, F), lambda a, b: np.where((a == 0) | (b == 0), np.float32(0), a * b)),
    "v_fma_f32": (F, (F, F, F), lambda a, b, c: _fma32(a, b, c)),
    "v_mad_f32": (F, (F, F, F), lambda a, b, c: _f32(a) * b + c),
    "v_fmac_f32": (F, (F, F, F), lambda a, b, c: _fma32(a, b, c)),
    "v_mac_f32": (F, (F, F, F), lambda a, b, c: _f32(a) * b + c),
    "v_fmamk_f32": (F, (F, F, F), lambda a, k, b: _fma32(a, k, b)),
    "v_fmaak_f32": (F, (F, F, F), lambda a, b, k: _fma32(a, b, k)),
    "v_madmk_f32": (F, (F, F, F), lambda a, k, b: _f32(a) * k + b),
    "v_madak_f32": (F, (F, F, F), lambda a, b, k: _f32(a) * b + k),
    "v_max_f32": (F, (F, F), np.fmax), "v_min_f32": (F, (F, F), np.fmin),
    "v_max_num_f32": (F, (F, F), np.fmax), "v_min_num_f32": (F, (F, F), np.fmin),
    "v_maximum_f32": (F, (F, F), np.maximum), "v_minimum_f32": (F, (F, F), np.minimum),
    "v_max3_f32": (F, (F, F, F), lambda a, b, c: np.fmax(np.fmax(a, b), c)),
    "v_min3_f32": (F, (F, F, F), lambda a, b, c: np.fmin(np.fmin(a, b), c)),
    "v_max3_num_f32": (F, (F, F, F), lambda a, b, c: np.fmax(np.fmax(a, b), c)),
    "v_min3_num_f32": (F, (F, F, F), lambda a, b, c: np.fmin(np.fmin(a, b), c)),
    "v_maximum3_f32": (F, (F, F, F), lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_minimum3_f32": (F, (F, F, F), lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_med3_f32": (F, (F, F, F), _fmed3), "v_med3_num_f32": (F, (F, F, F), _fmed3),
    "v_maxmin_f32": (F, (F, F, F), lambda a, b, c: np.fmin(np.fmax(a, b), c)),
    "v_minmax_f32": (F, (F, F, F), lambda a, b, c: np.fmax(np.fmin(a, b), c)),
    "v_maxmin_num_f32": (F, (F, F, F), lambda a, b, c: np.fmin(np.fmax(a, b), c)),
    "v_minmax_num_f32": (F, (F, F, F), lambda a, b, c: np.fmax(np.fmin(a, b), c)),
    "v_exp_f32": (F, (F,), _exp2), "v_log_f32": (F, (F,), _log2), "v_rcp_f32": (F, (F,), _rcp),
    "v_rcp_iflag_f32": (F, (F,), _rcp), "v_rsq_f32": (F, (F,), _rsq), "v_sqrt_f32": (F, (F,), _sqrt),
    "v_exp_legacy_f32": (F, (F,), _exp2), "v_log_legacy_f32": (F, (F,), _log2),
    "v_sin_f32": (F, (F,), lambda a: np.sin(_f32(a) * np.float32(2 * np.pi))),
    "v_cos_f32": (F, (F,), lambda a: np.cos(_f32(a) * np.float32(2 * np.pi))),
    # The low 4 bits as a signed fraction in sixteenths: 0..7 -> 0..0.4375, 8..15 -> -0.5..-0.0625.
    "v_cvt_off_f32_i4": (F, ("u32",),
                         lambda a: ((((_u(a) & 15).astype(np.int32) ^ 8) - 8).astype(np.float32) / np.float32(16))),
    "v_floor_f32": (F, (F,), np.floor), "v_ceil_f32": (F, (F,), np.ceil), "v_trunc_f32": (F, (F,), np.trunc),
    "v_rndne_f32": (F, (F,), _rndne), "v_fract_f32": (F, (F,), _fract),
    "v_frexp_mant_f32": (F, (F,), _frexp_mant), "v_frexp_exp_i32_f32": ("i32", (F,), _frexp_exp),
    "v_ldexp_f32": (F, (F, "i32"), _ldexp),
    "v_div_scale_f32": (F, (F, F, F), _div_scale), "v_div_fixup_f32": (F, (F, F, F), _div_fixup),
    "v_div_fmas_f32": (F, (F, F, F), lambda a, b, c: _fma32(a, b, c)),
    "v_mov_b32": ("b32", ("b32",), lambda a: a), "v_mov_b64": ("b64", ("b64",), lambda a: a),
    "v_cndmask_b32": ("b32", ("b32", "b32", "mask"), lambda a, b, m: np.where(m, b, a)),
    # conversions
    "v_cvt_f32_i32": (F, ("i32",), lambda a: np.asarray(a, dtype=np.float32)),
    "v_cvt_f32_u32": (F, ("u32",), lambda a: np.asarray(a, dtype=np.float32)),
    "v_cvt_i32_f32": ("i32", (F,), _cvt_i32), "v_cvt_u32_f32": ("u32", (F,), _cvt_u32),
    "v_cvt_flr_i32_f32": ("i32", (F,), lambda a: _cvt_i32(np.floor(a))),
    "v_cvt_floor_i32_f32": ("i32", (F,), lambda a: _cvt_i32(np.floor(a))),
    "v_cvt_rpi_i32_f32": ("i32", (F,), lambda a: _cvt_i32(np.floor(_f32(a) + np.float32(0.5)))),
    "v_cvt_nearest_i32_f32": ("i32", (F,), lambda a: _cvt_i32(np.floor(_f32(a) + np.float32(0.5)))),
    "v_cvt_f16_f32": ("f16", (F,), lambda a: np.asarray(a, dtype=np.float16)),
    "v_cvt_f32_f16": (F, ("f16",), lambda a: np.asarray(a, dtype=np.float32)),
    "v_cvt_f32_bf16": (F, ("bf16",), lambda a: np.asarray(a, dtype=np.float32)),
    "v_cvt_f64_f32": ("f64", (F,), lambda a: np.asarray(a, dtype=np.float64)),
    "v_cvt_f32_f64": (F, ("f64",), lambda a: np.asarray(a, dtype=np.float32)),
    "v_cvt_f64_i32": ("f64", ("i32",), lambda a: np.asarray(a, dtype=np.float64)),
    "v_cvt_f64_u32": ("f64", ("u32",), lambda a: np.asarray(a, dtype=np.float64)),
    "v_cvt_i32_f64": ("i32", ("f64",), _cvt_i32), "v_cvt_u32_f64": ("u32", ("f64",), _cvt_u32),
    "v_cvt_f32_ubyte0": (F, ("u32",), lambda a: (_u(a) & U32(0xFF)).astype(np.float32)),
    "v_cvt_f32_ubyte1": (F, ("u32",), lambda a: ((_u(a) >> U32(8)) & U32(0xFF)).astype(np.float32)),
    "v_cvt_f32_ubyte2": (F, ("u32",), lambda a: ((_u(a) >> U32(16)) & U32(0xFF)).astype(np.float32)),
    "v_cvt_f32_ubyte3": (F, ("u32",), lambda a: (_u(a) >> U32(24)).astype(np.float32)),
    "v_cvt_pkrtz_f16_f32": ("b32", (F, F), lambda a, b: _pack16(_rtz16(a), _rtz16(b))),
    "v_cvt_pk_rtz_f16_f32": ("b32", (F, F), lambda a, b: _pack16(_rtz16(a), _rtz16(b))),
    "v_cvt_pk_f16_f32": ("b32", (F, F), lambda a, b: _pack16(_h16(a), _h16(b))),
    "v_cvt_pk_bf16_f32": ("b32", (F, F), lambda a, b: _pack16(_bf16(a), _bf16(b))),
    "v_cvt_f16_i16": ("f16", ("i16",), lambda a: np.asarray(a, dtype=np.float16)),
    "v_cvt_f16_u16": ("f16", ("u16",), lambda a: np.asarray(a, dtype=np.float16)),
    "v_cvt_i16_f16": ("i16", ("f16",), lambda a: _cvt_i32(a, -2**15, 2**15 - 1)),
    "v_cvt_u16_f16": ("u16", ("f16",), lambda a: _cvt_i32(a, 0, 2**16 - 1)),
    "v_cvt_i32_i16": ("i32", ("i16",), lambda a: np.asarray(a, dtype=np.int32)),
    "v_cvt_u32_u16": ("u32", ("u16",), lambda a: np.asarray(a, dtype=np.uint32)),
    "v_cvt_pk_i16_i32": ("b32", ("i32", "i32"), lambda a, b: _pack16(np.clip(_i(a), -2**15, 2**15 - 1),
                                                                     np.clip(_i(b), -2**15, 2**15 - 1))),
    "v_cvt_pk_u16_u32": ("b32", ("u32", "u32"), lambda a, b: _pack16(np.minimum(_i(a), 65535),
                                                                     np.minimum(_i(b), 65535))),
    "v_pack_b32_f16": ("b32", ("f16", "f16"), lambda a, b: _pack16(_h16(a), _h16(b))),
    # integer
    "v_add_u32": ("u32", ("u32", "u32"), np.add), "v_add_nc_u32": ("u32", ("u32", "u32"), np.add),
    "v_sub_u32": ("u32", ("u32", "u32"), np.subtract), "v_sub_nc_u32": ("u32", ("u32", "u32"), np.subtract),
    "v_subrev_u32": ("u32", ("u32", "u32"), lambda a, b: _i(b) - _i(a)),
    "v_subrev_nc_u32": ("u32", ("u32", "u32"), lambda a, b: _i(b) - _i(a)),
    "v_add_i32": ("i32", ("i32", "i32"), lambda a, b: _i(a) + _i(b)),
    "v_add_nc_i32": ("i32", ("i32", "i32"), lambda a, b: _i(a) + _i(b)),
    "v_sub_i32": ("i32", ("i32", "i32"), lambda a, b: _i(a) - _i(b)),
    "v_sub_nc_i32": ("i32", ("i32", "i32"), lambda a, b: _i(a) - _i(b)),
    "v_add3_u32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: _i(a) + _i(b) + _i(c)),
    "v_mul_lo_u32": ("u32", ("u32", "u32"), lambda a, b: _i(a) * _i(b)),
    "v_mul_hi_u32": ("u32", ("u32", "u32"), _mulhi_u), "v_mul_hi_i32": ("i32", ("i32", "i32"), _mulhi_i),
    "v_mul_u32_u24": ("u32", ("u32", "u32"), lambda a, b: _mul24(a, b, False)),
    "v_mul_i32_i24": ("i32", ("u32", "u32"), lambda a, b: _mul24(a, b, True)),
    "v_mul_hi_u32_u24": ("u32", ("u32", "u32"), lambda a, b: _mul24(a, b, False) >> 32),
    "v_mul_hi_i32_i24": ("i32", ("u32", "u32"), lambda a, b: _mul24(a, b, True) >> 32),
    "v_mad_u32_u24": ("u32", ("u32", "u32", "u32"), lambda a, b, c: _mul24(a, b, False) + _i(c)),
    "v_mad_i32_i24": ("i32", ("u32", "u32", "i32"), lambda a, b, c: _mul24(a, b, True) + _i(c)),
    "v_lshlrev_b32": ("b32", ("u32", "u32"), lambda s, a: _u(a) << _sh(s, 31)),
    "v_lshrrev_b32": ("b32", ("u32", "u32"), lambda s, a: _u(a) >> _sh(s, 31)),
    "v_ashrrev_i32": ("i32", ("u32", "i32"), lambda s, a: np.asarray(a, dtype=np.int32) >> _i(_sh(s, 31))),
    "v_lshlrev_b64": ("b64", ("u32", "u64"), lambda s, a: np.asarray(a, dtype=np.uint64) << _sh64(s)),
    "v_lshrrev_b64": ("b64", ("u32", "u64"), lambda s, a: np.asarray(a, dtype=np.uint64) >> _sh64(s)),
    "v_ashrrev_i64": ("i64", ("u32", "i64"), lambda s, a: np.asarray(a, dtype=np.int64) >> (_i(s) & 63)),
    "v_lshl_add_u32": ("u32", ("u32", "u32", "u32"), lambda a, s, c: (_i(a) << (_i(s) & 31)) + _i(c)),
    "v_add_lshl_u32": ("u32", ("u32", "u32", "u32"), lambda a, b, s: (_i(a) + _i(b)) << (_i(s) & 31)),
    "v_lshl_or_b32": ("u32", ("u32", "u32", "u32"), lambda a, s, c: (_i(a) << (_i(s) & 31)) | _i(c)),
    "v_lshl_add_u64": ("u64", ("u64", "u32", "u64"),
                       lambda a, s, c: (np.asarray(a, dtype=np.uint64) << (_i(s) & 7).astype(np.uint64))
                       + np.asarray(c, dtype=np.uint64)),
    # Bitwise ops on u32 operands (uint32 arrays or ints below 2**32) stay in range: no int64 detour.
    "v_and_or_b32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: (a & b) | c),
    "v_or3_b32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: a | b | c),
    "v_xor3_b32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: a ^ b ^ c),
    "v_xad_u32": ("u32", ("u32", "u32", "u32"), lambda a, b, c: (_i(a) ^ _i(b)) + _i(c)),
    "v_and_b32": ("u32", ("u32", "u32"), np.bitwise_and),
    "v_or_b32": ("u32", ("u32", "u32"), np.bitwise_or),
    "v_xor_b32": ("u32", ("u32", "u32"), np.bitwise_xor),
    "v_xnor_b32": ("u32", ("u32", "u32"), lambda a, b: ~(_i(a) ^ _i(b))),
    "v_not_b32": ("u32", ("u32",), lambda a: ~_i(a)), "v_bfrev_b32": ("u32", ("u32",), lambda a: _brev32(a)),
    "v_bfe_u32": ("u32", ("u32", "u32", "u32"), _bfe_u), "v_bfe_i32": ("i32", ("u32", "u32", "u32"), _bfe_i),
    "v_bfi_b32": ("u32", ("u32", "u32", "u32"), lambda m, a, b: (_i(m) & _i(a)) | (~_i(m) & _i(b))),
    "v_bfm_b32": ("u32", ("u32", "u32"), lambda w, o: ((np.int64(1) << (_i(w) & 31)) - 1) << (_i(o) & 31)),
    "v_alignbit_b32": ("u32", ("u32", "u32", "u32"), _alignbit),
    "v_alignbyte_b32": ("u32", ("u32", "u32", "u32"), _alignbyte),
    "v_perm_b32": ("u32", ("u32", "u32", "u32"), _perm),
    "v_max_i32": ("i32", ("i32", "i32"), np.maximum), "v_min_i32": ("i32", ("i32", "i32"), np.minimum),
    "v_max_u32": ("u32", ("u32", "u32"), np.maximum), "v_min_u32": ("u32", ("u32", "u32"), np.minimum),
    "v_max3_i32": ("i32", ("i32",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_min3_i32": ("i32", ("i32",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_max3_u32": ("u32", ("u32",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_min3_u32": ("u32", ("u32",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_med3_i32": ("i32", ("i32",) * 3, _med3), "v_med3_u32": ("u32", ("u32",) * 3, _med3),
    "v_maxmin_i32": ("i32", ("i32",) * 3, lambda a, b, c: np.minimum(np.maximum(a, b), c)),
    "v_minmax_i32": ("i32", ("i32",) * 3, lambda a, b, c: np.maximum(np.minimum(a, b), c)),
    "v_maxmin_u32": ("u32", ("u32",) * 3, lambda a, b, c: np.minimum(np.maximum(a, b), c)),
    "v_minmax_u32": ("u32", ("u32",) * 3, lambda a, b, c: np.maximum(np.minimum(a, b), c)),
    "v_ffbh_u32": ("i32", ("u32",), _ffbh_u), "v_clz_i32_u32": ("i32", ("u32",), _ffbh_u),
    "v_ffbl_b32": ("i32", ("u32",), _ffbl), "v_ctz_i32_b32": ("i32", ("u32",), _ffbl),
    "v_ffbh_i32": ("i32", ("i32",), _ffbh_i), "v_cls_i32": ("i32", ("i32",), _ffbh_i),
    "v_bcnt_u32_b32": ("u32", ("u32", "u32"), _bcnt),
    "v_mad_u64_u32": ("u64", ("u32", "u32", "u64"),
                      lambda a, b, c: _i(a).astype(np.uint64) * _i(b).astype(np.uint64) + np.asarray(c, np.uint64)),
    "v_mad_i64_i32": ("i64", ("i32", "i32", "i64"), lambda a, b, c: _i(a) * _i(b) + np.asarray(c, np.int64)),
    # 16-bit
    "v_add_f16": ("f16", ("f16", "f16"), np.add), "v_sub_f16": ("f16", ("f16", "f16"), np.subtract),
    "v_subrev_f16": ("f16", ("f16", "f16"), lambda a, b: b - a), "v_mul_f16": ("f16", ("f16", "f16"), np.multiply),
    "v_fma_f16": ("f16", ("f16",) * 3, lambda a, b, c: _fma16(a, b, c)),
    "v_fmac_f16": ("f16", ("f16",) * 3, lambda a, b, c: _fma16(a, b, c)),
    "v_mac_f16": ("f16", ("f16",) * 3, lambda a, b, c: _fma16(a, b, c)),
    "v_mad_f16": ("f16", ("f16",) * 3, lambda a, b, c: _fma16(a, b, c)),
    "v_max_f16": ("f16", ("f16", "f16"), np.fmax), "v_min_f16": ("f16", ("f16", "f16"), np.fmin),
    "v_max_num_f16": ("f16", ("f16", "f16"), np.fmax), "v_min_num_f16": ("f16", ("f16", "f16"), np.fmin),
    "v_exp_f16": ("f16", ("f16",), lambda a: _exp2(a)), "v_log_f16": ("f16", ("f16",), lambda a: _log2(a)),
    "v_rcp_f16": ("f16", ("f16",), lambda a: _rcp(a)), "v_sqrt_f16": ("f16", ("f16",), lambda a: _sqrt(a)),
    "v_rsq_f16": ("f16", ("f16",), lambda a: _rsq(a)),
    "v_ldexp_f16": ("f16", ("f16", "i16"), lambda a, e: _ldexp(np.asarray(a, np.float32), e)),
    "v_floor_f16": ("f16", ("f16",), np.floor), "v_ceil_f16": ("f16", ("f16",), np.ceil),
    "v_trunc_f16": ("f16", ("f16",), np.trunc), "v_rndne_f16": ("f16", ("f16",), _rndne),
    "v_mov_b16": ("u16", ("u16",), lambda a: a),
    "v_add_u16": ("u16", ("u16", "u16"), lambda a, b: _i(a) + _i(b)),
    "v_add_nc_u16": ("u16", ("u16", "u16"), lambda a, b: _i(a) + _i(b)),
    "v_sub_u16": ("u16", ("u16", "u16"), lambda a, b: _i(a) - _i(b)),
    "v_sub_nc_u16": ("u16", ("u16", "u16"), lambda a, b: _i(a) - _i(b)),
    "v_mul_lo_u16": ("u16", ("u16", "u16"), lambda a, b: _i(a) * _i(b)),
    "v_lshlrev_b16": ("u16", ("u16", "u16"), lambda s, a: _i(a) << (_i(s) & 15)),
    "v_lshrrev_b16": ("u16", ("u16", "u16"), lambda s, a: _i(a) >> (_i(s) & 15)),
    "v_and_b16": ("u16", ("u16", "u16"), lambda a, b: _i(a) & _i(b)),
    "v_or_b16": ("u16", ("u16", "u16"), lambda a, b: _i(a) | _i(b)),
    "v_xor_b16": ("u16", ("u16", "u16"), lambda a, b: _i(a) ^ _i(b)),
    "v_not_b16": ("u16", ("u16",), lambda a: ~_i(a)),
    "v_max_u16": ("u16", ("u16", "u16"), np.maximum), "v_min_u16": ("u16", ("u16", "u16"), np.minimum),
    "v_max_i16": ("i16", ("i16", "i16"), np.maximum), "v_min_i16": ("i16", ("i16", "i16"), np.minimum),
    # LLVM narrows i32 arithmetic it can bound to 16 bits (a // -3 of a small range: v_ashrrev_i16)
    "v_ashrrev_i16": ("i16", ("u16", "i16"), lambda s, a: np.asarray(a, np.int16) >> (_i(s) & 15)),
    "v_add_i16": ("i16", ("i16", "i16"), lambda a, b: _i(a) + _i(b)),
    "v_add_nc_i16": ("i16", ("i16", "i16"), lambda a, b: _i(a) + _i(b)),
    "v_sub_i16": ("i16", ("i16", "i16"), lambda a, b: _i(a) - _i(b)),
    "v_sub_nc_i16": ("i16", ("i16", "i16"), lambda a, b: _i(a) - _i(b)),
    "v_mad_u16": ("u16", ("u16",) * 3, lambda a, b, c: _i(a) * _i(b) + _i(c)),
    "v_mad_i16": ("i16", ("i16",) * 3, lambda a, b, c: _i(a) * _i(b) + _i(c)),
    "v_mad_u32_u16": ("u32", ("u16", "u16", "u32"), lambda a, b, c: _i(a) * _i(b) + _i(c)),
    "v_mad_i32_i16": ("i32", ("i16", "i16", "i32"), lambda a, b, c: _i(a) * _i(b) + _i(c)),
    "v_max3_i16": ("i16", ("i16",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_min3_i16": ("i16", ("i16",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_max3_u16": ("u16", ("u16",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_min3_u16": ("u16", ("u16",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_med3_i16": ("i16", ("i16",) * 3, _med3), "v_med3_u16": ("u16", ("u16",) * 3, _med3),
    "v_cndmask_b16": ("u16", ("u16", "u16", "mask"), lambda a, b, m: np.where(m, b, a)),
    # f64
    "v_add_f64": ("f64", ("f64", "f64"), np.add), "v_mul_f64": ("f64", ("f64", "f64"), np.multiply),
    "v_fma_f64": ("f64", ("f64",) * 3, fma64), "v_fmac_f64": ("f64", ("f64",) * 3, fma64),
    "v_max_f64": ("f64", ("f64", "f64"), np.fmax), "v_min_f64": ("f64", ("f64", "f64"), np.fmin),
    "v_rcp_f64": ("f64", ("f64",), lambda a: 1.0 / np.asarray(a)),
    "v_sqrt_f64": ("f64", ("f64",), np.sqrt), "v_rsq_f64": ("f64", ("f64",), lambda a: 1.0 / np.sqrt(a)),
    "v_floor_f64": ("f64", ("f64",), np.floor), "v_trunc_f64": ("f64", ("f64",), np.trunc),
    "v_ceil_f64": ("f64", ("f64",), np.ceil), "v_rndne_f64": ("f64", ("f64",), _rndne),
    "v_fract_f64": ("f64", ("f64",), _fract), "v_ldexp_f64": ("f64", ("f64", "i32"), _ldexp),
    "v_div_fixup_f64": ("f64", ("f64",) * 3, _div_fixup), "v_div_fmas_f64": ("f64", ("f64",) * 3, fma64),
    "v_div_scale_f64": ("f64", ("f64",) * 3, _div_scale),
    "v_frexp_mant_f64": ("f64", ("f64",), _frexp_mant), "v_frexp_exp_i32_f64": ("i32", ("f64",), _frexp_exp),
    "v_trig_preop_f64": ("f64", ("f64", "u32"), _trig_preop),
}
for _t in ("f32", "f16"):
    for _a, _b in (("max", "max_num"), ("min", "min_num")):
        OPS.setdefault(f"v_{_a}3_{_t}", OPS.get(f"v_{_a}3_f32") if _t == "f32" else
                       ("f16", ("f16",) * 3, np.fmax if _a == "max" else np.fmin))
OPS["v_max3_f16"] = ("f16", ("f16",) * 3, lambda a, b, c: np.fmax(np.fmax(a, b), c))
OPS["v_min3_f16"] = ("f16", ("f16",) * 3, lambda a, b, c: np.fmin(np.fmin(a, b), c))
OPS["v_max3_num_f16"] = OPS["v_max3_f16"]
OPS["v_min3_num_f16"] = OPS["v_min3_f16"]
OPS["v_med3_f16"] = ("f16", ("f16",) * 3, _fmed3)
# LLVM's f16 division: the quotient through f32 (v_rcp_f32, a multiply, v_cvt_f16_f32), then this
# fixup of the special cases (NaN, infinities, zeros) against numerator and denominator in f16.
OPS["v_div_fixup_f16"] = ("f16", ("f16",) * 3, _div_fixup)
OPS["v_med3_num_f16"] = OPS["v_med3_f16"]

OPS["v_mad_co_u64_u32"] = OPS["v_mad_u64_u32"]
OPS["v_mad_co_i64_i32"] = OPS["v_mad_i64_i32"]

# Carry-out (VOP2 -> VCC, VOP3B -> sdst) and carry-in forms: name -> (fn(a, b, cin) -> wide result, kind)
CARRY = {
    "v_add_co_u32": ("add", False), "v_add_i32_co": ("add", False), "v_sub_co_u32": ("sub", False),
    "v_subrev_co_u32": ("subrev", False), "v_addc_co_u32": ("add", True), "v_add_co_ci_u32": ("add", True),
    "v_subb_co_u32": ("sub", True), "v_sub_co_ci_u32": ("sub", True), "v_subbrev_co_u32": ("subrev", True),
    "v_subrev_co_ci_u32": ("subrev", True),
}


def _fma32(a, b, c):
    """One rounding: the f32 product is exact in float64, the sum rounded to odd there, then to f32."""
    return sum_to_odd(np.asarray(a, np.float64) * np.asarray(b, np.float64), c).astype(np.float32)


def _fma16(a, b, c):
    return sum_to_odd(np.asarray(a, np.float64) * np.asarray(b, np.float64), c).astype(np.float16)


def _h16(x):
    return np.asarray(x, dtype=np.float16).view(np.uint16).astype(np.int64)


def _rtz16(x):
    """f32 -> f16 rounding toward zero (v_cvt_pkrtz)."""
    x = np.asarray(x, dtype=np.float32)
    h = x.astype(np.float16)
    hf = h.astype(np.float32)
    too_big = np.abs(hf) > np.abs(x)
    fixed = np.where(too_big & np.isfinite(x), np.nextafter(h, np.float16(0)), h)
    fixed = np.where(np.isinf(h) & np.isfinite(x), np.copysign(np.float16(65504), h), fixed)
    return fixed.astype(np.float16).view(np.uint16).astype(np.int64)


def _bf16(x):
    from tiledsl.backends.rocm.emulator.operands import bf16_bits

    return bf16_bits(x).astype(np.int64)


def _pack16(lo, hi):
    return (np.asarray(lo, dtype=np.int64) & 0xFFFF) | ((np.asarray(hi, dtype=np.int64) & 0xFFFF) << 16)


def _brev32(a):
    a = _i(a) & 0xFFFFFFFF
    r = np.zeros(np.shape(a), dtype=np.int64)
    for i in range(32):
        r |= ((a >> i) & 1) << (31 - i)
    return r


# VOPC compare predicates
FCMP = {"f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "lt": np.less, "eq": np.equal,
        "le": np.less_equal, "gt": np.greater, "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal,
        "o": lambda a, b: ~np.isnan(a) & ~np.isnan(b), "u": lambda a, b: np.isnan(a) | np.isnan(b),
        "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
        "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
        "tru": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
        "t": lambda a, b: np.ones(np.broadcast(a, b).shape, bool)}
ICMP = {"f": FCMP["f"], "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater,
        "ne": np.not_equal, "lg": np.not_equal, "ge": np.greater_equal, "t": FCMP["t"], "tru": FCMP["t"]}
