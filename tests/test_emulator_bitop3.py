"""gfx950's v_bitop3_b32 (a three-input truth table LLVM selects for bitwise expressions) and
v_nop, executed on the emulator and compared with numpy."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from _emu_util import compile_llvm

from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

pytestmark = pytest.mark.emulator

# Bitwise expressions of x, y, z that LLVM lowers to v_bitop3_b32 on gfx950, with numpy's answer.
EXPRS = {
    "and_xor": ("%t = and i32 %x, %y\n  %r = xor i32 %t, %z", lambda x, y, z: (x & y) ^ z),
    "or_and": ("%t = or i32 %x, %y\n  %r = and i32 %t, %z", lambda x, y, z: (x | y) & z),
    "andn_or": ("%n = xor i32 %x, -1\n  %t = and i32 %n, %y\n  %r = or i32 %t, %z", lambda x, y, z: (~x & y) | z),
    "mux": ("%n = xor i32 %z, -1\n  %t = and i32 %x, %n\n  %r = or i32 %t, %y", lambda x, y, z: (x & ~z) | y),
}


def _kernel(name: str, expr: str) -> str:
    return f"""declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @{name}(ptr addrspace(1) %p) {{
  %id = call i32 @llvm.amdgcn.workitem.id.x()
  %q = getelementptr i32, ptr addrspace(1) %p, i32 %id
  %x = load volatile i32, ptr addrspace(1) %q
  %q1 = getelementptr i32, ptr addrspace(1) %q, i32 64
  %y = load volatile i32, ptr addrspace(1) %q1
  %q2 = getelementptr i32, ptr addrspace(1) %q, i32 128
  %z = load volatile i32, ptr addrspace(1) %q2
  {expr}
  store i32 %r, ptr addrspace(1) %q
  ret void
}}"""


@pytest.mark.parametrize("name", sorted(EXPRS))
def test_bitop3_matches_numpy(name):
    expr, ref = EXPRS[name]
    asm, hsaco = compile_llvm(_kernel(name, expr), "gfx950")
    assert "v_bitop3_b32" in asm  # the instruction under test is really there
    rng = np.random.default_rng(1)
    x, y, z = (rng.integers(0, 2**32, 64, dtype=np.uint32) for _ in range(3))
    dev = EmulatorDevice("gfx950")
    buf = dev.to_device(np.concatenate([x, y, z]))
    dev.launch(dev.kernel(hsaco, name), 1, 64, struct.pack("<Q", buf.addr))
    np.testing.assert_array_equal(dev.from_device(buf, np.uint32, 64), ref(x, y, z))


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"])
def test_v_nop_decodes_and_does_nothing(arch):
    from tiledsl.backends.rocm.emulator.decoder import Decoder

    insts = Decoder(arch).decode_all(struct.pack("<I", 0x7E000000), 0, 0)
    assert [i.name for i in insts] == ["v_nop"]
