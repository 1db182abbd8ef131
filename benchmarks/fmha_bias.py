"""FMHA with attention bias, ALiBi, dropout and fp8 beside the plain kernel, as a table (docs/bias.md,
docs/dropout.md, docs/fp8.md).

Per arch, head dim 64/128, f16, causal or not, forward variants: plain, a bias tensor of q's dtype,
an f32 bias tensor, ALiBi, dropout (p 0.1), and on the fp8 archs (gfx942, gfx950, gfx1201) bf16
beside fp8 (e4m3 q/k/v, bf16 out; docs/fp8.md: an fp8 MFMA does twice the K of a 16-bit one on
gfx942, four times on gfx950, and gfx1201's WMMA the same K, so compare instructions and executed
counts, not instructions per MFMA); and the backward's
dq_dk_dv: plain, with a bias tensor, with its gradient (dbias), with ALiBi, with dropout.
Columns: the tile, instructions, MFMA/WMMA count, instructions per MFMA/WMMA, VGPRs (CDNA: the
unified count) and AGPRs, VGPR/SGPR spills, and, with emulation, the executed wave-instructions per
1k (query, key) pairs of the whole call (one head, 256 queries against 256 keys; forward: one
kernel; backward: the whole plan, dbias stage included), checked against the reference. Static
figures are of the variant a contiguous call compiles (bias rows 16-byte aligned, as the ops pad
them).
Usage: python benchmarks/fmha_bias.py [--arch A ...] [--hdim 64 128] [--no-emulate] [-j N]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import ml_dtypes
import numpy as np

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.fmha_bwd import bwd_config, plan_from_sizes
from tiledsl.fp8 import fp8_format
from tiledsl.isa_stats import isa_stats
from tiledsl.kernels.fmha_configs import fmha_config
from tiledsl.ops import compile_fmha_fwd, fmha_bwd, fmha_fwd
from tiledsl.reference import fmha_bwd_reference, fmha_fwd_reference, fmha_mask_params

SEQ = 256
FWD = ("plain", "tensor", "tensor_f32", "alibi", "dropout", "bf16", "fp8")
BWD = ("plain", "tensor", "dbias", "alibi", "dropout")
DROPOUT = {"dropout_p": 0.1, "seed": 1234, "offset": 0}


def pairs(causal: bool) -> int:
    return SEQ * (SEQ + 1) // 2 if causal else SEQ * SEQ


def problem(hdim: int, variant: str, arch: str = "gfx942"):
    rng = np.random.default_rng(0)
    dtype = {"bf16": ml_dtypes.bfloat16, "fp8": _e4m3(arch)}.get(variant, np.float16)
    q, k, v, do = (rng.standard_normal((1, SEQ, 1, hdim)).astype(dtype) for _ in range(4))
    kw = {}
    if variant in ("tensor", "dbias"):
        kw["bias"] = rng.standard_normal((1, 1, SEQ, SEQ)).astype(np.float16)
    elif variant == "tensor_f32":
        kw["bias"] = rng.standard_normal((1, 1, SEQ, SEQ)).astype(np.float32)
    elif variant == "alibi":
        kw["alibi_slopes"] = np.array([0.0625], np.float32)
    elif variant == "dropout":
        kw.update(DROPOUT)
    return q, k, v, do, kw


def _e4m3(arch: str) -> Any:
    flavour = get_arch(arch).fp8_flavour
    return getattr(ml_dtypes, fp8_format("f8e4m3", flavour).numpy) if flavour else None


def _f64(kw: dict) -> dict:
    return {n: x.astype(np.float64) if isinstance(x, np.ndarray) else x for n, x in kw.items()}


def _stats(k) -> dict:
    st = isa_stats(k.asm, k.manifest)
    mma = st.mfma + st.wmma
    return {"instr": st.instructions, "mma": mma, "ipm": st.instructions / max(mma, 1), "vgpr": st.vgprs,
            "agpr": st.agprs, "vsp": st.vgpr_spills, "ssp": st.sgpr_spills}


def fwd_row(arch: str, hdim: int, causal: bool, variant: str, emulate: bool) -> dict:
    bias = {"tensor": "tensor", "tensor_f32": "tensor", "alibi": "alibi"}.get(variant, "none")
    dropout = variant == "dropout"
    dtype = {"bf16": "bf16", "fp8": "f8e4m3"}.get(variant, "f16")
    cfg = fmha_config(arch, hdim, hdim, masked=causal, bias=bias, dropout=dropout, fp8=variant == "fp8")
    k = compile_fmha_fwd(arch, dtype=dtype, hdim_q=hdim, hdim_v=hdim, mask=fmha_mask_params(causal), bias=bias,
                         bias_dtype="f32" if variant == "tensor_f32" else "f16",
                         aligned=("bias", "k", "o", "q", "v"), dropout=dropout)
    row = {**_stats(k), "tiles": f"{cfg.block_m}x{cfg.block_n} w{cfg.waves} s{cfg.stages}", "dyn": None}
    if emulate:
        q, kk, v, _, kw = problem(hdim, variant, arch)
        dev = EmulatorDevice(arch)
        out = fmha_fwd(q, kk, v, causal=causal, device=dev, **kw)
        row["dyn"] = sum(launch["wave_instructions"] for launch in dev.launches) * 1000 / pairs(causal)
        want = fmha_fwd_reference(*(x.astype(np.float64) for x in (q, kk, v)), causal=causal, **_f64(kw))
        err = float(np.abs(out.astype(np.float64) - want).max())
        if err > (5e-2 if variant == "fp8" else 2e-2 if variant == "bf16" else 4e-3):
            row["note"] = f"max error {err:.1e}"
    return row


def bwd_row(arch: str, hdim: int, causal: bool, variant: str, emulate: bool) -> dict:
    bias = {"tensor": "tensor", "dbias": "tensor", "alibi": "alibi"}.get(variant, "none")
    dropout = variant == "dropout"
    plan = plan_from_sizes(arch, dtype="f16", hdim_q=hdim, hdim_v=hdim, hq=1, hk=1, seqlens_q=(SEQ,),
                           seqlens_k=(SEQ,), varlen=False, mask=fmha_mask_params(causal), bias=bias, bias_dtype="f16",
                           dbias="reduce" if variant == "dbias" else "none", dropout=dropout)
    cfg = bwd_config(arch, hdim, hdim, variant == "dbias", dropout, bias != "none")
    row = {**_stats(plan.stages[1].kernel), "tiles": f"{cfg.block_m}x{cfg.block_n} w{cfg.waves}", "dyn": None}
    if emulate:
        q, k, v, do, kw = problem(hdim, variant)
        ref_kw = _f64(kw)
        out, lse = fmha_fwd_reference(*(x.astype(np.float64) for x in (q, k, v)), causal=causal, return_lse=True,
                                      **ref_kw)
        dev = EmulatorDevice(arch)
        dbias = variant == "dbias"
        got = fmha_bwd(do, q, k, v, out.astype(np.float16), lse.astype(np.float32), causal=causal, device=dev,
                       return_dbias=dbias, **kw)
        row["dyn"] = sum(launch["wave_instructions"] for launch in dev.launches) * 1000 / pairs(causal)
        want = fmha_bwd_reference(*(x.astype(np.float64) for x in (do, q, k, v)), causal=causal,
                                  return_dbias=dbias, **ref_kw)
        err = max(float(np.abs(np.asarray(g, np.float64) - w).max() / max(1.0, np.abs(w).max()))
                  for g, w in zip(got, want, strict=True))
        if err > 4e-3:
            row["note"] = f"max error {err:.1e}"
    return row


def cell(args: tuple) -> list[str]:
    arch, hdim, causal, emulate = args
    lines = []
    for kind, variants, fn in (("fwd", FWD, fwd_row), ("bwd", BWD, bwd_row)):
        for variant in variants:
            if variant in ("bf16", "fp8") and not get_arch(arch).fp8_flavour:
                continue  # no fp8 matrix instructions (the bf16 row is fp8's partner)
            head = f"{arch:8} d{hdim:<4} {'causal' if causal else 'full':7}{kind:4} {variant:11}"
            try:
                r = fn(arch, hdim, causal, variant, emulate)
            except Exception as exc:  # one failing variant is a finding, not the end of the table
                lines.append(f"{head} error: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
                continue
            dyn = f"{r['dyn']:10.1f}" if r["dyn"] is not None else f"{'-':>10}"
            note = f"  ({r['note']})" if "note" in r else ""
            lines.append(f"{head}{r['tiles']:>15}{r['instr']:>7}{r['mma']:>5}{r['ipm']:>7.1f}{r['vgpr']:>6}"
                         f"{r['agpr']:>6}{r['vsp']:>5}/{r['ssp']:<4}{dyn}{note}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", default=list(ARCH_NAMES))
    ap.add_argument("--hdim", nargs="+", type=int, default=[64, 128])
    ap.add_argument("--no-emulate", action="store_true", help="static figures only")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    args = ap.parse_args()
    print(f"{'arch':8} {'hdim':5} {'mask':7}{'':4} {'variant':11}{'tiles':>15}{'instr':>7}{'MMA':>5}{'i/MMA':>7}"
          f"{'VGPR':>6}{'AGPR':>6}{'spill v/s':>10}{'dyn/1k':>10}")
    cells = [(a, h, c, not args.no_emulate) for a in args.arch for h in args.hdim for c in (False, True)]
    with ProcessPoolExecutor(args.jobs) as pool:
        for lines in pool.map(cell, cells):
            print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
