"""The emulator's 8-bit float conversions (backends/rocm/emulator/fp8.py) against ml_dtypes.

A kernel built from MLIR with the toolchain narrows pairs of f32 into both halves of a dword
(v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32, op_sel selecting the half) and widens every byte and word
back (v_cvt_f32_fp8 as e32, SDWA src0_sel or gfx12 byte_sel; v_cvt_pk_f32_fp8 with a word
select), on each arch with an fp8 format, in that arch's flavour: FNUZ on gfx942
(ml_dtypes.float8_e4m3fnuz / float8_e5m2fnuz), OCP on gfx950 and gfx1201 (float8_e4m3fn /
float8_e5m2). Narrowing must equal ml_dtypes' round-to-nearest-even cast bit for bit (NaN
results: the flavour's canonical NaN code); widening is exact.
"""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest
from _emu_util import compile_mlir

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.emulator.fp8 import narrow, widen
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

pytestmark = pytest.mark.emulator

FORMATS = {("fp8", "fnuz"): (ml_dtypes.float8_e4m3fnuz, "f8E4M3FNUZ"),
           ("bf8", "fnuz"): (ml_dtypes.float8_e5m2fnuz, "f8E5M2FNUZ"),
           ("fp8", "ocp"): (ml_dtypes.float8_e4m3fn, "f8E4M3FN"),
           ("bf8", "ocp"): (ml_dtypes.float8_e5m2, "f8E5M2")}
NAN_CODE = {("fp8", "fnuz"): 0x80, ("bf8", "fnuz"): 0x80, ("fp8", "ocp"): 0xFF, ("bf8", "ocp"): 0xFE}


def special_values() -> np.ndarray:
    """Zeros, infinities, NaN, each format's max and the values around its rounding and overflow
    thresholds, subnormals and values below the smallest subnormal."""
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 240.0, 247.9, 248.0, 256.0, 448.0, 463.9, 464.0, 480.0,
             57344.0, 59391.0, 59392.0, 61440.0, 1e6, 2.0 ** -9, 2.0 ** -10, 1.5 * 2.0 ** -10, 2.0 ** -16, 2.0 ** -17,
             2.0 ** -18, 3 * 2.0 ** -18, 1e-30, 1.0625, 1.125, 1.1875, 0.3]
    return np.array(edges + [-e for e in edges], np.float32)


def sample(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-5, 6, n)
    return np.concatenate([special_values(), x.astype(np.float32)])


def reference_codes(x: np.ndarray, kind: str, flavour: str) -> np.ndarray:
    codes = x.astype(FORMATS[kind, flavour][0]).view(np.uint8).copy()
    codes[np.isnan(x)] = NAN_CODE[kind, flavour]
    return codes


@pytest.mark.parametrize("kind, flavour", list(FORMATS))
def test_narrow_and_widen_match_ml_dtypes(kind: str, flavour: str) -> None:
    x = sample(100_000, 1)
    np.testing.assert_array_equal(narrow(x, kind, flavour), reference_codes(x, kind, flavour))
    codes = np.arange(256, dtype=np.uint8)
    want = codes.view(FORMATS[kind, flavour][0]).astype(np.float32)
    np.testing.assert_array_equal(widen(codes, kind, flavour), want)


@pytest.mark.parametrize("kind, flavour", list(FORMATS))
def test_clamp_saturates_finite_values(kind: str, flavour: str) -> None:
    """The VOP3 clamp bit: finite values beyond the range become +-max; inf and NaN are not
    finite and keep their non-saturating codes (what ml_dtypes gives after np.clip)."""
    x = sample(20_000, 2)
    top = float(ml_dtypes.finfo(FORMATS[kind, flavour][0]).max)
    clipped = np.where(np.isfinite(x), np.clip(x, -top, top), x).astype(np.float32)
    np.testing.assert_array_equal(narrow(x, kind, flavour, saturate=True), reference_codes(clipped, kind, flavour))


