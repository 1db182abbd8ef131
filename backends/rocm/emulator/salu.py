"""Scalar ALU, scalar control flow and program-control instructions (SOP1/SOP2/SOPC/SOPK/SOPP).

Scalar values are Python ints holding the register bits; SCC is `wave.scc`. Names cover the
gfx9, gfx11 and gfx12 spellings (s_add_u32 / s_add_co_u32, s_andn2 / s_and_not1, ...).
"""

from __future__ import annotations

import math

import numpy as np  # noqa: E402  (after the emulator imports on purpose: numpy only for f16 helpers)

from tiledsl.backends.rocm.emulator.executor import BARRIER, END, builder
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.emulator.operands import (
    M32,
    M64,
    _s32,
    _s64,
    f2u,
    h2u,
    scalar_reader,
    scalar_writer,
    u2f,
)
from tiledsl.backends.rocm.emulator.valu_ops import clamp01

# name -> (wide, fn(a, b) -> (result, scc or None)); scc None leaves SCC unchanged.
_SOP2 = {
    "s_add_u32": (0, lambda a, b: ((a + b) & M32, (a + b) >> 32)),
    "s_sub_u32": (0, lambda a, b: ((a - b) & M32, int(b > a))),
    "s_add_i32": (0, lambda a, b: ((a + b) & M32, _ovf(a, b, a + b))),
    "s_sub_i32": (0, lambda a, b: ((a - b) & M32, _ovf(a, b ^ 0x80000000, a - b))),
    "s_min_i32": (0, lambda a, b: (a if _s32(a) < _s32(b) else b, int(_s32(a) < _s32(b)))),
    "s_min_u32": (0, lambda a, b: (min(a, b), int(a < b))),
    "s_max_i32": (0, lambda a, b: (a if _s32(a) > _s32(b) else b, int(_s32(a) > _s32(b)))),
    "s_max_u32": (0, lambda a, b: (max(a, b), int(a > b))),
    "s_and_b32": (0, lambda a, b: (a & b, int(a & b != 0))),
    "s_or_b32": (0, lambda a, b: (a | b, int(a | b != 0))),
    "s_xor_b32": (0, lambda a, b: (a ^ b, int(a ^ b != 0))),
    "s_andn2_b32": (0, lambda a, b: (a & ~b & M32, int(a & ~b & M32 != 0))),
    "s_orn2_b32": (0, lambda a, b: ((a | ~b) & M32, int((a | ~b) & M32 != 0))),
    "s_nand_b32": (0, lambda a, b: (~(a & b) & M32, int(~(a & b) & M32 != 0))),
    "s_nor_b32": (0, lambda a, b: (~(a | b) & M32, int(~(a | b) & M32 != 0))),
    "s_xnor_b32": (0, lambda a, b: (~(a ^ b) & M32, int(~(a ^ b) & M32 != 0))),
    "s_and_b64": (1, lambda a, b: (a & b, int(a & b != 0))),
    "s_or_b64": (1, lambda a, b: (a | b, int(a | b != 0))),
    "s_xor_b64": (1, lambda a, b: (a ^ b, int(a ^ b != 0))),
    "s_andn2_b64": (1, lambda a, b: (a & ~b & M64, int(a & ~b & M64 != 0))),
    "s_orn2_b64": (1, lambda a, b: ((a | ~b) & M64, int((a | ~b) & M64 != 0))),
    "s_nand_b64": (1, lambda a, b: (~(a & b) & M64, int(~(a & b) & M64 != 0))),
    "s_nor_b64": (1, lambda a, b: (~(a | b) & M64, int(~(a | b) & M64 != 0))),
    "s_xnor_b64": (1, lambda a, b: (~(a ^ b) & M64, int(~(a ^ b) & M64 != 0))),
    "s_lshl_b32": (0, lambda a, b: ((a << (b & 31)) & M32, int((a << (b & 31)) & M32 != 0))),
    "s_lshr_b32": (0, lambda a, b: (a >> (b & 31), int(a >> (b & 31) != 0))),
    "s_ashr_i32": (0, lambda a, b: ((_s32(a) >> (b & 31)) & M32, int(_s32(a) >> (b & 31) != 0))),
    "s_lshl1_add_u32": (0, lambda a, b: (((a << 1) + b) & M32, ((a << 1 & M32) + b) >> 32)),
    "s_lshl2_add_u32": (0, lambda a, b: (((a << 2) + b) & M32, ((a << 2 & M32) + b) >> 32)),
    "s_lshl3_add_u32": (0, lambda a, b: (((a << 3) + b) & M32, ((a << 3 & M32) + b) >> 32)),
    "s_lshl4_add_u32": (0, lambda a, b: (((a << 4) + b) & M32, ((a << 4 & M32) + b) >> 32)),
    "s_bfm_b32": (0, lambda a, b: ((((1 << (a & 31)) - 1) << (b & 31)) & M32, None)),
    "s_mul_i32": (0, lambda a, b: ((_s32(a) * _s32(b)) & M32, None)),
    "s_mul_hi_u32": (0, lambda a, b: ((a * b) >> 32, None)),
    "s_mul_hi_i32": (0, lambda a, b: (((_s32(a) * _s32(b)) >> 32) & M32, None)),
    "s_bfe_u32": (0, lambda a, b: _bfe(a, b, False, 32)),
    "s_bfe_i32": (0, lambda a, b: _bfe(a, b, True, 32)),
    "s_absdiff_i32": (0, lambda a, b: (abs(_s32(a) - _s32(b)) & M32, int(_s32(a) != _s32(b)))),
    "s_pack_ll_b32_b16": (0, lambda a, b: ((a & 0xFFFF) | (b & 0xFFFF) << 16, None)),
    "s_pack_lh_b32_b16": (0, lambda a, b: ((a & 0xFFFF) | (b & 0xFFFF0000), None)),
    "s_pack_hh_b32_b16": (0, lambda a, b: ((a >> 16) | (b & 0xFFFF0000), None)),
    "s_pack_hl_b32_b16": (0, lambda a, b: ((a >> 16) | (b & 0xFFFF) << 16, None)),
    "s_add_nc_u64": (1, lambda a, b: ((a + b) & M64, None)),
    "s_sub_nc_u64": (1, lambda a, b: ((a - b) & M64, None)),
    "s_mul_u64": (1, lambda a, b: ((a * b) & M64, None)),
    "s_add_f32": (0, lambda a, b: (_f(np.float32(u2f(a)) + np.float32(u2f(b))), None)),
    "s_sub_f32": (0, lambda a, b: (_f(np.float32(u2f(a)) - np.float32(u2f(b))), None)),
    "s_mul_f32": (0, lambda a, b: (_f(np.float32(u2f(a)) * np.float32(u2f(b))), None)),
    "s_max_num_f32": (0, lambda a, b: (_f(np.fmax(np.float32(u2f(a)), np.float32(u2f(b)))), None)),
    "s_min_num_f32": (0, lambda a, b: (_f(np.fmin(np.float32(u2f(a)), np.float32(u2f(b)))), None)),
    "s_cvt_pk_rtz_f16_f32": (0, lambda a, b: (h2u(u2f(a)) | h2u(u2f(b)) << 16, None)),
}
for _n in ("and", "or"):
    _SOP2[f"s_{_n}_not1_b32"] = _SOP2[f"s_{_n}n2_b32"]
    _SOP2[f"s_{_n}_not1_b64"] = _SOP2[f"s_{_n}n2_b64"]
