"""Per-arch tile configurations of the FMHA forward kernel (`fmha_fwd.tile`).

One row per (arch, padded head dim); masked variants (causal, window) have their own rows where
they differ. Chosen with `benchmarks/fmha_tune.py`, which compiles candidates under every
feature mix a row serves (tests/_fmha_util.py) plus the plain contiguous variant: among those
that spill no VGPRs in any mix, spill SGPRs (into VGPR lanes) only outside every loop, where they
cost a few moves per workgroup, and fit the arch's LDS, the rows for
hdim 64 and 128 are the ones with the highest modeled TFLOP/s (`--model`, the emulator's timing
model at B 2, H 16, S 2048), the others the fewest instructions per MFMA/WMMA;
`tests/test_fmha_compile.py` re-checks the rows for hdim 64 and 128. Why the rows look the way
they do, with today's compiler:

* Scores use the transposed accumulator, so P stays in registers for P @ V on CDNA and gfx12,
  and K/V fragments are read from LDS next to each matrix instruction: registers grow with
  BLOCK_M * BLOCK_N (scores) and BLOCK_M * HDIM (accumulator) per wave.
* CDNA (wave64, 512 VGPR+AGPR per lane, 32x32 MFMA): 32 query rows per wave, STAGES 2 (the
  next K/V tile is loaded while this one computes), and the last field, occupancy 2: the
  kernel's registers are capped at 256 so two waves share each SIMD and hide each other's LDS
  and memory waits (the timing model found one wave per SIMD waiting on LDS 39 % of its
  cycles). That needs BLOCK_N 64 at hdim 128 (128x128 takes 316 VGPRs), and two workgroups per
  CU need at most half of the CU's LDS: Q is loaded straight into its MFMA operand layout
  (assign-layouts), so only K's or V's staging (17 KiB) takes LDS. At hdim 64, 128x128 in
  one stage fits two waves by itself (288 VGPRs on the plain variant; 256x128 over 8 waves
  models faster on gfx950, but 8 waves cap a wave at 256 VGPRs whatever the target, and the
  general-stride and ALiBi variants spill there: it is a WIDE row, below, for plain variants
  with grids large enough). Masked rows are smaller because the mask's registers and the feature
  mixes (soft-cap, group mode, padded dims) must not spill; where a mix cannot reach occupancy
  2 without spilling, the driver compiles it for 1 (the occupancy clause is a target:
  docs/language.md). Modeled (B 2, H 16, S 2048, f16), one wave per SIMD to two (with the
  unmasked look-ahead of pipeline-loops): gfx942 d128 371 -> 561 TFLOP/s, causal 184 -> 248,
  d64 301 -> 475, causal 191 -> 208; gfx950 d128 650 -> 987, causal 321 -> 481, d64 669 ->
  737, causal 291 -> 339; gfx90a d128 103 -> 126, causal 67 -> 82, d64 90 -> 126, causal 74
  -> 84.
* The scale of plain logits joins exp2's argument as one fma per element (`SCALE_IN_EXP2`, on
  archs with packed f32 math: CDNA), where a multiply and a subtract were: gfx942 d128 560 ->
  590 TFLOP/s, causal 359 -> 363, d64 475 -> 502, causal 299 -> 311; gfx950 d128 1017 -> 1088,
  causal 578 -> 619, d64 744 -> 765, causal 477 -> 502 (the rows above unchanged). On RDNA a
  row chooses (`FmhaConfig.fused_scale`): gfx1100's rows take it (session 42, f16 B 2, H 16,
  S 2048: d64 89.5 -> 92.3, causal 82.9 -> 85.1, d128 92.7 -> 92.9, causal 87.6 -> 88.8;
  bf16 89.1 -> 90.7, 83.4 -> 83.1, 91.9 -> 92.6, 87.5 -> 87.4), gfx1201's, whose multiplies and
  subtracts LLVM pairs in dual-issue instructions, do not (d64 148.0 -> 137.5, causal 124.0 ->
  120.2, d128 146.1 -> 145.5, causal 139.7 -> 137.8).
* RDNA (wave32, 256 VGPRs, 16x16 WMMA): 16 query rows per wave, 4 or 8 waves per workgroup and
  several workgroups per CU, which hide load latency without a prefetch: STAGES 1 (STAGES 2
  costs registers, and spills at 128x128); key blocks of 32 at hdim 64/128 (fewer registers
  and less LDS, so more waves share a SIMD). The second wave axis splits the keys when BLOCK_M
  is 64 over 8 waves (cross-wave row reductions through LDS). gfx11 holds WMMA operands twice (both
  lane halves): Q is held in registers at twice its size, or kept resident in LDS where the
  registers would cost waves per SIMD (the driver compiles both ways then: hdim 64; hoist-
  conversions). In registers at hdim 128 it frees the LDS that kept a CU at two workgroups:
  modeled 73.6 -> 80.5 TFLOP/s, causal 60.3 -> 64.4 (session 29).
* The mask is a compare and select per element, computed from per-row and per-column vectors
  inside the masked branch, and padded head dims load whole vectors under one mask test each
  (the head-dim units the kernel requires), so masked and padded variants mostly run the unmasked tiles.
* hdim 256: BLOCK_N 32 (16 on gfx1100 when masked) keeps K and V tiles within 64 KiB of LDS
  and the registers unspilled; gfx950 has the LDS (160 KiB) for 128x64.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.errors import TileError
from tiledsl.reference import MaskParams

HDIMS = (32, 64, 128, 256)  # padded head dims (tile widths) with a row per arch
VECTOR_ELEMS = 8  # f16/bf16 elements in one 16-byte vector access
# The API's bias kinds and the BIAS constexpr each selects (fmha_fwd.tile, fmha_bwd_dq_dk_dv.tile).
BIAS_KINDS = {"none": "none", "tensor": "elementwise", "alibi": "alibi"}


@dataclass(frozen=True)
class FmhaConfig:
    block_m: int
    block_n: int
    waves: int
    stages: int
    occupancy: int = 0  # waves per SIMD the kernel is compiled to fit (occupancy(...)); 0: LLVM's choice
    # Two stages whose next K/V tiles are loaded after the current ones' last use, into their
    # registers (the loop's stages(2, reuse=true)): no copy per iteration, less latency hidden.
    reuse: bool = False
    # Query rows past the end of the sequence masked (MASK_ROWS) rather than clamped to its last
    # row: fewer instructions everywhere, faster only in some rows (fmha_fwd.tile says where).
    mask_rows: bool = False
    # Keys past the end of the sequence masked (MASK_KEYS: the compiler bounds them with the K/V
    # buffer descriptors, tiledsl/ir/row_view.py) rather than clamped to its last key, where the
    # model finds it faster (fmha_fwd.tile says where).
    mask_keys: bool = False
    # LLVM's scheduler for this row (CompileOptions.schedule; "" its default), where the model
    # finds another one faster.
    schedule: str = ""
    # LLVM's LDS/matrix interleaving in the key loop (CompileOptions.interleave), where the model
    # finds it faster.
    interleave: bool = False
    # A running max that moves only by more than 8 (fmha_fwd.tile's LAZY), and the compiler's skip
    # of the accumulator's rescale in the waves where it is 1 (CompileOptions.skip_unit_scales),
    # where the model finds them faster. Not for fp8 (its P would not fit e4m3): dropped there.
    lazy_rescale: bool = False
    # gfx11's P tile from the WMMA accumulator to an operand by register exchanges between the
    # lanes 16 apart (CompileOptions.lane_exchange) rather than through LDS, where the model finds
    # it faster.
    lane_exchange: bool = False
    # The next key block's scores computed before this block's softmax (fmha_fwd.tile's OVERLAP),
    # so the matrix unit has work beside the exponentials, where the model finds it faster.
    overlap: bool = False
    # The scale of plain logits joins exp2's argument as one fma per element (fmha_fwd.tile's
    # SCALE_IN_EXP2) instead of a multiply and a subtract; None: where the arch has packed f32
    # math (CDNA: one v_pk_fma_f32 per two logits). RDNA can pair the multiply and the subtract in
    # dual-issue instructions, which an fma cannot join: gfx1201 keeps them, gfx1100's rows, whose
    # pairs LLVM mostly leaves single, take the fma where the model finds it faster.
    fused_scale: bool | None = None
    # The key loop's K and V stagings in LDS bytes of their own, each behind one barrier instead of
    # two (CompileOptions.loop_arena), where the model finds it faster.
    loop_arena: bool = False
    # f16's P rounded toward zero for P V (fmha_fwd.tile's P_TOWARD_ZERO: one v_cvt_pkrtz_f16_f32
    # per pair against three instructions to nearest even; P lifted by its mean loss first, so the
    # output is as accurate), where the model finds it faster.
    p_toward_zero: bool = False
    # The softmax's row sums as trees of adds (CompileOptions.tree_sums), where the model finds it
    # faster.
    tree_sums: bool = False
    # Reductions across a wave's halves (wave64) or rows of 16 (wave32) by permlanes
    # (CompileOptions.swap_halves) rather than shuffles through LDS, except where the model finds
    # the shuffles faster.
    swap_halves: bool = True
    # With lane_exchange: the scores' keys relabelled so that the exchange moves whole words by
    # ds_swizzle_b32 (CompileOptions.swizzle_exchange), where the model finds it faster.
    swizzle_exchange: bool = False
    # An LDS store's 16-bit pairs from two words packed by v_perm_b32 (CompileOptions.pack_by_perm),
    # where the model finds it faster.
    pack_by_perm: bool = False
    # Transposed stagings (V) may swizzle their rows instead of padding them
    # (CompileOptions.lds_swizzle), except where the model finds the padding faster.
    lds_swizzle: bool = True

    def __post_init__(self) -> None:
        if self.reuse and self.stages != 2:
            raise ValueError(f"a config with reuse needs 2 stages, got {self.stages}")

    def defines(self) -> dict[str, str]:
        d = {"BLOCK_M": str(self.block_m), "BLOCK_N": str(self.block_n), "WAVES": str(self.waves),
             "STAGES": str(self.stages), "OCCUPANCY": str(self.occupancy)}
        if self.reuse:
            d["REUSE"] = "true"
        if self.mask_rows:
            d["MASK_ROWS"] = "true"
        if self.mask_keys:
            d["MASK_KEYS"] = "true"
        if self.lazy_rescale:
            d["LAZY"] = "true"
        if self.overlap:
            d["OVERLAP"] = "true"
        if self.p_toward_zero:
            d["P_TOWARD_ZERO"] = "true"
        return d

    def scheduling(self) -> dict[str, str | bool]:
        """The CompileOptions fields of this row's asks of the compiler beyond its defaults: LLVM's
        scheduler and interleaving, the skipped rescale of a lazy softmax, lane exchanges, the loop
        arena, tree sums and permlane reductions."""
        return {"schedule": self.schedule, "interleave": self.interleave, "skip_unit_scales": self.lazy_rescale,
                "lane_exchange": self.lane_exchange, "loop_arena": self.loop_arena, "tree_sums": self.tree_sums,
                "swap_halves": self.swap_halves, "swizzle_exchange": self.swizzle_exchange,
                "pack_by_perm": self.pack_by_perm, "lds_swizzle": self.lds_swizzle}


def _c(block_m: int, block_n: int, waves: int, stages: int, occupancy: int = 0, reuse: bool = False,
       mask_rows: bool = False, schedule: str = "", interleave: bool = False,
       lazy_rescale: bool = False, mask_keys: bool = False, lane_exchange: bool = False,
       overlap: bool = False, fused_scale: bool | None = None, loop_arena: bool = False,
       p_toward_zero: bool = False, tree_sums: bool = False, swap_halves: bool = True,
       swizzle_exchange: bool = False, pack_by_perm: bool = False, lds_swizzle: bool = True) -> FmhaConfig:
    return FmhaConfig(block_m, block_n, waves, stages, occupancy, reuse, mask_rows, mask_keys, schedule, interleave,
                      lazy_rescale, lane_exchange, overlap, fused_scale, loop_arena, p_toward_zero, tree_sums,
                      swap_halves, swizzle_exchange, pack_by_perm, lds_swizzle)


# CONFIGS[arch][padded hdim] -- keyed by max(padded HDIM, padded HDIM_V). `reuse` rows load the next
# K/V tiles into the current ones' registers (stages(2, reuse=true)). Re-tuned after the version-
# masks and fold-scalars-laid-out passes (benchmarks/fmha_tune.py --model), modeled f16 TFLOP/s at B
# 2, H 16, S 2048, old row -> new: gfx950 hdim 128 128x64 two stages 1089.1 -> 1158.2 with reuse,
# causal 625.0 -> 741.6 with reuse (it lost before: 657.5 -> 574.7); gfx90a hdim 64 128x128 one
# stage 129.2 -> 128x64 two stages with reuse 142.3; gfx942 hdim 64 128x128 one stage 490.1 -> two
# stages with reuse 522.3 (517.5 without). gfx90a hdim 128 causal 128x32 84.3 -> 128x64
# 96.3 with reuse (94.2 without), taken in session 29 for unpadded head dims: with padded ones
# (the PADDED row) its masked loads spill SGPRs as buffer accesses and become branches (hdim 80
# causal 56.2 -> 50.6; the test mix with group mode and soft-cap spilled 2 SGPRs outside the key
# loop and modeled level, 52.6 -> 52.4 at hdim 96). Reuse still loses in:
# gfx942 hdim 64 causal 328.7 -> 320.7, hdim 128 causal 411.1 -> 389.9, hdim 128 604.9 -> 577.5
# without (kept); gfx950 hdim 64 causal 522.8 -> 512.3; gfx950's WIDE hdim 64 row 846.9 -> 798.3.
# The RDNA rows at hdim 64 and 128, chosen by instruction counts before, were tuned with the model
# too: smaller key blocks (32) and, where it models faster, 4 waves instead of 8 (the 8-wave
# workgroups waited at their barriers a third of their cycles). gfx1100 hdim 64 58.9 -> 80.1
# (64x32, 4 waves), causal 49.8 -> 60.0, hdim 128 64.5 -> 69.8 (64x32, 8 waves), causal 50.4 ->
# 59.1; gfx1201 hdim 64 111.6 -> 128.7 (128x32, 4 waves), causal 79.1 -> 91.8 (64x64, 4 waves),
# hdim 128 107.5 -> 115.0 (64x32, 4 waves), causal 85.3 -> 94.4. Masked query rows (mask_rows,
# session 25) where the model finds them faster and no feature mix spills: gfx950 hdim 128 1158.2
# -> 1206.2, causal 741.6 -> 770.4; gfx942 hdim 128 604.9 -> 610.8; gfx1100 hdim 64 causal 60.0 ->
# 69.3 (its MASKED row); gfx1201 hdim 64 causal 91.8 (64x64) -> 98.6 (128x32, its MASKED row,
# 64x64 would model 92.5). Not taken: gfx942 hdim 64 522.3 -> 465.7, causal 328.7 -> 325.9, hdim 128
# causal 411.1 -> 421.1 but 4 SGPRs spilled in a mix; the other rows within 1 %. With V stored to
# LDS 4 keys at a time on RDNA too (assign-layouts' transposed rows, session 26): gfx1201 hdim 128
# 115.0 -> 131.1, causal 94.4 -> 113.5; gfx1100 hdim 64 80.1 -> 82.3, causal 69.3 -> 70.9, and its
# hdim 128 row 64x32 with 8 waves -> 4 waves: 69.8 -> 73.6, causal 59.1 -> 60.3 (8 waves 69.3 and
# 57.5; 128x64 with 8 waves 65.6). gfx1201 hdim 64 128.7 -> 127.1 (64x32 119.8, 128x64 105.5).
# LLVM's iterative ILP scheduler (FmhaConfig.schedule, session 27) keeps the next K fragment's LDS
# reads in flight during the current MFMAs, which the default scheduler serialises (read, wait,
# two MFMAs): gfx942 hdim 128 610.8 -> 664.5, causal 411.1 -> 434.6. Elsewhere it models slower
# or equal (equal where it spills and the driver falls back to the default): gfx950 hdim 128
# 1206.2 -> 1142.2, causal 770.4 -> 763.7; gfx90a 0.7-6 % slower; gfx1100 hdim 64 82.3 -> 76.7,
# causal 70.9 -> 59.4; gfx1201 hdim 128 131.1 -> 126.3. LLVM's max-ilp: gfx1201 hdim 64 127.1 ->
# 130.6 (iterative-ilp 125.1); gfx942 hdim 128 621.5, causal 377.7; gfx90a within 1.1 %; gfx950
# hdim 128 causal 542.1. max-memory-clause: within 0.4 % or slower in every cell (gfx1100 hdim 64
# 82.3 -> 78.0, causal 70.9 -> 61.3). Two stages with reuse did better on gfx1201 hdim 64: 127.1 -> 135.4 with
# LLVM's default scheduler (max-ilp 129.1; with masked rows 135.6, and iterative-ilp 136.2), taken;
# its causal row loses (98.5 -> 96.2), as do gfx1201 hdim 128 causal (113.5 -> 107.8), gfx1100 hdim
# 64 (82.3 -> 79.2) and 128 (73.6 -> 70.8); gfx1201 hdim 128 131.1 -> 131.9 (within 1 %, kept).
# With gfx11's Q tile held in registers (session 29, hoist-conversions), gfx1100's hdim 128 row
# takes 64-key blocks: 64x32 80.5 -> 64x64 82.5, causal 64.4 -> 67.7 (B 4, H 32, S 4096: 86.1 ->
# 87.5; B 1, H 16, S 1024: 67.1 -> 68.0); the other candidates stay below (fmha_tune.py --model).
# LLVM's LDS/matrix interleaving in the key loop's S = Q.K^T block (interleave, session 30,
# docs/compiler.md) on CDNA, modeled f16 TFLOP/s without -> with, at B 2, H 16, S 2048; B 4, H 32,
# S 4096; B 1, H 16, S 1024: gfx942 hdim 64 522.3 -> 530.8, 659.6 -> 668.5, 193.5 -> 209.2, causal
# 328.7 -> 339.2, 531.9 -> 540.1, 86.0 -> 83.7; hdim 128 664.5 -> 675.0, 850.3 -> 861.3, 243.9
# -> 243.8; gfx950 hdim 64 (WIDE at the larger shapes) 870.4 -> 881.3, 902.3 -> 914.2, 246.6 ->
# 288.3, causal 545.5 -> 570.1, 708.1 -> 739.0, 129.7 -> 130.7; hdim 128 1242.3 -> 1262.9,
# 1389.0 -> 1423.4, 417.5 -> 450.8; gfx90a hdim 64 142.3 -> 148.3, 159.0 -> 167.3, 78.9 -> 81.6,
# causal 97.9 -> 99.9, 141.5 -> 145.6, 44.1 -> 46.1; hdim 128 144.9 -> 149.1, 158.7 -> 163.6, 85.2
# -> 86.1, causal 96.3 -> 98.6, 149.7 -> 153.8, 60.0 -> 61.5. Not taken: gfx950 hdim 128 causal
# (778.2 -> 675.1: its MASKED row is CONFIGS' without it), gfx942 hdim 128 causal (with the ILP
# scheduler it spills and the driver falls back to LLVM's defaults), RDNA (gfx1201 hdim 64 135.4
# -> 117.8, gfx1100 hdim 64 82.3 -> 78.6).
# With the forward's key end written plainly (session 31: i32 compares keep their scalar operand,
# rule_clone in passes/lower_to_gpu.py) gfx1100's hdim 64 row models 82.3 -> 80.8; with masked
# query rows, as its MASKED row has, 81.9 (64x64 77.0, with masked rows 76.1; 128x32 over 8 waves
# 71.0; max-ilp 80.4), so CONFIGS takes them and the MASKED row is the same. Masked rows elsewhere
# model within 0.5 % (gfx942 hdim 64 531.7 -> 531.6, gfx1201 hdim 64 133.1 both ways and hdim 128
# 132.7 -> 133.2, gfx1100 hdim 128 82.9 -> 82.1; gfx90a hdim 64 causal 100.6 both ways, gfx950
# hdim 64 causal 572.6 -> 569.2): not taken.
ILP = "iterative-ilp"
# The lazy softmax rescale (lazy_rescale, session 32: a running max that moves only by more than 8,
# and the rescale skipped in the waves where it is 1; docs/compiler.md), modeled f16 TFLOP/s at B 2,
# H 16, S 2048 on standard normal inputs, without -> with: gfx950 hdim 128 1253.5 -> 1307.2, causal
# 778.2 -> 789.0; gfx1100 hdim 64 81.9 -> 83.4 (causal 70.9 -> 62.2: its MASKED row goes without).
# Not taken, the branch splitting the loop's scheduling region costs more than the multiplies:
# gfx942 hdim 64 531.7 -> 523.1, hdim 128 681.2 -> 667.7 (causal within 0.3 %); gfx950 hdim 64
# 934.9 -> 931.4, causal 572.6 -> 544.4; gfx90a 0.4-1.2 % slower; gfx1100 hdim 128 level; gfx1201
# hdim 64 133.1 -> 131.7, causal 99.7 -> 89.1, hdim 128 132.7 -> 130.2, causal 113.5 -> 108.6.
# Re-measured in session 32, gfx942's hdim 64 row now models faster without the interleaving it took
# in session 30 (before session 31's key-end and barrier changes): 531.7 -> 553.4 at B 2, H 16, S
# 2048, 664.5 -> 694.0 at B 4, H 32, S 4096, but 209.6 -> 198.7 at B 1, H 16, S 1024 (a grid below
# the CU count); taken. With the lazy rescale as well 535.0. The other CDNA rows keep it (without:
# gfx942 hdim 64 causal 342.6 -> 333.5, hdim 128 681.2 -> 669.4; gfx90a 1.5-3 % slower).
# Since barriers order LDS only (session 33, lower_to_gpu.lds_barrier: RDNA's barriers had waited
# for every outstanding global load), RDNA's look-ahead loads overlap a whole step and two stages
# with reuse pay there, modeled f16 TFLOP/s at B 2, H 16, S 2048, old row -> new (both with the new
# barriers): gfx1201 hdim 64 135.6 -> 138.5 (128x32 two stages without reuse, 137.3 under LLVM's
# default scheduler, 138.5 under max-ilp; B 1, H 16, S 1024 122.9 -> 123.8; three stages 133.4),
# causal 99.7 -> 101.7; hdim 128 133.4 -> 141.8 (64x32 two stages, reuse, lazy
# rescale; 136.9 without it; B 1 123.2 -> 133.0), causal stays one stage (114.4; two 111.0, with
# reuse 112.2); gfx1100 hdim 64 83.5 -> 86.1 (64x32 two stages, reuse, lazy; B 1 64.8 -> 69.5),
# causal 67.8 -> 69.4; hdim 128 83.0 -> 89.5 (64x32 two stages, reuse, lazy; 88.5 without it; B 1
# 69.6 -> 75.5), causal 68.5 -> 70.8.
# Session 34, reuse together with the lazy rescale where a row had neither or one (each alone had
# modeled level or slower on these rows), old -> new at B 2, H 16, S 2048 (B 1, H 16, S 1024;
# B 4, H 32, S 4096): gfx1201 hdim 64 138.5 -> 142.6 (123.8 -> 128.3; 143.0 -> 146.7), causal
# 101.7 -> 105.0 (83.7 -> 87.5; 129.5 -> 127.8); gfx942 hdim 128 causal 434.6 -> 454.3 (107.9 ->
# 106.9; 658.5 -> 691.2); gfx942 hdim 64 causal takes reuse alone, 342.6 -> 394.0 (84.4 -> 102.7;
# 541.2 -> 584.0; with the lazy rescale too 334.2). No spills in any feature mix (fmha_tune's
# measure). Not taken: gfx950 hdim 64 causal (572.6 -> 505.9 with reuse, 497.2 with both), gfx1201
# hdim 128 causal with the lazy rescale (114.4 -> 107.9), gfx1201 hdim 64 causal with reuse alone
# (95.1), gfx942 hdim 64 with both (553.4 -> 535.0). Masked RDNA rows with both, taken: gfx1201
# hdim 128 causal 114.4 -> 118.8 (two stages; B 1 96.0 -> 111.0), gfx1100 hdim 64 causal 69.4 ->
# 71.7 (B 1 39.9 -> 40.6); gfx90a's causal rows with the lazy rescale lose (100.6 -> 99.4, 98.6 ->
# 98.2).
# Session 35, masked keys (mask_keys: K/V bounded by tile.views, docs/compiler.md), clamped ->
# masked at B 2, H 16, S 2048: gfx942 hdim 64 553.4 -> 574.9, gfx90a hdim 64 149.2 -> 152.8,
# gfx1201 hdim 64 142.6 -> 148.0, hdim 128 141.8 -> 146.1 (causal, the same row, 118.8 -> 123.8),
# gfx1100 hdim 64 86.1 -> 87.6, hdim 128 89.5 -> 90.1 (MASKED causal row 70.8 -> 71.2). Slower, not
# taken: gfx942 hdim 128 681.2 -> 662.7, gfx950 hdim 128 1307.2 -> 1304.1, WIDE 957.5 -> 914.0,
# the CDNA causal rows (gfx942 394.0 -> 316.2, 454.3 -> 352.0; gfx950 572.6 -> 493.2, 789.0 ->
# 636.4; gfx90a hdim 128 98.6 -> 88.0), gfx1100 hdim 64 causal 71.7 -> 65.2 (its MASKED row is
# CONFIGS' row without them).
# Session 36: the CDNA causal rows' loss was the driver's. At that shape they run the paired variant
# (PASSES 2), which spills SGPRs with the views' descriptors outside the key loop, and the driver
# compiled every masked access as a branch then, the key loop's K/V loads included; it now keeps
# buffer accesses where the branches would enter the hot loop (driver.hot_cost). Clamped -> masked
# keys at B 2, H 16, S 2048 (B 4, H 32, S 4096), taken: gfx942 hdim 64 causal 394.0 -> 394.1 (584.0
# -> 603.9), hdim 128 causal 454.3 -> 463.2 with interleave instead of the ILP scheduler (691.2 ->
# 716.7; clamped with interleave 451.8), gfx950 hdim 128 1306.7 -> 1328.8 (1491.2 -> 1523.6), causal
# 773.6 -> 774.3, gfx90a hdim 128 148.8 -> 149.6. Not taken: gfx950 hdim 64 causal 572.6 -> 501.4
# (501.0 with reuse, 501.4 with iterative-ilp or without interleave), WIDE 957.5 -> 925.6, gfx942
# hdim 128 675.9 -> 674.0, gfx90a hdim 64 causal 100.6 -> 99.8, hdim 128 causal 98.6 -> 98.4,
# gfx1100 hdim 64 causal 71.7 -> 69.0. None of the taken rows spills in any feature mix.
# Session 38, gfx11's P tile (docs/compiler.md) at B 2, H 16, S 2048: through LDS with a barrier ->
# wave-private staging (for every row) -> register exchanges (lane_exchange), gfx1100 hdim 64 87.6
# -> 88.7 -> 89.5, causal 71.7 -> 71.0 -> 72.0, hdim 128 90.1 -> 90.9 -> 91.5, taken; hdim 128
# causal 71.2 -> 74.3 -> 72.2, not taken.
# Session 39, tried and not kept: P's row sums by a dot with a tile of ones beside P V (the matrix
# unit instead of the VALU's sum tree). It pays only where the VALU bounds the loop (exponentials
# at quarter rate beside gfx950's fast MFMAs) and the waves do not meet at barriers: gfx950's
# 128x128 hdim 64 row at B 1, H 16, S 2048 643.4 -> 697.9 (the WIDE row of larger grids 957.5 ->
# 804.7: its 8 waves meet at barriers, so their matrix work cannot overlap their exponentials). It
# loses everywhere else (gfx942 hdim 64 574.9 -> 457.0, gfx90a 152.8 -> 122.0, gfx1100 89.5 ->
# 82.2, gfx1201 148.0 -> 137.2), and the denominator then sums P as rounded for P V: the LSE moves
# by up to the dtype's unit roundoff (1.3e-4 seen in f16, up to 2^-8 in bf16), past the LSE's
# tested accuracy.
# Scores one key block ahead (overlap, fmha_fwd.tile's OVERLAP, session 40): each iteration computes
# the next block's Q K^T after its own mask and before its exponentials, so the matrix unit has
# work while the vector unit runs the softmax (FlashAttention-3's overlap inside one wave). It
# costs a second S tile's registers and a copy of it per step. Taken, modeled TFLOP/s, f16, full,
# B 2, H 16, S 2048 (B 1, H 16, S 2048; B 4, H 32, S 4096): gfx942 hdim 64 with 128x64 tiles
# 574.9 -> 589.4 (427.7 -> 454.4; 720.8 -> 746.7; bf16 429.3 -> 428.7); gfx950 hdim 128 1328.8 ->
# 1364.5 (1022.0 -> 1017.3; 1523.6 -> 1552.3; bf16 1322.3 -> 1358.2); gfx950 hdim 64's row for
# grids below the WIDE row's 128x128 -> 128x64 with overlap, B 1: 649.2 -> 687.9. Not taken:
# gfx90a hdim 64 152.8 -> 149.4, hdim 128 149.6 -> 111.5; gfx942 hdim 128 675.9 -> 511.8 (128x32:
# 443.9); RDNA, whose WMMAs share the vector unit: gfx1201 hdim 64 148.0 -> 146.7, hdim 128
# 146.1 -> 139.4, gfx1100 hdim 64 89.5 -> 86.6, hdim 128 spills (one stage: 56.8); gfx950's WIDE
# row spills (256x64 with it 873.7); the causal rows level or slower (gfx942 hdim 64 407.0 ->
# 406.5, gfx950 hdim 64 547.7 -> 547.0, hdim 128 823.5 -> 554.9). Placed before the mask's branch
# (passes/version_masks.py) the next block's matrix instructions sit in another basic block than
# the exponentials, which LLVM then cannot interleave (gfx950 hdim 64 128x64: 843.9 there, 903.3
# after it); version-masks now moves it below the branch itself.
# Session 41, after bf16's P took the cheap rounding (cast's approx): gfx942 hdim 128 with the lazy
# rescale, masked keys and LLVM's default scheduler (was iterative-ilp, clamped keys, no lazy rescale),
# modeled bf16 598.9 -> 657.8 (B 1 437.0 -> 511.9; B 4, H 32, S 4096 761.0 -> 838.5), f16 675.9 ->
# 679.1 (528.6 -> 531.2; 862.4 -> 866.5); taken. Each of the three alone in bf16: 624.1, 604.2,
# 611.9; with overlap 451.5. No feature mix spills more (VGPRs 210-240 where they were 206-220; a
# strided one 411 -> 355).
# Session 46, the key loop's K and V stagings in LDS bytes of their own (loop_arena,
# CompileOptions.loop_arena: two barriers per key block where they took turns at the arena's start
# behind four), modeled f16 (bf16) TFLOP/s at B 2, H 16, S 2048, taken: gfx1201 hdim 128 146.1 ->
# 152.2, with LLVM's max-ilp scheduler 154.1 (145.9 -> 154.2; causal, the same row, 139.7 -> 142.7,
# bf16 136.3 -> 142.3; max-ilp alone had modeled slower), gfx1100 hdim 128 92.9 -> 94.1 (92.6 ->
# 93.7), gfx950's masked hdim 128 row 815.3 -> 830.9 (811.4 -> 831.2). Not taken: gfx950 hdim 128
# full 1361.1 -> 1342.7 (1355.5 -> 1337.3). With it, gfx1201 hdim 128: masked rows 152.0, without
# the lazy rescale 143.2, without reuse 144.7, iterative-ilp 150.0, interleave 147.7, 128x32
# spills. The other hdim 64 and 128 rows compile the same with it: their K and V have bytes of
# their own, or could not without costing a workgroup per compute unit.
# Session 54, f16's P rounded toward zero in pairs (p_toward_zero, P lifted by its mean loss first),
# modeled f16 TFLOP/s at B 2, H 16, S 2048 (tiledsl profile), taken: gfx1201 hdim 64 147.7 -> 150.1,
# causal (MASKED row) 137.6 -> 143.7, hdim 128 153.5 -> 153.3 with causal (the same row) 148.7 ->
# 153.6; gfx1100 hdim 64 91.9 -> 94.0, causal (MASKED row) 88.9 -> 90.9, hdim 128 94.0 -> 94.8.
# Not taken: gfx1100's hdim 128 MASKED row 93.7 -> 93.3. The denominator as the sum of the
# rounded P (v_dot2) instead modeled gfx1201 hdim 64 153.1 but makes the output depend on whether
# the LSE is returned (fmha_fwd.tile). Not taken, CDNA: gfx942 hdim 64 597.9 -> 596.4 lifted, whose
# packed f32 conversions cost less and whose VALU is not what binds.
# Then the row sums as trees of adds (tree_sums), which gfx12 pairs in dual-issue instructions,
# taken on gfx1201: hdim 64 150.1 -> 152.9, causal (MASKED row) 143.7 -> 149.4, hdim 128 153.3 ->
# 159.3 with causal 153.6 -> 152.7. Not taken: gfx1100 hdim 64 94.0 -> 93.2.
# Session 58, against flash-attention's AMD Triton backend (benchmarks/fa_amd.py, 580.2 at gfx942
# hdim 128 full): p_toward_zero taken on gfx942 hdim 128, 678.1 -> 684.1, causal (MASKED row)
# 481.1 -> 487.5. Not taken: gfx950 hdim 128 1355.2 -> 1342.6, gfx90a hdim 128 149.3 -> 148.8.
# gfx942 hdim 128 with it, each tried and not taken: tree_sums 684.1 (the same code), loop_arena
# 684.1, max-ilp 677.5 (without it), iterative-ilp 673.5, max-memory-clause 652.2, overlap 538.6,
# without the lazy rescale 671.3, without masked keys 676.2, 128x32 562.5.
# Session 59, the RDNA causal rows with masked keys (which had lost there in sessions 35 and 36),
# modeled f16 TFLOP/s of attention at B 2, H 16, S 2048 (B 1, H 16, S 1024; B 4, H 32, S 4096),
# taken: gfx1201 hdim 64 (MASKED row) 134.0 -> 138.0, and with the running max exact (no lazy
# rescale) 139.4 (85.5 -> 89.6; 145.4 -> 151.3); gfx1100 hdim 64 86.9 -> 89.9 (57.8 -> 59.5; 92.7
# -> 96.2): CONFIGS' row. Not taken there: masked rows 89.3, tree_sums 88.8, max-ilp 88.2,
# iterative-ilp 88.4, 64x64 85.0, interleave 87.5, or without the lazy rescale 86.8. gfx1201 hdim
# 128, each flag of its row flipped, all slower than 159.3: the lazy rescale off 151.1, masked rows
# 158.9, LLVM's default scheduler 152.6, iterative-ilp 152.6, no tree sums 153.3, P to nearest even
# 155.6, the fused scale 155.9, no reuse 153.5, interleave 153.2; and its tile: 64x64 118.5 (without
# reuse 133.2), 8 waves 100.1, three stages without reuse 138.6.
# Session 62, gfx1100's P exchanged by ds_swizzle_b32 with the keys relabelled (swizzle_exchange),
# modeled f16 (bf16) at B 2, H 16, S 2048, taken: hdim 64 94.1 -> 95.6 (90.2 -> 95.3), hdim 128
# 95.3 -> 95.6 (93.8 -> 94.7), hdim 128's MASKED row with lane exchanges and swizzles 90.1 -> 90.9
# (87.9 -> 88.4). Not taken: hdim 64's MASKED row 90.9 -> 89.7. From hdim 64's row with it: tree
# sums 95.3, loop_arena 95.6, 32x32 over 2 waves 92.8, no reuse 94.0, BLOCK_N 64 90.5.
# Session 63, gfx1100's V packed for its transposed LDS store by v_perm_b32 (pack_by_perm: 8 a key
# block where true16 codegen took 12 v_mov_b16), modeled f16 (bf16) at B 2, H 16, S 2048, taken by
# the hdim 64 rows: 95.6 -> 95.7 (95.3 -> 95.6; B 1, H 16, S 1024 78.8 -> 78.9), the MASKED row
# 90.9 -> 91.9 (87.5 -> 88.8; B 1 69.9 -> 71.7; B 4, H 32, S 4096 96.1 -> 95.8). Not taken: hdim
# 128 95.6 -> 95.3, its MASKED row 90.9 -> 89.2. Tried for the MASKED hdim 64 row before it, from
# 90.9, not kept: 32x64 83.4, 64x32 over 2 waves 86.0 (four waves per SIMD: 13.5 KiB of LDS a workgroup; with
# swizzles 87.3, ceiling 104.2), three stages without reuse 87.3, an occupancy target of 8 88.3.
# With V packed by perms, flags that had lost on gfx1100 win: the hdim 64 rows become 32x32 over 2
# waves (CONFIGS' row; MASKED's masks its query rows too) with tree sums, swizzled exchanges and
# permlane reductions, and the hdim 128 rows take tree sums. f16 (bf16), B 2, H 16, S 2048, from
# the rows before this session: hdim 64 95.6 -> 97.3 (95.3 -> 95.8; B 1, H 16, S 1024 78.8 ->
# 81.3), causal 90.9 -> 96.1 (87.5 -> 93.2; B 1 69.9 -> 73.7), hdim 128 95.6 -> 96.6 (94.7 ->
# 95.9; B 1 79.7 -> 80.6), causal 90.9 -> 91.7 (88.4 -> 90.8; B 1 62.5 -> 62.7). The MASKED hdim 64
# row, each flag added alone to it with perms: swizzles 94.3, permlane reductions 93.9, tree sums
# 92.3, clamped rows 92.6. hdim 64 full at 64x32 over 4 waves with perms and tree sums 96.2; hdim
# 128 with perms and tree sums 96.5 (full), 90.4 (causal), at 32x32 over 2 waves 87.0.
# Session 64, transposed stagings (V) with unpadded rows whose 16-byte chunks are swizzled
# (lds_swizzle, on by default where stage-lds finds fewer LDS cycles: RDNA's V), modeled f16
# (bf16) at B 2, H 16, S 2048, taken: gfx1100 hdim 64 97.3 -> 99.0 (95.8 -> 97.8), causal 96.1 ->
# 99.0 (93.2 -> 96.6); gfx1201 hdim 64 154.1 -> 155.9 (151.1 -> 152.7), causal 145.1 -> 146.8
# (137.6 -> 138.9). Not taken (the rows say lds_swizzle=False): gfx1100 hdim 128 96.6 -> 95.3, its
# MASKED row 91.7 -> 89.1; gfx1201 hdim 128 164.5 -> 159.9, causal 153.4 -> 152.5. From gfx1100's
# hdim 64 row with it, not kept: 64x32 over 4 waves at an occupancy target of 10 with max-ilp 100.4
# (B 1, H 16, S 1024 81.9 -> 80.6, bf16 97.8 -> 97.2, causal 99.0 -> 96.9), max-ilp 99.7, an
# occupancy target of 8 99.4, without V's perms 95.0, tree sums 97.2, swizzled exchanges 95.7.
# Session 65, gfx1100's hdim 128 rows with V swizzled and an occupancy target of 6, the waves per
# SIMD their LDS allows anyway (three workgroups of 4 waves a CU): told so, LLVM schedules the
# swizzled loop in 217 VGPRs where without a target it took 241, and the LDS waits fall. Modeled
# f16 (bf16) at B 2, H 16, S 2048, taken: hdim 128 96.6 -> 102.8 (95.9 -> 101.2; B 1, H 16, S 1024
# 80.6 -> 86.2), its MASKED row 91.7 -> 94.3 (90.8 -> 92.9). Each alone: the target without the
# swizzle 96.6 (MASKED 89.8), the swizzle without it 95.3; the target 5 102.8 (the same code), 7
# 101.7, 7 with max-ilp 101.3. Feature mixes that spill swizzled compile without the swizzle
# (driver). Not taken: gfx1201 hdim 128 swizzled with a target of 6, 159.9 (as without it), causal
# 145.0; gfx1100 and gfx1201 hdim 64 with targets of 6 or 7 compile the same code.
CONFIGS: dict[str, dict[int, FmhaConfig]] = {
    "gfx90a": {32: _c(128, 64, 4, 2), 64: _c(128, 64, 4, 2, 2, reuse=True, interleave=True, mask_keys=True),
               128: _c(128, 64, 4, 2, 2, reuse=True, interleave=True, mask_keys=True), 256: _c(64, 32, 4, 2)},
    "gfx942": {32: _c(128, 64, 4, 2), 64: _c(128, 64, 4, 2, 2, reuse=True, mask_keys=True, overlap=True),
               128: _c(128, 64, 4, 2, 2, reuse=True, mask_rows=True, interleave=True, lazy_rescale=True,
                       mask_keys=True, p_toward_zero=True),
               256: _c(64, 32, 4, 2)},
    "gfx950": {32: _c(128, 64, 4, 2),
               64: _c(128, 64, 4, 2, reuse=True, interleave=True, lazy_rescale=True, overlap=True),
               128: _c(128, 64, 4, 2, 2, reuse=True, mask_rows=True, interleave=True, lazy_rescale=True,
                       mask_keys=True, overlap=True),
               256: _c(128, 64, 4, 2)},
    "gfx1100": {32: _c(128, 128, 8, 1),
                64: _c(32, 32, 2, 2, reuse=True, lazy_rescale=True, mask_keys=True, lane_exchange=True,
                       fused_scale=True, p_toward_zero=True, tree_sums=True, swizzle_exchange=True,
                       pack_by_perm=True),
                128: _c(64, 32, 4, 2, 6, reuse=True, lazy_rescale=True, mask_keys=True, lane_exchange=True,
                        fused_scale=True, loop_arena=True, p_toward_zero=True, tree_sums=True,
                        swizzle_exchange=True),
                256: _c(64, 32, 8, 1)},
    "gfx1201": {32: _c(128, 128, 8, 1), 64: _c(128, 32, 4, 2, reuse=True, schedule="max-ilp", lazy_rescale=True,
                                            mask_keys=True, p_toward_zero=True, tree_sums=True),
                128: _c(64, 32, 4, 2, reuse=True, schedule="max-ilp", lazy_rescale=True, mask_keys=True,
                        loop_arena=True, p_toward_zero=True, tree_sums=True, lds_swizzle=False),
                256: _c(64, 32, 8, 1)},
}
assert set(CONFIGS) == set(ARCH_NAMES) and all(set(row) == set(HDIMS) for row in CONFIGS.values())


def padded_hdim(d: int) -> int:
    """The tile width a head dim runs at: the next power of two, at least 32."""
    if not 1 <= d <= HDIMS[-1]:
        raise TileError(f"head dim {d} is not supported: expected 1..{HDIMS[-1]}")
    return max(32, 1 << (d - 1).bit_length())


# Wider query tiles for large grids: where a call's query blocks of this height give the most
# loaded compute unit no more query rows than CONFIGS' blocks would, in at most WIDE_ROUNDS rounds,
# and each sequence has at least two, the plain unmasked variant (no bias, dropout or fp8;
# contiguous head dims and 16-byte aligned strides, one stage: tiledsl.fmha_splitkv.
# wide_query_blocks decides) runs them. The other variants keep CONFIGS'
# rows: at 8 waves a wave has at most 256 VGPRs, and the general-stride and ALiBi variants spill
# VGPRs there, fp8 SGPRs. Modeled, gfx950 hdim 64 f16, TFLOP/s 128x128 -> 256x128: B 2, H 16,
# S 2048 (256 workgroups of 256 rows on 256 CUs) 765.3 -> 853.3, B 4, H 32, S 4096 844.9 ->
# 885.6, B 4, H 16, S 1024 743.2 -> 793.8; with fewer wide blocks than CUs it loses (B 1, H 16,
# S 2048: 523.6 -> 426.6), and with short sequences (B 4, H 64, S 256: 598.9 -> 559.8), hence
# the call's sizes decide. Tried and not taken: gfx942 hdim 64 (502.1 -> 505.4), gfx950 hdim 128
# with 256x64 (1087.5 -> 1057.0), gfx90a hdim 64 (129.1 -> 109.1). Session 34: reuse and the lazy
# rescale together, 934.9 -> 957.5 at B 2, H 16, S 2048, 968.8 -> 996.7 at B 4, H 32, S 4096,
# 872.1 -> 885.9 at B 4, H 16, S 1024, no spills in any unmasked mix (fmha_tune's measure); one
# of them alone models level or slower (reuse 933.0, lazy 931.4), so do masked rows (935.4),
# iterative-ilp (926.4), one stage (869.0) and 256x64 (831.1).
# Session 60, gfx942 hdim 128: 256x64 over 8 waves (two per SIMD, one workgroup per CU) with K
# and V in LDS bytes of their own (loop_arena: two barriers per key block where the 128-row
# row's two workgroups per CU, sharing 32 KiB each, take four), its Q loaded straight into
# registers (64 KiB staged would not fit: assign-layouts). Modeled f16 TFLOP/s, CONFIGS' 128x64
# -> 256x64: B 2, H 16, S 2048 684.1 -> 716.9 (bf16 652.8 -> 678.3), B 1, H 16, S 4096 706.9 ->
# 750.9, B 4, H 16, S 2048 (two rounds) 709.5 -> 716.5, but B 4, H 32, S 4096 (seven rounds)
# 868.3 -> 857.1 (with masked rows), hence its WIDE_ROUNDS; B 1, H 16, S 1024 (64 wide blocks)
# 251.1 -> 163.8, which the load rule refuses. One flag flipped from the row with masked rows
# (715.7) at B 2: without loop_arena 626.1, without the interleaving 656.0, without the lazy
# rescale 696.7, with clamped keys 705.8, iterative-ilp 687.5, without reuse 649.8, one stage
# 609.1, BLOCK_N 32 566.8, 128 628.4, clamped rows (taken) 716.9. No spills in its mixes. The
# same shape on gfx950 hdim 128 (LDS for Q's staging) models 1355.2 -> 1354.3.
# Session 61, its rounds measured between two and seven (CONFIGS' 128x64 -> 256x64, B, H, S 4096):
# B 2, H 24 (three wide rounds) 743.0 -> 750.7, B 3, H 24 (four) 842.9 -> 844.5, B 2, H 44 (five)
# 829.5 -> 825.7, B 4, H 27 (six) 852.1 -> 844.4, (seven, above) 868.3 -> 857.1: WIDE_ROUNDS 4.
WIDE: dict[str, dict[int, FmhaConfig]] = {
    "gfx942": {128: _c(256, 64, 8, 2, 2, reuse=True, interleave=True, lazy_rescale=True, mask_keys=True,
                       loop_arena=True, p_toward_zero=True)},
    "gfx950": {64: _c(256, 128, 8, 2, reuse=True, interleave=True, lazy_rescale=True)}}
# The most rounds of wide workgroups per compute unit where a row still models faster (none: any).
WIDE_ROUNDS: dict[str, int] = {"gfx942": 4}


def wide_config(arch: str, hdim_q: int, hdim_v: int | None = None, *, masked: bool = False,
                bias: str = "none", dropout: bool = False, fp8: bool = False) -> FmhaConfig | None:
    """The WIDE row for a variant, or None where it has none (masked, a bias, dropout or fp8)."""
    if masked or bias != "none" or dropout or fp8:
        return None
    hdim_v = hdim_q if hdim_v is None else hdim_v
    return WIDE.get(get_arch(arch).name, {}).get(max(padded_hdim(hdim_q), padded_hdim(hdim_v)))


# Rows for masked variants (causal / window) where they differ from CONFIGS (tuned separately:
# the mask's registers change which tile is largest without spilling).
MASKED: dict[str, dict[int, FmhaConfig]] = {
    # hdim 128: CONFIGS' row with its keys clamped (masked keys: 98.6 -> 98.4, session 36)
    "gfx90a": {64: _c(128, 32, 4, 2, 2, reuse=True, interleave=True),
               128: _c(128, 64, 4, 2, 2, reuse=True, interleave=True)},
    "gfx942": {64: _c(128, 64, 4, 2, 2, reuse=True, interleave=True, mask_keys=True),
               128: _c(128, 64, 4, 2, 2, reuse=True, interleave=True, lazy_rescale=True, mask_keys=True,
                       p_toward_zero=True)},
    # hdim 128: CONFIGS' row without interleave (with it the causal forward models 778.2 -> 675.1)
    "gfx950": {64: _c(128, 64, 4, 2, 2, interleave=True),
               128: _c(128, 64, 4, 2, 2, reuse=True, mask_rows=True, lazy_rescale=True, mask_keys=True,
                       loop_arena=True)},
    # RDNA: gfx1100 hdim 128 takes CONFIGS' row without the lazy rescale (and since session 62 its
    # P exchanged by swizzles: f16 90.1 -> 90.9, bf16 87.9 -> 88.4; session 63 tree sums); gfx1201 hdim 64 masks its
    # query rows and keeps the running max exact; gfx1201 hdim 128 runs CONFIGS' row (session 34).
    # gfx1100 hdim 64 was CONFIGS' row (masked keys since session 59) with its row reductions'
    # halves combined through ds_bpermute (session 60: with v_permlanex16, 89.9 -> 88.3 at B 2,
    # H 16, S 2048, 96.2 -> 95.0 at B 4, H 32, S 4096, 59.5 -> 60.4 at B 1, H 16, S 1024); so
    # does gfx1201's hdim 64 row (with v_permlanex16 f16 139.4 -> 140.0, bf16 130.5 -> 126.1).
    # Session 61, gfx1100 hdim 64: 32x32 over 2 waves, with masked query rows. Its workgroups wait
    # at barriers 2 % of the SIMD cycles where 64x32's four waves waited 18 %, and its diagonal
    # blocks waste fewer FLOPs; it stages K and V per two waves (LDS 61 -> 72 % busy). Modeled f16
    # TFLOP/s, 64x32 -> 32x32: B 2, H 16, S 2048 89.9 -> 90.9 (bf16 87.7 -> 87.5), B 4, H 32, S 4096
    # 96.2 -> 96.1, B 1, H 16, S 1024 59.5 -> 69.9. From the new row: clamped query rows 90.1 (and
    # with them one stage 89.1), v_permlanex16 reductions 88.4, LLVM's max-ilp 89.7, tree sums 89.6,
    # without the lazy rescale 89.0, interleave 89.1, clamped keys 84.3; 64x64 over 4 waves 85.0.
    # CONFIGS' full row at 32x32 over 2 waves: 94.1 -> 91.5. Since session 63 (V packed by perms,
    # above CONFIGS) CONFIGS' row is that tile, and this one adds masked query rows to it: 96.1.
    "gfx1100": {32: _c(128, 64, 8, 1),
                64: replace(CONFIGS["gfx1100"][64], mask_rows=True),
                128: _c(64, 32, 4, 2, 6, reuse=True, mask_keys=True, fused_scale=True, lane_exchange=True,
                        tree_sums=True, swizzle_exchange=True), 256: _c(64, 16, 4, 1)},
    # Session 61, gfx1201 hdim 64: 64x32 over 2 waves (32 query rows a wave, as 128x32 over 4 had)
    # in one stage, its row reductions by v_permlanex16 again. Modeled f16 TFLOP/s, old row -> new:
    # B 2, H 16, S 2048 139.4 -> 145.1 (bf16 130.5 -> 137.6), B 4, H 32, S 4096 151.3 -> 152.0, B 1,
    # H 16, S 1024 89.6 -> 104.6. Two stages with reuse modeled 148.7 (156.6, 110.3; bf16 138.4) but
    # spill 38 VGPRs in the bf16 group-mode soft-cap mix (a wave loads half a K/V tile, not a
    # quarter). From the new row: the reductions through ds_bpermute 142.4 (and with them the lazy
    # rescale 140.9, max-ilp 142.4), clamped rows 144.4, no tree sums 131.2; two stages, 32x32 over
    # 2 waves 132.6, 64x64 94.6.
    "gfx1201": {32: _c(128, 64, 8, 1), 64: _c(64, 32, 2, 1, mask_rows=True, mask_keys=True, p_toward_zero=True,
                                           tree_sums=True)},
}


# Rows for padded head dims (D_QK or D_V below the tile width) where they differ, per (padded
# hdim, masked): their head-dim masks take scalar registers. gfx90a's masked hdim 128 row (128x64)
# spills SGPRs with buffer descriptors there, so the driver compiles the masked loads as branches:
# hdim 80 causal models 56.2 (128x32) -> 50.6 TFLOP/s of its own work (B 2, H 16, S 2048).
# gfx942's masked hdim 128 row before session 36 (LLVM's ILP scheduler where MASKED's now takes its
# interleaving, which pays with masked keys): padded head dims keep their keys clamped
# (variant_config), and with the interleaving the clamped hdim 80 causal variant models 286.0 ->
# 255.2.
PADDED: dict[str, dict[tuple[int, bool], FmhaConfig]] = {
    "gfx90a": {(128, True): _c(128, 32, 4, 2, 2)},
    "gfx942": {(128, True): _c(128, 64, 4, 2, 2, reuse=True, schedule=ILP, lazy_rescale=True)}}


# Rows for bias variants (docs/bias.md) where they differ from the rows above, per bias kind and
# (padded hdim, masked): the bias tile (or ALiBi's per-element distances) takes registers beside
# the scores, so the largest tile without VGPR spills is smaller in places. Chosen like the rows
# above (the tests' feature mixes, general strides, plus the plain contiguous variant;
# benchmarks/fmha_bias.py prints the figures). gfx11 holds the WMMA accumulator in every other
# column of a lane, so its bias tile loads element by element and wants the smallest tiles; at
# hdim 256 it still spills (bias variants compile with spills allowed: see compile_fmha_fwd).
BIASED: dict[str, dict[str, dict[tuple[int, bool], FmhaConfig]]] = {
    "tensor": {
        "gfx90a": {(128, True): _c(128, 64, 4, 2)},
        "gfx942": {(128, True): _c(128, 64, 4, 2)},
        "gfx950": {(128, True): _c(128, 64, 4, 2), (256, True): _c(64, 32, 4, 2)},
        "gfx1100": {(32, False): _c(128, 64, 8, 1), (32, True): _c(64, 64, 8, 1), (64, False): _c(64, 64, 8, 1),
                    (64, True): _c(64, 64, 8, 1), (128, False): _c(64, 32, 8, 1), (128, True): _c(64, 32, 8, 1)},
        "gfx1201": {(32, False): _c(128, 64, 8, 1), (64, False): _c(128, 64, 8, 1), (64, True): _c(64, 64, 8, 1),
                    (128, False): _c(64, 32, 4, 1), (128, True): _c(64, 64, 8, 1)},  # (128, False): see alibi
    },
    "alibi": {
        "gfx90a": {(128, False): _c(128, 64, 4, 2), (128, True): _c(128, 64, 4, 2)},
        "gfx942": {(128, False): _c(128, 64, 4, 2), (128, True): _c(128, 64, 4, 2)},
        "gfx950": {(128, True): _c(128, 64, 4, 2)},
        # RDNA keeps the one-stage rows it had before session 33's two-stage ones, which were measured
        # without a bias (with ALiBi, gfx1201's hdim 64 causal row spills a VGPR).
        "gfx1100": {(64, False): _c(64, 32, 4, 1, mask_rows=True, lazy_rescale=True),
                    (64, True): _c(64, 32, 4, 1, mask_rows=True), (128, False): _c(64, 64, 4, 1),
                    (128, True): _c(64, 64, 4, 1)},
        "gfx1201": {(32, False): _c(128, 64, 8, 1), (64, False): _c(128, 64, 8, 1),
                    (64, True): _c(128, 32, 4, 1, mask_rows=True), (128, False): _c(64, 32, 4, 1),
                    (128, True): _c(64, 64, 8, 1)},
    },
}


# Rows for dropout variants (docs/dropout.md), per (padded hdim, masked), over every bias kind:
# the keep bytes (philox_byte: one Philox-4x32-10 call per 4 keys a lane holds, 10 rounds of two
# 32x32->64 multiplies) hold their state in registers beside the scores, so the tiles are smaller
# where the plain ones would spill. Chosen like the rows above on the plain contiguous variant (no
# VGPR or SGPR spills, then the fewest instructions per MFMA/WMMA; hdim 32 takes hdim 64's row;
# benchmarks/fmha_bias.py prints the figures). hdim 256 keeps the rows above and compiles with
# spills allowed.
def _dropped(d64: FmhaConfig, d64_masked: FmhaConfig, d128: FmhaConfig,
             d128_masked: FmhaConfig) -> dict[tuple[int, bool], FmhaConfig]:
    return {(32, False): d64, (64, False): d64, (32, True): d64_masked, (64, True): d64_masked,
            (128, False): d128, (128, True): d128_masked}


DROPPED: dict[str, dict[tuple[int, bool], FmhaConfig]] = {
    "gfx90a": _dropped(_c(128, 64, 4, 2), _c(64, 32, 4, 2), _c(128, 64, 4, 2), _c(64, 32, 4, 2)),
    "gfx942": _dropped(_c(128, 128, 4, 2), _c(64, 32, 4, 2), _c(128, 64, 4, 2), _c(64, 32, 4, 2)),
    "gfx950": _dropped(_c(128, 64, 4, 2), _c(64, 32, 4, 2), _c(128, 128, 4, 2), _c(128, 128, 4, 2)),
    "gfx1100": _dropped(_c(128, 64, 8, 1), _c(128, 32, 8, 1), _c(64, 64, 8, 1), _c(64, 64, 8, 1)),
    "gfx1201": _dropped(_c(128, 64, 8, 1), _c(128, 32, 8, 1), _c(64, 64, 8, 1), _c(64, 64, 8, 1)),
}


# Rows for fp8 variants (docs/fp8.md) where they differ, per (padded hdim, masked): e4m3 tiles take
# half the registers and LDS of f16 ones, but the scaled P and its conversions add some; gfx1201's
# masked 128 row spills one VGPR with padded head dims in group mode.
FP8_ROWS: dict[str, dict[tuple[int, bool], FmhaConfig]] = {"gfx1201": {(128, True): _c(64, 64, 8, 1)}}


def fmha_config(arch: str, hdim_q: int, hdim_v: int | None = None, masked: bool = False,
                bias: str = "none", dropout: bool = False, fp8: bool = False, wide: bool = False) -> FmhaConfig:
    """The tile config for `arch` and the head dims (actual sizes, padded here); bias: the
    variant's bias kind ("none", "tensor", "alibi"); dropout: the variant drops P; wide: the
    call's grid is large enough for the WIDE row, which the variant takes where it has one."""
    name = get_arch(arch).name
    if wide and (row := wide_config(name, hdim_q, hdim_v, masked=masked, bias=bias, dropout=dropout, fp8=fp8)):
        return row
    hdim_v = hdim_q if hdim_v is None else hdim_v
    hdim = max(padded_hdim(hdim_q), padded_hdim(hdim_v))
    if dropout and (hdim, masked) in DROPPED[name]:
        return DROPPED[name][(hdim, masked)]
    if fp8 and (hdim, masked) in FP8_ROWS.get(name, {}):
        return FP8_ROWS[name][(hdim, masked)]
    if (hdim, masked) in BIASED.get(bias, {}).get(name, {}):
        return BIASED[bias][name][(hdim, masked)]
    padded = padded_hdim(hdim_q) != hdim_q or padded_hdim(hdim_v) != hdim_v
    if padded and (hdim, masked) in PADDED.get(name, {}):
        return PADDED[name][(hdim, masked)]
    if masked and hdim in MASKED.get(name, {}):
        return MASKED[name][hdim]
    return CONFIGS[name][hdim]


