"""Emulator speed: wave-instructions per second per arch, the ordinary path (one wave at a time)
beside lockstep (the waves of many workgroups at once, backends/rocm/emulator/lockstep.py).

Cases: the GEMM and softmax examples (f16, compiled by our pipeline, best of 3 launches), the
attention forward (1 x 512 x 8 x 128, causal, through tiledsl.ops.fmha_fwd) and the backward plan
(same shape, its three stages summed) deterministic ("bwd 512") and in its default mode, dQ added
with float atomics ("bwd 512 at"), and with --long the forward at seqlen 4096 (lockstep only: the
ordinary path takes minutes per arch), also with worker processes (EmulatorDevice(workers=None):
every core). Each case runs once to warm up (compile, decode, bind) and is then timed; the
emulator counts the wave-instructions it executed. Figures depend on the machine's load: compare
columns of one run.
Usage: python benchmarks/emulator_speed.py [--long] [--only CASE] [arch ...]  (CASE: a label without
spaces, e.g. fwd4096)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tiledsl import ops
from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.launcher import launch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
REPEATS = 3
sys.path.insert(0, str(EXAMPLES))
from cases import CASES  # noqa: E402

Case = Callable[[EmulatorDevice], None]


def example(name: str, arch: str) -> tuple[Case, int]:
    path = EXAMPLES / f"{name}.tile"
    kernel = compile_source(path.read_text(), str(path), arch, {"DT": "f16"})
    args, kwargs, _ = CASES[name]("f16", np.random.default_rng(0))
    return (lambda dev: launch(kernel, *args, device=dev, **kwargs)), REPEATS


def attention(seqlen: int, backward: bool = False, deterministic: bool = True) -> Callable[[str], tuple[Case, int]]:
    def make(arch: str) -> tuple[Case, int]:
        rng = np.random.default_rng(0)
        q, k, v, do = (rng.standard_normal((1, seqlen, 8, 128)).astype(np.float16) for _ in range(4))
        if not backward:
            return (lambda dev: ops.fmha_fwd(q, k, v, causal=True, device=dev)), 1
        out, lse = ops.fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice(arch))
        return (lambda dev: ops.fmha_bwd(do, q, k, v, out, lse, causal=True, deterministic=deterministic,
                                         device=dev)), 1
    return make


def measure(case: Case, repeats: int, dev: EmulatorDevice) -> tuple[int, float, str]:
    """(wave-instructions, seconds, paths) of the case's launches, best of `repeats` after a warm-up
    (a path "lockstep/2" ran in 2 processes)."""
    case(dev)
    best, count, paths = float("inf"), 0, ""
    for _ in range(repeats):
        dev.launches.clear()
        t0 = time.perf_counter()
        case(dev)
        wall = time.perf_counter() - t0
        secs = sum(ln["seconds"] for ln in dev.launches) or wall
        if secs < best:
            best, count = secs, sum(ln["wave_instructions"] for ln in dev.launches)
            paths = ",".join(sorted({ln["path"].split(":")[0] + (f"/{ln['processes']}" if ln.get("processes", 1) > 1
                                                                 else "") for ln in dev.launches}))
    return count, best, paths


def main() -> None:
    argv = sys.argv[1:]
    long = "--long" in argv
    only = argv[argv.index("--only") + 1] if "--only" in argv else None
    archs = [a for a in argv if a in ARCH_NAMES] or list(ARCH_NAMES)
    # (label, case, with the ordinary path, with worker processes)
    cases: list[tuple[str, Callable[[str], tuple[Case, int]], bool, bool]] = [
        (name, (lambda a, n=name: example(n, a)), True, False) for name in sorted(CASES)]
    cases += [("fwd 512", attention(512), True, False), ("bwd 512", attention(512, backward=True), True, False),
              ("bwd 512 at", attention(512, backward=True, deterministic=False), True, False)]
    if long:
        cases.append(("fwd 4096", attention(4096), False, True))
    procs = EmulatorDevice(ARCH_NAMES[0], workers=None).workers
    print(f"{'case':10} {'arch':8} {'wave':>4} {'wave-instr':>11} {'ordinary s':>10} {'wave-instr/s':>12} "
          f"{'lockstep s':>10} {'wave-instr/s':>12} {'speedup':>7} {f'{procs} procs s':>10} {'wave-instr/s':>12} "
          f"{'gain':>5}  lockstep path")
    for label, make, with_ordinary, with_workers in cases:
        if only is not None and label.replace(" ", "") != only:
            continue
        for a in archs:
            case, repeats = make(a)
            n, new, paths = measure(case, repeats, EmulatorDevice(a))
            old_s = old_rate = speed = mp_s = mp_rate = gain = "-"
            if with_ordinary:
                _, old, _ = measure(case, repeats, EmulatorDevice(a, lockstep=False))
                old_s, old_rate, speed = f"{old:.3f}", f"{n / old:,.0f}", f"{old / new:.1f}x"
            if with_workers:
                _, mp, mp_paths = measure(case, repeats, EmulatorDevice(a, workers=None))
                mp_s, mp_rate, gain, paths = f"{mp:.3f}", f"{n / mp:,.0f}", f"{new / mp:.2f}", f"{paths} {mp_paths}"
            print(f"{label:10} {a:8} {get_arch(a).wave_size:>4} {n:>11,} {old_s:>10} {old_rate:>12} "
                  f"{new:>10.3f} {n / new:>12,.0f} {speed:>7} {mp_s:>10} {mp_rate:>12} {gain:>5}  {paths}", flush=True)


if __name__ == "__main__":
    main()
