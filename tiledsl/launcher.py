"""Launch a compiled kernel with numpy arrays: validate arguments, pack kernargs from the manifest,
copy in, launch on a device, copy back.

Every argument is checked before anything runs (dtype, rank, static dims, one value per shape
symbol, strides), and each problem is a ValueError naming the argument with what was expected
and what was given -- never a memory fault on the device.
"""

from __future__ import annotations

import ctypes
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.backends.rocm.runtime.device import TensorArg, device_label, launch_dims_problem
from tiledsl.device_array import DeviceArray
from tiledsl.fp8 import F8_DTYPES, fp8_format
from tiledsl.grid import eval_condition, eval_grid

I32_MAX = 2**31 - 1
BUFFER_REACH = 2**31  # bytes a buffer descriptor's 32-bit offsets reach (manifest tensors' "buffer")


def numpy_dtype(dtype: str, arch: str | None = None) -> np.dtype:
    """The numpy dtype of a kernel dtype. f8e4m3/f8e5m2 take the arch's fp8 flavour (tiledsl/fp8.py):
    ml_dtypes.float8_e4m3fnuz/float8_e5m2fnuz on gfx942, float8_e4m3fn/float8_e5m2 on gfx950 and
    gfx1201 (and without an arch)."""
    import ml_dtypes

    if dtype in F8_DTYPES:
        return np.dtype(getattr(ml_dtypes, fp8_format(dtype, get_arch(arch).fp8_flavour if arch else "ocp").numpy))
    return np.dtype({"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "i1": np.bool_,
                     "bf16": ml_dtypes.bfloat16}[dtype])


@dataclass
class _Tensor:
    name: str
    array: np.ndarray
    span: int  # bytes from the array's first element to one past its last
    strides: list[int]  # in elements
    unit: int = 1  # the kernel takes passed strides in units of this many elements


class _Symbol(NamedTuple):
    """A shape symbol's value and the first tensor dim that gave it (the one errors name)."""
    size: int
    tensor: str
    axis: int

    def where(self) -> str:
        return f"{self.tensor}.shape[{self.axis}]"


def span_bytes(shape: tuple[int, ...], elem_strides: tuple[int, ...] | list[int], itemsize: int) -> int:
    """The bytes a strided view reaches from its first element to the end of its last (0 when empty):
    what its element offsets (i32) and a buffer descriptor's byte offsets (BUFFER_REACH) must cover."""
    if any(n == 0 for n in shape):
        return 0
    return (sum((n - 1) * s for n, s in zip(shape, elem_strides, strict=True)) + 1) * itemsize