def variant_config(arch: str, *, dtype: str, hdim_q: int, hdim_v: int | None, mask: MaskParams | None,
                   bias: str = "none", dropout: bool = False, wide: bool = False) -> FmhaConfig:
    """The config row of one fmha_fwd variant: what `fmha_defines` takes its tile from, and the
    compile options their asks of LLVM's scheduler (`FmhaConfig.scheduling`). Padded head dims keep
    their keys clamped: their column masks take registers of their own, and with the key bounds'
    too gfx1201's hdim 80 variants with a window, a soft-cap and group mode spill 11-13 VGPRs."""
    cfg = for_dtype(fmha_config(arch, hdim_q, hdim_v, masked=mask is not None and mask.kind != "none", bias=bias,
                                dropout=dropout, fp8=dtype == "f8e4m3", wide=wide), dtype)
    return replace(cfg, mask_keys=False) if fmha_dim_units(hdim_q, hdim_v) else cfg


def for_dtype(cfg: FmhaConfig, dtype: str) -> FmhaConfig:
    """The row as a variant of `dtype` runs it: fp8 without the lazy rescale (P times the format's
    largest value must stay within e4m3, and the lazy max lets P reach 2^8)."""
    return replace(cfg, lazy_rescale=False) if dtype == "f8e4m3" else cfg


