"""stages(2, reuse=true): a pipelined loop loads each next tile after the current one's last use,
into its registers (passes/pipeline_loops.place_lookahead_loads), instead of beside it with a copy
at every iteration's end. Same results; fewer register moves on every arch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.isa_stats import count_instructions
from tiledsl.launcher import launch

pytestmark = pytest.mark.emulator
KERNEL = Path(__file__).parent / "kernels" / "reuse_loop.tile"


def _moves(asm: str) -> int:
    return sum(n for name, n in count_instructions(asm).mnemonics.items() if name.startswith("v_mov_b32"))


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_reuse_keeps_results_and_drops_copies(arch: str) -> None:
    rng = np.random.default_rng(11)
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64 * 5, 64)).astype(np.float16)  # 5 iterations: the prologue, the clamped look-ahead
    want = a.astype(np.float64) @ b.astype(np.float64).reshape(5, 64, 64).sum(axis=0).T
    moves, outs = [], []
    for reuse in ("false", "true"):
        k = compile_source(KERNEL.read_text(), str(KERNEL), arch, {"REUSE": reuse})
        c = np.zeros((64, 64), np.float32)
        launch(k, a, b, c, device=EmulatorDevice(arch))
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)  # f32 sums of exact f16 products
        moves.append(_moves(k.asm))
        outs.append(c)
    np.testing.assert_array_equal(outs[1], outs[0])  # the same arithmetic in the same order
    assert moves[1] < moves[0], moves