_SOP2["s_add_co_u32"] = _SOP2["s_add_u32"]
_SOP2["s_sub_co_u32"] = _SOP2["s_sub_u32"]
_SOP2["s_add_co_i32"] = _SOP2["s_add_i32"]
_SOP2["s_sub_co_i32"] = _SOP2["s_sub_i32"]
_SHIFT64 = {"s_lshl_b64": lambda a, b: (a << (b & 63)) & M64, "s_lshr_b64": lambda a, b: a >> (b & 63),
            "s_ashr_i64": lambda a, b: (_s64(a) >> (b & 63)) & M64,
            "s_bfm_b64": lambda a, b: (((1 << (a & 63)) - 1) << (b & 63)) & M64}


def _f(x) -> int:
    return f2u(float(np.float32(x)))


def _ovf(a: int, b: int, r: int) -> int:
    """Signed overflow of a 32-bit add (SCC of s_add_i32)."""
    return int(((a ^ r) & (b ^ r)) >> 31 & 1)


def _bfe(a: int, b: int, signed: bool, bits: int):
    off, width = b & (bits - 1), (b >> 16) & 0x7F
    if width == 0:
        return 0, 0
    if signed:  # the ISA shifts S0 as a signed value: a field past the top fills with the sign bit
        a = _s32(a) if bits == 32 else _s64(a)
    v = (a >> off) & ((1 << width) - 1)
    if signed and width < bits and v >> (width - 1):
        v -= 1 << width
    mask = M32 if bits == 32 else M64
    return v & mask, int(v != 0)


