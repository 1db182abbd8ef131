"""Instruction modifiers the decoder reads, executed as the ISA defines them or refused:

- DPP on VOP3P (gfx11+ v_dot2_f32_f16_e64_dpp, v_fma_mix_f32_e64_dpp) and on gfx9's VOP2
  v_dot2c_f32_f16: source 0 permuted, the write masked.
- Dot products: op_sel / op_sel_hi (which half feeds which product), neg_lo / neg_hi (negate
  element 0 / 1), the gfx11+ accumulator negation, clamp (floats to [0, 1], integers saturate).
- WMMA: NEG/NEG_HI on the low / high halves of A and B, {NEG_HI[2], NEG[2]} = {ABS, NEG} on C,
  integer clamp.
- Integer clamp saturates the exact result (not the wrapped one), packed integer and packed f32
  clamp, float clamp sends NaN to 0 (DX10_CLAMP) and -0 to +0.
- clamp / omod where they have no modelled meaning (b32 results, integer omod) are refused.

Forms LLVM 22 emits are compiled from IR (the test asserts the form is in the assembly); other
forms are the same instructions with modifier bits set (`_lanes.patch`) or hand-encoded
(`_lanes.run_words`)."""

from __future__ import annotations

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

from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

pytestmark = pytest.mark.emulator

F16, F32 = np.float16, np.float32


def pack16(lo, hi) -> np.ndarray:
    """Two f16 values per lane as u32 lanes (lo in bits 15:0)."""
    lo, hi = (np.asarray(x, F16).view(np.uint16).astype(np.uint32) for x in (lo, hi))
    return lo | hi << np.uint32(16)


def bits(x) -> np.ndarray:
    return np.asarray(x, F32).view(np.uint32)


def quad_perm_1032(W: int) -> np.ndarray:
    lanes = np.arange(W)
    return (lanes & ~3) | np.array([1, 0, 3, 2])[lanes & 3]


def unsupported(arch: str, hsaco: bytes) -> list[str]:
    dev = EmulatorDevice(arch)
    return dev.unsupported(dev.kernel(hsaco, "k"))


FDOT2 = "declare float @llvm.amdgcn.fdot2(<2 x half>, <2 x half>, float, i1)\n"
DPP = "declare i32 @llvm.amdgcn.update.dpp.i32(i32, i32, i32, i32, i32, i1)\n"
DOT_BODY = """  %x = bitcast i32 %x0 to <2 x half>
  %y = bitcast i32 %x1 to <2 x half>
  %r0 = call float @llvm.amdgcn.fdot2(<2 x half> %x, <2 x half> %y, float %x2, i1 CLAMP)"""


# -- DPP on VOP3P / dot2c -----------------------------------------------------------------
def _dot2_dpp(arch):
    body = """  %xd = call i32 @llvm.amdgcn.update.dpp.i32(i32 0, i32 %x0, i32 177, i32 15, i32 15, i1 true)
  %x = bitcast i32 %xd to <2 x half>
  %y = bitcast i32 %x1 to <2 x half>
  %r0 = call float @llvm.amdgcn.fdot2(<2 x half> %x, <2 x half> %y, float %x2, i1 true)"""
    return compile_lanes(arch, body, ["i32", "i32", "float"], ["float"], FDOT2 + DPP)


@pytest.mark.parametrize("lockstep", [False, True])
@pytest.mark.parametrize("arch", RDNA)
def test_vop3p_dot2_dpp_permutes_source0(arch, lockstep):
    """update.dpp (quad_perm:[1,0,3,2]) folded into v_dot2_f32_f16_e64_dpp: lane i multiplies lane
    perm(i)'s x. Before the fix the DPP word was decoded and ignored (lane i used its own x)."""
    asm, hsaco = _dot2_dpp(arch)
    assert "v_dot2_f32_f16_e64_dpp" in asm and "quad_perm:[1,0,3,2]" in asm
    W = wave(arch)
    lanes = np.arange(W)
    (got,) = run_lanes(arch, hsaco, [pack16(lanes / 128, 0), pack16(1, 0), F32(0)], [F32], lockstep=lockstep)
    np.testing.assert_array_equal(got, quad_perm_1032(W) / 128)


