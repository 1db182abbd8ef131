"""The emulator runs code LLVM produces: scalar/vector ALU (f32, f16, bf16, i32, i64, conversions,
division, transcendental), divergent control flow and loops, LDS with barriers across waves,
cross-lane operations (DPP, swizzle, bpermute, readlane) and atomics, compared with numpy.
Also: the decoder agrees with LLVM's own .s text, and faults produce clear errors."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from _emu_util import asm_mnemonics, compile_llvm

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.emulator.loader import disassembly, load_code_object
from tiledsl.backends.rocm.emulator.memory import MemoryFault, UnsupportedInstruction
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

pytestmark = pytest.mark.emulator

N = 200  # not a multiple of the block: the last workgroup has inactive lanes
BLOCK = 128

ALU = r"""
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare float @llvm.fma.f32(float, float, float)
declare float @llvm.maxnum.f32(float, float)
declare float @llvm.minnum.f32(float, float)
declare float @llvm.exp2.f32(float)
declare float @llvm.sqrt.f32(float)
declare float @llvm.fabs.f32(float)
declare float @llvm.floor.f32(float)

define amdgpu_kernel void @alu(ptr addrspace(1) %x, ptr addrspace(1) %y, ptr addrspace(1) %n,
                               ptr addrspace(1) %out, i32 %N) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %wg, 128
  %i = add i32 %base, %tid
  %inb = icmp slt i32 %i, %N
  br i1 %inb, label %body, label %exit
body:
  %i64 = sext i32 %i to i64
  %px = getelementptr float, ptr addrspace(1) %x, i64 %i64
  %xv = load float, ptr addrspace(1) %px
  %py = getelementptr float, ptr addrspace(1) %y, i64 %i64
  %yv = load float, ptr addrspace(1) %py
  %pn = getelementptr i32, ptr addrspace(1) %n, i64 %i64
  %nv = load i32, ptr addrspace(1) %pn
  %r0 = fadd float %xv, %yv
  %r1 = fmul float %xv, %yv
  %r2 = call float @llvm.fma.f32(float %xv, float %yv, float 1.5)
  %r3 = fdiv float %xv, %yv
  %r4 = call float @llvm.maxnum.f32(float %xv, float %yv)
  %r5 = call float @llvm.minnum.f32(float %xv, float %yv)
  %xc = call float @llvm.minnum.f32(float %xv, float 10.0)
  %r6 = call float @llvm.exp2.f32(float %xc)
  %r7 = sitofp i32 %nv to float
  %x10 = fmul float %xv, 10.0
  %r8i = fptosi float %x10 to i32
  %r8 = bitcast i32 %r8i to float
  %nabs = and i32 %nv, 1048575
  %r9i = udiv i32 %nabs, 7
  %r9 = bitcast i32 %r9i to float
  %r10i = srem i32 %nv, 5
  %r10 = bitcast i32 %r10i to float
  %gt = fcmp ogt float %xv, %yv
  %y2 = fmul float %yv, 2.0
  %r11 = select i1 %gt, float %xv, float %y2
  %xh = fptrunc float %xv to half
  %r12 = fpext half %xh to float
  %yh = fptrunc float %yv to half
  %sh = fadd half %xh, %yh
  %ph = fmul half %sh, %xh
  %r13 = fpext half %ph to float
  %xb = fptrunc float %xv to bfloat
  %r14 = fpext bfloat %xb to float
  %n64 = sext i32 %nv to i64
  %m64 = mul i64 %n64, 123456789
  %s64 = ashr i64 %m64, 7
  %r15i = trunc i64 %s64 to i32
  %r15 = bitcast i32 %r15i to float
  %shl = shl i32 %nv, 3
  %lsr = lshr i32 %nv, 2
  %xr = xor i32 %shl, %lsr
  %r16 = bitcast i32 %xr to float
  %ax = call float @llvm.fabs.f32(float %xv)
  %r17 = call float @llvm.sqrt.f32(float %ax)
  %cnt = and i32 %nv, 15
  br label %loop
