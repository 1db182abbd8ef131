"""Our pass pipeline on the tile dialect, from emitted tile MLIR to gpu-dialect MLIR.

Each pass is a function on the module; a failure names the pass and (through the driver) saves
the IR it failed on. With options.dump_ir_dir, every pass's output is written as a numbered file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mlir import ir

from tiledsl.backends.rocm.arch import Arch
from tiledsl.errors import CompileError, TileError
from tiledsl.ir.dialect import new_context
from tiledsl.options import CompileOptions
from tiledsl.passes.assign_layouts import assign_layouts
from tiledsl.passes.hoist_conversions import hoist_conversions
from tiledsl.passes.lower_to_gpu import lower_to_gpu
from tiledsl.passes.pipeline_loops import pipeline_loops
from tiledsl.passes.stage_lds import stage_lds

PASSES: list[tuple[str, Callable]] = [
    ("assign-layouts", lambda m, arch, opts, src: assign_layouts(m, arch, src)),
    ("hoist-conversions", lambda m, arch, opts, src: hoist_conversions(m, arch)),
    ("pipeline-loops", lambda m, arch, opts, src: pipeline_loops(m, arch, src)),
    ("stage-lds", lambda m, arch, opts, src: stage_lds(m, arch, opts, src)),
]


def make_gpu_mlir(tile_mlir: str, arch: Arch, options: CompileOptions, source: str | None = None,
                  dump_prefix: str = "kernel") -> str:
    ctx = new_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(tile_mlir)
        for i, (name, fn) in enumerate(PASSES):
            _run(name, lambda m=module, f=fn: f(m, arch, options, source), module.operation)
            _dump(options, dump_prefix, i, name, module.operation)
        out = _run("lower-to-gpu", lambda: lower_to_gpu(module, arch, source), module.operation)
        _dump(options, dump_prefix, len(PASSES), "lower-to-gpu", out.operation)
        _run("verify", out.operation.verify, out.operation)
        return out.operation.get_asm(enable_debug_info=True)


def run_pass(name: str, mlir_text: str, arch: Arch, options: CompileOptions | None = None) -> str:
    """Run one of our passes alone on a module's text (for tests and debugging)."""
    options = options or CompileOptions(arch=arch.name)
    ctx = new_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(mlir_text)
        if name == "lower-to-gpu":
            return lower_to_gpu(module, arch).operation.get_asm()
        dict(PASSES)[name](module, arch, options, None)
        return module.operation.get_asm()


def _run(name: str, thunk: Callable, op: ir.Operation):
    try:
        return thunk()
    except TileError:
        raise
    except Exception as exc:  # an internal failure: name the pass, keep the message
        raise CompileError(name, f"{type(exc).__name__}: {exc}") from exc


def _dump(options: CompileOptions, prefix: str, index: int, name: str, op: ir.Operation) -> None:
    if options.dump_ir_dir:
        d = Path(options.dump_ir_dir)
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{prefix}.pass{index:02d}-{name}.mlir").write_text(op.get_asm(enable_debug_info=True))
