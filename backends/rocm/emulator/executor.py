"""Running dispatches: grid -> workgroups -> waves, each wave a generator over pre-bound handlers.

A handler is `fn(wave) -> next instruction index` (or BARRIER / END). Handlers are built once per
kernel image by the semantic modules (salu, valu, vmem, matrix), which register a builder per
mnemonic in `BUILDERS`. Waves of one workgroup run round-robin and meet at `s_barrier`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from tiledsl.backends.rocm.emulator.decoder import Inst
from tiledsl.backends.rocm.emulator.loader import KernelImage
from tiledsl.backends.rocm.emulator.memory import EmulatorError, Heap, MemoryFault, Regions, UnsupportedInstruction
from tiledsl.backends.rocm.emulator.operands import M32, mask_to_int

BARRIER = -1
END = -2
SCRATCH_TAG = 0x5C00_0000_0000  # base of the private segment buffer descriptor (gfx9 MUBUF scratch)

BUILDERS: dict[str, object] = {}


def builder(*names: str):
    """Register a handler builder `build(inst, ctx) -> fn(wave) -> next index` for mnemonics."""
    def deco(fn):
        for n in names:
            BUILDERS[n] = fn
        return fn
    return deco


@dataclass
class Ctx:
    """What a handler builder may know about the kernel it binds into."""

    image: KernelImage
    code_base: int  # device address of code byte 0
    arch: str = ""
    gen: str = ""
    wave_size: int = 64
    null_sgpr: int = -1
    m0: int = 124
    index: int = 0  # index of the instruction being bound
    nxt: int = 0
    mode0: int = 0  # the MODE register at wave launch (kernel descriptor), see kernel_mode
    dx10_clamp: bool = True  # clamp turns NaN into 0 (MODE.DX10_CLAMP; always so on gfx12)

    def target(self, inst: Inst, simm16: int) -> int:
        off = simm16 - (1 << 16) if simm16 & 0x8000 else simm16
        addr = inst.addr + inst.size + off * 4
        try:
            return self.image.index_of[addr]
        except KeyError:
            raise EmulatorError(f"{self.image.name}: branch at 0x{inst.addr:x} to 0x{addr:x}, "
                                "which is not an instruction boundary") from None


class Wave:
    __slots__ = ("s", "v", "vf", "vi", "h", "hf", "scc", "exec", "mask", "lanes", "full", "W", "fullmask", "lds",
                 "ldswin", "heap", "mem", "scratch", "wg", "index", "pc", "ctx", "mode", "lane_ids", "count",
                 "dppvalid")

    def __init__(self, W: int, nv: int, heap: Heap, lds: np.ndarray, ctx: Ctx, v: np.ndarray | None = None) -> None:
        self.s = [0] * 128
        # `v`: registers living elsewhere (lockstep.py keeps the waves of a chunk in one array)
        self.v = np.zeros((nv, W), dtype=np.uint32) if v is None else v
        self.vf = self.v.view(np.float32)
        self.vi = self.v.view(np.int32)
        self.h = self.v.view(np.uint16)
        self.hf = self.v.view(np.float16)
        self.scc = 0
        self.W = W
        self.fullmask = (1 << W) - 1
        self.exec = 0
        self.mask = np.zeros(W, dtype=bool)
        self.lanes = np.zeros(0, dtype=np.int64)  # indices of the active lanes (EXEC), cached per value
        self.full = False
        self.heap = heap
        self.mem: Regions | None = None  # the launch's memory checks (set by run_workgroup)
        self.lds = lds
        self.ldswin: dict = {}  # byte-window views of `lds` (memory.windows), shared by the workgroup
        self.scratch: np.ndarray | None = None
        self.ctx = ctx
        self.lane_ids = np.arange(W)
        self.count = 0
        self.mode = ctx.mode0  # the MODE hardware register (s_getreg/s_setreg, salu.py)

    def set_exec(self, value: int) -> None:
        value &= self.fullmask
        self.exec = value
        self.s[126] = value & M32
        self.s[127] = value >> 32
        self.full = value == self.fullmask
        self.mask, self.lanes = _exec_cache(value, self.W)

    def vcc(self) -> int:
        return self.s[106] | (self.s[107] << 32 if self.W == 64 else 0)

    def set_vcc(self, value: int) -> None:
        self.s[106] = value & M32
        if self.W == 64:
            self.s[107] = value >> 32

    def lanemask(self, b: np.ndarray) -> int:
        """Bool lane array -> lane bitmask restricted to active lanes."""
        return mask_to_int(b & self.mask)


_MASKS: dict[tuple[int, int], np.ndarray] = {}


def _mask_cache(value: int, W: int) -> np.ndarray:
    key = (value, W)
    m = _MASKS.get(key)
    if m is None:
        m = np.unpackbits(np.frombuffer(value.to_bytes(W // 8, "little"), np.uint8), bitorder="little").astype(bool)
        m.setflags(write=False)
        if len(_MASKS) > 4096:
            _MASKS.clear()
        _MASKS[key] = m
    return m


_EXECS: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


def _exec_cache(value: int, W: int) -> tuple[np.ndarray, np.ndarray]:
    """(bool lane mask, active lane indices) of an EXEC value; np.flatnonzero costs ~2 us per access."""
    key = (value, W)
    e = _EXECS.get(key)
    if e is None:
        m = _mask_cache(value, W)
        lanes = np.flatnonzero(m)
        lanes.setflags(write=False)
        if len(_EXECS) > 4096:
            _EXECS.clear()
        e = _EXECS[key] = (m, lanes)
    return e


# -------------------------------------------------------------------------------------------
@dataclass
class BoundKernel:
    image: KernelImage
    handlers: list
    ctx: Ctx
    nvgpr: int
    stats: dict = field(default_factory=dict)
    lockstep: dict = field(default_factory=dict)  # lockstep.py's batched handlers, per chunk width


def bind(image: KernelImage, code_base: int) -> BoundKernel:
    """Build the handler list of a kernel (once per loaded code object)."""
    from tiledsl.backends.rocm.emulator import crosslane, fp8, lds, matrix, salu, salu_float, valu, vmem, vop3p  # noqa: F401
    from tiledsl.backends.rocm.emulator.decoder import opcode_table

    matrix.register_names(name for name, _ in opcode_table(image.arch.name).values())

    arch = image.arch
    mode0, unsupported_mode = kernel_mode(image.kd.rsrc1, arch.isa_generation)
    ctx = Ctx(image, code_base, arch.name, arch.isa_generation, image.wave_size, null_sgpr=arch.null_sgpr,
              m0=arch.m0_sgpr, mode0=mode0, dx10_clamp=arch.isa_generation == "gfx12" or bool(mode0 >> 8 & 1))
    handlers = []
    for i, inst in enumerate(image.insts):
        ctx.index, ctx.nxt = i, i + 1
        b = BUILDERS.get(inst.name)
        if b is None:
            handlers.append(_unsupported(inst, ctx))
            continue
        try:
            h = b(inst, ctx)
        except UnsupportedInstruction as exc:
            h = _unsupported(inst, ctx, str(exc))
        handlers.append(h)
    if unsupported_mode and handlers:  # every FP result would be rounded the wrong way: refuse the kernel
        handlers[0] = _unsupported(image.insts[0], ctx, unsupported_mode)
    return BoundKernel(image, handlers, ctx, arch.vgprs_per_lane)


def kernel_mode(rsrc1: int, gen: str) -> tuple[int, str]:
    """(MODE register at wave launch, why the emulator cannot run under it or ""). COMPUTE_PGM_RSRC1
    holds FLOAT_MODE in bits 19:12 (MODE[7:0]: round modes [3:0], denormal modes [7:4]) and, up to
    gfx11, DX10_CLAMP (bit 21 -> MODE[8]), IEEE_MODE (23 -> MODE[9]) and FP16_OVFL (26 -> MODE[23]);
    gfx12 reuses bits 21 and 23 for other things. The emulator rounds to nearest even and does not
    saturate f16 overflows, so a kernel asking otherwise is refused."""
    mode = (rsrc1 >> 12) & 0xFF
    if gen != "gfx12":
        mode |= ((rsrc1 >> 21) & 1) << 8 | ((rsrc1 >> 23) & 1) << 9 | ((rsrc1 >> 26) & 1) << 23
    why = ""
    if mode & 0xF:
        why = f"the kernel descriptor sets FP round mode 0x{mode & 0xF:x}; only round-to-nearest-even is modelled"
    elif mode >> 23 & 1:
        why = "the kernel descriptor sets FP16_OVFL (f16 overflow saturation), which is not modelled"
    return mode, why


def _unsupported(inst: Inst, ctx: Ctx, why: str = ""):
    msg = (f"unsupported instruction '{inst.raw_name}' at 0x{inst.addr:x} on {ctx.arch} "
           f"(kernel {ctx.image.name})" + (f": {why}" if why else ""))

    def h(w):
        raise UnsupportedInstruction(msg)
    h.unsupported = msg  # type: ignore[attr-defined]
    return h


def unsupported_instructions(bk: BoundKernel) -> list[str]:
    return [h.unsupported for h in bk.handlers if hasattr(h, "unsupported")]


# -------------------------------------------------------------------------------------------
def run_wave(w: Wave, handlers: list, bk: BoundKernel):
    """Generator: runs until s_endpgm, yielding at every s_barrier."""
    pc = 0
    n = 0
    try:
        while True:
            npc = handlers[pc](w)
            n += 1
            if npc >= 0:
                pc = npc
                continue
            if npc == END:
                break
            w.count += n
            n = 0
            pc += 1
            yield
    except EmulatorError as exc:
        raise type(exc)(_where(bk, w, pc) + str(exc)) from None
    except (IndexError, ValueError, TypeError, OverflowError, KeyError, ZeroDivisionError) as exc:
        raise EmulatorError(_where(bk, w, pc) + f"emulator failure ({type(exc).__name__}: {exc})") from exc
    finally:
        w.count += n


def _where(bk: BoundKernel, w: Wave, pc: int) -> str:
    inst = bk.image.insts[pc] if 0 <= pc < len(bk.image.insts) else None
    return (f"kernel '{bk.image.name}' ({bk.ctx.arch}), workgroup {w.wg}, wave {w.index}, "
            f"instruction '{inst.raw_name if inst else '?'}' at 0x{inst.addr if inst else 0:x}: ")


def run_workgroup(bk: BoundKernel, heap: Heap, wg: tuple[int, int, int], grid: tuple[int, int, int],
                  block: tuple[int, int, int], kernarg_addr: int, dispatch_addr: int, dynamic_lds: int,
                  rng: np.random.Generator | None = None, mem: Regions | None = None) -> int:
    """Run one workgroup to completion; returns the wave-instructions executed. With `rng`, the
    waves run each stretch between barriers in a random order instead of in index order. `mem`:
    the launch's pointer-argument regions (default: none, every live allocation is fair game).

    A memory fault is the first in index order: when a wave faults, the waves of lower index that
    have not yet run the same stretch (only under `rng`) run it first, and the lowest that faults
    is reported -- the fault an in-order run reports."""
    # inf - inf, 0/0 and overflow are ordinary IEEE results on the GPU: no numpy warnings. Set once
    # here rather than around every instruction (np.errstate costs microseconds).
    with np.errstate(all="ignore"):
        return _run_workgroup(bk, heap, wg, grid, block, kernarg_addr, dispatch_addr, dynamic_lds, rng,
                              mem if mem is not None else Regions(heap))


def _run_workgroup(bk: BoundKernel, heap: Heap, wg: tuple[int, int, int], grid: tuple[int, int, int],
                   block: tuple[int, int, int], kernarg_addr: int, dispatch_addr: int, dynamic_lds: int,
                   rng: np.random.Generator | None, mem: Regions) -> int:
    img = bk.image
    W = img.wave_size
    nthreads = block[0] * block[1] * block[2]
    nwaves = (nthreads + W - 1) // W
    lds_size = img.lds_bytes + dynamic_lds
    lds = np.zeros(max(lds_size, 4), dtype=np.uint8)
    lds_view = lds[:lds_size] if lds_size else lds[:0]
    ldswin: dict = {}
    waves = []
    tid = np.arange(nwaves * W)
    tx, ty, tz = tid % block[0], (tid // block[0]) % block[1], tid // (block[0] * block[1])
    packed = (tx | (ty << 10) | (tz << 20)).astype(np.uint32)
    for i in range(nwaves):
        w = Wave(W, bk.nvgpr, heap, lds_view, bk.ctx)
        w.wg, w.index = wg, i
        w.mem = mem
        w.ldswin = ldswin
        _abi_setup(w, bk, wg, kernarg_addr, dispatch_addr)
        w.v[0] = packed[i * W:(i + 1) * W]
        active = min(W, nthreads - i * W)
        w.set_exec((1 << active) - 1)
        priv = img.kd.private_segment_size
        if priv:
            w.scratch = np.zeros((W, priv + 16), dtype=np.uint8)
        waves.append(w)
    gens = [run_wave(w, bk.handlers, bk) for w in waves]
    live = list(range(nwaves))
    while live:
        # Run every live wave up to its next barrier (or its end); then release the barrier.
        still = []
        if rng is not None:
            live = [live[j] for j in rng.permutation(len(live))]
        for j, i in enumerate(live):
            try:
                next(gens[i])
                still.append(i)
            except StopIteration:
                pass
            except MemoryFault as exc:
                fault = exc
                if rng is not None:  # the lower waves not yet run in this stretch come first
                    fault = _lower_fault([gens[k] for k in sorted(k for k in live[j + 1:] if k < i)]) or exc
                raise fault from None
        live = sorted(still)
    return sum(w.count for w in waves)


def _lower_fault(gens: list) -> MemoryFault | None:
    """Run each wave (in order) to its next barrier; the first one's memory fault, if any."""
    for g in gens:
        try:
            next(g)
        except StopIteration:
            pass
        except MemoryFault as exc:
            return exc
    return None


