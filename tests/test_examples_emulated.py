"""The compiled examples run on the emulator, through the launcher, and match numpy on every arch
for f16 and bf16, on shapes that are not multiples of the tiles."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.launcher import launch
from tiledsl.options import CompileOptions

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
from cases import CASES, TOLERANCE  # noqa: E402

pytestmark = pytest.mark.emulator


@functools.cache
def kernel(name: str, arch: str, dtype: str, strided: bool = False):
    path = EXAMPLES / f"{name}.tile"
    options = CompileOptions.make(arch, {"DT": dtype}, unit_last_stride=not strided)
    return compile_source(path.read_text(), str(path), arch, {"DT": dtype}, options)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_matches_numpy(name: str, arch: str, dtype: str) -> None:
    args, kwargs, check = CASES[name](dtype, np.random.default_rng(1))
    launch(kernel(name, arch, dtype), *args, device=EmulatorDevice(arch), **kwargs)
    err = check()
    assert err <= TOLERANCE[dtype], f"max relative error {err:.3e} above {TOLERANCE[dtype]}"


def test_launcher_rejects_bad_arguments() -> None:
    k = kernel("gemm", "gfx942", "f16")
    a = np.zeros((2, 70, 40), np.float16)
    b = np.zeros((2, 50, 40), np.float16)
    c = np.zeros((2, 70, 50), np.float16)
    dev = EmulatorDevice("gfx942")
    with pytest.raises(ValueError, match="argument 'b': expected dtype f16"):
        launch(k, a, b.astype(np.float32), c, 1.0, device=dev)
    with pytest.raises(ValueError, match=r"argument 'c': dim 1 is M = 60, but M = 70 from a.shape\[1\]"):
        launch(k, a, b, np.zeros((2, 60, 50), np.float16), 1.0, device=dev)
    with pytest.raises(ValueError, match="argument 'a': expected 3 dims"):
        launch(k, a[0], b, c, 1.0, device=dev)
    with pytest.raises(ValueError, match="argument 'alpha': expected an f32 number"):
        launch(k, a, b, c, "x", device=dev)
    with pytest.raises(ValueError, match="missing argument"):
        launch(k, a, b, device=dev)
    with pytest.raises(ValueError, match="cannot run on a gfx90a device"):
        launch(k, a, b, c, 1.0, device=EmulatorDevice("gfx90a"))


def test_launcher_honours_strides() -> None:
    """With the strided variant, a transposed view and a sliced view are passed with their own
    strides; the default variant (contiguous last dims) rejects them before launching."""
    k = kernel("gemm", "gfx942", "f16", strided=True)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((1, 40, 33)).astype(np.float16)
    bt = rng.standard_normal((1, 40, 48)).astype(np.float16)  # b = bt^T: [1, 48, 40] with strides
    big = np.zeros((1, 33, 96), np.float16)
    c = big[:, :, ::2]  # every other column
    launch(k, a.transpose(0, 2, 1), bt.transpose(0, 2, 1), c, 1.0, device=EmulatorDevice("gfx942"))
    ref = np.einsum("bkm,bkn->bmn", a.astype(np.float64), bt.astype(np.float64))
    assert np.abs(c.astype(np.float64) - ref).max() < 2e-2 * np.abs(ref).max()
    assert not big[:, :, 1::2].any(), "columns between the strided ones are untouched"
    with pytest.raises(ValueError, match="argument 'a': the kernel was compiled for a contiguous last dim"):
        launch(kernel("gemm", "gfx942", "f16"), a.transpose(0, 2, 1), bt.transpose(0, 2, 1), c, 1.0,
               device=EmulatorDevice("gfx942"))
