"""Reading AMDGPU code objects (ELF64, EM_AMDGPU): segments, symbols, kernel descriptors, metadata.

Shared by the manifest writer, `tiledsl inspect` and the emulator's loader. A code object may
come from a user's disk (`tiledsl.load_kernel`), so every offset and size in it is checked before
it is used: a truncated or corrupted file is a `CodeObjectError` saying what is wrong, never a
struct.error, IndexError or UnicodeDecodeError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from tiledsl.backends.rocm.arch import ARCHS
from tiledsl.errors import TileError

EM_AMDGPU = 224
EF_AMDGPU_MACH_MASK = 0xFF
# e_flags machine numbers from LLVM's AMDGPUUsage ("AMDGPU ELF Header e_flags").
MACH_BY_ARCH = {a.name: a.elf_mach for a in ARCHS.values()}  # from the arch table
ARCH_BY_MACH = {v: k for k, v in MACH_BY_ARCH.items()}
NT_AMDGPU_METADATA = 32
_PHDR, _SHDR, _SYM = "<IIQQQQQQ", "<IIQQQQIIQQ", "<IBBHQQ"
# A code object is loaded into one GPU address range; a segment reaching past 4 GiB is a
# corrupted size (the emulator would try to allocate it), not a real kernel.
_MAX_ADDRESS = 1 << 32


class CodeObjectError(TileError, ValueError):
    """A malformed code object: truncated, corrupted, or not an AMDGPU ELF file at all."""


def _bad(what: str) -> CodeObjectError:
    return CodeObjectError(f"not a valid AMDGPU code object: {what}")


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
        raise _bad(f"no loaded bytes at 0x{vaddr:x}..0x{vaddr + size:x}")

    def metadata(self) -> dict:
        """The AMDHSA metadata note (NT_AMDGPU_METADATA, msgpack), its kernel entries checked."""
        import msgpack

        for owner, ntype, desc in self.notes:
            if owner == "AMDGPU" and ntype == NT_AMDGPU_METADATA:
                try:
                    md = msgpack.unpackb(desc, raw=False, strict_map_key=False)
                except Exception as exc:  # ValueError, TypeError (a map as a key), UnicodeDecodeError, ...
                    raise _bad(f"its AMDGPU metadata note is not valid msgpack ({type(exc).__name__}: {exc})") from None
                _check_metadata(md)
                return md
        raise _bad("it has no AMDGPU metadata note")


def read_code_object(blob: bytes) -> CodeObject:
    """The segments, symbols and notes of an AMDGPU ELF64 code object; a CodeObjectError saying
    what is wrong when `blob` is not one."""
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise _bad(f"expected the bytes of a .hsaco file, got {type(blob).__name__}")
    blob = bytes(blob)
    if not blob:
        raise _bad("the file is empty")
    if blob[:4] != b"\x7fELF"[:len(blob)]:
        raise _bad(f"not an ELF file (it starts {blob[:4]!r}, expected b'\\x7fELF'): is this a .hsaco file?")
    if len(blob) < 64:
        raise _bad(f"truncated: {len(blob)} bytes, shorter than an ELF64 header (64 bytes)")
    if blob[4] != 2 or blob[5] != 1:
        raise _bad("not a little-endian ELF64 file (AMDGPU code objects are ELF64 LE)")
    (_type, e_machine, _ver, _entry, e_phoff, e_shoff, e_flags, _ehsize, e_phentsize, e_phnum,
     e_shentsize, e_shnum, _shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", blob, 16)
    if e_machine != EM_AMDGPU:
        raise _bad(f"ELF e_machine is {e_machine}, expected {EM_AMDGPU} (EM_AMDGPU)")
    segments = _read_segments(blob, e_phoff, e_phnum, e_phentsize)
    sections = _table(blob, e_shoff, e_shnum, e_shentsize, _SHDR, "section header")
    symbols: dict[str, Symbol] = {}
    notes: list[tuple[str, int, bytes]] = []
    for i, section in enumerate(sections):
        sh_type, off, size = section[1], section[4], section[5]
        if sh_type in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
            _read_symbols(blob, sections, i, symbols)
        elif sh_type == 7:  # SHT_NOTE
            notes += _read_notes(blob, off, size, i)
    return CodeObject(e_machine, e_flags, segments, symbols, notes)


def _need(blob: bytes, off: int, size: int, what: str) -> None:
    """Bytes off..off+size must lie in the file: a reference past its end is a truncated file."""
    if off + size > len(blob):
        raise _bad(f"truncated or corrupted: the {what} (bytes {off}..{off + size}) lies past the end of the "
                   f"{len(blob)}-byte file")


def _table(blob: bytes, off: int, count: int, entsize: int, fmt: str, what: str) -> list[tuple]:
    """`count` entries of `fmt` every `entsize` bytes from `off` (a header table)."""
    if count == 0:
        return []
    if entsize < struct.calcsize(fmt):
        raise _bad(f"its {what} entries are {entsize} bytes, expected at least {struct.calcsize(fmt)}")
    _need(blob, off, count * entsize, f"{what} table ({count} entries)")
    return [struct.unpack_from(fmt, blob, off + i * entsize) for i in range(count)]


def _read_segments(blob: bytes, phoff: int, phnum: int, phentsize: int) -> list[Segment]:
    segments = []
    for i, (p_type, _flags, off, vaddr, _paddr, filesz, memsz, _align) in enumerate(
            _table(blob, phoff, phnum, phentsize, _PHDR, "program header")):
        if p_type != 1:  # PT_LOAD
            continue
        _need(blob, off, filesz, f"segment {i}")
        if memsz < filesz or vaddr + memsz > _MAX_ADDRESS:
            raise _bad(f"segment {i} has a corrupted size (0x{filesz:x} bytes in the file, 0x{memsz:x} in memory, "
                       f"at 0x{vaddr:x})")
        segments.append(Segment(vaddr, blob[off:off + filesz], memsz))
    return segments


def _read_symbols(blob: bytes, sections: list[tuple], index: int, symbols: dict[str, Symbol]) -> None:
    """The named symbols of symbol table section `index` (the first of a name wins)."""
    _name, _type, _fl, _addr, off, size, link, _info, _align, entsize = sections[index]
    if entsize < struct.calcsize(_SYM):
        raise _bad(f"section {index} (a symbol table) has {entsize}-byte entries, expected 24")
    if link >= len(sections):
        raise _bad(f"section {index} (a symbol table) links string table section {link}, but there are "
                   f"{len(sections)} sections")
    _need(blob, off, size, f"symbol table (section {index})")
    str_off, str_size = sections[link][4], sections[link][5]
    _need(blob, str_off, str_size, f"string table (section {link})")
    for j in range(size // entsize):
        st_name, st_info, _other, _shndx, st_value, st_size = struct.unpack_from(_SYM, blob, off + j * entsize)
        name = _cstr(blob, str_off, str_size, st_name, f"the name of symbol {j}")
        if name:
            symbols.setdefault(name, Symbol(name, st_value, st_size, st_info & 0xF))


def _cstr(blob: bytes, table_off: int, table_size: int, index: int, what: str) -> str:
    """The NUL-terminated UTF-8 string at `index` of the string table at table_off."""
    end = blob.find(b"\0", table_off + index, table_off + table_size) if index < table_size else -1
    if end < 0:
        raise _bad(f"{what} (string table index {index}) is not a NUL-terminated string in its "
                   f"{table_size}-byte table")
    return _text(blob[table_off + index:end], what)


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise _bad(f"{what} is not UTF-8 text ({raw[:40]!r})") from None


def _read_notes(blob: bytes, off: int, size: int, index: int) -> list[tuple[str, int, bytes]]:
    _need(blob, off, size, f"note section {index}")
    notes = []
    pos, end = off, off + size
    while pos + 12 <= end:
        namesz, descsz, ntype = struct.unpack_from("<III", blob, pos)
        desc_at = pos + 12 + ((namesz + 3) & ~3)
        if desc_at + descsz > end:
            raise _bad(f"note {len(notes)} of section {index} ({namesz}-byte name, {descsz}-byte description) "
                       f"runs past the end of its {size}-byte section")
        owner = _text(blob[pos + 12:pos + 12 + namesz].rstrip(b"\0"), f"the owner of note {len(notes)}")
        notes.append((owner, ntype, blob[desc_at:desc_at + descsz]))
        pos = desc_at + ((descsz + 3) & ~3)
    return notes


# Metadata counts tiledsl reads (AMDGPUUsage, "amdhsa.kernels"): non-negative integers when present.
_MD_COUNTS = (".group_segment_fixed_size", ".private_segment_fixed_size", ".kernarg_segment_size",
              ".kernarg_segment_align", ".wavefront_size", ".sgpr_count", ".vgpr_count", ".agpr_count",
              ".sgpr_spill_count", ".vgpr_spill_count", ".max_flat_workgroup_size")


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_metadata(md: Any) -> None:
    """The metadata fields tiledsl reads have the types AMDGPUUsage gives them."""
    if not isinstance(md, dict):
        raise _bad(f"its metadata is a msgpack {type(md).__name__}, expected a map")
    kernels = md.get("amdhsa.kernels", [])
    if not isinstance(kernels, list) or not all(isinstance(k, dict) for k in kernels):
        raise _bad("its metadata 'amdhsa.kernels' is not a list of maps")
    for i, k in enumerate(kernels):
        where = f"its metadata amdhsa.kernels[{i}]"
        if not isinstance(k.get(".name"), str):
            raise _bad(f"{where} has no .name string")
        for key in _MD_COUNTS:
            if key in k and not _is_count(k[key]):
                raise _bad(f"{where} {key} is {k[key]!r}, expected a non-negative integer")
        reqd = k.get(".reqd_workgroup_size")
        if reqd is not None and not (isinstance(reqd, list) and len(reqd) == 3
                                     and all(_is_count(v) and v > 0 for v in reqd)):
            raise _bad(f"{where} .reqd_workgroup_size is {reqd!r}, expected 3 positive integers")
        args = k.get(".args", [])
        if not isinstance(args, list) or not all(isinstance(a, dict) for a in args):
            raise _bad(f"{where} .args is not a list of maps")
        for j, a in enumerate(args):
            if not (_is_count(a.get(".offset")) and _is_count(a.get(".size"))):
                raise _bad(f"{where} .args[{j}] has no integer .offset and .size")
            if not isinstance(a.get(".value_kind", ""), str) or not isinstance(a.get(".name", ""), str):
                raise _bad(f"{where} .args[{j}] .value_kind or .name is not a string")


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
        raise _bad(f"it has no kernel descriptor '{kernel}.kd'")
    raw = co.read(sym.value, 64)
    gs, ps, ks = struct.unpack_from("<III", raw, 0)
    (entry,) = struct.unpack_from("<q", raw, 16)
    rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
    (props,) = struct.unpack_from("<H", raw, 56)
    return sym.value, KernelDescriptor(gs, ps, ks, entry, rsrc3, rsrc1, rsrc2, props)
