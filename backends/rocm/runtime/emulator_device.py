"""`Device` backed by the functional ISA emulator (no GPU needed).

Launches run synchronously on the calling thread (streams only keep the interface honest), so a
launch returns with its results in memory and any fault raised at the launch site.
"""

from __future__ import annotations

import functools
import os
import struct
import time
from collections.abc import Callable, Sequence

import numpy as np

from tiledsl.backends.rocm import elf
from tiledsl.backends.rocm.arch import Arch, get_arch
from tiledsl.backends.rocm.emulator import lockstep
from tiledsl.backends.rocm.emulator.executor import BoundKernel, bind, run_workgroup, unsupported_instructions
from tiledsl.backends.rocm.emulator.loader import load_code_object
from tiledsl.backends.rocm.emulator.memory import TAG_SHIFT, Heap, MemoryFault, Region, Regions
from tiledsl.backends.rocm.runtime.device import (
    Buffer,
    Device,
    DeviceError,
    Kernel,
    Module,
    Stream,
    TensorArg,
    check_buffer,
    check_launch,
    check_module,
    check_size,
    check_stream,
    complete_kernargs,
    copy_in_bytes,
    copy_out_size,
    launch_dims,
)
from tiledsl.backends.rocm.runtime.timing_model import LaunchTiming, TimingOptions, model_launch

SCHEDULES = ("in_order", "shuffle")


