"""gfx12's pseudo-scalar transcendentals (v_s_{exp,log,rcp,rsq,sqrt}_{f32,f16}: VOP3 with an SGPR
destination), which LLVM selects for uniform values (Triton's gfx1201 softmax and matmul use
v_s_rcp_f32), on the emulator against numpy."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from _emu_util import compile_llvm

from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

pytestmark = pytest.mark.emulator

KERNEL = r"""
declare float @llvm.amdgcn.rcp.f32(float)
declare float @llvm.amdgcn.rsq.f32(float)
declare float @llvm.amdgcn.sqrt.f32(float)
declare float @llvm.amdgcn.exp2.f32(float)
declare float @llvm.amdgcn.log.f32(float)
declare half @llvm.amdgcn.rcp.f16(half)
declare half @llvm.amdgcn.rsq.f16(half)
declare half @llvm.sqrt.f16(half)
declare half @llvm.exp2.f16(half)
declare half @llvm.log2.f16(half)
define amdgpu_kernel void @vs(ptr addrspace(1) %out, float %x, half %h) {
  %a = call float @llvm.amdgcn.rcp.f32(float %x)
  %b = call float @llvm.amdgcn.rsq.f32(float %x)
  %c = call float @llvm.amdgcn.sqrt.f32(float %x)
  %d = call float @llvm.amdgcn.exp2.f32(float %x)
  %e = call float @llvm.amdgcn.log.f32(float %x)
  %nx = fneg float %x
  %f = call float @llvm.amdgcn.exp2.f32(float %nx)
  %g = call half @llvm.amdgcn.rcp.f16(half %h)
  %i = call half @llvm.amdgcn.rsq.f16(half %h)
  %j = call half @llvm.sqrt.f16(half %h)
  %k = call half @llvm.exp2.f16(half %h)
  %l = call half @llvm.log2.f16(half %h)
  %p1 = getelementptr float, ptr addrspace(1) %out, i32 1
  %p2 = getelementptr float, ptr addrspace(1) %out, i32 2
  %p3 = getelementptr float, ptr addrspace(1) %out, i32 3
  %p4 = getelementptr float, ptr addrspace(1) %out, i32 4
  %p5 = getelementptr float, ptr addrspace(1) %out, i32 5
  store float %a, ptr addrspace(1) %out
  store float %b, ptr addrspace(1) %p1
  store float %c, ptr addrspace(1) %p2
  store float %d, ptr addrspace(1) %p3
  store float %e, ptr addrspace(1) %p4
  store float %f, ptr addrspace(1) %p5
  %q = getelementptr half, ptr addrspace(1) %out, i32 12
  %q1 = getelementptr half, ptr addrspace(1) %q, i32 1
  %q2 = getelementptr half, ptr addrspace(1) %q, i32 2
  %q3 = getelementptr half, ptr addrspace(1) %q, i32 3
  %q4 = getelementptr half, ptr addrspace(1) %q, i32 4
  store half %g, ptr addrspace(1) %q
  store half %i, ptr addrspace(1) %q1
  store half %j, ptr addrspace(1) %q2
  store half %k, ptr addrspace(1) %q3
  store half %l, ptr addrspace(1) %q4
  ret void
}
"""


@pytest.mark.parametrize(("x", "h"), [(2.5, 0.75), (0.3, 3.0)])
def test_pseudo_scalar_transcendentals(x, h):
    asm, hsaco = compile_llvm(KERNEL, "gfx1201")
    ops = {f"v_s_{op}_{t}" for op in ("exp", "log", "rcp", "rsq", "sqrt") for t in ("f32", "f16")}
    assert ops <= set(asm.split()) and "-s" in asm  # every form, and a negated source
    dev = EmulatorDevice("gfx1201")
    out = dev.alloc(64)
    hb = int(np.float16(h).view(np.uint16))
    dev.launch(dev.kernel(hsaco, "vs"), 1, 32, struct.pack("<QfH", out.addr, x, hb))
    got = dev.from_device(out, np.uint8, 64)
    f32 = got[:24].view(np.float32)
    x32, h16 = np.float32(x), np.float16(h)
    np.testing.assert_allclose(f32, [1 / x32, 1 / np.sqrt(x32), np.sqrt(x32), np.exp2(x32), np.log2(x32),
                                     np.exp2(-x32)], rtol=1e-6)
    f16 = got[24:34].view(np.float16).astype(np.float32)
    np.testing.assert_allclose(f16, [1 / h16, 1 / np.sqrt(h16), np.sqrt(h16), np.exp2(h16), np.log2(h16)],
                               rtol=1e-3)
