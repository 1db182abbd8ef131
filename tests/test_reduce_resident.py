"""A 16-bit reduction across waves beside a resident operand's LDS region, on the emulator."""

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

REDUCE16 = Path(__file__).resolve().parent / "kernels" / "resident_reduce16.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_f16_reduction_across_waves_beside_a_resident_operand(arch: str) -> None:
    """tests/kernels/resident_reduce16.tile with resident_operands (which the driver turns on where
    held operands cost waves): the f16 reduction's slots began at the arena's byte offset counted in
    2-byte values, halfway into the resident A operand, and overwrote it."""
    k = compile_source(REDUCE16.read_text(), str(REDUCE16), arch,
                       options=CompileOptions(arch=arch, resident_operands=True))
    rng = np.random.default_rng(1)
    n = 128
    a = rng.integers(-2, 3, (64, 64)).astype(np.float16)
    b = rng.integers(-2, 3, (n, 64)).astype(np.float16)
    x = rng.integers(-50, 50, (n, 64)).astype(np.float16)
    o, m = np.zeros((64, 64), np.float32), np.zeros(n, np.float16)
    launch(k, a, b, x, o, m, device=EmulatorDevice(arch))
    np.testing.assert_array_equal(o, sum(a.astype(np.float32) @ b[i:i + 64].astype(np.float32).T
                                         for i in range(0, n, 64)))
    np.testing.assert_array_equal(m, np.concatenate([x[i:i + 64].max(axis=0) for i in range(0, n, 64)]))
