"""The attention library's Python API: `fmha_fwd` (with split-KV, `fmha_num_splits`),
`fmha_fwd_kvcache`, `fmha_bwd`, `fmha_bwd_plan`.

Each call validates every argument before anything runs (a ValueError naming the argument, what
was expected and what was given), picks the kernel variant (constexprs) for the request, compiles
it on first use through the on-disk cache (or loads it from there: `tiledsl prebuild fmha_fwd`
compiles variants ahead of time), and launches it on the device (default: HIP when an AMD
GPU is visible, otherwise the emulator for `arch`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tiledsl.device_array import DeviceArray
from tiledsl.fmha_dropout import NO_DROPOUT, DropoutCall, check_dropout, dropout_mask_output
from tiledsl.fmha_fp8 import Fp8Call, check_fp8, check_fp8_dtype, is_fp8
from tiledsl.kernels.fmha_configs import (
    VECTOR_ELEMS,
    fmha_defines,
    pack_gqa,
    split_acc_stride_units,
    variant_config,
)
from tiledsl.launcher import check_live_arrays, numpy_dtype
from tiledsl.plan import check_cu_seqlens
from tiledsl.reference import CausalArg, MaskParams, bias_shape, fmha_mask_params

I32_LIMIT = 2**31  # elements a call's q and output may span: the kernels' offsets are i32

if TYPE_CHECKING:
    from tiledsl.driver import CompiledKernel

KERNELS = Path(__file__).resolve().parent / "kernels"
MAX_HDIM = 256


def _dtype_name(a: np.ndarray) -> str | None:
    for name in ("f16", "bf16"):
        if a.dtype == numpy_dtype(name):
            return name
    return None


def _check_array(name: str, x: Any, rank: int, what: str) -> np.ndarray | DeviceArray:
    """x, checked; a numpy input whose strides a kernel cannot take is copied (host_readable)."""
    if not isinstance(x, np.ndarray | DeviceArray):
        raise ValueError(f"{name}: expected a numpy array or DeviceArray {what}, got {type(x).__name__}")
    if x.ndim != rank:
        raise ValueError(f"{name}: expected {rank} dims {what}, got shape {x.shape}")
    return host_readable(x)


def host_readable(x: Any) -> Any:
    """A numpy array the launcher can copy to the device as it is: x, or a contiguous copy when a
    stride is negative (a reversed view) or not a whole number of elements. Numpy inputs are
    copied to the device anyway; only arrays a call writes into must keep their identity."""
    if isinstance(x, np.ndarray) and any(s < 0 or s % x.itemsize for s in x.strides):
        return np.ascontiguousarray(x)
    return x


def _to_bshd(x: Any, layout: str, varlen: bool) -> Any:
    """A [B, S, H, D] view of x (no copy): the kernel takes any strides."""
    if varlen:
        x = x.expand() if isinstance(x, DeviceArray) else x[None]
    return x.transpose(0, 2, 1, 3) if layout == "bhsd" else x


def _elem_strides(x: Any) -> tuple[int, ...]:
    return tuple(s // x.dtype.itemsize for s in x.strides) if isinstance(x, np.ndarray) else x.strides


def unit_last_stride(*tensors: Any) -> bool:
    """Do all `tensors` have a contiguous head dim? Vector memory access needs it; other strides
    get the general variant."""
    return all(x.shape[-1] == 1 or _elem_strides(x)[-1] == 1 for x in tensors)


def rows_apart(*tensors: Any) -> bool:
    """Do the rows of every dim of `tensors` lie apart (each dim's stride above the head dim's span:
    not a broadcast over a sequence)? Variants compiled for standard layouts bound masked rows with
    buffer descriptors (CompileOptions.disjoint_rows); others get the general variant."""
    from tiledsl.launcher import rows_apart as apart

    # A size-1 dim's stride does not matter: the launchers pass one that suits (numpy's x[None] has 0).
    return all(x is None or not x.size or all(ok or n == 1 for n, ok in zip(x.shape, apart(x.shape, _elem_strides(x)),
                                                                             strict=True)) for x in tensors)


def aligned_names(contiguous: bool, **tensors: Any) -> tuple[str, ...]:
    """The names of the tensors whose passed strides are multiples of 16 bytes: their row starts
    are provably aligned, so the kernel may use vector access (CompileOptions.stride_units). A
    contiguous variant does not pass the head dim's stride (it is 1); a general one passes all."""
    passed = (lambda x: x.ndim - 1) if contiguous else (lambda x: x.ndim)
    return tuple(name for name, x in tensors.items()
                 if all(n == 1 or s % VECTOR_ELEMS == 0
                        for n, s in zip(x.shape[:passed(x)], _elem_strides(x)[:passed(x)], strict=True)))


def spans_large(*tensors: Any) -> bool:
    """Does any of `tensors` span more bytes than a buffer descriptor reaches (2 GiB)? Such a call
    compiles its stages with 64-bit global addresses (CompileOptions.buffer_masks=False)."""
    from tiledsl.launcher import BUFFER_REACH, span_bytes

    return any(x is not None and span_bytes(x.shape, _elem_strides(x), x.dtype.itemsize) > BUFFER_REACH
               for x in tensors)


def host_values(name: str, x: Any) -> Any:
    """A small argument the host must read (offsets, lengths, logits): a DeviceArray's values copied
    back (a freed one named), anything else as given."""
    if isinstance(x, DeviceArray):
        if x.buffer.freed:
            raise ValueError(f"{name}: its DeviceArray was freed")
        return x.numpy()
    return x


def _check_cu_seqlens(name: str, cu: Any, total: int) -> np.ndarray:
    return check_cu_seqlens(name, host_values(name, cu), total)


def check_heads(d: int, dv: int, hq: int, hk: int, k_name: str, v_name: str) -> None:
    """Head dims within 1..MAX_HDIM, and query heads a multiple of key/value heads."""
    for name, hd in (("q", d), (v_name, dv)):
        if not 1 <= hd <= MAX_HDIM:
            raise ValueError(f"{name}: head dim {hd} is not supported: expected 1..{MAX_HDIM}")
    if hk == 0:
        raise ValueError(f"{k_name}: expected at least one key/value head, got 0")
    if hq % hk:
        raise ValueError(f"{k_name}: the number of query heads ({hq}) must be a multiple of key/value heads, "
                         f"got {hk}")


def check_query_elems(b: int, sq: int, hq: int, d: int) -> None:
    """q's and the output's elements fit the kernels' i32 offsets (checked before the output is
    allocated: a broadcast q can be small in memory and name a huge output)."""
    if b * sq * hq * d > I32_LIMIT:
        raise ValueError(f"q: {b} x {sq} x {hq} x {d} elements (batch x sequence x heads x head dim) exceed "
                         f"the kernels' i32 offsets ({I32_LIMIT})")


def check_max_seqlen(name: str, given: Any, longest: int, rows: int) -> int:
    """A max_seqlen argument (None: the longest sequence) as the grid is sized by it: an int at
    least the longest sequence, or a ValueError. A bound past the tensor's rows (a model's context
    length passed for every call) is taken as the rows: no sequence is longer, and a grid sized
    by 2**31 - 1 could not launch."""
    if given is None:
        return longest
    if not isinstance(given, int | np.integer) or isinstance(given, bool) or given < longest:
        raise ValueError(f"{name}: expected an int >= the longest sequence ({longest}), got {given!r}")
    return int(min(given, max(rows, longest)))


