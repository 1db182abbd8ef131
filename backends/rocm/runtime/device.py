"""The runtime device interface shared by the HIP device and the emulator.

Buffers are opaque handles carrying a device address (what a kernel argument holds); kernel
arguments are passed as one packed byte string laid out as the kernel's metadata says. A launch
takes the grid in workgroups and the block in work-items, like hipModuleLaunchKernel.
"""

from __future__ import annotations

import os
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tiledsl.backends.rocm.arch import Arch, get_arch
from tiledsl.errors import TileError


class DeviceError(TileError):
    """A runtime failure (allocation, copy, module load, launch)."""


@dataclass(eq=False)
class Buffer:
    device: Device
    addr: int  # device address: pack it into kernel arguments as a 64-bit pointer
    size: int
    name: str = "buffer"
    handle: Any = None  # implementation detail (e.g. the HIP pointer object)
    freed: bool = False

    def __int__(self) -> int:
        return self.addr


@dataclass(eq=False)
class Module:
    device: Device
    kernels: dict[str, dict]  # name -> AMDHSA metadata of the kernel
    handle: Any = None


@dataclass(eq=False)
class Kernel:
    module: Module
    name: str
    meta: dict
    handle: Any = None

    @property
    def kernarg_size(self) -> int:
        return int(self.meta.get(".kernarg_segment_size", 0))


@dataclass(eq=False)
class Stream:
    device: Device
    handle: Any = None
    pending: list = field(default_factory=list)


Dim3 = tuple[int, int, int]


def _dim3(x: int | tuple[int, ...], what: str) -> Dim3:
    t = (x,) if isinstance(x, int) else tuple(x)
    if not 1 <= len(t) <= 3 or any(int(v) < 1 for v in t):
        raise DeviceError(f"{what} must be 1 to 3 positive integers, got {x!r}")
    return tuple(int(v) for v in t) + (1,) * (3 - len(t))  # type: ignore[return-value]


class Device(ABC):
    """One GPU (real or emulated)."""

    arch: Arch
    name: str = "device"

    # -- memory ---------------------------------------------------------------------------
    @abstractmethod
    def alloc(self, size: int, name: str = "buffer") -> Buffer: ...

    @abstractmethod
    def free(self, buf: Buffer) -> None: ...

    @abstractmethod
    def copy_in(self, buf: Buffer, data: bytes | np.ndarray, offset: int = 0) -> None:
        """Host -> device."""

    @abstractmethod
    def copy_out(self, buf: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        """Device -> host."""

    def to_device(self, array: np.ndarray, name: str = "buffer") -> Buffer:
        arr = np.ascontiguousarray(array)
        buf = self.alloc(arr.nbytes, name)
        self.copy_in(buf, arr)
        return buf

    def from_device(self, buf: Buffer, dtype: Any, shape: tuple[int, ...] | int) -> np.ndarray:
        dt = np.dtype(dtype)
        n = int(np.prod(shape))
        return np.frombuffer(self.copy_out(buf, n * dt.itemsize), dtype=dt).reshape(shape).copy()

    # -- code -----------------------------------------------------------------------------
    @abstractmethod
    def load_module(self, code_object: bytes) -> Module: ...

    def get_kernel(self, module: Module, name: str) -> Kernel:
        if name not in module.kernels:
            raise DeviceError(f"code object has no kernel '{name}' (it has: {', '.join(sorted(module.kernels))})")
        return self._get_kernel(module, name)

    @abstractmethod
    def _get_kernel(self, module: Module, name: str) -> Kernel: ...

    @abstractmethod
    def launch(self, kernel: Kernel, grid: int | tuple[int, ...], block: int | tuple[int, ...],
               kernargs: bytes, dynamic_lds: int = 0, stream: Stream | None = None) -> None:
        """Launch `grid` workgroups (x, y, z) of `block` work-items with packed `kernargs`."""

    # -- ordering -------------------------------------------------------------------------
    def create_stream(self) -> Stream:
        return Stream(self)

    def destroy_stream(self, stream: Stream) -> None:
        self.synchronize(stream)

    @abstractmethod
    def synchronize(self, stream: Stream | None = None) -> None: ...


def complete_kernargs(meta: dict, kernargs: bytes, grid: Dim3, block: Dim3, dynamic_lds: int) -> bytes:
    """Pad `kernargs` to the kernel's kernarg size and fill the hidden arguments (code object v5:
    block counts, group sizes, grid dims, dynamic LDS size) the way the HIP runtime does."""
    size = int(meta.get(".kernarg_segment_size", len(kernargs)))
    if len(kernargs) > size and size:
        raise DeviceError(f"kernel '{meta.get('.name')}' takes {size} bytes of arguments, got {len(kernargs)}")
    buf = bytearray(kernargs) + bytearray(max(0, size - len(kernargs)))
    dims = 3 if grid[2] > 1 or block[2] > 1 else 2 if grid[1] > 1 or block[1] > 1 else 1
    values = {
        "hidden_block_count_x": ("<I", grid[0]), "hidden_block_count_y": ("<I", grid[1]),
        "hidden_block_count_z": ("<I", grid[2]), "hidden_group_size_x": ("<H", block[0]),
        "hidden_group_size_y": ("<H", block[1]), "hidden_group_size_z": ("<H", block[2]),
        "hidden_remainder_x": ("<H", 0), "hidden_remainder_y": ("<H", 0), "hidden_remainder_z": ("<H", 0),
        "hidden_grid_dims": ("<H", dims), "hidden_dynamic_lds_size": ("<I", dynamic_lds),
    }
    for arg in meta.get(".args", []):
        kind = arg.get(".value_kind", "")
        off = int(arg.get(".offset", 0))
        if off < len(kernargs):
            continue  # the caller supplied it
        if kind in values:
            fmt, v = values[kind]
            struct.pack_into(fmt, buf, off, v)
    return bytes(buf)


def gpu_visible() -> bool:
    """True when a ROCm GPU is visible: /dev/kfd exists and hip-python can see a device."""
    if not os.path.exists("/dev/kfd"):
        return False
    try:
        from hip import hip  # noqa: F401
    except Exception:
        return False
    try:
        from tiledsl.backends.rocm.runtime.hip_device import device_count

        return device_count() > 0
    except Exception:
        return False


def default_device(arch: str | Arch | None = None) -> Device:
    """HIP when an AMD GPU is visible, otherwise the emulator for `arch` (required then)."""
    if gpu_visible():
        from tiledsl.backends.rocm.runtime.hip_device import HipDevice

        dev = HipDevice()
        want = arch.name if isinstance(arch, Arch) else arch
        if want is None or want == dev.arch.name:
            return dev
    if arch is None:
        raise DeviceError("no AMD GPU is visible: name the arch to emulate, e.g. default_device('gfx942')")
    from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

    return EmulatorDevice(arch if isinstance(arch, Arch) else get_arch(arch))
