"""A fake front-end (parse, bind, emit, tile passes) for driver and CLI tests.

It lets the driver's own logic (stage loop, dumps, errors, cache, manifest, CLI) be tested apart
from the real front-end, while the backend stages stay real: the fake tile passes return a small
gpu-dialect kernel whose arguments follow the kernarg ABI of the fake bound kernel
(`x: tensor[f32](N)` -> pointer, N; the last dim's stride is the constant 1), so `check_manifest`
holds for real code objects.

Control words in the fake source steer it: "FAIL_PASSES" makes the tile passes raise,
"BAD_GPU" makes them return IR the upstream conversion rejects, "CRASH_EMIT" makes emit hit a bug.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections import Counter

from tiledsl.errors import SourceError, SourceLocation, TileError
from tiledsl.lang.ast import Arg, BoundKernel, Call, Const, ConstexprParam, Kernel, Name, TensorType

FAKE_SOURCE = "kernel fake_copy\n# a stand-in source: the fake parser reads only the name\n"
FAKE_MODULES = ("tiledsl.lang.parser", "tiledsl.lang.checker", "tiledsl.ir.emit", "tiledsl.passes.pipeline")


def gpu_mlir(name: str, block: int) -> str:
    """A real gpu-dialect kernel `name`(x: ptr<1>, N: i32) storing float(N)."""
    return f"""module attributes {{gpu.container_module}} {{
  gpu.module @{name}_module {{
    gpu.func @{name}(%x: !llvm.ptr<1>, %n: i32) kernel
        attributes {{known_block_size = array<i32: {block}, 1, 1>}} {{
      %tid = gpu.thread_id x
      %t = arith.index_cast %tid : index to i32
      %p = llvm.getelementptr %x[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      %v = arith.sitofp %n : i32 to f32
      llvm.store %v, %p : f32, !llvm.ptr<1>
      gpu.return
    }}
  }}
}}
"""


def make_fake_modules(calls: Counter) -> dict[str, types.ModuleType]:
    def parse(source: str, filename: str) -> Kernel:
        calls["parse"] += 1
        loc = SourceLocation(filename, 1, 1)
        words = source.split()
        if len(words) < 2 or words[0] != "kernel":
            raise SourceError("expected 'kernel NAME'", loc, source)
        return Kernel(name=words[1], constexprs=[ConstexprParam("BLOCK", "int", 64, loc=loc)],
                      args=[Arg("x", TensorType("f32", ("N",)), loc)],
                      grid=[Call(loc, "cdiv", [Name(loc, "N"), Name(loc, "BLOCK")])],
                      waves=None, body=[], loc=loc, source=source, file=filename)

    def bind(kernel: Kernel, constexprs: dict[str, str], arch: object) -> BoundKernel:
        calls["bind"] += 1
        for name in constexprs:
            if name != "BLOCK":
                raise SourceError(f"'{name}' is not a constexpr parameter of {kernel.name}",
                                  kernel.loc, kernel.source, hint="constexprs: BLOCK")
        block = int(constexprs.get("BLOCK", "64"))
        loc = kernel.loc
        grid = [Call(loc, "cdiv", [Name(loc, "N"), Const(loc, block)])]
        return BoundKernel(dataclasses.replace(kernel, grid=grid), {"BLOCK": block}, ["N"], waves=1)

    def emit_tile_mlir(bound: BoundKernel, arch: object, options: object) -> str:
        calls["emit"] += 1
        if "CRASH_EMIT" in bound.kernel.source:
            raise ZeroDivisionError("a bug in the fake emitter")
        flags = [w for w in ("FAIL_PASSES", "BAD_GPU") if w in bound.kernel.source]
        return f"// fake tile mlir\n// kernel: {bound.kernel.name}\n// flags: {' '.join(flags)}\n"

    def make_gpu_mlir(tile_mlir: str, arch, options: object, source: str | None = None,
                      dump_prefix: str = "kernel", facts: dict | None = None) -> str:
        calls["passes"] += 1
        if "FAIL_PASSES" in tile_mlir:
            raise TileError("the fake pass found nothing to lower")
        if "BAD_GPU" in tile_mlir:
            return "module { this is not mlir }\n"
        name = tile_mlir.split("// kernel: ", 1)[1].split()[0]
        return gpu_mlir(name, arch.wave_size)

    fns = {"tiledsl.lang.parser": {"parse": parse}, "tiledsl.lang.checker": {"bind": bind},
           "tiledsl.ir.emit": {"emit_tile_mlir": emit_tile_mlir},
           "tiledsl.passes.pipeline": {"make_gpu_mlir": make_gpu_mlir}}
    modules = {}
    for mod_name, attrs in fns.items():
        mod = types.ModuleType(mod_name)
        mod.__dict__.update(attrs)
        modules[mod_name] = mod
    return modules


def install(monkeypatch) -> Counter:
    """Swap the fake front-end into sys.modules for one test; returns the call counter."""
    calls: Counter = Counter()
    for name, mod in make_fake_modules(calls).items():
        monkeypatch.setitem(sys.modules, name, mod)
    return calls


def remove_saved(path: str | None) -> None:
    """Delete a temp dir the driver made to save a failing stage's input (not a dump dir)."""
    import re
    import shutil
    from pathlib import Path

    if path:
        folder = Path(re.sub(r"[).,]+$", "", path)).parent
        if folder.name.startswith("tiledsl-failed-"):
            shutil.rmtree(folder, ignore_errors=True)