F32_MAX = float(np.finfo(np.float32).max)
WINDOW_UNLIMITED = 2**30  # window sides from here on mean -1: longer than any sequence (rows are i32 indices)
# The kernels cap logits as softcap * tanh(s / softcap) with the fast tanh (docs/language.md), whose
# error near 0 is absolute, about 2e-7: times the cap, a logit error of 2e-4 at this bound, below
# f16's precision (caps in use are 30-50). Larger caps are refused rather than computed inexactly
# (at 1e6 outputs were off by 0.07).
SOFTCAP_MAX = 1000.0


def check_options(scale: float | None, d: int, softcap: float, causal: CausalArg, window: Any,
                  sink: Any, hq: int) -> tuple[float, MaskParams, np.ndarray | None]:
    """Check the attention options every forward/backward entry point shares: (scale, mask, sink
    as f32 or None), or a ValueError naming the argument."""
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if not _f32_number(scale):
        raise ValueError(f"scale: expected a finite number within f32 range, got {scale!r}")
    if not _f32_number(softcap) or softcap < 0:
        raise ValueError(f"softcap: expected a finite number >= 0 within f32 range (0 = off), got {softcap!r}")
    if softcap > SOFTCAP_MAX:
        raise ValueError(f"softcap: expected at most {SOFTCAP_MAX:g} (0 = off), got {softcap!r}: the kernels' tanh "
                         "is exact to about 2e-7 absolute near 0, an error a larger cap scales past f16's precision "
                         "(caps in use are 30-50); pass 0 for no cap")
    if not (isinstance(causal, bool | np.bool_) or causal in ("top_left", "bottom_right")):
        raise ValueError(f"causal: expected a bool, 'top_left' or 'bottom_right', got {causal!r}")
    if not (isinstance(window, tuple | list) and len(window) == 2
            and all(isinstance(w, int | np.integer) and not isinstance(w, bool | np.bool_) for w in window)):
        raise ValueError(f"window: expected a pair of ints (left, right), got {window!r}")
    if max(window) >= 2**31:
        raise ValueError(f"window: expected sizes below 2**31 (-1 for unlimited), got {tuple(window)!r}")
    # A side of WINDOW_UNLIMITED or more reaches past every key of any sequence the kernels take,
    # so it is unlimited (-1): the kernels' i32 bounds `i + shift + right` would wrap for it.
    window = tuple(-1 if w >= WINDOW_UNLIMITED else int(w) for w in window)
    try:
        mask = fmha_mask_params(causal, (int(window[0]), int(window[1])))
    except ValueError as exc:
        raise ValueError(f"{'causal' if 'causal' in str(exc) else 'window'}: {exc}") from None
    sink32 = None
    if sink is not None:
        sink_arr = np.asarray(host_values("sink", sink))
        if sink_arr.shape != (hq,) or not np.issubdtype(sink_arr.dtype, np.floating):
            raise ValueError(f"sink: expected a float array of shape ({hq},) (one logit per query head), "
                             f"got {sink_arr.dtype} {sink_arr.shape}")
        with np.errstate(over="ignore"):  # a logit past the f32 range becomes inf: refused below
            sink32 = np.ascontiguousarray(sink_arr, dtype=np.float32)
        bad = np.flatnonzero(np.isnan(sink32) | (sink32 == np.inf))
        if len(bad):
            raise ValueError(f"sink: head {bad[0]} has logit {sink_arr[bad[0]]} (as f32: {sink32[bad[0]]}); expected "
                             "finite f32 logits, or -inf for a head without a sink (a +inf sink would take all "
                             "the attention)")
    return float(scale), mask, sink32


def check_bool(name: str, x: Any) -> None:
    """A flag argument: a bool (numpy's too), never a truthy stand-in like 1 or "yes"."""
    if not isinstance(x, bool | np.bool_):
        raise ValueError(f"{name}: expected a bool, got {x!r}")


def _f32_number(x: Any) -> bool:
    """A real number (not a bool) that is finite as an f32 kernel argument."""
    return (isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool | np.bool_)
            and math.isfinite(float(x)) and abs(float(x)) <= float(np.finfo(np.float32).max))


def check_arch(arch: Any) -> None:
    """An `arch` argument names one of the five archs."""
    from tiledsl.backends.rocm.arch import ARCH_NAMES

    if not isinstance(arch, str) or arch not in ARCH_NAMES:
        raise ValueError(f"arch: expected one of {', '.join(ARCH_NAMES)}, got {arch!r}")


def free_on_failure(arrays: list[Any]) -> None:
    """Free the DeviceArrays a failed call made for its outputs (the caller never sees them)."""
    for x in arrays:
        if isinstance(x, DeviceArray) and not x.buffer.freed:
            x.free()


def resolve_device(device: Any, on_device: bool, q: Any, arch: str | None) -> tuple[Any, str]:
    """The device a call runs on (q's for DeviceArrays, else the default for `arch`) and its arch."""
    from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
    from tiledsl.backends.rocm.runtime import default_device, device_from

    if arch is not None:
        check_arch(arch)
    if device is None and on_device:
        device = q.device
    if device is not None:
        device = device_from(device, arch)
    else:
        if arch is None:
            raise ValueError(f"arch: expected one of {', '.join(ARCH_NAMES)} (or pass device=...), got None")
        device = default_device(arch)
    dev_arch = getattr(getattr(device, "arch", None), "name", getattr(device, "arch", None))
    if arch is not None and dev_arch is not None and get_arch(arch).name != dev_arch:
        raise ValueError(f"arch: {arch} does not match the device's arch {dev_arch}")
    return device, dev_arch or arch


@dataclass
class AttentionCall:
    """A checked attention call: [B, S, H, D] views of q/k/v, sizes, options and the device."""

    q4: Any
    k4: Any
    v4: Any
    dtype: str
    on_device: bool
    varlen: bool
    batch: int  # sequences (group mode: len(cu_seqlens) - 1)
    b: int  # the tensors' batch dim (1 in group mode)
    sq: int
    sk: int
    hq: int
    hk: int
    d: int
    dv: int
    scale: float
    softcap: float
    mask: MaskParams
    sink32: np.ndarray | None
    cuq: np.ndarray
    cuk: np.ndarray
    max_q: int
    max_k: int
    device: Any
    arch: str


