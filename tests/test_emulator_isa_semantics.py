"""Instruction semantics checked against the ISA's pseudo-code (CDNA3/CDNA4, RDNA3/RDNA4):

- v_med3_f32/f16 with a NaN input is v_min3 of the inputs.
- v_fma_f64 / v_div_fmas_f64 round once (fused).
- The MODE register: s_getreg reads the launch value and what s_setreg / s_denorm_mode wrote;
  a round mode other than nearest-even (or a denormal mode not computed) is refused.
- v_mad_u64_u32 / v_mad_i64_i32 write their carry-out (bit 64 of the 65-bit result) to sdst.
- gfx9 v_fma_f16 / v_mad_f16 / v_div_fixup_f16 / v_mac_f16 keep the high half of VDST.
- gfx12 v_cvt_pk_fp8_f32_e64_dpp writes only the lanes the DPP masks allow.
- v_bfe_i32 / s_bfe_i32 shift the source as a signed value.
- ds_swizzle_b32's rotate and FFT modes.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from _lanes import (
    ALL,
    CDNA,
    RDNA,
    compile_lanes,
    decoded,
    encode_vop3,
    find,
    inst_words,
    opcode,
    patch,
    run_lanes,
    run_words,
    wave,
)

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

pytestmark = pytest.mark.emulator

F16, F32, F64 = np.float16, np.float32, np.float64
NAN = np.nan


# -- v_med3 ---------------------------------------------------------------------------------
MED3 = [(1, 2, NAN, 1), (5, NAN, 1, 1), (NAN, 3, 2, 2), (NAN, NAN, 4, 4), (NAN, NAN, NAN, NAN), (3, 1, 2, 2),
        (-1, 7, 0, 0), (2, 2, 9, 2)]


@pytest.mark.parametrize("ty", ["float", "half"])
@pytest.mark.parametrize("arch", ALL)
def test_med3_with_a_nan_is_min3(arch, ty):
    """llvm.amdgcn.fmed3 -> v_med3_f32 / v_med3_f16 (gfx12: v_med3_num_*): a NaN among the inputs
    makes the result v_min3 of them (the ISA: `if isNAN(S0) || isNAN(S1) || isNAN(S2) then D0 =
    v_min3(S0, S1, S2)`), not the NaN-ignoring median."""
    sfx = "f32" if ty == "float" else "f16"
    body = f"  %r0 = call {ty} @llvm.amdgcn.fmed3.{sfx}({ty} %x0, {ty} %x1, {ty} %x2)"
    asm, hsaco = compile_lanes(arch, body, [ty] * 3, [ty], f"declare {ty} @llvm.amdgcn.fmed3.{sfx}({ty}, {ty}, {ty})\n")
    assert f"v_med3_{'num_' if arch == 'gfx1201' else ''}{sfx}" in asm, asm
    dt = F32 if ty == "float" else F16
    cols = [np.resize(np.array([c[k] for c in MED3], dt), wave(arch)) for k in range(4)]
    (got,) = run_lanes(arch, hsaco, cols[:3], [dt])
    np.testing.assert_array_equal(got[:len(MED3)], cols[3][:len(MED3)])


# -- fused f64 ------------------------------------------------------------------------------
def _exact_fma(a: float, b: float, c: float) -> float:
    """fma by exact rational arithmetic (int / int true division rounds correctly)."""
    if not all(map(math.isfinite, (a, b, c))):
        return c if math.isinf(c) and math.isfinite(a) and math.isfinite(b) else a * b + c
    if a == 0 or b == 0:
        return a * b + c
    x = Fraction(a) * Fraction(b) + Fraction(c)
    if x == 0:
        return 0.0
    try:
        return x.numerator / x.denominator
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def _fma_cases(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    a = np.ldexp(rng.standard_normal(n), rng.integers(-40, 40, n))
    b = np.ldexp(rng.standard_normal(n), rng.integers(-40, 40, n))
    c = np.where(np.arange(n) % 2 == 0, -a * b, np.ldexp(rng.standard_normal(n), rng.integers(-80, 80, n)))
    special = [(1 + 2**-30, 1 - 2**-30, -1.0), (2.0**-600, 2.0**-500, -2.0**-1074), (1e308, 10.0, -math.inf),
               (2.0**1000, 2.0**100, -2.0**1023), (1.5, 2.0**-1074, 2.0**-1074), (-0.0, 5.0, -0.0), (3.0, -1.0, 3.0),
               (math.inf, 0.0, 1.0), (2.0**-1000, -(2.0**-74), 0.0)]
    for i, (x, y, z) in enumerate(special):
        a[i], b[i], c[i] = x, y, z
    return a, b, c


@pytest.mark.parametrize("arch", ALL)
def test_fma_f64_rounds_once(arch):
    """llvm.fma.f64 -> v_fma_f64 (gfx90a+: v_fmac_f64): the exact a*b + c rounded once (unfused
    a*b + c loses the low half of the product: (1 + 2^-30)(1 - 2^-30) - 1 is -2^-60, not 0), with
    IEEE's special cases."""
    body = "  %r0 = call double @llvm.fma.f64(double %x0, double %x1, double %x2)"
    decls = "declare double @llvm.fma.f64(double, double, double)\n"
    asm, hsaco = compile_lanes(arch, body, ["double"] * 3, ["double"], decls)
    assert ("v_fmac_f64" if arch in CDNA else "v_fma_f64") in asm
    a, b, c = _fma_cases(wave(arch))
    (got,) = run_lanes(arch, hsaco, [a, b, c], [F64])
    want = np.array([_exact_fma(*map(float, t)) for t in zip(a, b, c, strict=True)])
    np.testing.assert_array_equal(got.view(np.uint64)[~np.isnan(want)], want.view(np.uint64)[~np.isnan(want)])
    assert np.isnan(got[np.isnan(want)]).all() and got[0] == -(2.0**-60)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_div_fmas_f64_rounds_once(arch):
    """v_div_fmas_f64 (VCC clear: no scaling) is the fused multiply-add too (hand-encoded)."""
    words = encode_vop3(arch, "v_div_fmas_f64", 0, 258, 260, 262)
    vals = {2: 1 + 2**-30, 4: 1 - 2**-30, 6: -1.0}
    regs = {}
    for r, x in vals.items():
        lo, hi = struct.unpack("<II", struct.pack("<d", x))
        regs[r], regs[r + 1] = lo, hi
    w, _ = run_words(arch, words, regs, sgprs={106: 0, 107: 0})
    got = (w.v[0].astype(np.uint64) | w.v[1].astype(np.uint64) << np.uint64(32)).view(F64)
    np.testing.assert_array_equal(got, -(2.0**-60))


