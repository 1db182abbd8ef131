"""CompileOptions.schedule and .interleave: LLVM's machine scheduler and its LDS/matrix interleaving
asked for per kernel, codegen run apart so that an LLVM crash with them falls back to LLVM's
defaults instead of killing the caller."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tiledsl.backends.rocm import codegen, codegen_worker, elf
from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.driver import compile_source
from tiledsl.options import CompileOptions

pytestmark = pytest.mark.compile
GEMM = Path(__file__).resolve().parents[1] / "examples" / "gemm.tile"


def _compile(arch: str, schedule: str, failure_dir: Path | None = None, interleave: bool = False,
             dump: Path | None = None, source: Path = GEMM, defines: dict[str, str] | None = None):
    options = CompileOptions.make(arch, defines, schedule=schedule, interleave=interleave,
                                  failure_dir=str(failure_dir) if failure_dir else None,
                                  dump_ir_dir=str(dump) if dump else None)
    return compile_source(source.read_text(), str(source), arch, defines or {}, options, cache=None)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_scheduled_kernel_compiles_apart_and_says_so(arch):
    k = _compile(arch, "max-ilp")
    assert k.manifest["schedule"] == "max-ilp" and "schedule_fallback" not in k.manifest
    assert "schedule" not in _compile(arch, "").manifest


def _child_dying_in(monkeypatch, op: str, signal_name: str) -> None:
    """From the next request on, toolchain children whose step `op` kills them with `signal_name`;
    their other steps run as usual."""
    crash = ("import os, signal; from tiledsl.backends.rocm import codegen_worker as w; "
             f"w.HANDLERS[{op!r}] = lambda *args: os.kill(os.getpid(), signal.{signal_name}); w.serve()")
    codegen_worker.shutdown()
    monkeypatch.setattr(codegen_worker, "worker_command", lambda: [sys.executable, "-c", crash])


@pytest.fixture
def crashing_codegen(tmp_path, monkeypatch):
    """A toolchain child whose codegen dies of a signal (it kills itself), as LLVM did."""
    _child_dying_in(monkeypatch, "object", "SIGSEGV")
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    yield
    codegen_worker.shutdown()


@pytest.mark.parametrize(("schedule", "interleave", "asked"), [
    ("iterative-ilp", False, "the iterative-ilp scheduler"),
    ("", True, "LDS/matrix interleaving"),
    ("max-ilp", True, "the max-ilp scheduler and LDS/matrix interleaving")])
def test_llvm_crash_falls_back_to_the_default_scheduler(tmp_path, crashing_codegen, schedule, interleave, asked):
    """A codegen child that dies of a signal is not the caller's crash: the kernel is compiled
    again with LLVM's defaults and its manifest records why."""
    k = _compile("gfx942", schedule, failure_dir=tmp_path / "reports", interleave=interleave)
    assert "schedule" not in k.manifest and "interleave" not in k.manifest
    note = k.manifest["schedule_fallback"]
    assert note.startswith(f"LLVM crashed (signal 11) in AMDGPU codegen with {asked} (its input "
                           f"is saved at {tmp_path / 'reports'}"), note
    assert note.endswith("; compiled with LLVM's default"), note
    assert elf.read_code_object(k.hsaco).arch == "gfx942"  # a real code object came out


def test_a_toolchain_child_that_dies_is_an_error_and_replaced(monkeypatch):
    """An MLIR step whose child dies of a signal is a CompileError naming the stage; the next
    request starts another child."""
    from tiledsl.errors import CompileError

    _child_dying_in(monkeypatch, "translate", "SIGABRT")
    gfx942 = get_arch("gfx942")
    try:
        with pytest.raises(CompileError, match=r"stage 'mlir-translate' failed: MLIR crashed \(signal 6\)"):
            codegen.make_llir("module {}", gfx942)
        monkeypatch.undo()
        assert codegen.make_llir("module {}", gfx942).startswith("; ModuleID")
    finally:
        codegen_worker.shutdown()


