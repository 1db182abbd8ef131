"""stage-lds pads a staged tile's rows to its reads' vector width where the LDS banks allow
(_row_major_pitch), unless the wider rows would leave room for fewer waves per SIMD in the LDS
(_align_rows). The wave-private P tile of stage_lds_wave_private_gfx1100.mlir (64 x 32 f16, read
16 bytes per lane) takes 40-element rows (5120 bytes) instead of the usual 36 (4608 bytes)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.options import CompileOptions
from tiledsl.passes.pipeline import run_pass

pytestmark = pytest.mark.passes
CASE = (Path(__file__).parent / "stage_lds_wave_private_gfx1100.mlir").read_text()


def staged(lds_bytes: int) -> tuple[set[int], int]:
    """The row strides and the LDS bytes stage-lds gives the case on a gfx1100 with this LDS."""
    arch = dataclasses.replace(get_arch("gfx1100"), lds_bytes=lds_bytes)
    out = run_pass("stage-lds", CASE, arch, CompileOptions(arch="gfx1100"))
    strides = {int(s) for s in re.findall(r"row_stride = (\d+) : i32", out)}
    return strides, int(re.search(r"tile.lds_bytes = (\d+) : i32", out).group(1))


@pytest.mark.parametrize("lds_bytes,strides,need", [
    (64 * 1024, {40}, 5120),  # 12 workgroups either way past the 16 waves per SIMD: aligned
    (3 * 5120, {40}, 5120),  # 3 workgroups either way
    (3 * 4608, {36}, 4608),  # aligned rows would fit 2 workgroups, not 3
    (4608, {36}, 4608),  # aligned rows would not fit at all; the usual ones do
])
def test_rows_align_unless_it_costs_waves(lds_bytes: int, strides: set[int], need: int) -> None:
    assert staged(lds_bytes) == (strides, need)