@builder(*_SOP2, *_SHIFT64, "s_addc_u32", "s_subb_u32", "s_add_co_ci_u32", "s_sub_co_ci_u32", "s_cselect_b32",
         "s_cselect_b64", "s_bfe_u64", "s_bfe_i64")
def _b_sop2(inst, ctx):
    f, name, nxt = inst.f, inst.name, ctx.nxt
    if name in _SHIFT64:
        a, b = scalar_reader(f["src0"], ctx, inst.lit, "b64"), scalar_reader(f["src1"], ctx, inst.lit)
        wr = scalar_writer(f["sdst"], ctx, True)
        fn = _SHIFT64[name]
        setscc = name != "s_bfm_b64"

        def h_shift64(w):
            r = fn(a(w), b(w))
            wr(w, r)
            if setscc:
                w.scc = int(r != 0)
            return nxt
        return h_shift64
    if name in ("s_bfe_u64", "s_bfe_i64"):
        a, b = scalar_reader(f["src0"], ctx, inst.lit, "b64"), scalar_reader(f["src1"], ctx, inst.lit)
        wr = scalar_writer(f["sdst"], ctx, True)
        signed = name.endswith("i64")

        def h_bfe64(w):
            r, w.scc = _bfe(a(w), b(w), signed, 64)
            wr(w, r)
            return nxt
        return h_bfe64
    if name in ("s_cselect_b32", "s_cselect_b64"):
        wide = name.endswith("64")
        t = "b64" if wide else "b32"
        a, b = scalar_reader(f["src0"], ctx, inst.lit, t), scalar_reader(f["src1"], ctx, inst.lit, t)
        wr = scalar_writer(f["sdst"], ctx, wide)

        def h_csel(w):
            wr(w, a(w) if w.scc else b(w))
            return nxt
        return h_csel
    if name in ("s_addc_u32", "s_add_co_ci_u32", "s_subb_u32", "s_sub_co_ci_u32"):
        a, b = scalar_reader(f["src0"], ctx, inst.lit), scalar_reader(f["src1"], ctx, inst.lit)
        wr = scalar_writer(f["sdst"], ctx)
        sub = "sub" in name

        def h_carry(w):
            x, y = a(w), b(w)
            if sub:
                r = x - y - w.scc
                w.scc = int(r < 0)
            else:
                r = x + y + w.scc
                w.scc = r >> 32
            wr(w, r & M32)
            return nxt
        return h_carry
    wide, fn = _SOP2[name]
    t = "b64" if wide else "b32"
    if name.endswith("_f32"):
        t = "f32"
    a, b = scalar_reader(f["src0"], ctx, inst.lit, t), scalar_reader(f["src1"], ctx, inst.lit, t)
    wr = scalar_writer(f["sdst"], ctx, bool(wide))

    def h_sop2(w):
        r, scc = fn(a(w), b(w))
        wr(w, r)
        if scc is not None:
            w.scc = scc
        return nxt
    return h_sop2


# -- SOP1 ---------------------------------------------------------------------------------
def _brev(x: int, bits: int) -> int:
    return int(format(x, f"0{bits}b")[::-1], 2)


