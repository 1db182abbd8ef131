"""Helpers for one-instruction emulator tests (tests/test_emulator_modifiers*.py):

- `lane_kernel` / `run_lanes`: an LLVM IR kernel whose lane i loads its inputs from 8-byte slot i
  of consecutive regions of one buffer, computes, and stores its outputs to the regions after;
  compiled with tests/_emu_util.compile_llvm and launched on the EmulatorDevice.
- `patch`: rewrite instruction words in a compiled code object (a modifier LLVM cannot be made to
  emit, set on an instruction it did emit), then `decoded` to check the result decodes as meant.
- `encode_*` / `run_words`: hand-encoded instructions run directly by their bound handlers on a
  bare Wave, for forms no IR reaches at all.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace

import numpy as np
from _emu_util import compile_llvm

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

SLOT = 8  # bytes per lane in every region
CDNA = ["gfx90a", "gfx942", "gfx950"]
RDNA = ["gfx1100", "gfx1201"]
ALL = CDNA + RDNA


def wave(arch: str) -> int:
    return get_arch(arch).wave_size


def lane_kernel(body: str, ins: list[str], outs: list[str], W: int, decls: str = "", attrs: str = "",
                slot: int = SLOT) -> str:
    """IR of kernel @k(ptr %p): %x0.. loaded (volatile) from regions 0.., the body defines %r0..,
    stored to the regions after the inputs. `attrs` is appended to the module (attribute groups
    the kernel refers to as #0)."""
    lines = [decls, "declare i32 @llvm.amdgcn.workitem.id.x()",
             f"define amdgpu_kernel void @k(ptr addrspace(1) %p) {'#0' if attrs else ''} {{",
             "  %id = call i32 @llvm.amdgcn.workitem.id.x()", f"  %b = mul i32 %id, {slot}"]
    for k, t in enumerate(ins):
        lines += [f"  %o{k} = add i32 %b, {k * W * slot}",
                  f"  %q{k} = getelementptr i8, ptr addrspace(1) %p, i32 %o{k}",
                  f"  %x{k} = load volatile {t}, ptr addrspace(1) %q{k}"]
    lines.append(body)
    for k, t in enumerate(outs):
        j = len(ins) + k
        lines += [f"  %oo{k} = add i32 %b, {j * W * slot}",
                  f"  %qo{k} = getelementptr i8, ptr addrspace(1) %p, i32 %oo{k}",
                  f"  store {t} %r{k}, ptr addrspace(1) %qo{k}"]
    lines += ["  ret void", "}", attrs]
    return "\n".join(lines)


def compile_lanes(arch: str, body: str, ins: list[str], outs: list[str], decls: str = "",
                  attrs: str = "", slot: int = SLOT) -> tuple[str, bytes]:
    return compile_llvm(lane_kernel(body, ins, outs, wave(arch), decls, attrs, slot), arch)


def run_lanes(arch: str, hsaco: bytes, inputs: list, out_dtypes: list, lockstep: bool = False,
              groups: int = 1, slot: int = SLOT) -> list[np.ndarray]:
    """Launch kernel k as `groups` workgroups of one wave (every workgroup reads the same inputs and
    writes the same outputs: more waves for lockstep to batch) and return each output region as
    lane values of `out_dtypes[i]` (a (W, n) array for a multi-value dtype such as ("f4", 8)).
    Inputs: one array per region, a lane's value (or row) each."""
    W = wave(arch)
    n = len(inputs) + len(out_dtypes)
    buf = np.zeros((n, W, slot), np.uint8)
    for k, x in enumerate(inputs):
        a = np.asarray(x)
        a = np.ascontiguousarray(np.broadcast_to(a, (W, *a.shape[1:]) if a.ndim > 1 else (W,)))
        row = a.view(np.uint8).reshape(W, -1)
        buf[k, :, :row.shape[1]] = row
    dev = EmulatorDevice(arch, lockstep=lockstep)
    d = dev.to_device(buf.reshape(-1))
    dev.launch(dev.kernel(hsaco, "k"), groups, W, struct.pack("<Q", d.addr))
    got = dev.from_device(d, np.uint8, buf.size).reshape(n, W, slot)
    return [np.ascontiguousarray(got[len(inputs) + k, :, :np.dtype(t).itemsize]).view(np.dtype(t).base)
            .reshape(W, *np.dtype(t).shape) for k, t in enumerate(out_dtypes)]


def decoded(hsaco: bytes, arch: str, kernel: str = "k") -> list:
    from tiledsl.backends.rocm.emulator.loader import load_code_object

    return load_code_object(hsaco, arch)[kernel].insts


def find(hsaco: bytes, arch: str, name: str, kernel: str = "k"):
    """The one instruction named `name` (without encoding suffixes) in the kernel."""
    hits = [i for i in decoded(hsaco, arch, kernel) if i.name == name]
    assert len(hits) == 1, (name, [i.raw_name for i in decoded(hsaco, arch, kernel)])
    return hits[0]


def patch(hsaco: bytes, inst, words: list[int]) -> bytes:
    """The code object with instruction `inst` replaced by `words` (the same size)."""
    from test_emulator_exec import _file_offset

    assert len(words) * 4 == inst.size, (len(words), inst.size)
    blob = bytearray(hsaco)
    at = _file_offset(hsaco, inst.addr)
    struct.pack_into(f"<{len(words)}I", blob, at, *words)
    return bytes(blob)


def inst_words(hsaco: bytes, inst) -> list[int]:
    from test_emulator_exec import _file_offset

    at = _file_offset(hsaco, inst.addr)
    return list(struct.unpack_from(f"<{inst.size // 4}I", hsaco, at))


def opcode(arch: str, fam: str, name: str) -> int:
    """The opcode of mnemonic `name` (no _e32/_e64 suffix) in encoding family `fam` on `arch`."""
    from tiledsl.backends.rocm.emulator.decoder import _SUFFIX, opcode_table

    ops = [op for (f, op), (raw, _) in opcode_table(arch).items() if f == fam and _SUFFIX.sub("", raw) == name]
    assert len(ops) == 1, (arch, fam, name, ops)
    return ops[0]


def encode_vop3p(arch: str, name: str, vdst: int, src0: int, src1: int, src2: int = 0, *, op_sel=(0, 0, 0),
                 op_sel_hi=(1, 1, 1), neg_lo=(0, 0, 0), neg_hi=(0, 0, 0), clamp: int = 0) -> list[int]:
    """A VOP3P instruction; sources are operand encodings (VGPR n = 256 + n)."""
    bits = lambda t: t[0] | t[1] << 1 | t[2] << 2  # noqa: E731
    prefix = 0x1A7 << 23 if get_arch(arch).isa_generation == "gfx9" else 0xCC << 24
    w0 = prefix | opcode(arch, "VOP3P", name) << 16 | clamp << 15 | op_sel_hi[2] << 14 | bits(op_sel) << 11 \
        | bits(neg_hi) << 8 | vdst
    w1 = bits(neg_lo) << 29 | (op_sel_hi[0] | op_sel_hi[1] << 1) << 27 | src2 << 18 | src1 << 9 | src0
    return [w0, w1]


def encode_vop3(arch: str, name: str, vdst: int, src0: int, src1: int, src2: int = 0, *, sdst: int | None = None,
                clamp: int = 0, omod: int = 0, neg: int = 0, abs_: int = 0, op_sel: int = 0) -> list[int]:
    """A VOP3 (VOP3A, or VOP3B with `sdst`) instruction."""
    prefix = 0x34 << 26 if get_arch(arch).isa_generation == "gfx9" else 0x35 << 26
    mid = sdst << 8 if sdst is not None else op_sel << 11 | abs_ << 8
    w0 = prefix | opcode(arch, "VOP3", name) << 16 | clamp << 15 | mid | vdst
    return [w0, neg << 29 | omod << 27 | src2 << 18 | src1 << 9 | src0]


def run_words(arch: str, words: list[int], vgprs: dict[int, np.ndarray] | None = None,
              sgprs: dict[int, int] | None = None, exec_mask: int | None = None, mode0: int | None = None):
    """Decode `words` (+ s_endpgm), bind every instruction and run them in order on a fresh Wave
    with the given registers; returns the Wave and the decoded instructions."""
    from tiledsl.backends.rocm.emulator import (  # noqa: F401  (registers the builders)
        crosslane,
        fp8,
        lds,
        matrix,
        salu,
        valu,
        vop3p,
    )
    from tiledsl.backends.rocm.emulator.decoder import Decoder
    from tiledsl.backends.rocm.emulator.executor import BUILDERS, Ctx, Wave, kernel_mode
    from tiledsl.backends.rocm.emulator.memory import Heap

    row = get_arch(arch)
    end = 0xBF810000 if row.isa_generation == "gfx9" else 0xBFB00000
    insts = Decoder(arch).decode_all(struct.pack(f"<{len(words) + 1}I", *words, end), 0, 0)[:-1]
    if mode0 is None:  # what LLVM's kernels launch with: denormals kept, DX10_CLAMP and IEEE on
        mode0, _ = kernel_mode(0xF0 << 12 | 1 << 21 | 1 << 23, row.isa_generation)
    gen = row.isa_generation
    ctx = Ctx(SimpleNamespace(insts=insts, arch=row), 0, arch, gen, row.wave_size, null_sgpr=row.null_sgpr,  # type: ignore[arg-type]
              m0=row.m0_sgpr, mode0=mode0, dx10_clamp=gen == "gfx12" or bool(mode0 >> 8 & 1))
    handlers = []
    for i, inst in enumerate(insts):
        ctx.index, ctx.nxt = i, i + 1
        handlers.append(BUILDERS[inst.name](inst, ctx))
    W = row.wave_size
    w = Wave(W, 512, Heap(), np.zeros(64, np.uint8), ctx)
    w.set_exec((1 << W) - 1 if exec_mask is None else exec_mask)
    for r, v in (vgprs or {}).items():
        w.v[r] = np.broadcast_to(np.asarray(v).astype(np.uint32), (W,))
    for r, v in (sgprs or {}).items():
        w.s[r] = v
    pc = 0
    while pc < len(handlers):
        pc = handlers[pc](w)
    return w, insts