loop:
  %k = phi i32 [ 0, %body ], [ %k1, %loop ]
  %acc = phi float [ 0.0, %body ], [ %acc1, %loop ]
  %kf = sitofp i32 %k to float
  %t = fmul float %kf, %xv
  %acc1 = fadd float %acc, %t
  %k1 = add i32 %k, 1
  %done = icmp sge i32 %k1, %cnt
  br i1 %done, label %after, label %loop
after:
  %neg = icmp slt i32 %nv, 0
  br i1 %neg, label %bneg, label %bpos
bneg:
  %fl = call float @llvm.floor.f32(float %yv)
  br label %join
bpos:
  %nyv = fsub float 0.0, %yv
  br label %join
join:
  %r19 = phi float [ %fl, %bneg ], [ %nyv, %bpos ]
  %res = insertelement <20 x float> undef, float %r0, i32 0
  %res1 = insertelement <20 x float> %res, float %r1, i32 1
  %res2 = insertelement <20 x float> %res1, float %r2, i32 2
  %res3 = insertelement <20 x float> %res2, float %r3, i32 3
  %res4 = insertelement <20 x float> %res3, float %r4, i32 4
  %res5 = insertelement <20 x float> %res4, float %r5, i32 5
  %res6 = insertelement <20 x float> %res5, float %r6, i32 6
  %res7 = insertelement <20 x float> %res6, float %r7, i32 7
  %res8 = insertelement <20 x float> %res7, float %r8, i32 8
  %res9 = insertelement <20 x float> %res8, float %r9, i32 9
  %res10 = insertelement <20 x float> %res9, float %r10, i32 10
  %res11 = insertelement <20 x float> %res10, float %r11, i32 11
  %res12 = insertelement <20 x float> %res11, float %r12, i32 12
  %res13 = insertelement <20 x float> %res12, float %r13, i32 13
  %res14 = insertelement <20 x float> %res13, float %r14, i32 14
  %res15 = insertelement <20 x float> %res14, float %r15, i32 15
  %res16 = insertelement <20 x float> %res15, float %r16, i32 16
  %res17 = insertelement <20 x float> %res16, float %r17, i32 17
  %res18 = insertelement <20 x float> %res17, float %acc1, i32 18
  %res19 = insertelement <20 x float> %res18, float %r19, i32 19
  %o = mul i64 %i64, 20
  %po = getelementptr float, ptr addrspace(1) %out, i64 %o
  store <20 x float> %res19, ptr addrspace(1) %po, align 4
  br label %exit
