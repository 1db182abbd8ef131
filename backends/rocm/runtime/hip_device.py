"""`Device` on a real AMD GPU through hip-python 10.x (optional extra `hip`: ``pip install tiledsl[hip]``).

hip-python dlopens libamdhip64.so (from ROCm, or whatever ROCM_PATH names) at its first call. Every
HIP call goes through `call`, the one place that turns a HIP status -- or a runtime that cannot be
loaded at all -- into a DeviceError naming the call.

HIP's current device is per thread, so every method makes this device current before it calls
HIP. There is one `HipDevice` object per ordinal (``HipDevice(1) is HipDevice(1)``): the code
objects it loads are cached on it and unloaded by `close`.
"""

from __future__ import annotations

import ctypes
import re
import threading
from typing import Any

import numpy as np

from tiledsl.backends.rocm.arch import ARCHS, get_arch
from tiledsl.backends.rocm.emulator.loader import kernel_metadata
from tiledsl.backends.rocm.emulator.memory import EmulatorError
from tiledsl.backends.rocm.runtime.device import (
    Buffer,
    Device,
    DeviceError,
    Kernel,
    Module,
    Stream,
    check_buffer,
    check_launch,
    check_module,
    check_size,
    check_stream,
    complete_kernargs,
    copy_in_bytes,
    copy_out_size,
    fill_size,
    launch_dims,
)

# hipModuleLaunchKernel `extra` markers (HIP_LAUNCH_PARAM_*), as in hip_runtime_api.h.
_BUFFER_POINTER, _BUFFER_SIZE, _END = 0x01, 0x02, 0x03

HIP_PYTHON_RANGE = ">=10.0,<11"  # the API this module is written against (6.x/7.x differ)


def _hip():
    try:
        from hip import hip
    except Exception as exc:  # ImportError, or OSError from a broken install
        raise DeviceError(f"hip-python is not available ({exc}); `pip install 'tiledsl[hip]'` "
                          f"(hip-python{HIP_PYTHON_RANGE})") from None
    return hip


def _text(value: Any) -> str:
    """A C string from hip-python (CStr, bytes or str) as str."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def call(what: str, fn: Any, *args: Any) -> Any:
    """Call a hip-python function and decode its result `(status, *values)` (or a bare status):
    raise DeviceError on failure, return the values (None, one value, or a tuple)."""
    hip = _hip()
    try:
        result = fn(*args)
    except RuntimeError as exc:  # hip-python could not dlopen/dlsym the HIP runtime
        # hip-python's message quotes bytes reprs ("failed to dlopen 'b'libamdhip64.so''"): show the text.
        detail = re.sub(r"'?b'([^']*)''?", r"'\1'", str(exc))
        raise DeviceError(f"{what}: the HIP runtime (libamdhip64.so) cannot be loaded: {detail}") from None
    status, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if status != hip.hipError_t.hipSuccess:
        try:
            err_name = _text(hip.hipGetErrorName(status)[1])
            err_text = _text(hip.hipGetErrorString(status)[1])
        except Exception:  # decoding must never hide the original failure
            err_name, err_text = getattr(status, "name", str(status)), ""
        raise DeviceError(f"{what} failed: {err_name} ({int(status)}): {err_text}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def device_count() -> int:
    hip = _hip()
    return int(call("hipGetDeviceCount", hip.hipGetDeviceCount))


def library_path() -> str | None:
    """The file of the HIP runtime this process has loaded (None before the first HIP call)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip()
                if "libamdhip64" in path.rsplit("/", 1)[-1]:
                    return path
    except OSError:
        pass
    return None


_DEVICES: dict[int, HipDevice] = {}
_DEVICES_LOCK = threading.Lock()