@pytest.mark.parametrize("arch", RDNA)
def test_vop3p_fma_mix_dpp_permutes_source0(arch):
    """The same DPP instruction turned into v_fma_mix_f32_e64_dpp (op_sel_hi:[1,0,0]: an f16
    source 0, f32 sources 1 and 2): lane i computes x[perm(i)].lo * y + c."""
    _, hsaco = _dot2_dpp(arch)
    inst = find(hsaco, arch, "v_dot2_f32_f16")
    w0, w1, dpp = inst_words(hsaco, inst)
    w0 = w0 & ~(0x7F << 16 | 1 << 15 | 1 << 14) | opcode(arch, "VOP3P", "v_fma_mix_f32") << 16
    w1 = w1 & ~(3 << 27) | 1 << 27
    hsaco = patch(hsaco, inst, [w0, w1, dpp])
    assert find(hsaco, arch, "v_fma_mix_f32").raw_name == "v_fma_mix_f32_e64_dpp"
    W = wave(arch)
    lanes = np.arange(W)
    (got,) = run_lanes(arch, hsaco, [pack16(lanes / 128, 0), bits(2.0), F32(0.5)], [F32])
    np.testing.assert_array_equal(got, quad_perm_1032(W) / 64 + 0.5)


@pytest.mark.parametrize("arch", CDNA)
def test_gfx9_dot2c_dpp_permutes_source0(arch):
    """gfx9's VOP2 v_dot2c_f32_f16_dpp (no IR pattern: LLVM keeps the v_mov_b32_dpp apart): the
    kernel's `v_mov_b32_dpp vX, vX quad_perm:[1,0,3,2]` rewritten into `v_dot2c_f32_f16_dpp vX,
    vX, vX`, i.e. vX += dot(x[perm(i)], x[i]). x's high half is 0, so the accumulator x (an f32
    denormal) vanishes in the rounding."""
    body = """  %r0 = call i32 @llvm.amdgcn.update.dpp.i32(i32 poison, i32 %x0, i32 177, i32 15, i32 15, i1 true)"""
    asm, hsaco = compile_lanes(arch, body, ["i32"], ["i32"], DPP)
    mov = find(hsaco, arch, "v_mov_b32")
    assert mov.dpp is not None and mov.f["vdst"] == mov.f["src0"] - 256
    vx = mov.f["vdst"]
    _, ctrl = inst_words(hsaco, mov)
    hsaco = patch(hsaco, mov, [opcode(arch, "VOP2", "v_dot2c_f32_f16") << 25 | vx << 17 | vx << 9 | 250, ctrl])
    assert find(hsaco, arch, "v_dot2c_f32_f16").raw_name == "v_dot2c_f32_f16_dpp"
    W = wave(arch)
    x = np.arange(W) + 1
    (got,) = run_lanes(arch, hsaco, [pack16(x / 64, 0)], [F32])
    np.testing.assert_array_equal(got, (quad_perm_1032(W) + 1) * x / 4096)


# -- dot products: op_sel, neg, clamp -------------------------------------------------------
def test_gfx11_dot2acc():
    """gfx1100's VOP2 v_dot2acc_f32_f16 (what fdot2 without clamp becomes there; refused before,
    now bound with the other dot products): D += a.b."""
    arch = "gfx1100"
    asm, hsaco = compile_lanes(arch, DOT_BODY.replace("CLAMP", "false"), ["i32", "i32", "float"], ["float"], FDOT2)
    assert "v_dot2acc_f32_f16" in asm
    (got,) = run_lanes(arch, hsaco, [pack16(1, 2), pack16(3, -4), F32(0.5)], [F32])
    np.testing.assert_array_equal(got, 3 - 8 + 0.5)



@pytest.mark.parametrize("arch", ALL)
def test_dot2_clamp(arch):
    """fdot2(..., clamp) -> v_dot2_f32_f16 ... clamp: results in [0, 1], NaN to 0."""
    asm, hsaco = compile_lanes(arch, DOT_BODY.replace("CLAMP", "true"), ["i32", "i32", "float"], ["float"], FDOT2)
    assert "v_dot2_f32_f16" in asm and "clamp" in asm
    a = pack16([1, 1, 0.5, np.nan, 1, -0.0], [2, 1, 0, 1, 0, 0])
    b = pack16([3, 1, 0.5, 1, -1, 1], [4, 1, 0, 1, 0, 0])
    c = np.array([0, -3, 0, 0, 0.5, -0.0], F32)
    (got,) = run_lanes(arch, hsaco, [np.resize(a, wave(arch)), np.resize(b, wave(arch)), np.resize(c, wave(arch))],
                       [F32])
    np.testing.assert_array_equal(got[:6].view(np.uint32), bits([1, 0, 0.25, 0, 0, 0]))


@pytest.mark.parametrize(("mods", "want"), [
    ({}, 11.0), ({"neg_lo": (1, 0, 0)}, 5.0), ({"neg_hi": (1, 0, 0)}, -5.0), ({"neg_lo": (0, 1, 0)}, 5.0),
    ({"op_sel": (1, 0, 0)}, 14.0), ({"op_sel_hi": (0, 1, 1)}, 7.0),
    ({"op_sel": (0, 1, 0), "op_sel_hi": (1, 0, 1)}, 10.0), ({"neg_lo": (1, 0, 0), "neg_hi": (1, 0, 0)}, -11.0)])
