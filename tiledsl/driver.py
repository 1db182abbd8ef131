"""The compiler driver: a loop over a table of stages, one function and one artifact per stage.

    source .tile ─parse─► ast ─check─► typed ─emit─► tile.mlir ─tile-passes─► gpu.mlir
      ─convert-gpu-to-rocdl─► rocdl.mlir ─translate─► ll ─codegen─► s + o ─link─► hsaco

A stage's name is its artifact's extension (as in Triton's `make_<stage>` table). A run may start
from any intermediate file (`.tile.mlir`, `.gpu.mlir`, `.rocdl.mlir`, `.ll`): the driver picks the
first stage by the file's extension. Every stage's artifact can be dumped (`options.dump_ir_dir`),
and a failing stage raises `CompileError` naming itself with its input IR saved to a file.

Heavy modules (front-end, MLIR bindings, llvmlite, manifest) are imported inside the stage
functions: a cache hit goes through `compile_source` without importing any of them.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import os
import pprint
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiledsl.backends.rocm.arch import ARCHS, Arch, get_arch
from tiledsl.cache import FILE_MODE, Cache, CacheEntry, cache_key, default_cache_dir, reports_dir
from tiledsl.errors import CompileError, SourceError, SourceLocation, TileError
from tiledsl.lang import make_recursion_room
from tiledsl.options import CompileOptions

# ---------------------------------------------------------------------------------------------
# Results and per-run state.


@dataclass
class CompiledKernel:
    name: str
    arch: str
    hsaco: bytes
    assembly: str | LazyAssembly  # the .s text (`asm`), or what makes it on first use
    manifest: dict[str, Any]
    from_cache: bool = False
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage (empty on a hit)
    key: str | None = None  # a library kernel's package key (tiledsl.package.kernel_key)

    @property
    def asm(self) -> str:
        """The code object's assembly text (LLVM's .s)."""
        if isinstance(self.assembly, LazyAssembly):
            self.assembly = self.assembly.text()
        return self.assembly


@dataclass
class LazyAssembly:
    """A code object's assembly text, made from its optimized LLVM IR on first use: a second
    codegen run, which most compiles (the driver's retries above all) never need."""

    optimized_ll: str
    arch: Arch
    isolated: bool  # codegen runs in a child process (make_isa)
    _text: str | None = None

    @property
    def made(self) -> bool:
        return self._text is not None

    def text(self) -> str:
        if self._text is None:
            from tiledsl.backends.rocm import codegen

            make = codegen.make_assembly_isolated if self.isolated else codegen.make_assembly
            self._text = make(self.optimized_ll, self.arch)
        return self._text


@dataclass
class IsaObject:
    """The codegen stage's artifacts: the relocatable object (.o) and its assembly (.s, lazy)."""

    obj: bytes
    assembly: LazyAssembly

    @property
    def asm(self) -> str:
        return self.assembly.text()


@dataclass
class StageContext:
    """What stages share besides their input artifact; one per (source, arch) run."""

    arch: Arch
    options: CompileOptions
    filename: str
    defines: dict[str, str]
    prefix: str  # dump-file prefix: the file stem until the parser tells us the kernel's name
    source: str | None = None  # the .tile text, when the run starts from one (error carets)
    input_kind: str = "tile"  # what the run starts from (input_kind): tile, tile.mlir, gpu.mlir, rocdl.mlir, ll
    bound: Any = None  # the BoundKernel once the check stage ran
    facts: dict[str, Any] = field(default_factory=dict)  # what the tile passes found (PassContext.facts)
    isa: IsaObject | None = None  # the codegen stage's artifact once it ran
    timings: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Stages. Each takes (context, input artifact) and returns its own artifact.


def make_ast(ctx: StageContext, source: str) -> Any:
    from tiledsl.lang.parser import parse

    kernel = parse(source, ctx.filename)
    ctx.prefix = kernel.name
    return kernel


def make_typed(ctx: StageContext, kernel: Any) -> Any:
    from tiledsl.lang.checker import bind

    ctx.bound = bind(kernel, dict(ctx.defines), ctx.arch)
    if ctx.options.occupancy_cap is not None:
        ctx.bound.occupancy = min(ctx.bound.occupancy, ctx.options.occupancy_cap)
    return ctx.bound


def make_tile_mlir(ctx: StageContext, bound: Any) -> str:
    from tiledsl.ir.emit import emit_tile_mlir

    return emit_tile_mlir(bound, ctx.arch, ctx.options)


def make_gpu_mlir(ctx: StageContext, tile_mlir: str) -> str:
    from tiledsl.passes.pipeline import make_gpu_mlir as run_tile_passes

    # The DSL source for error carets, and a prefix that files the per-pass dumps between this
    # run's "03-emit" and "04-tile-passes" dumps.
    return run_tile_passes(tile_mlir, ctx.arch, ctx.options, source=ctx.source,
                           dump_prefix=f"{ctx.prefix}.{ctx.arch.name}.03", facts=ctx.facts)


# Where each intermediate says which arch it was compiled for (lower-to-gpu, codegen.extract_gpu_module).
_ARCH_MARKS: dict[str, re.Pattern[str]] = {
    "gpu.mlir": re.compile(r'\btile\.arch = "([^"]+)"'),
    "rocdl.mlir": re.compile(r'\btarget_cpu = "([^"]+)"'),
    "ll": re.compile(r'"target-cpu"="([^"]+)"'),
}


def check_input_arch(kind: str, text: str, arch: Arch, action: str) -> None:
    """A .gpu.mlir, .rocdl.mlir or .ll input made for one arch must not be compiled for another:
    its layouts assume that arch's wave size and matrix instructions, and LLVM would not notice.
    (A hand-written intermediate that names no arch is taken as it is.) Checked once, on the file
    a run starts from: the artifacts a run makes itself are for its own arch."""
    if kind not in _ARCH_MARKS:
        return
    found = _ARCH_MARKS[kind].search(text)
    if found and found.group(1) != arch.name:
        raise CompileError(action, f"the input was compiled for {found.group(1)} (its .{kind} says so), but it is "
                                   f"being compiled for {arch.name}: start again from the .tile source, or compile it "
                                   f"for {found.group(1)}")


def make_rocdl_mlir(ctx: StageContext, gpu_mlir: str) -> str:
    from tiledsl.backends.rocm import codegen

    return codegen.make_rocdl(gpu_mlir, ctx.arch)


def make_ll(ctx: StageContext, rocdl_mlir: str) -> str:
    from tiledsl.backends.rocm import codegen

    return codegen.make_llir(rocdl_mlir, ctx.arch)


def make_isa(ctx: StageContext, llir: str) -> IsaObject:
    from tiledsl.backends.rocm import codegen

    # LLVM aborts the process on some IR it cannot select (inline assembly it does not know, fp128
    # arithmetic): IR that did not come from our own passes is compiled in a child process, whose
    # death is a CompileError, as are the scheduling options' crashes.
    isolated = bool(scheduling(ctx.options)) or ctx.input_kind != "tile"
    if isolated:
        optimized, obj = codegen.optimize_and_make_object_isolated(llir, ctx.arch)
    else:
        optimized = codegen.optimize(llir, ctx.arch)
        obj = codegen.make_object(optimized, ctx.arch)
    ctx.isa = IsaObject(obj, LazyAssembly(optimized, ctx.arch, isolated))
    return ctx.isa


def make_hsaco(ctx: StageContext, isa: IsaObject) -> bytes:
    from tiledsl.backends.rocm import codegen

    return codegen.make_hsaco(isa.obj)


@dataclass(frozen=True)
class Stage:
    name: str  # the artifact's extension, and the key a run can start after
    action: str  # what the stage does: used in dump-file names and error messages
    run: Callable[[StageContext, Any], Any]


STAGES: tuple[Stage, ...] = (
    Stage("ast", "parse", make_ast),
    Stage("typed", "check", make_typed),
    Stage("tile.mlir", "emit", make_tile_mlir),
    Stage("gpu.mlir", "tile-passes", make_gpu_mlir),
    Stage("rocdl.mlir", "convert-gpu-to-rocdl", make_rocdl_mlir),
    Stage("ll", "translate", make_ll),
    Stage("s", "codegen", make_isa),  # also writes the object as ".o"
    Stage("hsaco", "link", make_hsaco),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
# Files a run can start from, mapped to the index of the first stage to run.
START_EXTENSIONS: dict[str, int] = {
    "tile": 0, "tile.mlir": 3, "gpu.mlir": 4, "rocdl.mlir": 5, "ll": 6,
}


def input_kind(filename: str) -> str:
    """The start extension of `filename` ("tile", "gpu.mlir", ...), longest match first."""
    name = os.path.basename(filename)
    for ext in sorted(START_EXTENSIONS, key=len, reverse=True):
        if name.endswith("." + ext):
            return ext
    raise TileError(f"cannot compile '{filename}': expected one of "
                    + ", ".join("." + e for e in START_EXTENSIONS))


def _stem(filename: str, kind: str) -> str:
    stem = os.path.basename(filename)[: -len(kind) - 1] or "kernel"
    # A dump being fed back in ("gemm.gfx942.04-tile-passes"): keep only the kernel's name so
    # the new dumps do not nest the old suffixes.
    parts = stem.split(".")
    if len(parts) >= 3 and parts[1] in ARCHS and parts[2][:2].isdigit():
        return parts[0]
    return stem


# ---------------------------------------------------------------------------------------------
# Dumps and saved inputs.


def _artifact_files(ext: str, artifact: Any) -> list[tuple[str, bytes]]:
    """(extension, bytes) of each file an artifact is written as."""
    if isinstance(artifact, IsaObject):
        return [("s", artifact.asm.encode()), ("o", artifact.obj)]
    if isinstance(artifact, bytes):
        return [(ext, artifact)]
    if isinstance(artifact, str):
        return [(ext, artifact.encode())]
    # AST / typed AST: the dataclass tree, for reading (sort_dicts=False keeps field order).
    return [(ext, pprint.pformat(artifact, width=110, sort_dicts=False).encode())]


def _write_artifact(directory: Path, ctx: StageContext, number: int, action: str, ext: str,
                    artifact: Any) -> Path:
    make_dir(directory, "--dump-ir")
    first = None
    for file_ext, data in _artifact_files(ext, artifact):
        path = directory / f"{ctx.prefix}.{ctx.arch.name}.{number:02d}-{action}.{file_ext}"
        write_atomic(path, data)
        first = first or path
    assert first is not None
    return first


def _input_label(index: int, start: int, kind: str) -> tuple[int, str, str]:
    """(number, action, extension) naming the artifact stage `index` consumes."""
    if index == start:
        return 0, "source", kind
    prev = STAGES[index - 1]
    return index, prev.action, prev.name


def _save_input(ctx: StageContext, index: int, start: int, kind: str, value: Any) -> str | None:
    number, action, ext = _input_label(index, start, kind)
    if isinstance(value, IsaObject):  # the link stage consumes the object only
        ext, value = "o", value.obj
    try:
        if ctx.options.dump_ir_dir:
            directory = Path(ctx.options.dump_ir_dir)
        else:
            parent = ctx.options.failure_dir
            if parent:
                Path(parent).mkdir(parents=True, exist_ok=True)
            directory = Path(tempfile.mkdtemp(prefix="tiledsl-failed-", dir=parent))
        return str(_write_artifact(directory, ctx, number, action, ext, value))
    except Exception:  # OSError, or a RecursionError printing a deep AST
        return None  # never hide the real error behind a failure to save its input


def _strip_prefix(exc: CompileError) -> str:
    text = str(exc).split("\n(the IR it failed on", 1)[0]
    prefix = f"stage '{exc.stage}' failed: "
    return text[len(prefix):] if text.startswith(prefix) else text


# The driver's retries of one kernel often change an option that a stage did not read, so within
# one compile_source call (scoped so that a cold compile stays cold: benchmarks/compile_time.py)
# the artifacts are reused where a stage's input and what it reads are the same:
# - the front end (parse, check, emit: the tile.mlir text, the kernel's name and bound kernel) reads
#   the source, the defines, the arch and every option but BACKEND_ONLY_OPTIONS;
# - the stages after gpu.mlir (MLIR's conversion to ROCDL, then LLVM) read that text and the arch
#   alone, LLVM's scheduling options travelling in the IR; LLVM is deterministic (every repeated
#   gpu.mlir in a test run gave the same bytes), so the code object is reused.
_RETRY_RESULTS: contextvars.ContextVar[dict[tuple[Any, ...], Any] | None] = \
    contextvars.ContextVar("tiledsl_retry_results", default=None)
_FRONT_END_STOP = STAGE_NAMES.index("tile.mlir") + 1
_BACKEND_START = STAGE_NAMES.index("gpu.mlir") + 1


def _front_end_key(ctx: StageContext, source: str) -> tuple[Any, ...]:
    return ("front", ctx.arch.name, ctx.filename, tuple(sorted(ctx.defines.items())), ctx.options.front_end_fields(),
            _digest(source))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def run_stages(ctx: StageContext, value: Any, start: int, kind: str, stop: int | None = None) -> Any:
    """Run STAGES[start:stop] on `value` (an artifact of kind `kind`); returns the last artifact."""
    make_recursion_room()  # a deep program, from a .tile or an intermediate file
    check_input_arch(kind, value, ctx.arch, STAGES[start].action)
    dump = Path(ctx.options.dump_ir_dir) if ctx.options.dump_ir_dir else None
    initial, initial_dumped = value, False
    # A run that dumps shows every stage's artifact; one that stops early is a test's.
    reused = _RETRY_RESULTS.get() if stop is None and dump is None else None
    front_key = back_key = None
    index = start
    while index < (len(STAGES) if stop is None else stop):
        stage = STAGES[index]
        if reused is not None and index == 0 and kind == "tile":
            front_key = _front_end_key(ctx, value)
            if front_key in reused:
                ctx.prefix, ctx.bound, value = reused[front_key]
                index = _FRONT_END_STOP
                continue
        if reused is not None and index == _BACKEND_START and isinstance(value, str):
            back_key = "back", ctx.arch.name, _digest(value)
            if back_key in reused:
                ctx.isa, hsaco = reused[back_key]
                return hsaco
        t0 = time.perf_counter()
        try:
            out = stage.run(ctx, value)
        except SourceError:
            raise  # already points at the user's source line: better than any IR
        except CompileError as exc:
            saved = exc.saved_input or _save_input(ctx, index, start, kind, value)
            raise CompileError(exc.stage, _strip_prefix(exc), saved) from exc
        except TileError as exc:
            raise CompileError(stage.action, str(exc), _save_input(ctx, index, start, kind, value)) from exc
        except Exception as exc:
            saved = _save_input(ctx, index, start, kind, value)
            if type(exc).__module__.startswith("mlir"):  # ir.MLIRError: verifier/pass diagnostics
                raise CompileError(stage.action, str(exc), saved) from exc
            # A compiler bug: keep the traceback (the CLI reports an internal error) but say where.
            exc.add_note(f"in stage '{stage.action}' (-> .{stage.name}); its input is saved at {saved}")
            raise
        ctx.timings[stage.name] = time.perf_counter() - t0
        if dump is not None:
            if not initial_dumped:  # after the parse stage, so the dump uses the kernel's name
                _write_artifact(dump, ctx, 0, "source", kind, initial)
                initial_dumped = True
            _write_artifact(dump, ctx, index + 1, stage.action, stage.name, out)
        value = out
        index += 1
        if reused is not None and front_key is not None and index == _FRONT_END_STOP:
            reused[front_key] = (ctx.prefix, ctx.bound, value)
    if reused is not None and back_key is not None and ctx.isa is not None:
        reused[back_key] = (ctx.isa, value)
    return value


# ---------------------------------------------------------------------------------------------
# Entry points.


def _validate_defines(defines: Mapping[str, str]) -> dict[str, str]:
    """Shape checks only; whether each name is a constexpr of the kernel is the checker's job
    (a cache hit implies these exact defines bound successfully once: errors are never cached)."""
    clean: dict[str, str] = {}
    for name, value in defines.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise TileError(f"bad define name {name!r}: expected an identifier (-D NAME=VALUE)")
        text = value if isinstance(value, str) else str(value)
        if not text.strip() or text != text.strip():
            raise TileError(f"bad value {text!r} for define {name}: expected a non-empty value "
                            "without surrounding spaces")
        clean[name] = text
    return dict(sorted(clean.items()))


def _options_for(arch: str, defines: dict[str, str], options: CompileOptions | None) -> CompileOptions:
    # `arch` and `defines` are authoritative: one options object is reused across archs.
    if options is None:
        return CompileOptions.make(arch, defines)
    return dataclasses.replace(options, arch=arch, constexprs=tuple(defines.items()))


def _compile_searching(arch_row: Arch, opts: CompileOptions, filename: str, clean: dict[str, str], source: str,
                       kind: str) -> tuple[StageContext, bytes, dict[str, Any]]:
    """_compile_fitting, then one occupancy target lower at a time while the kernel does not fit it,
    then _fewest_live_registers: the search compile_source makes for one kernel."""
    ctx, hsaco, manifest = _compile_fitting(arch_row, opts, filename, clean, source, kind)
    target = ctx.bound.occupancy if ctx.bound is not None else 0
    # Targets at or below what a wave gets with every register (CDNA: 1, RDNA: 6) restrict nothing,
    # so they are neither tried as caps nor lowered (compiling again would give the same code).
    floor = arch_row.occupancy(arch_row.vgprs_per_lane)
    caps = [*range(target - 1, floor, -1), 0] if target > floor else []
    for cap in caps:
        if _fits(manifest, ctx):
            break
        # occupancy(N) is a target: where N waves per SIMD spill registers or are out of LLVM's
        # reach, one wave fewer, down to no target at all; the manifest says what was asked.
        ctx, hsaco, manifest = _compile_fitting(arch_row, dataclasses.replace(opts, occupancy_cap=cap), filename,
                                                clean, source, kind)
        manifest["occupancy_target"] = target
        manifest["occupancy_lowered_to"] = cap
    ctx, hsaco, manifest = _fewest_live_registers(arch_row, (ctx, hsaco, manifest), filename, clean, source, kind)
    if scheduling(opts) and not scheduling(ctx.options):  # the retries went back to LLVM's default
        manifest.setdefault("schedule_fallback", f"spills registers with {scheduling(opts)}; "
                                                 "compiled with LLVM's default")
    return ctx, hsaco, manifest


def compile_source(source: str, filename: str, arch: str, defines: Mapping[str, str] | None = None,
                   options: CompileOptions | None = None, *, cache: Cache | None = None) -> CompiledKernel:
    """Compile one kernel for one arch. `filename` names the source in errors and selects where
    the run starts (".tile" or an intermediate extension). `cache=None` disables caching; pass
    `Cache.from_env()` at the edge to use the default location. A run that dumps IR
    (options.dump_ir_dir) always compiles, but still stores its result. Processes sharing a cache
    compile a kernel once: one asking for a kernel another is compiling waits for its entry
    (`Cache.compiling`). The input of a stage that
    fails is saved under options.failure_dir, else the cache's `reports` directory (the default
    cache directory's without a cache)."""
    for what, value in (("source", source), ("filename", filename)):
        if not isinstance(value, str):
            raise TypeError(f"compile_source: {what} must be a str, got {type(value).__name__}")
    if defines is not None and not isinstance(defines, Mapping):
        raise TypeError(f"compile_source: defines must be a mapping of names to values, got {type(defines).__name__}")
    arch_row = get_arch(arch)
    clean = _validate_defines(defines or {})
    opts = _options_for(arch_row.name, clean, options)
    if not opts.failure_dir:  # a failed stage's input goes where the CLI puts its reports too
        opts = dataclasses.replace(opts, failure_dir=str(reports_dir(cache.root if cache else default_cache_dir())))
    kind = input_kind(filename)
    if kind != "tile" and clean:
        raise TileError(f"-D defines apply to .tile sources only; '{filename}' is already lowered")
    if cache is None:
        return _compile_and_store(arch_row, opts, filename, clean, source, kind, None, None)
    key = cache_key(arch=arch_row.name, options=opts, defines=clean, source=source, input_kind=kind)
    if opts.dump_ir_dir:
        return _compile_and_store(arch_row, opts, filename, clean, source, kind, cache, key)
    hit = _cached(cache, key, arch_row, clean)
    if hit is not None:
        return hit
    with cache.compiling(key):  # a process compiling the same kernel: wait for its entry
        hit = _cached(cache, key, arch_row, clean)
        if hit is not None:
            return hit
        return _compile_and_store(arch_row, opts, filename, clean, source, kind, cache, key)


def _cached(cache: Cache, key: str, arch_row: Arch, clean: dict[str, str]) -> CompiledKernel | None:
    entry = cache.get(key)
    if entry is None or not _entry_matches(entry, arch_row.name, clean):
        return None
    assembly = entry.asm if entry.asm is not None else \
        LazyAssembly(entry.optimized_ll or "", arch_row, entry.isolated_codegen)
    return CompiledKernel(entry.manifest["kernel"], arch_row.name, entry.hsaco, assembly, entry.manifest,
                          from_cache=True)


def _compile_and_store(arch_row: Arch, opts: CompileOptions, filename: str, clean: dict[str, str], source: str,
                       kind: str, cache: Cache | None, key: str | None) -> CompiledKernel:
    token = _RETRY_RESULTS.set({})
    try:
        ctx, hsaco, manifest = _compile_searching(arch_row, opts, filename, clean, source, kind)
    finally:
        _RETRY_RESULTS.reset(token)
    _check_spills(manifest, ctx, opts)
    assembly = ctx.isa.assembly if ctx.isa is not None else ""
    result = CompiledKernel(manifest["kernel"], arch_row.name, hsaco, assembly, manifest,
                            from_cache=False, timings=ctx.timings)
    if cache is not None and key is not None:
        cache.put(key, _cache_entry(result))
    return result


def _cache_entry(kernel: CompiledKernel) -> CacheEntry:
    """What the cache keeps of a compiled kernel: its assembly where it was made, else the
    optimized LLVM IR that makes it."""
    lazy = kernel.assembly
    if isinstance(lazy, LazyAssembly) and not lazy.made:
        return CacheEntry(kernel.hsaco, None, kernel.manifest, lazy.optimized_ll, lazy.isolated)
    return CacheEntry(kernel.hsaco, kernel.asm, kernel.manifest)


def scheduling(opts: CompileOptions) -> str:
    """What the options ask of LLVM's scheduler beyond its defaults, in words ("" for nothing):
    such kernels are compiled in a child process (an LLVM crash there is not the caller's) and
    compiled again with the defaults where they crash or spill."""
    asks = [f"the {opts.schedule} scheduler"] if opts.schedule else []
    if opts.interleave:
        asks.append("LDS/matrix interleaving")
    return " and ".join(asks)


def default_scheduling(opts: CompileOptions) -> CompileOptions:
    return dataclasses.replace(opts, schedule="", interleave=False)


def _compile_once(arch_row: Arch, opts: CompileOptions, filename: str, clean: dict[str, str], source: str,
                  kind: str) -> tuple[StageContext, bytes, dict[str, Any]]:
    """Run the stages once: (their context, the code object, its manifest). Where LLVM crashes with
    the scheduler the options ask for, they run again with its default, and the manifest says so."""
    from tiledsl.backends.rocm.codegen import CodegenCrashed

    ctx = StageContext(arch_row, opts, filename, clean, prefix=_stem(filename, kind),
                       source=source if kind == "tile" else None, input_kind=kind)
    try:
        hsaco = run_stages(ctx, source, START_EXTENSIONS[kind], kind)
    except CompileError as exc:
        if not (scheduling(opts) and isinstance(exc.__cause__, CodegenCrashed)):
            raise
        ctx, hsaco, manifest = _compile_once(arch_row, default_scheduling(opts), filename, clean, source, kind)
        saved = f" (its input is saved at {exc.saved_input})" if exc.saved_input else ""
        manifest["schedule_fallback"] = (f"{exc.detail} with {scheduling(opts)}{saved}; "
                                         "compiled with LLVM's default")
        return ctx, hsaco, manifest

    from tiledsl import manifest as mf  # after the stages: imports the front-end's AST module

    t0 = time.perf_counter()
    if ctx.bound is not None:
        try:
            manifest = mf.build_manifest(ctx.bound, arch_row, hsaco, clean, opts.unit_last_stride,
                                         dict(opts.stride_units), dict(opts.dim_units),
                                         ctx.facts.get("buffer_args", ()), ctx.facts.get("row_bounds", ()))
        except SourceError as exc:  # a grid or requires formula the host could not read: show its line
            if exc.source is not None:
                raise
            raise SourceError(exc.message, exc.loc, ctx.source, exc.hint) from None
    else:
        manifest = mf.manifest_from_code_object(hsaco, arch_row)
    if opts.schedule:
        manifest["schedule"] = opts.schedule
    if opts.interleave:
        manifest["interleave"] = True
    if opts.skip_unit_scales:
        manifest["skip_unit_scales"] = True
    ctx.timings["manifest"] = time.perf_counter() - t0
    return ctx, hsaco, manifest


FEW_SPILLS = 8  # registers: about what the row addresses of transposed LDS stores take


def _compile_fitting(arch_row: Arch, opts: CompileOptions, filename: str, clean: dict[str, str], source: str,
                     kind: str) -> tuple[StageContext, bytes, dict[str, Any]]:
    """_compile_retrying; if the result still spills and fold-scalars-laid-out moved a sum, all of
    it once more without that pass (the moved sums can hold more registers across a loop), keeping
    the result with fewer spills. Then, where operand tiles held in registers across a loop may
    cost the kernel waves per SIMD or spill (_resident_may_win), all of it once more with those
    tiles kept in LDS (CompileOptions.resident_operands), keeping the result with fewer spills,
    then more waves per SIMD."""
    best = _compile_retrying(arch_row, opts, filename, clean, source, kind)
    spills = spill_counts(best[2])
    worth_it = not opts.allow_spills or sum(spills) <= FEW_SPILLS  # not a kernel that spills anyway
    if any(spills) and best[0].facts.get("laid_out_folds") and opts.fold_laid_out and worth_it:
        again = _compile_retrying(arch_row, dataclasses.replace(opts, fold_laid_out=False), filename, clean,
                                  source, kind)
        if spill_counts(again[2]) < spills:
            best = again
    if not opts.resident_operands and _resident_may_win(arch_row, best[0].facts, best[2]):
        again = _compile_fitting(arch_row, dataclasses.replace(opts, resident_operands=True), filename, clean,
                                 source, kind)
        if _ranking(arch_row, again[2]) > _ranking(arch_row, best[2]):
            again[2]["resident_operands"] = _why_resident(arch_row, best[2], again[2])
            best = again
    return best


def waves_per_simd(arch_row: Arch, manifest: dict[str, Any], waves: int | None = None) -> int:
    """Waves per SIMD a compiled kernel keeps resident (its registers and LDS), `waves` per
    workgroup (the manifest's by default)."""
    return arch_row.occupancy(int(manifest.get("vgpr_count") or 0), int(manifest.get("lds_bytes") or 0),
                              waves or manifest.get("waves") or 1)


def _ranking(arch_row: Arch, manifest: dict[str, Any]) -> tuple[int, int]:
    """Larger is better: fewer spilled registers, then more waves per SIMD."""
    return -sum(spill_counts(manifest)), waves_per_simd(arch_row, manifest)


def _why_resident(arch_row: Arch, held: dict[str, Any], resident: dict[str, Any]) -> str:
    """The manifest's note when the operand tiles stayed in LDS: what registers would have cost."""
    vgprs, sgprs = spill_counts(held)
    if vgprs or sgprs:
        return f"operand tiles kept in LDS: in registers the kernel spilled {vgprs} VGPRs and {sgprs} SGPRs"
    return (f"operand tiles kept in LDS: in registers {waves_per_simd(arch_row, held)} waves per SIMD, "
            f"here {waves_per_simd(arch_row, resident)}")


def _resident_may_win(arch_row: Arch, facts: dict[str, Any], manifest: dict[str, Any]) -> bool:
    """Could keeping hoist-conversions' held operand tiles in LDS instead of registers give this
    kernel fewer spills or more waves per SIMD? Estimated without compiling: its registers less
    theirs (`held_registers`), the LDS stage-lds found it would take (`lds_if_resident`)."""
    regs = facts.get("held_registers") or 0
    if not regs:
        return False
    if any(spill_counts(manifest)):
        return True
    resident = dict(manifest, vgpr_count=max(1, (manifest.get("vgpr_count") or 0) - regs),
                    lds_bytes=facts.get("lds_if_resident") or manifest.get("lds_bytes") or 0)
    return waves_per_simd(arch_row, resident) > waves_per_simd(arch_row, manifest)


def _compile_retrying(arch_row: Arch, opts: CompileOptions, filename: str, clean: dict[str, str], source: str,
                      kind: str) -> tuple[StageContext, bytes, dict[str, Any]]:
    """_compile_once, again while it spills: with a barrier before every LDS staging (if it spills
    vector registers), then without swizzled stagings (if it spills vector registers and has
    any), then, while it spills a few registers: with fewer rows per lane for
    transposed LDS stores (several rows take more registers, their row addresses), down to one
    element at a time, then with shuffles instead of lane swaps across wave halves, then with
    masked accesses as branches instead of buffer accesses, taken where that spills less without
    branches in the hot loop (`hot_cost`; LLVM keeps fewer loads in flight; pointers take half
    the scalar registers of descriptors). A
    kernel that spills more than these can explain is not compiled again (an occupancy target
    out of reach: the caller lowers it). A kernel compiled with a scheduler of its own
    (CompileOptions.schedule, .interleave: `scheduling`) that spills is first compiled with LLVM's
    defaults."""
    best = _compile_once(arch_row, opts, filename, clean, source, kind)

    def few_spills() -> bool:
        return 0 < sum(spill_counts(best[2])) <= FEW_SPILLS

    def by_spills(compiled: tuple[StageContext, bytes, dict[str, Any]]) -> tuple[int, ...]:
        return spill_counts(compiled[2])

    def retry(retry_opts: CompileOptions, cost: Callable[[Any], tuple[int, ...]] = by_spills) -> None:
        nonlocal best
        again = _compile_once(arch_row, retry_opts, filename, clean, source, kind)
        if cost(again) < cost(best):
            best = again

    def fewer_rows(base: CompileOptions, cost: Callable[[Any], tuple[int, ...]] = by_spills) -> None:
        # Limits at or above the most rows a load took compile the same code (assign-layouts).
        rows = min(base.transposed_rows, best[0].facts.get("transposed_rows_taken", base.transposed_rows))
        while few_spills() and rows > 1:
            rows //= 2
            retry(dataclasses.replace(base, transposed_rows=rows), cost)

    # What the options ask of LLVM's scheduler (`scheduling`: another strategy, interleaving) can
    # keep more values live: a kernel that spills with it is compiled with LLVM's defaults first.
    if any(spill_counts(best[2])) and scheduling(opts):
        retry(default_scheduling(opts))
    opts = best[0].options
    # Barriers between LDS stagings also keep LLVM from hoisting loads across them: a kernel that
    # spills vector registers is compiled again with every staging behind one (stage-lds), unless
    # it may spill and spills more than a few (RDNA's hdim 256 rows: a second compile of a large
    # kernel that would spill either way).
    if spill_counts(best[2])[0] and opts.lds_spread and (not opts.allow_spills or few_spills()):
        retry(dataclasses.replace(opts, lds_spread=False))
    # A swizzled staging keeps a base address per flip in registers (stage-lds): without swizzles.
    # Tried for up to MINREG_SPILLS even where spills are allowed: with the swizzles LLVM can also
    # schedule the loop differently (gfx1100's hdim 128 causal forward with LSE and sink spilled 12
    # VGPRs swizzled, none without).
    if (spill_counts(best[2])[0] and best[0].facts.get("lds_swizzles") and best[0].options.lds_swizzle
            and (not opts.allow_spills or spill_counts(best[2])[0] <= MINREG_SPILLS)):
        retry(dataclasses.replace(best[0].options, lds_swizzle=False))
    fewer_rows(best[0].options)
    if (few_spills() and best[0].options.swap_halves and (arch_row.permlane32_swap or arch_row.permlanex16)
            and best[0].facts.get("halves_swapped", 1)):
        retry(dataclasses.replace(best[0].options, swap_halves=False))
    # Buffer descriptors take 4 scalar registers where a pointer takes 2: any SGPR spill, too. The
    # branches are taken where they spill less without branching in the hot loop (`hot_cost`).
    if (few_spills() or spill_counts(best[2])[1]) and best[0].options.buffer_masks:
        branches = dataclasses.replace(best[0].options, buffer_masks=False)
        retry(branches, hot_cost)
        if not best[0].options.buffer_masks:  # the branches won: fewer rows may win more
            fewer_rows(branches, hot_cost)
    return best


MINREG = "iterative-minreg"  # LLVM's scheduler for the fewest live registers (CompileOptions.schedule)
# The most spilled VGPRs a min-reg retry is tried for. It removed 2-12 in the library's kernels. Of
# hundreds, it removed a 256x256 GEMM's on gfx950 (232) but not those of tiles too large for the
# register file (RDNA's hdim 256 backward 419-530 before its rows changed, gfx1100's hdim 256 forward
# with a bias tensor about 210), and it took minutes on a kernel spilling 976: such kernels keep
# their first compile. Up to 64 it would take RDNA's hdim 256 backward from 36 to 32 (gfx1201,
# causal) and 59 to 47 (with the bias gradient), in 6-8 s a compile; gfx1100's stay (41, 53).
MINREG_SPILLS = 32


def _fewest_live_registers(arch_row: Arch, compiled: tuple[StageContext, bytes, dict[str, Any]], filename: str,
                           clean: dict[str, str], source: str,
                           kind: str) -> tuple[StageContext, bytes, dict[str, Any]]:
    """A kernel that still spills a few VGPRs (MINREG_SPILLS) after every retry and occupancy step,
    compiled once more with LLVM's iterative min-reg scheduler, which orders each region for the
    fewest live registers at some cost in latency hidden; the result with fewer spills is kept, and
    its manifest says why. Last, so that no row reaching its occupancy target without spills
    changes (gfx1100's hdim 160-256 forwards under a mask with a soft-cap spilled 9-12 VGPRs, none
    with it)."""
    ctx, _, manifest = compiled
    vgprs = spill_counts(manifest)[0]
    if not 0 < vgprs <= MINREG_SPILLS or ctx.options.schedule == MINREG:
        return compiled
    again = _compile_once(arch_row, dataclasses.replace(ctx.options, schedule=MINREG, interleave=False), filename,
                          clean, source, kind)
    if spill_counts(again[2]) >= spill_counts(manifest) or again[0].options.schedule != MINREG:
        return compiled
    before = scheduling(ctx.options) or "LLVM's default scheduler"
    kept = {k: manifest[k] for k in ("occupancy_target", "occupancy_lowered_to", "resident_operands") if k in manifest}
    again[2].update(kept, schedule_fallback=f"spills {vgprs} VGPRs with {before}; compiled with {MINREG}")
    return again


def _fits(manifest: dict[str, Any], ctx: StageContext) -> bool:
    """Does the code object reach its occupancy(...) target without spilling? A target never
    justifies spills, allowed or not: VGPRs spilled to scratch memory, or SGPRs spilled to VGPR
    lanes (a lane write and read each), cost more than the extra waves gain. (Even SGPRs spilled
    outside the hot loop: without the target LLVM has the VGPRs to schedule better, padded hdim 80
    causal forwards model gfx942 231.2 -> 286.0, gfx950 376.4 -> 408.7 TFLOP/s.)"""
    asked = ctx.bound.occupancy if ctx.bound is not None else 0
    return not any(spill_counts(manifest)) and ctx.arch.occupancy(manifest.get("vgpr_count") or 0) >= asked


def hot_cost(compiled: tuple[StageContext, bytes, dict[str, Any]]) -> tuple[int, int, int, int]:
    """What a _compile_once result's spills and branches cost, most costly first: (VGPR spills,
    SGPR spill moves in an innermost loop, conditional branches there, SGPR spills). A masked
    access compiled as a branch in the hot loop costs a test and a jump every step; scalars
    spilled outside it, a few lane moves per workgroup."""
    from tiledsl.isa_stats import count_instructions

    ctx, _, manifest = compiled
    counts = count_instructions(ctx.isa.asm if ctx.isa is not None else "")
    return (spill_counts(manifest)[0], counts.spill_moves_in_inner_loops, counts.branches_in_inner_loops,
            spill_counts(manifest)[1])


def spill_counts(manifest: dict[str, Any]) -> tuple[int, int]:
    """(VGPR spills, SGPR spills): VGPR spills go to scratch memory, SGPR ones to VGPR lanes."""
    return manifest.get("vgpr_spill_count", 0), manifest.get("sgpr_spill_count", 0)


def _check_spills(manifest: dict[str, Any], ctx: StageContext, opts: CompileOptions) -> None:
    """Registers spilled to scratch memory make a kernel many times slower: at these tile sizes the
    kernel does not fit the register file, which we report like any other resource limit."""
    # SGPR spills go to VGPR lanes, not memory; only VGPR spills use scratch.
    spills = manifest.get("vgpr_spill_count", 0)
    if not spills or opts.allow_spills or opts.spills_last_resort:
        return
    text = (f"the kernel spills {spills} registers to scratch memory on {ctx.arch.name} "
            f"({manifest.get('vgpr_count')} VGPRs in use); use smaller block sizes"
            + (" or more waves" if (manifest.get("waves") or 0) < 16 else ""))
    bound = ctx.bound
    if bound is not None and ctx.source is not None:
        from tiledsl.errors import SourceError

        raise SourceError(text, bound.kernel.loc, ctx.source, hint=ALLOW_SPILLS)
    raise TileError(f"{text} ({ALLOW_SPILLS})")


# How to accept spills, for the CLI and for Python callers alike.
ALLOW_SPILLS = "tiledsl compile --allow-spills, or CompileOptions(allow_spills=True), accepts it anyway"


def _entry_matches(entry: CacheEntry, arch: str, defines: dict[str, str]) -> bool:
    """Guards against a hash collision or an entry someone wrote with a recomputed checksum (a
    cache a group shares): the kernel's name must be an identifier (output files are named after
    it), and the code object one that parses, for this arch, with the manifest's symbol. A failing
    entry is a miss: the kernel is compiled again and the entry replaced."""
    from tiledsl.backends.rocm import elf  # a parser only: a hit stays fast (tests/test_driver.py)

    m = entry.manifest
    if not (m.get("arch") == arch and isinstance(m.get("kernel"), str) and _IDENTIFIER.fullmatch(m["kernel"])
            and (m.get("partial") or m.get("defines") == defines)):
        return False
    symbol = m.get("symbol", m["kernel"])  # a partial manifest's kernel is its symbol
    try:
        co = elf.read_code_object(entry.hsaco)
    except Exception:  # whatever a damaged ELF raises: the entry is a miss, never a crash
        return False
    return co.arch == arch and isinstance(symbol, str) and {symbol, symbol + ".kd"} <= set(co.symbols)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temp file in the same directory and os.replace, with the
    permissions an ordinary file gets under the umask (mkstemp's are the owner's only, which would
    keep a shared kernel package from its other users). A failed write (permissions, a full disk,
    a directory in the way) is the caller's TileError naming the path, not a compiler bug."""
    # A reader (a launcher polling the output directory) never sees a half-written code object.
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), FILE_MODE)
            f.write(data)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise TileError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise


