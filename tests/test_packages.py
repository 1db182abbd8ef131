"""Kernel packages (`tiledsl prebuild -o DIR`), offline mode, the runtime-only install,
`tiledsl.load_kernel` and the `device=` strings."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _fmha_util import prebuild_package

import tiledsl
from tiledsl import driver
from tiledsl.backends.rocm.runtime import EmulatorDevice, device_from
from tiledsl.cli import main
from tiledsl.errors import TileError
from tiledsl.library import KernelNotPrebuilt
from tiledsl.ops import fmha_bwd, fmha_fwd
from tiledsl.package import PackageError
from tiledsl.reference import fmha_bwd_reference, fmha_fwd_reference

ROOT = Path(__file__).resolve().parent.parent
ARCH = "gfx1201"
FWD = f"{ARCH}/fmha_fwd-f16-batch-d64-causal-lse"
BWD = f"{ARCH}/fmha_bwd-f16-batch-d64-causal"
MISSING = f"{ARCH}/fmha_fwd-f16-batch-d64-none"  # what a causal=False call on the same shapes needs


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    return prebuild_package(tmp_path_factory, FWD, BWD)


@pytest.fixture
def no_packages():
    tiledsl.unload_packages()
    yield
    tiledsl.unload_packages()


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 37, 2, 64)).astype(np.float16) for _ in range(4)]


def test_package_layout(package, capsys):
    index = json.loads((package / "index.json").read_text())
    assert index["format"] == "tiledsl-kernel-package" and index["version"] == 1
    assert index["tiledsl"] == tiledsl.__version__ and index["archs"] == [ARCH]
    assert set(index["variants"]) == {FWD, BWD}
    # With and without GQA packing (causal blocks go heaviest first, unpaired: fmha_fwd.tile).
    assert len(index["variants"][FWD]["kernels"]) == 2
    assert len(index["variants"][BWD]["kernels"]) == 4  # dot_do_o, dq_dk_dv unpaired and paired, convert_dq
    assert index["variants"][BWD]["signature"]["family"] == "fmha_bwd"
    names = set()
    for key, entry in index["kernels"].items():
        hsaco = (package / entry["hsaco"]).read_bytes()
        assert hashlib.sha256(hsaco).hexdigest() == entry["sha256"] and len(hsaco) == entry["bytes"]
        assert entry["hsaco"] == f"{ARCH}/{entry['kernel']}-{key[:12]}.hsaco"  # readable, not only a hash
        manifest = json.loads((package / entry["manifest"]).read_text())
        assert manifest["kernel"] == entry["kernel"] and manifest["arch"] == ARCH
        names.add(entry["kernel"])
    assert names == {"fmha_fwd", "fmha_bwd_dot_do_o", "fmha_bwd_dq_dk_dv", "fmha_bwd_convert_dq"}

    assert main(["list", "--package", str(package)]) == 0
    out = capsys.readouterr().out
    assert FWD in out and BWD in out and "2 variants in" in out
    assert main(["list", "--package", str(package), "--receipt", "training", "--arch", ARCH, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["key"] for r in rows if r["in_package"]} == {FWD, BWD} and len(rows) > 2


def test_writers_finishing_together_keep_each_others_entries(package, tmp_path):
    """Two prebuilds filling one package finish together: each write_package reads, extends and
    replaces the index under a lock, so neither drops the other's entries (threads: each opens the
    lock file on its own, so they exclude one another as processes do)."""
    from concurrent.futures import ThreadPoolExecutor

    from tiledsl.package import PackagedKernel, write_package

    entry = next(iter(json.loads((package / "index.json").read_text())["kernels"].values()))
    hsaco, manifest = (package / entry["hsaco"]).read_bytes(), json.loads((package / entry["manifest"]).read_text())
    root = tmp_path / "shared"

    def writer(w: int) -> list[str]:
        keys = [hashlib.sha256(f"{w}/{i}".encode()).hexdigest() for i in range(10)]
        for key in keys:
            write_package(root, [PackagedKernel(key, hsaco, manifest)], variants={})
        return keys

    with ThreadPoolExecutor(4) as pool:
        written = [key for keys in pool.map(writer, range(4)) for key in keys]
    assert set(json.loads((root / "index.json").read_text())["kernels"]) == set(written)
    assert tiledsl.load_package(str(root)).get(written[-1]) is not None


def test_offline_package_runs_without_compiling(package, no_packages, monkeypatch):
    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled although the package holds the variant")

    monkeypatch.setattr(driver, "run_stages", no_compiling)
    pkg = tiledsl.load_package(package, strict=True)
    assert FWD in pkg.variants
    q, k, v, do = _inputs()
    dev = EmulatorDevice(ARCH)
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=dev)
    ref_out, ref_lse = fmha_fwd_reference(q, k, v, causal=True, return_lse=True)
    np.testing.assert_allclose(out.astype(np.float32), ref_out, atol=2e-3, rtol=0)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=0)
    grads = fmha_bwd(do, q, k, v, out, lse, causal=True, device=dev)
    for got, want in zip(grads, fmha_bwd_reference(do, q, k, v, causal=True), strict=True):
        np.testing.assert_allclose(got.astype(np.float32), want, atol=4e-3, rtol=0)
    with pytest.raises(KernelNotPrebuilt) as err:
        fmha_fwd(q, k, v, causal=False, device=dev)
    text = str(err.value)
    assert f"variant {MISSING} is not prebuilt" in text and str(package) in text
    assert f"tiledsl prebuild --variant {MISSING} -o DIR" in text


def test_environment_selects_package_and_offline(package, no_packages, monkeypatch):
    q, k, v, _ = _inputs(1)
    monkeypatch.setenv("TILEDSL_KERNELS", f"/nonexistent/kernels{os.pathsep}{package}")
    with pytest.raises(TileError, match="TILEDSL_KERNELS: kernel package /nonexistent/kernels: no such directory"):
        fmha_fwd(q, k, v, causal=True, device=EmulatorDevice(ARCH))
    a_file = package.parent / "a_file"
    a_file.write_text("")
    monkeypatch.setenv("TILEDSL_KERNELS", str(a_file))
    with pytest.raises(TileError, match=f"kernel package {a_file}: is a file; a kernel package is a directory"):
        fmha_fwd(q, k, v, causal=True, device=EmulatorDevice(ARCH))
    monkeypatch.setenv("TILEDSL_KERNELS", str(package))
    monkeypatch.setenv("TILEDSL_OFFLINE", "maybe")
    with pytest.raises(TileError, match="TILEDSL_OFFLINE: expected one of '1', 'true', .* got 'maybe'"):
        fmha_fwd(q, k, v, causal=True, device=EmulatorDevice(ARCH))
    monkeypatch.setenv("TILEDSL_OFFLINE", "1")
    tiledsl.unload_packages()  # plans built before now were built with other settings
    with pytest.raises(KernelNotPrebuilt, match=MISSING):
        fmha_fwd(q, k, v, device=EmulatorDevice(ARCH))


def test_corrupted_packages_are_errors_not_crashes(package, no_packages, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(package, bad)
    index = json.loads((bad / "index.json").read_text())
    victim = index["kernels"][index["variants"][BWD]["kernels"][1]]["hsaco"]
    blob = bytearray((bad / victim).read_bytes())
    blob[100] ^= 0xFF
    (bad / victim).write_bytes(bytes(blob))
    tiledsl.load_package(bad, strict=True)
    q, k, v, do = _inputs(2)
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice(ARCH))
    with pytest.raises(PackageError, match=f"{victim} is corrupted"):
        fmha_bwd(do, q, k, v, out, lse, causal=True, device=EmulatorDevice(ARCH))

    for text, problem in (("{not json", "is not valid JSON"), ('{"format": "zip"}', "not a tiledsl kernel package"),
                          ('{"format": "x", "format": "y"}', "the member name 'format' is repeated in one object"),
                          ('{"format": "tiledsl-kernel-package", "version": 99}', "format version 99")):
        (bad / "index.json").write_text(text)
        with pytest.raises(PackageError, match=problem):
            tiledsl.load_package(bad)
    good = json.loads((package / "index.json").read_text())
    name, key = FWD, next(iter(good["kernels"]))
    for edit, problem in ((lambda ix: ix["variants"].__setitem__("x", 5), "variant 'x': expected an object with a "
                           "'signature' object naming its family and a 'kernels' list, got 5"),
                          (lambda ix: ix["variants"][name]["kernels"].append("f" * 64), f"variant '{name}' lists "
                           "kernel ffffffffffffffff..., which the package does not have"),
                          (lambda ix: ix["kernels"][key].__setitem__("bytes", "12"),
                           "has bytes '12'; expected an int")):
        index = json.loads(json.dumps(good))
        edit(index)
        (bad / "index.json").write_text(json.dumps(index))
        with pytest.raises(PackageError, match=re.escape(problem)):
            tiledsl.load_package(bad)
    (bad / "index.json").unlink()
    with pytest.raises(PackageError, match="no index.json"):
        tiledsl.load_package(bad)
    with pytest.raises(ValueError, match="strict: expected a bool"):
        tiledsl.load_package(package, strict="yes")


def test_package_files_stay_inside_and_are_regular(package, no_packages, tmp_path):
    """index.json names its files by paths inside the package: '..' and absolute paths are refused
    when it is loaded; a code object that is a FIFO (it would block) or not a regular file is
    refused when read, not read."""
    for name, path in (("dotdot", "../elsewhere.hsaco"), ("absolute", "/dev/zero")):
        bad = tmp_path / name
        shutil.copytree(package, bad)
        index = json.loads((bad / "index.json").read_text())
        entry = index["kernels"][index["variants"][FWD]["kernels"][0]]
        entry["hsaco"] = path
        (bad / "index.json").write_text(json.dumps(index))
        with pytest.raises(PackageError, match=f"names the hsaco file '{path}', which is not a path inside"):
            tiledsl.load_package(bad)
    fifo = tmp_path / "fifo"
    shutil.copytree(package, fifo)
    index = json.loads((fifo / "index.json").read_text())
    victim = index["kernels"][index["variants"][FWD]["kernels"][0]]["hsaco"]
    (fifo / victim).unlink()
    os.mkfifo(fifo / victim)
    tiledsl.load_package(fifo, strict=True)
    q, k, v, _ = _inputs(3)
    with pytest.raises(PackageError, match=f"the code object {victim} is not a regular file"):
        fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice(ARCH))


def test_an_entry_filed_under_another_variants_key_is_refused(package, no_packages, tmp_path):
    """Keys are digests of what was asked: swapping two entries' keys in index.json (each entry
    consistent in itself) would run one variant's code for the other; the lookup refuses it."""
    bad = tmp_path / "swapped"
    shutil.copytree(package, bad)
    index = json.loads((bad / "index.json").read_text())
    fwd_key = index["variants"][FWD]["kernels"][0]
    other = next(k for k in index["kernels"] if k != fwd_key and index["kernels"][k]["kernel"] != "fmha_fwd")
    index["kernels"][fwd_key], index["kernels"][other] = index["kernels"][other], index["kernels"][fwd_key]
    (bad / "index.json").write_text(json.dumps(index))
    tiledsl.load_package(bad, strict=True)
    q, k, v, _ = _inputs(4)
    with pytest.raises(PackageError, match=f"the entry under key {fwd_key[:16]}... holds fmha_bwd_.* with other "
                                           "defines than the fmha_fwd variant asked for"):
        fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice(ARCH))


