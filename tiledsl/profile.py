"""`tiledsl profile`: a library call's modeled time on an arch, from the emulator's timing model.

Runs `ops.fmha_fwd` or `ops.fmha_bwd` at the given shape on an `EmulatorDevice(arch,
timing=TimingOptions(...))` and prints, per launched kernel, the modeled time, TFLOP/s and share of
the arch's matrix peak, what bounds it, the pipes' use, where the SIMDs' cycles go and the
hottest instructions; `--plot DIR` draws a roofline and one workgroup's timeline (matplotlib, the
`plot` extra). By default only the sampled workgroups run (a full-size launch is modeled in
seconds to a minute; results are not computed); `--execute` runs every workgroup too. The model
ranks kernels and finds bottlenecks; it does not predict a GPU's clocks (docs/profile.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from tiledsl.backends.rocm.arch import ARCH_NAMES, Arch, get_arch
from tiledsl.errors import TileError

OPS = ("fmha_fwd", "fmha_bwd")
MAX_SEQLEN, MAX_HEADS = 1 << 17, 1024  # bounds on the host memory a profile's inputs take


def add_parser(sub: Any) -> None:
    p = sub.add_parser("profile", help="model a library call's time on an arch (emulator timing model)")
    p.add_argument("op", choices=OPS, help="the library operation (tiledsl.ops)")
    p.add_argument("--arch", required=True, help=f"one of {', '.join(ARCH_NAMES)}")
    p.add_argument("--dtype", default="f16", choices=["f16", "bf16"], help="input dtype (default f16)")
    p.add_argument("--batch", type=int, default=4, help="batch size (default 4)")
    p.add_argument("--heads", default="32", help="query heads, Hq/Hk for GQA such as 32/8 (default 32)")
    p.add_argument("--seqlen", default="4096", help="sequence length, SQ/SK when they differ (default 4096)")
    p.add_argument("--hdim", type=int, default=128, help="head dim (default 128)")
    p.add_argument("--causal", action="store_true", help="bottom-right causal mask")
    p.add_argument("--sample-cus", type=int, default=4, help="compute units simulated per launch (default 4)")
    p.add_argument("--execute", action="store_true", help="also run every workgroup (slow at full size)")
    p.add_argument("--plot", metavar="DIR", help="write roofline.png and timeline.png there (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--what-if-free", metavar="PREFIX[,PREFIX...]", default="",
                   help="what-if analysis: ALU instructions whose names start with these (v_cvt_f16_f32,"
                        "v_pack_b32) cost nothing; a bound on what removing them would gain")
    p.add_argument("--what-if-no-barriers", action="store_true",
                   help="what-if analysis: no wave waits at a barrier (results stay right; only time changes)")


def useful_flops(op: str, batch: int, hq: int, sq: int, sk: int, hdim: int, causal: bool) -> float:
    """The attention's matrix FLOPs (2 products forward, 5 backward), over visible pairs only."""
    pairs = sum(min(max(i + 1 + sk - sq, 0), sk) for i in range(sq)) if causal else sq * sk
    return (2 if op == "fmha_fwd" else 5) * 2.0 * batch * hq * pairs * hdim


def run_profile(op: str, arch: Arch, *, dtype: str = "f16", batch: int = 4, hq: int = 32, hk: int = 32,
                sq: int = 4096, sk: int = 4096, hdim: int = 128, causal: bool = False, sample_cus: int = 4,
                execute: bool = False, timeline: bool = False, free_instructions: tuple[str, ...] = (),
                free_barriers: bool = False) -> dict[str, Any]:
    """Model one call; returns {"launches": [LaunchTiming...], "seconds", "tflops", "peak_fraction"}.
    free_instructions / free_barriers: a what-if analysis (TimingOptions)."""
    from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
    from tiledsl.backends.rocm.runtime.timing_model import TimingOptions
    from tiledsl.device_array import DeviceArray
    from tiledsl.ops import fmha_bwd, fmha_fwd

    if op not in OPS:
        raise ValueError(f"op: expected one of {', '.join(OPS)}, got {op!r}")
    dev = EmulatorDevice(arch, timing=TimingOptions(sample_cus=sample_cus, execute=execute, timeline=timeline,
                                                    free_instructions=free_instructions,
                                                    free_barriers=free_barriers))
    npdt = np.dtype(np.float16) if dtype == "f16" else np.dtype(ml_dtypes.bfloat16)

    rng = np.random.default_rng(0)

    def tensor(s: int, h: int, name: str) -> DeviceArray:
        # Standard normal values, as attention benchmarks use: a kernel's branches may depend on
        # its data (a lazy softmax skips its rescale while the running max stands), and zeros
        # would flatter them.
        values = rng.standard_normal((batch, s, h, hdim), dtype=np.float32).astype(npdt)
        return DeviceArray.from_numpy(dev, values, name)

    q, k, v = tensor(sq, hq, "q"), tensor(sk, hk, "k"), tensor(sk, hk, "v")
    if op == "fmha_fwd":
        fmha_fwd(q, k, v, causal=causal, device=dev)
    else:
        out, do = tensor(sq, hq, "out"), tensor(sq, hq, "do")
        lse = DeviceArray.empty(dev, (batch, hq, sq), np.float32, "lse")
        fmha_bwd(do, q, k, v, out, lse, causal=causal, device=dev)
    launches = [entry["timing"] for entry in dev.launches]
    if free_instructions and not any(t.freed for t in launches):
        raise ValueError(f"--what-if-free: no instruction of {op}'s kernels starts with {', '.join(free_instructions)}")
    seconds = sum(t.seconds for t in launches)
    flops = useful_flops(op, batch, hq, sq, sk, hdim, causal)
    peak = arch.peak_tflops_f16 * 1e12 / arch.timing.dies
    return {"launches": launches, "seconds": seconds, "flops": flops, "tflops": flops / seconds / 1e12,
            "peak_fraction": flops / seconds / peak}


