"""Damaged and hand-edited artifacts read from disk: the manifests and code objects `tiledsl
compile -o` writes (`tiledsl.load_kernel`) and kernel packages (`tiledsl.load_package`).

Each is refused with an error naming the file and what is wrong in it -- a ValueError for
load_kernel, a PackageError for packages -- never a raw TypeError/KeyError/struct.error, and never
a launch that runs with a wrong grid or kernarg layout.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _fmha_util import prebuild_package

import tiledsl
from tiledsl.backends.rocm import elf
from tiledsl.backends.rocm.runtime import EmulatorDevice
from tiledsl.cli import main
from tiledsl.errors import TileError
from tiledsl.manifest import check_manifest, manifest_digest, validate_manifest
from tiledsl.package import Package, PackageError

pytestmark = pytest.mark.compile
ROOT = Path(__file__).resolve().parent.parent
ARCH = "gfx942"
STEM = f"gemm.{ARCH}"


@pytest.fixture(scope="module")
def gemm(tmp_path_factory) -> tuple[bytes, dict[str, Any]]:
    """examples/gemm.tile as `tiledsl compile -o` writes it: (code object, manifest)."""
    out = tmp_path_factory.mktemp("gemm")
    assert main(["compile", str(ROOT / "examples/gemm.tile"), "--arch", ARCH, "-o", str(out), "-q"]) == 0
    return (out / f"{STEM}.hsaco").read_bytes(), json.loads((out / f"{STEM}.json").read_text())


def _write(where: Path, hsaco: bytes, manifest: dict[str, Any] | None = None, text: bytes | None = None) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{STEM}.hsaco").write_bytes(hsaco)
    (where / f"{STEM}.json").write_bytes(text if text is not None else json.dumps(manifest).encode())
    return where


def _load_error(where: Path) -> str:
    """The ValueError load_kernel raises for the pair in `where` (exactly ValueError, with the path)."""
    with pytest.raises(ValueError) as err:
        tiledsl.load_kernel(where)
    assert str(where) in str(err.value), err.value
    return str(err.value)


def test_compile_records_the_code_object_digest(gemm):
    hsaco, manifest = gemm
    assert manifest["code_object_sha256"] == hashlib.sha256(hsaco).hexdigest()
    validate_manifest(manifest)
    check_manifest(manifest, hsaco)


@pytest.mark.emulator
def test_good_pair_loads_and_launches(gemm, tmp_path):
    from tiledsl.launcher import launch

    hsaco, manifest = gemm
    kernel = tiledsl.load_kernel(_write(tmp_path / "k", hsaco, manifest))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 16, 32)).astype(np.float16)
    b = rng.standard_normal((1, 8, 32)).astype(np.float16)
    c = np.zeros((1, 16, 8), np.float16)
    launch(kernel, a, b, c, 1.0, device=EmulatorDevice(ARCH))
    want = a.astype(np.float32) @ b.astype(np.float32).transpose(0, 2, 1)
    np.testing.assert_allclose(c.astype(np.float32), want, atol=0.05)


def _set(**fields: Any) -> Callable[[dict], None]:
    return lambda m: m.update(fields)


def _drop(key: str) -> Callable[[dict], None]:
    return lambda m: m.pop(key)


def _kernarg(index: int, **fields: Any) -> Callable[[dict], None]:
    return lambda m: m["kernargs"][index].update(fields)


MANIFEST_CASES = [
    ("kernargs-str", _set(kernargs="x"), "field 'kernargs' must be a list of objects, got string 'x'"),
    ("kernargs-ints", _set(kernargs=[1, 2]), "field 'kernargs[0]' must be an object, got integer 1"),
    ("kernarg_size-str", _set(kernarg_size="68"),
     "field 'kernarg_size' must be an integer in 0..1048576, got string '68'"),
    ("kernarg_size-nan", _set(kernarg_size=float("nan")),
     "field 'kernarg_size' must be an integer in 0..1048576, got number nan"),
    ("kernarg_size-small", _set(kernarg_size=8),
     "field 'kernargs[1].offset' must be an integer in 0..4 (within kernarg_size 8)"),
    ("workgroup-str", _set(workgroup_size="x"), "field 'workgroup_size' must be 3 positive integers"),
    ("workgroup-null", _set(workgroup_size=None), "field 'workgroup_size' must be 3 positive integers of at most 1024 "
                                                  "work-items in all, got null"),
    ("workgroup-2048", _set(workgroup_size=[2048, 1, 1]), "field 'workgroup_size' must be 3 positive integers"),
    ("grid-null", _set(grid=None), "field 'grid' must be a list of 1 to 3 formulas, got null"),
    ("grid-int", _set(grid=[1, "1", "1"]), "field 'grid[0]' must be a formula (a non-empty string), got integer 1"),
    ("grid-syntax", _set(grid=["nonsense(", "1", "1"]), "field 'grid[0]': 'nonsense(' is not a formula"),
    ("grid-call", _set(grid=["__import__('os')", "1", "1"]),
     "field 'grid[0]': \"__import__('os')\" calls something other than cdiv"),
    ("grid-unknown", _set(grid=["cdiv(Q, 64)", "1", "1"]), "field 'grid[0]': 'cdiv(Q, 64)' uses 'Q'"),
    ("requires-str", _set(requires="x"), "field 'requires' must be a list of conditions, got string 'x'"),
    ("symbol-int", _set(symbol=5), "field 'symbol' must be a non-empty string, got integer 5"),
    ("arch-unknown", _set(arch="gfx9999"), "field 'arch' must be one of gfx90a, gfx942"),
    ("format-99", _set(format=99), "field 'format' is 99, this tiledsl reads manifest format 1"),
    ("partial", _set(partial=True), "partial manifest of a kernel compiled from an intermediate file"),
    ("digest-bad", _set(code_object_sha256="xyz"), "field 'code_object_sha256' must be 64 lower-case hex digits"),
    ("no-wave_size", _drop("wave_size"), "field 'wave_size' is missing"),
    ("no-lds_bytes", _drop("lds_bytes"), "field 'lds_bytes' is missing"),
    ("no-tensors", _drop("tensors"), "field 'tensors' is missing"),
    ("tensor-missing", lambda m: m["tensors"].pop(), "field 'kernargs[6].name': the pointer 'c' is not one of the "
                                                     "tensors: a, b"),
    ("tensor-dtype", lambda m: m["tensors"][0].update(dtype="f99"), "field 'tensors[0].dtype' must be one of"),
    ("tensor-dtype-mismatch", lambda m: m["tensors"][0].update(dtype="f32"),
     "field 'kernargs[0].dtype': pointer 'a' has dtype 'f16', but tensors says 'a' is 'f32'"),
    ("tensor-stride_unit", lambda m: m["tensors"][0].update(stride_unit=0),
     "field 'tensors[0].stride_unit' must be a positive integer, got integer 0"),
    ("tensor-dims", lambda m: m["tensors"][0].update(dims=["BATCH", "M"]),
     "field 'kernargs': tensor 'a' has 2 dims with a unit last stride, so it passes strides for dims [0]"),
    ("scalars-empty", _set(scalars=[]), "field 'kernargs[9].name': the scalar 'alpha' is not one of the scalars: none"),
    ("dim_units-zero", _set(dim_units={"M": 0}), "field 'dim_units.M' must be a power of two, got integer 0"),
    ("dim_units-three", _set(dim_units={"M": 3}), "field 'dim_units.M' must be a power of two, got integer 3"),
    ("dim_units-unknown", _set(dim_units={"Q": 2}), "field 'dim_units': the key 'Q' is not one of the shape symbols"),
    ("stride-dim-7", _kernarg(1, dim=7), "field 'kernargs[1].dim' must be an integer in 0..2 (a dim of tensor 'a'), "
                                         "got integer 7"),
    ("stride-no-dim", lambda m: m["kernargs"][1].pop("dim"), "field 'kernargs[1].dim' must be an integer in 0..2"),
    ("kernarg-kind", _kernarg(0, kind="weird"),
     "field 'kernargs[0].kind' must be one of pointer, stride, shape, scalar"),
    ("kernarg-offset-str", _kernarg(0, offset="0"), "field 'kernargs[0].offset' must be an integer in 0..60"),
    ("kernarg-overlap", _kernarg(3, offset=0), "field 'kernargs': 'a' and 'b' overlap in the kernarg segment"),
    ("shape-unknown", _kernarg(-1, name="Q"),
     "field 'kernargs[13].name': the shape 'Q' is not one of the shape symbols"),
    # Well-formed, but not what the code object says: the cross-check names the difference.
    ("lds-differs", lambda m: m.update(lds_bytes=m["lds_bytes"] + 4), "disagrees with its code object"),
    ("offsets-swapped", lambda m: (_kernarg(0, offset=16)(m), _kernarg(3, offset=0)(m)),
     "kernargs (offset, size): manifest [(16, 8)"),
    ("symbol-differs", _set(symbol="nope"), "code object metadata has no kernel 'nope'"),
]


@pytest.mark.parametrize("label, damage, message", MANIFEST_CASES, ids=[c[0] for c in MANIFEST_CASES])
def test_corrupt_manifest_is_a_clear_error(gemm, tmp_path, label, damage, message):
    """Each damage, in a manifest without its own digest (as written before it existed): the field
    checks and the cross-check with the code object name what is wrong. With the digest, a damage
    those checks pass is refused by the digest."""
    hsaco, good = gemm
    manifest = copy.deepcopy(good)
    del manifest["manifest_sha256"]
    damage(manifest)
    text = _load_error(_write(tmp_path / label, hsaco, manifest))
    assert text.startswith("path: ") and message in text, text
    signed = {**manifest, "manifest_sha256": good["manifest_sha256"]}
    text = _load_error(_write(tmp_path / f"{label}-signed", hsaco, signed))
    assert message in text or "its manifest_sha256 does not match its contents" in text, text


def test_compile_records_the_manifest_digest(gemm, tmp_path):
    """`tiledsl compile` signs its manifest: any edit that leaves it a valid manifest (a grid
    formula, which nothing else cross-checks) is refused; the untouched pair loads."""
    hsaco, good = gemm
    assert good["manifest_sha256"] == manifest_digest(good)
    assert tiledsl.load_kernel(_write(tmp_path / "good", hsaco, good)).manifest == good
    edited = copy.deepcopy(good)
    edited["grid"][0] = "1"
    text = _load_error(_write(tmp_path / "edited", hsaco, edited))
    assert "the manifest is not as `tiledsl compile` wrote it" in text and "recompile" in text


@pytest.mark.parametrize("label, text, message", [
    ("empty", b"", "is not valid JSON"),
    ("not-utf8", bytes(range(256)), "is not a tiledsl manifest: not UTF-8 text (byte 0x80 at offset 128)"),
    ("nesting", b"[" * 100_000 + b"]" * 100_000, "is not valid JSON"),
    ("null", b"null", "expected a JSON object (a tiledsl manifest), got null"),
    ("list", b"[1, 2]", "expected a JSON object (a tiledsl manifest), got list [1, 2]"),
])
def test_unreadable_manifest_is_a_clear_error(gemm, tmp_path, label, text, message):
    assert message in _load_error(_write(tmp_path / label, gemm[0], text=text))


def _code_offset(hsaco: bytes, symbol: str) -> int:
    """The file offset of `symbol`'s first instruction."""
    co = elf.read_code_object(hsaco)
    addr = co.symbols[symbol].value
    seg = next(s for s in co.segments if s.vaddr <= addr < s.vaddr + len(s.data))
    return hsaco.index(seg.data) + addr - seg.vaddr


