"""`make demo`: compile the examples for all five archs, run them on the default device and
compare with numpy. Prints one table row per kernel, arch and dtype."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from tiledsl.backends.rocm.arch import ARCH_NAMES

from tiledsl.driver import compile_source
from tiledsl.isa_stats import isa_stats
from tiledsl.launcher import launch, numpy_dtype

HERE = Path(__file__).resolve().parent


def gemm_case(dtype: str, rng: np.random.Generator) -> tuple[tuple, dict, callable]:
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


def softmax_case(dtype: str, rng: np.random.Generator) -> tuple[tuple, dict, callable]:
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


def main() -> int:
    rng = np.random.default_rng(0)
    header = f"{'kernel':8} {'arch':8} {'dtype':5} {'compile':>8} {'MFMA/WMMA':>9} {'VGPR':>5} {'LDS':>6} " \
             f"{'spills':>6} {'device':>10} {'run':>7} {'max rel err':>11}  result"
    print(header)
    print("-" * len(header))
    failures = 0
    for name, make_case in CASES.items():
        source = (HERE / f"{name}.tile").read_text()
        for arch in ARCH_NAMES:
            for dtype in ("f16", "bf16"):
                t0 = time.perf_counter()
                kernel = compile_source(source, str(HERE / f"{name}.tile"), arch, {"DT": dtype})
                t_compile = time.perf_counter() - t0
                st = isa_stats(kernel.asm, kernel.manifest)
                args, kwargs, check = make_case(dtype, rng)
                from tiledsl.backends.rocm.runtime import default_device

                device = default_device(arch)
                t1 = time.perf_counter()
                launch(kernel, *args, device=device, **kwargs)
                t_run = time.perf_counter() - t1
                err = check()
                ok = err <= TOLERANCE[dtype]
                failures += not ok
                kind = type(device).__name__.removesuffix("Device").lower()
                print(f"{name:8} {arch:8} {dtype:5} {t_compile:7.2f}s {st.mfma + st.wmma:9d} {st.vgprs:5d} "
                      f"{st.lds_bytes:6d} {st.vgpr_spills:6d} {kind:>10} {t_run:6.2f}s "
                      f"{err:11.2e}  {'ok' if ok else 'MISMATCH'}")
    print("\nall results match the reference" if not failures else f"\n{failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
