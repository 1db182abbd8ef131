"""ROCDL lowering and code-object emission: gpu-dialect MLIR text -> LLVM IR -> ISA -> .hsaco.

Each function is one driver stage. The upstream MLIR conversion and translation run in the
toolchain child (codegen_worker) on purpose: when an upstream pattern fails to legalize, MLIR
aborts the process it runs in, and a child turns that into an error message we can show.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tiledsl.backends.rocm import codegen_worker
from tiledsl.backends.rocm.arch import Arch
from tiledsl.errors import CompileError

TRIPLE = "amdgcn-amd-amdhsa"


def _in_worker(stage: str, op: str, arch: Arch, text: str, crash: str = "MLIR crashed (signal {signal})",
               crashed: type[CompileError] = CompileError) -> tuple[Any, str]:
    """Step `op` of the toolchain child (codegen_worker.HANDLERS) on `text`: (its result, what it
    printed but the warnings the driver handles). Its failure is a CompileError of `stage`, its
    death of a signal `crashed` (`crash` says it), with what it printed."""
    try:
        (status, result), said = codegen_worker.request(op, arch.name, text)
    except codegen_worker.WorkerDied as died:
        said = _unhandled(died.said).strip()
        said = f": {said}" if said else ""
        if died.returncode < 0:
            raise crashed(stage, crash.format(signal=-died.returncode) + said) from None
        raise CompileError(stage, f"the toolchain process exited with {died.returncode}{said}") from None
    said = _unhandled(said)
    if status != "ok":
        raise CompileError(stage, f"{said.strip()}\n{result}".strip())
    return result, said


def _unhandled(said: str) -> str:
    """LLVM's output without the warnings the driver handles (_HANDLED_WARNINGS)."""
    return "".join(line for line in said.splitlines(keepends=True) if not any(w in line for w in _HANDLED_WARNINGS))


def rocdl_pipeline(arch: Arch) -> str:
    features = f" features={arch.llvm_features}" if arch.llvm_features else ""
    return (f"builtin.module(rocdl-attach-target{{chip={arch.name} O=3{features}}},convert-scf-to-cf,"
            f"gpu.module(canonicalize,cse,convert-gpu-to-rocdl{{chipset={arch.name}}}),"
            f"reconcile-unrealized-casts)")


def make_rocdl(gpu_mlir: str, arch: Arch) -> str:
    """Upstream conversion to the LLVM/ROCDL dialects; returns a plain module holding the kernels."""
    rocdl, _ = _in_worker("convert-gpu-to-rocdl", "rocdl", arch, gpu_mlir)
    return rocdl


def extract_gpu_module(container_mlir: str, arch: Arch) -> str:
    """Move the ops of the (single) gpu.module into a builtin module mlir-translate understands.
    Each kernel names its arch (`target_cpu`, the LLVM IR's "target-cpu", the target machine's CPU
    anyway) so that the artifact says what it was compiled for."""
    from mlir import ir

    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        outer = ir.Module.parse(container_mlir)
        gpu_modules = [op for op in outer.body.operations if op.operation.name == "gpu.module"]
        if len(gpu_modules) != 1:
            raise CompileError("extract-gpu-module", f"expected one gpu.module, found {len(gpu_modules)}")
        gpu_module = gpu_modules[0].operation
        plain = ir.Module.create()
        plain.operation.attributes["llvm.target_triple"] = ir.StringAttr.get(TRIPLE)
        plain.operation.attributes["llvm.data_layout"] = gpu_module.attributes["llvm.data_layout"]
        for op in list(gpu_module.regions[0].blocks[0].operations):
            if op.operation.name != "gpu.module_end":
                if op.operation.name == "llvm.func":
                    op.operation.attributes["target_cpu"] = ir.StringAttr.get(arch.name)
                plain.body.append(op.detach_from_parent())
        _annotate_loops(plain.operation)
        return plain.operation.get_asm(enable_debug_info=True)


def _annotate_loops(op) -> None:
    """scf-to-cf carries an scf.for's `llvm.loop_annotation` (lower-to-gpu sets it) onto the loop's
    back-edge branch as a discardable attribute; mlir-translate emits !llvm.loop metadata only
    from the branch's own `loop_annotation`, so move it there."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                if inner.name in ("llvm.br", "llvm.cond_br") and "llvm.loop_annotation" in inner.attributes:
                    inner.attributes["loop_annotation"] = inner.attributes["llvm.loop_annotation"]
                    del inner.attributes["llvm.loop_annotation"]
                _annotate_loops(inner)


def make_llir(rocdl_mlir: str, arch: Arch) -> str:
    llir, _ = _in_worker("mlir-translate", "translate", arch, rocdl_mlir)
    return llir


@functools.cache
def _target_machine(arch_name: str, features: str):
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch_name, features=features, opt=3, reloc="pic",
                                        codemodel="default")


def optimize(llir: str, arch: Arch, context: Any = None) -> str:
    """LLVM's O3 pipeline (needed for correct kernarg size and AGPR use): the optimized IR text,
    from which codegen makes both the object and the assembly (make_object, make_assembly). In
    llvmlite's LLVM context `context`, its global one by default."""
    import llvmlite.binding as llvm

    tm = _target_machine(arch.name, arch.llvm_features)
    try:
        module = llvm.parse_assembly(llir, context)
        module.verify()
    except RuntimeError as exc:
        raise CompileError("llvm-parse", str(exc)) from None
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    builder = llvm.create_pass_builder(tm, tuning)
    builder.getModulePassManager().run(module, builder)
    external = sorted({f.name for f in module.functions if f.is_declaration and not f.name.startswith("llvm.")})
    if external:
        # Nothing links ROCm's device libraries (ocml/ockl) here: a call would jump to address 0.
        raise CompileError("codegen", f"the kernel calls {', '.join(external)}, which is not defined: an op was "
                                      "lowered to a device-library call instead of an intrinsic")
    return str(module)