@pytest.mark.parametrize("arch", ALL)
def test_dot2_op_sel_and_negation(arch, mods, want):
    """v_dot2_f32_f16 of a = (1, 2), b = (3, 4) with each source's op_sel (the half feeding
    product 0), op_sel_hi (product 1), neg_lo / neg_hi (negate element 0 / 1) -- the kernel's
    instruction re-encoded with those fields (clamp cleared). Before the fix all were ignored."""
    from _lanes import encode_vop3p

    _, hsaco = compile_lanes(arch, DOT_BODY.replace("CLAMP", "true"), ["i32", "i32", "float"], ["float"], FDOT2)
    inst = find(hsaco, arch, "v_dot2_f32_f16")
    f = inst.f
    hsaco = patch(hsaco, inst, encode_vop3p(arch, "v_dot2_f32_f16", f["vdst"], f["src0"], f["src1"], f["src2"],
                                            **mods))
    (got,) = run_lanes(arch, hsaco, [pack16(1, 2), pack16(3, 4), F32(0)], [F32])
    np.testing.assert_array_equal(got, want)


_BF16_DOT = "declare float @llvm.amdgcn.fdot2.f32.bf16(<2 x bfloat>, <2 x bfloat>, float, i1)\n"
# case -> (declarations, vector type, call, modifiers in the assembly, c, result). A negated source
# needs clamp on: without it LLVM prefers the VOP2 dot2c, which takes no modifiers (an xor first).
FNEG_DOT = {
    "f16 a": (FDOT2, "<2 x half>", "  %n = fneg <2 x half> %x\n  %r0 = call float @llvm.amdgcn.fdot2(<2 x half> %n, "
              "<2 x half> %y, float %x2, i1 true)", "neg_lo:[1,0,0] neg_hi:[1,0,0]", 11.5, 0.5),
    "f16 c": (FDOT2, "<2 x half>", "  %n = fneg float %x2\n  %r0 = call float @llvm.amdgcn.fdot2(<2 x half> %x, "
              "<2 x half> %y, float %n, i1 false)", "neg_lo:[0,0,1] neg_hi:[0,0,1]", 0.5, 10.5),
    "bf16 a": (_BF16_DOT, "<2 x bfloat>", "  %n = fneg <2 x bfloat> %x\n  %r0 = call float @llvm.amdgcn.fdot2.f32.bf16("
               "<2 x bfloat> %n, <2 x bfloat> %y, float %x2, i1 true)", "neg_lo:[1,0,0] neg_hi:[1,0,0]", 11.5, 0.5),
    "bf16 c": (_BF16_DOT, "<2 x bfloat>", "  %n = fneg float %x2\n  %r0 = call float @llvm.amdgcn.fdot2.f32.bf16("
               "<2 x bfloat> %x, <2 x bfloat> %y, float %n, i1 false)", "neg_lo:[0,0,1] neg_hi:[0,0,1]", 0.5, 10.5),
}
FNEG_CASES = [("gfx90a", "f16 a"), ("gfx942", "f16 a"), ("gfx1100", "f16 a"), ("gfx1201", "f16 c"),
              ("gfx950", "bf16 a"), ("gfx1100", "bf16 a"), ("gfx1201", "bf16 a"), ("gfx1100", "bf16 c"),
              ("gfx1201", "bf16 c")]


@pytest.mark.parametrize(("arch", "case"), FNEG_CASES)
def test_dot2_negation_folded_by_llvm(arch, case):
    """fneg of a dot source as LLVM folds it into neg_lo/neg_hi (both bits: the whole source, or
    on gfx11+ the f32 accumulator). a = (1, 2), b = (3, 4): a.b = 11."""
    decls, ty, call, mods, c, want = FNEG_DOT[case]
    body = f"  %x = bitcast {ty} %x0 to {ty}\n  %y = bitcast {ty} %x1 to {ty}\n{call}"
    asm, hsaco = compile_lanes(arch, body, [ty, ty, "float"], ["float"], decls)
    assert mods in asm, asm
    if ty == "<2 x half>":
        a, b = pack16(1, 2), pack16(3, 4)
    else:  # bf16: the high halves of the f32 values
        a = bits([1.0]) >> 16 | bits([2.0]) & 0xFFFF0000
        b = bits([3.0]) >> 16 | bits([4.0]) & 0xFFFF0000
    (got,) = run_lanes(arch, hsaco, [a, b, F32(c)], [F32])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("arch", ALL)
