"""Device memory of the emulator, and the sanitizer that checks every access against it.

Global memory is one growable byte heap; each allocation is a range of it with a device address
``heap.base + offset`` (``HEAP_BASE`` for the emulator's own heaps; a heap can also lie over
memory someone else owns and allocates, as the HIP test double does with its arena). Addresses
are therefore plain integers the kernel can do arithmetic on. The emulator's own allocations are
separated by at least ``GUARD`` bytes that are never handed out.

Provenance. For one launch, each pointer kernel argument is a `Region`: the extent of the tensor
(or view) it points at, as the launcher knows it, else the allocation the pointer lies in. The
pointer the kernel receives carries the region's tag in bits 48 and up (`TAG_SHIFT`) -- device
addresses are below 2**47 -- so every address the kernel derives from it by arithmetic names the
argument it came from, whether it is formed in SGPRs or VGPRs. An access through a tagged address
must lie entirely inside its own region: `x[i + 64]` on a 64-element x faults as "past the end of
x" even when the next tensor sits right behind it, and so does a read in an allocation's padding
or outside a view but inside its buffer. An untagged address (from no pointer argument: the
kernarg segment, code, pointers read from memory or rebuilt in a 48-bit buffer descriptor) must
lie inside one live allocation. Real hardware would silently read a neighbour's data; the
emulator names the culprit instead.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from tiledsl.errors import TileError

HEAP_BASE = 0x7F00_0000_0000  # looks like a device pointer, far from 0 so null derefs are caught
ALIGN = 256
GUARD = 256  # bytes after every allocation (past its rounding up to ALIGN) that are never handed out
TAG_SHIFT = 48  # a pointer argument's region tag lives in address bits 48..62
ADDR_MASK = (1 << TAG_SHIFT) - 1
MAX_TAGS = (1 << (63 - TAG_SHIFT)) - 1


class EmulatorError(TileError):
    """Base class of the emulator's errors."""


class UnsupportedInstruction(EmulatorError):
    """An instruction the emulator does not implement (or cannot decode) on this arch."""


class MemoryFault(EmulatorError):
    """A global, scratch or LDS access outside what the runtime allocated."""


@dataclass
class Allocation:
    addr: int
    size: int
    name: str


