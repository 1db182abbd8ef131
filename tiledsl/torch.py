"""PyTorch front end: flash-attention's `flash_attn_func`, `flash_attn_varlen_func` and
`flash_attn_with_kvcache` over tiledsl's attention (docs/torch.md).

The signatures and semantics are flash-attention 2's ([batch, seqlen, heads, head dim], causal
bottom-right aligned, window_size (-1, -1), softcap, GQA/MQA); two keyword-only extras, `arch`
and `device`, say where CPU tensors run. What tiledsl does not have yet (the attention
probabilities, left padding of the cache, dropout over a paged cache) raises NotImplementedError
naming the argument: no argument is ever ignored.

- CPU tensors run on the emulator of an AMD arch (`arch=`, `device=`, or the module default of
  `set_default_device` / `use_device`). They reach tiledsl as numpy views of their memory (bf16
  through int16, no copy through float32), results come back with `torch.from_numpy`.
- ROCm GPU tensors (a ROCm build of torch: `torch.version.hip` set) run through HIP on the
  tensor's GPU: tiledsl sees their memory through `data_ptr()` (`tensor_buffer`), allocates its
  outputs and workspaces with torch's caching allocator, and launches on torch's current stream
  (`TorchHipDevice`). This path is tested against the HIP stand-in of the test suite only.

`flash_attn_func` and `flash_attn_varlen_func` are differentiable (`torch.autograd.Function`s
over `tiledsl.ops.fmha_fwd` and `fmha_bwd`); `flash_attn_with_kvcache` is inference only, as in
flash-attention.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

try:
    import torch
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("tiledsl.torch needs PyTorch: pip install 'tiledsl[torch]' (or pip install torch)") from exc
from torch.autograd.function import once_differentiable

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.device import DEVICE_FORMS, Buffer, Device, DeviceError, Stream, device_from
from tiledsl.device_array import DeviceArray
from tiledsl.plan import WORKSPACE_POOL

__all__ = ["TorchHipDevice", "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
           "get_default_device", "set_default_device", "tensor_array", "tensor_buffer", "use_device"]

_NUMPY_DTYPES = {torch.float16: np.dtype(np.float16), torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
                 torch.float32: np.dtype(np.float32), torch.int32: np.dtype(np.int32),
                 torch.int64: np.dtype(np.int64), torch.uint8: np.dtype(np.uint8)}
_TORCH_DTYPES = {v: k for k, v in _NUMPY_DTYPES.items()}


# -- where CPU tensors run --------------------------------------------------------------------

_default_device: Device | None = None


def set_default_device(device: Device | str | None) -> Device | None:
    """Where CPU tensors run when a call names neither `device=` nor `arch=`: a Device, or one of
    'emulator:ARCH', 'hip', 'hip:N' (None clears it). Returns the previous setting. The setting
    is process-wide (not per thread), so a backward run by autograd's threads sees it too; the
    backward uses the device its forward ran on anyway."""
    global _default_device
    previous = _default_device
    _default_device = None if device is None else device_from(device)
    return previous


def get_default_device() -> Device | None:
    return _default_device


@contextlib.contextmanager
def use_device(device: Device | str | None) -> Iterator[Device | None]:
    """`set_default_device(device)` for the duration of a `with` block, then the previous one."""
    previous = set_default_device(device)
    try:
        yield _default_device
    finally:
        set_default_device(previous)


def _arch_name(device: Any) -> str | None:
    arch = getattr(device, "arch", None)
    return getattr(arch, "name", arch)


def _check_arch(device: Any, arch: str | None) -> None:
    if arch is None:
        return
    if arch not in ARCH_NAMES:
        raise ValueError(f"arch: expected one of {', '.join(ARCH_NAMES)}, got {arch!r}")
    if _arch_name(device) not in (None, get_arch(arch).name):
        raise ValueError(f"arch: {arch} does not match the device's arch {_arch_name(device)} ({device.name})")


def _is_rocm(t: torch.Tensor) -> bool:
    return t.device.type == "cuda" and torch.version.hip is not None


def _place(tensors: dict[str, Any], arch: str | None, device: Any) -> Device:
    """The device a call runs on: a TorchHipDevice for ROCm tensors, else the device for CPU
    tensors (device=, else the emulator of arch=, else the module default)."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    (first_name, first), *rest = tensors.items()
    for name, t in rest:
        if t.device != first.device:
            raise ValueError(f"{name}: on {t.device}, but {first_name} is on {first.device}")
    if _is_rocm(first):
        dev = _rocm_device(first.device)
        if device is not None and device_from(device, arch) not in (dev, dev.hip):
            raise ValueError(f"device: {device!r} is not the GPU of the tensors ({first.device}); ROCm tensors "
                             "run on their own GPU (leave device=None)")
    elif first.device.type == "cpu":
        if device is not None:
            dev = device_from(device, arch)
        elif arch is not None:
            _check_arch(None, arch)
            dev = device_from("emulator", arch)
        elif _default_device is not None:
            dev = _default_device
        else:
            raise ValueError(f"arch: CPU tensors run on the emulator of an AMD arch, and none is named: pass "
                             f"arch= (one of {', '.join(ARCH_NAMES)}) or device= ({DEVICE_FORMS}), or call "
                             "tiledsl.torch.set_default_device('emulator:gfx942')")
    elif first.device.type == "cuda":
        raise ValueError(f"{first_name}: a CUDA tensor of an NVIDIA build of torch ({torch.version.cuda}); tiledsl "
                         "runs on AMD GPUs (ROCm builds of torch) and runs CPU tensors on its emulator")
    else:
        raise ValueError(f"{first_name}: tensors on {first.device} are not supported (CPU or ROCm GPU tensors)")
    _check_arch(dev, arch)
    return dev