def _kernel(wave: int, t8: str) -> str:
    """Lane l narrows x[4l..4l+3] into out8[l] (pairs into the low, then the high half) and widens
    each byte into out32[4l + j] and each word into out32[4 * wave + 4l + 2w + (0, 1)]."""
    lines = [f"%e{j} = amdgpu.ext_packed_fp8 %p1[{j}] : vector<4x{t8}> to f32" for j in range(4)]
    lines += [f"%w{j} = amdgpu.ext_packed_fp8 %p1[{j}] : vector<4x{t8}> to vector<2xf32>" for j in range(2)]
    body = "\n      ".join(lines)
    return f"""
module attributes {{gpu.container_module}} {{
  gpu.module @m {{
    gpu.func @k(%x: !llvm.ptr<1>, %out8: !llvm.ptr<1>, %out32: !llvm.ptr<1>) kernel
        attributes {{known_block_size = array<i32: {wave}, 1, 1>}} {{
      %t = gpu.thread_id x
      %ti = arith.index_cast %t : index to i32
      %c4 = arith.constant 4 : i32
      %off = arith.muli %ti, %c4 : i32
      %px = llvm.getelementptr %x[%off] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      %v = llvm.load %px : !llvm.ptr<1> -> vector<4xf32>
      %x0 = vector.extract %v[0] : f32 from vector<4xf32>
      %x1 = vector.extract %v[1] : f32 from vector<4xf32>
      %x2 = vector.extract %v[2] : f32 from vector<4xf32>
      %x3 = vector.extract %v[3] : f32 from vector<4xf32>
      %p0 = amdgpu.packed_trunc_2xfp8 %x0, %x1 into undef[word 0] : f32 to vector<4x{t8}>
      %p1 = amdgpu.packed_trunc_2xfp8 %x2, %x3 into %p0[word 1] : f32 to vector<4x{t8}> into vector<4x{t8}>
      %b = arith.bitcast %p1 : vector<4x{t8}> to vector<4xi8>
      %pd = llvm.getelementptr %out8[%ti] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %b, %pd : vector<4xi8>, !llvm.ptr<1>
      {body}
      %z = arith.constant dense<0.0> : vector<4xf32>
      %y0 = vector.insert %e0, %z [0] : f32 into vector<4xf32>
      %y1 = vector.insert %e1, %y0 [1] : f32 into vector<4xf32>
      %y2 = vector.insert %e2, %y1 [2] : f32 into vector<4xf32>
      %y3 = vector.insert %e3, %y2 [3] : f32 into vector<4xf32>
      %pe = llvm.getelementptr %out32[%off] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      llvm.store %y3, %pe : vector<4xf32>, !llvm.ptr<1>
      %ww = vector.shuffle %w0, %w1 [0, 1, 2, 3] : vector<2xf32>, vector<2xf32>
      %cw = arith.constant {4 * wave} : i32
      %offw = arith.addi %off, %cw : i32
      %pw = llvm.getelementptr %out32[%offw] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      llvm.store %ww, %pw : vector<4xf32>, !llvm.ptr<1>
      gpu.return
    }}
  }}
}}
"""


@pytest.mark.parametrize("arch_name", [a for a in ARCH_NAMES if get_arch(a).fp8_flavour])
@pytest.mark.parametrize("kind", ["fp8", "bf8"])
def test_conversion_instructions(arch_name: str, kind: str) -> None:
    arch = get_arch(arch_name)
    flavour, wave = arch.fp8_flavour, arch.wave_size
    dtype, t8 = FORMATS[kind, flavour]
    asm, hsaco = compile_mlir(_kernel(wave, t8), arch_name)
    for mnemonic in (f"v_cvt_pk_{kind}_f32", f"v_cvt_f32_{kind}", f"v_cvt_pk_f32_{kind}"):
        assert mnemonic in asm, f"expected {mnemonic} in the ISA"
    dev = EmulatorDevice(arch_name)
    kern = dev.get_kernel(dev.load_module(hsaco), "k")
    assert dev.unsupported(kern) == []
    values = sample(4 * wave * 8, 3)
    for start in range(0, len(values) - 4 * wave + 1, 4 * wave):
        x = values[start:start + 4 * wave]
        dx, d8, d32 = dev.to_device(x), dev.alloc(4 * wave, "out8"), dev.alloc(8 * wave * 4, "out32")
        dev.launch(kern, 1, wave, struct.pack("<QQQ", dx.addr, d8.addr, d32.addr))
        codes = dev.from_device(d8, np.uint8, (4 * wave,))
        np.testing.assert_array_equal(codes, reference_codes(x, kind, flavour))
        back = dev.from_device(d32, np.float32, (2, 4 * wave))
        want = codes.view(dtype).astype(np.float32)
        np.testing.assert_array_equal(back[0], want)  # byte by byte
        np.testing.assert_array_equal(back[1], want)  # word by word