def test_package_arguments_and_targets_are_checked_first(package, no_packages, tmp_path, capsys):
    """A bad strict flag loads nothing; an index whose version is true (== 1 in Python) is refused
    as the C runtime refuses it; prebuild -o into an unreadable package is refused before it
    compiles anything (which takes minutes for a receipt)."""
    from tiledsl.cli import main
    from tiledsl.library import settings

    with pytest.raises(ValueError, match="strict: expected a bool"):
        tiledsl.load_package(package, strict="yes")
    assert not settings().packages
    with pytest.raises(ValueError, match="path: expected the directory of a kernel package, got None"):
        tiledsl.load_package(None)
    bad = tmp_path / "version"
    shutil.copytree(package, bad)
    index = json.loads((bad / "index.json").read_text())
    (bad / "index.json").write_text(json.dumps({**index, "version": True}))
    with pytest.raises(PackageError, match="format version True"):
        tiledsl.load_package(bad)
    (bad / "index.json").write_text("{")
    assert main(["prebuild", "--variant", MISSING, "-q", "-o", str(bad)]) == 2
    assert "index.json is not valid JSON" in capsys.readouterr().err
    assert main(["list", "--package", str(package), "--family", "nosuch"]) == 2


def test_prebuild_variant_errors(tmp_path, capsys):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    for argv, err in ((["prebuild", "--variant", "gfx942/fmha_fwd-f16"], "expected ARCH/FAMILY-DTYPE-MODE"),
                      (["prebuild", "--variant", "gfx942/fmha_fwd-f32-batch-d64-none"], "dtype:"),
                      (["prebuild", "--variant", "gfx942/fmha_fwd-f16-batch-d64-none-shiny"], "unknown flag 'shiny'"),
                      (["prebuild", "--variant", "gfx942/fmha_fwd-f16-batch-d64-none-softcap-lse"],
                       "did you mean gfx942/fmha_fwd-f16-batch-d64-none-lse-softcap"),
                      (["prebuild", "--receipt", "flash", "--variant", FWD, "--arch", ARCH], "not --receipt and"),
                      (["prebuild", "--receipt", "flash"], "--arch is required"),
                      (["prebuild", "--variant", FWD, "-o", str(tmp_path)], "holds other files and no index.json"),
                      (["prebuild", "--variant", "gfx942/fmha_fwd-f16-batch-d64-none", "--arch", "gfx950"],
                       "--arch gfx950 keeps none of the 1 --variant keys (their archs: gfx942)")):
        assert main(argv) == 2, argv
        assert err in capsys.readouterr().err, argv


