"""CompileOptions.schedule: LLVM's machine scheduler asked for per kernel, codegen run apart so that
an LLVM crash with it falls back to the default scheduler instead of killing the caller."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiledsl.backends.rocm import codegen, elf
from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.driver import compile_source
from tiledsl.options import CompileOptions

pytestmark = pytest.mark.compile
GEMM = Path(__file__).resolve().parents[1] / "examples" / "gemm.tile"


def _compile(arch: str, schedule: str, failure_dir: Path | None = None):
    options = CompileOptions.make(arch, schedule=schedule, failure_dir=str(failure_dir) if failure_dir else None)
    return compile_source(GEMM.read_text(), str(GEMM), arch, {}, options, cache=None)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_scheduled_kernel_compiles_apart_and_says_so(arch):
    k = _compile(arch, "max-ilp")
    assert k.manifest["schedule"] == "max-ilp" and "schedule_fallback" not in k.manifest
    assert "schedule" not in _compile(arch, "").manifest


@pytest.fixture
def crashing_codegen(tmp_path, monkeypatch):
    """Codegen children that die of a signal (they kill themselves), as LLVM did."""
    crasher = tmp_path / "crash.sh"
    crasher.write_text("#!/bin/sh\nkill -SEGV $$\n")
    crasher.chmod(0o755)
    monkeypatch.setattr(codegen, "_codegen_command", lambda arch, out: [str(crasher)])
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))


def test_llvm_crash_falls_back_to_the_default_scheduler(tmp_path, crashing_codegen):
    """A codegen child that dies of a signal is not the caller's crash: the kernel is compiled
    again with LLVM's default scheduler and its manifest records why."""
    k = _compile("gfx942", "iterative-ilp", failure_dir=tmp_path / "reports")
    assert "schedule" not in k.manifest
    note = k.manifest["schedule_fallback"]
    assert note.startswith("LLVM crashed (signal 11) in AMDGPU codegen with the iterative-ilp scheduler (its input "
                           f"is saved at {tmp_path / 'reports'}"), note
    assert note.endswith("; compiled with LLVM's default"), note
    assert elf.read_code_object(k.hsaco).arch == "gfx942"  # a real code object came out


def test_codegen_child_errors_are_compile_errors(monkeypatch):
    from tiledsl.backends.rocm.arch import get_arch
    from tiledsl.errors import CompileError

    with pytest.raises(CompileError, match="codegen.*(error|expected)"):
        codegen.make_isa_and_object_isolated("this is not LLVM IR", get_arch("gfx942"))


def test_a_scheduler_that_spills_gives_way_to_the_default(monkeypatch):
    """Where the scheduler asked for spills registers and LLVM's default does not, the default's
    code is kept and the manifest says why."""
    from tiledsl import driver

    real = driver._compile_once

    def spilling(arch_row, opts, *args):
        ctx, hsaco, manifest = real(arch_row, opts, *args)
        if opts.schedule:
            manifest["vgpr_spill_count"] = 3
        return ctx, hsaco, manifest

    monkeypatch.setattr(driver, "_compile_once", spilling)
    k = _compile("gfx90a", "max-ilp")
    assert k.manifest["vgpr_spill_count"] == 0 and "schedule" not in k.manifest
    want = "spills registers with the max-ilp scheduler; compiled with LLVM's default"
    assert k.manifest["schedule_fallback"] == want


def test_compile_reports_a_scheduler_fallback(tmp_path, crashing_codegen, capsys):
    """`tiledsl compile --schedule` says so when the kernel was compiled with LLVM's default."""
    from tiledsl.cli import main

    assert main(["compile", str(GEMM), "--arch", "gfx90a", "-o", str(tmp_path / "out"), "--schedule", "max-ilp"]) == 0
    out = capsys.readouterr().out
    assert "(--schedule: LLVM crashed (signal 11) in AMDGPU codegen with the max-ilp scheduler" in out, out
