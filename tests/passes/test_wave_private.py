"""Conversions within a wave. stage-lds' wave-private stagings (_wave_private): a layout
conversion whose lanes read back only what their own wave stored needs no workgroup barrier after
its LDS store. Lane exchanges (passes/lane_exchange.py): one whose values move only between lanes
16 apart needs no LDS at all. Kernels with each run under shuffled wave orders in
tests/test_emulator_lockstep.py."""

from __future__ import annotations

import pytest

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.options import CompileOptions
from tiledsl.passes import layouts as L
from tiledsl.passes.lane_exchange import exchange_map, word_relabelling
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


@pytest.mark.parametrize("arch,swizzle,relabelled", [
    ("gfx1100", True, True),
    ("gfx1100", False, False),  # CompileOptions.swizzle_exchange off
    ("gfx1201", True, False),  # gfx12's accumulator already is the operand: nothing to exchange
])
def test_word_relabelling_of_gfx11s_p_tile(arch: str, swizzle: bool, relabelled: bool) -> None:
    """The scores' keys with their two lowest bits swapped: the accumulator's lanes 0-15 hold the
    key pairs 0-1, 4-5, ... and lanes 16-31 the pairs 2-3, 6-7, ..., so every word of the A operand
    is one whole word of the accumulator's (registers 2w, 2w + 1 as they are), the same in every
    lane, lanes 0-15 keeping their own and lanes 16-31 taking the lane 16 away's, or the reverse."""
    kind = "wmma_gfx11,16,16,16,16" if arch == "gfx1100" else "wmma_gfx12,16,16,16,8"
    acc = L.Layout.parse(f"acct({kind},f16,4,1)")
    options = CompileOptions(arch=arch, lane_exchange=True, swizzle_exchange=swizzle)
    images = word_relabelling(acc, (64, 32), WAVE32, get_arch(arch), options)
    assert (images is not None) is relabelled
    if not relabelled:
        return
    assert images == (2, 1, 4, 8, 16)
    ex = exchange_map(L.PermK(1, images, acc), acc.with_kind("opa"), (64, 32), WAVE32, 16)
    assert ex is not None
    for q in range(0, len(ex.own), 2):
        assert ex.own[q] % 2 == 0 and ex.own[q + 1] == ex.own[q] + 1
        assert (ex.other[q], ex.other[q + 1]) == (ex.own[q], ex.own[q + 1])
        assert ex.takes_own[q] == ex.takes_own[q + 1] in (0x0000FFFF, 0xFFFF0000)
    # Each half of the wave keeps its own words for half of the operand.
    assert sorted(ex.takes_own[::2]) == [0x0000FFFF] * 8 + [0xFFFF0000] * 8