@pytest.mark.parametrize("signed", [True, False])
def test_int_dot4_clamp_saturates(arch, signed):
    """sdot4/udot4 with clamp (v_dot4_i32_i8 / v_dot4_i32_iu8 neg_lo:[1,1,0] / v_dot4_u32_u8 ...
    clamp): the exact sum saturated, not wrapped."""
    name = "sdot4" if signed else "udot4"
    body = f"  %r0 = call i32 @llvm.amdgcn.{name}(i32 %x0, i32 %x1, i32 %x2, i1 true)"
    asm, hsaco = compile_lanes(arch, body, ["i32", "i32", "i32"], ["i32"],
                               f"declare i32 @llvm.amdgcn.{name}(i32, i32, i32, i1)\n")
    assert "clamp" in asm and "v_dot4" in asm
    if signed:
        a = np.array([0x7F7F7F7F, 0x80808080, 0x01010101, 0x7F7F7F7F], np.uint32)
        b = np.array([0x7F7F7F7F, 0x7F7F7F7F, 0x01010101, 0x7F7F7F7F], np.uint32)
        c = np.array([0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 5], np.uint32)
        want = [0x7FFFFFFF, 0x80000000, 3, 4 * 127 * 127 + 5]
    else:
        a = np.array([0xFFFFFFFF, 0x01010101, 0, 0xFFFFFFFF], np.uint32)
        b = np.array([0xFFFFFFFF, 0x01010101, 0, 0x01010101], np.uint32)
        c = np.array([0xFFFFFFFF, 0xFFFFFFFC, 7, 0], np.uint32)
        want = [0xFFFFFFFF, 0, 7, 4 * 255]
        want[1] = 0xFFFFFFFF  # 0xFFFFFFFC + 4 saturates
    W = wave(arch)
    (got,) = run_lanes(arch, hsaco, [np.resize(a, W), np.resize(b, W), np.resize(c, W)], [np.uint32])
    np.testing.assert_array_equal(got[:4], np.array(want, np.uint32))


@pytest.mark.parametrize(("arch", "field", "why"), [
    ("gfx90a", {"neg_lo": (0, 0, 1), "neg_hi": (0, 0, 1)}, "accumulator"),  # CDNA: S2 takes no modifiers
    ("gfx1100", {"neg_lo": (0, 0, 1)}, "accumulator"),  # only both bits (a negation) is known
    ("gfx1201", {"op_sel": (0, 0, 1)}, "op_sel"),
    ("gfx942", {"op_sel_hi": (1, 1, 0)}, "op_sel"),
])
def test_dot2_unknown_accumulator_modifiers_are_refused(arch, field, why):
    from _lanes import encode_vop3p

    _, hsaco = compile_lanes(arch, DOT_BODY.replace("CLAMP", "true"), ["i32", "i32", "float"], ["float"], FDOT2)
    inst = find(hsaco, arch, "v_dot2_f32_f16")
    f = inst.f
    hsaco = patch(hsaco, inst, encode_vop3p(arch, "v_dot2_f32_f16", f["vdst"], f["src0"], f["src1"], f["src2"],
                                            **field))
    (msg,) = unsupported(arch, hsaco)
    assert why in msg


@pytest.mark.parametrize("arch", ["gfx90a", "gfx1201"])
def test_int_dot_negation_is_refused(arch):
    """neg_hi on a byte dot product has no documented meaning (iu8's neg_lo is its signedness)."""
    from _lanes import encode_vop3p

    body = "  %r0 = call i32 @llvm.amdgcn.sdot4(i32 %x0, i32 %x1, i32 %x2, i1 true)"
    _, hsaco = compile_lanes(arch, body, ["i32"] * 3, ["i32"], "declare i32 @llvm.amdgcn.sdot4(i32, i32, i32, i1)\n")
    inst = next(i for i in decoded(hsaco, arch) if i.name.startswith("v_dot4"))
    f = inst.f
    hsaco = patch(hsaco, inst, encode_vop3p(arch, inst.name, f["vdst"], f["src0"], f["src1"], f["src2"],
                                            neg_lo=(f["neg"] & 1, f["neg"] >> 1 & 1, 0), neg_hi=(1, 0, 0)))
    (msg,) = unsupported(arch, hsaco)
    assert "neg" in msg


