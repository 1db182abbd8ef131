"""gfx12's scalar float instructions (backends/rocm/emulator/salu_float.py), which LLVM selects
for uniform float math on gfx1201: each expression below is compiled from LLVM IR on kernel
arguments (uniform, so in SGPRs), the instruction under test is checked to be in the code, and
the emulator's result is compared with numpy's, bit for bit."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from _emu_util import compile_llvm

from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

pytestmark = pytest.mark.emulator

_F32, _F16 = np.float32, np.float16


def _fma32(a, b, c):
    return _F32(np.float64(a) * np.float64(b) + np.float64(c))


# name: (LLVM IR computing %r (i32) from float %a, %b and half %h, %g; the instruction; numpy's %r)
CASES = {
    "cvt_f16_f32": ("%t = fptrunc float %a to half\n  %r16 = bitcast half %t to i16\n  %r = zext i16 %r16 to i32",
                    "s_cvt_f16_f32", lambda a, b, h, g: int(_F16(a).view(np.uint16))),
    "cvt_f32_f16": ("%t = fpext half %h to float\n  %r = bitcast float %t to i32",
                    "s_cvt_f32_f16", lambda a, b, h, g: int(_F32(h).view(np.uint32))),
    "add_f16": ("%t = fadd half %h, %g\n  %t2 = fpext half %t to float\n  %r = bitcast float %t2 to i32",
                "s_add_f16", lambda a, b, h, g: int(_F32(_F16(h + g)).view(np.uint32))),
    "mul_f16": ("%t = fmul half %h, %g\n  %t2 = fpext half %t to float\n  %r = bitcast float %t2 to i32",
                "s_mul_f16", lambda a, b, h, g: int(_F32(_F16(h * g)).view(np.uint32))),
    "fma_f32": ("%t = call float @llvm.fma.f32(float %a, float %b, float %a)\n  %r = bitcast float %t to i32",
                "s_fmac_f32", lambda a, b, h, g: int(_fma32(a, b, a).view(np.uint32))),
    "fmaak_f32": ("%t = call float @llvm.fma.f32(float %a, float %b, float 0x3FF3C0CA40000000)\n"
                  "  %r = bitcast float %t to i32",
                  "s_fmaak_f32", lambda a, b, h, g: int(_fma32(a, b, _F32(1.2345678806304932)).view(np.uint32))),
    "floor_f32": ("%t = call float @llvm.floor.f32(float %a)\n  %r = bitcast float %t to i32",
                  "s_floor_f32", lambda a, b, h, g: int(np.floor(a).view(np.uint32))),
    "rndne_f32": ("%t = call float @llvm.rint.f32(float %b)\n  %r = bitcast float %t to i32",
                  "s_rndne_f32", lambda a, b, h, g: int(np.rint(b).view(np.uint32))),
    "minimum_f32": ("%t = call float @llvm.minimum.f32(float %a, float %b)\n  %r = bitcast float %t to i32",
                    "s_minimum_f32", lambda a, b, h, g: int(_F32(min(a, b)).view(np.uint32))),
    "cmp_lt_f32": ("%c = fcmp olt float %a, %b\n  %r = select i1 %c, i32 7, i32 9",
                   "s_cmp_lt_f32", lambda a, b, h, g: 7 if a < b else 9),
    "cmp_nge_f32": ("%c = fcmp ult float %a, %b\n  %r = select i1 %c, i32 7, i32 9",
                    "s_cmp_nge_f32", lambda a, b, h, g: 7 if not a >= b else 9),
    "cmp_lt_f16": ("%c = fcmp olt half %h, %g\n  %r = select i1 %c, i32 7, i32 9",
                   "s_cmp_lt_f16", lambda a, b, h, g: 7 if h < g else 9),
}

# (a, b, h, g): ordinary values, halves that round, a NaN for the unordered compares
VALUES = [(_F32(-2.75), _F32(1.5), _F16(0.333), _F16(-1.25)), (_F32(3.5), _F32(2.5), _F16(2.0), _F16(3.0)),
          (_F32(np.nan), _F32(-0.5), _F16(np.nan), _F16(1.0)), (_F32(0.1), _F32(-7.5), _F16(-0.0), _F16(0.0))]


def _kernel(name: str, expr: str) -> str:
    return f"""declare float @llvm.fma.f32(float, float, float)
declare float @llvm.floor.f32(float)
declare float @llvm.rint.f32(float)
declare float @llvm.minimum.f32(float, float)
define amdgpu_kernel void @{name}(ptr addrspace(1) %p, float %a, float %b, half %h, half %g) {{
  {expr}
  store i32 %r, ptr addrspace(1) %p
  ret void
}}"""


@pytest.mark.parametrize("name", sorted(CASES))
def test_scalar_float_instruction_matches_numpy(name: str) -> None:
    expr, mnemonic, ref = CASES[name]
    asm, hsaco = compile_llvm(_kernel(name, expr), "gfx1201")
    assert mnemonic in asm  # the instruction under test is really there
    dev = EmulatorDevice("gfx1201")
    kernel = dev.kernel(hsaco, name)
    for a, b, h, g in VALUES:
        if name == "floor_f32" and np.isnan(a) or name == "minimum_f32" and np.isnan(a):
            continue  # NaN payloads are the hardware's choice; the compares cover NaN
        buf = dev.to_device(np.zeros(1, np.uint32))
        args = struct.pack("<QffHH", buf.addr, a, b, int(h.view(np.uint16)), int(g.view(np.uint16)))
        dev.launch(kernel, 1, 32, args)
        got = int(dev.from_device(buf, np.uint32, 1)[0])
        assert got == ref(a, b, h, g) & 0xFFFFFFFF, f"{name}{(a, b, h, g)}: got {got:#x}"
