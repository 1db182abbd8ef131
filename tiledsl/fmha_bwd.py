"""The FMHA backward as a plan: dot_do_o -> dq_dk_dv -> convert_dq over one workspace.

`bwd_workspace` lays the workspace out (docs/backward.md has the picture): a host segment with
the split counts (and, in group mode, each sequence's dq_acc offset), the compact f32 dq_acc,
then D = rowsum(dO * O). `build_plan` compiles the three kernels for a shape signature and
returns the `Plan`; `tiledsl.ops.fmha_bwd` checks a call's arguments, builds (or reuses) its
plan and runs it.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.errors import TileError
from tiledsl.fmha_dropout import dropout_scalars
from tiledsl.kernels.fmha_configs import BIAS_KINDS, VECTOR_ELEMS, fmha_dim_units, padded_hdim, unit_defines
from tiledsl.launcher import BUFFER_REACH
from tiledsl.library import plan_builder
from tiledsl.pairing import CAUSAL_KINDS, pairs_pay
from tiledsl.pairing import paired_fits as pairing_fits
from tiledsl.plan import Plan, Ref, Region, Stage, WorkspaceLayout, align_words, unused
from tiledsl.reference import MaskParams

KERNELS = Path(__file__).resolve().parent / "kernels"
I32_MAX = 2**31 - 1


@dataclass(frozen=True)
class BwdConfig:
    block_m: int  # query rows per step of the dq_dk_dv walk
    block_n: int  # keys per dq_dk_dv workgroup (the deterministic split size)
    waves: int
    spills: bool = False  # the best tile found still spills registers (see the table's note)
    # dQ from its own walk (the kernel's DQ_LOOP): query blocks of dq_block[0] rows walking keys
    # dq_block[1] at a time; (0, 0): dQ^T computed in the key walk (K^T held, atomics or splits).
    dq_block: tuple[int, int] = (0, 0)
    stages: int = 1  # > 1: the key walk loads Q, dO (a bias tile) stages - 1 steps ahead (pipeline-loops)
    occupancy: int = 0  # waves per SIMD the dq_dk_dv kernel targets (0: the compiler's choice)
    interleave: bool = False  # dq_dk_dv with LLVM's LDS/matrix interleaving (CompileOptions.interleave)
    # Query rows (and the dQ walk's keys) past the end masked (the kernel's MASK_ROWS) rather than
    # clamped to the last one.
    mask_rows: bool = False
    # The key walk's Q and dO stagings stored together at the top of the step, behind one barrier
    # (CompileOptions.merge_stores), where the model finds it faster.
    merge_stores: bool = False
    # Transposed stagings may swizzle their rows instead of padding them (CompileOptions.lds_swizzle),
    # except where the model finds the padding faster.
    lds_swizzle: bool = True

    @property
    def dq_loop(self) -> bool:
        return self.dq_block != (0, 0)


def _b(block_m: int, block_n: int, waves: int, spills: bool = False, dq_block: tuple[int, int] = (0, 0),
       stages: int = 1, occupancy: int = 0, interleave: bool = False, mask_rows: bool = False,
       merge_stores: bool = False, lds_swizzle: bool = True) -> BwdConfig:
    return BwdConfig(block_m, block_n, waves, spills, dq_block, stages, occupancy, interleave, mask_rows, merge_stores,
                     lds_swizzle)


# dq_dk_dv tiles per arch and padded head dim, chosen with the emulator (executed wave-instructions
# per (query, key) pair, benchmarks/fmha_bwd.py; RDNA's hdim 64 rows with the timing model,
# tiledsl profile) among the tiles that compile without spills: dK and dV of BLOCK_N keys stay in
# registers for the whole walk, and more keys per workgroup amortise the per-query-block work
# (loads of Q, dO, LSE, D and the dQ adds). CDNA takes 128 keys (8 waves at hdim 128 to keep two
# waves per SIMD); RDNA, with half the registers per lane, 64. RDNA at hdim 64 walks 16 query rows
# per step with 4 waves: two (gfx1100) or three (gfx1201) workgroups share a CU where one 8-wave
# 32x64 workgroup did, and waited 41 % of its cycles at barriers with no other workgroup to run;
# modeled at B2 H16 S2048, TFLOP/s full / causal: gfx1201 75.0 -> 87.6 / 44.2 -> 70.1, gfx1100
# 40.2 -> 48.3 / 35.2 -> 40.5 (gfx1100 keeps 32x64 with a bias or dropout, below). gfx1100 at hdim
# 128 takes dQ from its own walk (64 query rows, 32 keys per step; docs/backward.md): with K^T and
# dQ^T in the key walk it spills 95-106 VGPRs with every tile (its WMMA operands are held in both
# lane halves). RDNA at hdim 256 takes dQ's own walk too, and 4 waves of 64 query rows beside 16
# keys, so that dK and dV take 64 VGPRs a lane (2 waves held 128, and K^T and dQ^T beside them spilled
# 429): spills down to 12-41 VGPRs (gfx1201 full 12, gfx1100 causal 41; `tiledsl plan fmha_bwd`), and
# modeled at B1 H16 S1024 full 4.5 -> 35.1 TFLOP/s on gfx1201 and 5.3 -> 25.5 on gfx1100 (session
# 54). Those rows still compile with spills allowed.
# stages=2: the key walk loads the next step's Q, dO (a bias tile) while this one computes (pipeline-loops;
# without it each step waited on its own loads). Modeled at B2 H16 S2048 (TFLOP/s full / causal,
# stages 1 -> 2): gfx950 d64 744.7 -> 802.4 / 381.3 -> 426.7, d128 723.8 -> 763.4 / 503.0 -> 609.7;
# gfx942 d128 330.7 -> 342.2 / 274.4 -> 286.0, d64 with occupancy 2 (the look-ahead's registers
# would leave one wave per SIMD) 409.6 -> 400.9 / 229.6 -> 243.2; gfx90a d128 87.2 -> 88.2 /
# 66.8 -> 68.3. gfx90a d64 keeps one stage: with it the paired causal variant drops to one wave
# per SIMD even with the occupancy target (77.6 -> 62.0).
# interleave (LLVM's LDS/matrix interleaving in the key walk's first dot block, docs/compiler.md),
# modeled full / causal, B2 H16 S2048 and B1 H16 S1024: gfx942 d64 401.1 -> 408.9 / 260.4 -> 273.9
# and 127.2 -> 129.4 / 66.2 -> 65.3; gfx950 d128 726.3 -> 748.7 / 549.2 -> 550.1 and 317.3 ->
# 325.8 / 156.8 -> 156.4. Not taken: gfx942 d128 (within 1.6 %), gfx950 d64 (757.1 -> 743.3 full),
# gfx90a (-1.7 % to +0.6 %).
# merge_stores (session 46, CompileOptions.merge_stores: the key walk's Q and dO stagings stored
# together at the top of the step behind one barrier, where each took its own), modeled bf16 at B2
# H16 S2048, full / causal: gfx942 d128 355.4 -> 382.8 (f16 357.4 -> 383.8) / 320.3 -> 318.4 (its
# causal variants keep the row without it: BWD_MASKED_CONFIGS); gfx950 d128 773.0 -> 817.7 (f16 the
# same) / 603.8 -> 634.3, d64 850.6 -> 876.6 (f16 857.3 -> 879.1; its masked row 609.2 -> 630.8, f16
# 610.0 -> 630.1, taken); gfx90a d128 91.7 -> 103.0 (f16 92.7 -> 102.1) / 72.2 -> 80.8 (f16 73.2 ->
# 80.4). Not taken: gfx942 d64 451.5 -> 461.5 but f16 498.7 -> 463.8 (its masked row 319.4 ->
# 312.7), gfx90a d64 116.6 -> 112.3, gfx1201 d64 107.2 -> 104.3.
BWD_CONFIGS: dict[str, dict[int, BwdConfig]] = {
    "gfx90a": {32: _b(32, 64, 4), 64: _b(32, 128, 4), 128: _b(32, 128, 8, stages=2, merge_stores=True),
               256: _b(32, 32, 4)},
    "gfx942": {32: _b(32, 64, 4),
               64: _b(32, 128, 4, stages=2, occupancy=2, interleave=True, mask_rows=True),
               128: _b(32, 128, 8, stages=2, merge_stores=True), 256: _b(32, 32, 4)},
    "gfx950": {32: _b(32, 64, 4), 64: _b(32, 128, 4, stages=2, mask_rows=True, merge_stores=True),
               128: _b(32, 128, 8, stages=2, interleave=True, mask_rows=True, merge_stores=True),
               256: _b(32, 32, 4)},
    "gfx1100": {32: _b(32, 32, 4), 64: _b(16, 64, 4), 128: _b(32, 64, 8, dq_block=(64, 32)),
                256: _b(64, 16, 4, spills=True, dq_block=(32, 32))},
    "gfx1201": {32: _b(32, 32, 4), 64: _b(16, 64, 4, lds_swizzle=False), 128: _b(32, 64, 8),
                256: _b(64, 16, 4, spills=True, dq_block=(32, 32))},
}

# Session 37, masked query rows (mask_rows: Q and dO bounded by tile.views, and the dQ walk's K and
# V, docs/compiler.md) against the clamp, modeled B2 H16 S2048 full / causal, with 16-byte vector
# access (BwdShape.aligned): gfx942 d64 432.4 -> 489.4 / 249.3 -> 241.4 (taken without a mask,
# BWD_MASKED_CONFIGS), gfx950 d64 827.2 -> 830.1 / 439.3 -> 439.4, d128 755.7 -> 757.9 / 579.0 ->
# 585.5: taken. Not taken: gfx942 d128 352.7 -> 352.6 full, 314.2 -> 309.6 causal; gfx90a d64
# causal 86.1 -> 84.7; gfx1201 d64 105.7 -> 103.9; gfx1100 d128 46.7 -> 46.8.
# Session 38, causal at hdim 64 on gfx942 and gfx950: 64-key blocks instead of 128 (twice the
# workgroups, two per CU at this shape where one ran alone and waited at its barriers; in
# deterministic mode twice the dq_acc slices): gfx942 254.1 -> 295.4, gfx950 449.3 -> 523.3. Not
# taken: gfx90a hdim 64 causal 88.0 -> 80.6, gfx950 hdim 64 full 847.8 -> 562.1; at hdim 128,
# 64 keys over 8 waves: gfx942 causal 321.8 -> 189.7, gfx950 603.0 -> 319.8.
BWD_MASKED_CONFIGS: dict[str, dict[int, BwdConfig]] = {
    "gfx942": {64: _b(32, 64, 4, stages=2, occupancy=2, interleave=True), 128: _b(32, 128, 8, stages=2)},
    "gfx950": {64: _b(32, 64, 4, stages=2, mask_rows=True, merge_stores=True)}}


# With the bias gradient (docs/bias.md), CDNA's rows at hdim 128 spill vector registers once a
# mask is on (the dS^T stores' addresses): 16 queries per step spill nothing and cost less than
# halving the keys (executed instructions, benchmarks/fmha_bias.py). A bias or ALiBi alone keeps
# the rows above but where BWD_BIAS_CONFIGS below has its own (on wave64 they spill a few scalar
# registers, into VGPR lanes, at hdim 64).
# gfx1100 at hdim 128 with the bias gradient walks dQ separately like its plain row, and its fullest
# mix (bf16, causal, soft-cap, deterministic group mode, dbias) still spills 2 VGPRs with every tile
# that tiles (64x32 keys-first: 18): compiled with spills allowed, and the table says so. At hdim 64
# gfx1100 keeps the 8-wave 32x64 tile with the gradient, as with dropout: its 16x64 4-wave row spilled
# 4-15 VGPRs there, the 32x64 one none.
BWD_DBIAS_CONFIGS: dict[str, dict[int, BwdConfig]] = {
    **{arch: {128: _b(16, 128, 8)} for arch in ("gfx90a", "gfx942", "gfx950")},
    "gfx1100": {64: _b(32, 64, 8), 128: _b(32, 64, 8, spills=True, dq_block=(64, 32))}}


# With dropout (docs/dropout.md: one Philox call per 4 consecutive query rows a lane holds), CDNA
# at hdim 64 takes 8 waves: the keep bytes' state beside 4 waves' tiles spills 33-60 scalar
# registers into VGPR lanes, 8 waves spill at most 18 and run two waves per SIMD. Elsewhere the
# rows above serve (CDNA hdim 128 spills 13-25 SGPRs, no VGPRs); RDNA at hdim 128 spills as without
# dropout on gfx1100, and dropout variants compile with spills allowed.
BWD_DROPOUT_CONFIGS: dict[str, dict[int, BwdConfig]] = {
    **{arch: {64: _b(32, 128, 8)} for arch in ("gfx90a", "gfx942", "gfx950")}, "gfx1100": {64: _b(32, 64, 8)}}


# CDNA at hdim 128: the plain row (two stages, merged LDS stores) spills VGPRs with a bias tensor
# (gfx90a 75-81, session 48's fmha_bias table; gfx942 9 with a soft-cap under a causal mask; two
# stages without merged stores still spill 9 on gfx90a); one stage spills none in any feature mix
# of tests/test_fmha_bias.py (224-254 VGPRs). gfx1100 at hdim 64 ran 32x64 over 8 waves with any
# bias; without the gradient that came to spill 31 VGPRs with an f32 bias, a soft-cap and a causal
# mask, where the plain row (16x64 over 4 waves) spills none: the gradient keeps 32x64 (above).
BWD_BIAS_CONFIGS: dict[str, dict[int, BwdConfig]] = {"gfx90a": {128: _b(32, 128, 8)}, "gfx942": {128: _b(32, 128, 8)}}


# gfx1201 at hdim 128 keeps dQ in the key walk where that spills no VGPRs (plain, causal, soft-cap,
# dropout, deterministic, group mode): modeled 1.3x faster than dQ's own walk (B1 H16 S1024 full:
# 58.9 against 44.8 TFLOP/s; the own walk computes S and dP twice). With a bias (the key walk
# spills 15 VGPRs with a bias tensor, 6 with its gradient; ALiBi goes along) and in the
# general-stride variant (4) it takes dQ's own walk.
BWD_WALK_CONFIGS: dict[str, dict[int, BwdConfig]] = {"gfx1201": {128: _b(32, 64, 8, dq_block=(64, 32))}}


def bwd_config(arch: str, hdim_q: int, hdim_v: int, dbias: bool = False, dropout: bool = False,
               bias: bool = False, contiguous: bool = True, masked: bool = False) -> BwdConfig:
    """The dq_dk_dv tile for an arch and head dims; `bias` is any bias (a tensor or ALiBi),
    `dbias` its gradient too; `contiguous`: every head dim has stride 1 (else the general-stride
    variant); `masked`: a causal or window mask."""
    hdim = max(padded_hdim(hdim_q), padded_hdim(hdim_v))
    name = get_arch(arch).name
    if (bias or dbias or not contiguous) and hdim in BWD_WALK_CONFIGS.get(name, {}):
        cfg = BWD_WALK_CONFIGS[name][hdim]
    elif dropout and hdim in BWD_DROPOUT_CONFIGS.get(name, {}):
        cfg = BWD_DROPOUT_CONFIGS[name][hdim]
    elif dbias and hdim in BWD_DBIAS_CONFIGS.get(name, {}):
        cfg = BWD_DBIAS_CONFIGS[name][hdim]
    elif (bias or dbias) and hdim in BWD_BIAS_CONFIGS.get(name, {}):
        cfg = BWD_BIAS_CONFIGS[name][hdim]
    elif masked and hdim in BWD_MASKED_CONFIGS.get(name, {}):
        cfg = BWD_MASKED_CONFIGS[name][hdim]
    else:
        cfg = BWD_CONFIGS[name][hdim]
    return _fit_waves(cfg, padded_hdim(hdim_q))


def _fit_waves(cfg: BwdConfig, hd_q: int) -> BwdConfig:
    """The rows are chosen by the larger head dim; with a much smaller D_QK (32 beside a V of 128),
    the key walk's dQ^T = K^T dS^T, [D_QK, BLOCK_M], may hold fewer 16x16 matrix tiles than the row
    has waves, which no matrix instruction can split: dQ then takes its own walk, whose dQ tile
    [64, D_QK] has enough."""
    if cfg.dq_loop or (hd_q // 16) * (cfg.block_m // 16) >= cfg.waves:
        return cfg
    return dataclasses.replace(cfg, dq_block=(64, 32))


@dataclass(frozen=True)
class BwdShape:
    """Everything a backward plan depends on (its cache key)."""

    arch: str
    dtype: str
    hdim_q: int
    hdim_v: int
    hq: int
    hk: int
    mask: MaskParams
    softcap: bool
    sink: bool
    deterministic: bool
    varlen: bool
    b: int  # tensors' batch dim (1 in group mode)
    sq: int  # tensors' sequence dim (total tokens in group mode)
    seqlens_q: tuple[int, ...]  # per sequence
    seqlens_k: tuple[int, ...]
    contiguous: bool  # every head dim has stride 1
    # The call's tensors whose strides (those passed: all but the head dim's when contiguous) are
    # multiples of 16 bytes, by the call's names (q, k, v, do, out, dq, dk, dv, bias): the stages
    # load and store them in 16-byte vectors (CompileOptions.stride_units; the launchers check).
    aligned: tuple[str, ...] = ()
    bias: str = "none"  # "tensor" (the call's "bias") or "alibi" ("alibi_slopes"), docs/bias.md
    bias_dtype: str = "f32"
    # The bias gradient: "none", or "reduce": dq_dk_dv stores dS^T into the workspace's dbias_acc,
    # then the dbias stage sums the broadcast dims in `dbias_sum` (0: batch, 1: heads), transposes
    # and casts into the call's "dbias".
    dbias: str = "none"
    dbias_sum: tuple[int, ...] = ()
    dbias_cols: int = 0  # the key columns of dbias (group mode: the bias's, >= the longest sequence)
    dropout: bool = False  # P was dropped (docs/dropout.md): the call's seed_lo .. drop_scale
    # Paired key blocks (tiledsl.pairing): "auto" where they pay and fit, "always" (kernel packages
    # build the paired variant this way: a call's sizes decide at run time).
    pair_blocks: str = "auto"
    # A tensor of the call (or the workspace) spans more than 2 GiB: no stage uses buffer accesses
    # (CompileOptions.buffer_masks, tiledsl.ops.spans_large).
    large: bool = False


def nsplits_of(shape: BwdShape, cfg: BwdConfig) -> tuple[int, ...]:
    """dq_acc slices per sequence: one per key block when deterministic, else one (atomics); one
    when dQ has its own walk (each row has one owner)."""
    if not shape.deterministic or cfg.dq_loop:
        return (1,)
    per_seq = tuple(-(-sk // cfg.block_n) for sk in shape.seqlens_k)
    return per_seq if shape.varlen else (max(per_seq, default=0),)


def bwd_workspace(shape: BwdShape, cfg: BwdConfig) -> WorkspaceLayout:
    """The unified workspace of CK's PR #6152, plus D: host segment, dq_acc, D."""
    nsplits = nsplits_of(shape, cfg)
    regions = [Region("nsplits", 0, align_words(len(nsplits)), "i32", (len(nsplits),))]
    host = struct.pack(f"<{len(nsplits)}i", *nsplits)
    at = regions[-1].words
    n_seq = len(shape.seqlens_q)
    if shape.varlen:
        per_seq = nsplits if len(nsplits) == n_seq else nsplits * n_seq
        sizes = [shape.hq * ns * sq * shape.hdim_q for ns, sq in zip(per_seq, shape.seqlens_q, strict=True)]
        offsets = [0]
        for s in sizes:
            offsets.append(offsets[-1] + s)
        regions.append(Region("offsets", at, align_words(2 * (n_seq + 1)), "i64", (n_seq + 1,)))
        host += b"\0" * (4 * at - len(host)) + struct.pack(f"<{n_seq + 1}q", *offsets)
        at += regions[-1].words
        acc_words = offsets[-1]
    else:
        acc_words = shape.b * shape.hq * nsplits[0] * shape.sq * shape.hdim_q
    # Atomics add into dq_acc; a deterministic walk skips the query blocks a mask hides: both
    # need zeros. A deterministic unmasked walk stores every element of every slice, and so does
    # dQ's own walk (every row of every sequence, zeros where no key is seen).
    zero = not cfg.dq_loop and (not shape.deterministic or shape.mask.kind != "none")
    regions.append(Region("dq_acc", at, align_words(acc_words), "f32", (acc_words,), zero=zero))
    at += regions[-1].words
    # LSE in base 2 and D per query row (dot_do_o), each followed by two blocks of rows (of the
    # walk that reads most at once) and zeroed first: dq_dk_dv reads whole blocks of rows, past a
    # sequence's end into the next rows or zeros, finite values whose P is 0 (D must be finite
    # there: dS = P * (dP - D)); a workgroup of dQ's walk with no block of its own reads the block
    # after the last one.
    rows = shape.b * shape.hq * shape.sq
    for name in ("lse2", "d"):
        regions.append(Region(name, at, align_words(rows + 2 * max(cfg.block_m, cfg.dq_block[0])), "f32",
                              (shape.b, shape.hq, shape.sq), zero=True))
        at += regions[-1].words
    if shape.dbias == "reduce":
        full = dbias_shape(shape)
        regions.append(Region("dbias_acc", at, align_words(int(np.prod(full))), "f32", full, zero=dbias_zeroed(shape)))
    layout = WorkspaceLayout(tuple(regions), host)
    if layout.size // 4 > I32_MAX:
        raise ValueError(f"the backward needs a {layout.size}-byte workspace, past the 2^31 words its kernels "
                         "address: split the call into smaller batches")
    return layout


