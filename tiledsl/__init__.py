"""tiledsl: a tile language and ahead-of-time compiler for attention kernels on AMD GPUs.

Kept import-light on purpose: the cache-hit path imports this package and must not pull in the
MLIR bindings or llvmlite. `load_kernel`, `load_package` and `unload_packages` are imported on
first use.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["load_kernel", "load_package", "unload_packages"]


def __getattr__(name: str) -> Any:
    if name == "load_kernel":
        from tiledsl.load import load_kernel

        return load_kernel
    if name in ("load_package", "unload_packages"):
        from tiledsl import library

        return getattr(library, name)
    raise AttributeError(f"module 'tiledsl' has no attribute {name!r}")
