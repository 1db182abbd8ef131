"""`Device` on a real AMD GPU through hip-python (optional extra `hip`: ``pip install tiledsl[hip]``).

hip-python dlopens libamdhip64.so, which exists only where ROCm is installed. Every HIP call goes
through `check`, the one place that decodes a HIP status into a DeviceError.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tiledsl.backends.rocm.arch import ARCHS, get_arch
from tiledsl.backends.rocm.emulator.loader import load_code_object
from tiledsl.backends.rocm.runtime.device import (
    Buffer,
    Device,
    DeviceError,
    Kernel,
    Module,
    Stream,
    _dim3,
    complete_kernargs,
)

# hipModuleLaunchKernel `extra` markers (HIP_LAUNCH_PARAM_*), as in hip_runtime_api.h.
_BUFFER_POINTER, _BUFFER_SIZE, _END = 0x01, 0x02, 0x03


def _hip():
    try:
        from hip import hip
    except Exception as exc:  # ImportError, or OSError when libamdhip64.so is missing
        raise DeviceError(f"HIP is not available ({exc}); install ROCm and `pip install tiledsl[hip]`") from None
    return hip


def check(result: Any, what: str = "HIP call") -> Any:
    """Decode a hip-python result `(status, *values)` (or a bare status): raise on error, return values."""
    hip = _hip()
    if isinstance(result, tuple):
        status, values = result[0], result[1:]
    else:
        status, values = result, ()
    if status != hip.hipError_t.hipSuccess:
        try:
            err_name = hip.hipGetErrorName(status)
            err_text = hip.hipGetErrorString(status)
        except Exception:  # decoding must never hide the original failure
            err_name, err_text = str(status), ""
        if isinstance(err_name, bytes):
            err_name = err_name.decode()
        if isinstance(err_text, bytes):
            err_text = err_text.decode()
        raise DeviceError(f"{what} failed: {err_name} ({int(status)}): {err_text}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def device_count() -> int:
    return int(check(_hip().hipGetDeviceCount(), "hipGetDeviceCount"))


class HipDevice(Device):
    def __init__(self, ordinal: int = 0) -> None:
        hip = _hip()
        self.hip = hip
        self.ordinal = ordinal
        check(hip.hipSetDevice(ordinal), "hipSetDevice")
        props = hip.hipDeviceProp_t()
        check(hip.hipGetDeviceProperties(props, ordinal), "hipGetDeviceProperties")
        raw = props.gcnArchName
        gcn = (raw.decode() if isinstance(raw, bytes) else str(raw)).split(":")[0]  # "gfx942:sramecc+:xnack-"
        if gcn not in ARCHS:
            raise DeviceError(f"GPU {ordinal} is {gcn}, which tiledsl does not target ({', '.join(ARCHS)})")
        self.arch = get_arch(gcn)
        name = props.name
        self.name = (name.decode() if isinstance(name, bytes) else str(name)) + f" ({gcn})"

    # -- memory ---------------------------------------------------------------------------
    def alloc(self, size: int, name: str = "buffer") -> Buffer:
        ptr = check(self.hip.hipMalloc(max(int(size), 1)), f"hipMalloc({size}) for '{name}'")
        return Buffer(self, int(ptr), int(size), name, handle=ptr)

    def free(self, buf: Buffer) -> None:
        if buf.freed:
            raise DeviceError(f"double free of '{buf.name}'")
        check(self.hip.hipFree(buf.handle), f"hipFree('{buf.name}')")
        buf.freed = True

    def copy_in(self, buf: Buffer, data: bytes | np.ndarray, offset: int = 0) -> None:
        host = np.frombuffer(data.tobytes() if isinstance(data, np.ndarray) else bytes(data), np.uint8)
        if offset < 0 or offset + host.size > buf.size:
            raise DeviceError(f"copy of {host.size} bytes at offset {offset} overflows '{buf.name}' ({buf.size} bytes)")
        dst = ctypes.c_void_p(buf.addr + offset)
        check(self.hip.hipMemcpy(dst, host, host.size, self.hip.hipMemcpyKind.hipMemcpyHostToDevice),
              f"hipMemcpy to '{buf.name}'")

    def copy_out(self, buf: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        size = buf.size - offset if size is None else size
        if offset < 0 or offset + size > buf.size:
            raise DeviceError(f"read of {size} bytes at offset {offset} overflows '{buf.name}' ({buf.size} bytes)")
        host = np.empty(size, np.uint8)
        src = ctypes.c_void_p(buf.addr + offset)
        check(self.hip.hipMemcpy(host, src, size, self.hip.hipMemcpyKind.hipMemcpyDeviceToHost),
              f"hipMemcpy from '{buf.name}'")
        return host.tobytes()

    # -- code -----------------------------------------------------------------------------
    def load_module(self, code_object: bytes) -> Module:
        metas = {n: img.meta for n, img in load_code_object(code_object, self.arch).items()}
        image = np.frombuffer(code_object, np.uint8).copy()
        mod = check(self.hip.hipModuleLoadData(image), "hipModuleLoadData")
        return Module(self, metas, handle=(mod, image))

    def _get_kernel(self, module: Module, name: str) -> Kernel:
        fn = check(self.hip.hipModuleGetFunction(module.handle[0], name.encode()), f"hipModuleGetFunction({name})")
        return Kernel(module, name, module.kernels[name], handle=fn)

    def launch(self, kernel: Kernel, grid, block, kernargs: bytes, dynamic_lds: int = 0,
               stream: Stream | None = None) -> None:
        g, b = _dim3(grid, "grid"), _dim3(block, "block")
        args = complete_kernargs(kernel.meta, kernargs, g, b, dynamic_lds)
        arg_buf = ctypes.create_string_buffer(args, max(len(args), 1))
        arg_size = ctypes.c_size_t(len(args))
        extra = (ctypes.c_void_p * 5)(_BUFFER_POINTER, ctypes.cast(arg_buf, ctypes.c_void_p).value,
                                      _BUFFER_SIZE, ctypes.addressof(arg_size), _END)
        check(self.hip.hipModuleLaunchKernel(kernel.handle, *g, *b, dynamic_lds,
                                             stream.handle if stream is not None else None, None, extra),
              f"hipModuleLaunchKernel({kernel.name})")
        # Keep the argument buffers alive until the launch has been enqueued (HIP copies them).
        del arg_buf, arg_size

    # -- ordering -------------------------------------------------------------------------
    def create_stream(self) -> Stream:
        return Stream(self, handle=check(self.hip.hipStreamCreate(), "hipStreamCreate"))

    def destroy_stream(self, stream: Stream) -> None:
        check(self.hip.hipStreamDestroy(stream.handle), "hipStreamDestroy")

    def synchronize(self, stream: Stream | None = None) -> None:
        if stream is None:
            check(self.hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
        else:
            check(self.hip.hipStreamSynchronize(stream.handle), "hipStreamSynchronize")
