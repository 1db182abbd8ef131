"""Per-lane layout tests of every MFMA/WMMA instruction the compiler can emit (arch.matrix_ops),
the fp8 and bf8 forms included (in the arch's fp8 flavour).

A kernel built from MLIR with the toolchain loads each lane's A and B values from buffers the
host packed following AMD's documented layouts (restated below, from the ISA guides and AMD's
matrix instruction calculator), runs one matrix instruction and stores each lane's D values.
The host unpacks D with the documented layout; for small integers the result must equal numpy
exactly.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from _emu_util import compile_mlir

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.emulator.matrix import fp8_table
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

pytestmark = pytest.mark.emulator


# -- AMD's documented layouts (coordinates of lane `l`, value `j`) --------------------------
def doc_a(kind: str, m: int, k: int, ebits: int, lane: int, j: int) -> tuple[int, int]:
    if kind == "mfma":  # lanes l and l+M*g hold rows l%M; K split in contiguous chunks per lane group
        kpl = k // (64 // m)
        return lane % m, (lane // m) * kpl + j
    if kind == "wmma_gfx11":  # each lane half holds all 16 K values of row lane%16
        return lane % 16, j
    e = 64 // ebits  # gfx12: 64-bit chunks alternate between the two lane halves
    return lane % 16, (j // e) * 2 * e + (lane // 16) * e + j % e


def doc_d(kind: str, m: int, lane: int, j: int) -> tuple[int, int]:
    if kind == "mfma":
        if m == 32:
            return (j // 4) * 8 + (lane // 32) * 4 + j % 4, lane % 32
        return (lane // 16) * 4 + j, lane % 16
    if kind == "wmma_gfx11":
        return 2 * j + lane // 16, lane % 16
    return (lane // 16) * 8 + j, lane % 16


_MLIR_TYPE = {"f16": "f16", "bf16": "bf16", "fp8_fnuz": "f8E4M3FNUZ", "fp8_ocp": "f8E4M3FN", "bf8_fnuz": "f8E5M2FNUZ",
              "bf8_ocp": "f8E5M2"}


def kernel_src(kind: str, m: int, k: int, kpl: int, nd: int, dtype: str, wave: int) -> str:
    ety = _MLIR_TYPE[dtype]
    lty = "i8" if dtype[:3] in ("fp8", "bf8") else "i16"
    if kind == "mfma":
        op = f"amdgpu.mfma {m}x{m}x{k} %va * %vb + %c0 blgp = none"
    else:
        op = f"amdgpu.wmma {m}x{m}x{k} %va * %vb + %c0"
    return f"""