def make_dir(path: str | os.PathLike[str], what: str) -> None:
    """Create an output directory (and its parents), or a TileError saying why it cannot be used:
    a file in the way, no permission to create it, or no permission to write into it."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise TileError(f"{what} {path}: is a file; expected a directory (it is created if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TileError(f"{what} {path}: cannot create the directory: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise TileError(f"{what} {path}: the directory is not writable")


def write_outputs(kernel: CompiledKernel, outdir: str | os.PathLike[str]) -> list[Path]:
    """`<kernel>.<arch>.hsaco`, `.s` and `.json` (the manifest) in `outdir`."""
    import json

    from tiledsl.manifest import MANIFEST_DIGEST, manifest_digest

    out = Path(outdir)
    make_dir(out, "output directory")
    base = f"{kernel.name}.{kernel.arch}"
    manifest = {**kernel.manifest, MANIFEST_DIGEST: manifest_digest(kernel.manifest)}  # load_kernel checks it
    files = [(out / f"{base}.hsaco", kernel.hsaco), (out / f"{base}.s", kernel.asm.encode()),
             (out / f"{base}.json", (json.dumps(manifest, indent=2) + "\n").encode())]
    for path, data in files:
        write_atomic(path, data)
    return [p for p, _ in files]


def read_source(path: str | os.PathLike[str]) -> str:
    """The text of a source or intermediate file: UTF-8, a leading byte-order mark dropped."""
    input_kind(str(path))  # a file we cannot compile is named as such, before its bytes are read
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise TileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TileError(f"{path}: is a directory, expected a .tile file") from None
    except OSError as exc:
        raise TileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        shown = data.decode("utf-8", errors="replace")  # the line, for the caret
        raise SourceError(f"byte 0x{data[exc.start]:02x} is not UTF-8 text", SourceLocation(str(path), line, col),
                          shown, hint="save the file as UTF-8") from None


def compile_file(path: str | os.PathLike[str], archs: Sequence[str], defines: Mapping[str, str] | None = None,
                 outdir: str | os.PathLike[str] = ".", options: CompileOptions | None = None, *,
                 cache: Cache | None = None,
                 on_result: Callable[[CompiledKernel, list[Path]], None] | None = None) -> list[Path]:
    """Compile `path` for each arch and write its outputs; returns every file written
    (hsaco, s, json per arch, in arch order). `on_result` sees each result as it lands."""
    for arch in archs:
        get_arch(arch)  # reject a bad arch before spending time on the good ones
    source = read_source(path)
    written: list[Path] = []
    for arch in archs:
        kernel = compile_source(source, str(path), arch, defines, options, cache=cache)
        files = write_outputs(kernel, outdir)
        written.extend(files)
        if on_result is not None:
            on_result(kernel, files)
    return written
