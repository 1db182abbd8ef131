"""tiledsl: a tile language and ahead-of-time compiler for attention kernels on AMD GPUs.

Kept import-light on purpose: the cache-hit path imports this package and must not pull in the
MLIR bindings or llvmlite.
"""

__version__ = "0.1.0"
