"""HipDevice on a real AMD GPU; skipped (with the reason) where none is visible."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from tiledsl.backends.rocm.runtime.device import gpu_visible

pytestmark = [pytest.mark.hip,
              pytest.mark.skipif(not gpu_visible(), reason="no AMD GPU visible (needs /dev/kfd, ROCm and hip-python)")]

KERNEL = r"""
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
define amdgpu_kernel void @axpy(ptr addrspace(1) %x, ptr addrspace(1) %y, float %a, i32 %n) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %b = mul i32 %g, 64
  %i = add i32 %b, %t
  %c = icmp slt i32 %i, %n
  br i1 %c, label %body, label %end
body:
  %px = getelementptr float, ptr addrspace(1) %x, i32 %i
  %py = getelementptr float, ptr addrspace(1) %y, i32 %i
  %xv = load float, ptr addrspace(1) %px
  %yv = load float, ptr addrspace(1) %py
  %m = fmul float %xv, %a
  %s = fadd float %m, %yv
  store float %s, ptr addrspace(1) %py
  br label %end
end:
  ret void
}
"""


def test_hip_axpy_matches_numpy_and_emulator():
    from _emu_util import compile_llvm

    from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
    from tiledsl.backends.rocm.runtime.hip_device import HipDevice

    hip_dev = HipDevice()
    _asm, hsaco = compile_llvm(KERNEL, hip_dev.arch.name)
    n = 1000
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    results = []
    for dev in (hip_dev, EmulatorDevice(hip_dev.arch)):
        k = dev.get_kernel(dev.load_module(hsaco), "axpy")
        bx, by = dev.to_device(x), dev.to_device(y)
        stream = dev.create_stream()
        dev.launch(k, (n + 63) // 64, 64, struct.pack("<QQfi", bx.addr, by.addr, 2.0, n), stream=stream)
        dev.synchronize(stream)
        results.append(dev.from_device(by, np.float32, n))
        dev.free(bx)
        dev.free(by)
    np.testing.assert_array_equal(results[0], 2 * x + y)
    np.testing.assert_array_equal(results[0], results[1])


def test_hip_errors_are_decoded():
    from tiledsl.backends.rocm.runtime.device import DeviceError
    from tiledsl.backends.rocm.runtime.hip_device import HipDevice

    dev = HipDevice()
    with pytest.raises(DeviceError, match=r"hipMalloc\(.*failed: hipError"):
        dev.alloc(1 << 60, "too big")
