"""Conversions within a wave. stage-lds' wave-private stagings (_wave_private): a layout
conversion whose lanes read back only what their own wave stored needs no workgroup barrier after
its LDS store. Lane exchanges (passes/lane_exchange.py): one whose values move only between lanes
16 apart needs no LDS at all. Kernels with each run under shuffled wave orders in
tests/test_emulator_lockstep.py."""

from __future__ import annotations

import pytest

from tiledsl.passes import layouts as L
from tiledsl.passes.lane_exchange import exchange_map
from tiledsl.passes.stage_lds import _wave_private

pytestmark = pytest.mark.passes

WAVE32, WAVE64 = L.Threads(32, 4), L.Threads(64, 4)


@pytest.mark.parametrize("src,dst,shape,threads,private", [
    # gfx11's P: the waves split the rows in the accumulator and in the A operand alike.
    ("acct(wmma_gfx11,16,16,16,16,f16,4,1)", "opa(wmma_gfx11,16,16,16,16,f16,4,1)", (64, 32), WAVE32, True),
    # Waves 2 x 2: the accumulator splits the columns too, and an A operand row needs them all.
    ("acct(wmma_gfx11,16,16,16,16,f16,2,2)", "opa(wmma_gfx11,16,16,16,16,f16,2,2)", (64, 32), WAVE32, False),
    # A coalesced 64x32 tile gives each wave 16 consecutive rows, as the operand does ...
    ("blocked(8)", "opa(mfma,16,16,16,4,f16,4,1)", (64, 32), WAVE64, True),
    # ... a 128x64 one deals its rows to the waves in turn, 8 at a time.
    ("blocked(8)", "opa(mfma,16,16,16,4,f16,4,1)", (128, 64), WAVE64, False),
    # Every wave reads the whole B operand.
    ("blocked(8)", "opbt(mfma,16,16,16,4,f16,4,1)", (32, 64), WAVE64, False),
    # A source held by every wave: each would store it (a later iteration's over an earlier one's).
    ("opb(wmma_gfx11,16,16,16,16,f16,4,1)", "blocked(8)", (32, 64), WAVE32, False),
])
def test_wave_private(src: str, dst: str, shape: tuple[int, int], threads: L.Threads, private: bool) -> None:
    assert _wave_private(L.Layout.parse(src), L.Layout.parse(dst), shape, threads) is private


def test_exchange_map_of_gfx11s_p_tile() -> None:
    """From the gfx11 WMMA accumulator to an A operand, a lane's register 2i is its own register
    i in the lanes 0-15 and the lane 16 away's in lanes 16-31; register 2i + 1 the other way
    round (the accumulator's rows alternate between the two halves of the wave)."""
    ex = exchange_map(L.Layout.parse("acct(wmma_gfx11,16,16,16,16,f16,4,1)"),
                      L.Layout.parse("opa(wmma_gfx11,16,16,16,16,f16,4,1)"), (64, 32), WAVE32, 16)
    assert ex is not None and ex.xor == 16
    pairs = tuple(i for i in range(16) for _ in range(2))
    assert ex.own == pairs and ex.other == pairs
    assert ex.takes_own == (0x0000FFFF, 0xFFFF0000) * 16


@pytest.mark.parametrize("src,dst,shape", [
    # Columns split over waves: a row's values are in other waves.
    ("acct(wmma_gfx11,16,16,16,16,f16,2,2)", "opa(wmma_gfx11,16,16,16,16,f16,2,2)", (64, 32)),
    # Coalesced rows: a lane's values are spread over 4 lanes, not 2.
    ("blocked(8)", "opa(wmma_gfx11,16,16,16,16,f16,4,1)", (64, 32)),
])
def test_exchange_map_refuses(src: str, dst: str, shape: tuple[int, int]) -> None:
    assert exchange_map(L.Layout.parse(src), L.Layout.parse(dst), shape, WAVE32, 16) is None
