"""gfx950's v_bitop3_b32 and v_bitop3_b16 (a three-input truth table LLVM selects for bitwise
expressions) and v_nop, executed on the emulator and compared with numpy."""

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


@pytest.mark.parametrize("name", sorted(EXPRS))
def test_bitop3_b16_matches_numpy(name):
    """The 16-bit form, which LLVM uses on gfx950 to pack the bytes of fp8 values: i16 operands."""
    expr, ref = EXPRS[name]
    src = _kernel(name, expr).replace("i32 %", "i16 %").replace("load volatile i32", "load volatile i16") \
        .replace("getelementptr i32", "getelementptr i16").replace("store i32", "store i16")
    src = src.replace("i16 %id", "i32 %id").replace("i16 64", "i32 64").replace("i16 128", "i32 128")
    asm, hsaco = compile_llvm(src, "gfx950")
    assert "v_bitop3_b16" in asm
    rng = np.random.default_rng(2)
    x, y, z = (rng.integers(0, 2**16, 64, dtype=np.uint16) for _ in range(3))
    dev = EmulatorDevice("gfx950")
    buf = dev.to_device(np.concatenate([x, y, z]))
    dev.launch(dev.kernel(hsaco, name), 1, 64, struct.pack("<Q", buf.addr))
    np.testing.assert_array_equal(dev.from_device(buf, np.uint16, 64), ref(x, y, z))


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"])
def test_v_nop_decodes_and_does_nothing(arch):
    from tiledsl.backends.rocm.emulator.decoder import Decoder

    insts = Decoder(arch).decode_all(struct.pack("<I", 0x7E000000), 0, 0)
    assert [i.name for i in insts] == ["v_nop"]



@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx950"])
@pytest.mark.parametrize("op_sel", [(0, 1), (1, 0), (1, 1), (0, 0)])
def test_v_pk_mov_b32_takes_each_half_by_op_sel(arch, op_sel):
    """v_pk_mov_b32 v[0:1], v[2:3], v[2:3] op_sel:[a,b]: D.lo = S0's half a, D.hi = S1's half b.
    LLVM swaps a register pair with op_sel:[1,0]; the emulator read the high half through
    op_sel_hi and copied instead of swapping (found running Triton's causal forward)."""
    from tiledsl.backends.rocm.emulator import vop3p  # noqa: F401  (registers the builders)
    from tiledsl.backends.rocm.emulator.decoder import Decoder
    from tiledsl.backends.rocm.emulator.executor import BUILDERS, Ctx, Wave
    from tiledsl.backends.rocm.emulator.memory import Heap

    # VOP3P: opcode 51, vdst v0, op_sel bits [12:11], op_sel_hi [1,1] (LLVM's default), src0 = src1 = v2.
    word0 = 0xD3800000 | (51 << 16) | (op_sel[1] << 12) | (op_sel[0] << 11) | (1 << 14)
    word1 = (258 | (258 << 9)) | (0b11 << 27)
    inst = Decoder(arch).decode_all(struct.pack("<II", word0, word1) + struct.pack("<I", 0xBF810000), 0, 0)[0]
    assert inst.name == "v_pk_mov_b32"
    ctx = Ctx(None, 0, arch, "gfx9", 64)  # type: ignore[arg-type]
    handler = BUILDERS["v_pk_mov_b32"](inst, ctx)
    w = Wave(64, 8, Heap(), np.zeros(16, np.uint8), ctx)
    w.exec, w.mask[:], w.full = (1 << 64) - 1, True, True
    w.lanes = np.arange(64)
    lo, hi = np.arange(64, dtype=np.uint32), np.arange(64, dtype=np.uint32) + 1000
    w.v[2], w.v[3] = lo, hi
    handler(w)
    np.testing.assert_array_equal(w.v[0], (lo, hi)[op_sel[0]])
    np.testing.assert_array_equal(w.v[1], (lo, hi)[op_sel[1]])


def test_spilling_cdna_kernel_runs():
    """gfx940+ flat scratch: `scratch_store_dwordx4 off, v[..], off offset:N` addresses by the
    immediate alone (SVE = 0). The emulator added a VGPR and faulted on every kernel that spills
    VGPRs on gfx942/gfx950 (found by the bias work); a spilling gfx950 GEMM now runs and matches."""
    from pathlib import Path

    from tiledsl.driver import compile_source
    from tiledsl.launcher import launch
    from tiledsl.options import CompileOptions

    src = (Path(__file__).resolve().parent / "errors" / "lds_too_large.tile").read_text()
    k = compile_source(src, "big.tile", "gfx950", {"BLOCK": "256"},
                       CompileOptions.make("gfx950", {"BLOCK": "256"}, allow_spills=True))
    assert k.manifest["vgpr_spill_count"] > 0 and "scratch_store" in k.asm
    a = np.random.default_rng(5).random((256, 256)).astype(np.float16)
    c = np.zeros((256, 256), np.float32)
    launch(k, a, c, device=EmulatorDevice("gfx950"))
    af = a.astype(np.float32)
    np.testing.assert_allclose(c, af @ af.T, rtol=1e-4, atol=1e-3)