RUNTIME_SCRIPT = """
import importlib.util, sys
import numpy as np
import tiledsl
from tiledsl.library import KernelNotPrebuilt
from tiledsl.launcher import launch
from tiledsl.ops import fmha_bwd, fmha_fwd
from tiledsl.reference import fmha_bwd_reference, fmha_fwd_reference

missing = [m for m in ("mlir", "llvmlite", "lark", "ziglang", "tqdm") if importlib.util.find_spec(m)]
assert not missing, f"compiler modules installed: {missing}"
rng = np.random.default_rng(5)
q, k, v, do = (rng.standard_normal((2, 45, 4, 64)).astype(np.float16) for _ in range(4))
k, v = k[:, :, :2], v[:, :, :2]  # GQA 4:2
out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device="emulator:ARCH")
ref_out, ref_lse = fmha_fwd_reference(q, k, v, causal=True, return_lse=True)
assert np.abs(out.astype(np.float32) - ref_out).max() < 2e-3
assert np.abs(lse - ref_lse).max() < 1e-4
grads = fmha_bwd(do, q, k, v, out, lse, causal=True, device="emulator:ARCH")
for got, want in zip(grads, fmha_bwd_reference(do, q, k, v, causal=True)):
    assert np.abs(got.astype(np.float32) - want).max() < 4e-3
try:
    fmha_fwd(q, k, v, device="emulator:ARCH")
except KernelNotPrebuilt as exc:
    assert "tiledsl prebuild --variant MISSING" in str(exc), exc
else:
    raise AssertionError("offline mode compiled a missing variant")
kernel = tiledsl.load_kernel(sys.argv[1], name="softmax", arch="ARCH")
x = rng.standard_normal((5, 300)).astype(np.float16)
y = np.zeros_like(x)
launch(kernel, x, y, device="emulator:ARCH")
e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
assert np.abs(y - e / e.sum(1, keepdims=True)).max() < 2e-3
print("runtime-only: ok")
"""


