"""Kernel packages: a directory of prebuilt code objects that runs without the compiler.

`tiledsl prebuild --receipt NAME --arch A -o DIR` writes one; `TILEDSL_KERNELS=DIR` (or
`tiledsl.load_package(DIR)`) makes the library's ops load their kernels from it. Layout:

    DIR/index.json                      what the package holds (below)
    DIR/<arch>/<kernel>-<key12>.hsaco   a code object
    DIR/<arch>/<kernel>-<key12>.json    its manifest (kernarg layout, grid, registers, ...)

index.json:

    {"format": "tiledsl-kernel-package", "version": 1, "tiledsl": "0.1.0",
     "toolchain": {"llvmlite": "0.50.0", ...}, "receipts": ["training"], "archs": ["gfx942"],
     "kernels": {KEY: {"arch", "kernel", "constexprs", "hsaco", "manifest", "sha256", "bytes",
                       "manifest_sha256"}},
     "variants": {"gfx942/fmha_fwd-f16-batch-d128-causal-lse": {"signature": {...},
                                                                "kernels": [KEY, ...]}}}

KEY (`kernel_key`) is a sha256 over what decides a kernel's code and ABI -- the package format
version, the arch, the kernel source's text, the -D defines and the compile options -- and not
over the toolchain or the compiler's own code, so a runtime-only install of the same tiledsl
finds the kernels a full install built. `sha256` is the code object's digest and
`manifest_sha256` the manifest's: a file that does not match is reported as corrupted, never
loaded. Each manifest is also validated and checked against its code object when loaded.

This module is on the runtime-only path: it imports neither the compiler nor MLIR.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiledsl
from tiledsl.errors import TileError

FORMAT = "tiledsl-kernel-package"
VERSION = 1
INDEX = "index.json"
MAX_FILE_BYTES = 1 << 30  # far above any code object, manifest or cache entry: bounds what a bad file makes us read


class PackageError(TileError):
    """A kernel package that cannot be read (missing, corrupted, from another format version)."""


def kernel_key(*, arch: str, source: str, defines: Mapping[str, str], options_key: str) -> str:
    """The toolchain-independent address of one library kernel (see the module docstring)."""
    material = {"format": VERSION, "arch": arch, "source": hashlib.sha256(source.encode()).hexdigest(),
                "defines": sorted(defines.items()), "options": options_key}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class PackagedKernel:
    """One kernel as a package stores it (what a prebuild worker hands back)."""

    key: str
    hsaco: bytes
    manifest: dict[str, Any]  # names the kernel, its arch and its constexpr values

    @staticmethod
    def of(kernel: Any) -> PackagedKernel:
        """A library CompiledKernel (it carries its package key)."""
        if not kernel.key:
            raise ValueError(f"kernel {kernel.name}: not a library kernel (no package key)")
        return PackagedKernel(kernel.key, kernel.hsaco, kernel.manifest)


class Package:
    """A kernel package on disk, read-only. `get(key)` returns (hsaco, manifest) or None."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root).expanduser()
        self.index = read_index(self.root)

    @property
    def kernels(self) -> dict[str, dict[str, Any]]:
        return self.index["kernels"]

    @property
    def variants(self) -> dict[str, dict[str, Any]]:
        return self.index["variants"]

    def __contains__(self, key: str) -> bool:
        return key in self.kernels

    def get(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        entry = self.kernels.get(key)
        if entry is None:
            return None
        hsaco = self._read(entry["hsaco"], "code object")
        if hashlib.sha256(hsaco).hexdigest() != entry["sha256"]:
            raise PackageError(f"kernel package {self.root}: {entry['hsaco']} is corrupted (its sha256 does not "
                               f"match index.json); rebuild the package with `tiledsl prebuild ... -o {self.root}`")
        raw = self._read(entry["manifest"], "manifest")
        # Packages written before index.json recorded manifest digests have none: their manifests
        # are still validated below, only an edit that keeps them valid goes unnoticed.
        want = entry.get("manifest_sha256")
        if want is not None and hashlib.sha256(raw).hexdigest() != want:
            raise self._bad_manifest(entry, "does not match the package (its sha256 differs from index.json's "
                                            "manifest_sha256): it was edited or damaged")
        try:
            manifest = loads_unique(raw)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise self._bad_manifest(entry, f"is not valid JSON ({exc})") from None
        self._check_manifest(entry, manifest, hsaco)
        return hsaco, manifest

    def _check_manifest(self, entry: dict[str, Any], manifest: Any, hsaco: bytes) -> None:
        """The manifest has every field a launch reads, belongs to this entry and describes its
        code object (the same checks as tiledsl.load_kernel)."""
        from tiledsl.manifest import code_object_problem, validate_manifest

        try:
            validate_manifest(manifest)
        except ValueError as exc:
            raise self._bad_manifest(entry, f"is not a valid manifest: {exc}") from None
        for field in ("arch", "kernel", "constexprs"):
            if field in entry and manifest.get(field) != entry[field]:
                raise self._bad_manifest(entry, f"says {field} {_difference(manifest.get(field), entry[field])}")
        problem = code_object_problem(manifest, hsaco)
        if problem:
            raise self._bad_manifest(entry, f"does not describe {entry['hsaco']}: {problem}")

    def _bad_manifest(self, entry: dict[str, Any], problem: str) -> PackageError:
        return PackageError(f"kernel package {self.root}: the manifest {entry['manifest']} {problem}; rebuild the "
                            f"package with `tiledsl prebuild ... -o {self.root}`")

    def _read(self, relative: str, what: str) -> bytes:
        path = self.root / relative
        try:
            problem = regular_file_problem(path)
            if problem:
                raise PackageError(f"kernel package {self.root}: the {what} {relative} is {problem}")
            return path.read_bytes()
        except OSError as exc:
            raise PackageError(f"kernel package {self.root}: cannot read the {what} {relative} "
                               f"({exc.strerror or exc})") from None

    def __repr__(self) -> str:
        return f"Package({str(self.root)!r}: {len(self.kernels)} kernels, {len(self.variants)} variants)"


def _difference(manifest_value: Any, index_value: Any) -> str:
    """How a manifest's field differs from index.json's (for a table, the keys that differ)."""
    if isinstance(manifest_value, dict) and isinstance(index_value, dict):
        keys = sorted(k for k in manifest_value.keys() | index_value.keys()
                      if manifest_value.get(k) != index_value.get(k))
        return ", ".join(f"{k} = {manifest_value.get(k)!r}" for k in keys) + ", index.json " + ", ".join(
            f"{k} = {index_value.get(k)!r}" for k in keys)
    return f"{manifest_value!r}, index.json {index_value!r}"


def read_index(root: Path) -> dict[str, Any]:
    """index.json of `root`, checked: a PackageError saying what is wrong otherwise."""
    path = root / INDEX
    if root.exists() and not root.is_dir():
        raise PackageError(f"kernel package {root}: is a file; a kernel package is a directory (holding {INDEX})")
    if not root.is_dir():
        raise PackageError(f"kernel package {root}: no such directory")
    if path.is_dir():
        raise PackageError(f"kernel package {root}: its {INDEX} is a directory, not the package's index file")
    try:
        data = loads_unique(path.read_text())
    except FileNotFoundError:
        raise PackageError(f"kernel package {root}: no {INDEX} (write one with `tiledsl prebuild --receipt NAME "
                           f"--arch ARCH -o {root}`)") from None
    except OSError as exc:
        raise PackageError(f"kernel package {root}: cannot read {INDEX}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise PackageError(f"kernel package {root}: {INDEX} is not valid JSON ({exc}); rebuild the package") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PackageError(f"kernel package {root}: {INDEX} is not a tiledsl kernel package index")
    if type(data.get("version")) is not int or data.get("version") != VERSION:  # not true, not 1.0
        raise PackageError(f"kernel package {root}: format version {data.get('version')!r}, this tiledsl reads "
                           f"version {VERSION}; rebuild the package with this tiledsl")
    kernels, variants = data.get("kernels"), data.get("variants")
    if not isinstance(kernels, dict) or not isinstance(variants, dict):
        raise PackageError(f"kernel package {root}: {INDEX} lacks its 'kernels' or 'variants' table")
    for field in ("receipts", "archs"):
        if not isinstance(data.get(field, []), list) or not all(isinstance(x, str) for x in data.get(field, [])):
            raise PackageError(f"kernel package {root}: {INDEX} has {field} {str(data[field])[:80]}, expected a list "
                               "of names; rebuild the package")
    needed = ("arch", "kernel", "hsaco", "manifest", "sha256")
    for key, entry in kernels.items():
        if not isinstance(entry, dict) or any(not isinstance(entry.get(f), str) for f in needed):
            raise PackageError(f"kernel package {root}: {INDEX} entry {key[:16]}... lacks one of {', '.join(needed)}")
        for field in ("hsaco", "manifest"):
            if not _inside_package(entry[field]):
                raise PackageError(f"kernel package {root}: {INDEX} entry {key[:16]}... names the {field} file "
                                   f"{entry[field]!r}, which is not a path inside the package; rebuild the package")
        if not isinstance(entry.get("manifest_sha256", ""), str):  # absent in packages written before it
            raise PackageError(f"kernel package {root}: {INDEX} entry {key[:16]}... has a manifest_sha256 that is "
                               "not a string; rebuild the package")
        if "bytes" in entry and (not isinstance(entry["bytes"], int) or isinstance(entry["bytes"], bool)):
            raise PackageError(f"kernel package {root}: {INDEX} entry {key[:16]}... has bytes {entry['bytes']!r}; "
                               "expected an int")
    for name, variant in variants.items():
        if not (isinstance(variant, dict) and isinstance(variant.get("signature"), dict)
                and isinstance(variant["signature"].get("family"), str) and isinstance(variant.get("kernels"), list)):
            raise PackageError(f"kernel package {root}: {INDEX} variant {name!r}: expected an object with a "
                               f"'signature' object naming its family and a 'kernels' list, got "
                               f"{str(variant)[:80]}; rebuild the package")
        missing = [k for k in variant["kernels"] if not isinstance(k, str) or k not in kernels]
        if missing:
            raise PackageError(f"kernel package {root}: {INDEX} variant {name!r} lists kernel "
                               f"{str(missing[0])[:16]}..., which the package does not have; rebuild the package")
    return data


def regular_file_problem(path: Path) -> str | None:
    """Why `path` is not read ("not a regular file", "larger than 1 GiB"), or None: a FIFO would
    block a read and /dev/zero never end it. OSError (a missing file) is the caller's to report."""
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    return "larger than 1 GiB" if st.st_size > MAX_FILE_BYTES else None


def loads_unique(text: str | bytes) -> Any:
    """json.loads, refusing an object that repeats a member name (ValueError): readers disagree on
    which one wins (Python's the last, the C runtime's json.c would take the first)."""
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ValueError(f"the member name {key!r} is repeated in one object")
            out[key] = value
        return out
    return json.loads(text, object_pairs_hook=unique)


def _inside_package(relative: str) -> bool:
    """A relative path with no '..' component: index.json's files stay inside the package."""
    parts = relative.split("/")
    return bool(relative) and not relative.startswith("/") and ".." not in parts and "\\" not in relative


def _empty_index() -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "tiledsl": tiledsl.__version__, "toolchain": {}, "receipts": [],
            "archs": [], "kernels": {}, "variants": {}}


def check_package_dir(root: Path) -> dict[str, Any] | None:
    """A package goes into a new or empty directory, or extends one: never into a directory of
    other files (such as a `tiledsl compile -o` directory, which load_kernel would then refuse).
    Returns the index of the package it extends (None for a new one)."""
    if root.is_dir() and not (root / INDEX).exists() and any(p.name != LOCK for p in root.iterdir()):
        raise PackageError(f"kernel package {root}: the directory holds other files and no {INDEX}; write the "
                           "package to a new or empty directory")
    if not (root / INDEX).exists():
        return None
    index = read_index(root)  # a package to extend: readable, and this tiledsl's
    if index.get("tiledsl") != tiledsl.__version__:
        raise PackageError(f"kernel package {root}: built by tiledsl {index.get('tiledsl')}, this is "
                           f"{tiledsl.__version__}; write the new kernels to a new directory")
    return index


def write_package(root: str | os.PathLike[str], kernels: Iterable[PackagedKernel],
                  variants: Mapping[str, Mapping[str, Any]], *, receipt: str | None = None) -> Path:
    """Add kernels and variants to the package at `root` (created if missing; an existing index is
    extended, so several prebuilds can fill one package). The index is replaced atomically last,
    so a reader never sees an entry whose files are not written yet."""
    root = Path(root).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root):  # two writers finishing together: each extends the index the other wrote
        _write_locked(root, list(kernels), variants, receipt)
    return root


