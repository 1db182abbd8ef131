"""CLI tests: exit codes (0 ok, 2 user error, 1 internal error), compile/inspect/doctor output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tiledsl import __version__, driver
from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.cli import main

try:
    import driver_fakes as fakes
except ImportError:  # tests/ became a package
    from tests import driver_fakes as fakes

pytestmark = pytest.mark.compile
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    return fakes.install(monkeypatch)


@pytest.fixture
def tile(tmp_path):
    path = tmp_path / "fake.tile"
    path.write_text(fakes.FAKE_SOURCE)
    return path


def test_unknown_arch_exits_2_listing_archs(tile, tmp_path, capsys):
    assert main(["compile", str(tile), "--arch", "gfx1030", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "unknown arch 'gfx1030'" in err and all(a in err for a in ARCH_NAMES)
    assert "Traceback" not in err


def test_missing_file_exits_2(tmp_path, capsys):
    assert main(["compile", str(tmp_path / "nope.tile"), "--arch", "gfx942", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "nope.tile: no such file" in err and "Traceback" not in err


@pytest.mark.parametrize("flag", ["-o", "--dump-ir"])
def test_unusable_output_dir_exits_2(tile, tmp_path, flag, capsys):
    """An output path that is a file, or under one, is a usage error before anything compiles."""
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for bad, why in ((a_file, "is a file"), (a_file / "sub", "Not a directory")):
        argv = ["compile", str(tile), "--arch", "gfx942", "-o", str(tmp_path / "out"), flag, str(bad)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"error: {flag} {bad}: " in err and why in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [[], ["compile"], ["compile", "x.tile"], ["frobnicate"],
                                  ["compile", "x.tile", "--arch", "gfx942"]])
def test_usage_errors_exit_2(argv, capsys):
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


@pytest.mark.parametrize("define", ["BLOCK", "=3", "BLOCK=", "1X=2"])
def test_bad_define_exits_2(tile, tmp_path, define, capsys):
    assert main(["compile", str(tile), "--arch", "gfx942", "-D", define, "-o", str(tmp_path)]) == 2
    assert "expected NAME=VALUE" in capsys.readouterr().err


def test_source_error_exits_2_without_traceback(fake, tile, tmp_path, capsys):
    assert main(["compile", str(tile), "--arch", "gfx942", "-D", "NOPE=1", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "fake.tile:1:1: error: 'NOPE' is not a constexpr parameter" in err
    assert "Traceback" not in err


def test_failing_stage_exits_2_naming_it(fake, tmp_path, capsys):
    src = tmp_path / "bad.tile"
    src.write_text(fakes.FAKE_SOURCE + "FAIL_PASSES\n")
    assert main(["compile", str(src), "--arch", "gfx942", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "stage 'tile-passes' failed" in err
    saved = re.search(r"saved at (\S+)", err).group(1).rstrip(")")
    assert Path(saved).read_text().startswith("// fake tile mlir")
    fakes.remove_saved(saved)


def test_internal_error_exits_1_with_saved_traceback(tile, tmp_path, monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError("something the compiler did not expect")

    monkeypatch.setattr(driver, "compile_file", boom)
    assert main(["compile", str(tile), "--arch", "gfx942", "-o", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "internal compiler error" in err and "Traceback" not in err
    path = Path(re.search(r"saved at (\S+)", err).group(1))
    text = path.read_text()
    assert "Traceback" in text and "RuntimeError: something the compiler did not expect" in text
    path.unlink()


def test_compile_cache_and_inspect(fake, tile, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["compile", str(tile), "--arch", "gfx942,gfx1100", "-o", str(out)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "fake_copy gfx942:" in first and "(cached)" not in first
    assert main(argv) == 0
    assert capsys.readouterr().out.count("(cached)") == 2
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"fake_copy.{a}.{e}" for a in ("gfx942", "gfx1100") for e in ("hsaco", "s", "json"))

    assert main(["inspect", str(out)]) == 0
    table = capsys.readouterr().out
    header = table.splitlines()[0].split()
    assert header[:3] == ["kernel", "arch", "MFMA/WMMA"] and "occupancy" in header
    assert re.search(r"fake_copy\s+gfx1100\s+0\s+\d+", table)

    assert main(["inspect", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["arch"] for r in rows} == {"gfx942", "gfx1100"}
    assert all(r["spills"] == 0 and r["instructions"] > 0 for r in rows)


def test_compile_all_archs_with_dump(fake, tile, tmp_path, capsys):
    dump = tmp_path / "dump"
    assert main(["compile", str(tile), "--arch", "all", "-o", str(tmp_path / "out"), "--dump-ir", str(dump),
                 "--no-cache", "-q"]) == 0
    assert capsys.readouterr().out == ""
    for arch in ARCH_NAMES:
        assert (dump / f"fake_copy.{arch}.08-link.hsaco").exists()
        assert (tmp_path / "out" / f"fake_copy.{arch}.json").exists()
    assert not (tmp_path / "cache").exists()  # --no-cache


def test_inspect_errors_exit_2(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path)]) == 2
    assert "no manifests" in capsys.readouterr().err
    edited = tmp_path / "k.gfx942.json"
    edited.write_text(json.dumps({"kernel": "k", "arch": "gfx999"}))
    assert main(["inspect", str(tmp_path)]) == 2
    assert f"{edited}: not a manifest as `tiledsl compile` writes it: TileError: unknown arch 'gfx999'" \
        in capsys.readouterr().err


def test_inspect_refuses_a_fifo(tmp_path, capsys):
    """A FIFO named like a manifest would block the read forever: refused as not a regular file."""
    os.mkfifo(tmp_path / "k.gfx942.json")
    assert main(["inspect", str(tmp_path)]) == 2
    assert "k.gfx942.json: not a readable manifest: not a regular file" in capsys.readouterr().err


# LLVM IR the AMDGPU backend cannot select: LLVM aborts the process (inline assembly, fp128
# arithmetic) or fails (a register that does not exist). User IR is compiled in a child process.
BAD_LL = {
    "inline_asm": ('define amdgpu_kernel void @k() {\n  call void asm sideeffect "v_nonsense v0", ""()\n'
                   '  ret void\n}\n',
                   r"LLVM crashed \(signal 6\) in AMDGPU codegen: LLVM ERROR: Inline asm not supported"),
    "fp128": ("define amdgpu_kernel void @k(ptr addrspace(1) %p) {\n  %a = load fp128, ptr addrspace(1) %p\n"
              "  %b = frem fp128 %a, %a\n  store fp128 %b, ptr addrspace(1) %p\n  ret void\n}\n",
              r"LLVM crashed \(signal 6\) in AMDGPU codegen: LLVM ERROR: unsupported library call"),
    "register": ('define amdgpu_kernel void @k() {\n  %r = call i32 asm sideeffect "", "={v300}"()\n  ret void\n}\n',
                 r"couldn't allocate output register for constraint '\{v300\}'"),
}


@pytest.mark.parametrize("name", sorted(BAD_LL))
def test_llvm_ir_the_backend_rejects_exits_2(name, tmp_path, capsys):
    text, message = BAD_LL[name]
    (tmp_path / "k.ll").write_text(text)
    assert main(["compile", str(tmp_path / "k.ll"), "--arch", "gfx942", "-o", str(tmp_path / "out"), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert re.search(rf"stage 'codegen' failed: .*{message}", err), err


def test_plan_window_past_i32_exits_2(capsys):
    for json_flag in ([], ["--json"]):
        assert main(["plan", "fmha_bwd", "--arch", "gfx942", "--hdim", "64", "--seqlen", "128",
                     "--mask", "window=2147483648,0", *json_flag]) == 2
        assert "non-negative integers below 2^31" in capsys.readouterr().err


@pytest.mark.parametrize("edit, message", [
    ({"variants": {"gfx942/fmha_fwd-f16-batch-d64-none": {"signature": {}, "kernels": []}}},
     "expected an object with a 'signature' object naming its family"),
    ({"receipts": 5}, "has receipts 5, expected a list of names"),
])
def test_list_of_a_malformed_package_exits_2(edit, message, tmp_path, capsys):
    index = {"format": "tiledsl-kernel-package", "version": 1, "tiledsl": __version__, "receipts": [], "archs": [],
             "kernels": {}, "variants": {}, **edit}
    (tmp_path / "index.json").write_text(json.dumps(index))
    assert main(["list", "--package", str(tmp_path), "--family", "fmha_fwd"]) == 2
    assert message in capsys.readouterr().err


def test_python_dash_m():
    proc = subprocess.run([sys.executable, "-m", "tiledsl", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == f"tiledsl {__version__}"
    proc = subprocess.run([sys.executable, "-m", "tiledsl", "compile", "missing.tile", "--arch", "gfx942",
                           "-o", "unused"], capture_output=True, text=True)
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_doctor_compiles_for_every_arch(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert f"tiledsl {__version__}" in out and "llvmlite" in out
    for arch in ARCH_NAMES:
        assert re.search(rf"^{arch}\s.*\bok \(\d+ ms\)", out, re.M), out


def test_real_gemm_all_archs(tmp_path, monkeypatch, capsys):
    for mod in ("tiledsl.lang.parser", "tiledsl.lang.checker", "tiledsl.ir.emit", "tiledsl.passes.pipeline"):
        pytest.importorskip(mod)
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    assert main(["compile", str(ROOT / "examples" / "gemm.tile"), "--arch", "all", "-D", "DT=bf16",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["arch"] for r in rows) == sorted(ARCH_NAMES)
    assert all(r["matrix_ops"] > 0 and r["spills"] == 0 and r["occupancy"] >= 1 for r in rows)


def test_unwritable_output_exits_2(fake, tile, tmp_path, capsys):
    """A write that fails (here a directory where the code object goes) is a usage error naming
    the file, not an internal compiler error."""
    out = tmp_path / "out"
    (out / "fake_copy.gfx942.hsaco").mkdir(parents=True)
    assert main(["compile", str(tile), "--arch", "gfx942", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {out / 'fake_copy.gfx942.hsaco'}: Is a directory" in err and "internal" not in err
    assert [p.name for p in out.iterdir()] == ["fake_copy.gfx942.hsaco"]  # no temp file left behind


def test_outputs_are_readable_by_others_as_the_umask_says(fake, tile, tmp_path):
    """Code objects, manifests, dumps and cache entries get the umask's mode (mkstemp's 0600 would keep
    a shared package or cache from its other users)."""
    import stat

    from tiledsl.cache import FILE_MODE

    assert main(["compile", str(tile), "--arch", "gfx942", "-o", str(tmp_path / "out"),
                 "--dump-ir", str(tmp_path / "dump"), "-q"]) == 0
    files = [*(tmp_path / "out").iterdir(), *(tmp_path / "dump").iterdir(), *(tmp_path / "cache").rglob("*")]
    modes = {stat.S_IMODE(p.stat().st_mode) for p in files if p.is_file() and p.parent.name != "reports"}
    assert modes == {FILE_MODE}
    umask = os.umask(0)
    os.umask(umask)
    assert FILE_MODE == 0o666 & ~umask


def test_a_closed_stdout_ends_quietly(tmp_path):
    """`tiledsl list | head -1`: the reader leaves early, and the CLI stops without an internal error."""
    env = {**os.environ, "TILEDSL_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "tiledsl", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # before the interpreter has started: its first write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == ""
    assert not (tmp_path / "reports").exists()


def test_compiler_bug_exits_1_naming_the_stage(fake, tmp_path, capsys):
    src = tmp_path / "crash.tile"
    src.write_text(fakes.FAKE_SOURCE + "CRASH_EMIT\n")
    assert main(["compile", str(src), "--arch", "gfx90a", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "internal compiler error: ZeroDivisionError" in err and "in stage 'emit'" in err
    Path(re.search(r"traceback is saved at (\S+)", err).group(1)).unlink()
    fakes.remove_saved(re.search(r"its input is saved at (\S+)", err).group(1))


@pytest.mark.parametrize("args,message", [
    (["--hdim", "300"], "--hdim '300': expected a head dim 1..256"),
    (["--hdim", "128/x"], "--hdim '128/x'"),
    (["--with", "dropout"], "--with 'dropout': expected one of lse, varlen, sink, softcap"),
    (["--mask", "diagonal"], "--mask 'diagonal': expected one of none, causal, top_left, window"),
    (["--dtype", "f32"], "--dtype 'f32': expected one of f16, bf16"),
    (["--arch", "gfx1030"], "gfx1030"),
])
def test_prebuild_errors_exit_2(args, message, tmp_path, capsys):
    argv = ["prebuild", "fmha_fwd", "--cache-dir", str(tmp_path), *args]
    if "--arch" not in args:
        argv += ["--arch", "gfx942"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not list(tmp_path.iterdir()), "nothing is compiled when an argument is bad"


def test_compile_all_archs_goes_past_a_failing_one(tmp_path, capsys):
    """`--arch all` compiles every arch it can, summarises the failures and exits 2; -D ARCH:NAME=VALUE
    binds a constexpr for one arch only."""
    gemm = Path(__file__).resolve().parent.parent / "examples" / "gemm.tile"
    status = main(["compile", str(gemm), "--arch", "gfx942,gfx1100,gfx1201", "-D", "DT=bf16",
                   "-D", "gfx1100:BLOCK_M=1000", "-o", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 2
    assert sorted(p.name for p in tmp_path.glob("*.hsaco")) == ["gemm.gfx1201.hsaco", "gemm.gfx942.hsaco"]
    assert "tile dims must be powers of two, got 1000" in captured.err
    assert "2 of 3 archs compiled; failed: gfx1100 (" in captured.err
    manifest = json.loads((tmp_path / "gemm.gfx942.json").read_text())
    assert manifest["constexprs"]["DT"] == "bf16" and manifest["constexprs"]["BLOCK_M"] != 1000
    for bad, err in ((["-D", "gfx11:BLOCK_M=1"], "'gfx11' is not an arch"),
                     (["-D", "gfx942:BLOCK_M=64", "-D", "gfx942:BLOCK_M=32"], "-D gfx942:BLOCK_M given twice"),
                     (["-D", "gfx1100:BLOCK_M=64", "-D", "gfx1100:BLOCK_M=32"], "-D gfx1100:BLOCK_M given twice")):
        assert main(["compile", str(gemm), "--arch", "gfx942", *bad, "-o", str(tmp_path)]) == 2
        assert err in capsys.readouterr().err


def test_prebuild_goes_past_a_failing_variant(tmp_path, monkeypatch, capsys):
    """`tiledsl prebuild fmha_fwd` builds every variant it can, names each that failed, and exits 1,
    as prebuild --receipt does."""
    from tiledsl.registry import Variant

    real = Variant.build

    def broken_on_gfx1100(self):
        if self.arch == "gfx1100":
            raise RuntimeError("a planted compiler bug")
        return real(self)

    monkeypatch.setattr(Variant, "build", broken_on_gfx1100)
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path))  # restored afterwards (prebuild sets it)
    status = main(["prebuild", "fmha_fwd", "--arch", "gfx1100,gfx942", "--dtype", "f16", "--hdim", "64",
                   "--mask", "none", "--cache-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 1, captured.err
    assert "gfx1100" in captured.err and "FAILED: internal error: RuntimeError: a planted compiler bug" in captured.err
    assert "1 variants in" in captured.out and "1 failed" in captured.out


def test_compile_all_archs_goes_past_an_internal_error(tmp_path, monkeypatch, capsys):
    """A compiler bug on one arch is reported (its traceback saved under the cache directory) and
    the other archs still compile; the exit status is the internal error's."""
    import tiledsl.driver as driver

    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    real = driver.compile_source

    def broken_on_gfx1100(source, filename, arch, *args, **kwargs):
        if arch == "gfx1100":
            raise RuntimeError("a planted compiler bug")
        return real(source, filename, arch, *args, **kwargs)

    monkeypatch.setattr(driver, "compile_source", broken_on_gfx1100)
    status = main(["compile", str(ROOT / "examples" / "gemm.tile"), "--arch", "gfx942,gfx1100,gfx1201",
                   "-o", str(tmp_path / "out"), "--no-cache"])
    err = capsys.readouterr().err
    assert status == 1, err
    assert sorted(p.name for p in (tmp_path / "out").glob("*.hsaco")) == ["gemm.gfx1201.hsaco", "gemm.gfx942.hsaco"]
    assert "gfx1100: internal compiler error: RuntimeError: a planted compiler bug" in err
    assert "2 of 3 archs compiled; failed: gfx1100 (internal compiler error)" in err
    reports = list((tmp_path / "cache" / "reports").glob("tiledsl-ice-*.txt"))
    assert len(reports) == 1 and "a planted compiler bug" in reports[0].read_text()