# -- WMMA -----------------------------------------------------------------------------------
def _wmma(arch: str, body_a: str = "%a", body_c: str = "%c", pre: str = "") -> tuple[str, bytes]:
    n = 16 if arch == "gfx1100" else 8
    decls = (f"declare <8 x float> @llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v{n}f16(<{n} x half>, <{n} x half>, "
             "<8 x float>)\ndeclare <8 x float> @llvm.fabs.v8f32(<8 x float>)\n")
    body = (f"  %a = bitcast <{n // 2} x i32> %x0 to <{n} x half>\n"
            f"  %bm = bitcast <{n // 2} x i32> %x1 to <{n} x half>\n"
            f"  %c = bitcast <8 x i32> %x2 to <8 x float>\n{pre}"
            f"  %r0 = call <8 x float> @llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v{n}f16(<{n} x half> {body_a}, "
            f"<{n} x half> %bm, <8 x float> {body_c})")
    return compile_lanes(arch, body, [f"<{n // 2} x i32>", f"<{n // 2} x i32>", "<8 x i32>"], ["<8 x float>"],
                         decls, slot=32)


def _wmma_run(arch, hsaco, a_pattern, b_pattern, lockstep=False):
    """A's / B's registers all hold `a_pattern` / `b_pattern` (so D's value does not depend on the
    lane layout); C = distinct values per lane and register. Returns (C, D) as [lane, register]."""
    W, n = 32, 8 if arch == "gfx1100" else 4
    c = ((np.arange(W * 8).reshape(W, 8) - 100) * 0.25).astype(F32)
    (d,) = run_lanes(arch, hsaco, [np.full((W, n), a_pattern, np.uint32), np.full((W, n), b_pattern, np.uint32),
                                   c.view(np.uint32)], [(F32, 8)], slot=32, lockstep=lockstep,
                     groups=2 if lockstep else 1)
    return c, d


ONE_TWO, ONES = int(pack16(1, 2)[()]), int(pack16(1, 1)[()])  # register pattern: lo 1.0 / hi 2.0, both 1.0


@pytest.mark.parametrize(("case", "mods", "want"), [
    ("negC", "neg_lo:[0,0,1]", lambda c: 24 - c), ("absC", "neg_hi:[0,0,1]", lambda c: 24 + np.abs(c)),
    ("negabsC", "neg_lo:[0,0,1] neg_hi:[0,0,1]", lambda c: 24 - np.abs(c)),
    ("negA", "neg_lo:[1,0,0] neg_hi:[1,0,0]", lambda c: -24 + c)])
def test_wmma_modifiers_folded_by_llvm(case, mods, want):
    """gfx1201: fneg / fabs of C and fneg of A as LLVM folds them. Each D = sum_k A[.][k] * 1 + C
    with A's registers all (lo 1.0, hi 2.0): 8 ones and 8 twos per row, 24."""
    arch = "gfx1201"
    pre = {"negC": "  %m = fneg <8 x float> %c\n", "absC": "  %m = call <8 x float> @llvm.fabs.v8f32(<8 x float> %c)\n",
           "negabsC": "  %m0 = call <8 x float> @llvm.fabs.v8f32(<8 x float> %c)\n  %m = fneg <8 x float> %m0\n",
           "negA": "  %m = fneg <8 x half> %a\n"}[case]
    asm, hsaco = _wmma(arch, "%m" if case == "negA" else "%a", "%c" if case == "negA" else "%m", pre)
    line = next(ln for ln in asm.splitlines() if "v_wmma" in ln)
    assert line.strip().endswith(mods), line
    for lockstep in (False, True):  # lockstep: the batched matrix product (lockstep_ops._matrix)
        c, d = _wmma_run(arch, hsaco, ONE_TWO, ONES, lockstep)
        np.testing.assert_array_equal(d, want(c))


@pytest.mark.parametrize(("neg_lo", "neg_hi", "a", "b", "want"), [
    (0b001, 0, ONE_TWO, ONES, lambda c: 8 + c),      # A's low halves negated: -8 + 16
    (0, 0b001, ONE_TWO, ONES, lambda c: -8 + c),     # A's high halves
    (0b011, 0b011, ONE_TWO, ONES, lambda c: 24 + c),  # A and B both negated
    (0b010, 0, ONES, ONE_TWO, lambda c: 8 + c),      # B's low halves
    (0b100, 0, ONE_TWO, ONES, lambda c: 24 - c),     # NEG[2]: subtract C
    (0, 0b100, ONE_TWO, ONES, lambda c: 24 + np.abs(c)),  # NEG_HI[2]: |C|
])
@pytest.mark.parametrize("arch", RDNA)
def test_wmma_half_negation_and_c_modifiers(arch, neg_lo, neg_hi, a, b, want):
    """The modifiers of AMD's matrix instruction calculator (RDNA3/RDNA4): NEG[0]/NEG[1] negate the
    low 16 bits of each A/B register, NEG_HI[0]/NEG_HI[1] the high 16 bits, {NEG_HI[2], NEG[2]}
    are {ABS, NEG} on C -- set on the kernel's WMMA. (Before the fix neg_lo negated all of A and
    C's bits were ignored; LLVM emits none of these on gfx1100.)"""
    _, hsaco = _wmma(arch)
    inst = find(hsaco, arch, "v_wmma_f32_16x16x16_f16")
    w0, w1 = inst_words(hsaco, inst)
    hsaco = patch(hsaco, inst, [w0 & ~(7 << 8) | neg_hi << 8, w1 & ~(7 << 29) | neg_lo << 29])
    c, d = _wmma_run(arch, hsaco, a, b)
    np.testing.assert_array_equal(d, want(c))


