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


GATHER = Path(__file__).parent / "kernels" / "gather_loop.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_prologue_masks_the_loads_an_address_depends_on(tmp_path, arch: str) -> None:
    """The pipelined prologue loads iteration `s` before the loop finds whether it runs at all:
    the index load the row's address depends on is masked by `s < n` like the row itself, so a
    loop with no iteration reads no index outside its table (LLVM sinks simple prologues behind
    the loop's guard, but not past a barrier, as a paged table's LDS staging has)."""
    from dataclasses import replace

    from tiledsl.options import CompileOptions

    options = replace(CompileOptions.make(arch, {}), dump_ir_dir=str(tmp_path))
    k = compile_source(GATHER.read_text(), str(GATHER), arch, {}, options)
    ir_text = (tmp_path / f"gather_loop.{arch}.03.pass05-pipeline-loops.mlir").read_text()
    prologue = ir_text[:ir_text.index("scf.for")]
    loads = [line for line in prologue.splitlines() if '"tile.load"' in line]
    assert len(loads) == 3 and not any("%true" in line.split("(")[1] for line in loads), loads
    x = np.arange(5 * 64, dtype=np.float32).reshape(5, 64)
    for idx, s, n in ((np.array([4, 1, 3], np.int32), 0, 3), (np.array([2], np.int32), -100000, -100000)):
        y = np.full(64, 7, np.float32)
        launch(k, idx, x, y, s, n, device=EmulatorDevice(arch))
        np.testing.assert_array_equal(y, x[idx[s:n]].sum(0) if n > s else np.zeros(64, np.float32))