def test_runtime_only_install_runs_a_package(package, tmp_path):
    """The documented runtime-only install (README): tiledsl without its compiler dependencies,
    plus numpy, ml_dtypes and msgpack, in a fresh virtual environment, runs the package's forward
    and backward on the emulator and a user's kernel through load_kernel."""
    kernels = tmp_path / "mine"
    assert main(["compile", str(ROOT / "examples/softmax.tile"), "--arch", ARCH, "-o", str(kernels), "-q"]) == 0
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # README's one-liner, on a copy of the sources (pip's build leaves a build/ folder behind).
    src = tmp_path / "src"
    src.mkdir()
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, src / part)
    for part in ("tiledsl", "passes", "backends"):
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                              str(src), "numpy", "ml_dtypes", "msgpack"], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]
    script = RUNTIME_SCRIPT.replace("MISSING", f"{ARCH}/fmha_fwd-f16-batch-d64-none").replace("ARCH", ARCH)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TILEDSL_", "PYTHON"))}
    env.update(TILEDSL_KERNELS=str(package), TILEDSL_OFFLINE="1", TILEDSL_CACHE_DIR=str(tmp_path / "no-cache"))
    run = subprocess.run([str(python), "-c", textwrap.dedent(script), str(kernels)], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    assert "runtime-only: ok" in run.stdout
    env.pop("TILEDSL_OFFLINE")  # not offline: a missing variant cannot compile either, and says why
    run = subprocess.run([str(python), "-c", "import numpy as np; from tiledsl.ops import fmha_fwd; "
                          "q = np.zeros((1, 8, 1, 64), np.float16); fmha_fwd(q, q, q, device='emulator:ARCH')"
                          .replace("ARCH", ARCH)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 1 and "the compiler is not installed" in run.stderr, run.stderr[-2000:]
    assert f"tiledsl prebuild --variant {ARCH}/fmha_fwd-f16-batch-d64-none -o DIR" in run.stderr


def test_load_kernel(tmp_path):
    out = tmp_path / "out"
    assert main(["compile", str(ROOT / "examples/softmax.tile"), "--arch", "gfx942,gfx1100", "-o", str(out), "-q"]) == 0
    kernel = tiledsl.load_kernel(out, arch="gfx1100")
    assert (kernel.name, kernel.arch) == ("softmax", "gfx1100") and kernel.asm
    assert tiledsl.load_kernel(out / "softmax.gfx942.json").arch == "gfx942"
    from tiledsl.launcher import launch

    x = np.random.default_rng(0).standard_normal((3, 200)).astype(np.float16)
    y = np.zeros_like(x)
    launch(kernel, x, y, device="emulator:gfx1100")
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(y.astype(np.float64), e / e.sum(1, keepdims=True), atol=2e-3)

    for kwargs, err in (({}, "holds several kernels (softmax (gfx1100), softmax (gfx942))"),
                        ({"name": "gemm"}, "has no compiled kernel with name='gemm'"),
                        ({"arch": "gfx12"}, "arch: expected one of")):
        with pytest.raises(ValueError, match=err.replace("(", r"\(").replace(")", r"\)")):
            tiledsl.load_kernel(out, **kwargs)
    with pytest.raises(ValueError, match="expected 'gfx942', but"):
        tiledsl.load_kernel(out / "softmax.gfx1100.hsaco", arch="gfx942")
    with pytest.raises(ValueError, match="cannot read"):
        tiledsl.load_kernel(tmp_path / "none.hsaco")
    manifest = json.loads((out / "softmax.gfx942.json").read_text())
    manifest["lds_bytes"] += 4
    (out / "softmax.gfx942.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="its manifest_sha256 does not match its contents"):
        tiledsl.load_kernel(out, arch="gfx942")
    del manifest["manifest_sha256"]  # as written before the digest: the cross-check finds the edit
    (out / "softmax.gfx942.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="disagrees with its code object"):
        tiledsl.load_kernel(out, arch="gfx942")
    (out / "softmax.gfx942.json").write_text("{")
    with pytest.raises(ValueError, match="is not valid JSON"):
        tiledsl.load_kernel(out, arch="gfx942")


def test_device_strings(hip_backend):
    q = np.random.default_rng(3).standard_normal((1, 20, 1, 64)).astype(np.float16)
    dev = device_from("emulator:gfx1100")
    assert isinstance(dev, EmulatorDevice) and dev is device_from("emulator", "gfx1100")  # one per arch
    assert device_from(dev) is dev
    np.testing.assert_allclose(fmha_fwd(q, q, q, device="emulator:gfx1100").astype(np.float32),
                               fmha_fwd_reference(q, q, q), atol=2e-3)
    for spec, arch, err in (("cuda", None, "device: expected a Device, 'emulator', 'emulator:ARCH'"),
                            (0, None, "got int 0"), ("emulator", None, "'emulator' needs an arch"),
                            ("emulator:gfx9", None, "unknown arch 'gfx9'"),
                            ("emulator:gfx942", "gfx1100", "emulates gfx942, but arch is gfx1100"),
                            ("hip:one", None, "expected 'hip:N'")):
        with pytest.raises(ValueError, match=err):
            device_from(spec, arch)
    with pytest.raises(ValueError, match="device: expected a Device"):
        fmha_fwd(q, q, q, device="gpu")
    with pytest.raises(ValueError, match="arch: expected one of"):
        fmha_fwd(q, q, q, arch="gfx800")
    if hip_backend.stub is not None:
        from tiledsl.backends.rocm.runtime import HipDevice

        ordinal = hip_backend.stub.ordinal("gfx942")
        assert device_from(f"hip:{ordinal}") is HipDevice(ordinal)
        with pytest.raises(ValueError, match="needs a visible AMD GPU"):
            device_from("hip", "gfx942")