@pytest.mark.parametrize("arch", RDNA)
def test_wmma_iu8_clamp_saturates(arch):
    """wmma.i32.16x16x16.iu8(signed, A, signed, B, C, clamp): the exact i32 sum saturated."""
    n = 4 if arch == "gfx1100" else 2
    decls = (f"declare <8 x i32> @llvm.amdgcn.wmma.i32.16x16x16.iu8.v8i32.v{n}i32(i1, <{n} x i32>, i1, <{n} x i32>, "
             "<8 x i32>, i1)\n")
    body = (f"  %r0 = call <8 x i32> @llvm.amdgcn.wmma.i32.16x16x16.iu8.v8i32.v{n}i32(i1 1, <{n} x i32> %x0, i1 1, "
            f"<{n} x i32> %x1, <8 x i32> %x2, i1 1)")
    asm, hsaco = compile_lanes(arch, body, [f"<{n} x i32>", f"<{n} x i32>", "<8 x i32>"], ["<8 x i32>"], decls,
                               slot=32)
    assert "neg_lo:[1,1,0] clamp" in asm
    W = 32
    a = np.full((W, n), 0x7F7F7F7F, np.uint32)
    a[1::2] = 0x80808080  # odd lanes: -128 (A's rows alternate, whichever layout: each D sums one row)
    c = np.where(np.arange(W * 8).reshape(W, 8) % 2 == 0, 0x7FFFFFFF - 1000, -2**31 + 1000).astype(np.int32)
    (d,) = run_lanes(arch, hsaco, [a, np.full((W, n), 0x7F7F7F7F, np.uint32), c.view(np.uint32)],
                     [(np.int32, 8)], slot=32)
    exact = {16 * 127 * 127, 16 * -128 * 127}  # each D element: one row of A (all 127 or all -128)
    for lane in range(W):
        for r in range(8):
            sums = [int(c[lane, r]) + e for e in exact]
            assert int(d[lane, r]) in [min(max(s, -2**31), 2**31 - 1) for s in sums]
    assert (d == 2**31 - 1).any() and (d == -2**31).any()


@pytest.mark.parametrize(("arch", "which"), [("gfx1201", "clamp"), ("gfx1100", "clamp"), ("gfx1201", "op_sel")])
def test_wmma_float_clamp_and_op_sel_are_refused(arch, which):
    _, hsaco = _wmma(arch)
    inst = find(hsaco, arch, "v_wmma_f32_16x16x16_f16")
    w0, w1 = inst_words(hsaco, inst)
    hsaco = patch(hsaco, inst, [w0 | (1 << 15 if which == "clamp" else 1 << 11), w1])
    (msg,) = unsupported(arch, hsaco)
    assert which.replace("_", "") in msg.replace("_", "")


# -- integer clamp --------------------------------------------------------------------------
SAT = {
    "uadd32": ("uadd.sat.i32", "i32", [(0xFFFFFFFF, 2, 0xFFFFFFFF), (5, 7, 12), (0x80000000, 0x80000000, 0xFFFFFFFF)]),
    "usub32": ("usub.sat.i32", "i32", [(0, 1, 0), (7, 5, 2), (5, 0xFFFFFFFF, 0)]),
    "sadd32": ("sadd.sat.i32", "i32", [(0x7FFFFFFF, 1, 0x7FFFFFFF), (0x80000000, 0xFFFFFFFF, 0x80000000), (3, 4, 7)]),
    "ssub32": ("ssub.sat.i32", "i32", [(0x80000000, 1, 0x80000000), (0x7FFFFFFF, 0xFFFFFFFF, 0x7FFFFFFF), (3, 4, -1)]),
    "uadd16": ("uadd.sat.i16", "i16", [(0xFFFF, 2, 0xFFFF), (5, 7, 12), (0x8000, 0x8000, 0xFFFF)]),
    "usub16": ("usub.sat.i16", "i16", [(0, 1, 0), (7, 5, 2), (5, 0xFFFF, 0)]),
}


