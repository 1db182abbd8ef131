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


LAID_OUT = Path(__file__).resolve().parent / "kernels" / "laid_out_margin.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_laid_out_fold_matches_numpy(arch: str) -> None:
    """fold-scalars-laid-out moves the loop index and `off` onto the row vector where the
    accumulator layout holds it in fewer registers (gfx12): the same values as numpy, with i32
    wrapping (off near the top of the range)."""
    k = compile_source(LAID_OUT.read_text(), str(LAID_OUT), arch)
    rng = np.random.default_rng(5)
    a = rng.integers(-2, 3, (128, 32)).astype(np.float16)
    b = rng.integers(-2, 3, (192, 32)).astype(np.float16)
    for off in (-3, 2**31 - 100):
        y = np.zeros((128, 192), np.float32)
        launch(k, a, b, y, np.int32(off), device=EmulatorDevice(arch))
        with np.errstate(over="ignore"):
            d = np.arange(192, dtype=np.int32)[None, :] - np.arange(128, dtype=np.int32)[:, None] + np.int32(off)
        want = (a.astype(np.float32) @ b.astype(np.float32).T) * d.astype(np.float32)
        np.testing.assert_array_equal(y, want)


ALIBI = Path(__file__).resolve().parent / "kernels" / "alibi_distance.tile"


def _instructions(asm: str) -> list[str]:
    return [line for line in asm.splitlines() if line.startswith("\t") and not line.strip().startswith((";", "."))]


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_alibi_distance_as_written_compiles_like_hand_folded(arch: str) -> None:
    """ALiBi's `diagonal[:, None] - (n0 + ns)[None, :]` compiles to the same instructions as the
    hand-folded `(diagonal - n0)[:, None] - ns[None, :]` (the loop index leaves the key sum, which
    then holds only `-ns`, for the row vector), and gives numpy's values, wrapping included."""
    natural = compile_source(ALIBI.read_text(), str(ALIBI), arch, {"NATURAL": "true"})
    by_hand = compile_source(ALIBI.read_text(), str(ALIBI), arch, {"NATURAL": "false"})
    assert _instructions(natural.asm) == _instructions(by_hand.asm)
    rng = np.random.default_rng(7)
    a = rng.integers(-2, 3, (128, 32)).astype(np.float16)
    b = rng.integers(-2, 3, (192, 32)).astype(np.float16)
    for off in (5, 2**31 - 100):
        y = np.zeros((128, 192), np.float32)
        launch(natural, a, b, y, np.int32(off), device=EmulatorDevice(arch))
        with np.errstate(over="ignore"):
            d = np.arange(128, dtype=np.int32)[:, None] + np.int32(off) - np.arange(192, dtype=np.int32)[None, :]
        want = (a.astype(np.float32) @ b.astype(np.float32).T) * np.abs(d.astype(np.float32))
        np.testing.assert_array_equal(y, want)


CLAMP = Path(__file__).resolve().parent / "kernels" / "clamp_rows.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_row_clamp_as_written_compiles_like_hand_folded(arch: str) -> None:
    """`minimum(m0 + ms, seqlen - 1)` in a loop ending at `min(n, seqlen)` compiles to the same
    instructions as `minimum(ms, seqlen - 1 - m0) + m0` (fold-scalars moves the loop index out of
    the clamp: the loop's end shows it cannot wrap), and both give numpy's rows. A clamp whose
    bound the loop says nothing about keeps its form: with c near -2^31, `c - 1 - m0` would wrap."""
    natural = compile_source(CLAMP.read_text(), str(CLAMP), arch, {"NATURAL": "true"})
    by_hand = compile_source(CLAMP.read_text(), str(CLAMP), arch, {"NATURAL": "false"})
    assert _instructions(natural.asm) == _instructions(by_hand.asm)
    rows = 96
    x = np.arange(rows * 16, dtype=np.float32).reshape(rows, 16)
    device = EmulatorDevice(arch)
    for seqlen, c in ((70, 5), (200, -2**31 + 5), (-5, 2**31 - 1)):
        y, z = np.zeros_like(x), np.zeros(rows, np.int32)
        launch(natural, x, y, z, np.array([seqlen, c], np.int32), rows, device=device)
        want = np.zeros_like(x)
        valid = min(rows, seqlen)
        if valid > 0:
            blocks = -(-valid // 32) * 32
            want[:blocks] = x[np.minimum(np.arange(blocks), seqlen - 1)]
        np.testing.assert_array_equal(y, want, err_msg=f"seqlen {seqlen}")
        np.testing.assert_array_equal(z, np.minimum(np.arange(rows), c - 1).astype(np.int32), err_msg=f"c {c}")


CHAIN = Path(__file__).resolve().parent / "kernels" / "clamp_chain.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_clamp_chain_matches_numpy(arch: str) -> None:
    """A clamp whose sum is built on an earlier rewritten clamp is judged on the IR as rewritten:
    bounds remembered for ops the pass erased once let `maximum(v + s, 0)` be rewritten although
    `v + s` wraps (found by an adversarial sweep, session 45)."""
    k = compile_source(CHAIN.read_text(), str(CHAIN), arch)
    device = EmulatorDevice(arch)
    ms = np.arange(32, dtype=np.int64)
    for a, b in ((-2000, -2**31), (-7, 5), (3, 2**31 - 1), (-2**31, 900)):
        z = np.zeros(32, np.int32)
        launch(k, z, a, b, device=device)
        s = max(min(a, 0), -2000)
        c = min(max(b, -2**31 + 1000), 1000)
        v = np.minimum(ms + s, c)
        wrapped = (v + s + 2**31) % 2**32 - 2**31
        np.testing.assert_array_equal(z, np.maximum(wrapped, 0).astype(np.int32), err_msg=f"a {a}, b {b}")
