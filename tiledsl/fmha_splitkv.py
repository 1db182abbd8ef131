"""The split-KV forward as a plan: producers (fmha_fwd.tile with SPLIT) -> combine.

Decode has one or a few query rows per sequence: one workgroup per (query block, head, sequence)
leaves most of a GPU idle. Split-KV cuts each query block's key range into G contiguous ranges,
one workgroup each; every producer writes its range's normalized output and LSE (f32) into the
workspace, split-major, and fmha_fwd_combine folds them with LSE weights (docs/inference.md).
`fmha_num_splits` is the heuristic that picks G from the arch table.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.kernels.fmha_configs import fmha_config, fmha_dim_units, padded_hdim
from tiledsl.plan import Plan, Ref, Region, Stage, WorkspaceLayout, align_words
from tiledsl.reference import MaskParams

KERNELS = Path(__file__).resolve().parent / "kernels"
MAX_SPLITS = 64  # beyond this the combine's reads cost more than the parallelism returns


def key_blocks(arch: str, hdim_q: int, hdim_v: int, masked: bool, max_seqlen_k: int) -> int:
    """Key blocks (of the forward's BLOCK_N) of the longest sequence: the most splits that can all
    have work."""
    block_n = fmha_config(arch, hdim_q, hdim_v, masked=masked).block_n
    return max(1, -(-max_seqlen_k // block_n))


def fmha_num_splits(arch: str, *, batch: int, nhead_q: int, max_seqlen_q: int, max_seqlen_k: int,
                    hdim_q: int, hdim_v: int | None = None, masked: bool = False) -> int:
    """The split count `fmha_fwd(..., num_splits=0)` uses: 1 when the one-stage grid already gives
    every compute unit a workgroup; otherwise enough splits to do so (from the arch table's CU
    count), at most one per key block and at most MAX_SPLITS."""
    a = get_arch(arch)
    hdim_v = hdim_q if hdim_v is None else hdim_v
    cfg = fmha_config(a.name, hdim_q, hdim_v, masked=masked)
    workgroups = max(1, -(-max_seqlen_q // cfg.block_m)) * nhead_q * batch
    if workgroups >= a.compute_units:
        return 1
    wanted = -(-a.compute_units // workgroups)
    return max(1, min(wanted, key_blocks(a.name, hdim_q, hdim_v, masked, max_seqlen_k), MAX_SPLITS))


@dataclass(frozen=True)
class SplitShape:
    """Everything a split-KV plan depends on (its cache key)."""

    arch: str
    dtype: str
    hdim_q: int
    hdim_v: int
    mask: MaskParams
    varlen: bool
    lse: bool
    sink: bool
    softcap: bool
    contiguous: bool
    aligned: tuple[str, ...]
    num_splits: int
    b: int  # tensors' batch dim (1 in group mode)
    hq: int
    sq: int  # tensors' sequence dim (total tokens in group mode)


def splitkv_workspace(shape: SplitShape) -> WorkspaceLayout:
    """o_acc f32 [G, B, Hq, Sq, Dv] then lse_acc f32 [G, B, Hq, Sq], split-major. Every row a
    producer owns is written (0 and -inf for a range with no key), so nothing needs zeroing."""
    g, b, hq, sq, dv = shape.num_splits, shape.b, shape.hq, shape.sq, shape.hdim_v
    o_words = g * b * hq * sq * dv
    regions = (Region("o_acc", 0, align_words(o_words), "f32", (g, b, hq, sq, dv)),
               Region("lse_acc", align_words(o_words), align_words(g * b * hq * sq), "f32", (g, b, hq, sq)))
    return WorkspaceLayout(regions)


@functools.lru_cache(maxsize=64)
def build_splitkv_plan(shape: SplitShape) -> Plan:
    from tiledsl.cache import Cache
    from tiledsl.driver import compile_source
    from tiledsl.ops import compile_fmha_fwd
    from tiledsl.options import CompileOptions

    # The sink joins the denominator once, in the combine: the producers run without it.
    producer = compile_fmha_fwd(shape.arch, dtype=shape.dtype, hdim_q=shape.hdim_q, hdim_v=shape.hdim_v,
                                mask=shape.mask, varlen=shape.varlen, lse=False, sink=False,
                                softcap=1.0 if shape.softcap else 0.0, contiguous=shape.contiguous,
                                aligned=shape.aligned, split=True, cache=Cache.from_env())
    hd_v = padded_hdim(shape.hdim_v)
    flag = {True: "true", False: "false"}
    defines = {"DT": shape.dtype, "HDIM_V": str(hd_v), "BLOCK_M": str(max(16, min(64, 8192 // hd_v))),
               "VARLEN": flag[shape.varlen], "HAS_LSE": flag[shape.lse], "HAS_SINK": flag[shape.sink],
               "PAD_D": flag[hd_v != shape.hdim_v]}
    units = tuple((s, u) for s, u in fmha_dim_units(shape.hdim_q, shape.hdim_v) if s == "D_V")
    options = CompileOptions.make(shape.arch, defines, unit_last_stride=shape.contiguous, dim_units=units)
    source = KERNELS / "fmha_fwd_combine.tile"
    combine = compile_source(source.read_text(), str(source), shape.arch, defines, options, cache=Cache.from_env())
    names = ("q", "k", "v", "o", "lse", "sink", "o_acc", "lse_acc", "cu_seqlens_q", "cu_seqlens_k", "scale",
             "softcap", "window_left", "window_right", "batch", "max_seqlen_q")
    stages = [
        Stage("producers", producer, tuple((n, Ref(n)) for n in names) + (("num_splits", shape.num_splits),)),
        Stage("combine", combine, tuple((n, Ref(n)) for n in ("o_acc", "lse_acc", "o", "lse", "sink", "cu_seqlens_q",
                                                              "batch", "max_seqlen_q"))),
    ]
    return Plan("fmha_fwd split-KV", stages, splitkv_workspace(shape),
                {"arch": shape.arch, "num_splits": shape.num_splits})