@pytest.mark.parametrize("case", sorted(SAT))
@pytest.mark.parametrize("arch", ALL)
def test_integer_clamp_saturates_before_wrapping(arch, case):
    """[us]{add,sub}.sat -> v_add_u32_e64 / v_add_nc_u32_e64 / v_sub_* / v_add_i32 / v_add_u16 ...
    clamp: the exact sum saturated (before the fix the wrapped 32-bit sum was 'clamped')."""
    intr, ty, cases = SAT[case]
    body = f"  %r0 = call {ty} @llvm.{intr}({ty} %x0, {ty} %x1)"
    asm, hsaco = compile_lanes(arch, body, [ty, ty], [ty], f"declare {ty} @llvm.{intr}({ty}, {ty})\n")
    assert "clamp" in asm, asm
    dt = np.uint32 if ty == "i32" else np.uint16
    W = wave(arch)
    a, b, want = (np.resize(np.array([c[k] for c in cases], np.int64).astype(dt), W) for k in range(3))
    (got,) = run_lanes(arch, hsaco, [a, b], [dt])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100", "gfx1201"])
def test_integer_clamp_in_sdwa_and_dpp_forms(arch):
    """v_add_u32_sdwa ... clamp (gfx9) and v_add_nc_u32_e64_dpp ... clamp (gfx11+), hand-encoded:
    0xFFFFFFFF + 2 saturates."""
    from _lanes import opcode as op

    if arch == "gfx942":  # VOP2 v_add_u32 v0, v1, v2 with SDWA (dword selects, clamp bit 13)
        words = [op(arch, "VOP2", "v_add_u32") << 25 | 0 << 17 | 2 << 9 | 249, 1 | 6 << 8 | 1 << 13 | 6 << 16 | 6 << 24]
    else:  # VOP3 v_add_nc_u32 v0, v1(DPP quad_perm identity), v2 clamp
        words = encode_vop3(arch, "v_add_nc_u32", 0, 250, 258, clamp=1) + [1 | 0xE4 << 8 | 0xFF << 24]
    w, insts = run_words(arch, words, {1: 0xFFFFFFFF, 2: 2})
    assert insts[0].name in ("v_add_u32", "v_add_nc_u32") and (insts[0].sdwa or insts[0].dpp)
    np.testing.assert_array_equal(w.v[0], 0xFFFFFFFF)


# -- packed clamp ---------------------------------------------------------------------------
PK_SAT = {"uadd": ("v_pk_add_u16", [(0xFFFF0001, 0x00020003, 0xFFFF0004)]),
          "usub": ("v_pk_sub_u16", [(0x00010005, 0x00020003, 0x00000002)]),
          "sadd": ("v_pk_add_i16", [(0x7FFF8000, 0x0001FFFF, 0x7FFF8000)]),
          "ssub": ("v_pk_sub_i16", [(0x80000000, 0x00010001, 0x8000FFFF)])}


@pytest.mark.parametrize("case", sorted(PK_SAT))
@pytest.mark.parametrize("arch", ALL)
def test_packed_integer_clamp(arch, case):
    name, cases = PK_SAT[case]
    body = (f"  %a = bitcast i32 %x0 to <2 x i16>\n  %bb = bitcast i32 %x1 to <2 x i16>\n"
            f"  %s = call <2 x i16> @llvm.{case}.sat.v2i16(<2 x i16> %a, <2 x i16> %bb)\n"
            "  %r0 = bitcast <2 x i16> %s to i32")
    asm, hsaco = compile_lanes(arch, body, ["i32", "i32"], ["i32"],
                               f"declare <2 x i16> @llvm.{case}.sat.v2i16(<2 x i16>, <2 x i16>)\n")
    assert f"{name} " in asm and "clamp" in asm, asm
    (a, b, want), = cases
    (got,) = run_lanes(arch, hsaco, [np.uint32(a), np.uint32(b)], [np.uint32])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("arch", CDNA)
def test_packed_f32_clamp(arch):
    """v_pk_add_f32 with the clamp bit set (LLVM clamps packed f32 with two v_max, so the bit is
    set on its v_pk_add_f32): each half into [0, 1], NaN to 0."""
    body = "  %r0 = fadd <2 x float> %x0, %x1"
    asm, hsaco = compile_lanes(arch, body, ["<2 x float>"] * 2, ["<2 x float>"])
    inst = find(hsaco, arch, "v_pk_add_f32")
    w0, w1 = inst_words(hsaco, inst)
    hsaco = patch(hsaco, inst, [w0 | 1 << 15, w1])
    x = np.array([[2.0, -3.0], [np.nan, 0.25]], F32)
    y = np.array([[3.0, 0.5], [1.0, 0.25]], F32)
    (got,) = run_lanes(arch, hsaco, [np.resize(x, (64, 2)), np.resize(y, (64, 2))], [(F32, 2)])
    np.testing.assert_array_equal(got[:2], [[1.0, 0.0], [0.0, 0.5]])


