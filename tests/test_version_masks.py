"""version-masks: a masked select, store or (not prefetched) load in a loop does its per-element
work only on the blocks its mask does not pass whole (passes/version_masks.py). Same results as
the mask everywhere, including where the index arithmetic wraps (the pass must then take the
masked branch), and fewer instructions executed where blocks pass whole."""

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
KERNEL = Path(__file__).parent / "kernels" / "masked_loop.tile"
I32_MAX, I32_MIN = 2**31 - 1, -(2**31)
N = 160  # 5 column blocks of 32


def _reference(x: np.ndarray, lim: int, off: int) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's results with i32 arithmetic wrapping as on the GPU."""
    rows = np.arange(64, dtype=np.int32)[:, None]
    keys = np.arange(N, dtype=np.int32)[None, :]
    with np.errstate(over="ignore"):
        margin = np.minimum(keys + np.int32(off) - rows, np.int32(lim) - np.int32(1) - keys)
    y = np.where(margin >= 0, x, np.float32(-1.0))
    z = np.where(np.broadcast_to(keys < np.int32(lim), x.shape), x * np.float32(2.0), np.float32(0.0))
    return y, z


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_versioned_masks_match_the_mask_everywhere(arch: str) -> None:
    k = compile_source(KERNEL.read_text(), str(KERNEL), arch)
    x = np.arange(64 * N, dtype=np.float32).reshape(64, N)
    executed = {}
    cases = {
        "band": (N, 0),                      # blocks cut by the diagonal band, others whole
        "end": (100, 0),                     # the end cuts a block in the middle; later blocks empty
        "whole": (N, 200),                   # every block passes whole
        "wraps": (I32_MAX, I32_MAX - 19),    # keys + off wraps past 20 keys: the masked branch
        "lim wraps": (I32_MIN, 5),           # lim - 1 wraps to I32_MAX
        "off wraps": (70, I32_MIN + 3),
    }
    for name, (lim, off) in cases.items():
        dev = EmulatorDevice(arch)
        y, z = np.zeros_like(x), np.zeros_like(x)
        launch(k, x, y, z, np.int32(lim), np.int32(off), device=dev)
        want_y, want_z = _reference(x, lim, off)
        np.testing.assert_array_equal(y, want_y, err_msg=name)
        np.testing.assert_array_equal(z, want_z, err_msg=name)
        executed[name] = dev.last_stats["wave_instructions"]
    # Blocks that pass whole skip the compares and selects: fewer instructions than the same loop
    # where every block takes the masked branch because the sums could wrap.
    assert executed["whole"] < executed["wraps"], executed


PREFETCH_KERNEL = Path(__file__).parent / "kernels" / "prefetch_loop.tile"


def _loop_loads(mlir: str) -> tuple[int, int]:
    """(loads before the kernel's loop, loads inside it) in a pass dump."""
    head, _, body = mlir.partition("scf.for")
    return head.count('"tile.load"'), body.count('"tile.load"')


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_load_that_stays_in_its_iteration_is_versioned(arch: str, tmp_path: Path) -> None:
    """In a stages(2) loop, x's masked load is prefetched (one look-ahead load before the loop)
    and keeps its mask; w's, marked prefetch=false, is not prefetched but split by version-masks
    into an unmasked load and a masked one. Both give the masked values at every `lim`."""
    options = CompileOptions(arch=arch, dump_ir_dir=str(tmp_path))
    k = compile_source(PREFETCH_KERNEL.read_text(), str(PREFETCH_KERNEL), arch, options=options)
    versioned = next(tmp_path.glob("*pass01-version-masks.mlir")).read_text()
    assert _loop_loads(versioned) == (0, 3), "w's load splits in two, x's stays one"
    pipelined = next(tmp_path.glob("*pass05-pipeline-loops.mlir")).read_text()
    assert _loop_loads(pipelined) == (1, 3), "only x's load is issued ahead"
    assert pipelined.count("prefetch = false") == 2

    x = np.arange(64 * N, dtype=np.float32).reshape(64, N)
    w = (np.arange(64 * N, dtype=np.float32) * np.float32(0.25)).reshape(64, N)
    keys = np.arange(N, dtype=np.int64)[None, :]
    for lim in (N, 100, 32, 0, I32_MAX, I32_MIN):
        dev = EmulatorDevice(arch)
        y = np.zeros_like(x)
        launch(k, x, w, y, np.int32(lim), device=dev)
        want = np.where(keys < lim, x + w, np.float32(-1.0) + np.float32(0.5))
        np.testing.assert_array_equal(y, want, err_msg=f"lim {lim}")