def test_a_request_interrupted_midway_leaves_no_reply_for_the_next(monkeypatch):
    """Ctrl-C while the child works: the child is ended, so its late reply cannot answer the next
    request."""
    gfx942 = get_arch("gfx942")
    real = codegen_worker._receive

    def interrupted(pipe):
        monkeypatch.setattr(codegen_worker, "_receive", real)
        raise KeyboardInterrupt

    codegen.make_llir("module {}", gfx942)
    monkeypatch.setattr(codegen_worker, "_receive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        codegen.make_rocdl("module {}", gfx942)
    assert codegen.make_llir("module {}", gfx942).startswith("; ModuleID")  # not the rocdl step's reply


def test_a_forked_process_starts_its_own_toolchain_child():
    """A fork (a process pool's worker) does not share its parent's toolchain child: the pipes would
    carry two conversations at once."""
    import os

    gfx942 = get_arch("gfx942")
    codegen.make_llir("module {}", gfx942)
    parents = codegen_worker._worker.proc.pid
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the forked copy: report, then leave without running the test session's exit handlers
        try:
            ok = codegen_worker._worker is None and codegen.make_llir("module {}", gfx942).startswith("; ModuleID")
            os.write(write, b"1" if ok and codegen_worker._worker.proc.pid != parents else b"0")
        finally:
            os._exit(0)
    os.close(write)
    reported = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert reported == b"1"
    assert codegen.make_llir("module {}", gfx942).startswith("; ModuleID")
    assert codegen_worker._worker.proc.pid == parents


def test_codegen_child_errors_are_compile_errors(monkeypatch):
    from tiledsl.backends.rocm.arch import get_arch
    from tiledsl.errors import CompileError

    with pytest.raises(CompileError, match="codegen.*(error|expected)"):
        codegen.optimize_and_make_object_isolated("this is not LLVM IR", get_arch("gfx942"))


@pytest.mark.parametrize(("schedule", "interleave", "asked"), [
    ("max-ilp", False, "the max-ilp scheduler"), ("", True, "LDS/matrix interleaving")])
def test_a_scheduler_that_spills_gives_way_to_the_default(monkeypatch, schedule, interleave, asked):
    """Where what was asked of the scheduler spills registers and LLVM's defaults do not, the
    defaults' code is kept and the manifest says why."""
    from tiledsl import driver

    real = driver._compile_once

    def spilling(arch_row, opts, *args):
        ctx, hsaco, manifest = real(arch_row, opts, *args)
        if driver.scheduling(opts):
            manifest["vgpr_spill_count"] = 3
        return ctx, hsaco, manifest

    monkeypatch.setattr(driver, "_compile_once", spilling)
    k = _compile("gfx90a", schedule, interleave=interleave)
    assert k.manifest["vgpr_spill_count"] == 0 and "schedule" not in k.manifest and "interleave" not in k.manifest
    assert k.manifest["schedule_fallback"] == f"spills registers with {asked}; compiled with LLVM's default"


def test_compile_reports_a_scheduler_fallback(tmp_path, crashing_codegen, capsys):
    """`tiledsl compile --schedule` says so when the kernel was compiled with LLVM's default."""
    from tiledsl.cli import main

    assert main(["compile", str(GEMM), "--arch", "gfx90a", "-o", str(tmp_path / "out"), "--schedule", "max-ilp"]) == 0
    out = capsys.readouterr().out
    assert "(--schedule: LLVM crashed (signal 11) in AMDGPU codegen with the max-ilp scheduler" in out, out
    assert main(["compile", str(GEMM), "--arch", "gfx90a", "-o", str(tmp_path / "out2"), "--schedule", "max-ilp",
                 "--interleave"]) == 0
    out = capsys.readouterr().out
    assert ("(--schedule --interleave: LLVM crashed (signal 11) in AMDGPU codegen with the max-ilp scheduler and "
            "LDS/matrix interleaving") in out, out


def _blocks(ll: str) -> list[str]:
    """The LLVM IR's basic blocks, each as its text (a block ends at its terminator)."""
    out, cur = [], []
    for line in ll.splitlines():
        cur.append(line)
        if line.strip().startswith(("br ", "ret ", "switch ", "unreachable")):
            out.append("\n".join(cur))
            cur = []
    return out


IGLP = "call void @llvm.amdgcn.iglp.opt(i32 0)"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_interleave_asks_llvm_in_the_block_of_the_loops_first_dot(arch, tmp_path):
    """CompileOptions.interleave puts one iglp.opt(0) in the loop's block that holds its first dot's
    matrix instructions, and none in the blocks of its later dots (the forward's P.V); the kernel
    says so in its manifest and is compiled apart from the caller."""
    from tiledsl.ops import KERNELS

    fwd = KERNELS / "fmha_fwd.tile"
    small = {"BLOCK_M": "64", "BLOCK_N": "32", "WAVES": "4", "STAGES": "1", "HDIM": "64", "HDIM_V": "64"}
    k = _compile(arch, "", interleave=True, dump=tmp_path, source=fwd, defines=small)
    assert k.manifest["interleave"] is True
    blocks = _blocks(next(tmp_path.glob("*.ll")).read_text())
    matrix = "llvm.amdgcn.mfma" if get_arch(arch).is_cdna else "llvm.amdgcn.wmma"
    dots = [b for b in blocks if matrix in b]
    assert len(dots) == 2, f"expected the loop's two dots in two blocks, got {len(dots)}"
    assert [b.count(IGLP) for b in dots] == [1, 0]
    assert sum(b.count(IGLP) for b in blocks) == 1
    plain = _compile(arch, "", dump=tmp_path / "plain", source=fwd, defines=small)
    assert "interleave" not in plain.manifest
    assert "iglp" not in next((tmp_path / "plain").glob("*.ll")).read_text()


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_an_interleaved_gemm_matches_numpy(arch):
    """The scheduling ask changes the order of instructions, never the result."""
    import sys

    import numpy as np

    from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
    from tiledsl.launcher import launch

    sys.path.insert(0, str(GEMM.parent))
    from cases import CASES, TOLERANCE

    args, kwargs, check = CASES["gemm"]("f16", np.random.default_rng(2))
    k = _compile(arch, "", interleave=True)
    assert k.manifest["interleave"] is True
    launch(k, *args, device=EmulatorDevice(arch), **kwargs)
    assert check() <= TOLERANCE["f16"]