@pytest.mark.parametrize("name", ["v_pk_mul_lo_u16", "v_pk_lshlrev_b16"])
@pytest.mark.parametrize("arch", ["gfx90a", "gfx1201"])
def test_packed_clamp_without_saturation_meaning_is_refused(arch, name):
    from _lanes import encode_vop3p

    with pytest.raises(UnsupportedInstruction, match="clamp"):
        run_words(arch, encode_vop3p(arch, name, 0, 257, 258, clamp=1))


# -- float clamp: NaN -> 0 ------------------------------------------------------------------
CLAMP_IN = np.array([np.nan, -np.nan, -0.0, -1.0, 0.5, 2.0, np.inf, -np.inf, 1e-40], F32)
CLAMP_OUT = np.array([0, 0, 0, 0, 0.5, 1, 1, 0, 1e-40], F32)


@pytest.mark.parametrize("ty", ["float", "half", "<2 x half>"])
@pytest.mark.parametrize("arch", ALL)
def test_float_clamp_sends_nan_to_zero(arch, ty):
    """minnum(maxnum(x, 0), 1) -> v_max_f32_e64 v, v, v clamp (v_max_num on gfx12, f16 and packed
    f16 too): LLVM's fold assumes DX10_CLAMP, where clamp turns NaN into 0 (and -0 into +0)."""
    sfx = {"float": "f32", "half": "f16", "<2 x half>": "v2f16"}[ty]
    zero, one = ("zeroinitializer", "<half 1.0, half 1.0>") if ty == "<2 x half>" else ("0.0", "1.0")
    decls = f"declare {ty} @llvm.maxnum.{sfx}({ty}, {ty})\ndeclare {ty} @llvm.minnum.{sfx}({ty}, {ty})\n"
    body = (f"  %m = call {ty} @llvm.maxnum.{sfx}({ty} %x0, {ty} {zero})\n"
            f"  %r0 = call {ty} @llvm.minnum.{sfx}({ty} %m, {ty} {one})")
    asm, hsaco = compile_lanes(arch, body, [ty], [ty], decls)
    assert "clamp" in asm and "max" in asm, asm
    W = wave(arch)
    if ty == "float":
        (got,) = run_lanes(arch, hsaco, [np.resize(CLAMP_IN, W)], [F32])
        np.testing.assert_array_equal(got[:9].view(np.uint32), CLAMP_OUT.view(np.uint32))
        return
    x16 = np.resize(CLAMP_IN.astype(F16), W)
    want = CLAMP_OUT.astype(F16)
    if ty == "half":
        (got,) = run_lanes(arch, hsaco, [x16], [F16])
        np.testing.assert_array_equal(got[:9].view(np.uint16), want.view(np.uint16))
    else:
        (got,) = run_lanes(arch, hsaco, [np.stack([x16, x16[::-1]], 1)], [(F16, 2)])
        np.testing.assert_array_equal(got[:9, 0].view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("arch", ["gfx90a", "gfx1100"])
def test_float_clamp_keeps_nan_without_dx10_clamp(arch):
    """A kernel launched with DX10_CLAMP off (MODE bit 8): clamp passes NaN through."""
    words = encode_vop3(arch, "v_max_f32", 0, 257, 257, clamp=1)
    w, _ = run_words(arch, words, {1: bits(np.nan)}, mode0=0xF0 | 1 << 9)
    assert np.isnan(w.vf[0]).all()
    w, _ = run_words(arch, words, {1: bits(np.nan)})
    np.testing.assert_array_equal(w.vf[0], 0.0)


# -- clamp / omod without a modelled meaning ------------------------------------------------
@pytest.mark.parametrize(("arch", "name", "mod"), [
    ("gfx90a", "v_cvt_pkrtz_f16_f32", "clamp"), ("gfx1100", "v_cvt_pk_rtz_f16_f32", "clamp"),
    ("gfx942", "v_pack_b32_f16", "clamp"), ("gfx1201", "v_cvt_pk_rtz_f16_f32", "omod"),
    ("gfx90a", "v_add_u32", "omod"), ("gfx1201", "v_add_nc_u32", "omod"), ("gfx942", "v_mul_lo_u32", "clamp")])
def test_output_modifiers_without_meaning_are_refused(arch, name, mod):
    """clamp/omod on a b32 result (two packed f16) or omod on an integer result: refused (before
    the fix silently dropped)."""
    words = encode_vop3(arch, name, 0, 257, 258, clamp=int(mod == "clamp"), omod=1 if mod == "omod" else 0)
    with pytest.raises(UnsupportedInstruction, match=mod):
        run_words(arch, words)