# -- ROCm tensors: HIP through torch's memory and stream ---------------------------------------

def tensor_buffer(device: Device, t: torch.Tensor, name: str = "tensor") -> Buffer:
    """A Buffer of `device` over the whole storage of `t` (its `data_ptr()`), which tiledsl does
    not own: its handle is a uint8 tensor over the storage, which keeps the memory alive. tiledsl
    never frees buffers it did not allocate (on a TorchHipDevice a free only drops the reference)."""
    raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
    return Buffer(device, raw.data_ptr(), raw.numel(), name, handle=raw)


def tensor_array(device: Device, t: torch.Tensor, name: str = "tensor") -> DeviceArray:
    """`t` as a DeviceArray of `device` (same memory, shape, strides and offset: no copy)."""
    if t.dtype not in _NUMPY_DTYPES:
        raise ValueError(f"{name}: dtype {t.dtype} has no tiledsl equivalent")
    return DeviceArray(tensor_buffer(device, t, name), tuple(t.shape), _NUMPY_DTYPES[t.dtype], tuple(t.stride()),
                       t.storage_offset())


def array_tensor(a: DeviceArray) -> torch.Tensor:
    """A tensor over a DeviceArray of a TorchHipDevice (its buffer holds a uint8 tensor)."""
    base = a.buffer.handle
    if not isinstance(base, torch.Tensor) or base.dtype != torch.uint8 or base.dim() != 1:
        raise ValueError(f"'{a.buffer.name}' is not memory of torch (its buffer's handle is {type(base).__name__})")
    return base.view(_TORCH_DTYPES[a.dtype]).as_strided(a.shape, a.strides, a.offset)