class HipDevice(Device):
    """GPU `ordinal` through HIP. ``HipDevice(n)`` returns the one object of ordinal n."""

    def __new__(cls, ordinal: int = 0) -> HipDevice:
        if not isinstance(ordinal, int | np.integer) or isinstance(ordinal, bool):
            raise DeviceError(f"HipDevice: expected a device ordinal (an int), got {type(ordinal).__name__} "
                              f"{ordinal!r}")
        ordinal = int(ordinal)
        with _DEVICES_LOCK:
            dev = _DEVICES.get(ordinal)
            if dev is None:
                dev = super().__new__(cls)
                dev._open(ordinal)
                _DEVICES[ordinal] = dev
            return dev

    def __init__(self, ordinal: int = 0) -> None:  # all set up once, in _open
        pass

    def _open(self, ordinal: int) -> None:
        hip = _hip()
        self.hip = hip
        count = device_count()
        if not 0 <= ordinal < count:
            raise DeviceError(f"HIP device {ordinal} does not exist ({count} visible)")
        self.ordinal = ordinal
        props = call(f"hipGetDeviceProperties({ordinal})", hip.hipGetDeviceProperties, ordinal)
        full = _text(props.gcnArchName)  # "gfx942:sramecc+:xnack-"
        gcn = full.split(":")[0]
        if gcn not in ARCHS:
            raise DeviceError(f"GPU {ordinal} is {full}, which tiledsl does not target ({', '.join(ARCHS)})")
        self.arch = get_arch(gcn)
        self.gcn_arch_name = full
        self.name = f"{_text(props.name)} ({gcn})"

    def _current(self) -> None:
        """Make this GPU current on the calling thread (HIP's current device is per thread)."""
        call(f"hipSetDevice({self.ordinal})", self.hip.hipSetDevice, self.ordinal)

    # -- memory ---------------------------------------------------------------------------
    def alloc(self, size: int, name: str = "buffer") -> Buffer:
        check_size(size, name)
        self._current()
        ptr = call(f"hipMalloc({size}) for '{name}'", self.hip.hipMalloc, max(int(size), 1))
        return Buffer(self, int(ptr), int(size), name, handle=ptr)

    def free(self, buf: Buffer) -> None:
        check_buffer(self, buf, "free")
        self._current()
        call(f"hipFree('{buf.name}')", self.hip.hipFree, buf.handle)
        buf.freed = True

    def copy_in(self, buf: Buffer, data: bytes | np.ndarray, offset: int = 0) -> None:
        raw, offset = copy_in_bytes(self, buf, data, offset)
        host = np.frombuffer(raw, np.uint8)
        if not host.size:
            return
        self._current()
        call(f"hipMemcpy to '{buf.name}'", self.hip.hipMemcpy, ctypes.c_void_p(buf.addr + offset), host, host.size,
             self.hip.hipMemcpyKind.hipMemcpyHostToDevice)

    def copy_out(self, buf: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        size, offset = copy_out_size(self, buf, size, offset)
        if not size:
            return b""
        host = np.empty(size, np.uint8)
        self._current()
        call(f"hipMemcpy from '{buf.name}'", self.hip.hipMemcpy, host, ctypes.c_void_p(buf.addr + offset), size,
             self.hip.hipMemcpyKind.hipMemcpyDeviceToHost)
        return host.tobytes()

    def fill(self, buf: Buffer, value: int = 0, offset: int = 0, size: int | None = None) -> None:
        size, offset = fill_size(self, buf, value, offset, size)
        self._current()
        call(f"hipMemset('{buf.name}')", self.hip.hipMemset, ctypes.c_void_p(buf.addr + offset), int(value), size)

    # -- code -----------------------------------------------------------------------------
    def load_module(self, code_object: bytes) -> Module:
        try:  # only the metadata: HIP runs the code, so nothing needs decoding here
            metas = kernel_metadata(code_object, self.arch)
        except EmulatorError as exc:
            raise DeviceError(f"cannot load the code object on {self.name}: {exc}") from None
        image = np.frombuffer(code_object, np.uint8).copy()
        self._current()
        mod = call("hipModuleLoadData", self.hip.hipModuleLoadData, image)
        return Module(self, metas, handle=(mod, image))

    def unload_module(self, module: Module) -> None:
        check_module(self, module, "unload_module")
        self._current()
        call("hipModuleUnload", self.hip.hipModuleUnload, module.handle[0])
        module.unloaded = True

    def _get_kernel(self, module: Module, name: str) -> Kernel:
        self._current()
        fn = call(f"hipModuleGetFunction({name})", self.hip.hipModuleGetFunction, module.handle[0], name.encode())
        return Kernel(module, name, module.kernels[name], handle=fn)

    def launch(self, kernel: Kernel, grid, block, kernargs: bytes, dynamic_lds: int = 0,
               stream: Stream | None = None, tensors: Any = None) -> None:
        # `tensors` (the pointer arguments' extents) is for checking devices; a GPU has no use for it.
        dynamic_lds = check_launch(self, kernel, dynamic_lds, stream)
        g, b = launch_dims(grid, block)
        args = complete_kernargs(kernel.meta, kernargs, g, b, dynamic_lds)
        arg_buf = ctypes.create_string_buffer(args, max(len(args), 1))
        arg_size = ctypes.c_size_t(len(args))
        # A ctypes array, never a list: hip-python would take a list as the kernel's own arguments.
        extra = (ctypes.c_void_p * 5)(_BUFFER_POINTER, ctypes.cast(arg_buf, ctypes.c_void_p).value,
                                      _BUFFER_SIZE, ctypes.addressof(arg_size), _END)
        self._current()
        call(f"hipModuleLaunchKernel({kernel.name})", self.hip.hipModuleLaunchKernel, kernel.handle, *g, *b,
             dynamic_lds, stream.handle if stream is not None else None, None, extra)
        # The argument buffers must live until the launch is enqueued (HIP copies them then).
        del arg_buf, arg_size

    # -- ordering -------------------------------------------------------------------------
    def create_stream(self) -> Stream:
        self._current()
        return Stream(self, handle=call("hipStreamCreate", self.hip.hipStreamCreate))

    def destroy_stream(self, stream: Stream) -> None:
        check_stream(self, stream, "destroy_stream", default=False)
        self._current()
        call("hipStreamDestroy", self.hip.hipStreamDestroy, stream.handle)
        stream.destroyed = True

    def synchronize(self, stream: Stream | None = None) -> None:
        check_stream(self, stream, "synchronize")
        self._current()
        if stream is None:
            call("hipDeviceSynchronize", self.hip.hipDeviceSynchronize)
        else:
            call("hipStreamSynchronize", self.hip.hipStreamSynchronize, stream.handle)
