"""Multi-stage launches over one workspace: `Plan`, `Stage`, `WorkspaceLayout`, `WorkspacePool`.

A plan is what the runtime launches for one call of a multi-stage operation (the FMHA backward:
dot_do_o -> dq_dk_dv -> convert_dq): the stages in launch order, each a compiled kernel and the
arguments it takes, and the one workspace they share. Plans are built on the host from shapes
alone, so one plan serves every call with the same shapes; `run` binds the call's tensors.

The workspace is one device buffer. Its layout (`WorkspaceLayout`) starts with a host segment
that the host computes (e.g. per-sequence split counts and offsets) and `prepare` copies in, then
the scratch regions the kernels use; `prepare` also zeroes the ranges that must start at zero.
Kernels find their regions from the one buffer (views of it are passed as their arguments); a
caller never sees the layout unless it prints the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tiledsl.device_array import DeviceArray
from tiledsl.launcher import launch_prepared, numpy_dtype, prepare


@dataclass(frozen=True)
class Region:
    """One named range of the workspace: an array of `dtype` and `shape` from word `offset`,
    padded to `words` 4-byte words. Kernels get it as a DeviceArray argument named `name`."""

    name: str
    offset: int  # in 4-byte words from the start of the workspace
    words: int
    dtype: str  # "i32", "i64", "f32", "f16", "bf16"
    shape: tuple[int, ...]
    zero: bool = False  # `prepare` zeroes it


@dataclass(frozen=True)
class WorkspaceLayout:
    """Regions in address order; the host segment is the bytes of the first `len(host)` bytes."""

    regions: tuple[Region, ...]
    host: bytes = b""

    @property
    def size(self) -> int:
        """Bytes the workspace needs (0 when the plan needs none)."""
        return 4 * max((r.offset + r.words for r in self.regions), default=0)

    def region(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"the workspace has no region '{name}' (it has {', '.join(r.name for r in self.regions)})")

    def views(self, buffer: Any) -> dict[str, DeviceArray]:
        """Each region as a contiguous DeviceArray of `buffer`, by name."""
        out = {}
        for r in self.regions:
            dt = numpy_dtype(r.dtype)
            strides = tuple(int(np.prod(r.shape[i + 1:])) for i in range(len(r.shape)))
            out[r.name] = DeviceArray(buffer, r.shape, dt, strides, r.offset * 4 // dt.itemsize)
        return out

    def words(self, buffer: Any, dtype: Any) -> DeviceArray:
        """The whole workspace as one vector of 4-byte `dtype` words (i32 or f32)."""
        return DeviceArray(buffer, (self.size // 4,), np.dtype(dtype), (1,), 0)

    def prepare(self, device: Any, buffer: Any) -> None:
        """Copy the host segment to the head of `buffer` and zero the regions that need it."""
        if buffer.size < self.size:
            raise ValueError(f"workspace: the plan needs {self.size} bytes, got a buffer of {buffer.size}")
        if self.host:
            device.copy_in(buffer, self.host, 0)
        for r in self.regions:
            if r.zero and r.words:
                device.fill(buffer, 0, 4 * r.offset, 4 * r.words)

    def describe(self) -> str:
        lines = [f"workspace: {self.size} bytes"]
        for r in self.regions:
            what = f"{r.dtype} [{', '.join(map(str, r.shape))}]"
            zeroed = "  zeroed" if r.zero else ""
            lines.append(f"  @{4 * r.offset:<10} {4 * r.words:>10} B  {r.name:<10} {what}{zeroed}")
        return "\n".join(lines)


def unused(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A read-only stand-in for a tensor argument a stage's kernel variant never touches: shapes
    that agree with the other tensors' symbols, one row of memory (the last dim keeps stride 1, as
    the kernels are compiled for)."""
    return np.broadcast_to(np.zeros(shape[-1], numpy_dtype(dtype)), shape)


