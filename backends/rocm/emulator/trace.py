"""Instruction traces of workgroups, the timing model's input (timing.py).

A traced run is an ordinary functional run (executor.run_workgroup) whose handlers also record,
per wave, the instruction indices in execution order and, for each LDS and vector-memory
instruction, the cost its real addresses imply: LDS cycles with bank conflicts, or the distinct
cache lines a global/buffer/scratch access touches. Control flow, EXEC and addresses come from the
real execution, so the timing model replays exactly the instruction stream the kernel ran.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from tiledsl.backends.rocm.emulator.executor import BoundKernel
from tiledsl.backends.rocm.emulator.lds import canonical
from tiledsl.backends.rocm.emulator.memory import TAG_SHIFT
from tiledsl.backends.rocm.lds_banks import lds_cycles

# gfx950's transpose reads (ds_read_b64_tr_b16 ...) fetch each lane's bytes at its address like the
# plain read of that width, then exchange them between lanes: the banks see the plain read.
_LDS_RW = re.compile(r"ds_(read|write)(2st64|2)?_(b8|b16|b32|b64|b96|b128|u8|i8|u16|i16)(_d16(_hi)?|_tr_b\d+)?$")
_LDS_ATOMIC = re.compile(r"ds_\w+?_(u32|i32|b32|f32|u64|i64|b64|f64)$")
_BYTES = {"b8": 1, "u8": 1, "i8": 1, "b16": 2, "u16": 2, "i16": 2, "b32": 4, "u32": 4, "i32": 4, "f32": 4,
          "b64": 8, "u64": 8, "i64": 8, "f64": 8, "b96": 12, "b128": 16}
_VMEM_BYTES = re.compile(r"(ubyte|sbyte|byte|ushort|sshort|short|dwordx4|dwordx3|dwordx2|dword|b128|b96|b64|b32|"
                         r"u8|i8|b8|u16|i16|b16|d16)")
_VMEM_SIZE = {"ubyte": 1, "sbyte": 1, "byte": 1, "u8": 1, "i8": 1, "b8": 1, "ushort": 2, "sshort": 2, "short": 2,
              "u16": 2, "i16": 2, "b16": 2, "d16": 2, "dword": 4, "b32": 4, "dwordx2": 8, "b64": 8, "dwordx3": 12,
              "b96": 12, "dwordx4": 16, "b128": 16}
_ADDRESS_BITS = np.uint64((1 << TAG_SHIFT) - 1)  # drop the emulator's pointer tag (memory.Regions)


@dataclass
class WaveTrace:
    index: int  # the wave's index in its workgroup
    pcs: list[int]  # instruction indices in execution order
    costs: list[int]  # one per LDS (cycles) or vector-memory (cache lines) instruction, in order


@dataclass
class WorkgroupTrace:
    wg: tuple[int, int, int]
    waves: list[WaveTrace]

    @property
    def instructions(self) -> int:
        return sum(len(w.pcs) for w in self.waves)


def cache_lines(addrs: np.ndarray, nbytes: int, line: int) -> int:
    """Distinct `line`-byte cache lines the lanes' accesses of `nbytes` each touch."""
    if addrs.size == 0:
        return 0
    a = addrs.astype(np.uint64) & _ADDRESS_BITS
    first, last = a // np.uint64(line), (a + np.uint64(nbytes - 1)) // np.uint64(line)
    return int(np.unique(np.concatenate([first, last])).size)


