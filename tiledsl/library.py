"""Where the library's kernels come from: kernel packages first, then the compiler.

Every op (`fmha_fwd`, `fmha_bwd`, `fmha_fwd_kvcache`) gets its kernels through `library_kernel`,
which looks the kernel's key (`tiledsl.package.kernel_key`) up in the loaded kernel packages and
only then compiles it through the compile cache. Offline (strict) mode turns a kernel missing
from every package into a `KernelNotPrebuilt` error that names the variant and the prebuild
command that would build it, instead of compiling.

Settings are read at the edge, once per op call (`settings()`): `$TILEDSL_KERNELS` (package
directories, separated by ':'), `$TILEDSL_OFFLINE` (1/0) and `$TILEDSL_CACHE_DIR`, combined with
what the program asked for through `load_package(path, strict=...)`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiledsl.errors import TileError
from tiledsl.options import define_text
from tiledsl.package import Package, kernel_key

# The compiler's import names (a runtime-only install has none of them).
COMPILER_MODULES = ("mlir", "llvmlite", "lark", "ziglang")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


class KernelNotPrebuilt(TileError):
    """Offline mode, and the kernel a call needs is in no loaded package."""


@dataclass(frozen=True)
class LibrarySettings:
    packages: tuple[Package, ...]
    strict: bool  # never compile: a kernel missing from the packages is an error
    cache_dir: Path | None  # the compile cache (None: compile without one)


_loaded: list[Package] = []  # load_package(), in load order
_strict_override: bool | None = None
_env_packages: dict[tuple[str, float], Package] = {}  # (path, index mtime) -> Package
_variant: contextvars.ContextVar[str | None] = contextvars.ContextVar("tiledsl_variant", default=None)


def load_package(path: str | os.PathLike[str], *, strict: bool | None = None) -> Package:
    """Use the kernel package at `path` (written by `tiledsl prebuild ... -o DIR`) for every op
    call from now on, before the compiler. strict=True: never compile (offline mode); a kernel
    the packages lack is a `KernelNotPrebuilt` error. Returns the Package (its `variants` and
    `kernels` say what it holds). Loading a directory again re-reads its index."""
    global _strict_override
    if strict is not None and not isinstance(strict, bool):  # before anything is loaded
        raise ValueError(f"strict: expected a bool, got {strict!r}")
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise ValueError(f"path: expected the directory of a kernel package, got {path!r}")
    pkg = Package(path)
    _loaded[:] = [p for p in _loaded if p.root.resolve() != pkg.root.resolve()] + [pkg]
    if strict is not None:
        _strict_override = strict
    clear_plan_caches()
    return pkg


def unload_packages() -> None:
    """Forget every package load_package loaded, and its strict setting."""
    global _strict_override
    _loaded.clear()
    _strict_override = None
    clear_plan_caches()


def clear_plan_caches() -> None:
    """Plans hold their kernels: after a change of packages or of strictness, build them anew so
    that every kernel is looked up again under the new settings."""
    import sys

    for module, builder in (("tiledsl.fmha_splitkv", "build_attention_plan"), ("tiledsl.fmha_bwd", "build_plan"),
                            ("tiledsl.fmha_kvcache", "build_kvcache_plan")):
        if module in sys.modules:  # never imported: nothing cached
            getattr(sys.modules[module], builder).cache_clear()


def settings(environ: Mapping[str, str] | None = None) -> LibrarySettings:
    """The settings of one op call: the environment's packages and offline flag, then
    load_package's (which take precedence)."""
    from tiledsl.cache import default_cache_dir

    env = os.environ if environ is None else environ
    offline = env.get("TILEDSL_OFFLINE", "").strip().lower()
    if offline not in _TRUE + _FALSE:
        raise TileError(f"TILEDSL_OFFLINE: expected one of {', '.join(repr(v) for v in _TRUE + _FALSE if v)} (or "
                        f"unset), got {env['TILEDSL_OFFLINE']!r}")
    packages = [_env_package(p) for p in env.get("TILEDSL_KERNELS", "").split(os.pathsep) if p.strip()]
    strict = offline in _TRUE if _strict_override is None else _strict_override
    return LibrarySettings(tuple(reversed(_loaded)) + tuple(packages), strict, default_cache_dir(env))


def _env_package(path: str) -> Package:
    root = Path(path.strip()).expanduser()
    try:
        stamp = (root / "index.json").stat().st_mtime
    except OSError:
        stamp = -1.0
    key = (str(root.resolve()), stamp)
    if key not in _env_packages:
        try:
            _env_packages[key] = Package(root)
        except TileError as exc:
            raise TileError(f"TILEDSL_KERNELS: {exc}") from None
    return _env_packages[key]


