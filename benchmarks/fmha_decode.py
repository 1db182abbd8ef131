"""Decode on the emulator: parallelism and memory traffic of split-KV with GQA packing.

For one decode step (Sq = 1) against a KV cache, prints per plan: the stages, workgroups, the
longest workgroup's wave-instructions (the critical path on a GPU with enough compute units),
total wave-instructions, the combine's share of them, and the bytes the producers' vector loads
read against the K/V cache's size (1.00x = every cached row read once), lane by lane and counting
each wave instruction's distinct addresses once (what a coalescer requests: lanes that read the
same page-table entry share one request). Plans compared: the
one-stage kernel (num_splits=1), the heuristic's choice, and forced split counts.

With --model, each plan also runs under the emulator's timing model (docs/profile.md; a ranking
tool, not a clock): modeled microseconds of the whole plan, and the K/V cache's bytes over that
time against the arch's memory bandwidth (decode is memory-bound: that fraction is its roofline).
With --peers (implies --model), a row per arch for aiter's Triton paged-attention decode
(`aiter.ops.triton.pa_decode.paged_attention_decode`: its own choice of kernels, a partitioned
kernel and a reduce for long caches), on the same cache in its layout [pages, Hk, page, D], run on
the emulator under the same model with its output checked against numpy. It needs the bench
extra (`pip install -e '.[bench]'`, then benchmarks/aiter_fa.py's install line); its kernels
hold a whole page in LDS, so pages of 256 keys exceed 64 KiB on CDNA3 (use --page 16 or 64).

Issue 12's targets (B = 1, Hq = 8, Hk = 1, Sk = 16384, hdim 128 on gfx942): the split plan's
longest workgroup at least 8x shorter than the one-stage kernel's, the combine under 10 % of the
total, the cache read at most 1.1x once.
Usage: python benchmarks/fmha_decode.py [--arch A ...] [--seqlen N] [--hdim D] [--heads HQ/HK]
       [--page P] [--splits 1 0 8 ...] [--model] [--peers]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.backends.rocm.runtime.timing_model import TimingOptions
from tiledsl.cli import format_table
from tiledsl.ops import fmha_fwd_kvcache, fmha_num_splits
from tiledsl.reference import fmha_fwd_kvcache_reference


def decode_inputs(seqlen: int, hdim: int, hq: int, hk: int, page: int) -> tuple[np.ndarray, ...]:
    """q [1, 1, Hq, D], the caches [pages, page, Hk, D] and the block table, seeded."""
    rng = np.random.default_rng(0)
    pages = -(-seqlen // page)
    kc, vc = (rng.standard_normal((pages, page, hk, hdim)).astype(np.float16) for _ in range(2))
    table = rng.permutation(pages).reshape(1, pages).astype(np.int32)
    q = rng.standard_normal((1, 1, hq, hdim)).astype(np.float16)
    return q, kc, vc, table


def cache_bytes(seqlen: int, hk: int, hdim: int) -> int:
    """The K and V cache rows a decode step reads (f16)."""
    return 2 * seqlen * hk * hdim * 2


def model_device(arch: str) -> EmulatorDevice:
    """The timing model simulating every CU a decode launch uses (a few dozen workgroups at most)."""
    return EmulatorDevice(arch, timing=TimingOptions(sample_cus=get_arch(arch).compute_units))


def modeled(dev: EmulatorDevice, arch: str, cache: int) -> dict:
    """The plan's modeled time, and its `cache` bytes over that time against HBM bandwidth."""
    seconds = sum(x["timing"].seconds for x in dev.launches)
    timing = get_arch(arch).timing
    return {"modeled_us": f"{seconds * 1e6:.1f}",
            "cache_bw_pct": f"{100 * cache / seconds / (timing.hbm_tb_s * 1e12 / timing.dies):.1f}"}