def _lds_cost(inst, banks: int):
    name = canonical(inst.name)
    f = inst.f
    addr_r = f["addr"]
    m = _LDS_RW.match(name)
    if m:
        nbytes = _BYTES[m.group(3)]
        if m.group(2):
            scale = nbytes * (64 if m.group(2) == "2st64" else 1)
            offs = (f["offset0"] * scale, f["offset1"] * scale)
        else:
            offs = (f["offset0"] | (f["offset1"] << 8),)
    elif name in ("ds_swizzle_b32", "ds_permute_b32", "ds_bpermute_b32"):
        return lambda w: -(-w.lanes.size // banks)  # through the crossbar: a pass per `banks` lanes
    elif atomic := _LDS_ATOMIC.match(name):
        nbytes, offs = _BYTES[atomic.group(1)], (f["offset0"] | (f["offset1"] << 8),)
    else:
        return None

    def cost(w) -> int:
        base = w.v[addr_r, w.lanes].astype(np.int64)
        return sum(lds_cycles(base + o, nbytes, banks) for o in offs)
    return cost


def _vmem_cost(inst, ctx, line: int):
    from tiledsl.backends.rocm.emulator import vmem

    m = _VMEM_BYTES.search(inst.name.split("_", 1)[1])
    if m is None:
        return None
    nbytes = _VMEM_SIZE[m.group(1)]
    if inst.fam == "SCRATCH":  # private memory is interleaved per lane: the lanes' dwords are adjacent
        return lambda w: -(-(w.lanes.size * max(nbytes, 4)) // line)
    try:
        addr_fn = vmem._buffer_address(inst, ctx, nbytes) if inst.fam == "MUBUF" else vmem._address_fn(inst, ctx)
    except (KeyError, ValueError):
        return None

    def cost(w) -> int:
        lanes = w.lanes
        if lanes.size == 0:
            return 0
        try:
            addrs = addr_fn(w, lanes)
        except Exception:  # noqa: BLE001 -- a bad address faults in the handler itself, right after
            return -(-(lanes.size * nbytes) // line)
        if isinstance(addrs, tuple):  # a buffer access: (addresses, lanes in range, private?)
            addrs = addrs[0]
        return cache_lines(np.asarray(addrs), nbytes, line)
    return cost


FREE_MEMORY = ("buffer_gl0_inv", "buffer_gl1_inv", "buffer_inv", "buffer_wbl2", "buffer_wbinvl1", "buffer_wbinvl1_vol",
               "global_inv", "global_wb")  # cache control: no data moves


def memory_kind(inst) -> str | None:
    """"lds" or "vmem" for the instructions the timing model prices by their addresses, else None."""
    if inst.name in FREE_MEMORY:
        return None
    if inst.fam == "DS":
        return "lds"
    if inst.fam in ("GLOBAL", "FLAT", "SCRATCH", "MUBUF", "MTBUF"):
        return "vmem"
    return None


def cost_functions(bk: BoundKernel, lds_banks: int, line_bytes: int) -> list:
    """Per instruction: a function (wave -> cost) for LDS and vector-memory instructions, else None.
    Forms the address rules do not cover cost a pass per `lds_banks` lanes (LDS) or the lanes'
    dwords in lines (memory)."""
    out = []
    for inst in bk.image.insts:
        kind = memory_kind(inst)
        fn = None
        if kind == "lds":
            fn = _lds_cost(inst, lds_banks) or (lambda w: -(-w.lanes.size // lds_banks))
        elif kind == "vmem":
            fn = _vmem_cost(inst, bk.ctx, line_bytes) or (lambda w: -(-(w.lanes.size * 4) // line_bytes))
        out.append(fn)
    return out


class Tracer:
    """Wraps a bound kernel's handlers so that runs of it record traces (see `traced`)."""

    def __init__(self, bk: BoundKernel, lds_banks: int, line_bytes: int) -> None:
        self.records: dict[int, tuple] = {}  # id(wave) -> (wave, pcs, costs)
        costs = cost_functions(bk, lds_banks, line_bytes)
        wrapped = [self._wrap(pc, h, c) for pc, (h, c) in enumerate(zip(bk.handlers, costs, strict=True))]
        self.kernel = replace(bk, handlers=wrapped, lockstep={})

    def _wrap(self, pc: int, handler, cost):
        records = self.records

        def record(w):
            r = records.get(id(w))
            if r is None:
                r = records[id(w)] = (w, [], [])
            return r

        if cost is None:
            def traced(w):
                record(w)[1].append(pc)
                return handler(w)
        else:
            def traced(w):
                r = record(w)
                r[1].append(pc)
                r[2].append(cost(w) if w.lanes.size else 0)
                return handler(w)
        return traced

    def take(self, wg: tuple[int, int, int]) -> WorkgroupTrace:
        """The traces recorded since the last call, as workgroup `wg`'s."""
        waves = sorted(self.records.values(), key=lambda r: r[0].index)
        self.records.clear()
        return WorkgroupTrace(wg, [WaveTrace(w.index, pcs, costs) for w, pcs, costs in waves])
