"""Loading a user's own compiled kernels: `tiledsl.load_kernel` on the output of `tiledsl compile`.

`tiledsl compile k.tile --arch gfx942 -o out/` writes `out/<kernel>.<arch>.hsaco` with its
manifest `out/<kernel>.<arch>.json`; `load_kernel("out/", name="k", arch="gfx942")` reads the
pair back, checks that the manifest describes that code object, and returns a kernel that
`tiledsl.launcher.launch(kernel, *args, device=...)` runs. No compiler is needed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tiledsl.errors import TileError

_SUFFIXES = (".hsaco", ".json", ".s")
_REQUIRED = ("kernel", "arch", "symbol", "kernargs", "kernarg_size", "tensors", "scalars", "grid", "workgroup_size")


def load_kernel(path: str | os.PathLike[str], name: str | None = None, arch: str | None = None) -> Any:
    """The kernel at `path`: a `.hsaco` (or its `.json`/`.s` sibling) written by `tiledsl compile`,
    or the output directory, where `name` and `arch` pick one when it holds several. Returns a
    CompiledKernel (`.name`, `.arch`, `.hsaco`, `.manifest`). Every problem is a ValueError
    naming the path and what was expected."""
    from tiledsl.backends.rocm.arch import ARCH_NAMES

    if arch is not None and arch not in ARCH_NAMES:
        raise ValueError(f"arch: expected one of {', '.join(ARCH_NAMES)}, got {arch!r}")
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
    from tiledsl.manifest import check_manifest

    manifest_path = hsaco_path.with_suffix(".json")
    try:
        hsaco = hsaco_path.read_bytes()
        text = manifest_path.read_text()
    except OSError as exc:
        raise ValueError(f"path: cannot read {exc.filename}: {exc.strerror}") from None
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"path: {manifest_path} is not valid JSON ({exc})") from None
    missing = [k for k in _REQUIRED if not isinstance(manifest, dict) or k not in manifest]
    if missing:
        raise ValueError(f"path: {manifest_path} is not a tiledsl manifest (no {', '.join(missing)})")
    try:
        check_manifest(manifest, hsaco)
    except TileError as exc:
        raise ValueError(f"path: {hsaco_path}: {exc}") from None
    for what, want, got in (("name", name, manifest["kernel"]), ("arch", arch, manifest["arch"])):
        if want is not None and want != got:
            raise ValueError(f"{what}: expected {want!r}, but {hsaco_path} holds {got!r}")
    return CompiledKernel(manifest["kernel"], manifest["arch"], hsaco, _asm(hsaco_path), manifest, from_cache=True)


def _asm(hsaco_path: Path) -> str:
    try:
        return hsaco_path.with_suffix(".s").read_text()
    except OSError:
        return ""
