"""Per-arch tile configurations of the FMHA forward kernel (`fmha_fwd.tile`).

One row per (arch, padded head dim). Chosen by compiling candidates under every feature mix
(mask kinds, group mode, LSE, sink, soft-cap, padded head dims; f16 and bf16) and keeping the
largest tile that spills nothing (neither VGPRs nor SGPRs) and fits the arch's LDS;
`tests/test_fmha_compile.py` re-checks the rows for hdim 64 and 128. Why the rows look the way
they do, with today's compiler:

* Each wave holds whole dot operands in registers (K as a [BLOCK_N, HDIM] B operand, V as
  [BLOCK_N, HDIM_V]), so registers grow with BLOCK_N * HDIM per wave.
* CDNA (wave64, 512 VGPR+AGPR per lane, 32x32 MFMA): 32 query rows per wave, 4 waves. 8 waves
  (512 threads) would halve the registers per lane to 256 and spill at hdim 128.
* RDNA (wave32, 256 VGPRs, 16x16 WMMA; gfx11 replicates A/B in both lane halves): 16 rows per
  wave, 8 waves = a 4 x 2 wave grid whose second axis splits the keys, which halves the K/V/
  accumulator registers per wave at the price of cross-wave row reductions through LDS.
  gfx1100 at hdim 128 still peaks at 256 VGPRs (no spill) in some feature mixes.
* LDS: every layout change stages one tile through LDS; the largest is Q [BLOCK_M, HDIM] (rows
  padded), so BLOCK_M * HDIM <= 16K elements on 64 KiB archs (gfx950 has 160 KiB).
* hdim 256 spills on RDNA at every block size tried (whole operands in registers), and a few
  SGPRs on CDNA in some feature mixes; the rows give the least-spilling choice found.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.errors import TileError
from tiledsl.reference import MaskParams

HDIMS = (32, 64, 128, 256)  # padded head dims (tile widths) with a row per arch


@dataclass(frozen=True)
class FmhaConfig:
    block_m: int
    block_n: int
    waves: int
    stages: int

    def defines(self) -> dict[str, str]:
        return {"BLOCK_M": str(self.block_m), "BLOCK_N": str(self.block_n), "WAVES": str(self.waves),
                "STAGES": str(self.stages)}


def _c(block_m: int, block_n: int, waves: int, stages: int) -> FmhaConfig:
    return FmhaConfig(block_m, block_n, waves, stages)


# CONFIGS[arch][padded hdim] -- keyed by max(padded HDIM, padded HDIM_V).
CONFIGS: dict[str, dict[int, FmhaConfig]] = {
    "gfx90a": {32: _c(128, 64, 4, 2), 64: _c(128, 64, 4, 2), 128: _c(128, 64, 4, 2), 256: _c(64, 32, 4, 1)},
    "gfx942": {32: _c(128, 64, 4, 2), 64: _c(128, 64, 4, 2), 128: _c(128, 64, 4, 2), 256: _c(64, 32, 4, 1)},
    "gfx950": {32: _c(128, 64, 4, 2), 64: _c(128, 64, 4, 2), 128: _c(128, 64, 4, 2), 256: _c(64, 32, 4, 1)},
    "gfx1100": {32: _c(64, 64, 8, 2), 64: _c(64, 64, 8, 1), 128: _c(64, 32, 8, 1), 256: _c(64, 32, 8, 1)},
    "gfx1201": {32: _c(64, 64, 8, 2), 64: _c(64, 64, 8, 2), 128: _c(64, 32, 8, 2), 256: _c(64, 32, 8, 1)},
}
assert set(CONFIGS) == set(ARCH_NAMES) and all(set(row) == set(HDIMS) for row in CONFIGS.values())


def padded_hdim(d: int) -> int:
    """The tile width a head dim runs at: the next power of two, at least 32."""
    if not 1 <= d <= HDIMS[-1]:
        raise TileError(f"head dim {d} is not supported: expected 1..{HDIMS[-1]}")
    return max(32, 1 << (d - 1).bit_length())


# Rows for masked variants (causal / window) where they differ: the mask arithmetic changes which
# values LLVM keeps live, and gfx1100 at hdim 128 sits at its 256-VGPR limit either way.
MASKED: dict[str, dict[int, FmhaConfig]] = {
    "gfx90a": {128: _c(128, 32, 4, 2)},
    "gfx942": {128: _c(128, 32, 4, 2)},
    "gfx950": {128: _c(128, 32, 4, 2)},
    "gfx1100": {128: _c(64, 32, 8, 1)},
}


def fmha_config(arch: str, hdim_q: int, hdim_v: int | None = None, masked: bool = False) -> FmhaConfig:
    """The tile config for `arch` and the head dims (actual sizes, padded here)."""
    name = get_arch(arch).name
    hdim_v = hdim_q if hdim_v is None else hdim_v
    hdim = max(padded_hdim(hdim_q), padded_hdim(hdim_v))
    if masked and hdim in MASKED.get(name, {}):
        return MASKED[name][hdim]
    return CONFIGS[name][hdim]


def fmha_defines(arch: str, *, dtype: str = "f16", hdim_q: int = 128, hdim_v: int | None = None,
                 mask: MaskParams | None = None, varlen: bool = False, lse: bool = False,
                 sink: bool = False, softcap: float = 0.0,
                 config: FmhaConfig | None = None) -> dict[str, str]:
    """All constexprs of one fmha_fwd variant (the -D values), from what a call needs."""
    if dtype not in ("f16", "bf16"):
        raise TileError(f"fmha_fwd supports f16 and bf16, got {dtype}")
    hdim_v = hdim_q if hdim_v is None else hdim_v
    dq, dv = padded_hdim(hdim_q), padded_hdim(hdim_v)
    cfg = config or fmha_config(arch, hdim_q, hdim_v, masked=mask is not None and mask.kind != "none")

    def flag(b: bool) -> str:
        return "true" if b else "false"

    return {
        "DT": dtype, "HDIM": str(dq), "HDIM_V": str(dv), **cfg.defines(),
        "MASK": mask.kind if mask is not None else "none",
        "VARLEN": flag(varlen), "HAS_LSE": flag(lse), "HAS_SINK": flag(sink), "SOFTCAP": flag(softcap > 0),
        "PAD_D": flag(dq != hdim_q or dv != hdim_v),
    }
