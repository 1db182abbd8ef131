"""`make demo`: compile the examples and the attention kernel for all five archs, run them on the
default device and compare with numpy. Prints one table row per kernel, arch and dtype."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.driver import compile_source
from tiledsl.isa_stats import isa_stats
from tiledsl.launcher import launch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import CASES, TOLERANCE  # noqa: E402

HERE = Path(__file__).resolve().parent


def attention_rows() -> int:
    """The attention library: fmha_fwd (GQA, causal, LSE) on every arch against the reference."""
    from tiledsl.backends.rocm.runtime import default_device
    from tiledsl.ops import fmha_fwd
    from tiledsl.reference import fmha_fwd_reference

    print(f"\n{'fmha_fwd (q 1x96x4x64, k/v 1x80x2x64, causal bottom-right, LSE), f16':70} {'call':>7} "
          f"{'max abs err':>11}  result")
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 96, 4, 64)).astype(np.float16)
    k = rng.standard_normal((1, 80, 2, 64)).astype(np.float16)
    v = rng.standard_normal((1, 80, 2, 64)).astype(np.float16)
    ref, ref_lse = fmha_fwd_reference(q, k, v, causal=True, return_lse=True)
    failures = 0
    for arch in ARCH_NAMES:
        device = default_device(arch)
        t0 = time.perf_counter()
        out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=device)
        seconds = time.perf_counter() - t0
        finite = np.isfinite(ref_lse)
        err = float(np.abs(out.astype(np.float64) - ref).max())
        ok = err <= 2e-3 and np.allclose(lse[finite], ref_lse[finite], atol=1e-4) and \
            np.array_equal(np.isfinite(lse), finite)
        failures += not ok
        kind = type(device).__name__.removesuffix("Device").lower()
        print(f"{arch:8} {kind:61} {seconds:6.2f}s {err:11.2e}  {'ok' if ok else 'MISMATCH'}")
    return failures + backward_rows(q, k, v)


def backward_rows(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> int:
    """fmha_bwd (the three-stage plan over one workspace, deterministic) against the reference."""
    from tiledsl.backends.rocm.runtime import default_device
    from tiledsl.ops import fmha_bwd, fmha_fwd
    from tiledsl.reference import fmha_bwd_reference

    print(f"\n{'fmha_bwd (same shapes, causal, deterministic: dot_do_o, dq_dk_dv, convert_dq)':70} {'call':>7} "
          f"{'max rel err':>11}  result")
    do = np.random.default_rng(6).standard_normal(q.shape).astype(np.float16)
    refs = fmha_bwd_reference(do, q, k, v, causal=True)
    failures = 0
    for arch in ARCH_NAMES:
        device = default_device(arch)
        out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=device)
        t0 = time.perf_counter()
        grads = fmha_bwd(do, q, k, v, out, lse, causal=True, deterministic=True, device=device)
        seconds = time.perf_counter() - t0
        err = max(float(np.abs(g.astype(np.float64) - r).max() / max(np.abs(r).max(), 1.0))
                  for g, r in zip(grads, refs, strict=True))
        ok = err <= 4e-3
        failures += not ok
        kind = type(device).__name__.removesuffix("Device").lower()
        print(f"{arch:8} {kind:61} {seconds:6.2f}s {err:11.2e}  {'ok' if ok else 'MISMATCH'}")
    return failures


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
    failures += attention_rows()
    print("\nall results match the reference" if not failures else f"\n{failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
