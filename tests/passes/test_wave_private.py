"""stage-lds' wave-private stagings (_wave_private): a layout conversion whose lanes read back
only what their own wave stored needs no workgroup barrier after its LDS store. The kernels that
take one run under shuffled wave orders in tests/test_emulator_lockstep.py."""

from __future__ import annotations

import pytest

from tiledsl.passes import layouts as L
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
