"""MFMA (CDNA) and WMMA (RDNA3/RDNA4) with the per-lane operand layouts of AMD's documents.

Layouts (checked against AMD's matrix instruction calculator for CDNA2/CDNA3/RDNA3/RDNA4):
- MFMA, one block, wave64, M=N in {16, 32}, G = 64 / M lane groups, kpl = K / G values per lane:
  A[i][k] is lane i + M * (k // kpl), element k % kpl (B mirrors it with n for i);
  D[row][col] is lane col + N * ((row // 4) % G), element 4 * (row // (4 * G)) + row % 4.
  gfx950's double-K f16/bf16 forms (16x16x32, 32x32x16) are taken to use the same rule, as the
  CDNA3 fp8 forms with 8 values per lane do (no CDNA4 calculator data was available).
- WMMA gfx11 (wave32): A[i][k] is lane i (and again lane i + 16), element k; D[row][col] is lane
  col + 16 * (row % 2), element row // 2 (16-bit D: the op_sel half of each VGPR).
- WMMA gfx12 (wave32): with e values per 64 bits (4 for 16-bit types, 8 for 8-bit),
  A[i][k] is lane i + 16 * ((k // e) % 2), element (k // (2e)) * e + k % e;
  D[row][col] is lane col + 16 * (row // 8), element row % 8 (16-bit D packed two per VGPR).
"""

from __future__ import annotations

import functools
import re

import numpy as np

from tiledsl.backends.rocm.emulator.executor import builder
from tiledsl.backends.rocm.emulator.memory import EmulatorError, UnsupportedInstruction
from tiledsl.backends.rocm.emulator.operands import bf16_bits, inline_bits


