"""The runtime device interface shared by the HIP device and the emulator.

Buffers are opaque handles carrying a device address (what a kernel argument holds); kernel
arguments are passed as one packed byte string laid out as the kernel's metadata says. A launch
takes the grid in workgroups and the block in work-items, like hipModuleLaunchKernel.
"""

from __future__ import annotations

import hashlib
import os
import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
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
    unloaded: bool = False


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
    destroyed: bool = False


@dataclass(frozen=True)
class TensorArg:
    """What a launch knows about one pointer argument, for devices that check memory accesses
    (the emulator faults on an access outside the tensor a pointer came from; HIP ignores it)."""

    name: str
    offset: int  # of the pointer in the kernarg segment
    addr: int  # the pointer's value: the tensor's first element
    size: int  # bytes from the first element to one past the last (0 for an empty tensor)
    dtype: str = ""  # element type (f32, bf16, ...)
    itemsize: int = 1
    shape: tuple[int, ...] = ()
    buffer: str = ""  # a view inside a larger buffer (a DeviceArray): the buffer's name,
    buffer_offset: int = 0  # the view's first byte in it
    buffer_size: int = 0  # and the buffer's size


Dim3 = tuple[int, int, int]

# Launch limits of the HIP runtime (hipModuleLaunchKernel): workgroups in y and z, work-items per
# workgroup, and work-items along x (the grid's x size in work-items is a 32-bit number).
MAX_GRID_YZ = 65535
MAX_BLOCK_ITEMS = 1024
MAX_GRID_ITEMS_X = 2**32 - 1


def launch_dims_problem(grid: Dim3, block: Dim3) -> str | None:
    """Why HIP would refuse a launch of `grid` workgroups of `block` work-items, or None."""
    if grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
        return f"grid {grid} has more than {MAX_GRID_YZ} workgroups in y or z, which HIP cannot launch"
    items = block[0] * block[1] * block[2]
    if items > MAX_BLOCK_ITEMS:
        return f"block {block} has {items} work-items; a workgroup holds at most {MAX_BLOCK_ITEMS}"
    if grid[0] * block[0] > MAX_GRID_ITEMS_X:
        return f"grid {grid} of block {block} has more than 2**32 - 1 work-items along x"
    return None


def check_size(size: Any, name: str) -> None:
    """An allocation's size: an int >= 0 (a float or bool is a caller's mistake, not a size)."""
    if not isinstance(size, int | np.integer) or isinstance(size, bool) or size < 0:
        raise DeviceError(f"cannot allocate {size!r} bytes for '{name}': expected an int >= 0")


def device_label(device: Any) -> str:
    """A device's name and identity, for errors about two device objects (of one arch they share a name)."""
    return f"device object 0x{id(device):x} ({device.name})"


def check_buffer(device: Device, buf: Any, what: str) -> None:
    """`buf` is a Buffer of `device`: another device's buffer, or anything else, is refused before
    any memory is touched."""
    if not isinstance(buf, Buffer):
        raise DeviceError(f"{what}: expected a Buffer (from alloc), got {type(buf).__name__}")
    if buf.device is not device:
        raise DeviceError(f"{what}: '{buf.name}' is a buffer of {device_label(buf.device)}, not of "
                          f"{device_label(device)}")
    if buf.freed:  # its address may already belong to a newer buffer, which the access would clobber
        raise DeviceError(f"{what}: '{buf.name}' at 0x{buf.addr:x} was freed "
                          f"({'double free' if what == 'free' else 'use after free'})")


def check_stream(device: Device, stream: Any, what: str, default: bool = True) -> None:
    """`stream` is a live Stream of `device`, or None (the default stream) where `default` allows
    it: HIP would crash on a destroyed stream's handle, and order work on another device's stream
    against the wrong queue."""
    if stream is None:
        if not default:
            raise DeviceError(f"{what}: the default stream (None) cannot be destroyed")
        return
    if not isinstance(stream, Stream):
        raise DeviceError(f"{what}: expected a Stream (from create_stream) or None, got {type(stream).__name__}")
    if stream.device is not device:
        raise DeviceError(f"{what}: the stream belongs to {device_label(stream.device)}, not to "
                          f"{device_label(device)}")
    if stream.destroyed:
        raise DeviceError(f"{what}: the stream was destroyed")