def elements_overlap(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether two elements of a (non-empty) strided view share memory. Dims sorted by stride must
    each step past everything the smaller ones reach; a view that fails that test (interleaved
    dims, which numpy never makes itself) has its offsets enumerated."""
    dims = sorted((s, n) for n, s in zip(shape, strides, strict=True) if n > 1)
    reach = 0
    for s, n in dims:
        if s <= reach:
            break
        reach += (n - 1) * s
    else:
        return False
    offsets = np.zeros(1, np.int64)
    for s, n in dims:
        if offsets.size * n > 1 << 24:  # too many to enumerate: refuse rather than risk it
            return True
        offsets = (offsets[:, None] + np.arange(n, dtype=np.int64) * s).ravel()
    return bool(np.unique(offsets).size != offsets.size)


def rows_apart(shape: Sequence[int], strides: Sequence[int]) -> list[bool]:
    """Per dim, whether its rows lie apart: its stride (elements) is above the last dim's span,
    (n_last - 1) * stride_last, and positive. What a kernel variant compiled with
    CompileOptions.disjoint_rows needs of the dims its manifest lists as `row_bounds`
    (tiledsl/ir/row_view.py); the last dim itself needs a positive stride."""
    span = (shape[-1] - 1) * strides[-1] if shape else 0
    return [s > span and s > 0 if d < len(shape) - 1 else s > 0 for d, s in enumerate(strides)]


def _check_tensor(spec: dict, value: Any, symbols: dict[str, _Symbol], arch: str | None = None) -> _Tensor:
    name, dtype, dims = spec["name"], spec["dtype"], spec["dims"]
    if not isinstance(value, np.ndarray | DeviceArray):
        raise ValueError(f"argument '{name}': expected a numpy array or DeviceArray of {dtype} with {len(dims)} "
                         f"dims, got {type(value).__name__}")
    want = numpy_dtype(dtype, arch)
    if value.dtype != want:
        flavour = f", the {get_arch(arch).fp8_flavour.upper()} flavour of {arch}" if dtype in F8_DTYPES and arch else ""
        raise ValueError(f"argument '{name}': expected dtype {dtype} ({want}{flavour}), got {value.dtype}")
    if value.ndim != len(dims):
        raise ValueError(f"argument '{name}': expected {len(dims)} dims ({', '.join(map(str, dims))}), "
                         f"got shape {value.shape}")
    for axis, (dim, size) in enumerate(zip(dims, value.shape, strict=True)):
        if isinstance(dim, int):
            if size != dim:
                raise ValueError(f"argument '{name}': dim {axis} must be {dim}, got {size} (shape {value.shape})")
        elif dim in symbols and symbols[dim].size != size:
            raise ValueError(f"argument '{name}': dim {axis} is {dim} = {size}, but {dim} = {symbols[dim].size} "
                             f"from {symbols[dim].where()}")
        elif dim not in symbols:
            symbols[dim] = _Symbol(size, name, axis)
        if size > I32_MAX:
            raise ValueError(f"argument '{name}': dim {axis} = {size} does not fit in i32")
    itemsize = value.dtype.itemsize
    byte_strides = value.strides if isinstance(value, np.ndarray) else [s * itemsize for s in value.strides]
    if not value.size:  # nothing is read or written: numpy gives empty arrays any strides (even 0)
        return _Tensor(name, value, 0, [0] * value.ndim, spec.get("stride_unit", 1))
    strides = []
    for axis, s in enumerate(byte_strides):
        if s < 0 or s % itemsize:
            raise ValueError(f"argument '{name}': stride {s} bytes on dim {axis} is not a non-negative multiple "
                             f"of the element size {itemsize}; pass np.ascontiguousarray({name})")
        strides.append(s // itemsize)
    unit = spec.get("stride_unit", 1)
    last_span = (value.shape[-1] - 1) * (1 if spec.get("unit_last_stride") else strides[-1])
    apart = rows_apart(value.shape, strides[:-1] + [1 if spec.get("unit_last_stride") else strides[-1]])
    for axis in spec.get("row_bounds", ()):
        if value.shape[axis] == 1 and not apart[axis]:
            # A size-1 dim's one row is at index 0 whatever its stride (numpy gives x[None] stride 0):
            # pass one above the last dim's span, which the view's bound needs.
            strides[axis], apart[axis] = (last_span // unit + 1) * unit, True
    if spec.get("unit_last_stride") and value.ndim and value.shape[-1] > 1 and strides[-1] != 1:
        raise ValueError(f"argument '{name}': the kernel was compiled for a contiguous last dim (stride 1, "
                         f"the default), got stride {strides[-1]}; pass np.ascontiguousarray({name}) or "
                         "compile with --strided (CompileOptions.unit_last_stride=False)")
    passed = range(value.ndim - 1 if spec.get("unit_last_stride") else value.ndim)
    for axis in passed:
        if value.shape[axis] > 1 and strides[axis] % unit:
            raise ValueError(f"argument '{name}': stride {strides[axis]} on dim {axis} is not a multiple of {unit} "
                             f"elements, which this kernel variant assumes (compile it with stride_unit=1)")
    span = span_bytes(value.shape, strides, itemsize)
    if span // itemsize > I32_MAX + 1:
        raise ValueError(f"argument '{name}': spans {span // itemsize} elements; offsets must fit in i32")
    if spec.get("buffer") and span > BUFFER_REACH:
        raise ValueError(f"argument '{name}': spans {span} bytes; this kernel variant addresses it with buffer "
                         f"instructions, which reach {BUFFER_REACH} bytes (2 GiB): compile it with "
                         f"CompileOptions(large_tensors=('{name}',))")
    if spec.get("written") and isinstance(value, np.ndarray) and not value.flags.writeable:
        raise ValueError(f"argument '{name}': the kernel writes it, but the array is read-only (a broadcast "
                         f"view, or writeable=False); pass a writable array")
    if spec.get("written") and elements_overlap(value.shape, strides):
        raise ValueError(f"argument '{name}': the kernel writes it, but its elements overlap in memory (shape "
                         f"{tuple(value.shape)}, strides {tuple(strides)} elements); pass an array whose elements "
                         "are distinct")
    for axis in spec.get("row_bounds", ()):
        if not apart[axis]:
            raise ValueError(f"argument '{name}': this kernel variant bounds its dim {axis} with a buffer descriptor, "
                             f"which needs that dim's stride ({strides[axis]} elements) above the last dim's span "
                             f"({last_span}), so that rows do not overlap; got strides "
                             f"{tuple(strides)}; compile it with --overlapping-rows "
                             "(CompileOptions(disjoint_rows=False))")
    if isinstance(value, DeviceArray) and value.offset * itemsize + span > value.buffer.size:
        raise ValueError(f"argument '{name}': the view ends at byte {value.offset * itemsize + span} of a "
                         f"{value.buffer.size}-byte buffer")
    return _Tensor(name, value, span, strides, unit)


def _pack_scalar(dtype: str, value: Any, name: str) -> bytes:
    if dtype == "f32":
        if not isinstance(value, int | float | np.floating | np.integer) or isinstance(value, bool):
            raise ValueError(f"argument '{name}': expected an f32 number, got {value!r}")
        try:
            number = float(value)
            if math.isinf(number) and not np.isinf(value):  # a wider float (np.longdouble) past f64's range
                raise OverflowError
            return struct.pack("<f", number)
        except OverflowError:
            raise ValueError(f"argument '{name}': {value!r} does not fit in f32 (largest finite "
                             f"{float(np.finfo(np.float32).max):.6g})") from None
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise ValueError(f"argument '{name}': expected an i32 integer, got {value!r}")
    if not -(2**31) <= int(value) <= I32_MAX:
        raise ValueError(f"argument '{name}': {value} does not fit in i32")
    return struct.pack("<i", int(value))


@dataclass
class PreparedLaunch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    tensors: list[_Tensor]
    symbols: dict[str, int]
    scalars: dict[str, Any]

    def kernargs(self, manifest: dict, addresses: Mapping[str, int]) -> bytes:
        buf = bytearray(manifest["kernarg_size"])
        strides = {t.name: [s // t.unit for s in t.strides] for t in self.tensors}
        for f in manifest["kernargs"]:
            kind, off = f["kind"], f["offset"]
            if kind == "pointer":
                struct.pack_into("<Q", buf, off, addresses[f["name"]])
            elif kind == "stride":
                struct.pack_into("<i", buf, off, strides[f["tensor"]][f["dim"]])  # only those passed
            elif kind == "shape":
                unit = manifest.get("dim_units", {}).get(f["name"], 1)
                struct.pack_into("<i", buf, off, self.symbols[f["name"]] // unit)
            else:
                buf[off:off + 4] = _pack_scalar(f["dtype"], self.scalars[f["name"]], f["name"])
        return bytes(buf)


def prepare(manifest: dict, args: Sequence[Any], kwargs: Mapping[str, Any]) -> PreparedLaunch:
    """Match the call's arguments to the kernel's parameters and check them all."""
    params = [f["name"] for f in manifest["kernargs"] if f["kind"] in ("pointer", "scalar")]  # declaration order
    if len(args) > len(params):
        raise ValueError(f"{manifest['kernel']}() takes {len(params)} arguments ({', '.join(params)}), "
                         f"got {len(args)}")
    given = dict(zip(params, args, strict=False))
    for k, v in kwargs.items():
        if k not in params:
            raise ValueError(f"{manifest['kernel']}() has no argument '{k}'; its arguments are {', '.join(params)}")
        if k in given:
            raise ValueError(f"{manifest['kernel']}(): argument '{k}' given twice")
        given[k] = v
    missing = [p for p in params if p not in given]
    if missing:
        hint = ("; `device=` is the launcher's own keyword: pass the kernel's argument 'device' by position"
                if "device" in missing else "")
        raise ValueError(f"{manifest['kernel']}(): missing argument(s) {', '.join(missing)}{hint}")
    symbols: dict[str, _Symbol] = {}
    tensors = [_check_tensor(spec, given[spec["name"]], symbols, manifest.get("arch")) for spec in manifest["tensors"]]
    scalars = {s["name"]: given[s["name"]] for s in manifest["scalars"]}
    for s in manifest["scalars"]:
        _pack_scalar(s["dtype"], scalars[s["name"]], s["name"])
    sym_values = {k: v.size for k, v in symbols.items()}
    values = {**sym_values, **{k: int(v) for k, v in scalars.items() if isinstance(v, int | np.integer)}}
    values.update({k: v for k, v in manifest.get("constexprs", {}).items() if isinstance(v, int)})
    for condition in manifest.get("requires", []):
        if not eval_condition(condition, values):
            names = sorted(set(re.findall(r"[A-Za-z_]\w*", condition)) & set(values))
            given = ", ".join(f"{n} = {values[n]}" + (f" (from {symbols[n].where()})" if n in symbols else "")
                              for n in names)
            raise ValueError(f"{manifest['kernel']}() requires {condition}, but {given}")
    for sym, unit in manifest.get("dim_units", {}).items():
        got = symbols[sym]
        if got.size % unit:
            raise ValueError(f"argument '{got.tensor}': {got.where()} is {sym} = {got.size}, which this kernel "
                             f"variant assumes is a multiple of {unit} (compile it without dim_units for {sym})")
    grid = eval_grid(manifest["grid"], values)
    block = tuple(manifest["workgroup_size"])
    return PreparedLaunch(grid, block, tensors, sym_values, scalars)  # type: ignore[arg-type]


def check_live_arrays(device: Any, arrays: Mapping[str, Any], runner: str = "kernel") -> None:
    """Every DeviceArray among `arrays` (by argument name) is on `device` and not freed; other
    values are not looked at. The library's ops call it too, before they allocate outputs."""
    for name, x in arrays.items():
        if isinstance(x, DeviceArray):
            if x.device is not device:
                raise ValueError(f"argument '{name}': a DeviceArray of {device_label(x.device)}, but the "
                                 f"{runner} runs on {device_label(device)}")
            if x.buffer.freed:
                raise ValueError(f"argument '{name}': its DeviceArray was freed")


def _raw(array: np.ndarray, span: int) -> bytes:
    """The `span` bytes from the array's first element (ctypes.string_at takes a C int size: past
    2 GiB it truncated or failed)."""
    return bytes((ctypes.c_char * span).from_address(array.ctypes.data)) if span else b""


def _copy_back(t: _Tensor, data: bytes) -> None:
    """The kernel's values of t's elements into the array, element by element: the bytes between
    them (another argument's elements, for views of one array) are left as they are."""
    arr = t.array
    itemsize = arr.dtype.itemsize
    view = np.ndarray(arr.shape, arr.dtype, buffer=data, strides=[s * itemsize for s in t.strides])
    arr[...] = view


def _check_written_apart(tensors: Sequence[_Tensor], written: set[str]) -> None:
    """numpy arguments are copied in and back one by one, so two written ones that share an element
    would have one's results overwrite the other's: refused (elements side by side are fine)."""
    arrays = [t for t in tensors if isinstance(t.array, np.ndarray) and t.span and t.name in written]
    for i, a in enumerate(arrays):
        for b in arrays[i + 1:]:
            if arrays_share_memory(a.array, b.array):
                raise ValueError(f"arguments '{a.name}' and '{b.name}': the kernel writes both, and they share "
                                 "elements (views of one array); pass separate arrays")


def arrays_share_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two numpy arrays share an element (exactly, up to a bound on the work; past it,
    assumed to)."""
    try:
        return bool(np.shares_memory(a, b, max_work=1 << 20))
    except np.exceptions.TooHardError:
        return True


def _free_all(device: Any, buffers: Sequence[Any], failing: bool) -> None:
    """Free every buffer; a failed free is raised only when nothing else is failing already (it
    must not hide the error that brought us here), and never stops the other frees."""
    first = None
    for b in buffers:
        try:
            device.free(b)
        except Exception as exc:
            first = first or exc
    if first is not None and not failing:
        raise first


def tensor_args(manifest: dict, tensors: Sequence[_Tensor], addresses: Mapping[str, int]) -> list[TensorArg]:
    """Each pointer argument's name, kernarg offset, address, dtype and span (for a DeviceArray,
    the view's place in its buffer), for devices that check accesses against them."""
    by_name = {t.name: t for t in tensors}
    out = []
    for f in manifest["kernargs"]:
        if f["kind"] != "pointer" or f["name"] not in by_name:
            continue
        t = by_name[f["name"]]
        arr, itemsize = t.array, t.array.dtype.itemsize
        view = ("", 0, 0)
        if isinstance(arr, DeviceArray) and (arr.offset or t.span != arr.buffer.size):
            view = (arr.buffer.name, arr.offset * itemsize, arr.buffer.size)
        out.append(TensorArg(t.name, f["offset"], addresses[t.name], t.span, f["dtype"], itemsize,
                             tuple(arr.shape), *view))
    return out


def launch(kernel: Any, *args: Any, device: Any = None, **kwargs: Any) -> PreparedLaunch:
    """Run a compiled kernel (anything with .hsaco and .manifest) on `device` (default: the default
    device for the kernel's arch). numpy arrays are copied in and, after the run, back in place."""
    if not (hasattr(kernel, "manifest") and hasattr(kernel, "hsaco")):
        raise ValueError(f"kernel: expected a compiled kernel (tiledsl.load_kernel, compile_source), got "
                         f"{type(kernel).__name__}")
    return launch_prepared(kernel, prepare(kernel.manifest, args, kwargs), device)


def launch_prepared(kernel: Any, prep: PreparedLaunch, device: Any = None) -> PreparedLaunch:
    """`launch` with the arguments already checked by `prepare` (a plan checks every stage's
    before it runs the first)."""
    from tiledsl.backends.rocm.runtime import default_device, device_from

    manifest = kernel.manifest
    device = device_from(device, manifest["arch"]) if device is not None else default_device(manifest["arch"])
    device_arch = getattr(device, "arch", None)
    device_arch = getattr(device_arch, "name", device_arch)
    if device_arch is not None and device_arch != manifest["arch"]:
        raise ValueError(f"kernel compiled for {manifest['arch']} cannot run on a {device_arch} device")
    check_live_arrays(device, {t.name: t.array for t in prep.tensors})
    # Only what the kernel may write goes back (manifests without the field: everything).
    written = {spec["name"] for spec in manifest["tensors"] if spec.get("written", True)}
    _check_written_apart(prep.tensors, written)
    if 0 in prep.grid:
        return prep
    problem = launch_dims_problem(prep.grid, prep.block)
    if problem:
        raise ValueError(f"{manifest['kernel']}: {problem} (grid {manifest['grid']} for these arguments)")
    fn = device.kernel(kernel.hsaco, manifest["symbol"])
    buffers = {}  # numpy arguments get a device copy of the memory their view spans
    addresses = {}
    failing = True
    try:
        for t in prep.tensors:
            if isinstance(t.array, DeviceArray):
                addresses[t.name] = t.array.address
                continue
            buf = device.alloc(max(t.span, 16), name=t.name)  # never 0 bytes: masked lanes read element 0
            if t.span:
                device.copy_in(buf, _raw(t.array, t.span))
            buffers[t.name] = buf
            addresses[t.name] = buf.addr
        kernargs = prep.kernargs(manifest, addresses)
        device.launch(fn, prep.grid, prep.block, kernargs, dynamic_lds=0,
                      tensors=tensor_args(manifest, prep.tensors, addresses))
        device.synchronize()
        for t in prep.tensors:
            if t.name in buffers and t.name in written and t.span and t.array.flags.writeable:
                _copy_back(t, device.copy_out(buffers[t.name], t.span))
        failing = False
    finally:
        _free_all(device, list(buffers.values()), failing)
    return prep