def validate_attention(q: Any, k: Any, v: Any, *, scale: float | None, causal: CausalArg,
                       window: tuple[int, int], softcap: float, sink: np.ndarray | None,
                       cu_seqlens_q: np.ndarray | None, cu_seqlens_k: np.ndarray | None, max_seqlen_q: int | None,
                       max_seqlen_k: int | None, layout: str, arch: str | None, device: Any,
                       fp8: bool = False) -> AttentionCall:
    """Check the arguments shared by the forward and the backward (each problem a ValueError
    naming the argument) and resolve the device. fp8: q/k/v may be e4m3 (the forward)."""
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"layout: expected 'bshd' or 'bhsd', got {layout!r}")
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen and (cu_seqlens_q is None or cu_seqlens_k is None):
        raise ValueError("cu_seqlens_q and cu_seqlens_k: group mode needs both, got only "
                         + ("cu_seqlens_q" if cu_seqlens_q is not None else "cu_seqlens_k"))
    rank = 3 if varlen else 4
    what = ("[total, H, D]" if layout == "bshd" else "[H, total, D]") if varlen else \
        ("[B, S, H, D]" if layout == "bshd" else "[B, H, S, D]")
    q, k, v = (_check_array(n, x, rank, what) for n, x in (("q", q), ("k", k), ("v", v)))
    on_device = isinstance(q, DeviceArray)
    for name, x in (("k", k), ("v", v)):
        if isinstance(x, DeviceArray) != on_device:
            raise ValueError(f"{name}: expected a {'DeviceArray' if on_device else 'numpy array'} like q, "
                             f"got {type(x).__name__}")
    dt = "f8e4m3" if fp8 and is_fp8(q.dtype) else _dtype_name(q)
    if dt is None:
        wanted = "float16, bfloat16 or float8_e4m3 (fp8)" if fp8 else "float16 or bfloat16"
        raise ValueError(f"q: expected dtype {wanted}, got {q.dtype}"
                         + (" (fp8 is forward only: fmha_fwd)" if is_fp8(q.dtype) else ""))
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise ValueError(f"{name}: expected dtype {q.dtype} (the dtype of q), got {x.dtype}")
    q4, k4, v4 = (_to_bshd(x, layout, varlen) for x in (q, k, v))
    b, sq, hq, d = q4.shape
    bk, sk, hk, dk = k4.shape
    if bk != b:
        raise ValueError(f"k: batch {bk} differs from q's batch {b}")
    if dk != d:
        raise ValueError(f"k: head dim {dk} differs from q's head dim {d}")
    if v4.shape[:3] != k4.shape[:3]:
        raise ValueError(f"v: expected the batch, sequence and head sizes of k {k4.shape[:3]}, got {v4.shape[:3]}")
    dv = v4.shape[3]
    check_heads(d, dv, hq, hk, "k", "v")
    check_query_elems(b, sq, hq, max(d, dv))
    scale, mask, sink32 = check_options(scale, d, softcap, causal, window, sink, hq)
    if varlen:
        cuq = _check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, sq)
        cuk = _check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, sk)
        if len(cuq) != len(cuk):
            raise ValueError(f"cu_seqlens_k: expected length {len(cuq)} (that of cu_seqlens_q), got {len(cuk)}")
        batch = len(cuq) - 1
        longest_q, longest_k = int(np.diff(cuq).max()), int(np.diff(cuk).max())
    else:
        cuq = cuk = np.zeros(1, np.int32)
        batch, longest_q, longest_k = b, sq, sk
    max_q = check_max_seqlen("max_seqlen_q", max_seqlen_q, longest_q, sq)
    max_k = check_max_seqlen("max_seqlen_k", max_seqlen_k, longest_k, sk)

    device, arch = resolve_device(device, on_device, q, arch)
    check_live_arrays(device, {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
                               "sink": sink}, "call")
    if dt == "f8e4m3":
        check_fp8_dtype(q.dtype, arch)

    return AttentionCall(q4=q4, k4=k4, v4=v4, dtype=dt, on_device=on_device, varlen=varlen, batch=batch, b=b, sq=sq,
                         sk=sk, hq=hq, hk=hk, d=d, dv=dv, scale=float(scale), softcap=float(softcap), mask=mask,
                         sink32=sink32, cuq=cuq, cuk=cuk, max_q=max_q, max_k=max_k, device=device, arch=arch)


BIAS_PAD = 8  # the kernels read bias rows in groups of 8 keys: rows are padded to a multiple


@dataclass
class BiasCall:
    """A checked bias or ALiBi argument and the views the kernels take (docs/bias.md)."""

    kind: str  # "none", "tensor" or "alibi" (fmha_defines' bias)
    dtype: str  # the bias tensor's dtype name ("f32" without one)
    shape: tuple[int, ...]  # the bias as given (dbias has this shape)
    full: tuple[int, ...]  # what it broadcasts to: [B, Hq, Sq, Sk], group mode [Hq, total_q, K]
    bias4: Any  # the kernel's [B, Hq, Sq, K8] view (group mode [1, Hq, total_q, K8]), or None
    alibi2: Any  # the kernel's [batch, Hq] f32 slopes view, or None
    owned: list[Any]  # device copies made for the call (freed by the caller)

    def broadcast_dims(self) -> tuple[int, ...]:
        """The dims of `full` the bias is broadcast along (dbias sums over them)."""
        pad = (1,) * (len(self.full) - len(self.shape)) + tuple(self.shape)
        return tuple(i for i, (n, f) in enumerate(zip(pad, self.full, strict=True)) if n == 1 and f != 1)

    def free(self) -> None:
        for arr in self.owned:
            arr.free()
        self.owned.clear()


