"""Helpers shared by the emulator tests: compile MLIR / LLVM IR test kernels once per session."""

from __future__ import annotations

import functools

from tiledsl.backends.rocm import codegen
from tiledsl.backends.rocm.arch import get_arch


@functools.cache
def compile_mlir(src: str, arch: str) -> tuple[str, bytes]:
    """gpu-dialect MLIR text -> (.s text, .hsaco bytes), cached for the test session."""
    a = get_arch(arch)
    llir = codegen.make_llir(codegen.make_rocdl(src, a), a)
    asm, obj = codegen.make_isa_and_object(llir, a)
    return asm, codegen.make_hsaco(obj)


@functools.cache
def compile_llvm(llir: str, arch: str) -> tuple[str, bytes]:
    a = get_arch(arch)
    asm, obj = codegen.make_isa_and_object(llir, a)
    return asm, codegen.make_hsaco(obj)


def asm_mnemonics(asm: str, kernel: str) -> list[str]:
    """Instruction mnemonics of `kernel` in LLVM's .s text (VOPD pairs as 'x :: y')."""
    out, inside = [], False
    for line in asm.splitlines():
        if line.startswith(kernel + ":"):
            inside = True
            continue
        if not inside:
            continue
        t = line.strip()
        if t.startswith((".Lfunc_end", ".section")):
            break
        if not t or t.startswith((".", ";")) or t.endswith(":"):
            continue
        t = t.split(";")[0].strip()
        if "::" in t:
            x, y = t.split("::")
            out.append(f"{x.split()[0]} :: {y.split()[0]}")
        else:
            out.append(t.split()[0])
    return out
