"""Loading a code object: ELF -> kernels (descriptor, metadata, decoded instruction list)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tiledsl.backends.rocm import elf
from tiledsl.backends.rocm.arch import Arch, get_arch
from tiledsl.backends.rocm.emulator.decoder import Decoder, Inst
from tiledsl.backends.rocm.emulator.memory import EmulatorError


@dataclass
class KernelImage:
    """One kernel of a loaded code object, decoded once and shared by every launch."""

    name: str
    arch: Arch
    kd: elf.KernelDescriptor
    entry: int  # byte address of the first instruction
    insts: list[Inst]
    meta: dict
    index_of: dict[int, int] = field(default_factory=dict)  # byte address -> instruction index

    @property
    def wave_size(self) -> int:
        return 32 if self.kd.wave32 else 64

    @property
    def lds_bytes(self) -> int:
        return self.kd.group_segment_size

    @property
    def kernarg_size(self) -> int:
        return int(self.meta.get(".kernarg_segment_size", self.kd.kernarg_size))


def kernel_metadata(blob: bytes, arch: Arch | str | None = None) -> dict[str, dict]:
    """The AMDHSA metadata of each kernel in `blob` (name -> metadata map), checking that the code
    object targets `arch` (default: the arch in the ELF header). No instruction is decoded."""
    co = elf.read_code_object(blob)
    _check_arch(co, arch)
    return _metadata_by_kernel(co)


def _check_arch(co: elf.CodeObject, arch: Arch | str | None) -> Arch:
    if arch is None:
        if co.arch is None:
            raise EmulatorError(f"code object targets an unknown machine (e_flags 0x{co.e_flags:x})")
        arch = co.arch
    arch = get_arch(arch) if isinstance(arch, str) else arch
    if co.arch is not None and co.arch != arch.name:
        raise EmulatorError(f"code object is for {co.arch}, but the device is {arch.name}")
    return arch


def _metadata_by_kernel(co: elf.CodeObject) -> dict[str, dict]:
    try:
        md = co.metadata()
    except Exception:  # a code object without metadata still runs; sizes come from the descriptor
        md = {}
    metas = {k.get(".name"): k for k in md.get("amdhsa.kernels", [])}
    for name in co.symbols:  # every kernel, with or without metadata
        if name.endswith(".kd"):
            metas.setdefault(name[:-3], {})
    return metas


def load_code_object(blob: bytes, arch: Arch | str | None = None) -> dict[str, KernelImage]:
    """All kernels of `blob`, decoded for `arch` (default: the arch in the ELF header)."""
    co = elf.read_code_object(blob)
    arch = _check_arch(co, arch)
    metas = _metadata_by_kernel(co)
    decoder = Decoder(arch.name)
    kernels = {}
    for name in co.symbols:
        if not name.endswith(".kd"):
            continue
        kname = name[:-3]
        kd_addr, kd = elf.read_kernel_descriptor(co, kname)
        entry = kd_addr + kd.entry_offset
        seg = next((s for s in co.segments if s.vaddr <= entry < s.vaddr + s.memsz), None)
        if seg is None:
            raise EmulatorError(f"kernel {kname}: entry 0x{entry:x} is outside every loaded segment")
        sym = co.symbols.get(kname)
        end = seg.vaddr + len(seg.data)
        if sym is not None and sym.size:
            end = min(end, entry + sym.size + 64)
        code = seg.data[entry - seg.vaddr:end - seg.vaddr]
        insts = decoder.decode_all(bytes(code[:len(code) & ~3]), 0, entry)
        img = KernelImage(kname, arch, kd, entry, insts, metas.get(kname, {}))
        img.index_of = {ins.addr: i for i, ins in enumerate(insts)}
        kernels[kname] = img
    return kernels


def disassembly(img: KernelImage) -> list[str]:
    """The decoded mnemonics in order (what the `.s` self-check compares)."""
    return [ins.raw_name for ins in img.insts]
