"""Loading a user's own compiled kernels: `tiledsl.load_kernel` on the output of `tiledsl compile`.

`tiledsl compile k.tile --arch gfx942 -o out/` writes `out/<kernel>.<arch>.hsaco` with its
manifest `out/<kernel>.<arch>.json`; `load_kernel("out/", name="k", arch="gfx942")` reads the
pair back, checks that the manifest is as written and describes that code object, and returns a kernel that
`tiledsl.launcher.launch(kernel, *args, device=...)` runs. No compiler is needed.

Both files come from a user's disk, so each is checked before use: the manifest has every field a
launch reads (`tiledsl.manifest.validate_manifest`), the code object parses, its sha256 is the one
the manifest recorded, the manifest's own sha256 is the one it records (so a hand edit that still
reads as a valid manifest is refused too; manifests written before the digests existed have none and
skip those checks), and the two agree (`check_manifest`). Every problem is a ValueError naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

_SUFFIXES = (".hsaco", ".json", ".s")


def load_kernel(path: str | os.PathLike[str], name: str | None = None, arch: str | None = None) -> Any:
    """The kernel at `path`: a `.hsaco` (or its `.json`/`.s` sibling) written by `tiledsl compile`,
    or the output directory, where `name` and `arch` pick one when it holds several. Returns a
    CompiledKernel (`.name`, `.arch`, `.hsaco`, `.manifest`). Every problem is a ValueError
    naming the path and what was expected."""
    from tiledsl.backends.rocm.arch import ARCH_NAMES

    if arch is not None and arch not in ARCH_NAMES:
        raise ValueError(f"arch: expected one of {', '.join(ARCH_NAMES)}, got {arch!r}")
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path: expected a file or directory path, got {type(path).__name__}")
    p = Path(path).expanduser()
    if p.is_dir():
        if (p / "index.json").exists():
            raise ValueError(f"path: {p} is a kernel package (it has index.json); the library's ops load it with "
                             "tiledsl.load_package(path)")
        found = sorted(f for f in p.glob("*.hsaco") if f.with_suffix(".json").exists())
        pairs = [(f, *_name_arch(f)) for f in found]
        chosen = [f for f, n, a in pairs if (name is None or n == name) and (arch is None or a == arch)]
        holds = ", ".join(f"{n} ({a})" for _, n, a in pairs) or "nothing"
        if not chosen:
            want = " ".join(x for x in (f"name={name!r}" if name else "", f"arch={arch!r}" if arch else "") if x)
            raise ValueError(f"path: {p} has no compiled kernel{' with ' + want if want else ''} (it holds {holds}; "
                             "`tiledsl compile FILE --arch ARCH -o DIR` writes them)")
        if len(chosen) > 1:
            raise ValueError(f"path: {p} holds several kernels ({holds}); pass name= and/or arch= to pick one")
        p = chosen[0]
    elif p.suffix in _SUFFIXES:
        p = p.with_suffix(".hsaco")
    else:
        raise ValueError(f"path: expected a directory written by `tiledsl compile -o` or a .hsaco/.json file, "
                         f"got {p}")
    return _read_pair(p, name, arch)


def _name_arch(hsaco: Path) -> tuple[str, str]:
    stem, _, arch = hsaco.stem.rpartition(".")
    return (stem, arch) if stem else (arch, "")


def _read_pair(hsaco_path: Path, name: str | None, arch: str | None) -> Any:
    from tiledsl.driver import CompiledKernel

    manifest_path = hsaco_path.with_suffix(".json")
    hsaco = _read_bytes(hsaco_path)
    manifest = _read_manifest(manifest_path)
    _check_code_object(hsaco_path, hsaco, manifest)
    for what, want, got in (("name", name, manifest["kernel"]), ("arch", arch, manifest["arch"])):
        if want is not None and want != got:
            raise ValueError(f"{what}: expected {want!r}, but {hsaco_path} holds {got!r}")
    return CompiledKernel(manifest["kernel"], manifest["arch"], hsaco, _asm(hsaco_path), manifest, from_cache=True)


def _read_bytes(path: Path) -> bytes:
    from tiledsl.package import regular_file_problem

    try:
        problem = regular_file_problem(path)
        if problem:
            raise ValueError(f"path: cannot read {path}: {problem}")
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"path: cannot read {exc.filename or path}: {exc.strerror or exc}") from None


def _read_manifest(manifest_path: Path) -> dict[str, Any]:
    """The manifest at `manifest_path`, with every field a launch reads checked."""
    from tiledsl.manifest import manifest_digest_problem, validate_manifest
    from tiledsl.package import loads_unique

    raw = _read_bytes(manifest_path)
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"path: {manifest_path} is not a tiledsl manifest: not UTF-8 text (byte "
                         f"0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        manifest = loads_unique(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise ValueError(f"path: {manifest_path} is not valid JSON ({exc})") from None
    try:
        validate_manifest(manifest)
    except ValueError as exc:
        raise ValueError(f"path: {manifest_path}: {exc}") from None
    problem = manifest_digest_problem(manifest)
    if problem:
        raise ValueError(f"path: {manifest_path}: {problem} (`tiledsl compile FILE --arch {manifest['arch']} -o DIR`)")
    return manifest


def _check_code_object(hsaco_path: Path, hsaco: bytes, manifest: dict[str, Any]) -> None:
    """The code object parses, is the one the manifest was written for, and agrees with it."""
    from tiledsl.manifest import code_object_problem

    problem = code_object_problem(manifest, hsaco)
    if problem:
        raise ValueError(f"path: {hsaco_path}: {problem} (`tiledsl compile FILE --arch {manifest['arch']} -o DIR`)")


def _asm(hsaco_path: Path) -> str:
    try:
        return hsaco_path.with_suffix(".s").read_text()
    except OSError:
        return ""
