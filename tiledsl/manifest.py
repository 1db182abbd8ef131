"""The JSON manifest written next to each code object: everything a launcher needs, nothing more.

Built once per (variant, arch) from the bound kernel (names, kernarg ABI, grid) and the code
object's own metadata note (registers, LDS, spills), so the figures are the ones the hardware will
see. `check_manifest` re-derives every checkable field from the code object; tests use it to keep
the ABI in `tiledsl.ir.abi` and LLVM's kernarg layout in agreement.
"""

from __future__ import annotations

from typing import Any

from tiledsl import __version__
from tiledsl.backends.rocm import elf
from tiledsl.backends.rocm.arch import Arch
from tiledsl.errors import CompileError, TileError
from tiledsl.grid import render_condition, render_grid
from tiledsl.ir.abi import kernarg_layout, kernarg_size
from tiledsl.lang.ast import BoundKernel, Call, Index, Kernel, Name, ScalarType, TensorType, walk

MANIFEST_FORMAT = 1

# Metadata keys (AMDGPUUsage, code object V4+ "amdhsa.kernels") copied under our own names.
_REGISTER_FIELDS = {
    "vgpr_count": ".vgpr_count",
    "agpr_count": ".agpr_count",
    "sgpr_count": ".sgpr_count",
    "vgpr_spill_count": ".vgpr_spill_count",
    "sgpr_spill_count": ".sgpr_spill_count",
    "private_segment_size": ".private_segment_fixed_size",
}


def kernel_metadata(hsaco: bytes, symbol: str | None = None) -> tuple[elf.CodeObject, dict]:
    """The code object and the metadata entry of `symbol` (or of its only kernel)."""
    co = elf.read_code_object(hsaco)
    kernels = co.metadata().get("amdhsa.kernels", [])
    if symbol is not None:
        matches = [k for k in kernels if k.get(".name") == symbol]
    else:
        matches = kernels if len(kernels) == 1 else []
    if len(matches) != 1:
        names = [k.get(".name") for k in kernels]
        want = f"kernel '{symbol}'" if symbol else "exactly one kernel"
        raise TileError(f"code object metadata has no {want} (kernels: {names})")
    return co, matches[0]


def _code_object_fields(md: dict) -> dict[str, Any]:
    fields: dict[str, Any] = {"symbol": md[".name"], "lds_bytes": md.get(".group_segment_fixed_size", 0)}
    for ours, theirs in _REGISTER_FIELDS.items():
        fields[ours] = md.get(theirs, 0)
    # What the launcher must allocate: LLVM may append hidden arguments after ours.
    fields["kernarg_segment_size"] = md.get(".kernarg_segment_size", 0)
    fields["kernarg_segment_align"] = md.get(".kernarg_segment_align", 8)
    fields["max_flat_workgroup_size"] = md.get(".max_flat_workgroup_size")
    return fields


def merged_dim_units(bound: BoundKernel, options_units: dict[str, int] | None) -> dict[str, int]:
    """Each shape symbol's unit: the larger of the compile option's and the kernel's declaration
    (both powers of two, so the larger is a multiple of the other)."""
    units = dict(bound.dim_units)
    for sym, unit in (options_units or {}).items():
        units[sym] = max(units.get(sym, 1), unit)
    return units


def written_tensors(kernel: Kernel) -> set[str]:
    """The tensor arguments the kernel may write: those a store or atomic_add indexes (the
    launcher copies only these back into numpy arguments)."""
    out: set[str] = set()
    for node in walk(kernel.body):
        if isinstance(node, Call) and node.func in ("store", "atomic_add"):
            access = node.args[0] if node.args else next((k.value for k in node.kwargs if k.name == "access"), None)
            if isinstance(access, Index) and isinstance(access.base, Name):
                out.add(access.base.id)
    return out


def build_manifest(bound: BoundKernel, arch: Arch, hsaco: bytes,
                   defines: dict[str, str] | None = None, unit_last_stride: bool = True,
                   stride_units: dict[str, int] | None = None,
                   dim_units: dict[str, int] | None = None,
                   buffer_args: list[int] | tuple[int, ...] = ()) -> dict[str, Any]:
    """The manifest of one variant compiled for `arch`, from its bound kernel and code object.
    buffer_args: the kernarg fields lower-to-gpu addressed with buffer instructions."""
    kernel = bound.kernel
    try:
        _co, md = kernel_metadata(hsaco, kernel.name)
    except TileError as exc:
        raise CompileError("manifest", str(exc)) from None
    layout = kernarg_layout(bound, unit_last_stride)
    tensors, scalars = [], []
    written = written_tensors(kernel)
    buffered = {layout[i].tensor for i in buffer_args}
    for arg in kernel.args:
        if isinstance(arg.type, TensorType):
            tensors.append({"name": arg.name, "dtype": arg.type.dtype, "dims": list(arg.type.dims),
                            "written": arg.name in written, "unit_last_stride": unit_last_stride,
                            "stride_unit": (stride_units or {}).get(arg.name, 1),
                            # addressed with buffer instructions: its byte span must stay <= 2 GiB
                            "buffer": arg.name in buffered})
        elif isinstance(arg.type, ScalarType):
            scalars.append({"name": arg.name, "dtype": arg.type.dtype})
    manifest: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "compiler": f"tiledsl {__version__}",
        "kernel": kernel.name,
        "arch": arch.name,
        "wave_size": arch.wave_size,
        "waves": bound.waves,
        # occupancy(N): the waves per SIMD the registers were capped for (0: no target)
        "occupancy_target": bound.occupancy,
        "workgroup_size": [bound.waves * arch.wave_size, 1, 1],
        "grid": render_grid(kernel.grid),
        # Conditions the launcher checks before a launch (requires(...)), as host expressions.
        "requires": [render_condition(r) for r in kernel.requires],
        "kernargs": [f.to_json() for f in layout],
        "kernarg_size": kernarg_size(layout),
        "tensors": tensors,
        "scalars": scalars,
        "shape_symbols": list(bound.shape_symbols),
        # Symbols the kernel assumes are multiples of a unit (passed as size / unit): the compile
        # options' and the kernel's own requires(SYM % K == 0).
        "dim_units": {s: u for s, u in sorted(merged_dim_units(bound, dim_units).items()) if u > 1},
        "constexprs": dict(bound.constexpr_values),
        "defines": dict(sorted((defines or {}).items())),
    }
    manifest.update(_code_object_fields(md))
    return manifest