# Both emissions parse the optimized text afresh: codegen rewrites a module in place (control-flow
# annotation intrinsics), and a module parsed from text orders its use lists differently from the
# one the optimizer left, which changes LLVM's choices: assembly made from the optimizer's module
# was not the code of the object (a few scalar instructions placed or chosen otherwise).
def make_object(optimized_ll: str, arch: Arch, filter_warnings: bool = True, context: Any = None) -> bytes:
    """AMDGPU codegen of optimize()'s text: the relocatable object. filter_warnings=False leaves
    LLVM's diagnostics on file descriptor 2 as they come (the child of the isolated variants: an
    abort must not lose what LLVM said first)."""
    return _emit("emit_object", optimized_ll, arch, filter_warnings, context)


def make_assembly(optimized_ll: str, arch: Arch, filter_warnings: bool = True, context: Any = None) -> str:
    """The same codegen as make_object, as assembly text (the .s). LLVM is deterministic, so it
    is the object's code; the driver makes it only when it is asked for."""
    return _emit("emit_assembly", optimized_ll, arch, filter_warnings, context)


def _emit(emission: str, optimized_ll: str, arch: Arch, filter_warnings: bool, context: Any):
    import llvmlite.binding as llvm

    tm = _target_machine(arch.name, arch.llvm_features)
    with _llvm_warnings_filtered() if filter_warnings else contextlib.nullcontext():
        return getattr(tm, emission)(llvm.parse_assembly(optimized_ll, context))


def make_isa_and_object(llir: str, arch: Arch) -> tuple[str, bytes]:
    """optimize, then both emissions: (assembly, object), for tools and tests."""
    optimized = optimize(llir, arch)
    return make_assembly(optimized, arch), make_object(optimized, arch)


class CodegenCrashed(CompileError):
    """LLVM died (a signal) in codegen run apart (the isolated variants)."""


def optimize_and_make_object_isolated(llir: str, arch: Arch) -> tuple[str, bytes]:
    """(optimize, make_object) in the toolchain child (codegen_worker), for kernels that ask
    something of LLVM's scheduler (CompileOptions.schedule, .interleave: driver.scheduling) or IR
    we did not make: a crash there (LLVM's iterative schedulers have segfaulted on our backward
    kernel, iglp.opt(1) aborted on the forward) must not take the caller's process with it.
    Raises CodegenCrashed when the child dies of a signal, CompileError when it reports an error."""
    return _codegen_in_worker("object", llir, arch)


def make_assembly_isolated(optimized_ll: str, arch: Arch) -> str:
    """make_assembly in the toolchain child (see optimize_and_make_object_isolated)."""
    return _codegen_in_worker("assembly", optimized_ll, arch)


def _codegen_in_worker(op: str, text: str, arch: Arch) -> Any:
    result, said = _in_worker("codegen", op, arch, text, "LLVM crashed (signal {signal}) in AMDGPU codegen",
                              CodegenCrashed)
    sys.stderr.write(said)  # LLVM's own warnings
    return result


# LLVM's warnings that the driver turns into something better: an occupancy(N) target LLVM could not
# reach is compiled again for fewer waves (tiledsl.driver), so its warning is noise to the user.
_HANDLED_WARNINGS = ("failed to meet occupancy target",)


@contextlib.contextmanager
def _llvm_warnings_filtered() -> Iterator[None]:
    """LLVM prints diagnostics straight to file descriptor 2: capture them for the duration and
    pass on every line but the ones the driver handles."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines(keepends=True):
                if not any(w in line for w in _HANDLED_WARNINGS):
                    sys.stderr.write(line)


@functools.cache
def _zig() -> str:
    """The ziglang wheel's zig binary, run directly (`python -m ziglang` only execs it, after a
    Python start-up that took a third of the link)."""
    import importlib.util

    spec = importlib.util.find_spec("ziglang")
    zig = Path(spec.origin).with_name("zig") if spec and spec.origin else None
    if zig is None or not zig.is_file():
        raise CompileError("toolchain", "the ziglang package's zig binary (LLD) is missing: reinstall ziglang")
    return str(zig)


def make_hsaco(obj: bytes) -> bytes:
    """Link the relocatable object into a shared code object with LLD (from the ziglang wheel)."""
    with tempfile.TemporaryDirectory(prefix="tiledsl-link-") as tmp:
        src, dst = os.path.join(tmp, "k.o"), os.path.join(tmp, "k.hsaco")
        Path(src).write_bytes(obj)
        proc = subprocess.run([_zig(), "ld.lld", "-shared", src, "-o", dst], capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError("link", proc.stderr.strip())
        return Path(dst).read_bytes()

