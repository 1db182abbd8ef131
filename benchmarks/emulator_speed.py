"""Emulator speed: wave-instructions per second per arch, one core.

Runs a loop-heavy elementwise kernel (loads, f32/i32 ALU, compares, branches, stores) compiled by
the toolchain for each arch and prints a table. Target: >= 200,000 wave-instructions/s.
Usage: python benchmarks/emulator_speed.py [arch ...]
"""

from __future__ import annotations

import struct
import sys
import time

import numpy as np

from tiledsl.backends.rocm import codegen
from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

KERNEL = r"""
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare float @llvm.maxnum.f32(float, float)
define amdgpu_kernel void @bench(ptr addrspace(1) %x, ptr addrspace(1) %out, i32 %iters) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %b = mul i32 %wg, 256
  %i = add i32 %b, %tid
  %i64 = zext i32 %i to i64
  %p = getelementptr float, ptr addrspace(1) %x, i64 %i64
  %v = load float, ptr addrspace(1) %p
  br label %loop
loop:
  %k = phi i32 [ 0, %entry ], [ %k1, %loop ]
  %a = phi float [ %v, %entry ], [ %a3, %loop ]
  %m = phi float [ 0.0, %entry ], [ %m1, %loop ]
  %kf = sitofp i32 %k to float
  %a1 = fmul float %a, 0.5
  %a2 = fadd float %a1, %kf
  %h = and i32 %k, 7
  %hf = uitofp i32 %h to float
  %a3 = fsub float %a2, %hf
  %m1 = call float @llvm.maxnum.f32(float %m, float %a3)
  %k1 = add i32 %k, 1
  %c = icmp slt i32 %k1, %iters
  br i1 %c, label %loop, label %done
done:
  %r = fadd float %a3, %m1
  %q = getelementptr float, ptr addrspace(1) %out, i64 %i64
  store float %r, ptr addrspace(1) %q
  ret void
}
"""


def measure(arch_name: str, groups: int = 4, iters: int = 200) -> tuple[int, float]:
    arch = get_arch(arch_name)
    _asm, obj = codegen.make_isa_and_object(KERNEL, arch)
    dev = EmulatorDevice(arch)
    k = dev.get_kernel(dev.load_module(codegen.make_hsaco(obj)), "bench")
    x = dev.to_device(np.ones(256 * groups, np.float32))
    out = dev.alloc(256 * groups * 4)
    dev.launch(k, 1, 256, struct.pack("<QQi", x.addr, out.addr, 2))  # warm-up (caches)
    t0 = time.perf_counter()
    dev.launch(k, groups, 256, struct.pack("<QQi", x.addr, out.addr, iters))
    dt = time.perf_counter() - t0
    return dev.last_stats["wave_instructions"], dt


def main() -> None:
    archs = sys.argv[1:] or list(ARCH_NAMES)
    print(f"{'arch':8} {'wave':>4} {'wave-instructions':>18} {'seconds':>8} {'wave-instr/s':>13}")
    for a in archs:
        n, dt = measure(a)
        print(f"{a:8} {get_arch(a).wave_size:>4} {n:>18,} {dt:>8.3f} {n / dt:>13,.0f}")


if __name__ == "__main__":
    main()