def test_compile_all_archs_shows_an_arch_independent_error_once(tmp_path, capsys):
    tile = tmp_path / "bad.tile"
    tile.write_text("kernel k(x: tensor[f32](N)) grid(1) {\n let i = arange(0, 64)\n}\n")
    assert main(["compile", str(tile), "--arch", "all", "-o", str(tmp_path / "out"), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("bad.tile:2:23: error: expected ';'") == 2, err  # the error, and the summary once
    assert "gfx950: the same error as gfx90a" in err
    assert "0 of 5 archs compiled; failed: gfx90a, gfx942, gfx950, gfx1100, gfx1201 (" in err


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_compile_schedule_reaches_llvm(arch, tmp_path, monkeypatch, capsys):
    """--schedule becomes the kernel's amdgpu-sched-strategy attribute in the LLVM IR; the default
    leaves LLVM's choice alone; an unknown strategy is a usage error."""
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    gemm = str(ROOT / "examples" / "gemm.tile")
    for schedule, want in (("iterative-ilp", '"amdgpu-sched-strategy"="iterative-ilp"'), ("default", None)):
        dump = tmp_path / schedule
        assert main(["compile", gemm, "--arch", arch, "-o", str(tmp_path / "out"), "--dump-ir", str(dump),
                     "--schedule", schedule, "-q"]) == 0
        ll = next(dump.glob("*.ll")).read_text()
        assert (want in ll) if want else "amdgpu-sched-strategy" not in ll
    assert main(["compile", gemm, "--arch", arch, "-o", str(tmp_path / "out"), "--schedule", "fastest"]) == 2
    assert "invalid choice: 'fastest'" in capsys.readouterr().err


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_intermediate_of_another_arch_is_refused(arch, tmp_path, monkeypatch, capsys):
    """Each intermediate says which arch it was made for (.gpu.mlir's tile.arch, the kernels'
    target_cpu, the LLVM IR's "target-cpu"): it compiles again for that arch, to the same code
    object, and compiling it for another arch (another wave size, other matrix instructions) is a
    usage error naming both archs rather than a code object LLVM would not question."""
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    other = "gfx1100" if arch != "gfx1100" else "gfx942"
    dump, out = tmp_path / "dump", tmp_path / "out"
    assert main(["compile", str(ROOT / "examples" / "softmax.tile"), "--arch", arch, "-o", str(out),
                 "--dump-ir", str(dump), "-q"]) == 0
    want = (out / f"softmax.{arch}.hsaco").read_bytes()
    for kind in ("gpu.mlir", "rocdl.mlir", "ll"):
        (intermediate,) = dump.glob(f"*.{kind}")
        assert main(["compile", str(intermediate), "--arch", arch, "-o", str(tmp_path / kind), "-q"]) == 0
        assert (tmp_path / kind / f"softmax.{arch}.hsaco").read_bytes() == want
        capsys.readouterr()
        assert main(["compile", str(intermediate), "--arch", other, "-o", str(tmp_path / "wrong"), "-q"]) == 2
        assert f"the input was compiled for {arch} (its .{kind} says so), but it is being compiled for {other}" \
            in capsys.readouterr().err


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_compile_interleave_reaches_llvm(arch, tmp_path, monkeypatch):
    """--interleave puts LLVM's iglp.opt(0) in the gemm's loop (CompileOptions.interleave)."""
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    gemm = str(ROOT / "examples" / "gemm.tile")
    for flags, want in ((["--interleave"], 1), ([], 0)):
        dump = tmp_path / f"dump{want}"
        assert main(["compile", gemm, "--arch", arch, "-o", str(tmp_path / "out"), "--dump-ir", str(dump), "-q",
                     *flags]) == 0
        assert next(dump.glob("*.ll")).read_text().count("call void @llvm.amdgcn.iglp.opt(i32 0)") == want


def _stage_lds_output(kernel: str, arch: str, flags: list[str], tmp_path: Path) -> str:
    """stage-lds's output for tests/kernels/`kernel` compiled with `flags` (--dump-ir)."""
    dump = tmp_path / f"dump-{'-'.join(flags) or 'plain'}"
    assert main(["compile", str(ROOT / "tests" / "kernels" / kernel), "--arch", arch, "-o", str(tmp_path / "out"),
                 "--dump-ir", str(dump), "-q", *flags]) == 0
    return next(dump.glob("*stage-lds.mlir")).read_text()


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_compile_loop_arena_reaches_stage_lds(arch, tmp_path, monkeypatch):
    """--loop-arena gives tests/kernels/staged_pair.tile's two loop stagings bytes of their own
    (CompileOptions.loop_arena): a wider arena and fewer barriers, except on gfx1100, where its P
    staging makes the loop's stagings too wide for three workgroups per compute unit, and on
    gfx1201, where the swizzled V^T and K take bytes of their own in Q's arena without it
    (stage_lds_wider_arena.mlir has the padded case)."""
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    seen = {}
    for flags in (["--loop-arena"], []):
        text = _stage_lds_output("staged_pair.tile", arch, flags, tmp_path)
        seen[bool(flags)] = (int(re.search(r"tile.lds_bytes = (\d+)", text).group(1)), text.count('"tile.barrier"'))
    (wide, wide_barriers), (narrow, narrow_barriers) = seen[True], seen[False]
    if arch in ("gfx1100", "gfx1201"):
        assert (wide, wide_barriers) == (narrow, narrow_barriers)
    else:
        assert wide > narrow and wide_barriers < narrow_barriers


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_compile_tree_sums_reaches_lower_to_gpu(arch, tmp_path, monkeypatch):
    """--tree-sums sums tests/kernels/f32_sums.tile's lanes as trees (CompileOptions.tree_sums):
    more adds paired in dual issue on RDNA; CDNA's packed adds sum as a tree either way."""
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    asm = {}
    for flags in (["--tree-sums"], []):
        out = tmp_path / f"out-{bool(flags)}"
        assert main(["compile", str(ROOT / "tests" / "kernels" / "f32_sums.tile"), "--arch", arch, "-o", str(out),
                     "-q", *flags]) == 0
        asm[bool(flags)] = next(out.rglob("*.s")).read_text()
    if arch == "gfx942":
        assert asm[True] == asm[False]
    else:
        assert asm[True].count("v_dual_add_f32") > asm[False].count("v_dual_add_f32")


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_compile_merge_stores_reaches_stage_lds(arch, tmp_path, monkeypatch):
    """--merge-stores stores tests/kernels/merged_three.tile's C tile right after its B tile, before
    their one barrier (CompileOptions.merge_stores). (On gfx1201 the merged kernel spilled while its
    transposed staging was padded, and the driver compiled it again with a barrier before every
    staging; with the staging swizzled it fits.)"""
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    adjacent = {}
    for flags in (["--merge-stores"], []):
        ops = re.findall(r'"tile\.(local_store|barrier|local_load)"',
                         _stage_lds_output("merged_three.tile", arch, flags, tmp_path))
        adjacent[bool(flags)] = sum(a == b == "local_store" for a, b in zip(ops, ops[1:], strict=False))
    assert adjacent[False] == 0
    assert adjacent[True] == 1


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_compile_skip_unit_scales_reaches_the_ballot(arch, tmp_path, monkeypatch):
    """--skip-unit-scales guards the accumulator's rescale in tests/kernels/unit_scale.tile with a
    ballot over the wave (CompileOptions.skip_unit_scales), and the manifest says so."""
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    source = str(ROOT / "tests" / "kernels" / "unit_scale.tile")
    for flags, want in ((["--skip-unit-scales"], 1), ([], 0)):
        dump, out = tmp_path / f"dump{want}", tmp_path / f"out{want}"
        assert main(["compile", source, "--arch", arch, "-o", str(out), "--dump-ir", str(dump), "-q", *flags]) == 0
        assert len(re.findall(r"call i(?:32|64) @llvm\.amdgcn\.ballot", next(dump.glob("*.ll")).read_text())) == want
        manifest = json.loads(next(out.glob("*.json")).read_text())
        assert manifest.get("skip_unit_scales", False) == bool(want)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_barriers_wait_for_lds_only(arch, tmp_path, monkeypatch):
    """The barriers of examples/gemm.tile (around its pipelined loop's LDS stagings) order LDS only
    (lower_to_gpu.lds_barrier): the waits right before a barrier count LDS accesses, never global
    loads, and no cache is invalidated after one. On RDNA, whose workgroups run in WGP mode, a
    fence over every address space did both (gfx1201: `s_wait_loadcnt_dscnt 0x0`, gfx1100:
    `buffer_gl0_inv`), so a look-ahead load had to land before the next barrier."""
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    assert main(["compile", str(ROOT / "examples" / "gemm.tile"), "--arch", arch, "-o", str(out), "-q"]) == 0
    lines = [line.strip() for line in next(out.glob("*.s")).read_text().splitlines()]
    barriers = [i for i, line in enumerate(lines) if re.match(r"s_barrier(_signal)?(\s|$)", line)]
    assert len(barriers) >= 3
    for i in barriers:
        j = i - 1
        while re.match(r"s_wait|s_delay_alu", lines[j]):
            assert re.fullmatch(r"s_waitcnt lgkmcnt\(0\)|s_wait_dscnt 0x0|s_wait_alu .*|s_delay_alu .*", lines[j]), \
                f"{arch}: {lines[j]!r} before the barrier at line {i + 1}"
            j -= 1
    assert not any(re.match(r"buffer_(gl0_|gl1_)?inv", line) for line in lines)


def test_compile_options_refuse_an_unknown_schedule():
    from tiledsl.options import CompileOptions

    with pytest.raises(ValueError, match="schedule: expected one of .*'iterative-ilp'.*, got 'ilp'"):
        CompileOptions.make("gfx942", schedule="ilp")