def dbias_shape(shape: BwdShape) -> tuple[int, int, int, int]:
    """The f32 dS^T that dq_dk_dv stores, keys-major like its tiles (a lane's run of queries is
    one address): [B, Hq, Sk, Sq], group mode [1, Hq, K, total_q]."""
    return (shape.b, shape.hq, shape.dbias_cols, shape.sq)


def dbias_zeroed(shape: BwdShape) -> bool:
    """Must dS's buffer start at zero? Only a batch-mode walk without a mask stores every element
    (a mask skips query blocks; group mode leaves the columns past each sequence's keys)."""
    return shape.varlen or shape.mask.kind != "none"


def _compile(name: str, arch: str, defines: dict[str, str], shape: BwdShape, dims: tuple[str, ...] = (),
             allow_spills: bool = False, interleave: bool = False, tensors: dict[str, str] | None = None,
             merge_stores: bool = False, lds_swizzle: bool = True):
    """Compile stage `name`; `dims`: the head-dim symbols it declares (with padded head dims, their
    units are its SYM_UNIT defines, which the kernel requires to divide them); `tensors`: its tensor
    arguments by the call's names (`shape.aligned` says which are aligned)."""
    from tiledsl.library import KernelNotPrebuilt, library_kernel
    from tiledsl.options import CompileOptions
    from tiledsl.package import PackageError

    defines = {**defines, **unit_defines(fmha_dim_units(shape.hdim_q, shape.hdim_v), dims)}
    units = tuple(sorted((arg, VECTOR_ELEMS) for arg, call in (tensors or {}).items() if call in shape.aligned))
    options = CompileOptions.make(arch, defines, unit_last_stride=shape.contiguous, allow_spills=allow_spills,
                                  disjoint_rows=shape.contiguous, stride_units=units,
                                  buffer_masks=not shape.large, interleave=interleave, merge_stores=merge_stores,
                                  lds_swizzle=lds_swizzle)
    try:
        return library_kernel(KERNELS / f"{name}.tile", arch, defines, options)
    except (KernelNotPrebuilt, PackageError):  # not a compile failure: say it as it is
        raise
    except TileError as exc:
        raise TileError(f"fmha_bwd: compiling stage {name} for {arch} failed: {exc}") from None