@pytest.mark.parametrize("size", [0, 10, 63, 64, 200, 1000, "half", "all but one"])
def test_truncated_code_object_says_truncated(gemm, tmp_path, size):
    hsaco, manifest = gemm
    n = {"half": len(hsaco) // 2, "all but one": len(hsaco) - 1}.get(size, size)
    text = _load_error(_write(tmp_path / "k", hsaco[:n], manifest))
    assert "not a valid AMDGPU code object: " in text
    assert ("the file is empty" if n == 0 else "truncated") in text, text


@pytest.mark.parametrize("which", ["hsaco", "json"])
def test_a_fifo_in_place_of_a_file_is_refused_not_read(gemm, tmp_path, which):
    """load_kernel reads only regular files (as packages and the compile cache do): a FIFO would
    block the read for ever."""
    hsaco, manifest = gemm
    where = _write(tmp_path / "k", hsaco, manifest)
    (where / f"{STEM}.{which}").unlink()
    os.mkfifo(where / f"{STEM}.{which}")
    assert f"{STEM}.{which}: not a regular file" in _load_error(where)


def test_flipped_code_objects_never_crash(gemm, tmp_path):
    """Seeded byte flips anywhere in the file: a clear error at load, never a raw exception."""
    hsaco, manifest = gemm
    where = tmp_path / "k"
    for seed in range(40):
        rng = random.Random(seed)
        blob = bytearray(hsaco)
        for _ in range(rng.choice([1, 2, 4, 8, 16])):
            blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
        if blob == hsaco:  # two flips undid each other
            continue
        _write(where, bytes(blob), manifest)
        try:
            tiledsl.load_kernel(where)
        except (ValueError, TileError) as exc:
            assert str(where) in str(exc), (seed, exc)
        else:
            raise AssertionError(f"seed {seed}: a damaged code object loaded")


@pytest.mark.parametrize("damage, message", [
    ("garbage", "not an ELF file"),
    ("metadata", "its AMDGPU metadata note is not valid msgpack"),
    ("code", "the code object does not match its manifest"),
])
def test_damaged_code_object_messages(gemm, tmp_path, damage, message):
    hsaco, manifest = gemm
    blob = bytearray(hsaco)
    if damage == "garbage":
        blob = bytearray(random.Random(1).randbytes(len(hsaco)))
    elif damage == "metadata":
        [desc] = [d for owner, kind, d in elf.read_code_object(hsaco).notes if owner == "AMDGPU" and kind == 32]
        blob[hsaco.index(desc)] = 0xC1  # the one byte msgpack never uses
    else:  # an instruction: the ELF stays valid, only the digest tells
        blob[_code_offset(hsaco, manifest["symbol"]) + 40] ^= 0x01
    text = _load_error(_write(tmp_path / "k", bytes(blob), manifest))
    assert message in text, text
    if damage == "code":
        assert "recompile" in text
        old = {k: v for k, v in manifest.items() if k not in ("code_object_sha256", "manifest_sha256")}
        assert tiledsl.load_kernel(_write(tmp_path / "old", bytes(blob), old)).hsaco == bytes(blob)  # older outputs


def test_reader_raises_code_object_errors():
    for blob, message in ((b"", "the file is empty"), (b"\x7fELF\x02\x01", "truncated"), (b"MZ\x90\x00", "not an ELF")):
        with pytest.raises(elf.CodeObjectError, match=message) as err:
            elf.read_code_object(blob)
        assert isinstance(err.value, ValueError) and isinstance(err.value, TileError)
        assert str(err.value).startswith("not a valid AMDGPU code object: ")


# ---------------------------------------------------------------------------------------------
# Kernel packages.

FWD = "gfx1201/fmha_fwd-f16-batch-d64-causal-lse"  # test_packages.py builds it too: a cache hit


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    return prebuild_package(tmp_path_factory, FWD)


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("TILEDSL_OFFLINE", "1")
    monkeypatch.delenv("TILEDSL_KERNELS", raising=False)
    tiledsl.unload_packages()
    yield
    tiledsl.unload_packages()


def _run_fwd(root: Path) -> None:
    from tiledsl.ops import fmha_fwd

    tiledsl.load_package(root, strict=True)
    q = np.random.default_rng(0).standard_normal((1, 37, 2, 64)).astype(np.float16)
    fmha_fwd(q, q, q, causal=True, return_lse=True, device=EmulatorDevice(FWD.split("/")[0]))


def _tampered(package: Path, where: Path, edit: Callable[[dict], Any], *, digests: bool = True) -> Path:
    """A copy of `package` with `edit` applied to every manifest (and, digests=False, an index as
    packages written before manifest digests have)."""
    shutil.copytree(package, where)
    index = json.loads((where / "index.json").read_text())
    for entry in index["kernels"].values():
        manifest = json.loads((where / entry["manifest"]).read_text())
        edit(manifest)
        (where / entry["manifest"]).write_text(json.dumps(manifest))
        if not digests:
            del entry["manifest_sha256"]
    (where / "index.json").write_text(json.dumps(index))
    return where


def test_package_records_manifest_digests(package):
    index = json.loads((package / "index.json").read_text())
    for entry in index["kernels"].values():
        assert entry["manifest_sha256"] == hashlib.sha256((package / entry["manifest"]).read_bytes()).hexdigest()


def _shift_offsets(m: dict) -> None:
    for f in m["kernargs"]:
        f["offset"] += 4


def _double_workgroup(m: dict) -> None:  # a size the code object cannot have, whatever its waves
    m["workgroup_size"] = [2 * m["workgroup_size"][0], *m["workgroup_size"][1:]]


PACKAGE_CASES = [
    # (label, edit, message without manifest digests (older packages); None: goes unnoticed)
    ("grid", _set(grid=["1", "1", "1"]), None),
    ("no-kernargs", _drop("kernargs"), "is not a valid manifest: field 'kernargs' is missing"),
    ("no-tensors", _drop("tensors"), "is not a valid manifest: field 'tensors' is missing"),
    ("no-grid", _drop("grid"), "is not a valid manifest: field 'grid' is missing"),
    ("no-symbol", _drop("symbol"), "is not a valid manifest: field 'symbol' is missing"),
    ("no-workgroup_size", _drop("workgroup_size"), "is not a valid manifest: field 'workgroup_size' is missing"),
    ("kernarg_size-8", _set(kernarg_size=8), "is not a valid manifest: field 'kernargs[1].offset' must be an integer "
                                             "in 0..4 (within kernarg_size 8)"),
    ("offsets-shifted", _shift_offsets, "is not a valid manifest: field 'kernargs["),
    ("workgroup-doubled", _double_workgroup, "workgroup size: manifest ["),
    ("kernel-name", _set(kernel="gemm"), "says kernel 'gemm', index.json 'fmha_fwd'"),
    ("constexprs", lambda m: m["constexprs"].update(HDIM=128), "says constexprs HDIM = 128, index.json HDIM = 64"),
]


@pytest.mark.parametrize("label, edit, old_message", PACKAGE_CASES, ids=[c[0] for c in PACKAGE_CASES])
def test_tampered_package_manifest_is_refused(package, offline, tmp_path, label, edit, old_message):
    bad = _tampered(package, tmp_path / "bad", edit)
    with pytest.raises(PackageError, match=re.escape("does not match the package (its sha256 differs from index.json's "
                                                     "manifest_sha256)")) as err:
        _run_fwd(bad)
    assert str(bad) in str(err.value) and "rebuild the package" in str(err.value)
    # A package written before index.json recorded manifest digests: the manifest is still validated.
    if old_message is None:
        return
    old = _tampered(package, tmp_path / "old", edit, digests=False)
    with pytest.raises(PackageError, match=re.escape(old_message)):
        _run_fwd(old)


@pytest.mark.emulator
def test_package_without_manifest_digests_still_loads(package, offline, tmp_path):
    _run_fwd(_tampered(package, tmp_path / "old", lambda m: None, digests=False))


def test_package_index_digest_must_be_a_string(package, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(package, bad)
    index = json.loads((bad / "index.json").read_text())
    next(iter(index["kernels"].values()))["manifest_sha256"] = 5
    (bad / "index.json").write_text(json.dumps(index))
    with pytest.raises(PackageError, match="has a manifest_sha256 that is not a string"):
        Package(bad)