# -- MODE -------------------------------------------------------------------------------------
GETREG = "declare i32 @llvm.amdgcn.s.getreg(i32)\n"
MODE_ALL = 31 << 11 | 1  # hwreg(HW_REG_MODE, 0, 32)


def _launch_mode(arch: str) -> int:
    """MODE as LLVM's kernels start: denormals kept (0xF0), DX10_CLAMP and IEEE on up to gfx11."""
    return 0xF0 if arch == "gfx1201" else 0x3F0


@pytest.mark.parametrize("arch", ALL)
def test_getreg_reads_the_launch_mode(arch):
    asm, hsaco = compile_lanes(arch, f"  %r0 = call i32 @llvm.amdgcn.s.getreg(i32 {MODE_ALL})", [], ["i32"], GETREG)
    assert "s_getreg_b32" in asm
    (got,) = run_lanes(arch, hsaco, [], [np.uint32])
    np.testing.assert_array_equal(got, _launch_mode(arch))


FLUSH = 'attributes #0 = { "denormal-fp-math-f32"="preserve-sign,preserve-sign" }'


@pytest.mark.parametrize("arch", ALL)
def test_setreg_then_getreg_reads_back(arch):
    """A kernel launched with f32 denormals flushed (MODE[5:4] = 0) sets them kept (3) with
    s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2), 3; s_getreg then reads the new value (before
    the fix s_setreg was a no-op and s_getreg returned 0)."""
    body = (f"  call void @llvm.amdgcn.s.setreg(i32 {1 << 11 | 4 << 6 | 1}, i32 3)\n"
            f"  %r0 = call i32 @llvm.amdgcn.s.getreg(i32 {MODE_ALL})")
    asm, hsaco = compile_lanes(arch, body, [], ["i32"], GETREG + "declare void @llvm.amdgcn.s.setreg(i32, i32)\n",
                               FLUSH)
    assert "s_setreg_imm32_b32" in asm
    (got,) = run_lanes(arch, hsaco, [], [np.uint32])
    np.testing.assert_array_equal(got, _launch_mode(arch))  # launched as 0xC0 (| 0x300 up to gfx11)