exit:
  ret void
}
"""


def _alu_reference(x, y, n):
    f32 = np.float32
    with np.errstate(all="ignore"):
        cols = [
            x + y, x * y, (x.astype(np.float64) * y + 1.5).astype(f32), x / y, np.fmax(x, y), np.fmin(x, y),
            np.exp2(np.minimum(x, f32(10))), n.astype(f32),
            np.trunc(x * f32(10)).astype(np.int32).view(f32), ((n & 1048575) // 7).astype(np.int32).view(f32),
            np.fmod(n, 5).astype(np.int32).view(f32), np.where(x > y, x, y * f32(2)),
            x.astype(np.float16).astype(f32),
            ((x.astype(np.float16) + y.astype(np.float16)) * x.astype(np.float16)).astype(f32),
            _bf16_round(x), ((n.astype(np.int64) * 123456789) >> 7).astype(np.int32).view(f32),
            ((n << 3) ^ (n.view(np.uint32) >> 2).view(np.int32)).view(f32), np.sqrt(np.abs(x)),
            np.array([sum(f32(k) * xi for k in range(max(ni & 15, 1)))
                      for xi, ni in zip(x, n, strict=True)], dtype=f32),
            np.where(n < 0, np.floor(y), -y),
        ]
    return np.stack(cols, axis=1)


def _bf16_round(x):
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_alu_kernel(arch):
    asm, hsaco = compile_llvm(ALU, arch)
    dev = EmulatorDevice(arch)
    k = dev.get_kernel(dev.load_module(hsaco), "alu")
    assert dev.unsupported(k) == []
    rng = np.random.default_rng(1)
    x = rng.uniform(-4, 4, N).astype(np.float32)
    y = rng.uniform(0.5, 3, N).astype(np.float32) * rng.choice([-1, 1], N).astype(np.float32)
    n = rng.integers(-100000, 100000, N).astype(np.int32)
    bx, by, bn = dev.to_device(x, "x"), dev.to_device(y, "y"), dev.to_device(n, "n")
    out = dev.alloc(N * 20 * 4, "out")
    dev.launch(k, (N + BLOCK - 1) // BLOCK, BLOCK, struct.pack("<QQQQi", bx.addr, by.addr, bn.addr, out.addr, N))
    got = dev.from_device(out, np.float32, (N, 20))
    want = _alu_reference(x, y, n)
    exact = [0, 1, 2, 4, 5, 7, 8, 9, 10, 11, 12, 14, 15, 16, 19]
    np.testing.assert_array_equal(got[:, exact].view(np.uint32), want[:, exact].view(np.uint32))
    np.testing.assert_allclose(got[:, [3, 6, 17, 18]], want[:, [3, 6, 17, 18]], rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(got[:, 13], want[:, 13], rtol=1e-3)  # f16 chain: one rounding per op


LDS = r"""
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
declare i32 @llvm.amdgcn.ds.bpermute(i32, i32)
declare i32 @llvm.amdgcn.ds.swizzle(i32, i32)
declare i32 @llvm.amdgcn.readfirstlane.i32(i32)
declare i32 @llvm.amdgcn.update.dpp.i32(i32, i32, i32, i32, i32, i1)
declare i32 @llvm.amdgcn.mbcnt.lo(i32, i32)
declare i32 @llvm.amdgcn.mbcnt.hi(i32, i32)
@lds = internal addrspace(3) global [256 x i32] undef, align 4

