"""The HIP test double: a stand-in libamdhip64.so whose launches run on the emulator.

No machine of this project has an AMD GPU, yet the HIP path must run through hip-python's real
bindings. `build` compiles tests/hipstub/libamdhip64.c (a C file exporting the HIP functions
tiledsl calls, with their real signatures) with the C compiler ziglang ships; pointing ROCM_PATH
at its directory makes hip-python load it. `HipStub` then gives it one device per arch and
registers the launch callback that runs each kernel's real code object on the emulator, over the
stand-in's own memory arena, with every access checked against the stand-in's live allocations:
an access through a pointer argument against the allocation that pointer lies in (HIP passes no
tensor extents; `emulator_device.tag_pointers`), so an overrun never reads the buffer next to it.
On a machine with an AMD GPU none of this is used: the HIP tests run against the real library.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tiledsl.backends.rocm import elf
from tiledsl.backends.rocm.arch import get_arch
from tiledsl.backends.rocm.emulator.executor import bind
from tiledsl.backends.rocm.emulator.loader import load_code_object
from tiledsl.backends.rocm.emulator.memory import Heap, MemoryFault
from tiledsl.backends.rocm.runtime.emulator_device import dispatch

SOURCE = Path(__file__).parent / "hipstub" / "libamdhip64.c"

# The products the stand-in's devices report (gcnArchName, name, compute units).
DEVICES = {
    "gfx90a": ("gfx90a:sramecc+:xnack-", 110), "gfx942": ("gfx942:sramecc+:xnack-", 304),
    "gfx950": ("gfx950:sramecc+:xnack-", 256), "gfx1100": ("gfx1100", 96), "gfx1201": ("gfx1201", 64),
}

# hipError_t values the callback returns (hip_runtime_api.h).
HIP_ERROR_INVALID_VALUE, HIP_ERROR_ILLEGAL_ADDRESS, HIP_ERROR_LAUNCH_FAILURE = 1, 700, 719

_LAUNCH_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64,
                              ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint), ctypes.c_uint, ctypes.c_void_p,
                              ctypes.c_size_t)


def build(cache_dir: Path) -> Path:
    """Compile the stand-in (once per source version) and return the ROCM_PATH-style directory
    holding lib/libamdhip64.so. Safe when several test workers build at once."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    root = cache_dir / digest
    lib = root / "lib" / "libamdhip64.so"
    if not lib.exists():
        lib.parent.mkdir(parents=True, exist_ok=True)
        tmp = lib.with_name(f"libamdhip64.so.{os.getpid()}")
        subprocess.run([sys.executable, "-m", "ziglang", "cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror",
                        str(SOURCE), "-o", str(tmp)], check=True, capture_output=True, text=True)
        os.replace(tmp, lib)
    return root