@functools.cache
def host_memory_bytes() -> int:
    """This machine's physical memory: the emulated device memory's ceiling."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class EmulatorDevice(Device):
    """The emulator as a device. schedule="shuffle" runs the workgroups of each launch, and the
    waves of each workgroup between barriers, in a random order drawn from `seed` (the same seed
    gives the same orders): results that depend on the order expose a race or a
    non-deterministic reduction, which in-order emulation would hide.

    lockstep (in-order schedule only): run the waves of many workgroups together (emulator/
    lockstep.py), same results and same faults as one wave at a time; False keeps the latter.

    workers: processes a large lockstep launch may run in (emulator/lockstep_workers.py; same
    results and faults as one process); 1 (the default) runs everything in this process, None
    takes every core this process may use (at most 8). The default stays 1 because the test
    suite already runs one process per core (pytest -n 2): forking more would only oversubscribe.

    timing (True or a runtime.timing_model.TimingOptions): also model each launch's time on the
    arch (docs/profile.md); every launch's statistics then carry a LaunchTiming under "timing".
    With TimingOptions(execute=False) only the sampled workgroups run: a fast profile of a
    full-size launch whose results are not computed (copy_out then refuses)."""

    def __init__(self, arch: str | Arch, schedule: str = "in_order", seed: int = 0, lockstep: bool = True,
                 timing: bool | TimingOptions = False, workers: int | None = 1) -> None:
        if schedule not in SCHEDULES:
            raise DeviceError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")
        if not isinstance(timing, (bool, TimingOptions)):
            raise DeviceError(f"timing: expected a bool or a TimingOptions, got {timing!r}")
        if not isinstance(seed, int | np.integer) or isinstance(seed, bool) or seed < 0:
            raise DeviceError(f"seed: expected an int >= 0, got {seed!r}")
        if not isinstance(lockstep, bool):
            raise DeviceError(f"lockstep: expected a bool, got {lockstep!r}")
        self.arch = arch if isinstance(arch, Arch) else get_arch(arch)
        self.schedule = schedule
        self.rng = np.random.default_rng(seed) if schedule == "shuffle" else None
        self.lockstep = lockstep
        if workers is None:
            workers = min(len(os.sched_getaffinity(0)), 8)
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise DeviceError(f"workers: expected None or an int >= 1, got {workers!r}")
        self.workers = workers
        self.name = f"emulated {self.arch.name} ({self.arch.product})" + (
            f", shuffled (seed {seed})" if self.rng is not None else "")
        self.heap = Heap()
        self.last_stats: dict = {}
        self.launches: list[dict] = []  # every launch's statistics and kernel name, in order
        self.timing = TimingOptions() if timing is True else timing or None
        if self.timing is not None and self.arch.timing is None:
            raise DeviceError(f"timing: {self.arch.name} has no timing parameters")
        self.unexecuted: str | None = None  # set when a timing-only launch left results uncomputed

    # -- memory ---------------------------------------------------------------------------
    def alloc(self, size: int, name: str = "buffer") -> Buffer:
        check_size(size, name)
        # The emulated device memory lives in this process's memory: past half of the host's, the
        # OS would kill the process when the pages are first touched, rather than refuse them.
        if self.heap.top + size > host_memory_bytes() // 2:
            raise self._out_of_memory(size, name)
        try:
            addr = self.heap.alloc(size, name)
        except MemoryError:
            raise self._out_of_memory(size, name) from None
        return Buffer(self, addr, int(size), name)

    def _out_of_memory(self, size: int, name: str) -> DeviceError:
        return DeviceError(f"cannot allocate {size} bytes for '{name}': out of memory (the emulator keeps device "
                           f"memory in host memory, at most half of its {host_memory_bytes()} bytes, and holds "
                           f"{self.heap.top} already)")

    def free(self, buf: Buffer) -> None:
        check_buffer(self, buf, "free")
        self.heap.free(buf.addr)
        buf.freed = True

    def copy_in(self, buf: Buffer, data: bytes | np.ndarray, offset: int = 0) -> None:
        raw, offset = copy_in_bytes(self, buf, data, offset)
        self.heap.write(buf.addr + offset, raw)


    def copy_out(self, buf: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        size, offset = copy_out_size(self, buf, size, offset)
        if self.unexecuted:
            raise DeviceError(f"cannot copy '{buf.name}' out: {self.unexecuted}")
        return self.heap.read(buf.addr + offset, size)

    # -- code -----------------------------------------------------------------------------
    def load_module(self, code_object: bytes) -> Module:
        images = load_code_object(code_object, self.arch)
        co = elf.read_code_object(code_object)
        # Map the whole image into device memory so PC-relative data (s_getpc) resolves.
        extent = max((s.vaddr + s.memsz for s in co.segments), default=0)
        base = self.heap.alloc(max(extent, 4), "code object")
        for s in co.segments:
            self.heap.write(base + s.vaddr, s.data)
        bound = {name: bind(img, base) for name, img in images.items()}
        return Module(self, {n: img.meta for n, img in images.items()}, handle=(bound, base))

    def unload_module(self, module: Module) -> None:
        check_module(self, module, "unload_module")
        self.heap.free(module.handle[1])
        module.unloaded = True

    def _get_kernel(self, module: Module, name: str) -> Kernel:
        return Kernel(module, name, module.kernels[name], handle=module.handle[0][name])

    @staticmethod
    def unsupported(kernel: Kernel) -> list[str]:
        """Instructions of `kernel` the emulator cannot execute (empty when it runs fully)."""
        return unsupported_instructions(kernel.handle)

    # -- launch ---------------------------------------------------------------------------
    def launch(self, kernel: Kernel, grid, block, kernargs: bytes, dynamic_lds: int = 0,
               stream: Stream | None = None, tensors: Sequence[TensorArg] | None = None) -> None:
        dynamic_lds = check_launch(self, kernel, dynamic_lds, stream)
        timing = self._model(kernel, grid, block, kernargs, dynamic_lds, tensors) if self.timing else None
        if timing is not None and not self.timing.execute:
            self.unexecuted = (f"the device models time only (TimingOptions(execute=False)): launch of "
                               f"'{kernel.name}' ran {timing.sampled_workgroups} of {timing.workgroups} workgroups")
            self.last_stats = {"path": "timing only", "workgroups": timing.workgroups}
        else:
            self.last_stats = dispatch(kernel.handle, kernel.meta, self.heap, grid, block, kernargs, dynamic_lds,
                                       self.heap.alloc, self.heap.free, self.rng, tensors, self.lockstep,
                                       self.workers)
        if timing is not None:
            self.last_stats["timing"] = timing
        self.launches.append({"kernel": kernel.name, **self.last_stats})

    def _model(self, kernel: Kernel, grid, block, kernargs: bytes, dynamic_lds: int,
               tensors: Sequence[TensorArg] | None) -> LaunchTiming:
        """The timing model of a launch, its sampled workgroups run on a copy of memory (or on the
        memory itself when the launch will not execute)."""
        heap = self.heap.clone() if self.timing.execute else self.heap
        g, b = launch_dims(grid, block)
        karg, packet, mem = write_launch(kernel.handle, kernel.meta, heap, g, b, kernargs, dynamic_lds, heap.alloc,
                                         heap.free, tensors)
        try:
            with np.errstate(all="ignore"):
                return model_launch(kernel.handle, kernel.meta, heap, g, b, dynamic_lds, karg, packet, mem,
                                    self.timing)
        finally:
            heap.free(karg)
            heap.free(packet)

    def synchronize(self, stream: Stream | None = None) -> None:
        check_stream(self, stream, "synchronize")


def tag_pointers(meta: dict, args: bytes, heap: Heap,
                 tensors: Sequence[TensorArg] | None = None) -> tuple[bytes, list[Region]]:
    """The kernarg segment with each pointer argument (a `global_buffer` in the metadata) tagged
    with its region (memory.Regions), and those regions: the tensor's extent where `tensors`
    describes the pointer at that offset, else the live allocation the pointer lies in. Null
    pointers and pointers into no allocation stay untagged (their accesses fault as outside every
    allocation)."""
    given = {t.offset: t for t in tensors or ()}
    buf = bytearray(args)
    regions: list[Region] = []
    for a in meta.get(".args", []):
        off, size = int(a.get(".offset", 0)), int(a.get(".size", 0))
        if a.get(".value_kind") != "global_buffer" or size != 8 or off + 8 > len(buf):
            continue
        (ptr,) = struct.unpack_from("<Q", buf, off)
        if not ptr or ptr >> TAG_SHIFT:
            continue
        t = given.get(off)
        if t is not None and t.addr == ptr:
            r = Region(t.name, ptr, t.size, t.dtype, t.itemsize, tuple(t.shape), t.buffer, t.buffer_offset,
                       t.buffer_size)
        else:
            found = heap.find(ptr)
            if found is None:
                continue
            r = Region(a.get(".name") or found.name, found.addr, found.size, buffer=found.name)
        regions.append(r)
        r.tag = len(regions)
        struct.pack_into("<Q", buf, off, ptr | (len(regions) << TAG_SHIFT))
    return bytes(buf), regions


def _launch_order(wg: tuple[int, int, int]) -> tuple[int, int, int]:
    return wg[2], wg[1], wg[0]


def _first_fault(run: Callable[[tuple[int, int, int]], int], workgroups: list) -> MemoryFault | None:
    """Run `workgroups` in order until one faults; its fault, or None."""
    for wg in workgroups:
        try:
            run(wg)
        except MemoryFault as exc:
            return exc
    return None


def _try_lockstep(bk: BoundKernel, heap: Heap, order: list, g, b, karg: int, packet: int, dynamic_lds: int,
                  mem: Regions, workers: int = 1) -> tuple[list[int], int] | str:
    """The launch in lockstep: (each workgroup's wave-instructions, the processes that ran them),
    or why it ran no further ("ordinary": not eligible; "fallback: ...": it stopped, the heap
    restored for the ordinary run)."""
    W = bk.image.wave_size
    waves = len(order) * -(-(b[0] * b[1] * b[2]) // W)
    if heap.external or waves < lockstep.MIN_WAVES or not lockstep.eligible(bk):
        return "ordinary"
    saved = heap.data[:heap.top].copy()
    loaded, unique = heap.loaded_bytes, heap.unique_loaded_bytes
    try:
        return lockstep.run_launch(bk, heap, order, g, b, karg, packet, dynamic_lds, mem, workers)
    except lockstep.Fallback as exc:
        heap.data[:saved.size] = saved
        heap.loaded_bytes, heap.unique_loaded_bytes = loaded, unique
        return f"fallback: {exc}"


def write_launch(bk: BoundKernel, meta: dict, heap: Heap, g: tuple[int, int, int], b: tuple[int, int, int],
                 kernargs: bytes, dynamic_lds: int, alloc: Callable[[int, str], int], free: Callable[[int], None],
                 tensors: Sequence[TensorArg] | None = None) -> tuple[int, int, Regions]:
    """Check a launch and put what its waves read into memory from `alloc`: the kernarg segment
    (hidden arguments filled in, pointer arguments tagged with their regions, see `tag_pointers`)
    and a dispatch packet. Returns (kernarg address, packet address, the launch's regions); the
    caller frees both addresses."""
    name = bk.image.name
    arch = bk.image.arch
    lds_total = bk.image.lds_bytes + dynamic_lds
    if lds_total > arch.lds_bytes:
        raise DeviceError(f"kernel '{name}' needs {lds_total} bytes of LDS; {arch.name} has {arch.lds_bytes}")
    reqd = meta.get(".reqd_workgroup_size")
    if reqd and tuple(reqd) != b:
        raise DeviceError(f"kernel '{name}' was compiled for block {tuple(reqd)}, launched with {b}")
    args, regions = tag_pointers(meta, complete_kernargs(meta, kernargs, g, b, dynamic_lds), heap, tensors)
    # The kernarg segment is 16-byte aligned and LLVM widens scalar loads within those 16-byte
    # granules (s_load_dwordx4 at offset 24 of a 36-byte segment): pad the allocation to match.
    karg = alloc(max(-(-len(args) // 16) * 16, 16), f"kernargs of {name}")
    try:
        heap.write(karg, args)
        packet = alloc(64, "dispatch packet")
    except BaseException:
        free(karg)
        raise
    try:
        heap.write(packet, struct.pack("<HHHHHHIIIIIQQQQ", 0, len([d for d in g if d > 1]) or 1,
                                       b[0], b[1], b[2], 0, g[0] * b[0], g[1] * b[1], g[2] * b[2],
                                       bk.image.kd.private_segment_size, lds_total, 0, karg, 0, 0))
    except BaseException:
        free(karg)
        free(packet)
        raise
    return karg, packet, Regions(heap, regions)


def dispatch(bk: BoundKernel, meta: dict, heap: Heap, grid, block, kernargs: bytes, dynamic_lds: int,
             alloc: Callable[[int, str], int], free: Callable[[int], None],
             rng: np.random.Generator | None = None, tensors: Sequence[TensorArg] | None = None,
             lockstep_ok: bool = False, workers: int = 1) -> dict:
    """Run one launch of `bk` over `heap` the way the runtime would: check the launch, write the
    kernarg segment (hidden arguments filled in, pointer arguments tagged with their regions from
    `tensors` or their allocations, see `tag_pointers`) and a dispatch packet into memory from
    `alloc`, run every workgroup (in a random order drawn from `rng` when given), free both.
    Returns the launch's statistics.

    A memory fault stops the launch. With `rng`, the workgroups before the faulting one in launch
    order (x fastest) that have not run yet then run in that order, and the first of them to fault
    is reported instead: the same fault an in-order run reports (for kernels whose workgroups do
    not depend on each other's order). `workers`: see EmulatorDevice."""
    g, b = launch_dims(grid, block)
    karg, packet, mem = write_launch(bk, meta, heap, g, b, kernargs, dynamic_lds, alloc, free, tensors)
    t0 = time.perf_counter()
    count = 0
    longest = 0  # the most wave-instructions one workgroup ran
    processes = 1  # that ran the launch (lockstep_workers.py)
    loaded, unique = heap.loaded_bytes, heap.unique_loaded_bytes
    try:
        # inf - inf and friends are ordinary IEEE results on the GPU: no numpy warnings.
        with np.errstate(all="ignore"):
            order = [(x, y, z) for z in range(g[2]) for y in range(g[1]) for x in range(g[0])]
            path = "ordinary"
            if rng is None and lockstep_ok:
                path = _try_lockstep(bk, heap, order, g, b, karg, packet, dynamic_lds, mem, workers)
                if isinstance(path, tuple):
                    (counts, processes), order = path, []
                    count, longest = sum(counts), max(counts, default=0)
                    path = "lockstep"
            if rng is not None:
                order = [order[i] for i in rng.permutation(len(order))]
            for k, wg in enumerate(order):
                try:
                    n = run_workgroup(bk, heap, wg, g, b, karg, packet, dynamic_lds, rng, mem)
                except MemoryFault as exc:
                    fault = exc
                    if rng is not None:  # the workgroups before it in launch order that have not run yet
                        before = sorted((o for o in order[k + 1:] if _launch_order(o) < _launch_order(wg)),
                                        key=_launch_order)
                        fault = _first_fault(lambda o: run_workgroup(bk, heap, o, g, b, karg, packet, dynamic_lds,
                                                                     rng, mem), before) or exc
                    raise fault from None
                count += n
                longest = max(longest, n)
    finally:
        free(karg)
        free(packet)
    dt = time.perf_counter() - t0
    return {"wave_instructions": count, "seconds": dt, "path": path,
            "wave_instructions_per_s": count / dt if dt > 0 else 0.0,
            "workgroups": g[0] * g[1] * g[2], "max_workgroup_instructions": longest,
            "global_load_bytes": heap.loaded_bytes - loaded,
            "global_load_unique_bytes": heap.unique_loaded_bytes - unique, "processes": processes}
