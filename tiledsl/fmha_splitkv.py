"""The forward as a plan: one kernel, or split-KV producers (fmha_fwd.tile with SPLIT) -> combine.

Decode has one or a few query rows per sequence: one workgroup per (query block, head, sequence)
leaves most of a GPU idle. Split-KV cuts each query block's key range into G contiguous ranges,
one workgroup each; every producer writes its range's normalized output and LSE (f32) into the
workspace, split-major, and fmha_fwd_combine folds them with LSE weights (docs/inference.md).
`fmha_num_splits` is the heuristic that picks G from the arch table.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.fmha_dropout import dropout_scalars
from tiledsl.kernels.fmha_configs import (
    VECTOR_ELEMS,
    WIDE_ROUNDS,
    fmha_config,
    fmha_dim_units,
    pack_gqa,
    padded_hdim,
    split_acc_stride_units,
    unit_defines,
    wide_config,
)
from tiledsl.launcher import BUFFER_REACH
from tiledsl.library import plan_builder
from tiledsl.pairing import CAUSAL_KINDS
from tiledsl.plan import Plan, Ref, Region, Stage, WorkspaceLayout, align_words, unused
from tiledsl.reference import MaskParams

KERNELS = Path(__file__).resolve().parent / "kernels"
MAX_SPLITS = 64  # beyond this the combine's reads cost more than the parallelism returns
# Query lengths whose combine folds one row per block, all its splits at once (decode).
COMBINE_ROW_BLOCKS_UP_TO = 16
# Key blocks each split gets at least where the combine takes blocks of rows, one split per step:
# a split's fixed cost (its query load, the partials it writes, its share of the combine) stays
# small beside its loop. Timing model, gfx942, 8 heads, hdim 128, modeled us for 4 / 8 / 16 / 32
# splits: 64 queries x 2048 keys (32 blocks) 21.9 / 16.1 / 15.8 / 20.7; 256 x 4096 38.7 / 25.5 /
# 21.4 / 28.4; gfx1100 64 x 2048 (64 blocks) 32.5 / 20.4 / 22.0 / 27.5.
MIN_BLOCKS_PER_SPLIT = 8
# Decode-sized queries fold every split at once, and a block per split is fastest: gfx942 decode
# (B 1, Hq/Hk 8/1, hdim 128), modeled us for 8 / 16 / 32 / 64 splits, 4096 keys 25.2 / 15.6 /
# 10.9 / 8.6; 16384 keys, 32 / 64 splits 25.3 / 15.9 (session 28).
MIN_BLOCKS_PER_DECODE_SPLIT = 1


def key_blocks(arch: str, hdim_q: int, hdim_v: int, masked: bool, max_seqlen_k: int) -> int:
    """Key blocks (of the forward's BLOCK_N) of the longest sequence: the most splits that can all
    have work."""
    block_n = fmha_config(arch, hdim_q, hdim_v, masked=masked).block_n
    return max(1, -(-max_seqlen_k // block_n))


def fmha_num_splits(arch: str, *, batch: int, nhead_q: int, max_seqlen_q: int, max_seqlen_k: int,
                    hdim_q: int, hdim_v: int | None = None, masked: bool = False,
                    nhead_k: int | None = None) -> int:
    """The split count `fmha_fwd(..., num_splits=0)` uses: 1 when the one-stage grid (one block
    per kv head when the call packs GQA heads, see `pack_gqa`) already gives every compute unit a
    workgroup; otherwise enough splits to do so (from the arch table's CU count), each with at
    least MIN_BLOCKS_PER_SPLIT key blocks (MIN_BLOCKS_PER_DECODE_SPLIT for decode-sized queries),
    and at most MAX_SPLITS."""
    a = get_arch(arch)
    hdim_v = hdim_q if hdim_v is None else hdim_v
    cfg = fmha_config(a.name, hdim_q, hdim_v, masked=masked)
    nhead_k = nhead_q if nhead_k is None else nhead_k
    if pack_gqa(a.name, hdim_q, hdim_v, masked, max_seqlen_q, nhead_q, nhead_k):  # a block per kv head
        workgroups = max(1, -(-max_seqlen_q * (nhead_q // nhead_k) // cfg.block_m)) * nhead_k * batch
    else:
        workgroups = max(1, -(-max_seqlen_q // cfg.block_m)) * nhead_q * batch
    if workgroups == 0 or workgroups >= a.compute_units:  # no work (an empty batch), or enough already
        return 1
    wanted = -(-a.compute_units // workgroups)
    blocks = key_blocks(a.name, hdim_q, hdim_v, masked, max_seqlen_k)
    least = MIN_BLOCKS_PER_DECODE_SPLIT if max_seqlen_q <= COMBINE_ROW_BLOCKS_UP_TO else MIN_BLOCKS_PER_SPLIT
    return max(1, min(wanted, blocks // least, MAX_SPLITS))


@dataclass(frozen=True)
class SplitShape:
    """Everything an attention plan depends on (its cache key)."""

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
    num_splits: int  # 1: the one-stage kernel
    b: int  # tensors' batch dim (1 in group mode)
    hq: int
    sq: int  # tensors' sequence dim (total tokens in group mode)
    kv_cache: str = "none"  # fmha_fwd.tile's KV_CACHE
    page_size: int = 0  # paged: keys per page
    heads_per_block: int = 1  # > 1: PACK_GQA with this many query heads per kv head
    q_name: str = "q"  # the call's name for the queries (the rotated copy with rotary)
    bias: str = "none"  # "tensor" (the call's "bias") or "alibi" (its "alibi_slopes"), docs/bias.md
    bias_dtype: str = "f32"  # the bias tensor's dtype
    dropout: bool = False  # P is dropped (docs/dropout.md): the call's seed_lo .. drop_scale
    dropout_mask: bool = False  # a last stage writes the keep bits into the call's "dropout_mask"
    out_dtype: str | None = None  # fp8 (dtype f8e4m3): the output's dtype (docs/fp8.md); else dtype
    # The sequences and the longest query sequence, for the wide query tile (wide_query_blocks); 0
    # when the caller does not choose it (the KV-cache plans).
    batch: int = 0
    max_seqlen_q: int = 0
    pair_blocks: str = "auto"  # "always": a causal one-stage plan pairs its query blocks (pair_query_blocks)
    # "wide": a plain one-stage plan runs the WIDE row whatever the sizes (kernel packages, or the
    # call's group-mode lengths chose it); "narrow": it does not (wide_query_blocks)
    query_tile: str = "auto"
    # A tensor of the call (or the workspace) spans more than 2 GiB: no stage uses buffer accesses
    # (CompileOptions.buffer_masks, tiledsl.ops.spans_large).
    large: bool = False


def pairable(shape: SplitShape) -> bool:
    """A one-stage forward without packed GQA heads, under a causal mask: its query blocks can pair."""
    return shape.num_splits == 1 and shape.heads_per_block == 1 and shape.mask.kind in CAUSAL_KINDS


def query_workgroups(shape: SplitShape, block_m: int, seqlens_q: Sequence[int] | None = None) -> int:
    """Workgroups of the one-stage forward's grid for queries of `block_m` rows: its query blocks
    per sequence, times heads and sequences. With group mode's `seqlens_q`, only the workgroups
    with rows to do: the grid's others (past a sequence shorter than the longest) end at once."""
    if seqlens_q is not None:
        return sum(-(-int(n) // block_m) for n in seqlens_q) * shape.hq
    return -(-shape.max_seqlen_q // block_m) * shape.hq * shape.batch


def pair_query_blocks(shape: SplitShape) -> bool:
    """Whether the one-stage forward's workgroups take two query blocks each (x and
    nblocks - 1 - x, fmha_fwd.tile's PASSES = 2): under a causal mask query block x sees about
    x + 1 key blocks (tiledsl.pairing). Only on request (pair_blocks "always"): the unpaired
    masked variants hand their blocks out heaviest first, which the timing model finds faster
    wherever the sizes used to pair them (session 39, causal f16 TFLOP/s, paired -> unpaired: B 2,
    H 16, S 2048 gfx942 hdim 64 394.1 -> 407.0, hdim 128 463.2 -> 481.3, gfx950 hdim 128 774.3 ->
    823.5, gfx90a hdim 64 100.6 -> 134.8; B 1, H 16, S 2048 gfx1201 hdim 64 113.3 -> 114.6,
    gfx1100 hdim 64 67.9 -> 76.0, gfx90a hdim 64 68.1 -> 94.7), but for gfx950 hdim 64 at B 2
    (572.6 -> 547.7, every workgroup resident at once)."""
    return pairable(shape) and shape.pair_blocks == "always"


def wide_query_blocks(shape: SplitShape, seqlens_q: Sequence[int] | None = None) -> bool:
    """Whether the one-stage forward runs the WIDE tile row (fmha_configs.WIDE): a variant that has
    one (unmasked, no bias, dropout or fp8), with contiguous head dims and 16-byte aligned q, k, v
    and o, no KV cache, no packed GQA heads, queries at least two wide blocks long, and a grid
    whose wide query blocks give the most loaded compute unit no more query rows than the narrow
    blocks of CONFIGS' row would (workgroups are dealt out evenly), in at most the row's
    WIDE_ROUNDS rounds. Modeled on gfx950 hdim 64 (fmha_configs.WIDE): it gains there (B 2, H 64,
    S 512: 668.6 -> 696.8 TFLOP/s; B 1, H 24, S 2048, 192 wide blocks on 256 CUs: 673.9 ->
    761.4) and loses where a unit would take more rows (B 1, H 16, S 2048, 128 wide blocks: one
    unit's 256 rows against 128: 523.6 -> 426.6) or with short sequences (S 256: 598.9 -> 559.8,
    S 384: 487.4 -> 483.2). Not for callers that leave `batch` 0, unless the shape asks for it
    (kernel packages). `seqlens_q`: group mode's query sequence lengths, which count the grid's
    workgroups with rows to do (`query_workgroups`) where the longest one would count them all;
    `tiledsl.ops.fmha_fwd` decides with them and asks for the tile by `query_tile` ("wide" or
    "narrow"), which keeps the lengths out of the plan's key."""
    if shape.query_tile == "narrow":
        return False
    if shape.num_splits != 1 or shape.heads_per_block != 1 or shape.kv_cache != "none" or shape.large:
        return False
    if not shape.contiguous or not {"k", "o", "q", "v"} <= set(shape.aligned):
        return False
    row = wide_config(shape.arch, shape.hdim_q, shape.hdim_v, masked=shape.mask.kind != "none", bias=shape.bias,
                      dropout=shape.dropout, fp8=shape.dtype == "f8e4m3")
    if row is None:
        return False
    if shape.query_tile == "wide":
        return True
    if shape.max_seqlen_q < 2 * row.block_m or shape.batch == 0:
        return False
    arch = get_arch(shape.arch)
    narrow = fmha_config(arch.name, shape.hdim_q, shape.hdim_v).block_m
    rounds = -(-query_workgroups(shape, row.block_m, seqlens_q) // arch.compute_units)
    narrow_rounds = -(-query_workgroups(shape, narrow, seqlens_q) // arch.compute_units)
    return rounds * row.block_m <= narrow_rounds * narrow and rounds <= WIDE_ROUNDS.get(arch.name, rounds)


def splitkv_workspace(shape: SplitShape, at: int = 0) -> tuple[Region, ...]:
    """o_acc f32 [G, B, Hq, Sq, Dv] then lse_acc f32 [G, B, Hq, Sq], split-major, from word `at`.
    Every row a producer owns is written (0 and -inf for a range with no key), so nothing needs
    zeroing. None without splits."""
    if shape.num_splits == 1:
        return ()
    g, b, hq, sq, dv = shape.num_splits, shape.b, shape.hq, shape.sq, shape.hdim_v
    o_words = g * b * hq * sq * dv
    return (Region("o_acc", at, align_words(o_words), "f32", (g, b, hq, sq, dv)),
            Region("lse_acc", at + align_words(o_words), align_words(g * b * hq * sq), "f32", (g, b, hq, sq)))


# fmha_fwd.tile's arguments that come from the call (the rest are fixed by the plan).
FWD_ARGS = ("k", "v", "o", "lse", "sink", "cu_seqlens_q", "cu_seqlens_k", "cache_seqlens", "cache_batch_idx",
            "block_table", "scale", "softcap", "window_left", "window_right", "batch", "max_seqlen_q",
            "seqlen_new", "page_shift")


def bias_args(shape: SplitShape) -> tuple[tuple[str, object], ...]:
    """fmha_fwd.tile's bias and alibi_slopes: the call's tensors when the variant reads them,
    else zero stand-ins (any shape: their dims are their own, HQ aside)."""
    bias = Ref("bias") if shape.bias == "tensor" else unused((1, 1, 1, 1), "f32")
    slopes = Ref("alibi_slopes") if shape.bias == "alibi" else unused((1, shape.hq), "f32")
    return (("bias", bias), ("alibi_slopes", slopes))


def dropout_args(shape: SplitShape) -> tuple[tuple[str, object], ...]:
    """fmha_fwd.tile's dropout scalars (docs/dropout.md)."""
    return dropout_scalars(shape.dropout)


def dropout_mask_stage(shape: SplitShape) -> Stage:
    """The stage that writes the call's "dropout_mask" (fmha_dropout_mask.tile)."""
    from tiledsl.library import library_kernel
    from tiledsl.options import CompileOptions

    defines = {"VARLEN": "true" if shape.varlen else "false"}
    kernel = library_kernel(KERNELS / "fmha_dropout_mask.tile", shape.arch, defines,
                            CompileOptions.make(shape.arch, defines, buffer_masks=not shape.large))
    return Stage("dropout_mask", kernel, (("mask", Ref("dropout_mask")),) + tuple((n, Ref(n)) for n in (
        "cu_seqlens_q", "cu_seqlens_k", "seed_lo", "seed_hi", "rng_offset", "drop_threshold",
        "batch", "max_seqlen_q")))


def attention_stages(shape: SplitShape) -> list[Stage]:
    """The forward's stages: "attention" (one kernel), or "producers" and "combine" with splits
    (their workspace is `splitkv_workspace`)."""
    from tiledsl.library import library_kernel
    from tiledsl.ops import compile_fmha_fwd
    from tiledsl.options import CompileOptions

    split = shape.num_splits > 1
    # With splits the sink joins the denominator once, in the combine: the producers run without it.
    variant = functools.partial(
        compile_fmha_fwd, shape.arch, dtype=shape.dtype, hdim_q=shape.hdim_q, hdim_v=shape.hdim_v, mask=shape.mask,
        varlen=shape.varlen, lse=shape.lse and not split, sink=shape.sink and not split,
        softcap=1.0 if shape.softcap else 0.0, contiguous=shape.contiguous, aligned=shape.aligned, split=split,
        kv_cache=shape.kv_cache, pack_gqa=shape.heads_per_block > 1, page_size=shape.page_size, bias=shape.bias,
        bias_dtype=shape.bias_dtype, dropout=shape.dropout, out_dtype=shape.out_dtype, large=shape.large,
        wide=wide_query_blocks(shape))
    kernel = variant(passes=2) if pair_query_blocks(shape) else variant()
    args = (("q", Ref(shape.q_name)),) + tuple((n, Ref(n)) for n in FWD_ARGS) + (
        ("num_splits", shape.num_splits), ("heads_per_block", shape.heads_per_block)) + bias_args(shape) + \
        dropout_args(shape) + tuple((n, Ref(n) if shape.dtype == "f8e4m3" else 1.0) for n in ("p_scale", "o_scale"))
    if not split:
        stand_ins = (("o_acc", unused((1, shape.b, shape.hq, shape.sq, shape.hdim_v), "f32")),
                     ("lse_acc", unused((1, shape.b, shape.hq, shape.sq), "f32")))
        return [Stage("attention", kernel, args + stand_ins)]
    hd_v = padded_hdim(shape.hdim_v)
    flag = {True: "true", False: "false"}
    # Rows per combine block: decode-sized queries take one row per block and fold BLOCK_G splits
    # at a time; longer ones up to 64 rows, one split at a time.
    decode = (shape.max_seqlen_q or shape.sq) <= COMBINE_ROW_BLOCKS_UP_TO  # (the longest sequence's, in group mode)
    block_m = 1 if decode else max(16, min(64, 8192 // hd_v))
    # One BLOCK_G for every split count (one kernel variant for a package): the heuristic's most,
    # so its plans fold in one step. Modeled decode combines (us), BLOCK_G 16 / 32 / 64: gfx942
    # 32 splits 3.6 / 4.0 / 4.2, gfx1100 64 splits 6.2 / 3.3 / 2.1, gfx90a 64 splits 8.3 / 9.0 / 5.3.
    block_g = MAX_SPLITS if decode else 1
    defines = {"DT": shape.out_dtype or shape.dtype, "HDIM_V": str(hd_v), "BLOCK_M": str(block_m),
               "BLOCK_G": str(block_g),
               "VARLEN": flag[shape.varlen], "HAS_LSE": flag[shape.lse], "HAS_SINK": flag[shape.sink],
               "PAD_D": flag[hd_v != shape.hdim_v],
               **unit_defines(fmha_dim_units(shape.hdim_q, shape.hdim_v), ("D_V",))}
    # The partial outputs (our workspace) and the output (when the call's strides allow) in vectors.
    stride_units = (split_acc_stride_units(shape.hdim_v) if shape.contiguous else ()) + \
        ((("o", VECTOR_ELEMS),) if "o" in shape.aligned else ())
    options = CompileOptions.make(shape.arch, defines, unit_last_stride=shape.contiguous,
                                  disjoint_rows=shape.contiguous, stride_units=stride_units,
                                  buffer_masks=not shape.large)
    combine = library_kernel(KERNELS / "fmha_fwd_combine.tile", shape.arch, defines, options)
    return [
        Stage("producers", kernel, args + (("o_acc", Ref("o_acc")), ("lse_acc", Ref("lse_acc")))),
        Stage("combine", combine, tuple((n, Ref(n)) for n in ("o_acc", "lse_acc", "o", "lse", "sink", "cu_seqlens_q",
                                                              "batch", "max_seqlen_q"))),
    ]


@plan_builder
def build_attention_plan(shape: SplitShape) -> Plan:
    """fmha_fwd's plan: one kernel, or split-KV producers and combine over one workspace."""
    op = "fmha_fwd split-KV" if shape.num_splits > 1 else "fmha_fwd"
    if WorkspaceLayout(splitkv_workspace(shape)).size > BUFFER_REACH:
        shape = dataclasses.replace(shape, large=True)
    stages = attention_stages(shape) + ([dropout_mask_stage(shape)] if shape.dropout_mask else [])
    info = {"arch": shape.arch, "num_splits": shape.num_splits, "heads_per_block": shape.heads_per_block}
    if stages[0].kernel.manifest["constexprs"].get("PASSES", 1) == 2:
        info["query_blocks_per_workgroup"] = 2
    return Plan(op, stages, WorkspaceLayout(splitkv_workspace(shape)), info, made_for_shapes(shape),
                offsets=offset_inputs(shape))


def offset_inputs(shape: SplitShape) -> dict[str, tuple[str, int, str | None]]:
    """Group mode's cu_seqlens, checked by the plan's runners against the call's packed rows and
    max_seqlen_q (Plan.offsets): the grid covers max_seqlen_q rows of each sequence."""
    if not shape.varlen:
        return {}
    out: dict[str, tuple[str, int, str | None]] = {"cu_seqlens_q": ("q", 1, "max_seqlen_q")}
    return out if shape.kv_cache != "none" else {**out, "cu_seqlens_k": ("k", 1, None)}


def made_for_shapes(shape: SplitShape) -> dict[str, tuple[int, ...]]:
    """The inputs' shapes (the kernels' [B, S, H, D] views) that the plan's workspace and stand-ins
    follow from: Plan.shapes, which the C runtime holds a call to. The keys may be longer or shorter
    (a cache, another call's keys): the kernels' preconditions check what must agree with them."""
    b, sq, hq = shape.b, shape.sq, shape.hq
    out = {shape.q_name: (b, sq, hq, shape.hdim_q), "o": (b, sq, hq, shape.hdim_v)}
    return {**out, "lse": (b, hq, sq)} if shape.lse else out
