"""The JSON manifest written next to each code object: everything a launcher needs, nothing more.

Built once per (variant, arch) from the bound kernel (names, kernarg ABI, grid) and the code
object's own metadata note (registers, LDS, spills), so the figures are the ones the hardware will
see. `check_manifest` re-derives every checkable field from the code object; tests use it to keep
the ABI in `tiledsl.ir.abi` and LLVM's kernarg layout in agreement. `validate_manifest` checks a
manifest read from disk (`tiledsl.load_kernel`, kernel packages) has every field a launch reads,
and `code_object_sha256` ties it to the exact code object it was written for.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tiledsl import __version__
from tiledsl.backends.rocm import elf
from tiledsl.backends.rocm.arch import Arch
from tiledsl.errors import CompileError, TileError
from tiledsl.grid import render_condition, render_grid
from tiledsl.ir.abi import kernarg_layout, kernarg_size
from tiledsl.lang.ast import DTYPES, BoundKernel, Call, Index, Kernel, Name, ScalarType, TensorType, walk

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
                   buffer_args: list[int] | tuple[int, ...] = (),
                   row_bounds: list[tuple[int, int]] | tuple[tuple[int, int], ...] = ()) -> dict[str, Any]:
    """The manifest of one variant compiled for `arch`, from its bound kernel and code object.
    buffer_args: the kernarg fields lower-to-gpu addressed with buffer instructions; row_bounds:
    (kernarg field, dim) pairs whose rows a buffer descriptor bounds (tiledsl/ir/row_view.py)."""
    kernel = bound.kernel
    try:
        _co, md = kernel_metadata(hsaco, kernel.name)
    except TileError as exc:
        raise CompileError("manifest", str(exc)) from None
    layout = kernarg_layout(bound, unit_last_stride)
    tensors, scalars = [], []
    written = written_tensors(kernel)
    buffered = {layout[i].tensor for i in buffer_args}
    bounded: dict[str, list[int]] = {}
    for i, dim in sorted(row_bounds):
        bounded.setdefault(layout[i].tensor, []).append(dim)
    for arg in kernel.args:
        if isinstance(arg.type, TensorType):
            tensors.append({"name": arg.name, "dtype": arg.type.dtype, "dims": list(arg.type.dims),
                            "written": arg.name in written, "unit_last_stride": unit_last_stride,
                            "stride_unit": (stride_units or {}).get(arg.name, 1),
                            # addressed with buffer instructions: its byte span must stay <= 2 GiB
                            "buffer": arg.name in buffered,
                            # dims whose stride must exceed the last dim's span (CompileOptions.disjoint_rows)
                            **({"row_bounds": bounded[arg.name]} if arg.name in bounded else {})})
        elif isinstance(arg.type, ScalarType):
            scalars.append({"name": arg.name, "dtype": arg.type.dtype})
    # The kernel language's // and % truncate, the formulas' floor: the same for shape symbols
    # (sizes, never negative), rewritten where an operand may be negative (grid.render_expr).
    sizes = frozenset(bound.shape_symbols)
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
        "grid": render_grid(kernel.grid, sizes),
        # Conditions the launcher checks before a launch (requires(...)), as host expressions.
        "requires": [render_condition(r, sizes) for r in kernel.requires],
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
        # load_kernel refuses a code object changed after compiling (a bit flip may still parse).
        "code_object_sha256": code_object_digest(hsaco),
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
        "code_object_sha256": code_object_digest(hsaco),
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


# ---------------------------------------------------------------------------------------------
# Validation: what a launch reads from a manifest that came from disk (load_kernel, packages).

CODE_OBJECT_DIGEST = "code_object_sha256"
MAX_KERNARG_SIZE = 1 << 20  # bytes; what the C runtime accepts too
MAX_WORKGROUP_ITEMS = 1024
_KINDS = ("pointer", "stride", "shape", "scalar")
_SCALAR_DTYPES = ("i32", "f32")  # what the launcher packs into 4 bytes
_JSON_TYPES = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string",
               list: "list", dict: "object"}


def code_object_digest(hsaco: bytes) -> str:
    """The sha256 a manifest records of its code object (field 'code_object_sha256')."""
    return hashlib.sha256(hsaco).hexdigest()


MANIFEST_DIGEST = "manifest_sha256"


def manifest_digest(manifest: dict[str, Any]) -> str:
    """The sha256 of a manifest's canonical JSON, its own digest field left out: `tiledsl compile`
    writes it into the manifest (field 'manifest_sha256') so that an edited manifest is refused."""
    body = {k: v for k, v in manifest.items() if k != MANIFEST_DIGEST}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def manifest_digest_problem(manifest: dict[str, Any]) -> str | None:
    """Why `manifest` is not as `tiledsl compile` wrote it, or None (manifests written before the
    digest existed have none, and are taken on trust)."""
    want = manifest.get(MANIFEST_DIGEST)
    if want is None or want == manifest_digest(manifest):
        return None
    return ("the manifest is not as `tiledsl compile` wrote it (its manifest_sha256 does not match its "
            "contents): it was edited or damaged; recompile it")


def digest_problem(manifest: dict[str, Any], hsaco: bytes) -> str | None:
    """Why `hsaco` is not the code object `manifest` was written for, or None. Manifests written
    before the digest was recorded have none, and are taken on trust."""
    want = manifest.get(CODE_OBJECT_DIGEST)
    if want is None:
        return None
    got = code_object_digest(hsaco)
    if got == want:
        return None
    return (f"the code object does not match its manifest (sha256 {got[:16]}..., the manifest records "
            f"{str(want)[:16]}...): it was changed or damaged after compiling; recompile it")


def code_object_problem(manifest: dict[str, Any], hsaco: bytes) -> str | None:
    """What is wrong with `hsaco` as the code object `manifest` (already validated) describes, or
    None: it parses (checked first, so a truncated or mangled file says so rather than only that
    its digest differs), it is the one the manifest was written for (digest_problem), and the two
    agree (check_manifest). The readers (tiledsl.load_kernel, kernel packages) wrap the text in
    their own error naming the file."""
    try:
        elf.read_code_object(hsaco).metadata()
        problem = digest_problem(manifest, hsaco)
        if problem is None:
            check_manifest(manifest, hsaco)
    except TileError as exc:
        return str(exc)
    except Exception as exc:  # a reader bug must still name the file, never surface as a bare crash
        return f"not a valid AMDGPU code object ({type(exc).__name__}: {exc})"
    return problem


def validate_manifest(manifest: Any) -> None:
    """Raise ValueError naming the first field of `manifest` that a launch could not use: every
    field `tiledsl.launcher` reads, its type, its range and what it refers to. A manifest that
    passes cannot make a launch fail with anything but a clear error about the arguments."""
    if not isinstance(manifest, dict):
        raise ValueError(f"expected a JSON object (a tiledsl manifest), got {_got(manifest)}")
    if manifest.get("partial"):
        raise ValueError("this is the partial manifest of a kernel compiled from an intermediate file (its tensors "
                         "and grid are unknown), which cannot be launched; compile the .tile source instead")
    fmt = manifest.get("format", MANIFEST_FORMAT)  # manifests before the field existed are format 1
    if fmt != MANIFEST_FORMAT:
        raise ValueError(f"field 'format' is {fmt!r}, this tiledsl reads manifest format {MANIFEST_FORMAT}; "
                         "recompile the kernel with this tiledsl")
    _check_header(manifest)
    tensors = _check_tensors(manifest)
    scalars = _check_scalars(manifest)
    symbols = {d for t in tensors.values() for d in t["dims"] if isinstance(d, str)}
    _check_kernargs(manifest, tensors, scalars, symbols)
    _check_dim_units(manifest, symbols)
    constexprs = _field(manifest, "constexprs", {})
    if not isinstance(constexprs, dict):
        raise _must("constexprs", "an object of name: value", constexprs)
    known = symbols | set(scalars) | {k for k, v in constexprs.items() if isinstance(v, int)}
    grid = _field(manifest, "grid")
    if not isinstance(grid, list) or not 1 <= len(grid) <= 3:
        raise _must("grid", "a list of 1 to 3 formulas", grid)
    for i, text in enumerate(grid):
        _check_formula(f"grid[{i}]", text, known)
    requires = _field(manifest, "requires", [])
    if not isinstance(requires, list):
        raise _must("requires", "a list of conditions", requires)
    for i, text in enumerate(requires):
        _check_formula(f"requires[{i}]", text, known)
    wg = _field(manifest, "workgroup_size")
    if (not isinstance(wg, list) or len(wg) != 3 or not all(_is_int(v) and v >= 1 for v in wg)
            or wg[0] * wg[1] * wg[2] > MAX_WORKGROUP_ITEMS):
        raise _must("workgroup_size", f"3 positive integers of at most {MAX_WORKGROUP_ITEMS} work-items in all", wg)


def _check_header(manifest: dict[str, Any]) -> None:
    from tiledsl.backends.rocm.arch import ARCH_NAMES

    for key in ("kernel", "symbol"):
        value = _field(manifest, key)
        if not isinstance(value, str) or not value:
            raise _must(key, "a non-empty string", value)
    arch = _field(manifest, "arch")
    if arch not in ARCH_NAMES:
        raise _must("arch", f"one of {', '.join(ARCH_NAMES)}", arch)
    wave = _field(manifest, "wave_size")
    if wave not in (32, 64) or isinstance(wave, bool):
        raise _must("wave_size", "32 or 64", wave)
    _int(manifest, "lds_bytes", 0, 1 << 32)
    _int(manifest, "kernarg_size", 0, MAX_KERNARG_SIZE)
    digest = manifest.get(CODE_OBJECT_DIGEST)
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64
                                   and all(c in "0123456789abcdef" for c in digest)):
        raise _must(CODE_OBJECT_DIGEST, "64 lower-case hex digits (a sha256)", digest)


def _check_tensors(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tensor entries by name, each checked."""
    tensors: dict[str, dict[str, Any]] = {}
    for i, t in enumerate(_entries(manifest, "tensors")):
        where = f"tensors[{i}]"
        name = _entry_name(t, where, tensors)
        if t.get("dtype") not in DTYPES:
            raise _must(f"{where}.dtype", f"one of {', '.join(DTYPES)}", t.get("dtype"))
        dims = t.get("dims")
        if not isinstance(dims, list) or not dims or not all(
                (_is_int(d) and d >= 0) or (isinstance(d, str) and d.isidentifier()) for d in dims):
            raise _must(f"{where}.dims", "a non-empty list of sizes and shape symbols", dims)
        for key in ("written", "unit_last_stride", "buffer"):
            if not isinstance(t.get(key, False), bool):
                raise _must(f"{where}.{key}", "true or false", t[key])
        unit = t.get("stride_unit", 1)
        if not _is_int(unit) or unit < 1:
            raise _must(f"{where}.stride_unit", "a positive integer", unit)
        rows = t.get("row_bounds", [])
        if not isinstance(rows, list) or not all(_is_int(d) and 0 <= d < len(dims) for d in rows):
            raise _must(f"{where}.row_bounds", f"a list of dims (0..{len(dims) - 1})", rows)
        tensors[name] = t
    return tensors


