"""stage-lds's wider arena (CompileOptions.loop_arena) on the emulator: a loop whose two LDS
stagings get bytes of their own (tests/kernels/staged_pair.tile; on gfx1201, gfx942, gfx950 and
gfx90a the arena grows past the tile staged before the loop, on gfx1100 it keeps that size) gives
numpy's values on every arch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.launcher import launch
from tiledsl.options import CompileOptions

pytestmark = pytest.mark.emulator
SOURCE = Path(__file__).resolve().parent / "kernels" / "staged_pair.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_staged_pair_matches_numpy(arch: str) -> None:
    k = compile_source(SOURCE.read_text(), str(SOURCE), arch, options=CompileOptions(arch=arch, loop_arena=True))
    rng = np.random.default_rng(7)
    n = 96  # three iterations: each staging's bytes are stored again after the other's reads
    a = rng.integers(-2, 3, (64, 128)).astype(np.float16)
    b = rng.integers(-2, 3, (n, 128)).astype(np.float16)
    c = rng.integers(-2, 3, (n, 128)).astype(np.float16)
    s = a.astype(np.float32) @ b.astype(np.float32).T  # small integers: every step is exact
    # Lockstep and shuffled wave orders: the ordinary path runs a wave on to its next barrier
    # before the next wave starts, so a store that one barrier too few let through would overwrite
    # bytes another wave has yet to read.
    for dev in (EmulatorDevice(arch), *(EmulatorDevice(arch, schedule="shuffle", seed=seed) for seed in (1, 2))):
        o = np.zeros((64, 128), np.float32)
        launch(k, a, b, c, o, device=dev)
        np.testing.assert_array_equal(o, s @ c.astype(np.float32), err_msg=f"{dev.schedule}")