module attributes {{gpu.container_module}} {{
  gpu.module @m {{
    gpu.func @k(%a: !llvm.ptr<1>, %b: !llvm.ptr<1>, %d: !llvm.ptr<1>) kernel
        attributes {{known_block_size = array<i32: {wave}, 1, 1>}} {{
      %t = gpu.thread_id x
      %ti = arith.index_cast %t : index to i32
      %ck = arith.constant {kpl} : i32
      %off = arith.muli %ti, %ck : i32
      %pa = llvm.getelementptr %a[%off] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, {lty}
      %va0 = llvm.load %pa : !llvm.ptr<1> -> vector<{kpl}x{lty}>
      %va = arith.bitcast %va0 : vector<{kpl}x{lty}> to vector<{kpl}x{ety}>
      %pb = llvm.getelementptr %b[%off] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, {lty}
      %vb0 = llvm.load %pb : !llvm.ptr<1> -> vector<{kpl}x{lty}>
      %vb = arith.bitcast %vb0 : vector<{kpl}x{lty}> to vector<{kpl}x{ety}>
      %c0 = arith.constant dense<0.0> : vector<{nd}xf32>
      %r = {op} : vector<{kpl}x{ety}>, vector<{kpl}x{ety}>, vector<{nd}xf32>
      %cd = arith.constant {nd} : i32
      %offd = arith.muli %ti, %cd : i32
      %pd = llvm.getelementptr %d[%offd] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      llvm.store %r, %pd : vector<{nd}xf32>, !llvm.ptr<1>
      gpu.return
    }}
  }}
}}
"""


def _cases():
    out = []
    for name in ARCH_NAMES:
        arch = get_arch(name)
        for op in arch.matrix_ops:
            dtype = {"f8e4m3": "fp8", "f8e5m2": "bf8"}.get(op.in_dtype)
            dtype = f"{dtype}_{arch.fp8_flavour}" if dtype else op.in_dtype
            out.append(pytest.param(name, op.kind, op.m, op.k, dtype, op.isa_name, id=f"{name}-{op.isa_name}"))
    return out


def _encode(vals: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f16":
        return vals.astype(np.float16).view(np.uint16)
    if dtype == "bf16":
        return (vals.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    table = fp8_table(*dtype.split("_"))
    codes = {float(v): c for c, v in enumerate(table) if np.isfinite(v) and c not in (0x80,)}
    return np.array([codes[float(v)] for v in vals.ravel()], dtype=np.uint8).reshape(vals.shape)


@pytest.mark.parametrize("arch_name, kind, m, k, dtype, isa", _cases())
def test_matrix_layout(arch_name, kind, m, k, dtype, isa):
    arch = get_arch(arch_name)
    wave = arch.wave_size
    ebits = 8 if dtype[:3] in ("fp8", "bf8") else 16
    kpl = m * k // 64 if kind == "mfma" else (16 if kind == "wmma_gfx11" else m * k // 32)
    nd = m * m // wave
    asm, hsaco = compile_mlir(kernel_src(kind, m, k, kpl, nd, dtype, wave), arch_name)
    assert isa in asm, f"expected {isa} in the ISA"
    rng = np.random.default_rng(hash((arch_name, isa)) & 0xFFFF)
    A = rng.integers(-3, 4, size=(m, k)).astype(np.float64)
    B = rng.integers(-3, 4, size=(k, m)).astype(np.float64)
    a_l = np.zeros((wave, kpl))
    b_l = np.zeros((wave, kpl))
    for lane in range(wave):
        for j in range(kpl):
            i, kk = doc_a(kind, m, k, ebits, lane, j)
            a_l[lane, j] = A[i, kk]
            n, kk = doc_a(kind, m, k, ebits, lane, j)  # B mirrors A: lanes walk N as A's walk M
            b_l[lane, j] = B[kk, n]
    dev = EmulatorDevice(arch_name)
    kern = dev.get_kernel(dev.load_module(hsaco), "k")
    assert dev.unsupported(kern) == []
    da, db = dev.to_device(_encode(a_l, dtype)), dev.to_device(_encode(b_l, dtype))
    dd = dev.alloc(wave * nd * 4, "d")
    dev.launch(kern, 1, wave, struct.pack("<QQQ", da.addr, db.addr, dd.addr))
    d_l = dev.from_device(dd, np.float32, (wave, nd))
    D = np.full((m, m), np.nan)
    for lane in range(wave):
        for j in range(nd):
            r, c = doc_d(kind, m, lane, j)
            D[r, c] = d_l[lane, j]
    np.testing.assert_array_equal(D, A @ B)


def _multi_block_src(m: int, k: int, blocks: int, cbsz: int, abid: int) -> str:
    op = (f"amdgpu.mfma {m}x{m}x{k} %va * %vb + %c0 {{blocks = {blocks} : i32, cbsz = {cbsz} : i32, "
          f"abid = {abid} : i32}} blgp = none")
    return kernel_src("mfma", m, k, k, m, "f16", 64).replace(
        f"amdgpu.mfma {m}x{m}x{k} %va * %vb + %c0 blgp = none", op)


@pytest.mark.parametrize("arch_name", [a for a in ARCH_NAMES if get_arch(a).wave_size == 64])
@pytest.mark.parametrize("m, k, blocks, cbsz, abid", [(4, 4, 16, 0, 0), (4, 4, 16, 4, 3), (4, 4, 16, 2, 1),
                                                      (16, 4, 4, 0, 0), (16, 4, 4, 1, 1), (32, 4, 2, 0, 0)])
def test_multi_block_mfma(arch_name, m, k, blocks, cbsz, abid):
    """Multi-block MFMA (blocks independent M x M x K products; Triton's 4x4 dots broadcast A with
    CBSZ/ABID): block b in lanes M*b.., each lane all K values of a row of A (B) and a column of D,
    register i holding row i; in each group of 2^CBSZ blocks A comes from block ABID."""
    asm, hsaco = compile_mlir(_multi_block_src(m, k, blocks, cbsz, abid), arch_name)
    assert "v_mfma" in asm and (cbsz == 0 or f"cbsz:{cbsz}" in asm), asm
    rng = np.random.default_rng(m * 100 + blocks + cbsz)
    A = rng.integers(-3, 4, size=(blocks, m, k)).astype(np.float64)
    B = rng.integers(-3, 4, size=(blocks, k, m)).astype(np.float64)
    a_l = A.reshape(64, k)                     # lane M*b + i: row i of block b
    b_l = B.transpose(0, 2, 1).reshape(64, k)  # lane M*b + j: column j of block b
    dev = EmulatorDevice(arch_name)
    kern = dev.get_kernel(dev.load_module(hsaco), "k")
    da, db = dev.to_device(_encode(a_l, "f16")), dev.to_device(_encode(b_l, "f16"))
    dd = dev.alloc(64 * m * 4, "d")
    dev.launch(kern, 1, 64, struct.pack("<QQQ", da.addr, db.addr, dd.addr))
    d_l = dev.from_device(dd, np.float32, (64, m))
    src = [((b >> cbsz) << cbsz) | abid for b in range(blocks)]
    for b in range(blocks):
        want = A[src[b]] @ B[b]
        got = d_l[m * b:m * (b + 1)].T  # D[i][j] = register i of lane M*b + j
        np.testing.assert_array_equal(got, want, err_msg=f"block {b}")
