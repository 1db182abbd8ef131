"""Vector memory access: with a contiguous last dim and strides known to be multiples of 16 bytes,
loads and stores of whole rows become 16-byte accesses; the results stay exact on every arch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.device_array import DeviceArray
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
    # The row mask makes them buffer accesses (a masked-off row's offset is out of range).
    loads = [m for m in wide if m.startswith("buffer_load_") and (m.endswith("x4") or m.endswith("b128"))]
    stores = [m for m in wide if m.startswith("buffer_store_") and (m.endswith("x4") or m.endswith("b128"))]
    assert loads and stores, f"no 16-byte buffer accesses: {sorted(m for m in wide if 'buffer' in m)}"
    # Without the stride facts our lowering emits element accesses; LLVM may merge them into wider
    # ones anyway (HSA code objects run in unaligned access mode), so the test that matters is the
    # emulator's on rows that are not 16-byte aligned (below). Either way no mask is a branch.
    for counts in (wide, narrow):
        assert not counts["s_cbranch_execz"] and not any(m.startswith("global_") for m in counts), sorted(counts)


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


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_masked_rows_read_zero_and_write_nothing(arch: str) -> None:
    """The last row block's masked-off rows go out of the buffer descriptor's range: they write
    nothing past the tensor (rows after it in the same device buffer keep their sentinel)."""
    dev = EmulatorDevice(arch)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 128)).astype(np.float16)
    whole_y = DeviceArray.from_numpy(dev, np.full((64, 128), 7.0, np.float16))
    y = DeviceArray(whole_y.buffer, (45, 128), whole_y.dtype, (128, 1), 0)  # rows 45..63 are not y's
    launch(build(arch, aligned=True), DeviceArray.from_numpy(dev, x[:45]), y, device=dev)
    out = whole_y.numpy()
    np.testing.assert_array_equal(out[:45], x[:45] * np.float16(2))
    np.testing.assert_array_equal(out[45:], np.float16(7.0))


@pytest.mark.compile
def test_large_tensors_keep_64_bit_addresses() -> None:
    """Buffer instructions reach 2 GiB: the manifest marks the tensors they address, and a tensor
    declared large is addressed with global instructions (its masks branch) instead."""
    k = build("gfx942", aligned=True)
    assert [(t["name"], t["buffer"]) for t in k.manifest["tensors"]] == [("x", True), ("y", True)]
    opts = CompileOptions.make("gfx942", {}, stride_units=(("x", 8), ("y", 8)), large_tensors=("y",))
    large = compile_source(SOURCE.read_text(), str(SOURCE), "gfx942", {}, opts)
    assert [(t["name"], t["buffer"]) for t in large.manifest["tensors"]] == [("x", True), ("y", False)]
    counts = count_instructions(large.asm).mnemonics
    assert counts["buffer_load_dwordx4"] and counts["global_store_dwordx4"] and counts["s_cbranch_execz"]
    with pytest.raises(TileError, match=r"large_tensors: 'z' is not a tensor argument of kernel 'copy_rows' "
                                        r"\(its tensors: x, y\)"):
        compile_source(SOURCE.read_text(), str(SOURCE), "gfx942", {},
                       CompileOptions.make("gfx942", {}, large_tensors=("z",)))


@pytest.mark.emulator
def test_tensor_beyond_the_buffer_reach_is_refused() -> None:
    """A tensor spanning more than 2 GiB (but fewer than 2^31 elements) cannot be addressed by a
    buffer descriptor: refused before anything is copied or launched, naming the way out."""
    k = build("gfx942", aligned=True)
    base = np.zeros(8, np.float16)
    # 45 rows 2^25 elements apart: 1.5e9 elements (i32 offsets reach them), 2.95e9 bytes.
    x = np.lib.stride_tricks.as_strided(base, shape=(45, 128), strides=(2**26, 2))
    y = np.zeros((45, 128), np.float16)
    dev = EmulatorDevice("gfx942")
    with pytest.raises(ValueError, match=r"argument 'x': spans 2952790272 bytes; this kernel variant addresses it "
                                         r"with buffer instructions, which reach 2147483648 bytes \(2 GiB\): compile "
                                         r"it with CompileOptions\(large_tensors=\('x',\)\)"):
        launch(k, x, y, device=dev)
    assert not dev.launches


FILL_SOURCE = """
kernel fill_tail(x: tensor[f16](R, C), y: tensor[f16](16, 64)) grid(1) {
    let r = arange(0, 16);
    let c = arange(0, 64);
    let t = load(x[r[:, None], c[None, :]], mask=(r[:, None] < R) & (c[None, :] < C), other=-2.5);
    store(y[r[:, None], c[None, :]], t);
}
"""


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_masked_load_with_a_fill_is_a_buffer_load_and_a_select(arch: str) -> None:
    """A lane-dependent mask with a fill other than 0: buffer loads (out-of-range lanes read 0)
    and a select of the fill, no branch per access; the filled elements read the fill."""
    k = compile_source(FILL_SOURCE, "fill_tail.tile", arch, {}, CompileOptions.make(arch, {}))
    mnemonics = count_instructions(k.asm).mnemonics
    assert any(m.startswith("buffer_load_") for m in mnemonics), sorted(set(mnemonics))
    assert not any(m.startswith("s_cbranch_exec") for m in mnemonics), sorted(set(mnemonics))
    x = np.random.default_rng(7).standard_normal((11, 40)).astype(np.float16)
    y = np.zeros((16, 64), np.float16)
    dev = EmulatorDevice(arch)
    dy = DeviceArray.from_numpy(dev, y)
    launch(k, DeviceArray.from_numpy(dev, x), dy, device=dev)
    want = np.full((16, 64), -2.5, np.float16)
    want[:11, :40] = x
    np.testing.assert_array_equal(dy.numpy(), want)
