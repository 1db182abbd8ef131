"""stage-lds's wider arena (CompileOptions.loop_arena) and merged stores (merge_stores) on the
emulator: a loop whose two LDS stagings get bytes of their own (tests/kernels/staged_pair.tile; on
gfx1201, gfx942, gfx950 and gfx90a the arena grows past the tile staged before the loop, on gfx1100
it keeps that size), or whose look-ahead tiles are stored together behind one barrier, gives
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
@pytest.mark.parametrize("ask", ["loop_arena", "merge_stores"])
def test_staged_pair_matches_numpy(arch: str, ask: str) -> None:
    defines = {"STAGES": "2"} if ask == "merge_stores" else {}
    options = CompileOptions.make(arch, defines, **{ask: True})
    k = compile_source(SOURCE.read_text(), str(SOURCE), arch, defines, options=options)
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


THREE = Path(__file__).resolve().parent / "kernels" / "merged_three.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_merged_store_kept_clear_of_a_staging_between(arch: str) -> None:
    """tests/kernels/merged_three.tile with merge_stores: C's tile is stored with B's at the top of
    the step and read after S's staging, which must not take C's bytes in between (on gfx1201 the
    merged kernel spills, and the driver compiles it with a barrier before every staging)."""
    k = compile_source(THREE.read_text(), str(THREE), arch, options=CompileOptions(arch=arch, merge_stores=True))
    rng = np.random.default_rng(8)
    n = 96
    a = rng.integers(-2, 3, (64, 128)).astype(np.float16)
    b, c = (rng.integers(-2, 3, (n, 128)).astype(np.float16) for _ in range(2))
    e = rng.integers(-2, 3, (64, 64)).astype(np.float16)
    want2 = np.zeros((64, 32), np.float32)
    want = np.zeros((64, 128), np.float32)
    for n0 in range(0, n, 32):  # small integers: every step is exact
        s = a.astype(np.float32) @ b[n0:n0 + 32].astype(np.float32).T
        want2 += e.astype(np.float32) @ s
        want += s @ c[n0:n0 + 32].astype(np.float32)
    for dev in (EmulatorDevice(arch), *(EmulatorDevice(arch, schedule="shuffle", seed=seed) for seed in (1, 2))):
        o, o2 = np.zeros((64, 128), np.float32), np.zeros((64, 32), np.float32)
        launch(k, a, b, c, e, o, o2, device=dev)
        np.testing.assert_array_equal(o, want, err_msg=f"{dev.schedule}")
        np.testing.assert_array_equal(o2, want2, err_msg=f"{dev.schedule}")



TWICE = Path(__file__).resolve().parent / "kernels" / "operand_twice.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_a_tile_staged_before_a_loop_and_kept_for_it_shares_bytes(arch: str) -> None:
    """tests/kernels/operand_twice.tile: W staged for a dot before the loop and kept in LDS for
    the loop's dot in another layout takes 33 KiB once, not twice (on RDNA the kernel did not
    compile: 67,584 bytes), and U's staging after the loop, in the same bytes, waits for the loop's
    last read. The kernel spills on RDNA (a 128 x 128 operand takes 256 registers per lane there),
    which the emulator runs like any other scratch access."""
    k = compile_source(TWICE.read_text(), str(TWICE), arch, options=CompileOptions(arch=arch, allow_spills=True))
    assert k.manifest["lds_bytes"] < 2 * 128 * 132 * 2, k.manifest["lds_bytes"]  # W's bytes once
    rng = np.random.default_rng(9)
    a = rng.integers(-2, 3, (32, 128)).astype(np.float16)
    w = (rng.integers(-1, 2, (128, 128)) * (rng.random((128, 128)) < 0.05)).astype(np.float16)
    u = rng.integers(-2, 3, (128, 128)).astype(np.float16)
    for steps in (0, 2):
        v = a.astype(np.float32) @ w.astype(np.float32)
        for _ in range(steps):  # sparse small integers: every value stays exact in f16
            v = v @ w.astype(np.float32)
        assert np.abs(v).max() < 2048
        want = v @ u.astype(np.float32)
        for dev in (EmulatorDevice(arch), *(EmulatorDevice(arch, schedule="shuffle", seed=seed) for seed in (1, 2))):
            o = np.zeros((32, 128), np.float32)
            launch(k, a, w, u, o, np.int32(steps), device=dev)
            np.testing.assert_array_equal(o, want, err_msg=f"steps {steps}, {dev.schedule}")
