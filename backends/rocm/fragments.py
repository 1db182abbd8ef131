"""Per-lane operand layouts of the MFMA/WMMA instructions in the arch table.

For one instruction D[MxN] += A[MxK] * B[KxN], each function answers: which (row, col) of the
operand does lane `lane` hold in its element `j`? Sources: AMD CDNA3/CDNA4 ISA manuals (MFMA
"dependent" layouts), RDNA3/RDNA4 ISA manuals (WMMA), AMD's matrix instruction calculator.

    A element j of lane l  -> (m, k)        B element j of lane l -> (k, n)
    C/D element j of lane l -> (m, n)

All layouts here are linear in the bits of `lane` and `j`, which the compiler relies on.
"""

from __future__ import annotations

from tiledsl.backends.rocm.arch import MatrixOp


def a_coord(op: MatrixOp, lane: int, j: int) -> tuple[int, int]:
    if op.kind == "mfma":
        groups = 64 // op.m  # lane groups along K: 2 for 32x32, 4 for 16x16
        return lane % op.m, (lane // op.m) % groups * op.k_per_lane + j
    if op.kind == "wmma_gfx11":  # both lane halves hold the same 16 rows, all K values
        return lane % 16, j
    if op.kind == "wmma_gfx12":  # lane halves interleave K in 64-bit groups: 4 16-bit or 8 8-bit values
        e = 64 // op.in_bits
        return lane % 16, (j // e) * 2 * e + (lane // 16) * e + j % e
    raise ValueError(op.kind)


def b_coord(op: MatrixOp, lane: int, j: int) -> tuple[int, int]:
    n, k = a_coord(op, lane, j)  # B mirrors A: lanes walk N the way A's walk M
    return k, n


def c_coord(op: MatrixOp, lane: int, j: int) -> tuple[int, int]:
    if op.kind == "mfma":
        if op.m == 32:  # 16 values: 4 blocks of 8 rows; lane halves own rows 4..7 of each block
            return (j // 4) * 8 + (lane // 32) * 4 + j % 4, lane % 32
        return (lane // 16) * 4 + j, lane % 16
    if op.kind == "wmma_gfx11":  # lane halves interleave rows: even rows low half, odd rows high
        return 2 * j + lane // 16, lane % 16
    if op.kind == "wmma_gfx12":
        return (lane // 16) * 8 + j, lane % 16
    raise ValueError(op.kind)


def c_elems(op: MatrixOp, wave_size: int) -> int:
    return op.m * op.n // wave_size