def cmd_profile(args: argparse.Namespace) -> int:
    from tiledsl.backends.rocm.emulator.timing import TimingError
    from tiledsl.backends.rocm.runtime.timing_model import TimingOptions, format_timing
    from tiledsl.cli import (  # `tiledsl plan`'s (cli imports this module)
        _output_dir,
        _pair,
        check_batch,
        check_heads_and_hdim,
    )

    arch = get_arch(args.arch)
    hq, hk = _pair(args.heads, "--heads")
    sq, sk = _pair(args.seqlen, "--seqlen")
    if min(hq, hk, sq, sk) < 1:
        raise TileError("--heads and --seqlen must be positive")
    if max(sq, sk) > MAX_SEQLEN or hq > MAX_HEADS:  # the inputs are allocated on the host
        raise TileError(f"--seqlen and --heads: expected at most {MAX_SEQLEN} and {MAX_HEADS}, got {sq}/{sk} and "
                        f"{hq}/{hk}")
    check_batch(args.batch)
    check_heads_and_hdim(hq, hk, args.hdim)
    if args.sample_cus < 1:
        raise TileError("--sample-cus must be positive")
    free = tuple(x.strip() for x in args.what_if_free.split(",") if x.strip())
    if any(not x.startswith(("v_", "s_")) for x in free):
        raise TileError(f"--what-if-free: expected instruction name prefixes such as v_cvt_f16_f32, got "
                        f"{args.what_if_free!r}")
    if args.plot:  # before the run, which takes minutes
        from tiledsl.profile_plot import pyplot

        _output_dir(args.plot, "--plot")
        pyplot()  # matplotlib is there
    try:
        r = run_profile(args.op, arch, dtype=args.dtype, batch=args.batch, hq=hq, hk=hk, sq=sq, sk=sk,
                        hdim=args.hdim, causal=args.causal, sample_cus=args.sample_cus, execute=args.execute,
                        timeline=bool(args.plot), free_instructions=free, free_barriers=args.what_if_no_barriers)
    except (ValueError, TimingError) as exc:
        raise TileError(str(exc)) from None
    what_if = TimingOptions(free_instructions=free, free_barriers=args.what_if_no_barriers).what_if()
    if args.json:
        out = {k: v for k, v in r.items() if k != "launches"}
        out["launches"] = [{k: v for k, v in asdict(t).items() if k != "timeline"} for t in r["launches"]]
        if what_if:
            out["what_if"] = what_if
        print(json.dumps(out, indent=1))
    else:
        shape = f"B{args.batch} Hq{hq}/Hk{hk} Sq{sq}/Sk{sk} D{args.hdim} {args.dtype}"
        shape += " causal" if args.causal else ""
        print(f"{args.op} {shape} on {arch.name} ({arch.product}), modeled -- a ranking tool, not a clock "
              f"(docs/profile.md)")
        for t in r["launches"]:
            print(format_timing(t))
        print(f"total {r['seconds'] * 1e6:.1f} us: {r['tflops']:.1f} TFLOP/s of attention "
              f"({100 * r['peak_fraction']:.1f}% of {arch.peak_tflops_f16 / arch.timing.dies:.0f} TFLOP/s peak)"
              + (f" -- WHAT-IF ({what_if}), not the kernel's time" if what_if else ""))
    if args.plot:
        from tiledsl.profile_plot import plot_roofline, plot_timeline

        outdir = Path(args.plot)
        plot_roofline(arch, r["launches"], outdir / "roofline.png")
        plot_timeline(r["launches"][0], outdir / "timeline.png")
        where = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the JSON alone
        print(f"wrote {outdir / 'roofline.png'} and {outdir / 'timeline.png'}", file=where)
    return 0