def _ff1(x: int, bits: int) -> int:
    return (x & -x).bit_length() - 1 if x else M32


def _flbit(x: int, bits: int) -> int:
    return bits - x.bit_length() if x else M32


_SOP1 = {
    "s_mov_b32": (0, lambda a: a, None), "s_mov_b64": (1, lambda a: a, None),
    "s_not_b32": (0, lambda a: ~a & M32, True), "s_not_b64": (1, lambda a: ~a & M64, True),
    "s_brev_b32": (0, lambda a: _brev(a, 32), None), "s_brev_b64": (1, lambda a: _brev(a, 64), None),
    "s_bcnt1_i32_b32": (0, lambda a: bin(a).count("1"), True),
    "s_bcnt0_i32_b32": (0, lambda a: 32 - bin(a).count("1"), True),
    "s_ff1_i32_b32": (0, lambda a: _ff1(a, 32), None), "s_ctz_i32_b32": (0, lambda a: _ff1(a, 32), None),
    "s_flbit_i32_b32": (0, lambda a: _flbit(a, 32), None), "s_clz_i32_u32": (0, lambda a: _flbit(a, 32), None),
    "s_sext_i32_i8": (0, lambda a: ((a & 0xFF) ^ 0x80) - 0x80 & M32, None),
    "s_sext_i32_i16": (0, lambda a: ((a & 0xFFFF) ^ 0x8000) - 0x8000 & M32, None),
    "s_abs_i32": (0, lambda a: abs(_s32(a)) & M32, True),
    "s_bitset0_b32": (0, None, None), "s_bitset1_b32": (0, None, None),
    "s_cvt_f32_i32": (0, lambda a: _f(_s32(a)), None), "s_cvt_f32_u32": (0, lambda a: _f(a), None),
    "s_cvt_i32_f32": (0, lambda a: int(max(min(math.trunc(u2f(a)) if math.isfinite(u2f(a)) else 0,
                                               2**31 - 1), -2**31)) & M32, None),
    "s_cvt_u32_f32": (0, lambda a: int(max(min(math.trunc(u2f(a)) if math.isfinite(u2f(a)) else 0,
                                               2**32 - 1), 0)), None),
}
_SOP1_64SRC = {"s_bcnt1_i32_b64": lambda a: bin(a).count("1"), "s_ff1_i32_b64": lambda a: _ff1(a, 64),
               "s_ctz_i32_b64": lambda a: _ff1(a, 64), "s_flbit_i32_b64": lambda a: _flbit(a, 64),
               "s_clz_i32_u64": lambda a: _flbit(a, 64)}


@builder(*_SOP1, *_SOP1_64SRC)
def _b_sop1(inst, ctx):
    f, name, nxt = inst.f, inst.name, ctx.nxt
    if name in _SOP1_64SRC:
        fn64 = _SOP1_64SRC[name]
        a = scalar_reader(f["src0"], ctx, inst.lit, "b64")
        wr = scalar_writer(f["sdst"], ctx)
        setscc = "bcnt" in name

        def h64(w):
            r = fn64(a(w))
            wr(w, r)
            if setscc:
                w.scc = int(r != 0)
            return nxt
        return h64
    wide, fn, setscc = _SOP1[name]
    if fn is None:  # bitset: the destination is also the source
        wr = scalar_writer(f["sdst"], ctx)
        b = scalar_reader(f["src0"], ctx, inst.lit)
        d = f["sdst"]
        one = name.endswith("1_b32")

        def h_bitset(w):
            bit = 1 << (b(w) & 31)
            wr(w, w.s[d] | bit if one else w.s[d] & ~bit)
            return nxt
        return h_bitset
    a = scalar_reader(f["src0"], ctx, inst.lit, "b64" if wide else "b32")
    wr = scalar_writer(f["sdst"], ctx, bool(wide))
    if setscc:
        def h_scc(w):
            r = fn(a(w))
            wr(w, r)
            w.scc = int(r != 0)
            return nxt
        return h_scc

    def h_sop1(w):
        wr(w, fn(a(w)))
        return nxt
    return h_sop1


