"""Distributed layouts: which lane of which wave holds which element of a tile, in which register.

A layout is written as a short text, stored as the tensor encoding in the IR:

    blocked(V)              loads/stores: V contiguous elements per lane along the last axis,
                            lanes then waves fill the tile row by row (coalesced access)
    acc(KIND,m,n,k,kpl,WM,WN)  MFMA/WMMA accumulator of a [M, N] tile, WM x WN waves
    acct(...)               the accumulator of the same dot computed transposed (C^T = B^T A^T,
                            operands swapped): each lane holds part of one row instead of one
                            column, so row reductions stay inside the lane and the result is
                            already in the A-operand layout of a following dot (P @ V)
    opa(...) / opb(...) / opbt(...)  the A operand [M, K], B operand [K, N], or B given as [N, K]
    slice(D,SIZE,P)         P with axis D (of size SIZE) reduced away (results of reductions)
    expand(D,L)             L with a size-1 axis inserted at D (x[:, None])
    permk(D,B0:B1:..,L)     L with the index along axis D relabelled bit by bit: bit i of the
                            index becomes B_i (a permutation of the powers of two). A dot may
                            relabel its contraction index in both operands alike and still
                            compute the same sum; that lets P keep its registers (see k_permutation)

`table()` turns a layout into explicit coordinates; every layout here is linear in the bits of
the lane and wave ids: coord(lane, wave, reg) = lane_part(lane) + wave_part(wave) + reg_offset,
which is what the lowering computes at run time (`Linear`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from tiledsl.backends.rocm import fragments
from tiledsl.backends.rocm.arch import MatrixOp


@dataclass(frozen=True)
class Threads:
    wave_size: int
    waves: int

    @property
    def count(self) -> int:
        return self.wave_size * self.waves


@dataclass(frozen=True)
class Linear:
    """coord = sum(bit_k(lane) * lane_bases[k]) + sum(bit_k(wave) * wave_bases[k]) + regs[i]."""

    lane_bases: np.ndarray  # [log2(wave_size), rank]
    wave_bases: np.ndarray  # [log2(waves), rank]
    regs: np.ndarray  # [num_regs, rank]

    @property
    def num_regs(self) -> int:
        return len(self.regs)

    def replicated_lane_bits(self) -> list[int]:
        return [k for k, b in enumerate(self.lane_bases) if not b.any()]

    def replicated_wave_bits(self) -> list[int]:
        return [k for k, b in enumerate(self.wave_bases) if not b.any()]


def matrix_op_text(op: MatrixOp) -> str:
    return f"{op.kind},{op.m},{op.n},{op.k},{op.k_per_lane},{op.in_dtype}"


def _op_from(parts: list[str]) -> MatrixOp:
    kind, m, n, k, kpl, dt = parts
    return MatrixOp(kind, int(m), int(n), int(k), dt, int(kpl), "")


def parse(text: str) -> tuple[str, list[str]]:
    """'slice(1,64,acc(...))' -> ('slice', ['1', '64', 'acc(...)']) splitting at top-level commas."""
    m = re.fullmatch(r"(\w+)\((.*)\)", text)
    if not m:
        raise ValueError(f"bad layout text '{text}'")
    args, depth, cur = [], 0, ""
    for ch in m.group(2):
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    args.append(cur)
    return m.group(1), args


def coords(layout: str, shape: tuple[int, ...], threads: Threads) -> np.ndarray:
    """All coordinates as an int array [threads, regs, rank]."""
    return _coords(layout, tuple(shape), threads).copy()


@functools.lru_cache(maxsize=4096)
def _coords(layout: str, shape: tuple[int, ...], threads: Threads) -> np.ndarray:
    kind, args = parse(layout)
    t = np.arange(threads.count)
    lane, wave = t % threads.wave_size, t // threads.wave_size
    if kind == "blocked":
        return _blocked(int(args[0]), shape, threads)
    if kind in ("acc", "acct", "opa", "opb", "opbt"):
        op = _op_from(args[:6])
        wm, wn = int(args[6]), int(args[7])
        return _mma(kind, op, wm, wn, shape, lane, wave, threads)
    if kind == "slice":
        d, size, parent = int(args[0]), int(args[1]), args[2]
        pshape = shape[:d] + (size,) + shape[d:]
        lin = linear(parent, pshape, threads)
        keep = [i for i in range(len(pshape)) if i != d]
        regs = lin.regs[:, keep]
        _, first = np.unique(regs, axis=0, return_index=True)
        regs = regs[np.sort(first)]
        return _compose(Linear(lin.lane_bases[:, keep], lin.wave_bases[:, keep], regs), threads)
    if kind == "permk":
        d, images, inner = int(args[0]), [int(x) for x in args[1].split(":")], args[2]
        c = _coords(inner, shape, threads).copy()
        x = c[:, :, d]
        c[:, :, d] = sum(((x >> i) & 1) * b for i, b in enumerate(images))
        return c
    if kind == "expand":
        d, inner = int(args[0]), args[1]
        c = _coords(inner, shape[:d] + shape[d + 1:], threads)
        return np.insert(c, d, 0, axis=2)
    raise ValueError(f"unknown layout kind '{kind}'")


def _blocked(vec: int, shape: tuple[int, ...], threads: Threads) -> np.ndarray:
    if len(shape) == 1:
        return _blocked(vec, (1,) + shape, threads)[:, :, 1:]
    rows, cols = shape[-2], shape[-1]
    vec = min(vec, cols)
    tc = min(cols // vec, threads.count)
    tr = min(rows, threads.count // tc)
    t = np.arange(threads.count)
    c0, r0 = (t % tc) * vec, (t // tc) % tr
    regs = [(rr * tr, rc * tc * vec + j) for rr in range(rows // tr)
            for rc in range(cols // (tc * vec)) for j in range(vec)]
    regs_a = np.array(regs)
    out = np.stack([r0[:, None] + regs_a[None, :, 0], c0[:, None] + regs_a[None, :, 1]], axis=2)
    return out


def _mma(kind: str, op: MatrixOp, wm: int, wn: int, shape: tuple[int, ...], lane: np.ndarray,
         wave: np.ndarray, threads: Threads) -> np.ndarray:
    if kind == "opbt":  # B given as [N, K]: the opb layout of the transposed tile, axes swapped
        return _mma("opb", op, wm, wn, (shape[1], shape[0]), lane, wave, threads)[:, :, ::-1]
    rows, cols = shape
    wave_m, wave_n = wave % wm, wave // wm
    lane = lane % 64 if threads.wave_size == 64 else lane
    out = []
    if kind in ("acc", "acct"):
        pm, pn = rows // wm, cols // wn
        for rm in range(pm // op.m):
            for rn in range(pn // op.n):
                for j in range(fragments.c_elems(op, threads.wave_size)):
                    r, c = _vec(fragments.c_coord, op, lane, j)
                    if kind == "acct":  # the instruction's rows are our columns (square ops only)
                        r, c = c, r
                    out.append((wave_m * pm + rm * op.m + r, wave_n * pn + rn * op.n + c))
    elif kind == "opa":
        pm = rows // wm
        for rm in range(pm // op.m):
            for rk in range(cols // op.k):
                for j in range(op.k_per_lane):
                    r, c = _vec(fragments.a_coord, op, lane, j)
                    out.append((wave_m * pm + rm * op.m + r, rk * op.k + c))
    else:  # opb: [K, N]
        pn = cols // wn
        for rn in range(pn // op.n):
            for rk in range(rows // op.k):
                for j in range(op.k_per_lane):
                    r, c = _vec(fragments.b_coord, op, lane, j)
                    out.append((rk * op.k + r, wave_n * pn + rn * op.n + c))
    return np.stack([np.stack(p, axis=1) for p in out], axis=1)


def _vec(fn, op: MatrixOp, lane: np.ndarray, j: int) -> tuple[np.ndarray, np.ndarray]:
    pairs = [fn(op, int(lane_i), j) for lane_i in lane]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


@functools.lru_cache(maxsize=4096)
def linear(layout: str, shape: tuple[int, ...], threads: Threads) -> Linear:
    """Decompose a layout into lane/wave bases and register offsets; checks it really is linear."""
    c = _coords(layout, tuple(shape), threads)
    ws, nw = threads.wave_size, threads.waves
    regs = c[0]
    lane_bases = np.array([c[1 << k, 0] - regs[0] for k in range(ws.bit_length() - 1)]).reshape(-1, len(shape))
    wave_bases = np.array([c[ws << k, 0] - regs[0] for k in range(nw.bit_length() - 1)]).reshape(-1, len(shape))
    lin = Linear(lane_bases, wave_bases, regs)
    if not np.array_equal(_compose(lin, threads), c):
        raise AssertionError(f"layout {layout} for shape {shape} is not linear in lane/wave bits")
    return lin


def _compose(lin: Linear, threads: Threads) -> np.ndarray:
    t = np.arange(threads.count)
    lane, wave = t % threads.wave_size, t // threads.wave_size
    base = np.zeros((threads.count, lin.regs.shape[1]), dtype=np.int64)
    for k, b in enumerate(lin.lane_bases):
        base += ((lane >> k) & 1)[:, None] * b[None, :]
    for k, b in enumerate(lin.wave_bases):
        base += ((wave >> k) & 1)[:, None] * b[None, :]
    return base[:, None, :] + lin.regs[None, :, :]


def register_map(src: str, src_shape: tuple[int, ...], dst: str, dst_shape: tuple[int, ...],
                 threads: Threads) -> list[int] | None:
    """For each dst register, the src register of the same thread holding its element (size-1 src
    axes broadcast), or None when some element lives in another thread (needs LDS)."""
    cs, cd = _coords(src, tuple(src_shape), threads), _coords(dst, tuple(dst_shape), threads)
    cd = cd.copy()
    for axis, n in enumerate(src_shape):
        if n == 1:
            cd[:, :, axis] = 0
    out = []
    for i in range(cd.shape[1]):
        hit = np.nonzero((cs == cd[:, i:i + 1, :]).all(axis=2).all(axis=0))[0]
        if len(hit) == 0:
            return None
        out.append(int(hit[0]))
    return out


def k_permutation(src: str, dst: str, shape: tuple[int, ...], axis: int, threads: Threads) -> list[int] | None:
    """Bit images B (see permk) such that permk(axis, B, dst) puts every element of a `shape`
    tile in the same lane, wave and register as `src` does, or None when no relabelling of the
    index along `axis` can (the other axes must already agree). Powers-of-two sizes only."""
    n = shape[axis]
    if n & (n - 1):
        return None
    try:
        s, d = linear(src, shape, threads), linear(dst, shape, threads)
    except (AssertionError, ValueError, IndexError):
        return None
    if s.num_regs != d.num_regs or s.num_regs & (s.num_regs - 1):
        return None
    if s.regs[0].any() or d.regs[0].any():
        return None
    # Both layouts are linear: match their bases (lane bits, wave bits, register-index bits).
    reg_bits = s.num_regs.bit_length() - 1
    sb = np.concatenate([s.lane_bases, s.wave_bases, [s.regs[1 << i] for i in range(reg_bits)]])
    db = np.concatenate([d.lane_bases, d.wave_bases, [d.regs[1 << i] for i in range(reg_bits)]])
    other = [a for a in range(len(shape)) if a != axis]
    images = [0] * (n.bit_length() - 1)
    for x, y in zip(db, sb, strict=True):
        if (x[other] != y[other]).any():
            return None
        if x[axis] == 0 and y[axis] == 0:
            continue
        if x[axis] <= 0 or y[axis] <= 0 or x[axis] & (x[axis] - 1) or y[axis] & (y[axis] - 1):
            return None
        images[int(x[axis]).bit_length() - 1] = int(y[axis])
    if sorted(images) != [1 << i for i in range(len(images))]:
        return None
    permuted = with_k_permutation(dst, axis, images)
    return images if np.array_equal(_coords(permuted, tuple(shape), threads), _coords(src, tuple(shape), threads)) \
        else None


def with_k_permutation(layout: str, axis: int, images: list[int] | None) -> str:
    """permk(axis, images, layout), or the layout itself when there is nothing to relabel."""
    if images is None or images == [1 << i for i in range(len(images))]:
        return layout
    return f"permk({axis},{':'.join(map(str, images))},{layout})"


def blocked_for(elem_bytes: int) -> str:
    """The default blocked layout: 16-byte vectors along the last axis (4 f32 or 8 f16 values)."""
    return f"blocked({max(1, 16 // elem_bytes)})"


def mma_layout(kind: str, op: MatrixOp, wm: int, wn: int) -> str:
    return f"{kind}({matrix_op_text(op)},{wm},{wn})"


def num_regs(layout: str, shape: tuple[int, ...], threads: Threads) -> int:
    return _coords(layout, tuple(shape), threads).shape[1]