def vector_unit(n: int) -> int:
    """The largest power of two up to one 16-byte vector of f16/bf16 (8 elements) dividing n."""
    return min(VECTOR_ELEMS, n & -n)


def split_acc_stride_units(hdim_v: int) -> tuple[tuple[str, int], ...]:
    """CompileOptions.stride_units of the split-KV workspace's partial outputs (o_acc, f32 [splits,
    B, Hq, Sq, D_V], tiledsl.fmha_splitkv.splitkv_workspace): every stride is a multiple of D_V, so
    of its `vector_unit`; the producers store their rows and the combine loads them in vectors
    where that unit makes 16 bytes (4 words) or more."""
    unit = vector_unit(hdim_v)
    return (("o_acc", unit),) if unit >= 4 else ()


def head_dim_units(hdim_q: int, hdim_v: int) -> tuple[tuple[str, int], ...]:
    """The units of a kernel's head dims for its masks (d < D_QK, d < D_V), as its defines
    D_QK_UNIT / D_V_UNIT that its requires(D_QK % D_QK_UNIT == 0, ...) declares: each head dim's
    `vector_unit`, so the masks are uniform over its vector accesses (the launcher checks)."""
    return (("D_QK", vector_unit(hdim_q)), ("D_V", vector_unit(hdim_v)))