class HipStub:
    """The loaded stand-in: configures its devices, runs its launches, reads its counters."""

    def __init__(self, lib_path: Path, archs: list[str]) -> None:
        lib = self.lib = ctypes.CDLL(str(lib_path))  # the same handle hip-python gets: shared state
        lib.tdstub_arena_base.restype = lib.tdstub_arena_size.restype = ctypes.c_uint64
        lib.tdstub_sizeof_props.restype = ctypes.c_size_t
        lib.tdstub_count.restype = ctypes.c_long
        lib.tdstub_message.restype = ctypes.c_char_p
        lib.tdstub_runtime_alloc.restype = ctypes.c_uint64
        lib.tdstub_runtime_alloc.argtypes = [ctypes.c_int, ctypes.c_uint64]
        lib.tdstub_runtime_free.argtypes = [ctypes.c_uint64]
        lib.tdstub_allocation_device.argtypes = [ctypes.c_uint64]
        lib.tdstub_allocations.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64), ctypes.c_int]
        self.archs = [get_arch(a) for a in archs]
        for arch in self.archs:
            gcn, cus = DEVICES[arch.name]
            lib.tdstub_add_device(gcn.encode(), f"tiledsl HIP stand-in ({arch.product})".encode(), arch.wave_size,
                                  arch.lds_bytes, cus, elf.MACH_BY_ARCH[arch.name])
        self.lib_path = Path(lib_path)
        self._heap: Heap | None = None
        self._bound: dict = {}
        self.last_error: Exception | None = None
        self._callback = _LAUNCH_FN(self._on_launch)  # kept alive as long as the stand-in
        lib.tdstub_set_launch_callback(self._callback)

    # -- what tests read ------------------------------------------------------------------
    def ordinal(self, arch: str) -> int:
        return [a.name for a in self.archs].index(arch)

    def count(self, what: str) -> int:
        n = self.lib.tdstub_count(what.encode())
        if n < 0:
            raise KeyError(what)
        return n

    def launch_devices(self) -> list[int]:
        out = (ctypes.c_int * 4096)()
        n = self.lib.tdstub_launch_devices(out, 4096)
        return list(out[:min(n, 4096)])

    def allocation_device(self, addr: int) -> int:
        return self.lib.tdstub_allocation_device(addr)

    # -- launches -------------------------------------------------------------------------
    def _heap_for(self, device: int) -> Heap:
        """The emulator's view of the arena, with `device`'s live allocations (and only those:
        a kernel touching another GPU's memory faults, as it would without peer access)."""
        if self._heap is None:
            base = self.lib.tdstub_arena_base()
            raw = (ctypes.c_uint8 * self.lib.tdstub_arena_size()).from_address(base)
            self._heap = Heap.over(np.frombuffer(raw, np.uint8), base)
        n = self.lib.tdstub_allocations(device, None, 0)
        pairs = (ctypes.c_uint64 * (2 * n))()
        self.lib.tdstub_allocations(device, pairs, n)
        self._heap.adopt([(pairs[2 * i], pairs[2 * i + 1], f"allocation {i} of device {device}") for i in range(n)])
        return self._heap

    def _on_launch(self, device, image, image_size, code_base, name, dims, shared_mem, args, args_size) -> int:
        try:
            self._launch(device, ctypes.string_at(image, image_size), code_base, name.decode(), list(dims[0:6]),
                         shared_mem, ctypes.string_at(args, args_size) if args_size else b"")
            return 0
        except MemoryFault as exc:
            return self._fail(exc, HIP_ERROR_ILLEGAL_ADDRESS)
        except ValueError as exc:
            return self._fail(exc, HIP_ERROR_INVALID_VALUE)
        except Exception as exc:  # anything else is a failed launch, reported through HIP
            return self._fail(exc, HIP_ERROR_LAUNCH_FAILURE)

    def _fail(self, exc: Exception, code: int) -> int:
        self.last_error = exc
        self.lib.tdstub_set_message(f"{type(exc).__name__}: {exc}".encode())
        return code

    def _launch(self, device: int, blob: bytes, code_base: int, name: str, dims: list[int], shared_mem: int,
                args: bytes) -> None:
        key = (hashlib.sha256(blob).digest(), code_base, name)
        bk = self._bound.get(key)
        if bk is None:
            bk = self._bound[key] = bind(load_code_object(blob, self.archs[device])[name], code_base)
        meta = bk.image.meta
        if len(args) > bk.image.kernarg_size:
            raise ValueError(f"{len(args)} bytes of kernel arguments for a {bk.image.kernarg_size}-byte segment")
        # The runtime writes the hidden arguments itself, whatever the caller put there.
        hidden = [a[".offset"] for a in meta.get(".args", []) if a.get(".value_kind", "").startswith("hidden_")]
        explicit = args[:min(hidden)] if hidden else args

        def alloc(size: int, what: str) -> int:
            addr = self.lib.tdstub_runtime_alloc(device, size)
            if not addr:
                raise MemoryError(f"the stand-in's arena has no room for {what}")
            self._heap_for(device)
            return addr

        dispatch(bk, meta, self._heap_for(device), tuple(dims[:3]), tuple(dims[3:]), explicit, shared_mem, alloc,
                 self.lib.tdstub_runtime_free)