class TorchHipDevice(Device):
    """A HipDevice seen through PyTorch: memory from torch's caching allocator (`torch.empty(size,
    dtype=torch.uint8, device=...)`), copies and fills by torch on its current stream, kernels
    from the HipDevice, launched on torch's current stream of that GPU. All of tiledsl's memory
    operations are thereby ordered with the caller's torch work; a free drops the reference and
    torch's allocator reuses the memory in stream order."""

    def __init__(self, hip: Device, torch_device: torch.device) -> None:
        self.hip = hip
        self.arch = hip.arch
        self.name = f"{hip.name} through torch ({torch_device})"
        self.torch_device = torch_device

    # Hooks (the tests replace them to run this class against the HIP stand-in).
    def _new_bytes(self, size: int) -> torch.Tensor:
        return torch.empty(size, dtype=torch.uint8, device=self.torch_device)

    def stream_handle(self) -> int:
        """torch's current stream of this GPU, as the hipStream_t address hip-python takes."""
        return int(torch.cuda.current_stream(self.torch_device).cuda_stream)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """A call's extent: torch's current device is this GPU (restored after), and the plan
        workspace tiledsl's pool took from torch's allocator goes back to it at the end."""
        on_gpu = self.torch_device.type == "cuda"
        try:
            with torch.cuda.device(self.torch_device) if on_gpu else contextlib.nullcontext():
                yield
        finally:
            WORKSPACE_POOL.release(self)

    # -- memory ---------------------------------------------------------------------------
    def alloc(self, size: int, name: str = "buffer") -> Buffer:
        if size < 0:
            raise DeviceError(f"cannot allocate {size} bytes for '{name}'")
        raw = self._new_bytes(max(-(-size // 16) * 16, 16))  # 16-byte multiple: views as any dtype
        return Buffer(self, raw.data_ptr(), int(size), name, handle=raw)

    def free(self, buf: Buffer) -> None:
        if buf.freed:
            raise DeviceError(f"double free of '{buf.name}'")
        buf.handle = None
        buf.freed = True

    def _bytes(self, buf: Buffer, offset: int, size: int, what: str) -> torch.Tensor:
        if offset < 0 or size < 0 or offset + size > buf.size:
            raise DeviceError(f"{what} of {size} bytes at offset {offset} overflows '{buf.name}' ({buf.size} bytes)")
        if not isinstance(buf.handle, torch.Tensor):
            raise DeviceError(f"'{buf.name}' is not a live buffer of {self.name}")
        return buf.handle[offset:offset + size]

    def copy_in(self, buf: Buffer, data: bytes | np.ndarray, offset: int = 0) -> None:
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        if raw:
            self._bytes(buf, offset, len(raw), "copy").copy_(torch.frombuffer(bytearray(raw), dtype=torch.uint8))

    def copy_out(self, buf: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        size = buf.size - offset if size is None else size
        return self._bytes(buf, offset, size, "read").cpu().numpy().tobytes() if size else b""

    def fill(self, buf: Buffer, value: int = 0, offset: int = 0, size: int | None = None) -> None:
        size = buf.size - offset if size is None else size
        self._bytes(buf, offset, size, "fill").fill_(int(value))

    # -- code: the HipDevice's, so code objects load once per GPU ---------------------------
    def kernel(self, code_object: bytes, name: str) -> Any:
        return self.hip.kernel(code_object, name)

    def load_module(self, code_object: bytes) -> Any:
        return self.hip.load_module(code_object)

    def get_kernel(self, module: Any, name: str) -> Any:
        return self.hip.get_kernel(module, name)

    def _get_kernel(self, module: Any, name: str) -> Any:
        return self.hip._get_kernel(module, name)

    def unload_module(self, module: Any) -> None:
        self.hip.unload_module(module)

    def launch(self, kernel: Any, grid: int | tuple[int, ...], block: int | tuple[int, ...], kernargs: bytes,
               dynamic_lds: int = 0, stream: Stream | None = None, tensors: Any = None) -> None:
        self.hip.launch(kernel, grid, block, kernargs, dynamic_lds=dynamic_lds,
                        stream=stream if stream is not None else Stream(self.hip, handle=self.stream_handle()))

    def synchronize(self, stream: Stream | None = None) -> None:
        self.hip.synchronize(stream if stream is not None else Stream(self.hip, handle=self.stream_handle()))


_ROCM_DEVICES: dict[int, TorchHipDevice] = {}


def _hip_runtimes() -> set[str]:
    """The distinct libamdhip64 files mapped into this process."""
    found = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip()
                if "libamdhip64" in os.path.basename(path):
                    found.add(os.path.realpath(path))
    except OSError:
        pass
    return found


def _rocm_device(d: torch.device) -> TorchHipDevice:
    from tiledsl.backends.rocm.runtime.hip_device import HipDevice

    index = d.index if d.index is not None else torch.cuda.current_device()
    dev = _ROCM_DEVICES.get(index)
    if dev is None:
        hip = HipDevice(index)
        runtimes = _hip_runtimes()
        if len(runtimes) > 1:  # torch's pointers and streams mean nothing to another runtime
            raise DeviceError(f"torch and hip-python loaded different HIP runtimes ({', '.join(sorted(runtimes))});"
                              " set ROCM_PATH so that hip-python loads the libamdhip64 torch uses")
        dev = _ROCM_DEVICES[index] = TorchHipDevice(hip, torch.device("cuda", index))
    return dev


# -- tensors to tiledsl and back ---------------------------------------------------------------

def _host_view(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a numpy view of its memory, any strides (bf16 through int16: no copy)."""
    t = t.detach()
    wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)  # private API
    if wrapped is not None and wrapped(t):  # vmap/grad transforms: no storage to read
        raise ValueError("tiledsl.torch: torch.func transforms (vmap, grad, jacrev) are not supported; call the "
                         "function on plain tensors (batch with a leading dim instead of vmap)")
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _from_host(a: np.ndarray) -> torch.Tensor:
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _on_gpu(device: Device) -> bool:
    return isinstance(device, TorchHipDevice)


def _lib(t: torch.Tensor, device: Device, name: str) -> Any:
    """What tiledsl gets for a tensor: a DeviceArray over its memory on the GPU, a numpy view on the CPU."""
    return tensor_array(device, t.detach(), name) if _on_gpu(device) else _host_view(t)


def _torch(x: Any) -> torch.Tensor:
    return array_tensor(x) if isinstance(x, DeviceArray) else _from_host(x)


def _scope(device: Device) -> Any:
    return device.scope() if _on_gpu(device) else contextlib.nullcontext()


def _host_ints(name: str, x: torch.Tensor) -> np.ndarray:
    """An integer tensor's values on the host (a copy from the GPU, a view on the CPU)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name}: expected a 1-D int32 tensor, got "
                         f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
    return _host_copy(name, x)


def _host_copy(name: str, x: torch.Tensor) -> np.ndarray:
    """A small tensor's values on the host; a meta tensor has none (said so, naming the argument)."""
    if x.is_meta:
        raise ValueError(f"{name}: on meta, which holds no values; pass a tensor on the CPU or the GPU")
    return x.detach().cpu().numpy()


def _int_arg(name: str, x: Any, device: Device) -> Any:
    """An integer index argument (cache_seqlens, block_table, cache_batch_idx) for tiledsl: an int
    as it is; on the GPU an int32 tensor in place (tiledsl copies it to the host to check it)."""
    if isinstance(x, int | np.integer) and not isinstance(x, bool):
        return int(x)
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.int32, torch.int64):
        got = f"a tensor of {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name}: expected an int32 tensor, got {got}")
    if x.is_meta:
        raise ValueError(f"{name}: on meta, which holds no values; pass a tensor on the CPU or the GPU")
    if _on_gpu(device) and _is_rocm(x) and x.dtype == torch.int32:
        return tensor_array(device, x.detach(), name)
    return _host_view(x.cpu())


def _number(x: Any) -> Any:
    """A 0-d or one-element tensor's value, numpy's scalars as Python's: flash-attention takes them."""
    if isinstance(x, torch.Tensor) and x.numel() == 1 and not x.is_meta:
        x = x.item()
    return x.item() if isinstance(x, np.generic) else x


# -- checks of flash-attention's arguments -----------------------------------------------------

def _not_yet(name: str, what: str) -> NotImplementedError:
    return NotImplementedError(f"{name}: {what} is not in tiledsl yet")


def _alibi(alibi_slopes: Any) -> np.ndarray | None:
    """flash-attention's alibi_slopes (fp32 [Hq] or [B, Hq]) as a host f32 array; tiledsl's ops
    check its shape against the call (tiny: a copy to the host costs nothing)."""
    if alibi_slopes is None:
        return None
    if not isinstance(alibi_slopes, torch.Tensor) or alibi_slopes.dtype != torch.float32:
        raise ValueError(f"alibi_slopes: expected a float32 tensor [nheads] or [batch, nheads], got "
                         f"{getattr(alibi_slopes, 'dtype', type(alibi_slopes).__name__)}")
    return _host_copy("alibi_slopes", alibi_slopes)


def _check_common(q: Any, softmax_scale: Any, causal: Any, window_size: Any,
                  softcap: Any) -> tuple[float | None, tuple[int, int], float]:
    if torch.jit.is_tracing():
        # The call runs through numpy: a trace would record this call's output as a constant.
        raise RuntimeError("tiledsl.torch cannot be traced with torch.jit.trace (its kernels run outside the "
                           "traced graph, so the trace would replay this call's output for any input); call it "
                           "eagerly, or use torch.compile, which breaks the graph around it (docs/torch.md)")
    if isinstance(q, torch.Tensor) and q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"q: expected dtype torch.float16 or torch.bfloat16, got {q.dtype}")
    if isinstance(softmax_scale, torch.Tensor) and softmax_scale.numel() == 1 and softmax_scale.is_floating_point():
        softmax_scale = float(softmax_scale.item())  # a 0-d tensor, as some models keep it
    causal, softcap = _number(causal), _number(softcap)
    if isinstance(window_size, tuple | list):
        window_size = tuple(_number(w) for w in window_size)
    if softmax_scale is not None and (isinstance(softmax_scale, bool | np.bool_)
                                      or not isinstance(softmax_scale, int | float | np.floating | np.integer)
                                      or not math.isfinite(softmax_scale)):
        raise ValueError(f"softmax_scale: expected None or a finite number, got {softmax_scale!r}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal: expected a bool, got {causal!r}")
    if not (isinstance(window_size, tuple | list) and len(window_size) == 2
            and all(isinstance(w, int) and not isinstance(w, bool) and -1 <= w < 2**31 for w in window_size)):
        raise ValueError(f"window_size: expected a pair of ints in -1..2**31-1 (left, right; -1 = unlimited), "
                         f"got {window_size!r}")
    if isinstance(softcap, bool) or not isinstance(softcap, int | float) or not math.isfinite(softcap) or softcap < 0:
        raise ValueError(f"softcap: expected a finite number >= 0 (0 = off), got {softcap!r}")
    scale = None if softmax_scale is None else float(softmax_scale)
    return scale, (int(window_size[0]), int(window_size[1])), float(softcap)


def _check_dropout(dropout_p: Any, return_attn_probs: Any, deterministic: Any) -> tuple[float, int]:
    """(p, seed): a dropout call draws its seed from torch's default generator (so
    `torch.manual_seed` reproduces it); the backward regenerates the same keep bits from it."""
    from tiledsl.fmha_dropout import check_dropout

    deterministic, dropout_p = _number(deterministic), _number(dropout_p)
    if not isinstance(deterministic, bool):
        raise ValueError(f"deterministic: expected a bool, got {deterministic!r}")
    if return_attn_probs:
        raise _not_yet("return_attn_probs", "returning the attention probabilities")
    p = check_dropout(dropout_p, 0, 0).p
    return p, (int(torch.randint(0, 2**62, (1,)).item()) if p > 0 else 0)


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


# -- the differentiable forward and backward ---------------------------------------------------

@dataclass(eq=False)
class _Call:
    """One attention call's options, resolved: what the backward needs of its forward."""

    device: Device
    scale: float | None
    causal: bool
    window: tuple[int, int]
    softcap: float
    deterministic: bool
    cu_seqlens_q: np.ndarray | None = None
    cu_seqlens_k: np.ndarray | None = None
    max_seqlen_q: int | None = None
    max_seqlen_k: int | None = None
    alibi_slopes: np.ndarray | None = None
    dropout: tuple[float, int] = (0.0, 0)  # (p, seed): the forward's, which the backward draws again

    def options(self) -> dict[str, Any]:
        return {"scale": self.scale, "causal": self.causal, "window": self.window, "softcap": self.softcap,
                "cu_seqlens_q": self.cu_seqlens_q, "cu_seqlens_k": self.cu_seqlens_k,
                "max_seqlen_q": self.max_seqlen_q, "max_seqlen_k": self.max_seqlen_k,
                "alibi_slopes": self.alibi_slopes, "device": self.device, "dropout_p": self.dropout[0],
                "seed": self.dropout[1]}


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: _Call,
             return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    from tiledsl.ops import fmha_fwd

    dev = call.device
    with _scope(dev):
        got = fmha_fwd(_lib(q, dev, "q"), _lib(k, dev, "k"), _lib(v, dev, "v"), return_lse=return_lse,
                       **call.options())
        if return_lse:
            return _torch(got[0]), _torch(got[1])
        return _torch(got), None


def _backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
              lse: torch.Tensor, call: _Call) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from tiledsl.ops import fmha_bwd, fmha_bwd_plan

    dev = call.device
    with _scope(dev):
        args = [_lib(x, dev, n) for x, n in ((do, "do"), (q, "q"), (k, "k"), (v, "v"), (out, "out"), (lse, "lse"))]
        workspace = None
        if _on_gpu(dev):  # the plan's workspace from torch's allocator, for this call only
            size = fmha_bwd_plan(*args, deterministic=call.deterministic, **call.options()).workspace_size
            workspace = dev.alloc(size, "workspace") if size else None
        try:
            dq, dk, dv = fmha_bwd(*args, deterministic=call.deterministic, workspace=workspace, **call.options())
        finally:
            if workspace is not None:
                dev.free(workspace)
        return _torch(dq), _torch(dk), _torch(dv)


class _FlashAttention(torch.autograd.Function):
    """out = attention(q, k, v); saves q, k, v, out and the LSE for `fmha_bwd`."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: _Call) -> torch.Tensor:
        out, lse = _forward(q, k, v, call, return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.call = call
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        grads = _backward(dout, q, k, v, out, lse, ctx.call)
        return (*(g if need else None for g, need in zip(grads, ctx.needs_input_grad[:3], strict=True)), None)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: _Call) -> torch.Tensor:
    if _needs_grad(q, k, v):
        return _FlashAttention.apply(q, k, v, call)
    return _forward(q, k, v, call, return_lse=False)[0]


# -- flash-attention's API ---------------------------------------------------------------------

@torch.compiler.disable  # torch.compile runs it eagerly (a graph break): dynamo cannot trace numpy bytes
def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: float | None = None, causal: bool = False,
                    window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0, alibi_slopes: Any = None,
                    deterministic: bool = False, return_attn_probs: bool = False, *, arch: str | None = None,
                    device: Device | str | None = None) -> torch.Tensor:
    """flash-attention's `flash_attn_func`: q [B, Sq, Hq, D], k/v [B, Sk, Hk, D(v)], f16 or bf16,
    Hq a multiple of Hk; returns out [B, Sq, Hq, Dv]. causal is bottom-right aligned; window_size
    (left, right), -1 unlimited; softcap > 0 caps the logits with tanh. Differentiable in q, k, v
    (`deterministic=True`: bitwise-reproducible gradients). arch/device: where CPU tensors run
    (docs/torch.md). alibi_slopes: fp32 [Hq] or [B, Hq] (flash-attention's convention). dropout_p
    in [0, 1): P is dropped with a seed drawn from torch's default generator (docs/dropout.md); as
    in flash-attention it applies whenever given (pass 0.0 in evaluation). return_attn_probs
    raises NotImplementedError."""
    scale, window, cap = _check_common(q, softmax_scale, causal, window_size, softcap)
    drop = _check_dropout(dropout_p, return_attn_probs, deterministic)
    dev = _place({"q": q, "k": k, "v": v}, arch, device)
    return _attention(q, k, v, _Call(dev, scale, causal, window, cap, deterministic,
                                     alibi_slopes=_alibi(alibi_slopes), dropout=drop))


@torch.compiler.disable  # torch.compile runs it eagerly (a graph break): dynamo cannot trace numpy bytes
def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                           dropout_p: float = 0.0, softmax_scale: float | None = None, causal: bool = False,
                           window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0, alibi_slopes: Any = None,
                           deterministic: bool = False, return_attn_probs: bool = False,
                           block_table: torch.Tensor | None = None, *, arch: str | None = None,
                           device: Device | str | None = None) -> torch.Tensor:
    """flash-attention's `flash_attn_varlen_func`: packed q [total_q, Hq, D], k/v [total_k, Hk,
    D(v)], sequence b at rows cu_seqlens_q[b]..cu_seqlens_q[b + 1] (int32 [B + 1]); masks are
    aligned per sequence. Differentiable in q, k, v. With `block_table` [B, max_pages] (int32),
    k/v are a paged KV cache [num_pages, page_size, Hk, D(v)] (page_size a power of two) holding
    sequence b's cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys; that form is forward only (its
    backward is not in tiledsl yet). Other arguments as `flash_attn_func`."""
    scale, window, cap = _check_common(q, softmax_scale, causal, window_size, softcap)
    drop = _check_dropout(dropout_p, return_attn_probs, deterministic)
    dev = _place({"q": q, "k": k, "v": v}, arch, device)
    cu_q, cu_k = _host_ints("cu_seqlens_q", cu_seqlens_q), _host_ints("cu_seqlens_k", cu_seqlens_k)
    max_q, max_k = (_max_seqlen(n, x) for n, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)))
    slopes = _alibi(alibi_slopes)
    if block_table is not None:
        if drop[0] > 0:
            raise _not_yet("dropout_p", "dropout over a paged KV cache (batch prefill has none; pass 0.0)")
        return _paged_varlen(q, k, v, cu_q, cu_k, max_q, max_k, block_table, scale, causal, window, cap, dev,
                             slopes)
    call = _Call(dev, scale, causal, window, cap, deterministic, cu_q, cu_k, max_q, max_k, slopes, drop)
    return _attention(q, k, v, call)


def _max_seqlen(name: str, x: Any) -> int:
    """An int, a numpy integer or a one-element integer tensor (what `seqlens.max()` gives); a float
    or a string is refused, not truncated."""
    if isinstance(x, torch.Tensor) and x.numel() == 1 and not x.is_floating_point() and x.dtype != torch.bool:
        return int(x.item())
    if isinstance(x, int | np.integer) and not isinstance(x, bool):
        return int(x)
    raise ValueError(f"{name}: expected an int, got {x!r}")


def _paged_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: np.ndarray, cu_k: np.ndarray,
                  max_q: int, max_k: int, block_table: torch.Tensor, scale: float | None, causal: bool,
                  window: tuple[int, int], softcap: float, dev: Device, slopes: np.ndarray | None) -> torch.Tensor:
    """flash_attn_varlen_func over a paged KV cache: tiledsl's batch prefill against the cache."""
    from tiledsl.ops import fmha_fwd_kvcache

    if _needs_grad(q, k, v):
        raise _not_yet("block_table", "the backward of attention over a paged KV cache (run under torch.no_grad())")
    if len(cu_k) != len(cu_q) or len(cu_k) < 2 or cu_k[0] != 0 or (np.diff(cu_k) < 0).any():
        raise ValueError(f"cu_seqlens_k: expected {len(cu_q)} non-decreasing offsets from 0 (those of "
                         f"cu_seqlens_q), got {cu_k.tolist()}")
    seqlens_k = np.diff(cu_k).astype(np.int32)
    if max_k < int(seqlens_k.max()):
        raise ValueError(f"max_seqlen_k: expected an int >= the longest sequence ({int(seqlens_k.max())}), "
                         f"got {max_k}")
    with _scope(dev):
        out = fmha_fwd_kvcache(_lib(q, dev, "q"), _lib(k, dev, "k"), _lib(v, dev, "v"), cache_seqlens=seqlens_k,
                               block_table=_int_arg("block_table", block_table, dev), cu_seqlens_q=cu_q,
                               max_seqlen_q=max_q, scale=scale, causal=causal, window=window, softcap=softcap,
                               alibi_slopes=slopes, num_splits=0, device=dev)
        return _torch(out)