_SAVEEXEC = {"and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
             "andn2": lambda s, e: s & ~e, "orn2": lambda s, e: s | ~e, "nand": lambda s, e: ~(s & e),
             "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e), "andn1": lambda s, e: ~s & e,
             "orn1": lambda s, e: ~s | e, "and_not1": lambda s, e: s & ~e, "or_not1": lambda s, e: s | ~e,
             "and_not0": lambda s, e: ~s & e, "or_not0": lambda s, e: ~s | e}


@builder(*[f"s_{k}_saveexec_{b}" for k in _SAVEEXEC for b in ("b32", "b64")],
         *[f"s_{k}_wrexec_{b}" for k in _SAVEEXEC for b in ("b32", "b64")])
def _b_saveexec(inst, ctx):
    f, nxt = inst.f, ctx.nxt
    kind, _, rest = inst.name[2:].rpartition("_saveexec_") if "saveexec" in inst.name else \
        inst.name[2:].rpartition("_wrexec_")
    wrexec = "wrexec" in inst.name
    wide = rest == "b64"
    fn = _SAVEEXEC[kind]
    a = scalar_reader(f["src0"], ctx, inst.lit, "b64" if wide else "b32")
    wr = scalar_writer(f["sdst"], ctx, wide)
    full = M64 if wide else M32

    def h_saveexec(w):
        old = w.exec if wide else w.exec & M32
        new = fn(a(w), old) & full
        if wrexec:
            wr(w, new)
        else:
            wr(w, old)
        w.set_exec(new if wide else (w.exec & ~M32) | new)
        w.scc = int(new != 0)
        return nxt
    return h_saveexec


@builder("s_cmov_b32", "s_cmov_b64")
def _b_cmov(inst, ctx):
    wide = inst.name.endswith("64")
    a = scalar_reader(inst.f["src0"], ctx, inst.lit, "b64" if wide else "b32")
    wr = scalar_writer(inst.f["sdst"], ctx, wide)
    nxt = ctx.nxt

    def h(w):
        if w.scc:
            wr(w, a(w))
        return nxt
    return h


@builder("s_getpc_b64", "s_setpc_b64", "s_swappc_b64")
def _b_pc(inst, ctx):
    f, nxt = inst.f, ctx.nxt
    here = ctx.code_base + inst.addr + inst.size
    wr = scalar_writer(f["sdst"], ctx, True)
    index_of, base = ctx.image.index_of, ctx.code_base
    src = scalar_reader(f["src0"], ctx, inst.lit, "b64")

    def jump(addr):
        try:
            return index_of[addr - base]
        except KeyError:
            raise UnsupportedInstruction(f"jump to 0x{addr:x}, outside the kernel's code") from None
    if inst.name == "s_getpc_b64":
        def h_get(w):
            wr(w, here)
            return nxt
        return h_get
    if inst.name == "s_setpc_b64":
        return lambda w: jump(src(w))

    def h_swap(w):
        t = src(w)
        wr(w, here)
        return jump(t)
    return h_swap


# -- SOPC ---------------------------------------------------------------------------------
_CMP = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}


@builder(*[f"s_cmp_{c}_{t}" for c in _CMP for t in ("i32", "u32", "u64")], "s_bitcmp0_b32",
         "s_bitcmp1_b32", "s_bitcmp0_b64", "s_bitcmp1_b64")
def _b_sopc(inst, ctx):
    f, nxt, name = inst.f, ctx.nxt, inst.name
    if name.startswith("s_bitcmp"):
        wide = name.endswith("64")
        a = scalar_reader(f["src0"], ctx, inst.lit, "b64" if wide else "b32")
        b = scalar_reader(f["src1"], ctx, inst.lit)
        want = int(name[8])
        m = 63 if wide else 31

        def h_bit(w):
            w.scc = int(((a(w) >> (b(w) & m)) & 1) == want)
            return nxt
        return h_bit
    _, _, c, t = name.split("_")
    cmp = _CMP[c]
    a = scalar_reader(f["src0"], ctx, inst.lit, "b64" if t == "u64" else t)
    b = scalar_reader(f["src1"], ctx, inst.lit, "b64" if t == "u64" else t)
    if t == "i32":
        def h_i(w):
            w.scc = int(cmp(_s32(a(w)), _s32(b(w))))
            return nxt
        return h_i
    def h_u(w):
        w.scc = int(cmp(a(w), b(w)))
        return nxt
    return h_u


