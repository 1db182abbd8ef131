"""Correctly rounded double-precision fused multiply-add (v_fma_f64, v_div_fmas_f64).

float64 arithmetic rounds a*b before adding c, which loses the low half of the product: the
hardware's FMA rounds once. Per lane:
- the usual case (all finite, exponents far from overflow and from the subnormal range) uses
  error-free transformations: a*b = p + e exactly (Veltkamp/Dekker splitting), c + p = s + t
  exactly (TwoSum), and the result is RN(s + RO(t + e)) with RO rounding to odd (Boldo and
  Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to
  odd", IEEE TC 2008) -- a handful of numpy operations over the wave;
- lanes with an infinite or NaN operand take IEEE's special cases (NaN propagates, inf * 0 and
  inf - inf are NaN, an infinite c with finite a*b is c);
- the remaining lanes (near overflow or underflow) are computed exactly with Python integers and
  rounded once, ties to even, subnormals included.
The sign of an exact zero result follows IEEE: -0 only when a*b and c are zeros of sign -, or
(for an exact cancellation) never, in round-to-nearest.
"""

from __future__ import annotations

import math

import numpy as np

_SPLIT = 134217729.0  # 2**27 + 1: splits a double into two 26-bit halves
# Safe window for the fast path: the splitting must not overflow (|x| < 2**995), the product and
# the sum must stay finite (exponent sum < 1020), and every partial result must be far enough
# above the subnormal range for the transformations to stay exact (exponent sum > -960).
_EMAX, _ESUM_MAX, _ESUM_MIN = 995, 1020, -960


def fma64(a, b, c) -> np.ndarray:
    """fma(a, b, c) of float64 lane arrays (or scalars), rounded once to nearest even."""
    a, b, c = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(c, np.float64))
    shape = a.shape
    a, b, c = a.ravel(), b.ravel(), c.ravel()
    with np.errstate(all="ignore"):
        naive = a * b + c  # right for every lane with a NaN or infinite a or b, or a NaN c
        out = _fast(a, b, c)
        finite_ab = np.isfinite(a) & np.isfinite(b)
        # an infinite c with finite a*b: c (a*b + c in float64 could be inf - inf when a*b overflows)
        out = np.where(finite_ab & np.isinf(c), c, out)
        special = ~(finite_ab & np.isfinite(c))
        out = np.where(special & ~(finite_ab & np.isinf(c)), naive, out)
        # a or b zero: a*b is an exact (signed) zero and a*b + c adds it exactly
        zero = finite_ab & np.isfinite(c) & ((a == 0) | (b == 0))
        out = np.where(zero, naive, out)
        ea, eb, ec = (np.frexp(x)[1] for x in (a, b, c))
        risky = ~special & ~zero & ((np.abs(ea) > _EMAX) | (np.abs(eb) > _EMAX) | (ea + eb > _ESUM_MAX)
                                    | (ea + eb < _ESUM_MIN) | (ec > _ESUM_MAX))
    if risky.any():
        out = np.array(out)
        for i in np.flatnonzero(risky).tolist():
            out[i] = exact_fma(float(a[i]), float(b[i]), float(c[i]))
    return out.reshape(shape)


def _two_sum(x, y):
    s = x + y
    bb = s - x
    return s, (x - (s - bb)) + (y - bb)


def _split(x):
    t = _SPLIT * x
    hi = t - (t - x)
    return hi, x - hi


def _fast(a, b, c):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl  # a*b = p + e exactly
    s, t = _two_sum(c, p)  # c + p = s + t exactly
    r = s + sum_to_odd(t, e)
    # an exact cancellation of nonzero terms is +0 in round-to-nearest
    return np.where(r == 0, 0.0, r)


def exact_fma(a: float, b: float, c: float) -> float:
    """fma of finite doubles with a*b != 0 (or any finite operands), by exact integer arithmetic."""
    if a == 0 or b == 0:
        return a * b + c
    ma, ea = _parts(a)
    mb, eb = _parts(b)
    mc, ec = _parts(c)
    mp, ep = ma * mb, ea + eb
    e = min(ep, ec)
    total = (mp << (ep - e)) + (mc << (ec - e))  # the exact value is total * 2**e
    if total == 0:
        return 0.0
    return _round(total, e)


def _parts(x: float) -> tuple[int, int]:
    """x = m * 2**e with integer m (signed)."""
    if x == 0:
        return 0, 0
    m, e = math.frexp(x)
    return int(m * (1 << 53)), e - 53


def _round(n: int, e: int) -> float:
    """n * 2**e rounded to the nearest double, ties to even (subnormals and overflow included)."""
    sign = -1.0 if n < 0 else 1.0
    n = abs(n)
    bits = n.bit_length()
    # keep 53 significant bits, but never below the subnormal quantum 2**-1074
    shift = max(bits - 53, -1074 - e)
    if shift > 0:
        q, r = divmod(n, 1 << shift)
        half = 1 << (shift - 1)
        if r > half or (r == half and q & 1):
            q += 1
        n, e = q, e + shift
    try:
        return sign * math.ldexp(n, e)
    except OverflowError:
        return sign * math.inf


def sum_to_odd(p, c) -> np.ndarray:
    """p + c in float64 rounded to odd (Boldo and Melquiond): an inexact sum whose last mantissa
    bit is even moves one step toward the part it lost. For a product p of two f32 (or f16)
    values, exact in float64, and an f32 (f16) c, rounding this once more to f32 (f16) is the
    correctly rounded fma -- where p + c rounded to nearest in float64 and then to f32 could land
    on an f32 tie the exact sum is not on (a double rounding). fma64's fast path rounds its low
    parts the same way. Special values pass through."""
    p, c = np.asarray(p, np.float64), np.asarray(c, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s, err = _two_sum(p, c)
        inexact = (err != 0) & np.isfinite(s) & ((np.asarray(s).view(np.uint64) & np.uint64(1)) == 0)
        return np.where(inexact, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
