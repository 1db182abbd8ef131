"""philox(...) and umulhi(...) in the kernel language: bit for bit against tiledsl.reference on
every arch (the dropout masks of issue 14 are defined by these bits)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.errors import SourceError
from tiledsl.lang.checker import bind
from tiledsl.lang.parser import parse
from tiledsl.launcher import launch
from tiledsl.reference import philox4x32, philox_byte

pytestmark = pytest.mark.emulator
SOURCE = Path(__file__).resolve().parent / "kernels" / "philox.tile"


def test_reference_known_answers() -> None:
    """Random123's known-answer vectors for Philox-4x32-10."""
    cases = [((0, 0), (0, 0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((0xFFFFFFFF,) * 2, (0xFFFFFFFF,) * 4, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0xA4093822, 0x299F31D0), (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for key, counter, want in cases:
        assert tuple(int(w) for w in philox4x32(key, counter)) == want


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_philox_bits_match_the_reference(arch: str) -> None:
    k = compile_source(SOURCE.read_text(), str(SOURCE), arch)
    rows, cols = 21, 50
    out = np.zeros((4, rows, cols), np.int32)
    hi = np.zeros((rows, cols), np.int32)
    seed0, seed1, offset = -123456789, 987654321, 2**31 - 5
    launch(k, out, hi, seed0, seed1, offset, device=EmulatorDevice(arch))
    c0, c1 = np.meshgrid(np.arange(cols), np.arange(rows))
    want = philox4x32((seed0, seed1), (c0, c1, 7, offset))
    np.testing.assert_array_equal(out.view(np.uint32), np.stack(want))
    a = (c0.astype(np.int64) * 99991 + seed0) & 0xFFFFFFFF
    b = (c1.astype(np.int64) - 1) & 0xFFFFFFFF
    np.testing.assert_array_equal(hi.view(np.uint32), ((a * b) >> 32).astype(np.uint32))


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_philox_byte_builtin_matches_the_reference(arch: str) -> None:
    """philox_byte in its three forms (tests/kernels/philox_byte.tile) bit for bit, and the shared
    call really is shared where the layout allows it: fewer multiplies than one call per element."""
    src = SOURCE.parent / "philox_byte.tile"
    k = compile_source(src.read_text(), str(src), arch)
    r, kk = 70, 96
    rk, kr, odd = np.zeros((r, kk), np.int32), np.zeros((kk, r), np.int32), np.zeros((r, kk), np.int32)
    launch(k, rk, kr, odd, -5, 2**31 - 1, 11, 3, device=EmulatorDevice(arch))
    key = (-5 & 0xFFFFFFFF, 2**31 - 1)
    j, i = np.arange(kk)[None, :], np.arange(r)[:, None]
    np.testing.assert_array_equal(rk, philox_byte(key, j, i, 11, 3))
    np.testing.assert_array_equal(kr, philox_byte(key, j, i, 11, 3).T)
    np.testing.assert_array_equal(odd, philox_byte(key, j + 1, i + 1, 11, 3))
    assert rk.max() == 255 and rk.min() == 0  # bytes
    # 3 forms x 8 elements per lane (wave64) or 16 (wave32) x 20 multiplies if unshared; the two
    # aligned forms share one call where a lane holds 4 consecutive keys (or rows).
    per_lane = 64 * 32 // (4 * get_arch(arch).wave_size)
    assert k.asm.count("v_mul_hi_u32") < 3 * per_lane * 20, k.asm.count("v_mul_hi_u32")


def test_philox_byte_reference_is_the_documented_function() -> None:
    key = (123, 456)
    words = philox4x32(key, (5, 7, 9, 11))
    for jj in range(20, 24):
        for ii in range(28, 32):
            want = (int(words[ii & 3]) >> (8 * (jj & 3))) & 0xFF
            assert int(philox_byte(key, jj, ii, 9, 11)) == want


@pytest.mark.parametrize("call,message", [
    ("philox(1, 2, 3, 4, 5, 6, 4)", "philox: word selects one of the 4 output words, 0..3, got 4"),
    ("philox(1, 2, 3, 4, 5, 6, N)", "philox: word must be a compile-time integer"),
    ("philox(1.0, 2, 3, 4, 5, 6, 0)", r"float literal 1.0 cannot be used with i32 \(in philox\)"),
    ("philox(cast(N, f32), 2, 3, 4, 5, 6, 0)", "philox: key0 must be i32 .a scalar or a tile., got f32 scalar"),
    ("umulhi(1, N < 2)", "umulhi: b must be i32 .a scalar or a tile., got i1 scalar"),
])
def test_bad_calls(call: str, message: str) -> None:
    src = f"kernel k(x: tensor[i32](N)) grid(1) {{\n    store(x[0], {call});\n}}\n"
    with pytest.raises(SourceError, match=message):
        bind(parse(src, "k.tile"), {}, get_arch("gfx942"))


def test_dropout_keep_mask_is_the_documented_function() -> None:
    from tiledsl.reference import dropout_keep_mask, dropout_threshold

    keep = dropout_keep_mask(seed=2**40 + 17, offset=3, batch=2, nhead=3, seqlen_q=33, seqlen_k=70, p=0.3)
    assert keep.shape == (2, 3, 33, 70) and keep.dtype == np.bool_
    assert abs(keep.mean() - 0.7) < 0.02  # 13,860 draws
    word = philox4x32(((2**40 + 17) & 0xFFFFFFFF, (2**40 + 17) >> 32), (69 >> 2, 32 >> 2, 1 * 3 + 2, 3))[32 & 3]
    assert keep[1, 2, 32, 69] == (((int(word) >> (8 * (69 & 3))) & 0xFF) >= dropout_threshold(0.3))
    assert dropout_threshold(0.3) == 76  # p counts in 1/256 steps
    assert dropout_keep_mask(1, 0, 1, 1, 4, 4, 0.0).all()
    for kwargs, message in (({"p": 1.0}, "dropout_p"), ({"seed": -1}, "seed"), ({"offset": 2**31}, "offset")):
        args = {"seed": 1, "offset": 0, "batch": 1, "nhead": 1, "seqlen_q": 2, "seqlen_k": 2, "p": 0.5, **kwargs}
        with pytest.raises(ValueError, match=message):
            dropout_keep_mask(**args)
