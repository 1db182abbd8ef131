"""Vector memory access: with a contiguous last dim and strides known to be multiples of 16 bytes,
loads and stores of whole rows become 16-byte accesses; the results stay exact on every arch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.errors import TileError
from tiledsl.isa_stats import count_instructions
from tiledsl.launcher import launch
from tiledsl.options import CompileOptions

SOURCE = Path(__file__).resolve().parent / "kernels" / "copy_rows.tile"


def build(arch: str, aligned: bool):
    units = (("x", 8), ("y", 8)) if aligned else ()
    return compile_source(SOURCE.read_text(), str(SOURCE), arch, {},
                          CompileOptions.make(arch, {}, stride_units=units))


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_aligned_rows_use_16_byte_accesses(arch: str) -> None:
    wide = count_instructions(build(arch, aligned=True).asm).mnemonics
    narrow = count_instructions(build(arch, aligned=False).asm).mnemonics
    loads = [m for m in wide if m.startswith("global_load_") and (m.endswith("x4") or m.endswith("b128"))]
    stores = [m for m in wide if m.startswith("global_store_") and (m.endswith("x4") or m.endswith("b128"))]
    assert loads and stores, f"no 16-byte global accesses: {sorted(m for m in wide if 'global' in m)}"
    # Without the stride facts our lowering emits element accesses, one mask test per row group
    # (the mask is uniform there). LLVM may merge them into wider accesses anyway (HSA code
    # objects run in unaligned access mode), so the test that matters is the emulator's on rows
    # that are not 16-byte aligned (below); here, that each group was tested once, not per element.
    branches, groups = narrow["s_cbranch_execz"], len(loads) + len(stores)
    assert 0 < branches <= sum(wide[m] for m in loads + stores), \
        f"{branches} mask branches for {groups} row groups: expected one test per group"


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_vector_copy_matches_numpy(arch: str) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((45, 128)).astype(np.float16)  # a partial last row block
    y = np.zeros_like(x)
    launch(build(arch, aligned=True), x, y, device=EmulatorDevice(arch))
    np.testing.assert_array_equal(y, x * np.float16(2))
    with pytest.raises(ValueError, match="stride 130 on dim 0 is not a multiple of 8"):
        xs = np.zeros((45, 130), np.float16)[:, :128]
        launch(build(arch, aligned=True), xs, y, device=EmulatorDevice(arch))


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_general_variant_on_unaligned_rows(arch: str) -> None:
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((45, 130)).astype(np.float16)[:, 1:129]  # rows start 2 bytes off 16
    ys = np.zeros((45, 130), np.float16)[:, 1:129]
    launch(build(arch, aligned=False), xs, ys, device=EmulatorDevice(arch))
    np.testing.assert_array_equal(ys, xs * np.float16(2))


@pytest.mark.compile
def test_dim_units_are_checked() -> None:
    """A shape symbol compiled as a multiple of a unit is checked at launch and named on error."""
    opts = CompileOptions.make("gfx942", {}, dim_units=(("C", 8),))
    k = compile_source(SOURCE.read_text(), str(SOURCE), "gfx942", {}, opts)
    assert k.manifest["dim_units"] == {"C": 8}
    x = np.zeros((4, 132), np.float16)
    with pytest.raises(ValueError, match=r"argument 'x': x.shape\[1\] is C = 132, which this kernel variant "
                                         r"assumes is a multiple of 8"):
        launch(k, x, np.zeros_like(x), device=EmulatorDevice("gfx942"))
    with pytest.raises(TileError, match="dim_units: 'D' is not a shape symbol of kernel 'copy_rows'"):
        compile_source(SOURCE.read_text(), str(SOURCE), "gfx942", {},
                       CompileOptions.make("gfx942", {}, dim_units=(("D", 8),)))