LOCK = ".tiledsl-write.lock"  # held by write_package while it reads, extends and replaces the index


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    with open(root / LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write_locked(root: Path, kernels: list[PackagedKernel], variants: Mapping[str, Mapping[str, Any]],
                  receipt: str | None) -> None:
    from tiledsl.cache import toolchain_versions

    index = check_package_dir(root) or _empty_index()
    for k in kernels:
        arch, name = k.manifest["arch"], k.manifest["kernel"]
        stem = f"{arch}/{name}-{k.key[:12]}"
        manifest = json.dumps(k.manifest, indent=1, sort_keys=True).encode()
        _write_atomic(root / f"{stem}.hsaco", k.hsaco)
        _write_atomic(root / f"{stem}.json", manifest)
        index["kernels"][k.key] = {"arch": arch, "kernel": name, "constexprs": k.manifest.get("constexprs", {}),
                                   "hsaco": f"{stem}.hsaco", "manifest": f"{stem}.json",
                                   "sha256": hashlib.sha256(k.hsaco).hexdigest(), "bytes": len(k.hsaco),
                                   "manifest_sha256": hashlib.sha256(manifest).hexdigest()}
    for name, v in variants.items():
        missing = [key for key in v["kernels"] if key not in index["kernels"]]
        if missing:
            raise PackageError(f"variant {name}: kernel {missing[0][:16]}... was not written to the package")
        index["variants"][name] = dict(v)
    index["archs"] = sorted({e["arch"] for e in index["kernels"].values()})
    if receipt and receipt not in index["receipts"]:
        index["receipts"].append(receipt)
    index["toolchain"] = toolchain_versions()
    index["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _write_atomic(root / INDEX, json.dumps(index, indent=1, sort_keys=True).encode())


def _write_atomic(path: Path, data: bytes) -> None:
    from tiledsl.driver import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)
