"""Our pass pipeline on the tile dialect, from emitted tile MLIR to gpu-dialect MLIR.

Each pass is a function `(module, PassContext)`; after each one the module is verified (MLIR's
verifier with the tile ops' IRDL constraints, and every layout against its tile and the arch), so
a wrong output fails at the pass that made it. A failure names the pass and (through the driver)
saves the IR it failed on. With options.dump_ir_dir, every pass's output is written as a numbered file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from mlir import ir
from mlir.dialects import scf

from tiledsl.backends.rocm.arch import Arch
from tiledsl.errors import CompileError, TileError
from tiledsl.ir.dialect import int_attr, kind_error, new_context
from tiledsl.options import CompileOptions
from tiledsl.passes import layouts as L
from tiledsl.passes.assign_layouts import assign_layouts
from tiledsl.passes.common import PassContext, is_tile, kernel_funcs, op_error, ops_in, tile_shape, walk_blocks
from tiledsl.passes.fold_scalars import fold_scalars, fold_scalars_laid_out
from tiledsl.passes.hoist_conversions import hoist_conversions
from tiledsl.passes.lower_to_gpu import lower_to_gpu
from tiledsl.passes.pipeline_loops import pipeline_loops, place_lookahead_loads
from tiledsl.passes.place_unit_scales import place_unit_scales
from tiledsl.passes.stage_lds import stage_lds
from tiledsl.passes.version_masks import version_masks

# Every pass is `pass(module, context)`; lower-to-gpu returns the new (gpu-dialect) module.
PASSES: list[tuple[str, Callable[[ir.Module, PassContext], object]]] = [
    ("fold-scalars", fold_scalars),
    ("version-masks", version_masks),
    ("assign-layouts", assign_layouts),
    ("fold-scalars-laid-out", fold_scalars_laid_out),
    ("hoist-conversions", hoist_conversions),
    ("pipeline-loops", pipeline_loops),
    ("stage-lds", stage_lds),
    ("place-lookahead-loads", place_lookahead_loads),
    ("place-unit-scales", place_unit_scales),
]


def make_gpu_mlir(tile_mlir: str, arch: Arch, options: CompileOptions, source: str | None = None,
                  dump_prefix: str = "kernel", facts: dict[str, object] | None = None) -> str:
    """facts: filled with what the passes found for the manifest (PassContext.facts).

    The tile module is verified (verify_tile_module) as it comes and after the last of PASSES,
    unless IR is dumped: after each pass it took 6 % of a compile. Where anything fails, the passes
    run again with it after each one, so that the error comes after the pass that left a wrong
    module."""
    facts = facts if facts is not None else {}
    if options.dump_ir_dir:
        return _passes(tile_mlir, arch, options, source, dump_prefix, facts, verify_each=True)
    try:
        return _passes(tile_mlir, arch, options, source, dump_prefix, facts, verify_each=False)
    except Exception:
        facts.clear()
    return _passes(tile_mlir, arch, options, source, dump_prefix, facts, verify_each=True)


def _passes(tile_mlir: str, arch: Arch, options: CompileOptions, source: str | None, dump_prefix: str,
            facts: dict[str, object], verify_each: bool) -> str:
    context = PassContext(arch, options, source, facts)
    with new_context(), ir.Location.unknown():
        module = ir.Module.parse(tile_mlir)
        check_arch(module, arch)
        add_else_blocks(module)
        _run("verify-input", lambda: verify_tile_module(module, arch), module.operation)
        for i, (name, fn) in enumerate(PASSES):
            _run(name, lambda m=module, f=fn: f(m, context), module.operation)
            if verify_each or i == len(PASSES) - 1:
                _run(name, lambda m=module: verify_tile_module(m, arch), module.operation)
            _dump(options, dump_prefix, i, name, module.operation)
        out = _run("lower-to-gpu", lambda: lower_to_gpu(module, context), module.operation)
        _dump(options, dump_prefix, len(PASSES), "lower-to-gpu", out.operation)
        _run("verify", out.operation.verify, out.operation)
        return out.operation.get_asm(enable_debug_info=True)


def run_pass(name: str, mlir_text: str, arch: Arch, options: CompileOptions | None = None) -> str:
    """Run one of our passes alone on a module's text (for tests and debugging)."""
    context = PassContext(arch, options or CompileOptions(arch=arch.name))
    with new_context(), ir.Location.unknown():
        module = ir.Module.parse(mlir_text)
        check_arch(module, arch)
        add_else_blocks(module)
        if name == "lower-to-gpu":
            return lower_to_gpu(module, context).operation.get_asm()
        dict(PASSES)[name](module, context)
        verify_tile_module(module, arch)
        return module.operation.get_asm()