define amdgpu_kernel void @xlane(ptr addrspace(1) %in, ptr addrspace(1) %out, ptr addrspace(1) %sum) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %g = mul i32 %wg, 256
  %i = add i32 %g, %tid
  %i64 = zext i32 %i to i64
  %p = getelementptr i32, ptr addrspace(1) %in, i64 %i64
  %v = load i32, ptr addrspace(1) %p
  %pl = getelementptr [256 x i32], ptr addrspace(3) @lds, i32 0, i32 %tid
  store i32 %v, ptr addrspace(3) %pl
  call void @llvm.amdgcn.s.barrier()
  %t1 = add i32 %tid, 37
  %t2 = and i32 %t1, 255
  %pr = getelementptr [256 x i32], ptr addrspace(3) @lds, i32 0, i32 %t2
  %nb = load i32, ptr addrspace(3) %pr
  %lane4 = shl i32 %tid, 2
  %rot = add i32 %lane4, 4
  %bp = call i32 @llvm.amdgcn.ds.bpermute(i32 %rot, i32 %v)
  %sw = call i32 @llvm.amdgcn.ds.swizzle(i32 %v, i32 31)
  %rf = call i32 @llvm.amdgcn.readfirstlane.i32(i32 %v)
  %dpp = call i32 @llvm.amdgcn.update.dpp.i32(i32 0, i32 %v, i32 273, i32 15, i32 15, i1 true)
  %mlo = call i32 @llvm.amdgcn.mbcnt.lo(i32 -1, i32 0)
  %mb = call i32 @llvm.amdgcn.mbcnt.hi(i32 -1, i32 %mlo)
  %o = mul i64 %i64, 6
  %po = getelementptr i32, ptr addrspace(1) %out, i64 %o
  %r0 = insertelement <6 x i32> undef, i32 %nb, i32 0
  %r1 = insertelement <6 x i32> %r0, i32 %bp, i32 1
  %r2 = insertelement <6 x i32> %r1, i32 %sw, i32 2
  %r3 = insertelement <6 x i32> %r2, i32 %rf, i32 3
  %r4 = insertelement <6 x i32> %r3, i32 %dpp, i32 4
  %r5 = insertelement <6 x i32> %r4, i32 %mb, i32 5
  store <6 x i32> %r5, ptr addrspace(1) %po, align 4
  %old = atomicrmw add ptr addrspace(1) %sum, i32 %v monotonic
  %pmax = getelementptr i32, ptr addrspace(1) %sum, i64 1
  %old2 = atomicrmw max ptr addrspace(1) %pmax, i32 %v monotonic
  ret void
}
"""


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_lds_barrier_crosslane_atomics(arch):
    W = get_arch(arch).wave_size
    asm, hsaco = compile_llvm(LDS, arch)
    dev = EmulatorDevice(arch)
    k = dev.get_kernel(dev.load_module(hsaco), "xlane")
    assert dev.unsupported(k) == []
    groups = 2
    rng = np.random.default_rng(2)
    v = rng.integers(-1000, 1000, 256 * groups).astype(np.int32)
    bin_, out, s = dev.to_device(v), dev.alloc(256 * groups * 24), dev.to_device(np.array([0, -2**31], np.int32))
    dev.launch(k, groups, 256, struct.pack("<QQQ", bin_.addr, out.addr, s.addr))
    got = dev.from_device(out, np.int32, (256 * groups, 6))
    t = np.arange(256 * groups) % 256
    g = np.arange(256 * groups) // 256 * 256
    lane = t % W
    wave0 = t - lane + g
    np.testing.assert_array_equal(got[:, 0], v[g + (t + 37) % 256])  # LDS across waves after a barrier
    np.testing.assert_array_equal(got[:, 1], v[wave0 + (lane + 1) % W])  # bpermute: lane reads lane+1
    sw = (lane & ~31) | ((lane & 31) & 31)  # swizzle and_mask 31: identity
    np.testing.assert_array_equal(got[:, 2], v[wave0 + sw])
    np.testing.assert_array_equal(got[:, 3], v[wave0])  # readfirstlane
    row_shr1 = np.where(lane % 16 == 0, 0, v[np.maximum(wave0 + lane - 1, 0)])  # DPP row_shr:1, bound_ctrl
    np.testing.assert_array_equal(got[:, 4], row_shr1)
    np.testing.assert_array_equal(got[:, 5], lane)  # mbcnt
    np.testing.assert_array_equal(dev.from_device(s, np.int32, 2), [v.sum(), v.max()])


FADD = r"""
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @fadd(ptr addrspace(1) %x, ptr addrspace(1) %acc) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %slot = and i32 %t, 3
  %px = getelementptr float, ptr addrspace(1) %x, i32 %t
  %v = load float, ptr addrspace(1) %px, align 4
  %pa = getelementptr float, ptr addrspace(1) %acc, i32 %slot
  %old = atomicrmw fadd ptr addrspace(1) %pa, float %v syncscope("agent") monotonic, align 4, MARKS
  ret void
}
!0 = !{}
""".replace("MARKS", "!amdgpu.no.fine.grained.memory !0, !amdgpu.ignore.denormal.mode !0")  # as tile.atomic_add


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_native_float_atomic_add(arch):
    """global_atomic_add_f32 (what tile.atomic_add lowers to): f32 sums in lane order, one rounding
    per add; gfx90a's flushes f32 denormals in and out, the later archs keep them."""
    asm, hsaco = compile_llvm(FADD, arch)
    assert "global_atomic_add_f32" in asm and "cmpswap" not in asm
    dev = EmulatorDevice(arch)
    k = dev.get_kernel(dev.load_module(hsaco), "fadd")
    rng = np.random.default_rng(5)
    x = rng.standard_normal(64).astype(np.float32)
    x[3::4] = np.float32(1e-39)  # slot 3 adds only denormals
    acc0 = np.array([1.0, -2.0, 1e-3, 0.0], np.float32)
    xb, ab = dev.to_device(x), dev.to_device(acc0)
    dev.launch(k, 1, 64, struct.pack("<QQ", xb.addr, ab.addr))
    want = acc0.copy()
    for t in range(64):  # lanes in order
        want[t % 4] = np.float32(want[t % 4] + x[t])
    if get_arch(arch).atomic_fadd_flushes_denormals:
        want[3] = 0.0
    np.testing.assert_array_equal(dev.from_device(ab, np.float32, 4), want)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_decoder_matches_llvm_asm(arch):
    """Self-check: the decoded mnemonic stream equals the one in LLVM's .s for the same code."""
    for src, name in ((ALU, "alu"), (LDS, "xlane")):
        asm, hsaco = compile_llvm(src, arch)
        img = load_code_object(hsaco, arch)[name]
        want = asm_mnemonics(asm, name)
        assert disassembly(img)[:len(want)] == want


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_out_of_bounds_is_reported(arch):
    asm, hsaco = compile_llvm(ALU, arch)
    dev = EmulatorDevice(arch)
    k = dev.get_kernel(dev.load_module(hsaco), "alu")
    x = dev.to_device(np.ones(N, np.float32), "x")
    out = dev.alloc(N * 20 * 4 - 4, "out")  # one float too small: the last lane's store overflows
    with pytest.raises(MemoryFault) as info:
        dev.launch(k, (N + BLOCK - 1) // BLOCK, BLOCK, struct.pack("<QQQQi", x.addr, x.addr, x.addr, out.addr, N))
    msg = str(info.value)
    for part in ("kernel 'alu'", "workgroup (1, 0, 0)", "wave", "lane", "global store",
                 "runs past the end of out (15996-byte allocation)"):
        assert part in msg, msg


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_lds_out_of_bounds_is_reported(arch):
    src = LDS.replace("%t2 = and i32 %t1, 255", "%t2 = add i32 %t1, 300")
    asm, hsaco = compile_llvm(src, arch)
    dev = EmulatorDevice(arch)
    k = dev.get_kernel(dev.load_module(hsaco), "xlane")
    buf = dev.alloc(256 * 24 + 64)
    with pytest.raises(MemoryFault, match=r"LDS load .*lane \d+.*outside the workgroup's 1024 bytes"):
        dev.launch(k, 1, 256, struct.pack("<QQQ", buf.addr, buf.addr, buf.addr))


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_unsupported_instruction_is_reported(arch):
    asm, hsaco = compile_llvm(ALU, arch)
    blob = bytearray(hsaco)
    img = load_code_object(bytes(blob), arch)["alu"]
    # Replace the first instruction with an image-sample encoding (MIMG/VIMAGE), which we do not model.
    first = img.insts[0]
    word = 0xF0800000 if arch == "gfx942" else 0xD3C00000
    from tiledsl.backends.rocm import elf
    co = elf.read_code_object(bytes(blob))
    seg_off = _file_offset(bytes(blob), first.addr)
    struct.pack_into("<I", blob, seg_off, word)
    del co
    dev = EmulatorDevice(arch)
    with pytest.raises(UnsupportedInstruction, match=arch):
        k = dev.get_kernel(dev.load_module(bytes(blob)), "alu")
        dev.launch(k, 1, BLOCK, bytes(36))


def _file_offset(blob: bytes, vaddr: int) -> int:
    (e_phoff,) = struct.unpack_from("<Q", blob, 32)
    (e_phentsize, e_phnum) = struct.unpack_from("<HH", blob, 54)
    for i in range(e_phnum):
        p_type, _f, off, va, _pa, filesz, _m, _a = struct.unpack_from("<IIQQQQQQ", blob, e_phoff + i * e_phentsize)
        if p_type == 1 and va <= vaddr < va + filesz:
            return off + vaddr - va
    raise AssertionError("vaddr not in a segment")