def _abi_setup(w: Wave, bk: BoundKernel, wg, kernarg_addr: int, dispatch_addr: int) -> None:
    """AMDHSA initial register state: user SGPRs in enable order, then workgroup ids."""
    kd = bk.image.kd
    props = kd.properties
    s = w.s
    i = 0
    if props & 1:  # private segment buffer: a descriptor whose base is the scratch tag
        s[0:4] = [SCRATCH_TAG & M32, (SCRATCH_TAG >> 32) & 0xFFFF, 0xFFFFFFFF, 0x00027000]
        i = 4
    if props & 2:  # dispatch ptr
        s[i], s[i + 1] = dispatch_addr & M32, dispatch_addr >> 32
        i += 2
    if props & 4:  # queue ptr (no queue: null)
        i += 2
    if props & 8:  # kernarg segment ptr
        s[i], s[i + 1] = kernarg_addr & M32, kernarg_addr >> 32
        i += 2
    if props & 16:  # dispatch id
        i += 2
    if props & 32:  # flat scratch init (offset 0, size)
        s[i], s[i + 1] = 0, kd.private_segment_size
        i += 2
    if props & 64:  # private segment size
        s[i] = kd.private_segment_size
        i += 1
    # Kernarg preload (gfx940+): the first dwords of the kernarg segment fill the remaining user SGPRs.
    n_user = kd.user_sgpr_count
    if n_user > i and kernarg_addr:
        extra = n_user - i
        words = struct.unpack(f"<{extra}I", _safe_read(w.heap, kernarg_addr, extra * 4))
        s[i:i + extra] = list(words)
    j = n_user
    rsrc2 = kd.rsrc2
    for bit, val in ((7, wg[0]), (8, wg[1]), (9, wg[2])):
        if rsrc2 & (1 << bit):
            s[j] = val
            j += 1
    if bk.ctx.gen == "gfx12":  # architected workgroup ids: ttmp9 = x, ttmp7 = y | z << 16
        s[108 + 9] = wg[0]
        s[108 + 7] = wg[1] | (wg[2] << 16)
        s[108 + 8] = w.index << 25  # ttmp8[29:25]: the wave's index in its workgroup (llvm.amdgcn.wave.id)


def _safe_read(heap: Heap, addr: int, n: int) -> bytes:
    a = heap.find(addr)
    if a is None:
        return bytes(n)
    avail = max(0, min(n, a.addr + a.size - addr))
    return heap.read(addr, avail) + bytes(n - avail)


def lds_fault(w: Wave, lanes: np.ndarray, addrs: np.ndarray, size: int, what: str) -> MemoryFault:
    lane = int(np.flatnonzero(lanes)[0])
    return MemoryFault(f"LDS {what} of {size} bytes at LDS offset {int(addrs[lane])} (lane {lane}) is outside "
                       f"the workgroup's {w.lds.size} bytes of LDS")
