"""The examples' test cases: inputs on shapes that are not multiples of the tiles, and a numpy
reference check. Shared by `make demo` (examples/demo.py) and the test suite."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tiledsl.launcher import numpy_dtype


def gemm_case(dtype: str, rng: np.random.Generator) -> tuple[tuple, dict, Callable[[], float]]:
    batch, m, n, k = 2, 70, 50, 40  # not multiples of the 64x64x32 tile
    dt = numpy_dtype(dtype)
    a = rng.standard_normal((batch, m, k)).astype(dt)
    b = rng.standard_normal((batch, n, k)).astype(dt)
    c = np.zeros((batch, m, n), dt)
    alpha = 0.5

    def check() -> float:
        ref = alpha * np.einsum("bmk,bnk->bmn", a.astype(np.float64), b.astype(np.float64))
        return float(np.abs(c.astype(np.float64) - ref).max() / (np.abs(ref).max() + 1e-9))

    return (a, b, c, alpha), {}, check


def softmax_case(dtype: str, rng: np.random.Generator) -> tuple[tuple, dict, Callable[[], float]]:
    rows, cols = 10, 300  # several column chunks, a partial last one
    dt = numpy_dtype(dtype)
    x = (rng.standard_normal((rows, cols)) * 3).astype(dt)
    y = np.zeros_like(x)

    def check() -> float:
        xf = x.astype(np.float64)
        ref = np.exp(xf - xf.max(1, keepdims=True))
        ref /= ref.sum(1, keepdims=True)
        return float(np.abs(y.astype(np.float64) - ref).max() / ref.max())

    return (x, y), {}, check


CASES = {"gemm": gemm_case, "softmax": softmax_case}
TOLERANCE = {"f16": 2e-2, "bf16": 6e-2}