def add_else_blocks(module: ir.Module) -> None:
    """Give every `scf.if` without results an empty else block, the form emit writes and the passes
    expect: MLIR's canonicalizer drops empty ones, and a .tile.mlir input may come from it."""
    for fn in kernel_funcs(module):
        for block in list(walk_blocks(fn)):
            for op in ops_in(block):
                if op.name == "scf.if" and not op.regions[1].blocks:
                    with ir.InsertionPoint(op.regions[1].blocks.append()), op.location:
                        scf.YieldOp([])


def check_arch(module: ir.Module, arch: Arch) -> None:
    """The module's `tile.arch` (set by emit) must be the arch the passes run for."""
    attrs = module.operation.attributes
    if "tile.arch" in attrs and ir.StringAttr(attrs["tile.arch"]).value != arch.name:
        raise CompileError("tile-passes", f"the module was emitted for {ir.StringAttr(attrs['tile.arch']).value}, "
                                          f"but the passes were asked to compile it for {arch.name}")


def verify_tile_module(module: ir.Module, arch: Arch) -> None:
    """After each pass: the MLIR verifier (the tile ops' IRDL constraints) and every tile layout
    checked against its tile, wave count and the arch (passes/layouts.verify). A pass that
    leaves a wrong value fails here, at the op, instead of in a later pass."""
    module.operation.verify()
    for fn in kernel_funcs(module):
        threads = L.Threads(arch.wave_size, int_attr(fn, "tile.waves"))
        for block in walk_blocks(fn):
            for op in ops_in(block):
                wrong = kind_error(op)
                if wrong is not None:
                    raise op_error(op, f"internal: {op.name} {wrong}")
                for value in op.results:
                    if is_tile(value) and ir.RankedTensorType(value.type).encoding is not None:
                        wrong = _layout_problem(L.layout_of(value.type), tile_shape(value.type), threads, arch)
                        if wrong is not None:
                            raise op_error(op, f"internal: {op.name} result: {wrong}")


@functools.lru_cache(maxsize=4096)
def _layout_problem(layout: L.Layout, shape: tuple[int, ...], threads: L.Threads, arch: Arch) -> str | None:
    """Why `layout` does not fit (L.verify), or None; remembered: a module has few distinct tile
    types, and verify_tile_module checks every result after every pass."""
    try:
        L.verify(layout, shape, threads, arch)
    except L.LayoutError as exc:
        return str(exc)
    return None


def _run(name: str, thunk: Callable, op: ir.Operation):
    try:
        return thunk()
    except TileError:
        raise
    except Exception as exc:  # an internal failure: name the pass, keep the message
        raise CompileError(name, f"{type(exc).__name__}: {exc}") from exc


def _dump(options: CompileOptions, prefix: str, index: int, name: str, op: ir.Operation) -> None:
    if options.dump_ir_dir:
        from tiledsl.driver import make_dir, write_atomic

        d = Path(options.dump_ir_dir)
        make_dir(d, "--dump-ir")
        write_atomic(d / f"{prefix}.pass{index:02d}-{name}.mlir", op.get_asm(enable_debug_info=True).encode())