@pytest.mark.parametrize("arch", ALL)
def test_flushed_f32_division_runs(arch):
    """With f32 denormals flushed, LLVM brackets the division's scaling steps with s_denorm_mode 15 /
    12 (gfx11+) or s_setreg of MODE[5:4] to 3 and back (gfx9): both values are accepted (3 is
    what the emulator computes, the other the launch value) and the quotient is right."""
    asm, hsaco = compile_lanes(arch, "  %r0 = fdiv float %x0, %x1", ["float", "float"], ["float"], "", FLUSH)
    assert ("s_denorm_mode" in asm) if arch in RDNA else ("s_setreg_imm32_b32" in asm), asm
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-4, 4, wave(arch)).astype(F32), rng.uniform(0.5, 4, wave(arch)).astype(F32)
    (got,) = run_lanes(arch, hsaco, [x, y], [F32])
    np.testing.assert_array_equal(got, x / y)


@pytest.mark.parametrize("arch", ALL)
def test_round_toward_zero_is_refused(arch):
    """llvm.set.rounding(0) (toward zero) -> s_setreg / s_round_mode of MODE[3:0]: the emulator
    rounds to nearest even only, so the write is refused when it runs (before: ignored, and the
    kernel's arithmetic silently rounded to nearest)."""
    body = "  call void @llvm.set.rounding(i32 0)\n  %r0 = fadd float %x0, %x1"
    asm, hsaco = compile_lanes(arch, body, ["float", "float"], ["float"], "declare void @llvm.set.rounding(i32)\n")
    assert ("s_round_mode" in asm) if arch in RDNA else ("s_setreg_imm32_b32" in asm), asm
    with pytest.raises(UnsupportedInstruction, match="round mode"):
        run_lanes(arch, hsaco, [F32(1), F32(2.0**-24 * 1.5)], [F32])


@pytest.mark.parametrize("arch", ALL)
def test_flushing_denormals_is_refused(arch):
    """s_setreg of MODE[5:4] = 0 (flush f32 denormals) in a kernel launched keeping them."""
    body = (f"  call void @llvm.amdgcn.s.setreg(i32 {1 << 11 | 4 << 6 | 1}, i32 0)\n"
            "  %r0 = fadd float %x0, %x1")
    decls = "declare void @llvm.amdgcn.s.setreg(i32, i32)\n"
    _, hsaco = compile_lanes(arch, body, ["float", "float"], ["float"], decls)
    with pytest.raises(UnsupportedInstruction, match="denormal mode"):
        run_lanes(arch, hsaco, [F32(1), F32(2)], [F32])


@pytest.mark.parametrize("arch", ["gfx90a", "gfx1100", "gfx1201"])
def test_kernel_descriptor_round_mode_is_refused(arch):
    """A kernel descriptor asking for round-toward-zero (FLOAT_ROUND_MODE_32 = 3): refused."""
    from test_emulator_exec import _file_offset

    from tiledsl.backends.rocm import elf

    _, hsaco = compile_lanes(arch, "  %r0 = fadd float %x0, %x1", ["float", "float"], ["float"])
    kd = elf.read_code_object(hsaco).symbols["k.kd"].value
    blob = bytearray(hsaco)
    at = _file_offset(hsaco, kd + 48)  # COMPUTE_PGM_RSRC1
    struct.pack_into("<I", blob, at, struct.unpack_from("<I", blob, at)[0] | 3 << 12)
    dev = EmulatorDevice(arch)
    (msg,) = dev.unsupported(dev.kernel(bytes(blob), "k"))
    assert "round mode" in msg
    for lockstep in (False, True):
        with pytest.raises(UnsupportedInstruction, match="round mode"):
            run_lanes(arch, bytes(blob), [F32(1), F32(2)], [F32], lockstep=lockstep)


