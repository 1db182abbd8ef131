"""fold-scalars on the emulator: integer sums whose scalar terms the pass moves onto the key vector
(tests/kernels/margins.tile, the shape of the attention kernels' edge margins) give numpy's
values on every arch, wrapping included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.launcher import launch

pytestmark = pytest.mark.emulator
SOURCE = Path(__file__).resolve().parent / "kernels" / "margins.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_margins_match_numpy(arch: str) -> None:
    k = compile_source(SOURCE.read_text(), str(SOURCE), arch)
    n_keys = 96
    y = np.zeros((64, n_keys), np.int32)  # M x N: the kernel writes [64, 32]
    shift, wl, bound = -7, 2**31 - 5, 40  # wl + n0 wraps: the scalars' order must not matter
    launch(k, y, shift, wl, bound, device=EmulatorDevice(arch))
    rows, ns = np.arange(64, dtype=np.int64)[:, None], np.arange(32, dtype=np.int64)[None, :]
    want = np.zeros((64, 32), np.int64)
    for n0 in range(0, n_keys, 32):
        keys = n0 + ns
        first = (keys - rows - shift + wl + 2**31) % 2**32 - 2**31  # i32 wrap-around
        want = np.minimum(want, np.minimum(first, bound - keys))
    np.testing.assert_array_equal(y[:, :32], want.astype(np.int32))