def _strided_view(x: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
    """x (numpy or DeviceArray) seen with another shape and element strides, from its first element."""
    if isinstance(x, DeviceArray):
        return DeviceArray(x.buffer, tuple(shape), x.dtype, tuple(strides), x.offset)
    isz = x.dtype.itemsize
    return np.lib.stride_tricks.as_strided(x, tuple(shape), tuple(s * isz for s in strides), writeable=False)


def check_bias(bias: Any, alibi_slopes: Any, c: AttentionCall) -> BiasCall:
    """Check `bias` / `alibi_slopes` against the call (each problem a ValueError naming the
    argument) and make the kernels' views of them. The bias keeps its memory: broadcast dims get
    stride 0, and its rows are padded to a multiple of BIAS_PAD keys (a copy, made only when its
    key dim is not a multiple already and its buffer has no room past the end)."""
    none = BiasCall("none", "f32", (), (), None, None, [])
    if bias is not None and alibi_slopes is not None:
        raise ValueError("bias and alibi_slopes: give at most one (ALiBi is a bias)")
    if alibi_slopes is not None:
        check_live_arrays(c.device, {"alibi_slopes": alibi_slopes}, "call")  # before its values are read back
        return replace(none, kind="alibi", alibi2=alibi_view(alibi_slopes, c.hq, c.batch, c.on_device))
    if bias is None:
        return none
    if not isinstance(bias, np.ndarray | DeviceArray):
        raise ValueError(f"bias: expected a numpy array or DeviceArray, got {type(bias).__name__}")
    if isinstance(bias, DeviceArray) != c.on_device:
        raise ValueError(f"bias: expected a {'DeviceArray' if c.on_device else 'numpy array'} like q, "
                         f"got {type(bias).__name__}")
    check_live_arrays(c.device, {"bias": bias}, "call")  # before a padded copy reads it back
    if c.dtype == "f8e4m3" and bias.dtype != np.float32:
        raise ValueError(f"bias: expected dtype float32 with fp8 q/k/v, got {bias.dtype}")
    if bias.dtype not in (c.q4.dtype, np.dtype(np.float32)):
        raise ValueError(f"bias: expected dtype {c.q4.dtype} (the dtype of q) or float32, got {bias.dtype}")
    longest_k = int(np.diff(c.cuk).max()) if c.varlen else c.sk
    full = bias_shape(c.varlen, c.b, c.hq, c.sq, c.sk, longest_k, tuple(bias.shape))
    if isinstance(bias, np.ndarray) and any(st < 0 for st in bias.strides):
        bias = np.ascontiguousarray(bias)
    rank = len(full)
    strides = (0,) * (rank - bias.ndim) + tuple(_elem_strides(bias))
    shape = (1,) * (rank - bias.ndim) + tuple(bias.shape)
    owned: list[Any] = []
    keys = full[-1]
    k8 = -(-keys // BIAS_PAD) * BIAS_PAD
    base = bias
    if shape[-1] != 1 and k8 != keys:
        # The kernels read up to 7 keys past a row's end: a view BIAS_PAD-wide rows over the same
        # memory when the buffer extends that far, else a padded copy.
        span = sum((n - 1) * st for n, st in zip(shape[:-1], strides[:-1], strict=True)) + (k8 - 1) * strides[-1] + 1
        roomy = isinstance(bias, DeviceArray) and strides[-1] >= 0 and \
            (bias.offset + span) * bias.dtype.itemsize <= bias.buffer.size
        if not roomy:
            host = bias.numpy() if isinstance(bias, DeviceArray) else bias
            padded = np.zeros(tuple(host.shape[:-1]) + (k8,), host.dtype)
            padded[..., :keys] = host
            base = DeviceArray.from_numpy(c.device, padded, "bias") if isinstance(bias, DeviceArray) else padded
            if isinstance(base, DeviceArray):
                owned.append(base)
            strides = (0,) * (rank - bias.ndim) + tuple(_elem_strides(base))
    strides = tuple(0 if n == 1 else st for n, st in zip(shape, strides, strict=True))
    # The kernels read whole groups of BIAS_PAD keys: a bias broadcast over keys (stride 0) is
    # viewed that wide too, so a single key (Sk = 1) is not read through a stride-1 view past it.
    view_shape = full[:-1] + (k8,)
    view = _strided_view(base, view_shape, strides)
    bias4 = (_strided_view(view, (1,) + view_shape, (0,) + strides)) if c.varlen else view
    dt = "f32" if bias.dtype == np.float32 else c.dtype
    return BiasCall("tensor", dt, tuple(bias.shape), full, bias4, None, owned)


def alibi_view(slopes: Any, hq: int, batch: int, on_device: bool) -> Any:
    """alibi_slopes as the kernels' [batch, Hq] f32 view (stride 0 over the batch for [Hq]), or
    a ValueError naming it."""
    want = f"({hq},) or ({batch}, {hq})"
    if isinstance(slopes, DeviceArray):
        if not on_device:
            raise ValueError("alibi_slopes: expected a numpy array like q, got DeviceArray")
        if slopes.dtype != np.float32:
            raise ValueError(f"alibi_slopes: expected dtype float32, got {slopes.dtype}")
        if tuple(slopes.shape) not in ((hq,), (batch, hq)):
            raise ValueError(f"alibi_slopes: expected shape {want}, got {tuple(slopes.shape)}")
        _check_finite_slopes(host_values("alibi_slopes", slopes))  # a few words: checked like numpy's
        strides = ((0,) if slopes.ndim == 1 else ()) + tuple(slopes.strides)
        return _strided_view(slopes, (batch, hq), strides)
    if not isinstance(slopes, np.ndarray):
        raise ValueError(f"alibi_slopes: expected a float32 numpy array or DeviceArray, got {type(slopes).__name__}")
    if tuple(slopes.shape) not in ((hq,), (batch, hq)) or not np.issubdtype(slopes.dtype, np.floating):
        raise ValueError(f"alibi_slopes: expected a float array of shape {want} (one slope per query head, "
                         f"or per sequence and query head), got {slopes.dtype} {tuple(slopes.shape)}")
    with np.errstate(over="ignore"):
        s32 = np.ascontiguousarray(slopes, dtype=np.float32)
    _check_finite_slopes(s32)
    return np.broadcast_to(s32, (batch, hq))


def _check_finite_slopes(s32: np.ndarray) -> None:
    bad = np.flatnonzero(~np.isfinite(s32))
    if len(bad):
        at = tuple(int(i) for i in np.unravel_index(bad[0], s32.shape))
        raise ValueError(f"alibi_slopes: slope {at[0] if len(at) == 1 else at} is {s32.flat[bad[0]]} as f32; "
                         "expected finite slopes")


def bias_env(bc: BiasCall) -> dict[str, Any]:
    """The call environment's bias entries (what Ref("bias") / Ref("alibi_slopes") bind to)."""
    return {"bias": bc.bias4, "alibi_slopes": bc.alibi2}


def fmha_fwd(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float | None = None,
             causal: CausalArg = False, window: tuple[int, int] = (-1, -1), softcap: float = 0.0,
             sink: np.ndarray | None = None, cu_seqlens_q: np.ndarray | None = None,
             cu_seqlens_k: np.ndarray | None = None, max_seqlen_q: int | None = None,
             max_seqlen_k: int | None = None, return_lse: bool = False, layout: str = "bshd",
             arch: str | None = None, device: Any = None, num_splits: int = 1, bias: Any = None,
             alibi_slopes: Any = None, dropout_p: float = 0.0, seed: int = 0, offset: int = 0,
             return_dropout_mask: bool = False, q_descale: Any = None, k_descale: Any = None,
             v_descale: Any = None, out_dtype: str | None = None) -> Any:
    """Attention forward: softmax(mask(cap(scale * q k^T) + bias)) v, fp16/bf16 in, f32 accumulation.

    Shapes and conventions are flash-attention's (see `tiledsl.reference.fmha_fwd_reference`, the
    numpy model of this function): q [B, Sq, Hq, D], k [B, Sk, Hk, D], v [B, Sk, Hk, Dv] for
    layout "bshd", [B, H, S, D] for "bhsd"; group (varlen) mode with cu_seqlens_q/cu_seqlens_k:
    q [total_q, Hq, D] etc. Hq must be a multiple of Hk (GQA/MQA). causal: False, True (bottom-
    right aligned, flash-attention's convention), "top_left" or "bottom_right"; window (left,
    right), -1 = unlimited (as is any size of 2**30 or more); scaled logits (q.k * scale) must stay
    below 2**24 in magnitude, as in flash-attention (the row max is subtracted inside one fma: past
    that its rounding error reaches exp2's argument, and rows become inf/inf). softcap in (0, 1000]
    caps logits with tanh;
    sink: f32 [Hq] logits joining the denominator (sink and cu_seqlens may be DeviceArrays too: the
    host reads them). A row whose keys are all masked gives output 0 and LSE -inf,
    as does a packed row past the last sequence (cu_seqlens_q[-1] below total_q; the backward's
    gradients are 0 there). Returns out (the layout of q, head dim Dv, dtype of q) and, with return_lse, the natural-log
    LSE, f32 [B, Hq, Sq] (group mode: [Hq, total_q]). q, k, v may be numpy arrays (copied to the
    device and back) or `tiledsl.device_array.DeviceArray`s (used in place; the outputs are then
    DeviceArrays on the same device).
    num_splits: split-KV (docs/inference.md): 1 (the default) runs one kernel; >= 2 cuts each
    query block's keys into that many ranges (clamped to the key blocks there are) whose partial
    results a second kernel combines, for grids too small to fill the GPU (decode); 0 lets
    `fmha_num_splits` choose.
    bias (docs/bias.md): added to the capped logits before the mask; f16/bf16 (q's dtype) or f32,
    any strides, broadcastable to [B, Hq, Sq, Sk] (group mode: [Hq, total_q, K] with K >= the
    longest key sequence; sequence b reads rows cu_seqlens_q[b].. and columns 0..seqlen_k-1).
    alibi_slopes: f32 [Hq] or [batch, Hq], bias -slope * |i + seqlen_k - seqlen_q - j|
    (flash-attention's ALiBi). At most one of the two.
    dropout_p in [0, 1) (docs/dropout.md): P is dropped after the softmax and rescaled by
    1 / (1 - p); the keep bits are `tiledsl.reference.dropout_keep_mask(seed, offset, ...)` (seed
    in [0, 2^64), offset in [0, 2^31)), which `fmha_bwd` regenerates from the same seed and offset.
    return_dropout_mask=True appends the keep bits, bool [B, Hq, Sq, Sk] (group mode: [Hq,
    total_q, max_seqlen_k], sequence b's rows from cu_seqlens_q[b] and its keys from column 0,
    False past them), whatever the attention mask; a last stage of the plan writes them.
    fp8 (docs/fp8.md): q, k, v of ml_dtypes float8_e4m3fnuz on gfx942, float8_e4m3fn on gfx950 and
    gfx1201, with per-tensor descale factors q_descale, k_descale, v_descale (positive floats,
    default 1: the values are x * descale); the logits are scale * q_descale * k_descale * q.k, P is
    rounded to e4m3 for P v, and the output is out_dtype "bf16" (default) or "f16".
    """
    dc = check_dropout(dropout_p, seed, offset, return_dropout_mask)
    check_bool("return_lse", return_lse)
    num_splits = check_num_splits(num_splits)
    c = validate_attention(q, k, v, scale=scale, causal=causal, window=window, softcap=softcap, sink=sink,
                           cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                           max_seqlen_k=max_seqlen_k, layout=layout, arch=arch, device=device, fp8=True)
    fc = check_fp8(c.q4.dtype, c.arch, q_descale, k_descale, v_descale, out_dtype)
    if fc is not None and not abs(fc.qk_scale(c.scale)) <= F32_MAX:  # each factor alone was checked
        raise ValueError(f"scale * q_descale * k_descale: {c.scale:g} * {fc.q_descale:g} * {fc.k_descale:g} = "
                         f"{fc.qk_scale(c.scale):g} does not fit in f32 (largest finite {F32_MAX:g}), the logits' "
                         "scale the kernel takes")
    bc = check_bias(bias, alibi_slopes, c)
    try:
        return _fwd_run(c, bc, dc, fc, layout=layout, return_lse=return_lse, num_splits=num_splits)
    finally:
        bc.free()


def _fwd_run(c: AttentionCall, bc: BiasCall, dc: DropoutCall, fc: Fp8Call | None, *, layout: str,
             return_lse: bool, num_splits: int) -> Any:
    """fmha_fwd after its checks: allocate the outputs, build the plan, run it."""
    made: list[Any] = []  # the outputs on the device, freed if the call fails
    try:
        return _fwd_outputs_and_run(c, bc, dc, fc, layout=layout, return_lse=return_lse, num_splits=num_splits,
                                    made=made)
    except BaseException:
        free_on_failure(made)
        raise


def zero_rows_past(device: Any, out: DeviceArray, cu_seqlens: np.ndarray, rows: int, varlen: bool) -> None:
    """Zeros a new group-mode output whose packed rows go on past its last sequence (cu_seqlens[-1]
    < rows): no kernel writes those rows, and they read 0 as the host path's do, not whatever the
    device memory held."""
    if varlen and int(cu_seqlens[-1]) < rows:
        device.fill(out.buffer, 0)


def _fwd_outputs_and_run(c: AttentionCall, bc: BiasCall, dc: DropoutCall, fc: Fp8Call | None, *, layout: str,
                         return_lse: bool, num_splits: int, made: list[Any]) -> Any:
    q4, k4, v4, varlen, on_device, device = c.q4, c.k4, c.v4, c.varlen, c.on_device, c.device
    b, sq, hq, d, dv, dt, arch, mask, sink32 = c.b, c.sq, c.hq, c.d, c.dv, c.dtype, c.arch, c.mask, c.sink32
    batch, max_q, cuq, cuk, scale, softcap = c.batch, c.max_q, c.cuq, c.cuk, c.scale, c.softcap
    # The output in the caller's layout, and its [B, S, H, Dv] view for the kernel.
    out_shape = (b, sq, hq, dv) if layout == "bshd" else (b, hq, sq, dv)
    out_dt = numpy_dtype(fc.out_dtype) if fc else q4.dtype
    if on_device:
        out = DeviceArray.empty(device, out_shape[1:] if varlen else out_shape, out_dt, "out")
        made.append(out)
        zero_rows_past(device, out, cuq, sq, varlen)
    else:
        out = np.zeros(out_shape[1:] if varlen else out_shape, dtype=out_dt)
    out4 = _to_bshd(out, layout, varlen)
    if not return_lse:  # never written: one row broadcast over batch and heads
        lse = np.broadcast_to(np.zeros(max(sq, 1), np.float32)[:sq], (b, hq, sq))
    elif on_device:
        lse = DeviceArray.from_numpy(device, np.full((b, hq, sq), -np.inf, np.float32), "lse")
        made.append(lse)
    else:
        lse = np.full((b, hq, sq), -np.inf, np.float32)
    sink_arg = sink32 if sink32 is not None else np.zeros(hq, np.float32)
    dropped = {}
    if dc.return_mask:
        keep, dropped["dropout_mask"] = dropout_mask_output((hq, sq, c.max_k) if varlen else (b, hq, sq, c.sk),
                                                            varlen, device, on_device)
        made.append(keep)
    if dc.on:
        dropped.update(dc.env())
    if fc:
        dropped.update(fc.env())
        scale = fc.qk_scale(scale)

    if batch and sq and max_q:
        from tiledsl.fmha_splitkv import SplitShape, build_attention_plan, wide_query_blocks

        biased = {"bias": bc.bias4} if bc.bias4 is not None else {}
        contiguous = unit_last_stride(q4, k4, v4, *biased.values()) and rows_apart(q4, k4, v4, out4)
        aligned = aligned_names(contiguous, q=q4, k=k4, v=v4, o=out4, **biased)
        env = {"q": q4, "k": k4, "v": v4, "o": out4, "lse": lse, "sink": sink_arg, "cu_seqlens_q": cuq,
               "cu_seqlens_k": cuk, "scale": float(scale), "softcap": float(softcap) or 1.0,
               "window_left": mask.left, "window_right": mask.right, "batch": batch, "max_seqlen_q": max_q,
               **NO_KV_CACHE, **bias_env(bc), **dropped}
        masked = mask.kind != "none"
        packed = pack_gqa(arch, d, dv, masked, max_q, hq, c.hk)
        shape = SplitShape(
            arch=arch, dtype=dt, hdim_q=d, hdim_v=dv, mask=mask, varlen=varlen, lse=return_lse,
            sink=sink32 is not None, softcap=float(softcap) > 0, contiguous=contiguous, aligned=aligned,
            num_splits=_splits_count(num_splits, arch, batch=batch, hq=hq, hk=c.hk, max_q=max_q, max_k=c.max_k,
                                     d=d, dv=dv, masked=masked), b=b, hq=hq, sq=sq,
            heads_per_block=hq // c.hk if packed else 1, bias=bc.kind, bias_dtype=bc.dtype, dropout=dc.on,
            dropout_mask=dc.return_mask, out_dtype=fc.out_dtype if fc else None, batch=batch, max_seqlen_q=max_q,
            large=spans_large(q4, k4, v4, out4, lse, *biased.values()))
        if varlen:  # the grid's workgroups with rows to do decide the query tile, not the longest sequence's
            wide = wide_query_blocks(shape, seqlens_q=np.diff(cuq).tolist())
            shape = replace(shape, query_tile="wide" if wide else "narrow")
        plan = build_attention_plan(shape)
        plan.run(device, env)
    result = (out,)
    if return_lse:
        result += ((lse.squeeze0() if on_device else lse[0]) if varlen else lse,)
    if dc.return_mask:
        result += (keep,)
    return result[0] if len(result) == 1 else result


def fmha_fwd_kvcache(q: Any, k_cache: Any, v_cache: Any, **options: Any) -> Any:
    """Attention against a KV cache, contiguous or paged, with an optional append and rotary
    embedding first: see `tiledsl.fmha_kvcache.fmha_fwd_kvcache` (the keywords) and
    docs/inference.md."""
    from tiledsl.fmha_kvcache import fmha_fwd_kvcache as run

    return run(q, k_cache, v_cache, **options)


def fmha_num_splits(arch: str, *, batch: int, nhead_q: int, max_seqlen_q: int, max_seqlen_k: int,
                    hdim_q: int, hdim_v: int | None = None, causal: CausalArg = False,
                    window: tuple[int, int] = (-1, -1), nhead_k: int | None = None) -> int:
    """The split count `fmha_fwd(..., num_splits=0)` (and `fmha_fwd_kvcache`) picks for these
    sizes (docs/inference.md); nhead_k: kv heads (default nhead_q), for GQA packing."""
    from tiledsl.fmha_splitkv import fmha_num_splits as heuristic

    check_arch(arch)
    sizes = {"batch": batch, "nhead_q": nhead_q, "max_seqlen_q": max_seqlen_q, "max_seqlen_k": max_seqlen_k,
             "hdim_q": hdim_q, "hdim_v": hdim_q if hdim_v is None else hdim_v,
             "nhead_k": nhead_q if nhead_k is None else nhead_k}
    for name, value in sizes.items():
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name}: expected an int >= 0, got {value!r}")
        if name.startswith("hdim") and not 1 <= value <= MAX_HDIM:
            raise ValueError(f"{name}: head dim {value} is not supported: expected 1..{MAX_HDIM}")
    if sizes["nhead_k"] == 0 or nhead_q % sizes["nhead_k"]:
        raise ValueError(f"nhead_k: expected a divisor of nhead_q ({nhead_q}), got {sizes['nhead_k']}")
    _, mask, _ = check_options(None, sizes["hdim_q"], 0.0, causal, window, None, nhead_q)
    masked = mask.kind != "none"
    return heuristic(arch, batch=batch, nhead_q=nhead_q, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                     hdim_q=hdim_q, hdim_v=hdim_v, masked=masked, nhead_k=nhead_k)


# The KV-cache arguments of fmha_fwd.tile for a call without a cache (never read).
NO_KV_CACHE = {"cache_seqlens": np.zeros(1, np.int32), "cache_batch_idx": np.zeros(1, np.int32),
               "block_table": np.zeros((1, 1), np.int32), "seqlen_new": 0, "page_shift": 0}


def check_num_splits(num_splits: Any) -> int:
    """num_splits as an int (numpy's ints too), or a ValueError naming it."""
    if not isinstance(num_splits, int | np.integer) or isinstance(num_splits, bool) or num_splits < 0:
        raise ValueError(f"num_splits: expected an int >= 0 (0 = heuristic, 1 = off), got {num_splits!r}")
    return int(num_splits)


def _splits_count(num_splits: int, arch: str, *, batch: int, hq: int, hk: int, max_q: int, max_k: int, d: int,
                  dv: int, masked: bool) -> int:
    """The split count a call runs with: the heuristic for 0, else the request clamped to the key
    blocks of the longest sequence (a split with nothing to do is never launched)."""
    from tiledsl.fmha_splitkv import fmha_num_splits, key_blocks

    if num_splits == 0:
        return fmha_num_splits(arch, batch=batch, nhead_q=hq, max_seqlen_q=max_q, max_seqlen_k=max_k,
                               hdim_q=d, hdim_v=dv, masked=masked, nhead_k=hk)
    return max(1, min(num_splits, key_blocks(arch, d, dv, masked, max_k)))


def compile_fmha_fwd(arch: str, *, dtype: str, hdim_q: int, hdim_v: int, mask: MaskParams, varlen: bool = False,
                     lse: bool = False, sink: bool = False, softcap: float = 0.0, contiguous: bool = True,
                     aligned: Sequence[str] = ("k", "o", "q", "v"), split: bool = False, kv_cache: str = "none",
                     pack_gqa: bool = False, page_size: int = 0, bias: str = "none",
                     bias_dtype: str = "f32", dropout: bool = False, out_dtype: str | None = None,
                     passes: int = 1, large: bool = False, wide: bool = False) -> CompiledKernel:
    """The fmha_fwd variant `fmha_fwd` launches for these features, from a kernel package or
    compiled through the compile cache (`tiledsl.library.library_kernel`). contiguous: the head
    dim of q/k/v has stride 1; aligned: the tensors whose other strides are multiples of 16 bytes;
    passes: 2 for paired query blocks (on request: tiledsl.fmha_splitkv.pair_query_blocks; compiled
    with spills allowed); large: a tensor of the call spans more than 2 GiB (no buffer
    accesses, `spans_large`); wide: the WIDE tile row of a large grid (`fmha_configs.fmha_config`)."""
    from tiledsl.library import library_kernel
    from tiledsl.options import CompileOptions

    cfg = variant_config(arch, dtype=dtype, hdim_q=hdim_q, hdim_v=hdim_v, mask=mask, bias=bias, dropout=dropout,
                         wide=wide)
    defines = fmha_defines(arch, dtype=dtype, hdim_q=hdim_q, hdim_v=hdim_v, mask=mask, varlen=varlen, lse=lse,
                           sink=sink, softcap=softcap, split=split, kv_cache=kv_cache, pack_gqa=pack_gqa,
                           page_size=page_size, bias=bias, bias_dtype=bias_dtype, dropout=dropout, out_dtype=out_dtype,
                           config=cfg)
    if passes != 1:
        defines["PASSES"] = str(passes)
    # Bias variants expect spills (allow_spills: the driver spends no second compile on many): the
    # tile rows keep the tested feature mixes free of VGPR spills up to hdim 128
    # (tests/test_fmha_bias.py), not every combination of strides. Dropout variants do at hdim 256
    # (fmha_configs.DROPPED). So do the general-stride variants (a head dim whose stride is not 1:
    # every element addressed on its own, which the rows are not tuned for; gfx1201 under a mask
    # spilled 3 registers at hdim 64). Every other variant accepts spills as a last resort: a
    # caller cannot choose the tile, and where no row fits a feature mix in registers, even with
    # the driver's min-reg retry, a slower kernel beats an error on valid input (README.md). The
    # manifest's vgpr_spill_count, `tiledsl inspect` and `tiledsl prebuild` say which spill.
    options = CompileOptions.make(arch, defines, unit_last_stride=contiguous, disjoint_rows=contiguous,
                                  stride_units=tuple((name, VECTOR_ELEMS) for name in sorted(aligned))
                                  + (split_acc_stride_units(hdim_v) if split and contiguous else ()),
                                  buffer_masks=not large, **cfg.scheduling(),
                                  allow_spills=bias != "none" or (dropout and max(hdim_q, hdim_v) > 128) or passes != 1
                                  or not contiguous, spills_last_resort=True)
    return library_kernel(KERNELS / "fmha_fwd.tile", arch, defines, options)


def _check_like(name: str, x: Any, like: Any, shape: tuple[int, ...], on_device: bool) -> Any:
    if not isinstance(x, np.ndarray | DeviceArray):
        raise ValueError(f"{name}: expected a numpy array or DeviceArray, got {type(x).__name__}")
    if isinstance(x, DeviceArray) != on_device:
        raise ValueError(f"{name}: expected a {'DeviceArray' if on_device else 'numpy array'} like q, "
                         f"got {type(x).__name__}")
    if tuple(x.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {tuple(x.shape)}")
    if x.dtype != like:
        raise ValueError(f"{name}: expected dtype {like}, got {x.dtype}")
    return x


def fmha_bwd(do: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, *, scale: float | None = None,
             causal: CausalArg = False, window: tuple[int, int] = (-1, -1), softcap: float = 0.0,
             sink: np.ndarray | None = None, cu_seqlens_q: np.ndarray | None = None,
             cu_seqlens_k: np.ndarray | None = None, max_seqlen_q: int | None = None,
             max_seqlen_k: int | None = None, layout: str = "bshd", deterministic: bool = False,
             workspace: Any = None, arch: str | None = None, device: Any = None, bias: Any = None,
             alibi_slopes: Any = None, return_dbias: bool = False, dropout_p: float = 0.0, seed: int = 0,
             offset: int = 0) -> tuple[Any, ...]:
    """Attention backward: (dq, dk, dv) for the forward `fmha_fwd(q, k, v, ...)` with the same
    options, given the output gradient `do`, the forward's `out` and its natural-log `lse`
    exactly as `fmha_fwd(..., return_lse=True)` returns them (see `tiledsl.reference.
    fmha_bwd_reference`, the numpy model). Runs the three-stage plan of `fmha_bwd_plan`
    (dot_do_o -> dq_dk_dv -> convert_dq) over one workspace: `workspace` is a Buffer of at least
    the plan's `workspace_size` bytes on the device, else one from the device's pool.
    deterministic=True: no atomics, bitwise-identical results whatever the schedule (dq_acc holds
    one slice per key block); the default adds dQ contributions with float atomics. With `sink`
    the result is (dq, dk, dv, dsink), dsink f32 [Hq] (numpy, or a DeviceArray for DeviceArrays).
    bias / alibi_slopes: as given to the forward (docs/bias.md). return_dbias=True (a bias tensor
    broadcast at most along the batch and the heads) appends dbias, the gradient of the bias in
    its shape and dtype, summed over the dims it was broadcast along (deterministic either way).
    dropout_p, seed, offset: those of the forward (docs/dropout.md); the keep bits are drawn again.
    numpy arrays in give numpy arrays out; DeviceArrays give DeviceArrays on the same device. Without
    `device`, a call of numpy arrays given a workspace runs on the workspace's device."""
    from tiledsl.backends.rocm.runtime.device import Device

    if device is None and not isinstance(q, DeviceArray) and isinstance(getattr(workspace, "device", None), Device):
        # numpy inputs: else each call would make a new emulator, which the workspace is not on
        # (DeviceArrays decide the device, and a workspace elsewhere is then the workspace's error)
        device = workspace.device
    plan, c, prep, bc = _bwd_call(do, q, k, v, out, lse, scale=scale, causal=causal, window=window, softcap=softcap,
                                  sink=sink, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                  max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, layout=layout,
                                  deterministic=deterministic, arch=arch, device=device, bias=bias,
                                  alibi_slopes=alibi_slopes, return_dbias=return_dbias, dropout_p=dropout_p,
                                  seed=seed, offset=offset)
    try:
        return _bwd_run(plan, c, prep, bc, do, q, k, v, out, lse, layout=layout, workspace=workspace,
                        return_dbias=return_dbias, dropout=check_dropout(dropout_p, seed, offset))
    finally:
        bc.free()


def _bwd_run(plan: Any, c: AttentionCall, prep: bool, bc: BiasCall, do: Any, q: Any, k: Any, v: Any, out: Any,
             lse: Any, *, layout: str, workspace: Any, return_dbias: bool,
             dropout: DropoutCall = NO_DROPOUT) -> tuple[Any, ...]:
    """fmha_bwd after its checks: device copies, outputs, the plan's run."""
    dev = c.device
    check_live_arrays(dev, {"do": do, "out": out, "lse": lse}, "call")
    if workspace is not None and prep:
        plan.check_workspace(dev, workspace)  # before anything is allocated or launched
    owned = []  # device copies of numpy arguments, freed at the end
    grads: list[Any] = []

    def on_dev(x: Any, name: str) -> Any:
        if isinstance(x, DeviceArray):
            return x
        arr = DeviceArray.from_numpy(dev, np.ascontiguousarray(x), name)
        owned.append(arr)
        return arr

    try:
        q_, k_, v_, do_, out_ = (on_dev(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v"), (do, "do"), (out, "out")))
        lse_ = on_dev(lse, "lse")
        wanted = [("dq", q_.shape, q_.dtype), ("dk", k_.shape, k_.dtype), ("dv", v_.shape, v_.dtype)]
        if c.sink32 is not None:
            wanted.append(("dsink", (c.hq,), np.dtype(np.float32)))
        if return_dbias:
            wanted.append(("dbias", bc.shape, np.dtype(np.float32) if bc.dtype == "f32" else q_.dtype))
        for name, shape, dtype in wanted:
            g = DeviceArray.empty(dev, shape, dtype, name)
            grads.append(g)
            if not c.on_device:
                owned.append(g)
        zero_rows_past(dev, grads[0], c.cuq, c.sq, c.varlen)
        for g in grads[1:3]:
            zero_rows_past(dev, g, c.cuk, c.sk, c.varlen)
        biases = bias_env(bc)
        if return_dbias:
            biases["dbias"] = _dbias_view(grads[-1])
        env = {"q": _to_bshd(q_, layout, c.varlen), "k": _to_bshd(k_, layout, c.varlen),
               "v": _to_bshd(v_, layout, c.varlen), "do": _to_bshd(do_, layout, c.varlen),
               "out": _to_bshd(out_, layout, c.varlen), "lse": lse_.expand() if c.varlen else lse_,
               "dq": _to_bshd(grads[0], layout, c.varlen), "dk": _to_bshd(grads[1], layout, c.varlen),
               "dv": _to_bshd(grads[2], layout, c.varlen), "cu_seqlens_q": c.cuq, "cu_seqlens_k": c.cuk,
               "scale": c.scale, "softcap": c.softcap or 1.0, "sink": c.sink32,
               "dsink": grads[3] if c.sink32 is not None else None, **biases,
               **(dropout.env() if dropout.on else {})}
        if prep:
            plan.run(dev, env, workspace)
        else:  # nothing to attend: zero gradients
            for g in grads:
                dev.fill(g.buffer, 0)
        result = tuple(g if c.on_device else g.numpy() for g in grads)
    except BaseException:
        if c.on_device:  # the caller's gradients, never handed over
            free_on_failure(grads)
        raise
    finally:
        for arr in owned:
            arr.free()
    return result  # type: ignore[return-value]


def fmha_bwd_plan(do: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, **options: Any) -> Any:
    """The `tiledsl.plan.Plan` that `fmha_bwd` runs for these arguments (same keywords, without
    `workspace`): `stage_names`, `workspace_size`, `info["nsplits"]`, `prepare_workspace(device,
    buf)`, `describe()` (the stages as a table and the workspace layout)."""
    options.pop("workspace", None)
    plan, _, _, bc = _bwd_call(do, q, k, v, out, lse, **options)
    bc.free()
    return plan


def _bwd_call(do: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, *, deterministic: bool = False,
              **options: Any) -> tuple[Any, AttentionCall, bool, BiasCall]:
    """Check a backward call and build its plan: (plan, the checked call, whether to run it, the
    checked bias; the caller frees its copies)."""
    from tiledsl.fmha_bwd import BwdShape, build_plan

    defaults = {"sink": None, "scale": None, "causal": False, "window": (-1, -1), "softcap": 0.0, "cu_seqlens_q": None,
                "cu_seqlens_k": None, "max_seqlen_q": None, "max_seqlen_k": None, "layout": "bshd", "arch": None,
                "device": None}
    bias, slopes, return_dbias = (options.pop(n, d) for n, d in (("bias", None), ("alibi_slopes", None),
                                                                   ("return_dbias", False)))
    dropout = check_dropout(*(options.pop(n, d) for n, d in (("dropout_p", 0.0), ("seed", 0), ("offset", 0))))
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ValueError(f"fmha_bwd: unknown argument(s) {', '.join(unknown)}")
    c = validate_attention(q, k, v, **{**defaults, **options})
    check_bool("deterministic", deterministic)
    check_bool("return_dbias", return_dbias)
    o_shape = tuple(q.shape[:-1]) + (c.dv,)
    _check_like("do", do, q.dtype, o_shape, c.on_device)
    _check_like("out", out, q.dtype, o_shape, c.on_device)
    lse_shape = (c.hq, c.sq) if c.varlen else (c.b, c.hq, c.sq)
    _check_like("lse", lse, np.dtype(np.float32), lse_shape, c.on_device)
    if return_dbias and bias is None:
        raise ValueError("return_dbias: needs a bias tensor (bias=...); "
                         + ("ALiBi slopes get no gradient" if slopes is not None else "got none"))
    bc = check_bias(bias, slopes, c)
    try:
        dbias, dbias_sum = "none", ()
        if return_dbias:
            dims = bc.broadcast_dims()
            keyed = (1, 2) if c.varlen else (2, 3)  # the query and key dims of the full shape
            if any(dim in keyed for dim in dims):
                raise ValueError(f"return_dbias: the bias {bc.shape} is broadcast over query or key positions "
                                 f"(to {bc.full}); its gradient sums over the batch and heads only: expand it")
            dbias_sum = tuple(dim + 1 for dim in dims) if c.varlen else dims  # dims of [B, Hq, Sq, K]
            dbias = "reduce"
        if c.varlen:
            seqlens_q, seqlens_k = tuple(int(x) for x in np.diff(c.cuq)), tuple(int(x) for x in np.diff(c.cuk))
        else:
            seqlens_q, seqlens_k = (c.sq,) * c.b, (c.sk,) * c.b
        contiguous = ((unit_last_stride(q, k, v, do, out) and rows_apart(q, k, v, do, out)) or not c.on_device) and \
            (bc.bias4 is None or unit_last_stride(bc.bias4))
        shape = BwdShape(arch=c.arch, dtype=c.dtype, hdim_q=c.d, hdim_v=c.dv, hq=c.hq, hk=c.hk, mask=c.mask,
                         softcap=c.softcap > 0, sink=c.sink32 is not None, deterministic=deterministic,
                         varlen=c.varlen, b=c.b, sq=c.sq, seqlens_q=seqlens_q, seqlens_k=seqlens_k,
                         contiguous=contiguous,
                         aligned=_bwd_aligned(c, bc, contiguous, options.get("layout", "bshd"), do, out),
                         bias=bc.kind, bias_dtype=bc.dtype, dbias=dbias,
                         dbias_sum=dbias_sum, dbias_cols=bc.full[-1] if return_dbias else 0, dropout=dropout.on,
                         large=spans_large(q, k, v, do, out, lse, bc.bias4))
        return build_plan(shape), c, bool(c.batch and c.sq and c.sk), bc
    except BaseException:
        bc.free()
        raise


def _bwd_aligned(c: AttentionCall, bc: BiasCall, contiguous: bool, layout: str, do: Any, out: Any) -> tuple[str, ...]:
    """The backward's tensors whose strides are multiples of 16 bytes (its stages move them in
    16-byte vectors, CompileOptions.stride_units): device arrays as they are; numpy ones, and the
    gradients, as the contiguous copies fmha_bwd makes, whose strides are multiples of their head
    dim (`fmha_bwd.aligned_heads`)."""
    from tiledsl.fmha_bwd import aligned_heads

    aligned = set(aligned_heads(c.d, c.dv))
    if not contiguous:  # the general-stride variant passes the head dim's stride too: the gradients' is 1,
        aligned -= {"dq", "dk", "dv"}  # as are the contiguous copies of numpy inputs (a bias broadcast over
        if not c.on_device:  # keys, stride 0, is what makes such a call general-stride)
            aligned -= {"q", "k", "v", "do", "out"}
    if c.on_device:
        given = {"q": c.q4, "k": c.k4, "v": c.v4, "do": _to_bshd(do, layout, c.varlen),
                 "out": _to_bshd(out, layout, c.varlen)}
        aligned -= set(given) - set(aligned_names(contiguous, **given))
    if bc.bias4 is not None and aligned_names(contiguous, bias=bc.bias4):
        aligned.add("bias")
    return tuple(sorted(aligned))


def _dbias_view(dbias: DeviceArray) -> DeviceArray:
    """The gradient output (the bias's shape, contiguous) as the 4-D tensor its stage writes:
    [B, Hq, Sq, Sk] with size-1 dims where the bias was broadcast (group mode [1, H, total_q, K])."""
    shape = (1,) * (4 - dbias.ndim) + tuple(dbias.shape)
    strides = (0,) * (4 - dbias.ndim) + tuple(dbias.strides)
    return DeviceArray(dbias.buffer, shape, dbias.dtype, strides, dbias.offset)