def manifest_from_code_object(hsaco: bytes, arch: Arch) -> dict[str, Any]:
    """A partial manifest for a run started from an intermediate file (no bound kernel): names,
    grid and constexprs are unknown, the kernarg layout is the code object's own."""
    try:
        _co, md = kernel_metadata(hsaco)
    except TileError as exc:
        raise CompileError("manifest", str(exc)) from None
    kernargs = []
    for i, a in enumerate(_explicit_args(md)):
        kind = "pointer" if a.get(".value_kind") == "global_buffer" else "scalar"
        kernargs.append({"name": a.get(".name", f"arg{i}"), "kind": kind, "offset": a[".offset"],
                         "size": a[".size"]})
    reqd = md.get(".reqd_workgroup_size")
    manifest: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "compiler": f"tiledsl {__version__}",
        "partial": True,
        "kernel": md[".name"],
        "arch": arch.name,
        "wave_size": arch.wave_size,
        "waves": reqd[0] * reqd[1] * reqd[2] // arch.wave_size if reqd else None,
        "workgroup_size": list(reqd) if reqd else None,
        "grid": None,
        "kernargs": kernargs,
        "kernarg_size": max((k["offset"] + k["size"] for k in kernargs), default=0),
        "tensors": [],
        "scalars": [],
        "shape_symbols": [],
        "constexprs": {},
        "defines": {},
    }
    manifest.update(_code_object_fields(md))
    return manifest


def _explicit_args(md: dict) -> list[dict]:
    return [a for a in md.get(".args", []) if not str(a.get(".value_kind", "")).startswith("hidden_")]


def check_manifest(manifest: dict[str, Any], hsaco: bytes) -> None:
    """Raise TileError listing every way `manifest` disagrees with the code object `hsaco`."""
    problems: list[str] = []
    co = elf.read_code_object(hsaco)
    if co.arch != manifest["arch"]:
        problems.append(f"arch: manifest says {manifest['arch']}, ELF e_flags say {co.arch}")
    symbol = manifest["symbol"]
    for name in (symbol, symbol + ".kd"):
        if name not in co.symbols:
            problems.append(f"symbol '{name}' missing from the code object")
    try:
        _co, md = kernel_metadata(hsaco, symbol)
    except TileError as exc:
        raise TileError(f"manifest check: {exc}") from None

    md_args = [(a[".offset"], a[".size"]) for a in _explicit_args(md)]
    ours = [(k["offset"], k["size"]) for k in manifest["kernargs"]]
    if md_args != ours:
        problems.append(f"kernargs (offset, size): manifest {ours}, code object {md_args}")
    if manifest["kernarg_size"] > md.get(".kernarg_segment_size", 0):
        problems.append(f"kernarg_size {manifest['kernarg_size']} exceeds the code object's "
                        f"segment size {md.get('.kernarg_segment_size')}")
    expected = _code_object_fields(md)
    for key in ("lds_bytes", "kernarg_segment_size", *_REGISTER_FIELDS):
        if manifest.get(key) != expected[key]:
            problems.append(f"{key}: manifest {manifest.get(key)}, code object {expected[key]}")
    if md.get(".wavefront_size") not in (None, manifest["wave_size"]):
        problems.append(f"wave size: manifest {manifest['wave_size']}, code object {md['.wavefront_size']}")
    wg = manifest.get("workgroup_size")
    if wg is not None:
        reqd = md.get(".reqd_workgroup_size")
        if reqd is not None and list(reqd) != list(wg):
            problems.append(f"workgroup size: manifest {wg}, code object requires {list(reqd)}")
        limit = md.get(".max_flat_workgroup_size")
        if limit is not None and wg[0] * wg[1] * wg[2] > limit:
            problems.append(f"workgroup size {wg} exceeds the code object's max_flat_workgroup_size {limit}")
    if symbol + ".kd" in co.symbols:
        _addr, kd = elf.read_kernel_descriptor(co, symbol)
        if kd.group_segment_size != manifest["lds_bytes"]:
            problems.append(f"LDS: manifest {manifest['lds_bytes']}, kernel descriptor {kd.group_segment_size}")
        if kd.wave32 != (manifest["wave_size"] == 32):
            problems.append(f"kernel descriptor wave32={kd.wave32} but manifest wave size {manifest['wave_size']}")
    if problems:
        raise TileError(f"manifest for {manifest.get('kernel')} ({manifest.get('arch')}) disagrees with "
                        "its code object:\n  " + "\n  ".join(problems))
