"""The runtime Device interface on the emulator: memory, modules, launches, streams, defaults."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from _emu_util import compile_llvm

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime import default_device
from tiledsl.backends.rocm.runtime.device import DeviceError, complete_kernargs, gpu_visible
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

pytestmark = pytest.mark.emulator

BLOCKDIM = r"""
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workgroup.id.y()
declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
define amdgpu_kernel void @ids(ptr addrspace(1) %out) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %gy = call i32 @llvm.amdgcn.workgroup.id.y()
  %ip = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
  %p16 = getelementptr i8, ptr addrspace(4) %ip, i64 12
  %bs = load i16, ptr addrspace(4) %p16
  %bsz = zext i16 %bs to i32
  %nx = load i32, ptr addrspace(4) %ip
  %row = mul i32 %gy, %nx
  %g = add i32 %row, %gx
  %base = mul i32 %g, %bsz
  %i = add i32 %base, %t
  %v = mul i32 %g, 1000
  %w = add i32 %v, %t
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %w, ptr addrspace(1) %p
  ret void
}
"""


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_grid_ids_and_hidden_kernargs(arch):
    """2-D grid, workgroup ids (gfx12: from ttmp registers) and block size from the hidden kernargs."""
    _asm, hsaco = compile_llvm(BLOCKDIM, arch)
    dev = EmulatorDevice(arch)
    k = dev.get_kernel(dev.load_module(hsaco), "ids")
    grid, block = (3, 2), 96
    out = dev.alloc(6 * block * 4, "out")
    dev.launch(k, grid, block, struct.pack("<Q", out.addr))
    got = dev.from_device(out, np.int32, (6, block))
    want = np.arange(6)[:, None] * 1000 + np.arange(block)[None, :]
    np.testing.assert_array_equal(got, want)


def test_memory_and_errors():
    dev = EmulatorDevice("gfx942")
    buf = dev.to_device(np.arange(10, dtype=np.int32), "ten")
    assert dev.from_device(buf, np.int32, 10).tolist() == list(range(10))
    with pytest.raises(DeviceError, match="overflows 'ten'"):
        dev.copy_in(buf, bytes(44))
    s = dev.create_stream()
    dev.synchronize(s)
    dev.destroy_stream(s)
    dev.free(buf)
    with pytest.raises(DeviceError, match="double free"):
        dev.free(buf)
    with pytest.raises(DeviceError, match="no kernel 'nope'"):
        _asm, hsaco = compile_llvm(BLOCKDIM, "gfx942")
        dev.get_kernel(dev.load_module(hsaco), "nope")


def test_complete_kernargs_fills_hidden_block_sizes():
    meta = {".kernarg_segment_size": 24, ".args": [
        {".offset": 0, ".size": 8, ".value_kind": "global_buffer"},
        {".offset": 8, ".size": 4, ".value_kind": "hidden_block_count_x"},
        {".offset": 12, ".size": 2, ".value_kind": "hidden_group_size_x"}]}
    raw = complete_kernargs(meta, b"\1" * 8, (5, 1, 1), (64, 1, 1), 0)
    assert len(raw) == 24 and struct.unpack_from("<IH", raw, 8) == (5, 64)


def test_default_device_is_the_emulator_without_a_gpu():
    if gpu_visible():
        pytest.skip("an AMD GPU is visible: the default is HIP")
    dev = default_device("gfx1201")
    assert isinstance(dev, EmulatorDevice) and dev.arch is get_arch("gfx1201")
    with pytest.raises(DeviceError, match="name the arch"):
        default_device()