# -- SOPK ---------------------------------------------------------------------------------
@builder("s_movk_i32", "s_cmovk_i32", "s_addk_i32", "s_addk_co_i32", "s_mulk_i32",
         *[f"s_cmpk_{c}_{t}" for c in _CMP for t in ("i32", "u32")], "s_getreg_b32", "s_setreg_b32",
         "s_setreg_imm32_b32", "s_version", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt",
         "s_waitcnt_lgkmcnt")
def _b_sopk(inst, ctx):
    f, nxt, name = inst.f, ctx.nxt, inst.name
    imm = f["simm16"]
    simm = imm - 0x10000 if imm & 0x8000 else imm
    d = f["sdst"]
    if name in ("s_version", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt"):
        return lambda w: nxt  # ordering only: nothing to model functionally
    if name in ("s_setreg_b32", "s_setreg_imm32_b32"):
        return _b_setreg(inst, ctx)
    wr = scalar_writer(d, ctx)
    if name == "s_getreg_b32":
        reg, off, size = _hwreg(imm)
        if reg != HW_REG_MODE:  # other registers (status, ids, allocations) read as 0, as before
            return lambda w: (wr(w, 0), nxt)[1]
        field = (1 << size) - 1
        return lambda w: (wr(w, (w.mode >> off) & field), nxt)[1]
    if name == "s_movk_i32":
        return lambda w: (wr(w, simm & M32), nxt)[1]
    if name == "s_cmovk_i32":
        return lambda w: (wr(w, simm & M32) if w.scc else None, nxt)[1]
    if name in ("s_addk_i32", "s_addk_co_i32"):
        def h_addk(w):
            a = w.s[d]
            r = a + (simm & M32)
            w.scc = _ovf(a, simm & M32, r)
            wr(w, r)
            return nxt
        return h_addk
    if name == "s_mulk_i32":
        return lambda w: (wr(w, _s32(w.s[d]) * simm), nxt)[1]
    _, _, c, t = name.split("_")
    cmp = _CMP[c]
    if t == "i32":
        def h_ci(w):
            w.scc = int(cmp(_s32(w.s[d]), simm))
            return nxt
        return h_ci

    def h_cu(w):
        w.scc = int(cmp(w.s[d], imm))
        return nxt
    return h_cu


# -- the MODE register ---------------------------------------------------------------------
# Each wave keeps MODE (executor.kernel_mode: its launch value from the kernel descriptor);
# s_getreg reads it back. The arithmetic rounds to nearest even and keeps denormals whatever MODE
# says, so a write is refused unless the result still describes that: round mode 0, each denormal
# mode either 3 (denormals kept, what is computed) or the launch value (what the kernel already
# ran under), and -- up to gfx11 -- DX10_CLAMP and IEEE as at launch (clamp's NaN handling is bound
# from the launch value) and FP16_OVFL clear.
HW_REG_MODE = 1


def _hwreg(simm16: int) -> tuple[int, int, int]:
    """(register id, bit offset, size) of a SOPK hwreg operand: {size-1[15:11], offset[10:6], id[5:0]}."""
    return simm16 & 0x3F, (simm16 >> 6) & 0x1F, ((simm16 >> 11) & 0x1F) + 1


def mode_problem(mode: int, mode0: int, gen: str) -> str:
    """Why the emulator cannot compute under MODE value `mode` (launch value `mode0`), or ""."""
    if mode & 0xF:
        return f"FP round mode 0x{mode & 0xF:x} (only round-to-nearest-even is modelled)"
    for shift, what in ((4, "f32"), (6, "f16/f64")):
        dm = (mode >> shift) & 3
        if dm not in (3, (mode0 >> shift) & 3):
            return f"{what} denormal mode {dm} (denormals are always kept)"
    if gen != "gfx12":
        if (mode ^ mode0) & 0x300:
            return "a change of DX10_CLAMP or IEEE mode"
        if mode >> 23 & 1:
            return "FP16_OVFL (f16 overflow saturation)"
    return ""


def _write_mode(w, inst, ctx, mode: int) -> None:
    why = mode_problem(mode, ctx.mode0, ctx.gen)
    if why:
        raise UnsupportedInstruction(f"{inst.raw_name} sets MODE to 0x{mode:x}: {why} is not modelled")
    w.mode = mode


def _b_setreg(inst, ctx):
    reg, off, size = _hwreg(inst.f["simm16"])
    if reg != HW_REG_MODE:
        raise UnsupportedInstruction(f"{inst.raw_name} writes hardware register {reg}; only MODE is modelled")
    field = ((1 << size) - 1) << off
    src = (lambda w: inst.lit) if inst.name == "s_setreg_imm32_b32" else scalar_reader(inst.f["sdst"], ctx, None)
    nxt = ctx.nxt

    def h(w):
        _write_mode(w, inst, ctx, (w.mode & ~field) | ((src(w) << off) & field))
        return nxt
    return h


@builder("s_round_mode", "s_denorm_mode")
def _b_mode_imm(inst, ctx):
    """gfx10+ shortcuts: s_round_mode writes MODE[3:0], s_denorm_mode MODE[7:4], from simm16[3:0]."""
    shift = 0 if inst.name == "s_round_mode" else 4
    value, nxt = (inst.f["simm16"] & 0xF) << shift, ctx.nxt

    def h(w):
        _write_mode(w, inst, ctx, (w.mode & ~(0xF << shift)) | value)
        return nxt
    return h


# -- SOPP ---------------------------------------------------------------------------------
_NOPS = ("s_nop", "s_waitcnt", "s_wait_loadcnt", "s_wait_dscnt", "s_wait_kmcnt", "s_wait_storecnt",
         "s_wait_loadcnt_dscnt", "s_wait_storecnt_dscnt", "s_wait_expcnt", "s_wait_samplecnt", "s_wait_bvhcnt",
         "s_wait_alu", "s_wait_idle", "s_clause", "s_delay_alu", "s_waitcnt_depctr", "s_sleep", "s_setprio",
         "s_set_inst_prefetch_distance", "s_icache_inv", "s_incperflevel", "s_decperflevel", "s_ttracedata",
         "s_ttracedata_imm", "s_sendmsg", "s_barrier_signal", "s_wakeup",
         "s_dcache_inv", "s_dcache_wb", "s_dcache_inv_vol", "s_dcache_wb_vol", "s_sleep_var", "s_setkill",
         "s_wait_event", "v_nop")  # v_nop: a VALU no-op the compiler inserts for hazards


@builder(*_NOPS)
def _b_nop(inst, ctx):
    nxt = ctx.nxt
    return lambda w: nxt


@builder("s_endpgm", "s_code_end", "s_endpgm_saved")
def _b_end(inst, ctx):
    return lambda w: END


@builder("s_barrier", "s_barrier_wait")
def _b_barrier(inst, ctx):
    return lambda w: BARRIER


@builder("s_trap", "s_sethalt", "s_sendmsghalt")
def _b_trap(inst, ctx):
    from tiledsl.backends.rocm.emulator.memory import EmulatorError

    def h(w):
        raise EmulatorError(f"the kernel executed {inst.raw_name} (a trap: assertion or abort in the kernel)")
    return h


@builder("s_branch", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz",
         "s_cbranch_execz", "s_cbranch_execnz")
def _b_branch(inst, ctx):
    tgt, nxt, name = ctx.target(inst, inst.f["simm16"]), ctx.nxt, inst.name
    if name == "s_branch":
        return lambda w: tgt
    if name == "s_cbranch_scc0":
        return lambda w: nxt if w.scc else tgt
    if name == "s_cbranch_scc1":
        return lambda w: tgt if w.scc else nxt
    if name == "s_cbranch_execz":
        return lambda w: nxt if w.exec else tgt
    if name == "s_cbranch_execnz":
        return lambda w: tgt if w.exec else nxt
    if name == "s_cbranch_vccz":
        return lambda w: nxt if w.vcc() & w.fullmask else tgt
    return lambda w: tgt if w.vcc() & w.fullmask else nxt


# gfx9's S_SETVSKIP: VSKIP = S0[S1[4:0]]; while VSKIP is set the wave issues no vector instruction
# (VOP*, DS, FLAT/GLOBAL/SCRATCH, MUBUF/MTBUF/MIMG). Hand-written kernels (aiter's MoE) bracket one
# vector instruction at a time: `s_setvskip s20, k; <vector op>; s_setvskip 0, 0` predicates the
# op on bit k of s20. Modelled exactly for that shape -- a run of vector instructions followed by
# the next s_setvskip: when the bit is set, the run is skipped; any other shape with the bit set
# is refused when it runs (no per-instruction VSKIP state).
_VECTOR_FAMS = {"VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "VOPD", "DS", "FLAT", "GLOBAL", "SCRATCH", "MUBUF",
                "MTBUF", "MIMG"}


@builder("s_setvskip")
def _b_setvskip(inst, ctx):
    f, nxt, insts = inst.f, ctx.nxt, ctx.image.insts
    word, bit = scalar_reader(f["src0"], ctx, inst.lit), scalar_reader(f["src1"], ctx, inst.lit)
    end = nxt
    while end < len(insts) and insts[end].fam in _VECTOR_FAMS:
        end += 1
    closed = end < len(insts) and insts[end].name == "s_setvskip"

    def h(w):
        if not (word(w) >> (bit(w) & 31)) & 1:
            return nxt
        if not closed:
            raise UnsupportedInstruction(f"{inst.raw_name} setting VSKIP over more than a run of vector "
                                         "instructions closed by s_setvskip")
        return end
    return h


# gfx12's pseudo-scalar transcendentals (VOP3 encoding, SGPR destination): the VALU's formulas on
# one value, whatever EXEC is. An f16 result fills the low half and zeroes the high half.
_V_S = {"exp": np.exp2, "log": np.log2, "rcp": lambda x: x.dtype.type(1) / x, "sqrt": np.sqrt,
        "rsq": lambda x: x.dtype.type(1) / np.sqrt(x)}


@builder(*(f"v_s_{op}_{t}" for op in _V_S for t in ("f32", "f16")))
def _b_v_s(inst, ctx):
    f, nxt = inst.f, ctx.nxt
    fn = _V_S[inst.name.split("_")[2]]
    half = inst.name.endswith("f16")
    rd = scalar_reader(f["src0"], ctx, inst.lit, "f16" if half else "f32")
    wr = scalar_writer(f["vdst"], ctx)
    absm, neg, hi = f["abs"] & 1, f["neg"] & 1, half and bool(f["opsel"] & 1)
    scale = {0: None, 1: 2.0, 2: 4.0, 3: 0.5}[f["omod"]]
    clamp = f["clamp"]

    def h(w):
        bits = rd(w)
        if half:
            x = np.uint16((bits >> 16 if hi else bits) & 0xFFFF).view(np.float16)
        else:
            x = np.uint32(bits & M32).view(np.float32)
        if absm:
            x = abs(x)
        if neg:
            x = -x
        r = fn(x)
        if scale is not None:
            r = r * r.dtype.type(scale)
        if clamp:  # gfx12 only: DX10-style, a NaN clamps to 0 (valu_ops.clamp01)
            r = clamp01(r, ctx.dx10_clamp)[()]
        wr(w, int(r.view(np.uint16)) if half else int(r.view(np.uint32)))
        return nxt
    return h


# s_bitset*_b64, s_quadmask, s_wqm and friends are rare in compute kernels: left unsupported
# on purpose, so a kernel that needs them fails loudly instead of computing garbage.
__all__ = ["h2u"]
