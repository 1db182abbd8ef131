"""Swizzled LDS stagings (layouts.Swizzle, stage-lds' _cheapest_transposed): a transposed staging's
rows keep their 16-byte chunks at flipped positions instead of padding, so V's stores and reads on
RDNA meet fewer bank conflicts and its reads stay whole 16-byte vectors. The emulated kernels
(tests/test_emulator_lockstep.py::test_transposed_stagings_swizzled) check the lowering's bits."""

from __future__ import annotations

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.passes import layouts as L
from tiledsl.passes.stage_lds import _cheapest_transposed

pytestmark = pytest.mark.passes

V_SHAPE = (32, 64)  # a key block of V: [keys, head dim], stored transposed as 64 rows of 32 keys
PITCH = 32
SWIZZLES = [L.Swizzle(8, (10, 20)), L.Swizzle(8, (1, 6)), L.Swizzle(8, (12,))]


def v_layouts(arch: str, waves: int) -> list[tuple[L.Layout, bool]]:
    """V's coalesced load layout (2 keys a lane, the transposed store's) and its WMMA B operand
    layout (the reads'), with whether the access is a store (registers gathered by address)."""
    op = get_arch(arch).matrix_op("f16", 16)
    return [(L.Blocked(8, 2), True), (L.Mma("opb", op, 1, waves), False)]


@pytest.mark.parametrize("swizzle", SWIZZLES)
def test_swizzle_permutes_chunks_within_rows(swizzle: L.Swizzle) -> None:
    rows, cols = np.meshgrid(np.arange(V_SHAPE[1]), np.arange(V_SHAPE[0]), indexing="ij")
    at = L.swizzled_offsets(rows, cols, PITCH, swizzle)
    assert sorted(at.ravel().tolist()) == list(range(V_SHAPE[0] * V_SHAPE[1]))  # every element once
    assert ((at // PITCH) == rows).all() and ((at % swizzle.chunk) == (cols % swizzle.chunk)).all()


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
@pytest.mark.parametrize("swizzle", SWIZZLES)
def test_runs_are_vectors_from_one_base_per_flip(arch: str, swizzle: L.Swizzle) -> None:
    """Every run lds_runs makes is, in every thread, consecutive swizzled offsets starting at its
    `at` past the thread's base for the run's flips, aligned as the run says."""
    threads = L.Threads(32, 4)
    weights = np.array([1, PITCH])  # stored transposed: the head dim is the row
    for layout, store in v_layouts(arch, 4):
        lin = L.linear(layout, V_SHAPE, threads)
        assert L.swizzle_fits(lin)
        coords = L.coords(layout, V_SHAPE, threads)  # [threads, regs, (key, dim)]
        at = L.swizzled_offsets(coords[..., 1], coords[..., 0], PITCH, swizzle)
        thread = coords[:, 0] - lin.regs[0]  # each thread's own part of its coordinates
        runs = L.lds_runs(lin, weights, 0, 2, by_address=store, swizzle=swizzle, major=1)
        assert sorted(r for run in runs for r in run.regs) == list(range(lin.num_regs))
        for run in runs:
            dim, key = thread[:, 1], thread[:, 0]
            flips = ((key & swizzle.field) // swizzle.chunk) ^ swizzle.flips(dim) ^ run.flips
            base = dim * PITCH + (key & ~swizzle.field) + flips * swizzle.chunk
            want = base[:, None] + run.at + np.arange(len(run.regs))
            assert (at[:, run.regs] == want).all(), (layout, run)
            assert (at[:, run.regs[0]] * 2 % run.align == 0).all()


@pytest.mark.parametrize("arch,waves", [("gfx1100", 2), ("gfx1201", 4)])
def test_rdna_v_takes_a_swizzle(arch: str, waves: int) -> None:
    """V at head dim 64 on RDNA: unpadded rows, swizzled; without swizzles, the usual padding (4
    elements), which the swizzle beats in LDS cycles with as many 16-byte reads."""
    a = get_arch(arch)
    threads, banks = L.Threads(a.wave_size, waves), a.timing.lds_bytes_per_clk // 4
    src, dst = str(L.Blocked(8, 2)), str(L.Mma("opb", a.matrix_op("f16", 16), 1, waves))
    row, swizzle = _cheapest_transposed(src, dst, V_SHAPE, 2, threads, banks, True, True)
    assert row == PITCH and swizzle is not None and swizzle.chunk == 8
    assert _cheapest_transposed(src, dst, V_SHAPE, 2, threads, banks, True, False) == (PITCH + 4, None)
