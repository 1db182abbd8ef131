"""Reading AMDGPU code objects (ELF64, EM_AMDGPU): segments, symbols, kernel descriptors, metadata.

Shared by the manifest writer, `tiledsl inspect` and the emulator's loader.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tiledsl.backends.rocm.arch import ARCHS
from tiledsl.errors import TileError

EM_AMDGPU = 224
EF_AMDGPU_MACH_MASK = 0xFF
# e_flags machine numbers from LLVM's AMDGPUUsage ("AMDGPU ELF Header e_flags").
MACH_BY_ARCH = {a.name: a.elf_mach for a in ARCHS.values()}  # from the arch table
ARCH_BY_MACH = {v: k for k, v in MACH_BY_ARCH.items()}


@dataclass(frozen=True)
class Segment:
    vaddr: int
    data: bytes  # file bytes; memsz beyond len(data) is zero-filled
    memsz: int


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    kind: int  # STT_*


@dataclass
class CodeObject:
    e_machine: int
    e_flags: int
    segments: list[Segment]
    symbols: dict[str, Symbol]
    notes: list[tuple[str, int, bytes]]  # (owner, type, desc)

    @property
    def arch(self) -> str | None:
        return ARCH_BY_MACH.get(self.e_flags & EF_AMDGPU_MACH_MASK)

    def read(self, vaddr: int, size: int) -> bytes:
        for seg in self.segments:
            if seg.vaddr <= vaddr and vaddr + size <= seg.vaddr + seg.memsz:
                start = vaddr - seg.vaddr
                chunk = seg.data[start:start + size]
                return chunk + bytes(size - len(chunk))
        raise TileError(f"code object has no loaded bytes at 0x{vaddr:x}..0x{vaddr + size:x}")

    def metadata(self) -> dict:
        """The AMDHSA metadata note (NT_AMDGPU_METADATA = 32, msgpack)."""
        import msgpack

        for owner, ntype, desc in self.notes:
            if owner == "AMDGPU" and ntype == 32:
                return msgpack.unpackb(desc, raw=False, strict_map_key=False)
        raise TileError("code object has no AMDGPU metadata note")


def read_code_object(blob: bytes) -> CodeObject:
    if len(blob) < 64 or blob[:4] != b"\x7fELF":
        raise TileError("not an ELF file (bad magic): is this a .hsaco code object?")
    if blob[4] != 2 or blob[5] != 1:
        raise TileError("not a little-endian ELF64 file: AMDGPU code objects are ELF64 LE")
    (e_type, e_machine, _ver, _entry, e_phoff, e_shoff, e_flags, _ehsize, e_phentsize, e_phnum,
     e_shentsize, e_shnum, _shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", blob, 16)
    if e_machine != EM_AMDGPU:
        raise TileError(f"ELF e_machine is {e_machine}, expected {EM_AMDGPU} (EM_AMDGPU)")
    segments = []
    for i in range(e_phnum):
        p_type, _flags, off, vaddr, _paddr, filesz, memsz, _align = struct.unpack_from(
            "<IIQQQQQQ", blob, e_phoff + i * e_phentsize)
        if p_type == 1:  # PT_LOAD
            segments.append(Segment(vaddr, blob[off:off + filesz], memsz))
    sections = [struct.unpack_from("<IIQQQQIIQQ", blob, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    symbols: dict[str, Symbol] = {}
    notes: list[tuple[str, int, bytes]] = []
    for _name, sh_type, _fl, _addr, off, size, link, _info, _align, entsize in sections:
        if sh_type in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
            strtab_off = sections[link][4]
            for j in range(size // max(entsize, 24)):
                st_name, st_info, _other, _shndx, st_value, st_size = struct.unpack_from(
                    "<IBBHQQ", blob, off + j * entsize)
                name = _cstr(blob, strtab_off + st_name)
                if name:
                    symbols.setdefault(name, Symbol(name, st_value, st_size, st_info & 0xF))
        elif sh_type == 7:  # SHT_NOTE
            pos = off
            while pos + 12 <= off + size:
                namesz, descsz, ntype = struct.unpack_from("<III", blob, pos)
                pos += 12
                owner = blob[pos:pos + namesz].rstrip(b"\0").decode()
                pos += (namesz + 3) & ~3
                notes.append((owner, ntype, blob[pos:pos + descsz]))
                pos += (descsz + 3) & ~3
    del e_type
    return CodeObject(e_machine, e_flags, segments, symbols, notes)


def _cstr(blob: bytes, off: int) -> str:
    end = blob.index(b"\0", off)
    return blob[off:end].decode()


@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte AMDHSA kernel descriptor (`<kernel>.kd`), see LLVM AMDGPUUsage."""

    group_segment_size: int
    private_segment_size: int
    kernarg_size: int
    entry_offset: int  # relative to the descriptor's address
    rsrc3: int
    rsrc1: int
    rsrc2: int
    properties: int

    @property
    def user_sgpr_count(self) -> int:
        return (self.rsrc2 >> 1) & 0x1F

    @property
    def wave32(self) -> bool:
        return bool(self.properties & (1 << 10))


def read_kernel_descriptor(co: CodeObject, kernel: str) -> tuple[int, KernelDescriptor]:
    sym = co.symbols.get(kernel + ".kd")
    if sym is None:
        raise TileError(f"code object has no kernel descriptor '{kernel}.kd'")
    raw = co.read(sym.value, 64)
    gs, ps, ks = struct.unpack_from("<III", raw, 0)
    (entry,) = struct.unpack_from("<q", raw, 16)
    rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
    (props,) = struct.unpack_from("<H", raw, 56)
    return sym.value, KernelDescriptor(gs, ps, ks, entry, rsrc3, rsrc1, rsrc2, props)
