"""Search FMHA forward tile configs: compile candidates under every feature mix, print a table.

For each arch and padded head dim, every candidate (BLOCK_M, BLOCK_N, WAVES, STAGES, occupancy,
reuse; with --mask-rows, query rows past the end masked instead of clamped; with --schedule, LLVM's
scheduler; with --interleave, LLVM's LDS/matrix interleaving; with --lazy, the lazy softmax
rescale; with --lane-exchange, gfx11's P tile by register exchanges) is compiled for the
feature mixes of the tests (tests/_fmha_util.py: masks, group mode, LSE, sink, soft-cap, padded
head dims) that its table row serves, plus the plain contiguous benchmark variant, and is
reported with its worst spills and its instructions per MFMA/WMMA. A row of fmha_configs should
be the candidate with no VGPR spills in any mix, SGPR spills only outside every loop (a count
marked L has a spill move inside one), and the fewest instructions per matrix instruction.
With --model, also the modeled TFLOP/s of the f16 forward at the benchmarks' model shape (the
emulator's timing model): the figure to choose rows by, among the candidates without spills.
Usage: python benchmarks/fmha_tune.py [--arch A ...] [--hdim 64 128] [--masked] [--mask-rows]
       [--schedule STRATEGY] [--interleave] [--lazy] [--lane-exchange] [--model]
       [--jobs N]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from fmha_fwd import compile_contiguous

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.driver import CompiledKernel
from tiledsl.errors import TileError
from tiledsl.isa_stats import isa_stats
from tiledsl.kernels.fmha_configs import FmhaConfig, fmha_defines
from tiledsl.options import SCHEDULES
from tiledsl.reference import fmha_mask_params

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _fmha_util import compiled, variant, variant_dim_units  # noqa: E402  (the tests' feature mixes)

# CDNA candidates with occupancy 2 (the last field: registers capped at 256, two waves per SIMD) and
# without (0: LLVM's choice).
CDNA = [FmhaConfig(128, 128, 4, 2), FmhaConfig(128, 64, 4, 2), FmhaConfig(128, 64, 4, 1), FmhaConfig(64, 32, 4, 2),
        FmhaConfig(128, 128, 4, 2, 2), FmhaConfig(128, 64, 4, 2, 2), FmhaConfig(128, 64, 4, 1, 2),
        FmhaConfig(128, 32, 4, 2, 2), FmhaConfig(256, 64, 8, 2, 2), FmhaConfig(256, 128, 8, 2, 2)]
# The two-stage ones again with `reuse` (the next K/V tiles in the current ones' registers).
CDNA += [replace(c, reuse=True) for c in CDNA if c.stages == 2]
RDNA = [FmhaConfig(64, 64, 4, 2), FmhaConfig(64, 64, 4, 1), FmhaConfig(64, 32, 4, 1), FmhaConfig(128, 128, 8, 1),
        FmhaConfig(128, 64, 8, 1), FmhaConfig(128, 32, 8, 1), FmhaConfig(64, 128, 4, 1), FmhaConfig(64, 64, 8, 2),
        FmhaConfig(64, 64, 8, 1), FmhaConfig(64, 32, 8, 1), FmhaConfig(128, 32, 4, 2), FmhaConfig(64, 32, 4, 2)]
# Two stages with reuse pay on RDNA since barriers stopped waiting for global loads (session 33).
RDNA += [replace(c, reuse=True) for c in RDNA if c.stages == 2]


OPTIONAL_FLAGS = ("REUSE", "MASK_ROWS", "MASK_KEYS", "LAZY")  # FmhaConfig.defines() sets these only when true


def spills(k: CompiledKernel) -> tuple[int, int]:
    return k.manifest["vgpr_spill_count"], k.manifest["sgpr_spill_count"]


def evaluate(arch: str, hdim: int, masked: bool, cfg: FmhaConfig, model: bool = False) -> str:
    head = (f"{arch:8} d{hdim:<4}{'causal' if masked else 'full':7}{cfg.block_m:>5}{cfg.block_n:>5}{cfg.waves:>4}"
            f"{cfg.occupancy:>4}{'y' if cfg.reuse else '-':>4}{'y' if cfg.mask_rows else '-':>4}")
    try:
        return head + measure(arch, hdim, masked, cfg) + (f"{modeled(arch, hdim, masked, cfg):>10.1f}" if model else "")
    except TileError as e:  # e.g. a tile that needs more registers than the arch has
        return head + f"  refused: {str(e).splitlines()[0]}"


def modeled(arch: str, hdim: int, masked: bool, cfg: FmhaConfig) -> float:
    """Modeled TFLOP/s of the f16 forward with tile `cfg` at the benchmarks' model shape (peer_rows.
    MODEL_*; the emulator's timing model, docs/profile.md). The candidate goes in through the
    config tables of this worker process: that is what `fmha_fwd` reads."""
    from peer_rows import MODEL_B, MODEL_H, MODEL_S

    from tiledsl.fmha_splitkv import build_attention_plan
    from tiledsl.kernels import fmha_configs
    from tiledsl.profile import run_profile

    table = fmha_configs.MASKED if masked else fmha_configs.CONFIGS
    fmha_configs.MASKED.setdefault(arch, {})
    table[arch][hdim] = cfg
    if not masked:
        fmha_configs.MASKED[arch].pop(hdim, None)  # the unmasked row serves the masks too when no masked row exists
    build_attention_plan.cache_clear()  # plans are cached per shape: this worker may have built one already
    r = run_profile("fmha_fwd", get_arch(arch), batch=MODEL_B, hq=MODEL_H, hk=MODEL_H, sq=MODEL_S, sk=MODEL_S,
                    hdim=hdim, causal=masked, sample_cus=2)
    return r["tflops"]


def measure(arch: str, hdim: int, masked: bool, cfg: FmhaConfig) -> str:
    # The feature mixes this table row serves: masked rows (causal, window) or unmasked ones.
    # The mix's defines come from the shipped row (or the last candidate modeled() put in the
    # table): drop its optional flags, which the candidate's defines() name only when set.
    mixes = [({k: v for k, v in d.items() if k not in OPTIONAL_FLAGS} | cfg.defines(), variant_dim_units(dt, hdim, c))
             for dt in ("f16", "bf16") for c in (False, True)
             if ((d := variant(arch, dt, hdim, c))["MASK"] != "none") == masked]
    plain = compile_contiguous(arch, fmha_defines(arch, hdim_q=hdim, mask=fmha_mask_params(masked), config=cfg),
                               allow_spills=True, scheduling=cfg.scheduling())
    kernels = [compiled(arch, d, u, tuple(cfg.scheduling().items())) for d, u in mixes] + [plain]
    found = [spills(k) for k in kernels]
    worst_v, worst_s = max(v for v, _ in found), max(s for _, s in found)
    # SGPR spills are marked "L" where a spill move lies in a loop (the row is refused), else they
    # cost a few moves per workgroup and the row may be chosen.
    in_loop = any(isa_stats(k.asm, k.manifest).sgpr_spill_moves_in_loops for k in kernels)
    st = isa_stats(plain.asm, plain.manifest)
    per = st.instructions / max(1, st.mfma + st.wmma)
    return f"{cfg.stages:>4}{worst_v:>8}{str(worst_s) + ('L' if in_loop else ''):>8}{per:>10.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", default=list(ARCH_NAMES))
    ap.add_argument("--hdim", nargs="+", type=int, default=[64, 128])
    ap.add_argument("--masked", action="store_true", help="tune the masked (causal/window) rows")
    ap.add_argument("--mask-rows", action="store_true",
                    help="the candidates with masked query rows (FmhaConfig.mask_rows)")
    ap.add_argument("--schedule", choices=SCHEDULES, default="", metavar="STRATEGY",
                    help="the candidates with this LLVM scheduler (FmhaConfig.schedule): "
                         + ", ".join(s for s in SCHEDULES if s))
    ap.add_argument("--interleave", action="store_true",
                    help="the candidates with LDS/matrix interleaving (FmhaConfig.interleave)")
    ap.add_argument("--lazy", action="store_true",
                    help="the candidates with the lazy softmax rescale (FmhaConfig.lazy_rescale)")
    ap.add_argument("--lane-exchange", action="store_true",
                    help="the candidates with register exchanges for gfx11's P tile (FmhaConfig.lane_exchange)")
    ap.add_argument("--overlap", action="store_true",
                    help="the candidates with the next key block's scores computed ahead (FmhaConfig.overlap)")
    ap.add_argument("--model", action="store_true", help="add modeled TFLOP/s (emulator timing model)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    jobs = [(a, h, args.masked,
             replace(c, mask_rows=args.mask_rows, schedule=args.schedule, interleave=args.interleave,
                     lazy_rescale=args.lazy, lane_exchange=args.lane_exchange, overlap=args.overlap), args.model)
            for a in args.arch
            for h in args.hdim for c in (CDNA if get_arch(a).is_cdna else RDNA)]
    print(f"{'arch':8} {'hdim':5}{'mask':7}{'BM':>5}{'BN':>5}{'W':>4}{'OCC':>4}{'RU':>4}{'MR':>4}{'S':>4}"
          f"{'VGPRsp':>8}{'SGPRsp':>8}{'instr/MMA':>10}" + (f"{'TFLOP/s':>10}" if args.model else ""))
    with ProcessPoolExecutor(args.jobs) as pool:
        for line in pool.map(evaluate, *zip(*jobs, strict=True)):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