def fmha_dim_units(hdim_q: int, hdim_v: int | None = None) -> tuple[tuple[str, int], ...]:
    """`head_dim_units` for padded head dims; empty when no head dim is padded (the forward's masks
    are not compiled in then)."""
    hdim_v = hdim_q if hdim_v is None else hdim_v
    if padded_hdim(hdim_q) == hdim_q and padded_hdim(hdim_v) == hdim_v:
        return ()
    return head_dim_units(hdim_q, hdim_v)


def unit_defines(units: tuple[tuple[str, int], ...], symbols: tuple[str, ...] = ("D_QK", "D_V")) -> dict[str, str]:
    """The defines D_QK_UNIT / D_V_UNIT (of `symbols`) that a kernel's requires(D_QK % D_QK_UNIT
    == 0, ...) declares, from head_dim_units or fmha_dim_units: its head-dim masks test whole vectors."""
    return {f"{sym}_UNIT": str(unit) for sym, unit in units if sym in symbols}


def fmha_defines(arch: str, *, dtype: str = "f16", hdim_q: int = 128, hdim_v: int | None = None,
                 mask: MaskParams | None = None, varlen: bool = False, lse: bool = False,
                 sink: bool = False, softcap: float = 0.0, split: bool = False, kv_cache: str = "none",
                 pack_gqa: bool = False, page_size: int = 0, bias: str = "none", bias_dtype: str = "f32",
                 dropout: bool = False, out_dtype: str | None = None, wide: bool = False,
                 config: FmhaConfig | None = None) -> dict[str, str]:
    """All constexprs of one fmha_fwd variant (the -D values), from what a call needs. bias:
    "none", "tensor" (an additive bias tensor of `bias_dtype`) or "alibi"; dropout: P is dropped
    (docs/dropout.md). dtype f8e4m3 (docs/fp8.md) on an arch with fp8 matrix instructions writes
    `out_dtype` (bf16 or f16; bf16 by default); other dtypes write their own. wide: the WIDE
    row where the variant has one (`fmha_config`)."""
    if kv_cache not in ("none", "contiguous", "paged"):
        raise TileError(f"kv_cache: expected none, contiguous or paged, got {kv_cache}")
    if bias not in BIAS_KINDS:
        raise TileError(f"bias: expected one of {', '.join(BIAS_KINDS)}, got {bias}")
    if bias_dtype not in ("f16", "bf16", "f32"):
        raise TileError(f"bias_dtype: expected f16, bf16 or f32, got {bias_dtype}")
    if dtype not in ("f16", "bf16", "f8e4m3"):
        raise TileError(f"fmha_fwd supports f16, bf16 and f8e4m3, got {dtype}")
    if dtype == "f8e4m3" and not get_arch(arch).fp8_flavour:
        raise TileError(f"fmha_fwd: {arch} has no fp8 matrix instructions (f8e4m3 needs gfx942, gfx950 or gfx1201)")
    out_dtype = out_dtype or ("bf16" if dtype == "f8e4m3" else dtype)
    if out_dtype != dtype and (dtype != "f8e4m3" or out_dtype not in ("f16", "bf16")):
        raise TileError(f"out_dtype: {dtype} inputs write {'bf16 or f16' if dtype == 'f8e4m3' else dtype}, "
                        f"got {out_dtype}")
    hdim_v = hdim_q if hdim_v is None else hdim_v
    dq, dv = padded_hdim(hdim_q), padded_hdim(hdim_v)
    if config is None:
        config = variant_config(arch, dtype=dtype, hdim_q=hdim_q, hdim_v=hdim_v, mask=mask, bias=bias,
                                dropout=dropout, wide=wide)
    cfg = for_dtype(config, dtype)

    def flag(b: bool) -> str:
        return "true" if b else "false"

    return {
        "DT": dtype, "ODT": out_dtype, "HDIM": str(dq), "HDIM_V": str(dv), **cfg.defines(),
        "MASK": mask.kind if mask is not None else "none",
        "VARLEN": flag(varlen), "HAS_LSE": flag(lse), "HAS_SINK": flag(sink), "SOFTCAP": flag(softcap > 0),
        "SPLIT": flag(split), "KV_CACHE": kv_cache, "PACK_GQA": flag(pack_gqa),
        "BIG_PAGES": flag(kv_cache == "paged" and page_size >= cfg.block_n),
        "BIAS": BIAS_KINDS[bias], "BIAS_DT": bias_dtype if bias == "tensor" else "f32",
        "DROPOUT": flag(dropout),
        "SCALE_IN_EXP2": flag((get_arch(arch).packed_f32 if cfg.fused_scale is None else cfg.fused_scale)
                              and softcap == 0 and bias == "none" and dtype != "f8e4m3"),
        "PAD_D": flag(dq != hdim_q or dv != hdim_v),
        **unit_defines(fmha_dim_units(hdim_q, hdim_v)),
    }


def pack_gqa(arch: str, hdim_q: int, hdim_v: int, masked: bool, max_seqlen_q: int, nhead_q: int,
             nhead_k: int) -> bool:
    """Whether a call packs the query heads of each kv head into one block's rows (PACK_GQA):
    with GQA/MQA when a query block would be at most half full otherwise (decode, short
    queries). The group's heads then share every K/V load, and fewer, fuller blocks run."""
    block_m = fmha_config(arch, hdim_q, hdim_v, masked=masked).block_m
    return nhead_q > nhead_k and 2 * max_seqlen_q <= block_m