# dq_dk_dv's tensor arguments by the call's names (_compile's `tensors`).
DQ_DK_DV_TENSORS = {name: name for name in ("q", "k", "v", "do", "dk", "dv", "bias")}


def aligned_heads(hdim_q: int, hdim_v: int) -> tuple[str, ...]:
    """The call's q, k, v, do, out and gradients that are aligned when contiguous (every stride a
    multiple of the head dim): those whose head dim is a multiple of 16 bytes."""
    q_side, v_side = hdim_q % VECTOR_ELEMS == 0, hdim_v % VECTOR_ELEMS == 0
    return tuple(n for n in ("dk", "do", "dq", "dv", "k", "out", "q", "v")
                 if (q_side if n in ("q", "k", "dq", "dk") else v_side))


def _flag(b: bool) -> str:
    return "true" if b else "false"


@plan_builder
def build_plan(shape: BwdShape) -> Plan:
    """Compile (or load from the cache) the three stages for `shape` and lay out the workspace."""
    cfg = bwd_config(shape.arch, shape.hdim_q, shape.hdim_v, shape.dbias != "none", shape.dropout,
                     shape.bias != "none", shape.contiguous, shape.mask.kind != "none")
    hd_q, hd_v = padded_hdim(shape.hdim_q), padded_hdim(shape.hdim_v)
    pad = _flag(hd_q != shape.hdim_q or hd_v != shape.hdim_v)
    per_seq = _flag(shape.deterministic and shape.varlen and not cfg.dq_loop)  # nsplits per sequence
    common = {"DT": shape.dtype, "VARLEN": _flag(shape.varlen), "WAVES": "4"}  # the elementwise stages
    workspace = bwd_workspace(shape, cfg)
    if workspace.size > BUFFER_REACH:
        shape = dataclasses.replace(shape, large=True)
    acc_base = workspace.region("dq_acc").offset
    offsets_base = workspace.region("offsets").offset if shape.varlen else 0
    batch = len(shape.seqlens_q)
    max_q, max_k = max(shape.seqlens_q, default=0), max(shape.seqlens_k, default=0)

    # The elementwise stages hold [BLOCK_M, head dim] f32 tiles: at most 8192 elements each.
    rows_v, rows_q = (str(max(16, min(64, 8192 // hd))) for hd in (hd_v, hd_q))
    dot_do_o = _compile("fmha_bwd_dot_do_o", shape.arch,
                        {**common, "HDIM_V": str(hd_v), "BLOCK_M": rows_v, "PAD_D": pad}, shape, ("D_V",),
                        tensors={"o": "out", "do": "do"})
    dq_dk_dv_defines = {
        **common, "HDIM": str(hd_q), "HDIM_V": str(hd_v), "BLOCK_M": str(cfg.block_m), "BLOCK_N": str(cfg.block_n),
        "WAVES": str(cfg.waves), "MASK": shape.mask.kind, "DETERMINISTIC": _flag(shape.deterministic),
        "PER_SEQ_SPLITS": per_seq, "SOFTCAP": _flag(shape.softcap), "BIAS": BIAS_KINDS[shape.bias],
        "BIAS_DT": shape.bias_dtype if shape.bias == "tensor" else "f32", "HAS_DBIAS": _flag(shape.dbias != "none"),
        "DROPOUT": _flag(shape.dropout), "PAD_D": pad, "STAGES": str(cfg.stages), "OCCUPANCY": str(cfg.occupancy),
        "MASK_ROWS": _flag(cfg.mask_rows)}
    if cfg.dq_loop:  # dQ's own walk is deterministic either way: one variant serves both modes
        dq_dk_dv_defines.update(DQ_LOOP="true", BLOCK_M_DQ=str(cfg.dq_block[0]), BLOCK_N_DQ=str(cfg.dq_block[1]),
                                DETERMINISTIC="false")
    spills_ok = cfg.spills or shape.bias != "none" or shape.dropout
    dq_dk_dv = _compile("fmha_bwd_dq_dk_dv", shape.arch, dq_dk_dv_defines, shape, ("D_QK", "D_V"), spills_ok,
                        cfg.interleave, DQ_DK_DV_TENSORS, cfg.merge_stores, cfg.lds_swizzle)
    paired_blocks = False
    if shape.pair_blocks == "always" or pair_key_blocks(shape, cfg, dq_dk_dv):
        paired = _compile("fmha_bwd_dq_dk_dv", shape.arch, {**dq_dk_dv_defines, "PASSES": "2"}, shape,
                          ("D_QK", "D_V"), allow_spills=True, interleave=cfg.interleave, tensors=DQ_DK_DV_TENSORS,
                          merge_stores=cfg.merge_stores, lds_swizzle=cfg.lds_swizzle)
        if shape.pair_blocks == "always" or paired_fits(shape, cfg, dq_dk_dv, paired):
            dq_dk_dv, paired_blocks = paired, True
    convert_dq = _compile("fmha_bwd_convert_dq", shape.arch,
                          {**common, "HDIM": str(hd_q), "BLOCK_M": rows_q, "PER_SEQ_SPLITS": per_seq, "PAD_D": pad},
                          shape, ("D_QK",), tensors={"dq": "dq"})
    stages = [
        Stage("dot_do_o", dot_do_o, (("o", Ref("out")), ("do", Ref("do")), ("lse", Ref("lse")), ("d", Ref("d")),
                                     ("lse2", Ref("lse2")), ("cu_seqlens_q", Ref("cu_seqlens_q")), ("batch", batch),
                                     ("max_seqlen_q", max_q))),
        Stage("dq_dk_dv", dq_dk_dv, (
            ("q", Ref("q")), ("k", Ref("k")), ("v", Ref("v")), ("do", Ref("do")), ("dk", Ref("dk")), ("dv", Ref("dv")),
            ("ws_i", Ref("ws_i")), ("ws_f", Ref("ws_f")), ("cu_seqlens_q", Ref("cu_seqlens_q")),
            ("cu_seqlens_k", Ref("cu_seqlens_k")), ("scale", Ref("scale")), ("softcap", Ref("softcap")),
            ("window_left", shape.mask.left), ("window_right", shape.mask.right), ("acc_base", acc_base),
            ("lse2_base", workspace.region("lse2").offset), ("d_base", workspace.region("d").offset),
            ("offsets_base", offsets_base), ("batch", batch), ("max_seqlen_q", max_q),
            ("max_seqlen_k", max_k),
            *_bias_args(shape), *dropout_scalars(shape.dropout))),
        Stage("convert_dq", convert_dq, (
            ("dq", Ref("dq")), ("ws_i", Ref("ws_i")), ("ws_f", Ref("ws_f")), ("cu_seqlens_q", Ref("cu_seqlens_q")),
            ("scale", Ref("scale")), ("acc_base", acc_base), ("offsets_base", offsets_base), ("batch", batch),
            ("max_seqlen_q", max_q))),
    ]
    if shape.sink:
        dsink = _compile("fmha_bwd_dsink", shape.arch, {"VARLEN": _flag(shape.varlen)}, shape)
        stages.append(Stage("dsink", dsink, (("lse", Ref("lse")), ("d", Ref("d")), ("sink", Ref("sink")),
                                             ("dsink", Ref("dsink")), ("cu_seqlens_q", Ref("cu_seqlens_q")),
                                             ("batch", batch))))
    if shape.dbias == "reduce":
        flags = {"DT": shape.bias_dtype, "SUM_B": _flag(0 in shape.dbias_sum), "SUM_H": _flag(1 in shape.dbias_sum)}
        dbias = _compile("fmha_bwd_dbias", shape.arch, flags, shape)
        stages.append(Stage("dbias", dbias, (("acc", Ref("dbias_acc")), ("dbias", Ref("dbias")))))
    nsplits = nsplits_of(shape, cfg)
    info = {"arch": shape.arch, "deterministic": shape.deterministic,
            "nsplits": nsplits[0] if len(nsplits) == 1 else list(nsplits),
            "tiles": f"{cfg.block_m}x{cfg.block_n}x{cfg.waves}"}
    if cfg.dq_loop:
        info["dq_walk"] = f"{cfg.dq_block[0]}x{cfg.dq_block[1]}"
    if paired_blocks:
        info["key_blocks_per_workgroup"] = 2
    if shape.bias != "none":
        info["bias"] = shape.bias
    if shape.dropout:
        info["dropout"] = True
    if shape.dbias != "none":
        info.update(dbias=shape.dbias, dbias_zeroed=dbias_zeroed(shape))
    values = {}
    if shape.varlen:  # the split counts and workspace offsets follow from the sequence lengths
        values = {"cu_seqlens_q": tuple(int(x) for x in np.cumsum((0, *shape.seqlens_q))),
                  "cu_seqlens_k": tuple(int(x) for x in np.cumsum((0, *shape.seqlens_k)))}
    return Plan("fmha_bwd", stages, workspace, info, made_for_shapes(shape), values)


def made_for_shapes(shape: BwdShape) -> dict[str, tuple[int, ...]]:
    """The inputs' shapes (the kernels' [B, S, H, D] views) that the plan's host segment, split
    counts and workspace follow from: Plan.shapes, which the C runtime holds a call to. In group
    mode the key tensors may hold rows past the last sequence, so only the query side's are fixed
    (and cu_seqlens' lengths; their values are Plan.values)."""
    b, sq, hq, hk, d, dv = shape.b, shape.sq, shape.hq, shape.hk, shape.hdim_q, shape.hdim_v
    out = {"q": (b, sq, hq, d), "dq": (b, sq, hq, d), "do": (b, sq, hq, dv), "out": (b, sq, hq, dv),
           "lse": (b, hq, sq)}
    if shape.varlen:
        return {**out, "cu_seqlens_q": (len(shape.seqlens_q) + 1,), "cu_seqlens_k": (len(shape.seqlens_k) + 1,)}
    sk = shape.seqlens_k[0] if shape.seqlens_k else 0
    return {**out, "k": (b, sk, hk, d), "dk": (b, sk, hk, d), "v": (b, sk, hk, dv), "dv": (b, sk, hk, dv)}


def pair_key_blocks(shape: BwdShape, cfg: BwdConfig, kernel: Any) -> bool:
    """Whether dq_dk_dv's workgroups take two key blocks each (x and nblocks - 1 - x, the
    kernel's PASSES = 2): key block x walks about nblocks - x query blocks under a causal mask
    (tiledsl.pairing)."""
    workgroups = -(-max(shape.seqlens_k, default=0) // cfg.block_n) * shape.hk * len(shape.seqlens_k)
    return pairs_pay(shape.arch, shape.mask.kind, workgroups, kernel.manifest, cfg.waves)


def paired_fits(shape: BwdShape, cfg: BwdConfig, unpaired: Any, paired: Any) -> bool:
    """The paired kernel costs no occupancy and no scratch (tiledsl.pairing.paired_fits)."""
    nblocks = -(-max(shape.seqlens_k, default=0) // cfg.block_n)
    return pairing_fits(shape.arch, cfg.waves, unpaired.manifest, paired.manifest,
                        -(-nblocks // 2) * shape.hk * len(shape.seqlens_k))


def _bias_args(shape: BwdShape) -> tuple[tuple[str, object], ...]:
    """dq_dk_dv's bias, alibi_slopes and dbias: the call's (or the workspace's) when used, else
    zero stand-ins."""
    bias = Ref("bias") if shape.bias == "tensor" else unused((1, 1, 1, 1), "f32")
    slopes = Ref("alibi_slopes") if shape.bias == "alibi" else unused((1, shape.hq), "f32")
    dbias = Ref("dbias_acc") if shape.dbias == "reduce" else unused((1, 1, 1, 1), "f32")
    return (("bias", bias), ("alibi_slopes", slopes), ("dbias", dbias))


def plan_from_sizes(arch: str, *, dtype: str, hdim_q: int, hdim_v: int, hq: int, hk: int,
                    seqlens_q: tuple[int, ...], seqlens_k: tuple[int, ...], varlen: bool, mask: MaskParams,
                    softcap: bool = False, sink: bool = False, deterministic: bool = False,
                    contiguous: bool = True, bias: str = "none", bias_dtype: str = "f32", dbias: str = "none",
                    dbias_sum: tuple[int, ...] = (), dropout: bool = False, pair_blocks: str = "auto",
                    aligned: tuple[str, ...] | None = None) -> Plan:
    """The backward plan for sizes alone (what `tiledsl plan fmha_bwd` prints): no tensors needed.
    aligned: the tensors whose strides are multiples of 16 bytes (default: those of contiguous
    tensors, `aligned_heads`, and a bias, whose rows the ops pad).
    pair_blocks: "auto" (the sizes decide, tiledsl.pairing) or "always" (a causal mask's paired
    key blocks whatever the sizes)."""
    if pair_blocks not in ("auto", "always"):
        raise ValueError(f"pair_blocks: expected auto or always, got {pair_blocks!r}")
    if dtype not in ("f16", "bf16"):
        raise ValueError(f"dtype: expected f16 or bf16, got {dtype}")
    for name, d in (("hdim_q", hdim_q), ("hdim_v", hdim_v)):
        if not 1 <= d <= 256:
            raise ValueError(f"{name}: expected 1..256, got {d}")
    if hk < 1 or hq < 1 or hq % hk:
        raise ValueError(f"heads: the query heads ({hq}) must be a positive multiple of the kv heads ({hk})")
    if len(seqlens_q) != len(seqlens_k) or not seqlens_q:
        raise ValueError("seqlens: expected one query and one key length per sequence")
    b, sq = (1, sum(seqlens_q)) if varlen else (len(seqlens_q), seqlens_q[0])
    return build_plan(BwdShape(arch=arch, dtype=dtype, hdim_q=hdim_q, hdim_v=hdim_v, hq=hq, hk=hk, mask=mask,
                               softcap=softcap, sink=sink, deterministic=deterministic, varlen=varlen, b=b, sq=sq,
                               seqlens_q=tuple(seqlens_q), seqlens_k=tuple(seqlens_k), contiguous=contiguous,
                               bias=bias, bias_dtype=bias_dtype, dbias=dbias, dbias_sum=dbias_sum,
                               dbias_cols=max(seqlens_k) if dbias != "none" else 0, dropout=dropout,
                               pair_blocks=pair_blocks if mask.kind in CAUSAL_KINDS else "auto",
                               aligned=tuple(sorted(aligned if aligned is not None else
                                                    aligned_heads(hdim_q, hdim_v) + ("bias",) * (bias == "tensor")))))
