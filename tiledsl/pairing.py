"""Paired blocks under a causal mask: when a workgroup should take two blocks of one sequence.

Under a causal mask the blocks of a sequence do unequal work: the forward's query block x sees
about x + 1 key blocks, the backward's key block x about nblocks - x query blocks. With one
workgroup per block, a compute unit that runs two of the heavy blocks (side by side, sharing its
SIMDs, or one after the other) sets the time while others idle. Paired (the kernels' PASSES = 2),
workgroup x takes blocks x and nblocks - 1 - x of its sequence in turn, so every workgroup does
the same work, in half as many workgroups. The backward (tiledsl.fmha_bwd) decides by these
rules; the forward pairs only on request (tiledsl.fmha_splitkv.pair_query_blocks), since its
unpaired masked blocks go heaviest first. Measured with the timing model (docs/backward.md,
docs/profile.md).
"""

from __future__ import annotations

from typing import Any

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.driver import spill_counts, waves_per_simd

CAUSAL_KINDS = ("causal_top_left", "causal_bottom_right")


def _resident(arch_name: str, manifest: dict[str, Any], waves: int) -> int:
    """Workgroups of the compiled kernel all the compute units hold at once."""
    arch = get_arch(arch_name)
    return arch.compute_units * arch.workgroups_per_cu(int(manifest.get("vgpr_count") or 0),
                                                       int(manifest.get("lds_bytes") or 0), waves)


def pairs_pay(arch_name: str, mask_kind: str, workgroups: int, manifest: dict[str, Any], waves: int) -> bool:
    """Whether pairing the blocks of an unpaired grid of `workgroups` (of the kernel whose
    manifest is given, `waves` per workgroup) shortens it: only under a causal mask, once the
    grid holds more workgroups than there are compute units, and up to twice the workgroups they
    hold at once. At most one workgroup per compute unit, the longest block sets the time either
    way; well above, each compute unit runs several workgroups in turn and the dispatch order
    mixes heavy blocks with light ones, while the paired grid's equal workgroups end in a partly
    filled last round. Modeled backward at B2 H16 S2048 (512 workgroups), unpaired vs paired
    TFLOP/s: gfx942 d64 (304 CUs, 2 workgroups each) 194.7 vs 221.3, gfx950 d64 (256 CUs) 309.9 vs
    328.7; gfx90a d64 (110 CUs x 2) 65.9 vs 61.8, gfx90a d128 (110 x 1) 54.2 vs 53.4. Forward,
    gfx942 d128 at B4 H32 S4096 (4096 workgroups, 608 resident): 552.3 vs 448.6."""
    if mask_kind not in CAUSAL_KINDS:
        return False
    return get_arch(arch_name).compute_units < workgroups <= 2 * _resident(arch_name, manifest, waves)


def paired_fits(arch_name: str, waves: int, unpaired: dict[str, Any], paired: dict[str, Any],
                paired_workgroups: int) -> bool:
    """The paired kernel keeps more values live across its two passes: it is taken when that
    costs no more scratch, and either no occupancy or only occupancy its grid does not use (all
    `paired_workgroups` still resident at once: a compute unit with one workgroup runs its waves
    whatever the limit). The forward at B2 H16 S2048 hdim 128, causal, modeled TFLOP/s: gfx942
    247.5 unpaired (2 waves/SIMD) vs 359.3 paired (1 wave/SIMD, 256 workgroups on 304 CUs), gfx950
    480.6 vs 574.5. (Scalars spilled into vector register lanes are read back between passes,
    outside the hot loop.)"""
    if spill_counts(paired)[0] > spill_counts(unpaired)[0]:
        return False
    arch = get_arch(arch_name)
    if waves_per_simd(arch, paired, waves) >= waves_per_simd(arch, unpaired, waves):
        return True
    return paired_workgroups <= _resident(arch_name, paired, waves)