def _check_scalars(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    scalars: dict[str, dict[str, Any]] = {}
    for i, s in enumerate(_entries(manifest, "scalars")):
        name = _entry_name(s, f"scalars[{i}]", scalars)
        if s.get("dtype") not in _SCALAR_DTYPES:
            raise _must(f"scalars[{i}].dtype", " or ".join(_SCALAR_DTYPES), s.get("dtype"))
        scalars[name] = s
    return scalars


def _check_kernargs(manifest: dict[str, Any], tensors: dict[str, dict[str, Any]],
                    scalars: dict[str, dict[str, Any]], symbols: set[str]) -> None:
    """Each kernarg's kind, place in the kernarg segment and what it refers to; every tensor and
    scalar is passed exactly once (the launcher matches call arguments to them by name)."""
    size_limit = manifest["kernarg_size"]
    passed: dict[str, str] = {}  # parameter name -> where
    spans = []
    for i, f in enumerate(_entries(manifest, "kernargs")):
        where = f"kernargs[{i}]"
        name = f.get("name")
        if not isinstance(name, str) or not name:
            raise _must(f"{where}.name", "a non-empty string", name)
        kind = f.get("kind")
        if kind not in _KINDS:
            raise _must(f"{where}.kind", f"one of {', '.join(_KINDS)}", kind)
        want_size = 8 if kind == "pointer" else 4
        if f.get("size") != want_size or isinstance(f.get("size"), bool):
            raise _must(f"{where}.size", f"{want_size} for a {kind}", f.get("size"))
        offset = f.get("offset")
        if not _is_int(offset) or not 0 <= offset <= size_limit - want_size:
            raise _must(f"{where}.offset", f"an integer in 0..{size_limit - want_size} (within kernarg_size "
                        f"{size_limit})", offset)
        spans.append((offset, offset + want_size, name))
        _check_kernarg_target(f, where, tensors, scalars, symbols)
        if kind in ("pointer", "scalar"):
            if name in passed:
                raise ValueError(f"field '{where}': argument '{name}' is passed twice (also {passed[name]})")
            passed[name] = where
    spans.sort()
    for (_s0, end0, name0), (start1, _e1, name1) in zip(spans, spans[1:], strict=False):
        if start1 < end0:
            raise ValueError(f"field 'kernargs': '{name0}' and '{name1}' overlap in the kernarg segment")
    _check_strides_passed(manifest["kernargs"], tensors)
    for what, names in (("tensor", tensors), ("scalar", scalars)):
        missing = [n for n in names if n not in passed]
        if missing:
            raise ValueError(f"field 'kernargs': {what} '{missing[0]}' is declared but has no {what} kernarg "
                             f"({'pointer' if what == 'tensor' else 'scalar'} kind)")


def _check_strides_passed(kernargs: list[dict[str, Any]], tensors: dict[str, dict[str, Any]]) -> None:
    """Each tensor passes one stride per dim, but the last when it is the constant 1
    (unit_last_stride): what the kernel's code reads, as `tiledsl.ir.abi.kernarg_layout` lays it out."""
    for name, t in tensors.items():
        ndim = len(t["dims"])
        want = list(range(ndim - 1 if t.get("unit_last_stride") else ndim))
        got = sorted(f["dim"] for f in kernargs if f["kind"] == "stride" and f["tensor"] == name)
        if got != want:
            raise ValueError(f"field 'kernargs': tensor '{name}' has {ndim} dims"
                             f"{' with a unit last stride' if t.get('unit_last_stride') else ''}, so it passes strides "
                             f"for dims {want}, but kernargs has strides for dims {got}")


def _check_kernarg_target(f: dict[str, Any], where: str, tensors: dict[str, dict[str, Any]],
                          scalars: dict[str, dict[str, Any]], symbols: set[str]) -> None:
    """The tensor, dim, scalar or shape symbol a kernarg refers to exists."""
    kind, name = f["kind"], f["name"]
    if kind in ("pointer", "scalar"):  # a tensor's pointer or a scalar argument, of the same dtype
        table, label = (tensors, "tensors") if kind == "pointer" else (scalars, "scalars")
        if name not in table:
            raise _unknown(f"{where}.name", kind, name, f"the {label}", table)
        if f.get("dtype") != table[name]["dtype"]:
            raise ValueError(f"field '{where}.dtype': {kind} '{name}' has dtype {f.get('dtype')!r}, but {label} "
                             f"says '{name}' is {table[name]['dtype']!r}")
    elif kind == "stride":
        tensor = f.get("tensor")
        if tensor not in tensors:
            raise _unknown(f"{where}.tensor", "stride's tensor", tensor, "the tensors", tensors)
        ndim = len(tensors[tensor]["dims"])
        if not _is_int(f.get("dim")) or not 0 <= f["dim"] < ndim:
            raise _must(f"{where}.dim", f"an integer in 0..{ndim - 1} (a dim of tensor '{tensor}')", f.get("dim"))
    elif name not in symbols:
        raise _unknown(f"{where}.name", "shape", name, "the shape symbols in the tensors' dims", symbols)


def _check_dim_units(manifest: dict[str, Any], symbols: set[str]) -> None:
    units = _field(manifest, "dim_units", {})
    if not isinstance(units, dict):
        raise _must("dim_units", "an object of shape symbol: unit", units)
    for sym, unit in units.items():
        if sym not in symbols:
            raise _unknown("dim_units", "key", sym, "the shape symbols in the tensors' dims", symbols)
        if not _is_int(unit) or unit < 1 or unit & (unit - 1):
            raise _must(f"dim_units.{sym}", "a power of two", unit)


def _check_formula(where: str, text: Any, known: set[str]) -> None:
    """A grid formula or requires(...) condition parses, and names only functions the launcher's
    evaluator has and values a launch binds (shape symbols, scalars, integer constexprs)."""
    import ast as pyast

    from tiledsl.grid import _FUNCS, _MAX_FORMULA  # the evaluator's functions and bound: one list of them

    if not isinstance(text, str) or not text.strip():
        raise _must(where, "a formula (a non-empty string)", text)
    if len(text) > _MAX_FORMULA:
        raise ValueError(f"field '{where}': a formula of {len(text)} characters, more than the {_MAX_FORMULA} a "
                         "launcher reads")
    try:
        tree = pyast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise ValueError(f"field '{where}': {text!r} is not a formula ({getattr(exc, 'msg', exc)})") from None
    for node in pyast.walk(tree):
        if isinstance(node, pyast.Call) and not (isinstance(node.func, pyast.Name) and node.func.id in _FUNCS):
            raise ValueError(f"field '{where}': {text!r} calls something other than {', '.join(_FUNCS)}")
        if isinstance(node, pyast.Name) and node.id not in known and node.id not in _FUNCS:
            raise ValueError(f"field '{where}': {text!r} uses '{node.id}', which is no shape symbol, scalar or "
                             f"integer constexpr of the manifest")


def _entries(manifest: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = _field(manifest, key)
    if not isinstance(value, list):
        raise _must(key, "a list of objects", value)
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise _must(f"{key}[{i}]", "an object", entry)
    return value


def _entry_name(entry: dict[str, Any], where: str, seen: dict[str, Any]) -> str:
    name = entry.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise _must(f"{where}.name", "an identifier", name)
    if name in seen:
        raise ValueError(f"field '{where}.name': '{name}' is declared twice")
    return name


def _field(manifest: dict[str, Any], key: str, default: Any = ...) -> Any:
    if key in manifest:
        return manifest[key]
    if default is ...:
        raise ValueError(f"field '{key}' is missing")
    return default


def _int(manifest: dict[str, Any], key: str, lo: int, hi: int) -> int:
    value = _field(manifest, key)
    if not _is_int(value) or not lo <= value <= hi:
        raise _must(key, f"an integer in {lo}..{hi}", value)
    return value


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _must(where: str, expected: str, got: Any) -> ValueError:
    return ValueError(f"field '{where}' must be {expected}, got {_got(got)}")


def _unknown(where: str, kind: str, name: Any, table: str, names: Any) -> ValueError:
    listed = ", ".join(sorted(names)) or "none"
    return ValueError(f"field '{where}': the {kind} {name!r} is not one of {table}: {listed}")


def _got(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{_JSON_TYPES.get(type(value), type(value).__name__)} {text}" if value is not None else "null"
