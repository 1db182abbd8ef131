"""Emulator speed: wave-instructions per second per arch on the GEMM and softmax examples.

Each example is compiled by our pipeline (f16), run once through the launcher to warm up, then
timed (best of 5 launches); the emulator counts the wave-instructions it executed. One core, one process.
Target: >= 200,000 wave-instructions/s.
Usage: python benchmarks/emulator_speed.py [arch ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.launcher import launch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
REPEATS = 5
sys.path.insert(0, str(EXAMPLES))
from cases import CASES  # noqa: E402


def measure(name: str, arch: str) -> tuple[int, float]:
    path = EXAMPLES / f"{name}.tile"
    kernel = compile_source(path.read_text(), str(path), arch, {"DT": "f16"})
    dev = EmulatorDevice(arch)
    args, kwargs, _ = CASES[name]("f16", np.random.default_rng(0))
    launch(kernel, *args, device=dev, **kwargs)  # warm-up: decoding and handler binding
    best = float("inf")
    for _ in range(REPEATS):  # best of several: a single ~50 ms launch is at the mercy of the machine
        t0 = time.perf_counter()
        launch(kernel, *args, device=dev, **kwargs)
        best = min(best, dev.last_stats["seconds"] or time.perf_counter() - t0)
    return dev.last_stats["wave_instructions"], best


def main() -> None:
    archs = sys.argv[1:] or list(ARCH_NAMES)
    print(f"{'kernel':8} {'arch':8} {'wave':>4} {'wave-instructions':>18} {'seconds':>8} {'wave-instr/s':>13}")
    for name in sorted(CASES):
        for a in archs:
            n, dt = measure(name, a)
            print(f"{name:8} {a:8} {get_arch(a).wave_size:>4} {n:>18,} {dt:>8.3f} {n / dt:>13,.0f}")


if __name__ == "__main__":
    main()
