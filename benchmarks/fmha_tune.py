"""Search FMHA forward tile configs: compile candidates under every feature mix, print a table.

For each arch and padded head dim, every candidate (BLOCK_M, BLOCK_N, WAVES, STAGES) is compiled
for the four feature mixes the tests use (tests/_fmha_util.py: masks, group mode, LSE, sink,
soft-cap, padded head dims) that the row serves, plus the plain contiguous benchmark variant, and reported with its
worst spills and its instructions per MFMA/WMMA. A row of fmha_configs.CONFIGS should be the
candidate with no spills in any mix and the fewest instructions per matrix instruction.
Usage: python benchmarks/fmha_tune.py [--arch A ...] [--hdim 64 128] [--masked] [--jobs N]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.driver import compile_source
from tiledsl.isa_stats import isa_stats
from tiledsl.kernels.fmha_configs import FmhaConfig
from tiledsl.ops import KERNELS
from tiledsl.options import CompileOptions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

CDNA = [FmhaConfig(128, 128, 4, 2), FmhaConfig(128, 64, 4, 2), FmhaConfig(128, 64, 4, 1), FmhaConfig(128, 32, 4, 2)]
RDNA = [FmhaConfig(64, 64, 4, 2), FmhaConfig(64, 64, 4, 1), FmhaConfig(64, 32, 4, 1), FmhaConfig(128, 64, 8, 1),
        FmhaConfig(128, 32, 8, 1), FmhaConfig(64, 64, 8, 2), FmhaConfig(64, 64, 8, 1), FmhaConfig(64, 32, 8, 1)]


def one(arch: str, defines: dict[str, str], contiguous: bool) -> tuple[int, int, float]:
    """(VGPR spills, SGPR spills, instructions per MFMA/WMMA) of one variant."""
    units = tuple((t, 8) for t in ("k", "o", "q", "v")) if contiguous else ()
    opts = CompileOptions.make(arch, defines, allow_spills=True, stride_units=units)
    src = KERNELS / "fmha_fwd.tile"
    k = compile_source(src.read_text(), str(src), arch, defines, opts, cache=None)
    st = isa_stats(k.asm, k.manifest)
    m = k.manifest
    return m["vgpr_spill_count"], m["sgpr_spill_count"], st.instructions / max(1, st.mfma + st.wmma)


def evaluate(arch: str, hdim: int, masked: bool, cfg: FmhaConfig) -> str:
    from _fmha_util import variant

    from tiledsl.kernels.fmha_configs import fmha_defines
    from tiledsl.reference import fmha_mask_params

    # The feature mixes this table row serves: masked rows (causal, window) or unmasked ones.
    mixes = [d for dt in ("f16", "bf16") for c in (False, True)
             if ((d := variant(arch, dt, hdim, c))["MASK"] != "none") == masked]
    spills, per = [], None
    for d in mixes:
        d.update(cfg.defines())
        spills.append(one(arch, d, False)[:2])
    plain = fmha_defines(arch, hdim_q=hdim, mask=fmha_mask_params(masked), config=cfg)
    vs, ss, per = one(arch, plain, True)
    spills.append((vs, ss))
    worst_v, worst_s = max(s[0] for s in spills), max(s[1] for s in spills)
    return (f"{arch:8} d{hdim:<4}{'causal' if masked else 'full':7}{cfg.block_m:>5}{cfg.block_n:>5}{cfg.waves:>4}"
            f"{cfg.stages:>4}{worst_v:>8}{worst_s:>8}{per:>10.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", default=list(ARCH_NAMES))
    ap.add_argument("--hdim", nargs="+", type=int, default=[64, 128])
    ap.add_argument("--masked", action="store_true", help="tune the masked (causal/window) rows")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    jobs = [(a, h, args.masked, c) for a in args.arch for h in args.hdim
            for c in (CDNA if get_arch(a).is_cdna else RDNA)]
    print(f"{'arch':8} {'hdim':5}{'mask':7}{'BM':>5}{'BN':>5}{'W':>4}{'S':>4}"
          f"{'VGPRsp':>8}{'SGPRsp':>8}{'instr/MMA':>10}")
    with ProcessPoolExecutor(args.jobs) as pool:
        for line in pool.map(evaluate, *zip(*jobs, strict=True)):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