@functools.cache
def fp8_table(kind: str, flavour: str) -> np.ndarray:
    """f32 value of each of the 256 fp8 codes. kind 'fp8' (e4m3) or 'bf8' (e5m2);
    flavour 'fnuz' (gfx942: bias 8/16, 0x80 is NaN, no inf/-0) or 'ocp' (e4m3fn / IEEE-like e5m2)."""
    ebits, mbits = (4, 3) if kind == "fp8" else (5, 2)
    bias = (1 << (ebits - 1)) - 1 + (1 if flavour == "fnuz" else 0)
    out = np.zeros(256, dtype=np.float32)
    for code in range(256):
        s = -1.0 if code & 0x80 else 1.0
        e = (code >> mbits) & ((1 << ebits) - 1)
        m = code & ((1 << mbits) - 1)
        if flavour == "fnuz" and code == 0x80:
            out[code] = np.nan
            continue
        if flavour == "ocp":
            if kind == "fp8" and e == 15 and m == 7:
                out[code] = np.nan
                continue
            if kind == "bf8" and e == 31:
                out[code] = np.inf * s if m == 0 else np.nan
                continue
        if e == 0:
            out[code] = s * m * 2.0 ** (1 - bias - mbits)
        else:
            out[code] = s * (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
    return out


_ELEM_BITS = {"f16": 16, "bf16": 16, "f32": 32, "i8": 8, "iu8": 8, "fp8": 8, "bf8": 8, "f64": 64, "iu4": 4}


def _elements(raw: np.ndarray, typ: str, flavour: str, signed: bool = True) -> np.ndarray:
    """u32 registers [nregs, lanes] -> per-lane element values [lanes, n] (float64/int64)."""
    lanes_major = np.ascontiguousarray(raw.T)  # [lanes, nregs], each lane's bytes in register order
    if typ == "f16":
        return lanes_major.view(np.float16).astype(np.float64)
    if typ == "bf16":
        return (lanes_major.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if typ == "f32":
        return lanes_major.view(np.float32).astype(np.float64)
    if typ == "f64":
        return lanes_major.view(np.float64)
    if typ in ("i8", "iu8"):
        return (lanes_major.view(np.int8) if signed else lanes_major.view(np.uint8)).astype(np.int64)
    if typ in ("fp8", "bf8"):
        return fp8_table(typ, flavour)[lanes_major.view(np.uint8)].astype(np.float64)
    if typ in MX_NARROW:
        # gfx950's f8f6f4 operands: 32 elements of `bits` bits packed back to back (element j at
        # bits bits*j of the lane's registers taken as one little-endian integer).
        bits, table = MX_NARROW[typ]
        stream = np.unpackbits(lanes_major.view(np.uint8), axis=1, bitorder="little")
        n = stream.shape[1] // bits
        codes = stream[:, :n * bits].reshape(-1, n, bits) @ (1 << np.arange(bits))
        return table[codes]
    raise UnsupportedInstruction(f"matrix operand type {typ}")


def _mx_table(exp_bits: int, mant_bits: int) -> np.ndarray:
    """Values of every code of an OCP MX narrow float (sign, exponent, mantissa; no infinities or
    NaNs): fp4 e2m1, fp6 e2m3, bf6 e3m2."""
    bias = (1 << (exp_bits - 1)) - 1
    codes = np.arange(1 << (1 + exp_bits + mant_bits))
    sign = np.where(codes >> (exp_bits + mant_bits) & 1, -1.0, 1.0)
    e = codes >> mant_bits & ((1 << exp_bits) - 1)
    m = codes & ((1 << mant_bits) - 1)
    mag = np.where(e == 0, m / (1 << mant_bits) * 2.0 ** (1 - bias), (1 + m / (1 << mant_bits)) * 2.0 ** (e - bias))
    return sign * mag


MX_NARROW = {"fp4": (4, _mx_table(2, 1)), "fp6": (6, _mx_table(2, 3)), "bf6": (6, _mx_table(3, 2))}
# f8f6f4 MFMAs: CBSZ (A) / BLGP (B) -> (element type, VGPRs of 32 elements, K values a lane holds
# in a row before the next lane group takes over). fp4: a lane's 32 values are one run of K; fp8:
# two runs of 16, the lane groups taking turns (lane group g holds runs g, g + 64 / M, ...). Both
# were found by running Triton's MX-scaled dots (tests/test_third_party_corpus.py): only these
# agree with numpy when formats mix or scales differ along K. fp6/bf6 are refused: no compiler here
# emits them, so their layout could not be checked.
_F8F6F4 = {0: ("fp8", 8, 16), 1: ("bf8", 8, 16), 4: ("fp4", 4, 32)}


@functools.cache
def _f8f6f4_layout(M: int, K: int, run: int):
    """(lane [M, K], element [M, K]) of an f8f6f4 operand whose lanes hold K in runs of `run`."""
    groups = 64 // M
    i, k = np.meshgrid(np.arange(M), np.arange(K), indexing="ij")
    chunk = k // run
    return i + M * (chunk % groups), run * (chunk // groups) + k % run


def _e8m0(bits: np.ndarray) -> np.ndarray:
    """OCP E8M0 scale bytes: 2^(e - 127), and 0xFF a NaN."""
    e = bits.astype(np.float64)
    return np.where(bits == 0xFF, np.nan, np.exp2(e - 127))


def _read_regs(w, enc, nregs, acc, ctx, typ):
    """Registers of a matrix operand; inline constants / SGPRs broadcast to all lanes."""
    if enc >= 256:
        r = enc - 256 + (256 if acc else 0)
        return w.v[r:r + nregs]
    bits = inline_bits(enc, typ if typ in ("f16", "f32", "f64") else "b32")
    if bits is None:
        if enc < 128:
            bits = w.s[enc]
        else:
            raise UnsupportedInstruction(f"matrix operand encoding {enc}")
    return np.full((nregs, w.W), bits & 0xFFFFFFFF, dtype=np.uint32)


# -- MFMA ---------------------------------------------------------------------------------
_MFMA = re.compile(r"v_mfma_(f32|i32|f64)_(\d+)x(\d+)x(\d+)_?(?:(\d+)b_?)?"
                   r"(f32|f16|bf16|i8|xf32|fp8_fp8|fp8_bf8|bf8_fp8|bf8_bf8|f8f6f4|f64)(_1k)?$")


@functools.cache
def mfma_layout(M: int, N: int, K: int):
    """(A lane index [M, K], A element index [M, K], D lane [M, N], D element [M, N])."""
    G = 64 // M
    kpl = K // G
    i, k = np.meshgrid(np.arange(M), np.arange(K), indexing="ij")
    a_lane, a_elem = i + M * (k // kpl), k % kpl
    GN = 64 // N
    row, col = np.meshgrid(np.arange(M), np.arange(N), indexing="ij")
    d_lane = col + N * ((row // 4) % GN)
    d_elem = 4 * (row // (4 * GN)) + row % 4
    return a_lane, a_elem, d_lane, d_elem


@builder("v_mfma")
def _b_mfma(inst, ctx):
    m = _MFMA.match(inst.name)
    if not m:
        raise UnsupportedInstruction(f"MFMA variant {inst.name}")
    out_t, M, N, K, blocks, in_t, _k1 = m.groups()
    M, N, K = int(M), int(N), int(K)
    nblocks = int(blocks or 1)
    if blocks is None and in_t in ("f16", "bf16", "f32", "i8"):
        # gfx90a's names leave the block count out (v_mfma_f32_4x4x4f16 has 16): a form whose lanes
        # each hold all of K is multi-block, one M-row block per M lanes.
        if K == inst.widths.get("s0", 1) * 32 // _ELEM_BITS[in_t] and M < 64:
            nblocks = 64 // M
    if in_t == "xf32":
        # How the instruction cuts its f32 inputs to XF32's 10 mantissa bits (truncation or a
        # rounding) is not documented where we could check it: refused rather than guessed.
        raise UnsupportedInstruction(f"{inst.name}: xf32 MFMAs are not modelled (the conversion of their f32 "
                                     "inputs to XF32 is undocumented)")
    if M != N or (M not in (16, 32) if nblocks == 1 else M * nblocks != 64):
        raise UnsupportedInstruction(f"{inst.name}: non-square MFMA variants are not modelled")
    f, nxt = inst.f, ctx.nxt
    scales = _scale_prefix(inst, ctx) if in_t == "f8f6f4" else None
    if (f["cbsz"] or f["abid"]) and nblocks == 1:
        # f8f6f4 takes CBSZ (and BLGP) as A's (B's) format; its ABID bits are 1 in a scaled pair
        # (LLVM's encoding of the MFMA after a v_mfma_ld_scale_b32) and 0 otherwise.
        if in_t != "f8f6f4" or f["abid"] != (1 if scales else 0):
            raise UnsupportedInstruction(f"{inst.name} with cbsz/abid broadcast")
    flavour = ctx.image.arch.fp8_flavour or "ocp"
    if in_t in ("fp8_fp8", "fp8_bf8", "bf8_fp8", "bf8_bf8"):
        ta, tb = in_t.split("_")
    elif in_t == "f8f6f4":
        if f["cbsz"] not in _F8F6F4 or f["blgp"] not in _F8F6F4:
            raise UnsupportedInstruction(f"{inst.name} with operand formats cbsz={f['cbsz']}, blgp={f['blgp']} "
                                         "(fp6/bf6: their register layout is not modelled)")
        ta, tb = _F8F6F4[f["cbsz"]][0], _F8F6F4[f["blgp"]][0]
    else:
        ta = tb = in_t
    if nblocks > 1:
        return _multi_block_mfma(inst, ctx, out_t, M, K, nblocks, in_t, flavour)
    if f["blgp"] and in_t != "f8f6f4":
        raise UnsupportedInstruction(f"{inst.name} with blgp={f['blgp']} (lane-group broadcast)")
    a_lane, a_elem, d_lane, d_elem = mfma_layout(M, N, K)
    na, nb = inst.widths.get("s0", 1), inst.widths.get("s1", 1)
    kpl = K // (64 // M)
    # Where each operand's (row, k) sits; an E8M0 scale covers 32 values of K, read from the lane
    # that holds the 32-value run (fp4's layout) whichever lanes hold them.
    a_at = b_at = (a_lane, a_elem)
    if in_t == "f8f6f4":  # the formats set how many of the operand's 8 VGPRs it reads, and where
        (_, na, run_a), (_, nb, run_b) = _F8F6F4[f["cbsz"]], _F8F6F4[f["blgp"]]
        a_at, b_at = _f8f6f4_layout(M, K, run_a), _f8f6f4_layout(M, K, run_b)
    else:
        na = max(na, kpl * _ELEM_BITS[ta] // 32)
        nb = max(nb, kpl * _ELEM_BITS[tb] // 32)
    scale_lane = _f8f6f4_layout(M, K, 32)[0] if scales else None
    out_per = 2 if out_t == "f64" else 1
    nd = M * N // 64 * out_per
    acc_a, acc_b = f["acc"] & 1, f["acc"] >> 1 & 1
    acc_cd = f["acc_cd"]
    s0, s1, s2, vd = f["src0"], f["src1"], f["src2"], f["vdst"] + (256 if acc_cd else 0)
    intmode = out_t == "i32"
    fast = _fast_matmul(ta, tb, out_t, s0, s1, s2, vd, na, nb, nd, acc_a, acc_b, acc_cd, a_lane, a_elem,
                        d_lane, d_elem, 64, nxt)
    if fast is not None:
        return fast

    def h(w):
        A = _elements(_read_regs(w, s0, na, acc_a, ctx, ta), ta, flavour)[a_at]
        B = _elements(_read_regs(w, s1, nb, acc_b, ctx, tb), tb, flavour)[b_at]  # [N, K]
        if scales is not None:  # every 32 values of K times their E8M0 scale byte
            (enc_a, byte_a), (enc_b, byte_b) = scales
            A = A * _e8m0(_read_regs(w, enc_a, 1, 0, ctx, "b32")[0] >> np.uint32(8 * byte_a) & 0xFF)[scale_lane]
            B = B * _e8m0(_read_regs(w, enc_b, 1, 0, ctx, "b32")[0] >> np.uint32(8 * byte_b) & 0xFF)[scale_lane]
        craw = _read_regs(w, s2, nd, acc_cd, ctx, "f64" if out_t == "f64" else "f32")
        if out_t == "f64":
            C = np.ascontiguousarray(craw.T).view(np.float64)[d_lane, d_elem]
        elif intmode:
            C = craw.T.view(np.int32).astype(np.int64)[d_lane, d_elem]
        else:
            C = craw.T.view(np.float32).astype(np.float64)[d_lane, d_elem]
        D = A @ B.T + C
        out = np.zeros((64, nd // out_per), dtype=np.float64 if not intmode else np.int64)
        out[d_lane, d_elem] = D
        if out_t == "f64":
            bits = np.ascontiguousarray(out).view(np.uint32)
        elif intmode:
            bits = (out & 0xFFFFFFFF).astype(np.uint32)
        else:
            bits = out.astype(np.float32).view(np.uint32)
        w.v[vd:vd + nd] = bits.T
        return nxt
    return h


def _multi_block_mfma(inst, ctx, out_t, M, K, nblocks, in_t, flavour):
    """v_mfma_*_{M}x{M}x{K}_{n}b (M * n = 64 lanes): n independent M x M x K products, block b in
    lanes M*b .. M*b + M-1. Each lane holds all K values of one row of A (of B) in its block, and
    one column of D: D[b][i][j] is register i of lane M*b + j (the layouts of AMD's matrix
    instruction calculator for the 4x4x4_16b, 16x16x4_4b and 32x32x4_2b forms). CBSZ/ABID
    broadcast A: in each group of 2^CBSZ blocks, every block takes block ABID's A (Triton's 4x4
    dots use it)."""
    f, nxt = inst.f, ctx.nxt
    if f["blgp"] or in_t not in ("f16", "bf16", "f32", "i8") or out_t == "f64":
        raise UnsupportedInstruction(f"{inst.name}: multi-block form with blgp={f['blgp']} or {in_t}/{out_t} "
                                     "is not modelled")
    ta = tb = in_t
    b, i, k = np.meshgrid(np.arange(nblocks), np.arange(M), np.arange(K), indexing="ij")
    a_block = ((b >> f["cbsz"]) << f["cbsz"]) | f["abid"]
    a_lane, a_elem, b_lane = M * a_block + i, k, M * b + i  # [blocks, M, K]
    b, i, j = np.meshgrid(np.arange(nblocks), np.arange(M), np.arange(M), indexing="ij")
    d_lane, d_elem = M * b + j, i                       # [blocks, M (row), M (col)]
    na = max(inst.widths.get("s0", 1), K * _ELEM_BITS[ta] // 32)
    nb = max(inst.widths.get("s1", 1), K * _ELEM_BITS[tb] // 32)
    nd = M
    acc_a, acc_b, acc_cd = f["acc"] & 1, f["acc"] >> 1 & 1, f["acc_cd"]
    s0, s1, s2, vd = f["src0"], f["src1"], f["src2"], f["vdst"] + (256 if acc_cd else 0)
    intmode = out_t == "i32"

    def h(w):
        A = _elements(_read_regs(w, s0, na, acc_a, ctx, ta), ta, flavour)[a_lane, a_elem]
        B = _elements(_read_regs(w, s1, nb, acc_b, ctx, tb), tb, flavour)[b_lane, a_elem]
        craw = _read_regs(w, s2, nd, acc_cd, ctx, "f32")
        C = (craw.T.view(np.int32).astype(np.int64) if intmode else craw.T.view(np.float32).astype(np.float64))
        D = np.einsum("bik,bjk->bij", A, B) + C[d_lane, d_elem]
        out = np.zeros((64, nd), dtype=np.int64 if intmode else np.float64)
        out[d_lane, d_elem] = D
        bits = (out & 0xFFFFFFFF).astype(np.uint32) if intmode else out.astype(np.float32).view(np.uint32)
        w.v[vd:vd + nd] = bits.T
        return nxt
    return h


def _operand_gather(enc, acc, n, typ, idx):
    """Closure w -> float64 operand matrix, gathered from n registers with the (register, column)
    index `idx` (one fancy index instead of transposing, converting and indexing all lanes), or
    None. Two index arrays rather than a flat index into a reshaped slice: a wave's registers may
    be a strided view (lockstep.py), which reshape would copy."""
    if enc < 256:
        return None
    r = enc - 256 + (256 if acc else 0)
    ri, ci = r + idx[0], idx[1]
    if typ == "f16":
        return lambda w: w.hf[ri, ci].astype(np.float64)
    if typ == "bf16":
        return lambda w: (w.h[ri, ci].astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    if typ == "f32":
        return lambda w: w.vf[ri, ci].astype(np.float64)
    return None


def _flat_index(lane, elem, bits, W):
    """(register, column) of (lane, element) in an operand's registers: 16-bit elements pack two
    per VGPR (low half first; columns of the 16-bit view), 32-bit elements take one VGPR each."""
    if bits == 16:
        return elem // 2, 2 * lane + elem % 2
    return elem, lane


def _fast_matmul(ta, tb, out_t, s0, s1, s2, vd, na, nb, nd, acc_a, acc_b, acc_cd, a_lane, a_elem, d_lane, d_elem,
                 W, nxt, neg=0, check_rep=None, cmod=0):
    """MFMA/WMMA with float (f16/bf16/f32) A/B in registers and an f32 accumulator: the same
    float64 `A @ B.T + C` as the generic path (so the same rounding), with every operand moved
    by one precomputed fancy index. `neg` bit 0/1 negates all of A/B; `cmod` bit 0 negates C,
    bit 1 takes its absolute value first. None when the form is not covered."""
    if out_t != "f32" or ta not in ("f16", "bf16", "f32") or tb not in ("f16", "bf16", "f32"):
        return None
    ia, ib = _flat_index(a_lane, a_elem, _ELEM_BITS[ta], W), _flat_index(a_lane, a_elem, _ELEM_BITS[tb], W)
    rd_a, rd_b = _operand_gather(s0, acc_a, na, ta, ia), _operand_gather(s1, acc_b, nb, tb, ib)
    if rd_a is None or rd_b is None:
        return None
    ie, il = _flat_index(d_lane, d_elem, 32, W)
    ce = cval = None
    if s2 >= 256:
        ce = s2 - 256 + (256 if acc_cd else 0) + ie

        def rd_c(w):
            return _c_modified(w.vf[ce, il], cmod)  # float32: exact in the float64 sum below
    else:
        bits = inline_bits(s2, "f32")
        if bits is None:
            return None
        cval = _c_modified(np.float64(np.uint32(bits).view(np.float32)), cmod)

        def rd_c(w):
            return cval
    de = vd + ie

    def h(w):
        if check_rep is not None:
            check_rep(w)
        A, B = rd_a(w), rd_b(w)
        if neg & 1:
            A = -A
        if neg & 2:
            B = -B
        w.vf[de, il] = A @ B.T + rd_c(w)  # every (lane, element) of D once; rounds like astype
        return nxt
    # What lockstep.py needs to run the same product for many waves at once.
    h.plan = {"a": (s0 - 256 + (256 if acc_a else 0), ia, ta), "b": (s1 - 256 + (256 if acc_b else 0), ib, tb),
              "c": (ce, cval), "d": (de, il), "neg": neg, "cmod": cmod,
              "replicated": (check_rep is not None, na, s0 - 256, s1 - 256), "W": W}
    return h


def _c_modified(c, cmod):
    """C with WMMA's source-2 modifiers: {NEG_HI[2], NEG[2]} act as {ABS, NEG}."""
    if cmod & 2:
        c = np.abs(c)
    return -c if cmod & 1 else c


# -- WMMA ---------------------------------------------------------------------------------
_WMMA = re.compile(r"v_wmma_(f32|f16|bf16|i32)_16x16x16_(f16|bf16|iu8|fp8_fp8|fp8_bf8|bf8_fp8|bf8_bf8)$")


@functools.cache
def wmma_layout(gen: str, bits: int):
    """(A lane [16,16], A element [16,16], D lane [16,16], D element [16,16]) for wave32."""
    i, k = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    row, col = i, k
    if gen == "gfx11":
        a_lane, a_elem = i, k
        d_lane, d_elem = col + 16 * (row % 2), row // 2
    else:
        e = 64 // bits
        a_lane = i + 16 * ((k // e) % 2)
        a_elem = (k // (2 * e)) * e + k % e
        d_lane, d_elem = col + 16 * (row // 8), row % 8
    return a_lane, a_elem, d_lane, d_elem


@builder("v_wmma")
def _b_wmma(inst, ctx):
    m = _WMMA.match(inst.name)
    if not m or ctx.wave_size != 32:
        raise UnsupportedInstruction(f"WMMA variant {inst.name} (wave{ctx.wave_size})")
    out_t, in_t = m.groups()
    ta, tb = in_t.split("_") if "_" in in_t else (in_t, in_t)
    gen, f, nxt = ctx.gen, inst.f, ctx.nxt
    flavour = ctx.image.arch.fp8_flavour or "ocp"
    bits = _ELEM_BITS[ta]
    a_lane, a_elem, d_lane, d_elem = wmma_layout(gen, bits)
    na = (16 if gen == "gfx11" else 8) * bits // 32
    nd_vals = 8
    d16 = out_t in ("f16", "bf16")
    nd = nd_vals if (gen == "gfx11" or not d16) else 4
    s0, s1, s2, vd = f["src0"], f["src1"], f["src2"], f["vdst"]
    intmode = out_t == "i32"
    neg, _, cmod, sign_a, sign_b = _wmma_modifiers(inst, ta, intmode)
    signed_a, signed_b = bool(neg & 1), bool(neg & 2)  # iu8: the signedness of A and B
    opsel_hi = bool(f["opsel"] & 4) if gen == "gfx11" else False
    if f["opsel"] & ~(4 if gen == "gfx11" and d16 else 0):
        raise UnsupportedInstruction(f"{inst.raw_name} with op_sel {f['opsel']:#x}")
    if f["clamp"] and not intmode:
        raise UnsupportedInstruction(f"{inst.raw_name}: clamp on a float WMMA is not modelled")
    clamp = bool(f["clamp"])
    fast = None
    # each of A, B negated as a whole (both halves of every register) or not at all
    whole = all(sg is None or (sg < 0).all() for sg in (sign_a, sign_b))
    if not d16 and not intmode and ta in ("f16", "bf16") and whole:
        check = _replication_check(inst, s0, s1, na, ta, tb) if gen == "gfx11" else None
        if check is not None or gen != "gfx11":
            whole_neg = (sign_a is not None) | (sign_b is not None) << 1
            fast = _fast_matmul(ta, tb, out_t, s0, s1, s2, vd, na, na, nd, False, False, False, a_lane, a_elem,
                                d_lane, d_elem, 32, nxt, whole_neg, check, cmod)
    if fast is not None:
        return fast
    signs = [None if sg is None else sg[a_elem] for sg in (sign_a, sign_b)]  # per element of A / B

    def operand(w, enc, typ, signed):
        vals = _elements(_read_regs(w, enc, na, False, ctx, typ), typ, flavour, signed)
        if gen == "gfx11":
            if not np.array_equal(vals[:16], vals[16:]):
                raise EmulatorError(f"{inst.raw_name}: gfx11 WMMA needs its A/B operand replicated in lanes "
                                    "0-15 and 16-31, and the two halves differ")
        return vals[a_lane, a_elem]

    def h(w):
        A = operand(w, s0, ta, signed_a)
        B = operand(w, s1, tb, signed_b)  # [N, K]
        if signs[0] is not None:
            A = A * signs[0]
        if signs[1] is not None:
            B = B * signs[1]
        craw = _read_regs(w, s2, nd, False, ctx, "f16" if d16 else "f32")
        C = _c_modified(_unpack_d(craw, out_t, gen, opsel_hi)[d_lane, d_elem], cmod)
        D = A @ B.T + C
        if clamp:  # iu8: the exact sum saturated to i32
            D = np.clip(D, -2**31, 2**31 - 1)
        out = np.zeros((32, nd_vals), dtype=np.int64 if intmode else np.float64)
        out[d_lane, d_elem] = D
        w.v[vd:vd + nd] = _pack_d(out, out_t, gen, opsel_hi, w.v[vd:vd + nd])
        return nxt
    return h


def _wmma_modifiers(inst, ta, intmode):
    """(neg, neg_hi, C modifier bits, per-element sign of A or None, of B or None), checked against
    the RDNA3/RDNA4 rules (AMD's ISA and matrix instruction calculator): for f16/bf16 inputs
    NEG[0]/NEG[1] negate the low 16-bit half of every A/B register and NEG_HI[0]/NEG_HI[1] the high
    half, and {NEG_HI[2], NEG[2]} act as {ABS, NEG} on C; for the integer types NEG[1:0] is the
    signedness of A/B and NEG[2], NEG_HI must be 0; the fp8/bf8 forms take no NEG bits."""
    f = inst.f
    neg, neg_hi = f["neg"], f["neg_hi"]
    if intmode:
        if neg & 4 or neg_hi:
            raise UnsupportedInstruction(f"{inst.raw_name}: neg_lo[2]/neg_hi on an integer WMMA")
        return neg, 0, 0, None, None
    if ta not in ("f16", "bf16"):
        if neg or neg_hi:
            raise UnsupportedInstruction(f"{inst.raw_name}: neg_lo/neg_hi on an 8-bit float WMMA")
        return 0, 0, 0, None, None
    cmod = (neg >> 2 & 1) | (neg_hi >> 2 & 1) << 1
    signs = []
    for i in (0, 1):
        lo, hi = neg >> i & 1, neg_hi >> i & 1
        # element e of a lane sits in register e // 2, half e % 2 (16-bit elements)
        signs.append(np.array([-1.0 if lo else 1.0, -1.0 if hi else 1.0] * 8) if lo or hi else None)
    return neg, neg_hi, cmod, signs[0], signs[1]


def _replication_check(inst, s0, s1, na, ta, tb):
    """gfx11 WMMA reads A/B from lanes 0-15 and needs lanes 16-31 to hold the same values. Equal
    register bits pass at once; otherwise the values are compared as the generic path does (so
    -0 still matches +0)."""
    if s0 < 256 or s1 < 256:
        return None
    ops = ((s0 - 256, ta), (s1 - 256, tb))

    def check(w):
        for r, typ in ops:
            regs = w.v[r:r + na]
            if regs[:, :16].tobytes() != regs[:, 16:].tobytes():  # cheaper than np.array_equal
                vals = _elements(regs, typ, "ocp")
                if not np.array_equal(vals[:16], vals[16:]):
                    raise EmulatorError(f"{inst.raw_name}: gfx11 WMMA needs its A/B operand replicated in lanes "
                                        "0-15 and 16-31, and the two halves differ")
    return check


def _unpack_d(raw, out_t, gen, hi):
    """C/D registers -> [lanes, 8] values."""
    lm = np.ascontiguousarray(raw.T)
    if out_t == "f32":
        return lm.view(np.float32).astype(np.float64)
    if out_t == "i32":
        return lm.view(np.int32).astype(np.int64)
    halves = lm.view(np.uint16)
    if gen == "gfx11":  # one value per VGPR, in the op_sel half
        halves = halves[:, 1::2] if hi else halves[:, 0::2]
    if out_t == "f16":
        return halves.view(np.float16).astype(np.float64)
    return (halves.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _pack_d(out, out_t, gen, hi, old):
    if out_t == "f32":
        return out.astype(np.float32).view(np.uint32).T
    if out_t == "i32":
        return (out & 0xFFFFFFFF).astype(np.uint32).T
    h16 = out.astype(np.float16).view(np.uint16) if out_t == "f16" else bf16_bits(out.astype(np.float32))
    if gen == "gfx11":
        lm = np.ascontiguousarray(old.T).copy().view(np.uint16)
        lm[:, (1 if hi else 0)::2] = h16
        return lm.view(np.uint32).T
    return np.ascontiguousarray(h16).view(np.uint32).T


def _scale_prefix(inst, ctx):
    """For an f8f6f4 MFMA right after a v_mfma_ld_scale_b32 (the pair LLVM writes as
    v_mfma_scale_f32_*_f8f6f4): ((A scale source, byte), (B scale source, byte)), the byte of each
    lane's scale dword being {op_sel_hi[i], op_sel[i]} of the prefix; None when there is none."""
    img = ctx.image
    i = img.index_of.get(inst.addr, 0)
    if i == 0 or img.insts[i - 1].name != "v_mfma_ld_scale_b32":
        return None
    pf = img.insts[i - 1].f
    return ((pf["src0"], (pf["opsel"] & 1) | (pf["opsel_hi"] & 1) << 1),
            (pf["src1"], (pf["opsel"] >> 1 & 1) | (pf["opsel_hi"] >> 1 & 1) << 1))


@builder("v_mfma_ld_scale_b32")
def _b_ld_scale(inst, ctx):
    """The scaled MFMA's prefix does nothing by itself: the MFMA after it reads its scale
    operands (_scale_prefix). Anything else after it is refused."""
    img = ctx.image
    i = img.index_of.get(inst.addr, -1)
    after = img.insts[i + 1] if 0 <= i < len(img.insts) - 1 else None
    if after is None or not _MFMA.match(after.name) or not after.name.endswith("_f8f6f4"):
        raise UnsupportedInstruction("v_mfma_ld_scale_b32 not followed by an f8f6f4 MFMA")
    nxt = ctx.nxt
    return lambda w: nxt


def register_names(table_names) -> None:
    """Route every v_mfma_* / v_wmma_* mnemonic of an opcode table to the builders above."""
    from tiledsl.backends.rocm.emulator.executor import BUILDERS

    for n in table_names:
        if n == "v_mfma_ld_scale_b32":  # a scaled MFMA's prefix: its own builder (_b_ld_scale)
            continue
        if n.startswith("v_mfma_"):
            BUILDERS.setdefault(n, _b_mfma)
        elif n.startswith("v_wmma_"):
            BUILDERS.setdefault(n, _b_wmma)