@contextlib.contextmanager
def requesting(variant: str) -> Iterator[None]:
    """Name the registry variant (`gfx942/fmha_fwd-f16-batch-d128-causal`) an op is loading
    kernels for, so a missing kernel's error can say how to prebuild it. The outermost request
    wins: a KV-cache plan's attention stage belongs to the KV-cache variant."""
    token = _variant.set(variant) if _variant.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _variant.reset(token)


def plan_builder(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Decorate a plan builder `build(shape)`: plans are cached by shape and by the settings they
    were built under (read on every call: a changed $TILEDSL_KERNELS or $TILEDSL_OFFLINE builds
    anew, and a bad value is an error at once), and the kernels a build loads belong to the
    registry variant of `shape` (`tiledsl.registry.variant_of`). `.cache_clear()` empties it."""

    @functools.lru_cache(maxsize=64)
    def cached(shape: Any, _settings: tuple[Any, ...]) -> Any:
        from tiledsl.registry import variant_of

        with requesting(variant_of(shape).key()):
            return build(shape)

    @functools.wraps(build)
    def wrapper(shape: Any) -> Any:
        s = settings()  # packages are kept alive by _loaded/_env_packages, so their ids are stable
        return cached(shape, (tuple(id(p) for p in s.packages), s.strict, s.cache_dir))

    wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return wrapper


def missing_compiler_modules() -> list[str]:
    return [m for m in COMPILER_MODULES if importlib.util.find_spec(m) is None]


def library_kernel(source_path: Path, arch: str, defines: Mapping[str, Any], options: Any) -> Any:
    """The library kernel `source_path` compiled for `arch` with these defines and
    CompileOptions: from a loaded package, else compiled through the compile cache (unless
    offline). Returns a CompiledKernel whose `key` is its package key."""
    from tiledsl.driver import CompiledKernel

    source = source_path.read_text()
    clean = {str(k): define_text(v) for k, v in defines.items()}
    key = kernel_key(arch=arch, source=source, defines=clean, options_key=options.cache_key())
    s = settings()
    for pkg in s.packages:
        found = pkg.get(key)
        if found is not None:
            hsaco, manifest = found
            if manifest.get("kernel") != source_path.stem or manifest.get("defines") != clean:
                # The key is a digest of what was asked; an entry filed under another's key (an
                # edited index.json) would run another variant's code.
                from tiledsl.package import PackageError

                raise PackageError(f"kernel package {pkg.root}: the entry under key {key[:16]}... holds "
                                   f"{manifest.get('kernel')} with other defines than the {source_path.stem} "
                                   f"variant asked for (index.json was edited?); rebuild the package")
            return CompiledKernel(manifest["kernel"], arch, hsaco, "", manifest, from_cache=True, key=key)
    if s.strict:
        raise KernelNotPrebuilt(_not_prebuilt(source_path.stem, arch, clean, key, s))
    missing = missing_compiler_modules()
    if missing:
        raise TileError(f"{source_path.stem} for {arch} is in no kernel package, and this tiledsl cannot compile "
                        f"it: the compiler is not installed ({', '.join(missing)} missing: a runtime-only "
                        f"install). {_how_to_build(arch, key)}")
    from tiledsl.cache import Cache
    from tiledsl.driver import compile_source

    kernel = compile_source(source, str(source_path), arch, clean, options,
                            cache=Cache(s.cache_dir) if s.cache_dir else None)
    kernel.key = key
    return kernel


def _how_to_build(arch: str, key: str) -> str:
    variant = _variant.get()
    if variant is None:
        return f"Build it into a package with `tiledsl prebuild --receipt all --arch {arch} -o DIR` (key {key})."
    return f"Build it into a package with `tiledsl prebuild --variant {variant} -o DIR` and load that."


def _not_prebuilt(kernel: str, arch: str, defines: Mapping[str, str], key: str, s: LibrarySettings) -> str:
    where = ", ".join(str(p.root) for p in s.packages) or "none loaded"
    variant = _variant.get()
    what = f"variant {variant}" if variant else f"kernel {kernel} for {arch}"
    switches = " ".join(f"{k}={v}" for k, v in sorted(defines.items()))
    return (f"{what} is not prebuilt, and offline mode (TILEDSL_OFFLINE=1 or load_package(..., strict=True)) "
            f"forbids compiling it.\n  kernel: {kernel} [{switches}] (key {key})\n  packages: {where}\n  "
            f"{_how_to_build(arch, key)} Packages hold the variants for contiguous head dims and 16-byte "
            "aligned strides; other strides need their own compile.")