@torch.compiler.disable  # torch.compile runs it eagerly (a graph break): dynamo cannot trace numpy bytes
def flash_attn_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            k: torch.Tensor | None = None, v: torch.Tensor | None = None,
                            rotary_cos: torch.Tensor | None = None, rotary_sin: torch.Tensor | None = None,
                            cache_seqlens: int | torch.Tensor | None = None,
                            cache_batch_idx: torch.Tensor | None = None, cache_leftpad: torch.Tensor | None = None,
                            block_table: torch.Tensor | None = None, softmax_scale: float | None = None,
                            causal: bool = False, window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                            rotary_interleaved: bool = True, alibi_slopes: Any = None, num_splits: int = 0,
                            return_softmax_lse: bool = False, *, arch: str | None = None,
                            device: Device | str | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """flash-attention's `flash_attn_with_kvcache` (inference: no gradients). q [B, Sq, Hq, D];
    k_cache/v_cache [B_cache, S_cache, Hk, D(v)] (sequence b in entry cache_batch_idx[b], default
    b) or, with block_table int32 [B, max_pages], paged [num_pages, page_size, Hk, D(v)]
    (page_size a power of two). cache_seqlens: int or int32 [B], the keys held before the call
    (None: the whole cache, and then no k/v). k/v [B, S_new, Hk, D(v)]: appended into the caches
    in place at cache_seqlens[b] first, rotated with rotary_cos/rotary_sin [S_ro, R/2] when given
    (q too; rotary_interleaved as flash-attention). num_splits: 0 = heuristic, 1 = no split-KV.
    Returns out [B, Sq, Hq, Dv], and with return_softmax_lse the f32 LSE [B, Hq, Sq].
    alibi_slopes as flash_attn_func; cache_leftpad raises NotImplementedError."""
    from tiledsl.ops import fmha_fwd_kvcache

    if cache_leftpad is not None:
        raise _not_yet("cache_leftpad", "left padding of the KV cache")
    scale, window, cap = _check_common(q, softmax_scale, causal, window_size, softcap)
    for name, flag in (("rotary_interleaved", rotary_interleaved), ("return_softmax_lse", return_softmax_lse)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name}: expected a bool, got {flag!r}")
    tensors = {"q": q, "k_cache": k_cache, "v_cache": v_cache}
    tensors.update({n: x for n, x in (("k", k), ("v", v)) if x is not None})
    dev = _place(tensors, arch, device)
    if cache_seqlens is None:
        if k is not None:
            raise ValueError("cache_seqlens: needed to append k/v (the keys each sequence holds before the call)")
        pages = block_table.shape[1] if isinstance(block_table, torch.Tensor) and block_table.dim() == 2 else 1
        cache_seqlens = k_cache.shape[1] * pages  # flash-attention's default: the whole cache
    rotary = {}
    for name, x in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
        if x is not None:
            if not isinstance(x, torch.Tensor) or not x.is_floating_point():
                got = f"a tensor of {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
                raise ValueError(f"{name}: expected a float tensor [S_ro, rotary_dim / 2], got {got}")
            rotary[name] = _host_copy(name, x.detach().float())
    with _scope(dev):
        got = fmha_fwd_kvcache(
            _lib(q, dev, "q"), _lib(k_cache, dev, "k_cache"), _lib(v_cache, dev, "v_cache"),
            k=None if k is None else _lib(k, dev, "k"), v=None if v is None else _lib(v, dev, "v"),
            cache_seqlens=_int_arg("cache_seqlens", cache_seqlens, dev),
            cache_batch_idx=None if cache_batch_idx is None else _int_arg("cache_batch_idx", cache_batch_idx, dev),
            block_table=None if block_table is None else _int_arg("block_table", block_table, dev),
            rotary_interleaved=rotary_interleaved, scale=scale, causal=causal, window=window, softcap=cap,
            num_splits=num_splits, return_lse=return_softmax_lse, alibi_slopes=_alibi(alibi_slopes), device=dev,
            **rotary)
        if k is not None:  # the caches changed in place behind torch's back
            torch.autograd.graph.increment_version([k_cache, v_cache])
        if return_softmax_lse:
            return _torch(got[0]), _torch(got[1])
        return _torch(got)