class Heap:
    """The global memory of one emulated device."""

    def __init__(self, capacity: int = 1 << 20, data: np.ndarray | None = None, base: int = HEAP_BASE) -> None:
        self.data = np.zeros(capacity, dtype=np.uint8) if data is None else data
        self.base = base
        self.loaded_bytes = 0  # bytes read by vector memory loads, lane by lane, for traffic figures
        # The same, counting each wave instruction's distinct addresses once: a GPU's coalescer
        # serves the lanes that read one address with one request (a key's page-table entry
        # read by every lane of its row).
        self.unique_loaded_bytes = 0
        self.external = data is not None  # memory and allocations belong to someone else (see `adopt`)
        self.top = 0
        self._starts: list[int] = []  # sorted allocation start addresses
        self._allocs: dict[int, Allocation] = {}
        self._free: list[tuple[int, int]] = []  # (offset, size) holes reusable by alloc
        self.windows: dict[int, np.ndarray] = {}  # byte windows of `data` (see `window`); reset on growth
        self._last = (0, 0)  # heap offsets [lo, end) of the allocation that `span` last matched

    # -- allocation -------------------------------------------------------------------------
    @classmethod
    def over(cls, data: np.ndarray, base: int) -> Heap:
        """A heap over external uint8 memory at device address `base`; its owner allocates and
        tells the heap which ranges are live with `adopt`."""
        return cls(data=data, base=base)

    def adopt(self, allocations: list[tuple[int, int, str]]) -> None:
        """Replace the live allocations (addr, size, name) of an external heap."""
        if not self.external:
            raise EmulatorError("adopt() is for heaps over external memory; this heap allocates itself")
        self._allocs = {a: Allocation(a, s, n) for a, s, n in allocations}
        self._starts = sorted(self._allocs)
        self._last = (0, 0)

    def clone(self) -> Heap:
        """An independent copy of the memory in use and of the allocations (the timing model runs
        sampled workgroups on one, leaving this heap as it was)."""
        used = self.data.size if self.external else self.top
        other = Heap(max(used, 16), base=self.base)
        other.data[:used] = self.data[:used]
        other.top = used
        other._starts, other._allocs, other._free = list(self._starts), dict(self._allocs), list(self._free)
        return other

    def alloc(self, size: int, name: str = "buffer") -> int:
        if self.external:
            raise EmulatorError("this heap lies over external memory; its owner allocates")
        size = max(int(size), 1)
        padded = _padded(size)
        off = None
        for i, (hoff, hsize) in enumerate(self._free):
            if hsize >= padded:
                off = hoff
                if hsize == padded:
                    self._free.pop(i)
                else:
                    self._free[i] = (hoff + padded, hsize - padded)
                break
        if off is None:
            off = self.top
            if off + padded > self.data.size:  # grown first: a failed growth leaves the heap as it was
                grown = np.zeros(max(off + padded, self.data.size * 2), dtype=np.uint8)
                grown[:self.data.size] = self.data
                self.data = grown
                self.windows = {}
            self.top = off + padded
        self.data[off:off + padded] = 0
        addr = self.base + off
        bisect.insort(self._starts, addr)
        self._allocs[addr] = Allocation(addr, size, name)
        return addr

    def free(self, addr: int) -> None:
        if self.external:
            raise EmulatorError("this heap lies over external memory; its owner frees")
        a = self._allocs.pop(addr, None)
        if a is None:
            raise EmulatorError(f"free of 0x{addr:x}, which is not a live allocation")
        self._starts.remove(addr)
        self._last = (0, 0)
        self._free.append((addr - self.base, _padded(a.size)))

    def find(self, addr: int) -> Allocation | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return None
        a = self._allocs[self._starts[i]]
        return a if addr < a.addr + a.size else None

    # -- host copies ------------------------------------------------------------------------
    def write(self, addr: int, data: bytes | np.ndarray) -> None:
        raw = np.frombuffer(bytes(data) if not isinstance(data, np.ndarray) else data.tobytes(), np.uint8)
        self.check_range(addr, raw.size, "host write")
        off = addr - self.base
        self.data[off:off + raw.size] = raw

    def read(self, addr: int, size: int) -> bytes:
        self.check_range(addr, size, "host read")
        off = addr - self.base
        return self.data[off:off + size].tobytes()

    def check_range(self, addr: int, size: int, what: str) -> None:
        a = self.find(addr)
        if a is None or addr + size > a.addr + a.size:
            raise MemoryFault(f"{what} of {size} bytes at 0x{addr:x} is outside every allocation"
                              + self.describe(addr))

    def describe(self, addr: int) -> str:
        """A hint naming the nearest allocation, for error messages."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return ""
        a = self._allocs[self._starts[i]]
        return f" (nearest: '{a.name}' at 0x{a.addr:x}, {a.size} bytes; offset {addr - a.addr})"

    # -- lane-vectorised access --------------------------------------------------------------
    def span(self, lo: int, end: int) -> bool:
        """True when heap offsets [lo, end) lie inside one live allocation: the common case of a
        lane-vector access, checked from the lanes' min and max (callers fall back to the per-lane
        check, and its error messages, otherwise)."""
        last = self._last
        if last[0] <= lo and end <= last[1]:
            return True
        base = self.base
        a = self.find(base + lo)
        if a is None or base + end > a.addr + a.size:
            return False
        self._last = (a.addr - base, a.addr - base + a.size)
        return True

    def bad_lanes(self, addrs: np.ndarray, nbytes: int) -> np.ndarray:
        """Boolean mask of the lanes whose [addr, addr+nbytes) is not inside one allocation."""
        if addrs.size == 0:
            return np.zeros(0, dtype=bool)
        lo, hi = int(addrs.min()), int(addrs.max())
        a = self.find(lo)
        if a is not None and hi + nbytes <= a.addr + a.size:
            return np.zeros(addrs.size, dtype=bool)  # the common case: one buffer
        starts = np.array(self._starts, dtype=np.uint64)
        ends = np.array([self._allocs[s].addr + self._allocs[s].size for s in self._starts], dtype=np.uint64)
        if starts.size == 0:
            return np.ones(addrs.size, dtype=bool)
        idx = np.searchsorted(starts, addrs, side="right").astype(np.int64) - 1
        ok = idx >= 0
        idxc = np.clip(idx, 0, None)
        ok &= addrs + np.uint64(nbytes) <= ends[idxc]
        return ~ok

    def count_load(self, off: np.ndarray, nbytes: int) -> None:
        """Add one wave instruction's load (lane offsets `off`, `nbytes` each) to the traffic counts."""
        self.loaded_bytes += off.size * nbytes
        self.unique_loaded_bytes += np.unique(off).size * nbytes

    def gather(self, addrs: np.ndarray, nbytes: int) -> np.ndarray:
        """Bytes [lanes, nbytes] at the (already checked) addresses."""
        off = (addrs - np.uint64(self.base)).astype(np.int64)
        self.count_load(off, nbytes)
        if nbytes % 4 == 0 and not (off & 3).any():
            words = self.data.view(np.uint32)
            idx = (off >> 2)[:, None] + np.arange(nbytes // 4)
            return words[idx].view(np.uint8).reshape(off.size, nbytes)
        return self.data[off[:, None] + np.arange(nbytes)]

    def scatter(self, addrs: np.ndarray, raw: np.ndarray) -> None:
        """Store raw bytes [lanes, nbytes]; lanes are applied in order (highest lane wins)."""
        off = (addrs - np.uint64(self.base)).astype(np.int64)
        nbytes = raw.shape[1]
        if nbytes % 4 == 0 and not (off & 3).any():
            words = self.data.view(np.uint32)
            idx = (off >> 2)[:, None] + np.arange(nbytes // 4)
            words[idx] = np.ascontiguousarray(raw).view(np.uint32).reshape(idx.shape)
        else:
            self.data[off[:, None] + np.arange(nbytes)] = raw


@dataclass
class Region:
    """What one pointer argument of a launch may touch: the bytes its tensor (or view) spans, from
    the launcher; or, when the launch did not say (a raw launch, the HIP stand-in), the whole
    allocation the pointer lies in (dtype "" then: offsets are reported in bytes)."""

    name: str
    addr: int  # device address of its first byte
    size: int  # bytes
    dtype: str = ""  # element type (f32, bf16, ...)
    itemsize: int = 1
    shape: tuple[int, ...] = ()
    buffer: str = ""  # a view inside a larger buffer: that buffer's name (the allocation's when no dtype),
    buffer_offset: int = 0  # the view's first byte in it
    buffer_size: int = 0  # and the buffer's size in bytes
    tag: int = 0  # set by Regions

    def access(self, off: int, nbytes: int) -> str:
        """The elements (or bytes) [off, off + nbytes) of the region, e.g. x[64..67]."""
        if not self.dtype:
            return f"bytes {off}..{off + nbytes - 1} of {self.name}"
        e0, e1 = off // self.itemsize, (off + nbytes - 1) // self.itemsize
        return f"{self.name}[{e0}]" if e0 == e1 else f"{self.name}[{e0}..{e1}]"

    def extent(self) -> str:
        if not self.dtype:  # an allocation-level region: `buffer` names the allocation
            return f"{self.size}-byte allocation" + (f" '{self.buffer}'" if self.buffer not in ("", self.name) else "")
        else:
            n = self.size // self.itemsize
            out = f"{n} element{'s' if n != 1 else ''}, {self.dtype}"
            if len(self.shape) > 1:
                out = f"shape {tuple(self.shape)} spanning {out}"
        if self.buffer:
            out += f"; a view at byte {self.buffer_offset} of buffer '{self.buffer}' ({self.buffer_size} bytes)"
        return out

    def problem(self, off: int, nbytes: int) -> str:
        where = ("before the start of" if off < 0 else "past the end of" if off >= self.size
                 else "runs past the end of")
        return f"{where} {self.name} ({self.extent()})"


_VERBS = {"load": "reads", "store": "writes", "atomic": "updates"}


class Regions:
    """The memory checks of one launch: the regions of its pointer arguments, by tag (tag t is
    `regions[t - 1]`), over the heap's allocations (for untagged addresses).

    Vector accesses check a lane vector from its lowest and highest byte (`match`); each
    instruction caches the region it matched last (vmem._build_global)."""

    def __init__(self, heap: Heap, regions: list[Region] | tuple[Region, ...] = ()) -> None:
        if len(regions) > MAX_TAGS:
            raise EmulatorError(f"{len(regions)} pointer arguments; the emulator tags at most {MAX_TAGS}")
        self.heap = heap
        self.regions = list(regions)
        for t, r in enumerate(self.regions, 1):
            r.tag = t
        base = heap.base
        self._lo = np.array([0] + [r.addr for r in self.regions], dtype=np.uint64)
        self._hi = np.array([0] + [r.addr + r.size for r in self.regions], dtype=np.uint64)
        self._starts: dict[int, int] = {}  # region start address -> tag of the largest region there
        for t, r in sorted(enumerate(self.regions, 1), key=lambda tr: tr[1].size):
            self._starts[r.addr] = t
        self._bounds = [(0, 0, 0)] + [((t << TAG_SHIFT) + r.addr - base, (t << TAG_SHIFT) + r.addr + r.size - base,
                                       t << TAG_SHIFT) for t, r in enumerate(self.regions, 1)]

    def buffer_base(self, base: int) -> int:
        """A buffer descriptor's 48-bit base with the tag of the pointer argument it was made from
        (a descriptor has no room for the tag): the largest region starting exactly at `base`, so
        that its accesses are checked against that tensor; untagged when no region starts there."""
        tag = self._starts.get(base, 0)
        return base + (tag << TAG_SHIFT)

    def match(self, lo: int, end: int) -> tuple[int, int, int] | None:
        """Bounds (lo, end, tag offset) of the region holding heap offsets [lo, end) of one tagged
        address, or of the allocation holding them when untagged; None when there is none (the
        caller then checks lane by lane, and reports the first bad lane)."""
        t = lo >> TAG_SHIFT
        if t == 0:
            heap = self.heap
            return (*heap._last, 0) if heap.span(lo, end) else None
        if 0 < t < len(self._bounds):
            b = self._bounds[t]
            if b[0] <= lo and end <= b[1]:
                return b
        return None

    def check(self, lanes: np.ndarray, addrs: np.ndarray, nbytes: int, what: str) -> np.ndarray:
        """The untagged addresses of the lanes' accesses (uint64 `addrs`, `nbytes` each), after
        checking each against the region its tag names (or the live allocations when untagged);
        a MemoryFault names the lowest bad lane."""
        tags = addrs >> np.uint64(TAG_SHIFT)
        if not tags.any():
            bad = self.heap.bad_lanes(addrs, nbytes)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise self.fault(int(lanes[i]), int(addrs[i]), nbytes, what)
            return addrs
        real = addrs & np.uint64(ADDR_MASK)
        ti = tags.astype(np.int64)
        known = ti < len(self._bounds)
        tc = np.where(known, ti, 0)
        ok = known & (ti > 0) & (real >= self._lo[tc]) & (real + np.uint64(nbytes) <= self._hi[tc])
        untagged = ti == 0
        if untagged.any():
            ok[untagged] = ~self.heap.bad_lanes(real[untagged], nbytes)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise self.fault(int(lanes[i]), int(addrs[i]), nbytes, what)
        return real

    def scalar(self, addr: int, nbytes: int) -> int:
        """The heap offset of a scalar load of `nbytes` at `addr`, checked like a lane's."""
        t = addr >> TAG_SHIFT
        real = addr & ADDR_MASK
        if t == 0:
            a = self.heap.find(addr)
            if a is not None and addr + nbytes <= a.addr + a.size:
                return addr - self.heap.base
        elif t < len(self._bounds):
            r = self.regions[t - 1]
            if r.addr <= real and real + nbytes <= r.addr + r.size:
                return real - self.heap.base
        raise self.fault(None, addr, nbytes, "load", "scalar")

    def fault(self, lane: int | None, addr: int, nbytes: int, what: str, unit: str = "global") -> MemoryFault:
        """The error for `lane`'s access of `nbytes` at (tagged) `addr`."""
        head = f"{unit} {what} of {nbytes} bytes" + (f" by lane {lane}" if lane is not None else "")
        t = addr >> TAG_SHIFT
        if t == 0:
            return MemoryFault(f"{head} at 0x{addr:x} is outside every buffer the runtime allocated"
                               + self.heap.describe(addr))
        if t >= len(self._bounds):
            return MemoryFault(f"{head} at 0x{addr:x} is not a device address (bits {TAG_SHIFT} and up name no "
                               "pointer argument of this launch)")
        r = self.regions[t - 1]
        off = (addr & ADDR_MASK) - r.addr
        return MemoryFault(f"{head} {_VERBS[what]} {r.access(off, nbytes)}: {r.problem(off, nbytes)}")


def _padded(size: int) -> int:
    """Heap bytes an allocation of `size` takes: rounded up to ALIGN, plus the guard gap."""
    return (size + ALIGN - 1) // ALIGN * ALIGN + GUARD


def window(buf: np.ndarray, nbytes: int, cache: dict) -> np.ndarray:
    """A view of the uint8 array `buf` whose element i is the `nbytes` bytes at byte offset i, at
    any alignment, so a lane vector of loads or stores is a single fancy index at byte offsets
    (highest lane last, so it wins overlapping stores). 1/2/4/8 bytes: uint8/16/32/64 elements;
    other multiples of 4: rows of uint32. Cached in `cache` (owned by whoever owns `buf`)."""
    win = cache.get(nbytes)
    if win is None:
        n = max(buf.size - nbytes + 1, 0)
        if nbytes in (1, 2, 4, 8):
            dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[nbytes]
            win = np.ndarray((n,), dt, buffer=buf, strides=(1,)) if n else np.zeros(0, dt)
        else:
            k = nbytes // 4
            win = np.ndarray((n, k), np.uint32, buffer=buf, strides=(1, 4)) if n else np.zeros((0, k), np.uint32)
        cache[nbytes] = win
    return win