def byte_count(value: Any, what: str) -> int:
    """An offset or size as a Python int (numpy integers too: HIP's pointer arithmetic needs one);
    anything else, floats and bools included, is a DeviceError naming it."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise DeviceError(f"{what}: expected an integer byte count, got {value!r}")
    return int(value)


def copy_in_bytes(device: Device, buf: Any, data: Any, offset: Any) -> tuple[bytes, int]:
    """The bytes `copy_in` writes and the offset, checked: a buffer of `device`, bytes or a numpy
    array of numbers, an integer offset, and room for them."""
    check_buffer(device, buf, "copy_in")
    offset = byte_count(offset, "copy_in offset")
    if not isinstance(data, bytes | bytearray | memoryview | np.ndarray) or \
            (isinstance(data, np.ndarray) and data.dtype.hasobject):
        raise DeviceError(f"copy_in: expected bytes or a numpy array of numbers, got "
                          f"{getattr(data, 'dtype', type(data).__name__)}")
    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    if offset < 0 or offset + len(raw) > buf.size:
        raise DeviceError(f"copy of {len(raw)} bytes at offset {offset} overflows '{buf.name}' ({buf.size} bytes)")
    return raw, offset


def copy_out_size(device: Device, buf: Any, size: Any, offset: Any) -> tuple[int, int]:
    """The byte count `copy_out` reads (`None`: to the buffer's end) and the offset, checked: a
    buffer of `device`, integers, and the bytes inside it."""
    check_buffer(device, buf, "copy_out")
    offset = byte_count(offset, "copy_out offset")
    size = buf.size - offset if size is None else byte_count(size, "copy_out size")
    if offset < 0 or size < 0 or offset + size > buf.size:
        raise DeviceError(f"read of {size} bytes at offset {offset} overflows '{buf.name}' ({buf.size} bytes)")
    return size, offset


def fill_size(device: Device, buf: Any, value: Any, offset: Any, size: Any) -> tuple[int, int]:
    """The byte count `fill` sets (`None`: to the buffer's end) and the offset, checked: a live
    buffer of `device`, integers, the bytes inside it, and a byte value."""
    check_buffer(device, buf, "fill")
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or not 0 <= value <= 255:
        raise DeviceError(f"fill of '{buf.name}': value {value!r} is not a byte (an int 0-255)")
    offset = byte_count(offset, "fill offset")
    size = buf.size - offset if size is None else byte_count(size, "fill size")
    if offset < 0 or size < 0 or offset + size > buf.size:
        raise DeviceError(f"fill of {size} bytes at offset {offset} overflows '{buf.name}' ({buf.size} bytes)")
    return size, offset


def check_module(device: Device, module: Any, what: str) -> None:
    """`module` is a loaded Module of `device`."""
    if not isinstance(module, Module):
        raise DeviceError(f"{what}: expected a Module (from load_module), got {type(module).__name__}")
    if module.device is not device:
        raise DeviceError(f"{what}: the module was loaded on {device_label(module.device)}, not on "
                          f"{device_label(device)}")
    if module.unloaded:
        raise DeviceError(f"{what}: the module was unloaded (unload_module, or the device was closed)")


def check_launch(device: Device, kernel: Any, dynamic_lds: Any, stream: Any) -> int:
    """A launch's kernel (of a loaded module of `device`), stream, and dynamic LDS (an int that
    fits beside the kernel's own LDS in the arch's), checked before the runtime sees them; returns
    the dynamic LDS bytes as an int."""
    if not isinstance(kernel, Kernel):
        raise DeviceError(f"launch: expected a Kernel (from kernel or get_kernel), got {type(kernel).__name__}")
    check_module(device, kernel.module, f"launch of '{kernel.name}'")
    check_stream(device, stream, f"launch of '{kernel.name}'")
    lds = byte_count(dynamic_lds, f"launch of '{kernel.name}': dynamic_lds")
    fixed = int(kernel.meta.get(".group_segment_fixed_size", 0))
    if lds < 0 or fixed + lds > device.arch.lds_bytes:
        raise DeviceError(f"launch of '{kernel.name}': dynamic_lds = {lds} bytes beside its own {fixed} does not fit "
                          f"the {device.arch.lds_bytes} bytes of LDS of {device.arch.name}")
    return lds


def _dim3(x: int | tuple[int, ...], what: str) -> Dim3:
    t = (x,) if isinstance(x, int | np.integer) else tuple(x) if isinstance(x, tuple | list) else None
    if t is None or not 1 <= len(t) <= 3 or \
            any(isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1 for v in t):
        raise DeviceError(f"{what} must be 1 to 3 positive integers, got {x!r}")
    return tuple(int(v) for v in t) + (1,) * (3 - len(t))  # type: ignore[return-value]


def launch_dims(grid: int | tuple[int, ...], block: int | tuple[int, ...]) -> tuple[Dim3, Dim3]:
    """Grid and block as (x, y, z), checked against the launch limits every device shares."""
    g, b = _dim3(grid, "grid"), _dim3(block, "block")
    problem = launch_dims_problem(g, b)
    if problem:
        raise DeviceError(problem)
    return g, b


class Device(ABC):
    """One GPU (real or emulated).

    A device keeps the code objects it has loaded (`kernel` loads each once) until `close`, which
    unloads them; a device is also a context manager that closes on exit."""

    arch: Arch
    name: str = "device"
    _modules: dict[bytes, Module]
    _kernels: dict[tuple[bytes, str], Kernel]

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

    def fill(self, buf: Buffer, value: int = 0, offset: int = 0, size: int | None = None) -> None:
        """Set `size` bytes of `buf` from `offset` (default: all of it) to `value` (0-255)."""
        size, offset = fill_size(self, buf, value, offset, size)
        self.copy_in(buf, bytes([int(value)]) * size, offset)

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
        check_module(self, module, "get_kernel")
        if name not in module.kernels:
            raise DeviceError(f"code object has no kernel '{name}' (it has: {', '.join(sorted(module.kernels))})")
        return self._get_kernel(module, name)

    @abstractmethod
    def _get_kernel(self, module: Module, name: str) -> Kernel: ...

    @abstractmethod
    def unload_module(self, module: Module) -> None:
        """Release a module from `load_module` (its kernels may not be launched afterwards)."""

    def kernel(self, code_object: bytes, name: str) -> Kernel:
        """Kernel `name` of `code_object`, loading the code object on first use only."""
        if not hasattr(self, "_modules"):
            self._modules, self._kernels = {}, {}
        digest = hashlib.sha256(code_object).digest()
        found = self._kernels.get((digest, name))
        if found is None:
            module = self._modules.get(digest)
            if module is None:
                module = self._modules[digest] = self.load_module(code_object)
            found = self._kernels[(digest, name)] = self.get_kernel(module, name)
        return found

    def loaded_modules(self) -> int:
        """How many code objects `kernel` holds loaded."""
        return len(getattr(self, "_modules", {}))

    def close(self) -> None:
        """Unload every code object `kernel` loaded (buffers stay the caller's to free)."""
        modules = list(getattr(self, "_modules", {}).values())
        self._modules, self._kernels = {}, {}
        for module in modules:
            self.unload_module(module)

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def launch(self, kernel: Kernel, grid: int | tuple[int, ...], block: int | tuple[int, ...],
               kernargs: bytes, dynamic_lds: int = 0, stream: Stream | None = None,
               tensors: Sequence[TensorArg] | None = None) -> None:
        """Launch `grid` workgroups (x, y, z) of `block` work-items with packed `kernargs`.
        `tensors` describes pointer arguments for devices that check accesses (the emulator);
        other devices ignore it."""

    # -- ordering -------------------------------------------------------------------------
    def create_stream(self) -> Stream:
        return Stream(self)

    def destroy_stream(self, stream: Stream) -> None:
        check_stream(self, stream, "destroy_stream", default=False)
        self.synchronize(stream)
        stream.destroyed = True

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
    """The first visible AMD GPU of `arch` (any arch when None) through HIP; where no AMD GPU is
    visible, the emulator for `arch` (required then). A visible GPU of another arch is an error,
    not a silent switch to the emulator: pass an `EmulatorDevice` to emulate on such a machine."""
    want = arch.name if isinstance(arch, Arch) else arch
    if gpu_visible():
        from tiledsl.backends.rocm.runtime.hip_device import HipDevice, device_count

        found = []
        for ordinal in range(device_count()):
            try:
                dev = HipDevice(ordinal)
            except DeviceError as exc:  # a GPU tiledsl does not target
                found.append(f"{ordinal}: {exc}")
                continue
            if want is None or want == dev.arch.name:
                return dev
            found.append(f"{ordinal}: {dev.name}")
        if want is None:
            raise DeviceError(f"no visible AMD GPU is one tiledsl targets ({'; '.join(found)})")
        raise DeviceError(f"no visible AMD GPU is a {want} (found {'; '.join(found)}); to run {want} code on "
                          f"the emulator instead, pass device=EmulatorDevice('{want}')")
    if arch is None:
        raise DeviceError("no AMD GPU is visible: name the arch to emulate, e.g. default_device('gfx942')")
    from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

    return EmulatorDevice(arch if isinstance(arch, Arch) else get_arch(arch))


DEVICE_FORMS = "a Device, 'emulator', 'emulator:ARCH' (e.g. 'emulator:gfx942'), 'hip' or 'hip:N'"
_named_emulators: dict[str, Device] = {}


def device_from(spec: Any, arch: str | None = None) -> Device:
    """The device a `device=` argument names: a Device as it is; "emulator" (for `arch`) or
    "emulator:ARCH" (one EmulatorDevice per arch and process, so its buffers and workspace
    outlive a call); "hip" (the first visible GPU of `arch`, or any) or "hip:N" (ordinal N).
    Anything else is a ValueError naming `device` and the accepted forms."""
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"device: expected {DEVICE_FORMS}, got {type(spec).__name__} {spec!r}")
    kind, _, rest = spec.strip().partition(":")
    if kind == "emulator":
        name = rest or arch
        if not name:
            raise ValueError("device: 'emulator' needs an arch: pass arch=... or device='emulator:gfx942'")
        try:
            row = get_arch(name)
        except TileError as exc:
            raise ValueError(f"device: {exc}") from None
        if arch is not None and rest and get_arch(arch).name != row.name:
            raise ValueError(f"device: {spec!r} emulates {row.name}, but arch is {arch}")
        if row.name not in _named_emulators:
            from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

            _named_emulators[row.name] = EmulatorDevice(row)
        return _named_emulators[row.name]
    if kind == "hip":
        if not rest:
            if not gpu_visible():
                raise ValueError("device: 'hip' needs a visible AMD GPU (ROCm's libamdhip64 and /dev/kfd), and "
                                 "this machine has none; use device='emulator:ARCH'")
            return default_device(arch)
        if not rest.isdigit():
            raise ValueError(f"device: expected 'hip:N' with a GPU ordinal N, got {spec!r}")
        from tiledsl.backends.rocm.runtime.hip_device import HipDevice

        try:
            dev = HipDevice(int(rest))
        except DeviceError as exc:  # no such ordinal, no runtime: the spec is what is wrong here
            raise ValueError(f"device: {spec!r}: {exc}") from None
        if arch is not None and get_arch(arch).name != dev.arch.name:
            raise ValueError(f"device: {spec!r} is a {dev.arch.name} GPU, but arch is {arch}")
        return dev
    raise ValueError(f"device: expected {DEVICE_FORMS}, got {spec!r}")