def measure(arch: str, seqlen: int, hdim: int, hq: int, hk: int, page: int, splits: int,
            model: bool = False) -> dict:
    q, kc, vc, table = decode_inputs(seqlen, hdim, hq, hk, page)
    dev = model_device(arch) if model else EmulatorDevice(arch)
    fmha_fwd_kvcache(q, kc, vc, cache_seqlens=np.array([seqlen], np.int32), block_table=table, causal=True,
                     num_splits=splits, device=dev)
    first, last = dev.launches[0], dev.launches[-1]
    total = sum(x["wave_instructions"] for x in dev.launches)
    cache = cache_bytes(seqlen, hk, hdim)
    combined = len(dev.launches) > 1
    row = {"arch": arch, "splits": splits or f"0 -> {_heuristic(arch, seqlen, hdim, hq, hk)}",
            "stages": "+".join(x["kernel"].removeprefix("fmha_") for x in dev.launches),
            "workgroups": first["workgroups"], "longest_wg": first["max_workgroup_instructions"], "total": total,
            "combine_pct": f"{100 * last['wave_instructions'] / total:.1f}" if combined else "-",
            "cache_reads": f"{first['global_load_bytes'] / cache:.3f}x",
            "unique_reads": f"{first['global_load_unique_bytes'] / cache:.3f}x"}
    if model:
        row |= modeled(dev, arch, cache)
    return row


def peer_row(arch: str, seqlen: int, hdim: int, hq: int, hk: int, page: int) -> dict:
    """aiter's paged-attention decode of the same step (see the module docstring)."""
    import aiter_fa

    row: dict = {"arch": arch, "splits": "aiter"}
    if (why := aiter_fa.missing()) is not None:
        return row | {"note": why}
    q, kc, vc, table = decode_inputs(seqlen, hdim, hq, hk, page)
    kc_t, vc_t = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (kc, vc))  # its [pages, Hk, page, D]
    a = get_arch(arch)
    try:
        launches, tensors = aiter_fa.compile_decode(arch, a.wave_size, q[:, 0], kc_t, vc_t,
                                                    np.array([seqlen], np.int32), table)
        dev = model_device(arch)
        out, _ = aiter_fa.run(dev, launches, {"o": tensors["o"]})
    except Exception as exc:  # a peer that cannot build or run a shape is a data point, not the end
        return row | {"note": f"not run: {type(exc).__name__}: {str(exc).splitlines()[0][:90]}"}
    row |= {"stages": "+".join(ln.name.removeprefix("_paged_attn_decode_").removesuffix("_kernel") for ln in launches),
            "workgroups": int(np.prod(launches[0].grid))} | modeled(dev, arch, cache_bytes(seqlen, hk, hdim))
    ref = fmha_fwd_kvcache_reference(q, kc, vc, cache_seqlens=np.array([seqlen], np.int32), block_table=table,
                                     causal=True)
    err = np.abs(out["o"].astype(np.float32) - ref[:, 0]).max()
    if err > 2e-3:
        row["note"] = f"output differs from numpy by {err:.2g}"
    return row


def _heuristic(arch: str, seqlen: int, hdim: int, hq: int, hk: int) -> int:
    return fmha_num_splits(arch, batch=1, nhead_q=hq, max_seqlen_q=1, max_seqlen_k=seqlen, hdim_q=hdim,
                           causal=True, nhead_k=hk)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", default=["gfx942"])
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--heads", default="8/1", help="query heads / kv heads")
    ap.add_argument("--page", type=int, default=256)
    ap.add_argument("--splits", type=int, nargs="+", default=[1, 0])
    ap.add_argument("--model", action="store_true", help="add modeled time and the cache's share of HBM bandwidth")
    ap.add_argument("--peers", action="store_true", help="add aiter's paged-attention decode (implies --model)")
    a = ap.parse_args()
    a.model = a.model or a.peers
    hq, hk = (int(x) for x in a.heads.split("/"))
    rows = []
    for arch in a.arch:
        base = None
        for splits in a.splits:
            row = measure(arch, a.seqlen, a.hdim, hq, hk, a.page, splits, a.model)
            base = base or row["longest_wg"]
            row["speedup"] = f"{base / row['longest_wg']:.1f}x"
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
        if a.peers:
            rows.append(peer_row(arch, a.seqlen, a.hdim, hq, hk, a.page))
            print(rows[-1], file=sys.stderr, flush=True)
    cols = [(k, k) for k in ("arch", "splits", "stages", "workgroups", "longest_wg", "speedup", "total",
                             "combine_pct", "cache_reads", "unique_reads")]
    if a.model:
        cols += [("modeled us", "modeled_us"), ("cache / HBM %", "cache_bw_pct")]
    print(f"decode: B 1, Sq 1, Hq/Hk {hq}/{hk}, Sk {a.seqlen}, hdim {a.hdim}, pages of {a.page}, causal, f16")
    print(format_table(rows, cols, text_columns=3))
    for r in rows:
        if "note" in r:
            print(f"{r['arch']} {r['splits']}: {r['note']}")


if __name__ == "__main__":
    main()
