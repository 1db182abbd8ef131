"""Kernel packages: how long a receipt takes to prebuild, and how fast a runtime-only install
loads the package and makes its first call.

    python benchmarks/package_time.py [--receipt flash] [--arch all] [-j 2] [--keep DIR]

1. `tiledsl prebuild --receipt R --arch A -j N -o DIR` with a cold compile cache (the progress
   bar shows on stderr), timed.
2. A fresh virtual environment with the runtime-only install (README: tiledsl --no-deps, numpy,
   ml_dtypes, msgpack; no compiler), then in a new process: `import tiledsl.ops`, `load_package`,
   the first fmha_fwd call (kernel lookup + load + emulated run) and a second one, each timed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import time
t0 = time.perf_counter()
import numpy as np
import tiledsl
from tiledsl.ops import fmha_fwd
t1 = time.perf_counter()
pkg = tiledsl.load_package({package!r}, strict=True)
t2 = time.perf_counter()
q = np.random.default_rng(0).standard_normal((1, 128, 4, 128)).astype(np.float16)
out = fmha_fwd(q, q, q, device="emulator:{arch}")
t3 = time.perf_counter()
out = fmha_fwd(q, q, q, device="emulator:{arch}")
t4 = time.perf_counter()
print({{"import": t1 - t0, "load_package": t2 - t1, "first call": t3 - t2, "second call": t4 - t3,
       "variants": len(pkg.variants), "kernels": len(pkg.kernels)}})
"""


def prebuild(receipt: str, arch: str, jobs: int, out: Path, cache: Path) -> float:
    env = dict(os.environ, TILEDSL_CACHE_DIR=str(cache))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tiledsl", "prebuild", "--receipt", receipt, "--arch", arch, "-j", str(jobs),
                    "-o", str(out)], check=True, env=env)
    return time.perf_counter() - t0


def runtime_only(tmp: Path, package: Path, arch: str) -> dict:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", str(ROOT), "numpy", "ml_dtypes",
                    "msgpack"], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEDSL_")}
    out = subprocess.run([python, "-c", PROBE.format(package=str(package), arch=arch)], check=True,
                         capture_output=True, text=True, env=env, cwd=tmp).stdout
    return eval(out.strip().splitlines()[-1])  # a dict literal printed by the probe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--receipt", default="flash")
    ap.add_argument("--arch", default="all")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--keep", metavar="DIR", help="write the package there (default: a temporary directory)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tiledsl-pkg-") as tmp_s:
        tmp = Path(tmp_s)
        package = Path(args.keep) if args.keep else tmp / "kernels"
        seconds = prebuild(args.receipt, args.arch, args.jobs, package, tmp / "cache")
        index = json.loads((package / "index.json").read_text())
        size = sum(e["bytes"] for e in index["kernels"].values())
        print(f"\nprebuild --receipt {args.receipt} --arch {args.arch} -j {args.jobs} (cold cache, {os.cpu_count()} "
              f"cores): {len(index['variants'])} variants, {len(index['kernels'])} kernels, {size / 2**20:.1f} MiB "
              f"of code objects in {seconds:.0f} s")
        arch = index["archs"][0] if "gfx942" not in index["archs"] else "gfx942"
        times = runtime_only(tmp, package, arch)
        print(f"runtime-only install (no compiler), package of {times['variants']} variants, fmha_fwd on the "
              f"{arch} emulator, B1 S128 H4 D128, no mask:")
        for what in ("import", "load_package", "first call", "second call"):
            print(f"  {what:<13} {times[what] * 1000:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