def align_words(words: int, bytes_: int = 16) -> int:
    """`words` rounded up so the next region starts on a `bytes_` boundary."""
    per = bytes_ // 4
    return -(-words // per) * per


@dataclass(frozen=True)
class Ref:
    """An argument taken from the call's environment by name (a tensor of the call, or a view
    of the workspace), as opposed to a value fixed when the plan was built."""

    name: str


@dataclass(frozen=True)
class Stage:
    name: str
    kernel: Any  # a CompiledKernel (anything with .hsaco and .manifest)
    args: tuple[tuple[str, Any], ...]  # (parameter, Ref or value) in the kernel's order

    def bind(self, env: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for param, value in self.args:
            if isinstance(value, Ref):
                if value.name not in env:
                    raise ValueError(f"stage {self.name}: the call's arguments have no '{value.name}' (its "
                                     f"parameter {param})")
                value = env[value.name]
            out[param] = value
        return out


@dataclass
class Plan:
    """The stages of one multi-stage call, in launch order, and the workspace they share."""

    op: str
    stages: list[Stage]
    workspace: WorkspaceLayout
    info: dict[str, Any] = field(default_factory=dict)  # facts of the plan worth printing (nsplits, ...)
    # The inputs' shapes the plan was made for, by name (its workspace and host segment follow from
    # them): the C runtime refuses a call with other shapes (Plan.run's calls build a plan each).
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # The i32 inputs whose values the plan was made for (group mode's cu_seqlens, which the
    # backward's split counts and workspace offsets follow from): Plan.run and the C runtime read
    # them back and refuse others, which would send the kernels' stores past their workspace slices.
    values: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # Group mode's offset inputs (cu_seqlens), device memory the caller fills: name -> (the input
    # whose dim `dim` holds the packed rows, that dim, the scalar input the longest sequence may
    # not exceed or None). Plan.run and the C runtime read them back and check them as tiledsl.ops
    # does, before any stage runs: a longer sequence than max_seqlen_q would leave rows unwritten.
    offsets: dict[str, tuple[str, int, str | None]] = field(default_factory=dict)

    @property
    def workspace_size(self) -> int:
        return self.workspace.size

    @property
    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]

    def check_workspace(self, device: Any, workspace: Any) -> Any:
        """The caller's workspace as a Buffer of `device` with room for this plan, or a
        ValueError saying what is wrong with it. A DeviceArray stands for its whole buffer."""
        from tiledsl.backends.rocm.runtime.device import Buffer, device_label

        buf = workspace.buffer if isinstance(workspace, DeviceArray) else workspace
        if isinstance(workspace, DeviceArray) and workspace.offset:
            raise ValueError("workspace: a DeviceArray view that starts inside its buffer; pass the buffer")
        if not isinstance(buf, Buffer):
            raise ValueError(f"workspace: expected a device Buffer (device.alloc) or DeviceArray, got "
                             f"{type(workspace).__name__}")
        if buf.device is not device:
            raise ValueError(f"workspace: a buffer of {device_label(buf.device)}, but the plan runs on "
                             f"{device_label(device)}")
        if buf.freed:
            raise ValueError(f"workspace: buffer '{buf.name}' was freed")
        if buf.size < self.workspace_size:
            raise ValueError(f"workspace: the plan needs {self.workspace_size} bytes, got a buffer of {buf.size}")
        return buf

    def prepare_workspace(self, device: Any, buffer: Any) -> None:
        """Fill `buffer` (checked as `run` checks a caller's workspace) the way the stages expect:
        the host segment copied in, the regions that accumulate zeroed."""
        self.workspace.prepare(device, self.check_workspace(_check_device(device), buffer))

    def run(self, device: Any, env: Mapping[str, Any], workspace: Any = None) -> None:
        """Launch every stage on `device` with the call's tensors in `env` (DeviceArrays on
        `device`). `workspace`: a Buffer of at least `workspace_size` bytes, else one from the
        device's pool. The workspace's regions are added to `env` under their names, and the
        whole workspace as i32 and f32 words under `ws_i` and `ws_f`."""
        _check_device(device)
        if not isinstance(env, Mapping):
            raise ValueError(f"env: expected a mapping of the call's arguments by name, got {type(env).__name__}")
        for name, dims in self.shapes.items():  # the sizes its workspace and host segment follow from
            got = getattr(env.get(name), "shape", None)
            if got is not None and tuple(got) != tuple(dims):
                raise ValueError(f"argument '{name}': shape {list(got)}, but this plan was made for {list(dims)}; "
                                 "make a plan for these sizes")
        # Each DeviceArray input read back once (group mode's cu_seqlens are in both tables).
        read = {name: host_array(f"argument '{name}'", env[name])
                for name in dict.fromkeys([*self.values, *self.offsets]) if env.get(name) is not None}
        for name, want in self.values.items():
            check_made_for_values(name, read.get(name), want)
        for name, (rows_of, dim, longest) in self.offsets.items():
            if name in read and getattr(env.get(rows_of), "shape", None) is not None:
                cu = check_cu_seqlens(name, read[name], env[rows_of].shape[dim])
                if longest is not None and isinstance(env.get(longest), int | np.integer) \
                        and int(np.diff(cu).max()) > env[longest]:
                    raise ValueError(f"{longest}: {env[longest]}, but {name} holds a sequence of "
                                     f"{int(np.diff(cu).max())} rows; pass the longest")
        if workspace is not None:
            buf = self.check_workspace(device, workspace)
        else:
            buf = WORKSPACE_POOL.get(device, self.workspace_size)
        if buf is not None:
            self.workspace.prepare(device, buf)
        full = dict(env)
        if buf is not None:
            full["ws_i"] = self.workspace.words(buf, np.int32)
            full["ws_f"] = self.workspace.words(buf, np.float32)
            full.update(self.workspace.views(buf))
        # Every stage's arguments are checked before the first stage runs.
        prepared = [prepare(stage.kernel.manifest, (), stage.bind(full)) for stage in self.stages]
        for stage, prep in zip(self.stages, prepared, strict=True):
            launch_prepared(stage.kernel, prep, device)

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON-ready data for the C runtime (include/tiledsl.h, docs/c_runtime.md):
        each stage names its kernel by package key (tiledsl.package), so the plan runs from a
        kernel package without the compiler. Arguments are {"param", "ref"} (a name of the call's
        environment or the workspace), {"param", "value", "dtype"} (an i32 or f32 fixed at build
        time) or {"param", "zeros": {"dtype", "shape", "strides"}} (a read-only stand-in the runtime
        allocates as zeros; strides in elements). A fixed array that is not all zeros has no JSON
        form: ValueError. "inputs" lists the names the caller must bind, in first-use order."""
        # Names Plan.run binds itself: the regions, and the whole workspace when there is one.
        provided = {r.name for r in self.workspace.regions} | ({"ws_i", "ws_f"} if self.workspace.size else set())
        stages, inputs = [], []
        for s in self.stages:
            key = getattr(s.kernel, "key", None)
            if not key:
                raise ValueError(f"plan {self.op}, stage {s.name}: its kernel has no package key (only library "
                                 "kernels, tiledsl.library.library_kernel, can be named in a plan's JSON)")
            args = []
            for param, value in s.args:
                where = f"plan {self.op}, stage {s.name}, parameter '{param}'"
                if isinstance(value, Ref):
                    args.append({"param": param, "ref": value.name})
                    if value.name not in provided and value.name not in inputs:
                        inputs.append(value.name)
                else:
                    args.append({"param": param, **_fixed_json(value, where)})
            stages.append({"name": s.name, "kernel": key, "kernel_name": s.kernel.manifest["kernel"],
                           "arch": s.kernel.manifest["arch"], "args": args})
        ws = self.workspace
        shapes = {name: list(dims) for name, dims in self.shapes.items() if name in inputs}
        values = {name: [int(x) for x in want] for name, want in self.values.items() if name in inputs}
        offsets = {name: {"rows": [rows_of, dim], **({"longest": longest} if longest else {})}
                   for name, (rows_of, dim, longest) in self.offsets.items() if name in inputs}
        return {"format": "tiledsl-plan", "version": 1, "op": self.op, "info": _json_ready(self.info),
                "inputs": inputs, **({"shapes": shapes} if shapes else {}), **({"values": values} if values else {}),
                **({"offsets": offsets} if offsets else {}), "stages": stages,
                "workspace": {"size": ws.size, "host": ws.host.hex(),
                              "regions": [{"name": r.name, "offset": r.offset, "words": r.words, "dtype": r.dtype,
                                           "shape": list(r.shape), "zero": r.zero} for r in ws.regions]}}

    def describe(self) -> str:
        """The plan as a table (stage, kernel, grid, registers, LDS) and its workspace layout."""
        from tiledsl.cli import format_table

        rows = []
        for s in self.stages:
            m = s.kernel.manifest
            rows.append({"stage": s.name, "kernel": m["kernel"], "grid": m["grid"],
                         "vgprs": m.get("vgpr_count", ""), "agprs": m.get("agpr_count", ""),
                         "sgprs": m.get("sgpr_count", ""), "lds": m.get("lds_bytes", ""),
                         "spills": m.get("vgpr_spill_count", 0) + m.get("sgpr_spill_count", 0)})
        cols = [(k, k) for k in ("stage", "kernel", "grid", "vgprs", "agprs", "sgprs", "lds", "spills")]
        facts = ", ".join(f"{k} {v}" for k, v in self.info.items())
        return f"{self.op} plan ({facts})\n" + format_table(rows, cols, text_columns=3) + "\n" + \
            self.workspace.describe()


def host_array(name: str, value: Any) -> Any:
    """`value`, a DeviceArray read back (as the C runtime reads the device's copy)."""
    if isinstance(value, DeviceArray):
        if value.freed:
            raise ValueError(f"{name}: its DeviceArray was freed")
        return value.numpy()
    return value


def check_cu_seqlens(name: str, cu: Any, total: int) -> np.ndarray:
    """Group mode's offsets into `total` packed rows, as i32: a ValueError saying what is wrong."""
    if not isinstance(cu, np.ndarray) or cu.ndim != 1 or not np.issubdtype(cu.dtype, np.integer):
        raise ValueError(f"{name}: expected a 1-D integer array of length batch + 1, got "
                         f"{getattr(cu, 'dtype', type(cu).__name__)} {getattr(cu, 'shape', '')}")
    if len(cu) < 2:
        raise ValueError(f"{name}: expected length batch + 1 >= 2, got length {len(cu)}")
    out_of_range = [i for i, x in enumerate(cu.tolist()) if not -2**31 <= x < 2**31]  # before int64 wraps them
    if out_of_range:
        raise ValueError(f"{name}: {name}[{out_of_range[0]}] = {cu[out_of_range[0]]} does not fit in i32")
    if cu[0] != 0:
        raise ValueError(f"{name}: must start at 0, got {cu[0]}")
    steps = np.diff(cu.astype(np.int64))
    if (steps < 0).any():
        at = int(np.argmax(steps < 0))
        raise ValueError(f"{name}: must be non-decreasing, but {name}[{at + 1}] = {cu[at + 1]} < "
                         f"{name}[{at}] = {cu[at]}")
    if cu[-1] > total:
        raise ValueError(f"{name}: the last offset {cu[-1]} is past the packed sequence length {total}")
    return np.ascontiguousarray(cu, dtype=np.int32)


def check_made_for_values(name: str, got: Any, want: tuple[int, ...]) -> None:
    """Refuse an input whose values are not the ones a plan was made for (Plan.values)."""
    if got is None:
        return  # a missing input is the stages' error, with the parameter it binds
    arr = np.asarray(host_array(f"argument '{name}'", got))
    if arr.shape != (len(want),) or not np.issubdtype(arr.dtype, np.integer) or (arr != np.asarray(want)).any():
        raise ValueError(f"argument '{name}': values {_values_text(arr)}, but this plan was made for "
                         f"{_values_text(np.asarray(want))}; make a plan for these sequence lengths")


def _values_text(arr: np.ndarray) -> str:
    flat = [str(x) for x in arr.ravel()[:12]]
    return "[" + ", ".join(flat) + (", ...]" if arr.size > 12 else "]")


_DTYPE_NAMES = ("f32", "f16", "bf16", "i32", "i64", "i1", "f8e4m3", "f8e5m2")


def _fixed_json(value: Any, where: str) -> dict[str, Any]:
    """A stage's fixed argument as Plan.to_json writes it."""
    if isinstance(value, bool | np.bool_):
        raise ValueError(f"{where}: a bool has no kernel argument type; pass 0 or 1")
    if isinstance(value, int | np.integer):
        if not -(2**31) <= int(value) < 2**31:
            raise ValueError(f"{where}: {value} does not fit in i32")
        return {"value": int(value), "dtype": "i32"}
    if isinstance(value, float | np.floating):
        if not np.isfinite(value):
            raise ValueError(f"{where}: {value} has no JSON form")
        return {"value": float(value), "dtype": "f32"}
    if isinstance(value, np.ndarray):
        # The C runtime makes stand-ins (plan.unused) as zeroed device memory; any other array
        # would need its contents in the JSON, which no plan has needed.
        if np.any(value != 0):
            raise ValueError(f"{where}: a fixed array that is not all zeros cannot be written as JSON "
                             "(only zero stand-ins such as plan.unused(...) can)")
        names = [n for n in _DTYPE_NAMES if numpy_dtype(n) == value.dtype]
        if not names:
            raise ValueError(f"{where}: a fixed array of dtype {value.dtype}, which no kernel takes")
        item = value.dtype.itemsize
        if any(s < 0 or s % item for s in value.strides):
            raise ValueError(f"{where}: a fixed array with strides {value.strides} bytes")
        return {"zeros": {"dtype": names[0], "shape": list(value.shape), "strides": [s // item for s in value.strides]}}
    raise ValueError(f"{where}: a fixed value of type {type(value).__name__} has no JSON form")


def _json_ready(value: Any) -> Any:
    """`info` values as plain JSON types (numpy scalars and tuples become ints, floats and lists)."""
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _check_device(device: Any) -> Any:
    from tiledsl.backends.rocm.runtime.device import Device

    if not isinstance(device, Device):
        raise ValueError(f"device: expected a Device object (tiledsl.backends.rocm.runtime.device_from(...) "
                         f"makes one from 'emulator:ARCH' or 'hip:N'), got {device!r}")
    return device


class WorkspacePool:
    """One growing workspace buffer per device, reused by every plan run on it without its own.
    The buffer hangs on the device object, so it goes when the device does."""

    ATTR = "_tiledsl_workspace"

    def get(self, device: Any, size: int) -> Any:
        if size == 0:
            return None
        buf = getattr(device, self.ATTR, None)
        if buf is not None and (buf.freed or buf.size < size):
            if not buf.freed:
                device.free(buf)
            buf = None
        if buf is None:
            buf = device.alloc(size, "workspace")
            setattr(device, self.ATTR, buf)
        return buf

    def release(self, device: Any) -> None:
        buf = getattr(device, self.ATTR, None)
        if buf is not None:
            delattr(device, self.ATTR)
            if not buf.freed:
                device.free(buf)


WORKSPACE_POOL = WorkspacePool()