# -- v_mad_u64_u32 / v_mad_i64_i32 carry-out --------------------------------------------------
MAD_U = [(2, 2, 2**64 - 1), (2**32 - 1, 2**32 - 1, 2**64 - 1), (3, 5, 7), (2**32 - 1, 2**32 - 1, 2**33 - 2),
         (0, 0, 2**64 - 1), (1, 1, 2**64 - 1)]
MAD_I = [(-1, 1, 0), (2**31 - 1, 2**31 - 1, 2**63 - 1), (-(2**31), 2**31 - 1, -(2**63)), (3, -5, 7),
         (-2, 3, 2**63 - 1), (1, 1, -1)]


@pytest.mark.parametrize("clamp", [0, 1])
@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("arch", ALL)
def test_mad64_carry_out(arch, signed, clamp):
    """v_mad_{u64_u32,i64_i32} v[4:5], s[10:11] (wave32: s10), v1, v2, v[6:7]: D is the low 64
    bits of S0 * S1 + S2, sdst bit i is bit 64 of lane i's 65-bit result (the unsigned carry;
    for the signed form the sign of the exact sum); clamp saturates D. Before the fix sdst was 0."""
    name = {(False, True): "v_mad_co_u64_u32", (True, True): "v_mad_co_i64_i32",
            (False, False): "v_mad_u64_u32", (True, False): "v_mad_i64_i32"}[(signed, arch == "gfx1201")]
    cases = MAD_I if signed else MAD_U
    W = wave(arch)
    a, b, c = (np.array([t[k] for t in cases] * (W // len(cases)) + [0] * (W % len(cases)), object) for k in range(3))
    u32 = lambda xs, shift=0: np.array([(x >> shift) & 0xFFFFFFFF for x in xs], np.uint32)  # noqa: E731
    regs = {1: u32(a), 2: u32(b), 6: u32(c), 7: u32(c, 32)}
    w, insts = run_words(arch, encode_vop3(arch, name, 4, 257, 258, 262, sdst=10, clamp=clamp), regs)
    assert insts[0].name == name
    exact = a * b + c
    lo, hi = (-(2**63), 2**63 - 1) if signed else (0, 2**64 - 1)
    want_d = [(min(max(int(x), lo), hi) if clamp else int(x)) & (2**64 - 1) for x in exact]
    want_co = sum(1 << i for i, x in enumerate(exact) if (int(x) >> 64) & 1)
    got_d = (w.v[4].astype(np.uint64) | w.v[5].astype(np.uint64) << np.uint64(32)).tolist()
    assert got_d == want_d
    got_co = w.s[10] | (w.s[11] << 32 if W == 64 else 0)
    assert got_co == want_co and want_co != 0


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_mad64_carry_out_in_lockstep(arch):
    """The same carry through lockstep's batched v_mad_u64_u32 (lockstep_ops.mad64) over several
    waves: a kernel's mad (zext * zext + c) with its carry redirected into the SGPR (pair) a later
    v_cndmask reads, the v_cmp that set that SGPR turned into no-ops."""
    body = """  %a = zext i32 %x0 to i64
  %bb = zext i32 %x1 to i64
  %m = mul i64 %a, %bb
  %r0 = add i64 %m, %x2
  %f = icmp ult i32 %x3, 7
  %r1 = select i1 %f, i32 11, i32 22"""
    asm, hsaco = compile_lanes(arch, body, ["i32", "i32", "i64", "i32"], ["i64", "i32"])
    insts = decoded(hsaco, arch)
    names = [i.name for i in insts]
    mad = next(i for i in insts if i.name.startswith("v_mad_u64"))
    cmp = next(i for i in insts if i.name.startswith("v_cmp"))
    sel = next(i for i in insts if i.name == "v_cndmask_b32")
    assert names.index(mad.name) < names.index("v_cndmask_b32"), names
    mask_sgpr = sel.f["src2"] if sel.fam == "VOP3" else 106
    # v_cndmask picks src1 where the mask bit is set; both are inline constants (128 + n)
    if_set, if_clear = sel.f["src1"] - 128, sel.f["src0"] - 128
    assert {if_set, if_clear} == {11, 22}
    nop = 0xBF800000
    hsaco = patch(hsaco, cmp, [nop] * (cmp.size // 4))
    w0, w1 = inst_words(hsaco, mad)
    hsaco = patch(hsaco, mad, [w0 & ~(0x7F << 8) | mask_sgpr << 8, w1])
    W = wave(arch)
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 2**32, W, dtype=np.uint64), rng.integers(0, 2**32, W, dtype=np.uint64)
    c = rng.integers(0, 2**64, W, dtype=np.uint64)
    exact = [int(x) * int(y) + int(z) for x, y, z in zip(a, b, c, strict=True)]
    for lockstep in (False, True):
        d, s = run_lanes(arch, hsaco, [a.astype(np.uint32), b.astype(np.uint32), c, np.zeros(W, np.uint32)],
                         [np.uint64, np.uint32], lockstep=lockstep, groups=3)
        assert d.tolist() == [x & (2**64 - 1) for x in exact]
        np.testing.assert_array_equal(s, [if_set if x >> 64 else if_clear for x in exact])


# -- gfx9: 16-bit ops that keep the high half ------------------------------------------------
@pytest.mark.parametrize("name", ["v_fma_f16", "v_mad_f16", "v_div_fixup_f16", "v_add_f16"])
@pytest.mark.parametrize("arch", CDNA)
def test_gfx9_f16_results_keep_or_clear_the_high_half(arch, name):
    """gfx9 16-bit VALU results clear VDST[31:16], except v_fma_f16, v_mad_f16, v_div_fixup_f16
    (and v_mac_f16, v_mad_u16/i16, ...), which keep it (CDNA3/CDNA4 ISA: "hi 16 bits are
    preserved"; LLVM's zeroesHigh16BitsOfDest). v_add_f16 is the control."""
    nsrc = 2 if name == "v_add_f16" else 3
    words = encode_vop3(arch, name, 1, 258, 258, 258 if nsrc == 3 else 0)
    x = int(np.float16(1.5).view(np.uint16))
    w, _ = run_words(arch, words, {1: 0xABCD0000, 2: x})
    np.testing.assert_array_equal(w.v[1] >> 16, 0 if name == "v_add_f16" else 0xABCD)


@pytest.mark.parametrize("arch", CDNA)
def test_gfx9_fma_f16_keeps_the_high_half_in_a_kernel(arch):
    """A kernel's v_fma_f16 (half fma of the low half, reinserted with v_bfi_b32) rewritten to write
    the source register itself, the v_bfi removed: the stored dword keeps its high half."""
    body = """  %v = bitcast i32 %x0 to <2 x half>
  %e = extractelement <2 x half> %v, i32 0
  %f = call half @llvm.fma.f16(half %e, half %e, half %e)
  %w = insertelement <2 x half> %v, half %f, i32 0
  %r0 = bitcast <2 x half> %w to i32"""
    _, hsaco = compile_lanes(arch, body, ["i32"], ["i32"], "declare half @llvm.fma.f16(half, half, half)\n")
    fma, bfi = find(hsaco, arch, "v_fma_f16"), find(hsaco, arch, "v_bfi_b32")
    src, out = fma.f["src0"] - 256, bfi.f["vdst"]
    assert src == out and bfi.f["src2"] - 256 == src
    w0, w1 = inst_words(hsaco, fma)
    hsaco = patch(patch(hsaco, fma, [w0 & ~0xFF | src, w1]), bfi, [0xBF800000] * 2)
    x = np.arange(64, dtype=np.uint32) << 16 | np.uint32(np.float16(2).view(np.uint16))
    (got,) = run_lanes(arch, hsaco, [x], [np.uint32])
    np.testing.assert_array_equal(got, np.arange(64) << 16 | int(np.float16(6).view(np.uint16)))


# -- gfx12 fp8 conversion with DPP ------------------------------------------------------------
@pytest.mark.parametrize("masks", ["bound_ctrl", "row_mask"])
def test_cvt_pk_fp8_dpp_write_mask(masks):
    """update.dpp (row_shr:1) folded into v_cvt_pk_fp8_f32_e64_dpp (gfx1201). Without bound_ctrl
    the first lane of each row (no source lane) is not written; with row_mask 0x1 only row 0 is.
    The write keeps VDST's high half (the intrinsic's old value). Before the fix every lane was
    written."""
    arch = "gfx1201"
    decls = ("declare i32 @llvm.amdgcn.cvt.pk.fp8.f32(float, float, i32, i1)\n"
             "declare i32 @llvm.amdgcn.update.dpp.i32(i32, i32, i32, i32, i32, i1)\n")
    body = """  %xi = bitcast float %x0 to i32
  %d = call i32 @llvm.amdgcn.update.dpp.i32(i32 0, i32 %xi, i32 273, i32 15, i32 15, i1 false)
  %df = bitcast i32 %d to float
  %r0 = call i32 @llvm.amdgcn.cvt.pk.fp8.f32(float %df, float %x0, i32 %x1, i1 false)"""
    asm, hsaco = compile_lanes(arch, body, ["float", "i32"], ["i32"], decls)
    assert "v_cvt_pk_fp8_f32_e64_dpp" in asm and "row_shr:1" in asm
    inst = find(hsaco, arch, "v_cvt_pk_fp8_f32")
    w0, w1, dpp = inst_words(hsaco, inst)
    dpp &= ~(1 << 19)  # no bound_ctrl
    if masks == "row_mask":
        dpp = dpp & ~(0xF << 28) | 1 << 28 | 1 << 19
    hsaco = patch(hsaco, inst, [w0, w1, dpp])
    lanes = np.arange(32)
    x = (lanes + 1).astype(F32) / 4
    (got,) = run_lanes(arch, hsaco, [x, np.uint32(0xABCD1234)], [np.uint32])
    from tiledsl.backends.rocm.emulator.fp8 import narrow

    src = np.where(lanes % 16 == 0, 0, lanes)  # row_shr:1: lane i reads lane i-1 of its row
    codes = narrow(np.where(lanes % 16 == 0, 0, x[src - 1]), "fp8", "ocp").astype(np.uint32) \
        | narrow(x, "fp8", "ocp").astype(np.uint32) << 8
    written = lanes % 16 != 0 if masks == "bound_ctrl" else lanes < 16
    want = np.where(written, 0xABCD0000 | codes, 0xABCD1234)
    np.testing.assert_array_equal(got, want)


# -- bitfield extract --------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ALL)
def test_bfe_i32_shifts_arithmetically(arch):
    """llvm.amdgcn.sbfe -> v_bfe_i32: a field reaching past bit 31 fills with the sign (the ISA's
    `S0.i32 >> offset`): bfe_i32(0x80000000, 24, 16) = 0xFFFFFF80, not 0x80. (LLVM agrees: with
    constant operands it folds that case to an arithmetic shift.)"""
    body = "  %r0 = call i32 @llvm.amdgcn.sbfe.i32(i32 %x0, i32 %x1, i32 16)"
    decls = "declare i32 @llvm.amdgcn.sbfe.i32(i32, i32, i32)\n"
    asm, hsaco = compile_lanes(arch, body, ["i32", "i32"], ["i32"], decls)
    assert "v_bfe_i32" in asm, asm
    W = wave(arch)
    x = np.resize(np.array([0x80000000, 0x7FFF0000, 0x12345678, 0x80000000], np.uint32), W)
    off = np.resize(np.array([24, 24, 8, 8], np.uint32), W)
    (got,) = run_lanes(arch, hsaco, [x, off], [np.uint32])
    np.testing.assert_array_equal(got[:4], [0xFFFFFF80, 0x7F, 0x3456, 0])


@pytest.mark.parametrize(("x", "field", "want"), [
    (0x80000000, 16 << 16 | 24, 0xFFFFFF80), (0x7FFF0000, 16 << 16 | 24, 0x7F), (0x80000000, 8 << 16 | 28, 0xFFFFFFF8),
    (0x12345678, 16 << 16 | 8, 0x3456)])
@pytest.mark.parametrize("arch", ["gfx942", "gfx1100", "gfx1201"])
def test_s_bfe_i32_shifts_arithmetically(arch, x, field, want):
    """s_bfe_i32 s0, s1, s2 (hand-encoded: LLVM selects it only for fields inside the word) shifts
    S0 as a signed value like v_bfe_i32 (S1[4:0] offset, S1[22:16] width)."""
    word = 2 << 30 | opcode(arch, "SOP2", "s_bfe_i32") << 23 | 0 << 16 | 2 << 8 | 1
    w, insts = run_words(arch, [word], sgprs={1: x, 2: field})
    assert insts[0].name == "s_bfe_i32"
    assert w.s[0] == want and w.scc == 1


# -- ds_swizzle_b32 ----------------------------------------------------------------------------
# The ISA's examples (lane values 1..32 in, per 32 lanes): FFT offset[4:0] 0x00 and 0x10; rotate by
# offset[9:5] = 1 left / right, mask 0 and 1.
SWIZZLE = {
    0xE000: [1, 0x11, 9, 0x19, 5, 0x15, 0xD, 0x1D, 3, 0x13, 0xB, 0x1B, 7, 0x17, 0xF, 0x1F, 2, 0x12, 0xA, 0x1A, 6, 0x16,
             0xE, 0x1E, 4, 0x14, 0xC, 0x1C, 8, 0x18, 0x10, 0x20],
    0xE010: [1, 9, 5, 0xD, 3, 0xB, 7, 0xF, 2, 0xA, 6, 0xE, 4, 0xC, 8, 0x10, 0x11, 0x19, 0x15, 0x1D, 0x13, 0x1B, 0x17,
             0x1F, 0x12, 0x1A, 0x16, 0x1E, 0x14, 0x1C, 0x18, 0x20],
    0xE01F: list(range(1, 33)),
    0xC020: list(range(2, 33)) + [1],
    0xC420: [0x20] + list(range(1, 32)),
    0xC021: [1, 4, 3, 6, 5, 8, 7, 0xA, 9, 0xC, 0xB, 0xE, 0xD, 0x10, 0xF, 0x12, 0x11, 0x14, 0x13, 0x16, 0x15, 0x18, 0x17,
             0x1A, 0x19, 0x1C, 0x1B, 0x1E, 0x1D, 0x20, 0x1F, 2],
    0xC421: [0x1F, 2, 1, 4, 3, 6, 5, 8, 7, 0xA, 9, 0xC, 0xB, 0xE, 0xD, 0x10, 0xF, 0x12, 0x11, 0x14, 0x13, 0x16, 0x15,
             0x18, 0x17, 0x1A, 0x19, 0x1C, 0x1B, 0x1E, 0x1D, 0x20],
}


@pytest.mark.parametrize("offset", sorted(SWIZZLE))
@pytest.mark.parametrize("arch", ALL)
def test_ds_swizzle_fft_and_rotate(arch, offset):
    """llvm.amdgcn.ds.swizzle with offsets >= 0xC000: the rotate (0xC000-0xDFFF) and FFT (0xE000+)
    modes, against the ISA's examples (each group of 32 lanes alike). Before the fix they ran as
    the quad-permute mode."""
    body = f"  %v = add i32 %id, 1\n  %r0 = call i32 @llvm.amdgcn.ds.swizzle(i32 %v, i32 {offset})"
    asm, hsaco = compile_lanes(arch, body, [], ["i32"], "declare i32 @llvm.amdgcn.ds.swizzle(i32, i32)\n")
    assert "ds_swizzle_b32" in asm
    (got,) = run_lanes(arch, hsaco, [], [np.uint32])
    W = wave(arch)
    want = np.array(SWIZZLE[offset] * (W // 32)) + np.repeat(np.arange(W // 32) * 32, 32)
    np.testing.assert_array_equal(got, want)


def test_arch_table_is_what_the_tests_assume():
    assert {a: get_arch(a).wave_size for a in ALL} == {"gfx90a": 64, "gfx942": 64, "gfx950": 64, "gfx1100": 32,
                                                         "gfx1201": 32}
    assert opcode("gfx942", "VOP3P", "v_dot2_f32_f16") >= 0
