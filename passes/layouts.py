"""Distributed layouts: which lane of which wave holds which element of a tile, in which register.

A layout is a typed value (`Layout` and its kinds below), printed as a short text that is stored
as the tensor encoding in the IR and parsed back by `Layout.parse`:

    blocked(V[,R])          Blocked: loads/stores, V contiguous elements per lane along the last
                            axis (and R consecutive rows, default 1), lanes then waves fill the
                            tile row by row (coalesced access); at most 8 lanes share a row, so a
                            row segment of 16-byte vectors is one 128-byte cache line
    acc(KIND,m,n,k,kpl,DT,WM,WN)  Mma: MFMA/WMMA accumulator of a [M, N] tile, WM x WN waves
    acct(...)               the accumulator of the same dot computed transposed (C^T = B^T A^T,
                            operands swapped): each lane holds part of one row instead of one
                            column, so row reductions stay inside the lane and the result is
                            already in the A-operand layout of a following dot (P @ V)
    opa(...) / opb(...) / opbt(...)  the A operand [M, K], B operand [K, N], or B given as [N, K]
    slice(D,SIZE,P)         Slice: P with axis D (of size SIZE) reduced away (results of reductions)
    expand(D,L)             Expand: L with a size-1 axis inserted at D (x[:, None])
    permk(D,B0:B1:..,L)     PermK: L with the index along axis D relabelled bit by bit: bit i of the
                            index becomes B_i (a permutation of the powers of two). A dot may
                            relabel its contraction index in both operands alike and still
                            compute the same sum; that lets P keep its registers (see k_permutation)

`verify(layout, shape, threads, arch)` rejects a layout that does not fit its tile, its wave
count or the arch's matrix instructions. `table()` turns a layout into explicit coordinates;
every layout here is linear in the bits of the lane and wave ids: coord(lane, wave, reg) =
lane_part(lane) + wave_part(wave) + reg_offset, which is what the lowering computes at run time
(`Linear`).
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import NamedTuple, NoReturn

import numpy as np
from mlir import ir

from tiledsl.backends.rocm import fragments
from tiledsl.backends.rocm.arch import Arch, MatrixOp


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


# -- the typed layouts ---------------------------------------------------------------------------
class LayoutError(ValueError):
    """A layout text that does not parse, or a layout that does not fit its tile."""


class Layout(ABC):
    """Base of the layout kinds. Layouts are frozen dataclasses: hashable, compared by value,
    printed by `str()` in the text form above and parsed back by `Layout.parse`."""

    @staticmethod
    def parse(text: str) -> Layout:
        return _parse(text)

    @abstractmethod
    def __str__(self) -> str: ...


@dataclass(frozen=True)
class Blocked(Layout):
    vec: int  # contiguous elements per lane along the last axis
    # Consecutive rows per lane: a tile staged transposed through LDS (a B operand [K, N] loaded
    # row by row) is then written `rows` elements at a time along its columns (assign-layouts).
    rows: int = 1

    def __str__(self) -> str:
        return f"blocked({self.vec})" if self.rows == 1 else f"blocked({self.vec},{self.rows})"


MMA_KINDS = ("acc", "acct", "opa", "opb", "opbt")


@dataclass(frozen=True)
class Mma(Layout):
    kind: str  # one of MMA_KINDS
    op: MatrixOp
    wm: int  # waves along M
    wn: int  # waves along N

    def __post_init__(self) -> None:
        if self.kind not in MMA_KINDS:
            raise LayoutError(f"matrix layout kind '{self.kind}': expected one of {', '.join(MMA_KINDS)}")
        if self.op.isa_name:  # the instruction's name is not part of the layout (nor of its text)
            object.__setattr__(self, "op", replace(self.op, isa_name=""))

    def with_kind(self, kind: str) -> Mma:
        return Mma(kind, self.op, self.wm, self.wn)

    @property
    def is_accumulator(self) -> bool:
        return self.kind in ("acc", "acct")

    def __str__(self) -> str:
        op = self.op
        return f"{self.kind}({op.kind},{op.m},{op.n},{op.k},{op.k_per_lane},{op.in_dtype},{self.wm},{self.wn})"


@dataclass(frozen=True)
class Slice(Layout):
    dim: int
    size: int  # of the axis reduced away
    parent: Layout

    def __str__(self) -> str:
        return f"slice({self.dim},{self.size},{self.parent})"


@dataclass(frozen=True)
class Expand(Layout):
    dim: int
    inner: Layout

    def __str__(self) -> str:
        return f"expand({self.dim},{self.inner})"


@dataclass(frozen=True)
class PermK(Layout):
    dim: int
    images: tuple[int, ...]  # bit i of the index along `dim` becomes images[i]
    inner: Layout

    def __str__(self) -> str:
        return f"permk({self.dim},{':'.join(map(str, self.images))},{self.inner})"


def as_layout(layout: Layout | str) -> Layout:
    return layout if isinstance(layout, Layout) else _parse(layout)


def layout_of(t: ir.Type) -> Layout | None:
    """The layout a tile type carries as its encoding (None before layout assignment)."""
    rt = ir.RankedTensorType(t)
    return None if rt.encoding is None else _parse(ir.StringAttr(rt.encoding).value)


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> Layout:
    m = re.fullmatch(r"(\w+)\((.*)\)", text)
    if not m:
        raise LayoutError(f"bad layout text '{text}'")
    kind, args = m.group(1), _split_args(m.group(2))
    try:
        if kind == "blocked" and len(args) in (1, 2):
            return Blocked(*(int(a) for a in args))
        if kind in MMA_KINDS and len(args) == 8:
            mkind, mm, n, k, kpl, dt, wm, wn = args
            return Mma(kind, MatrixOp(mkind, int(mm), int(n), int(k), dt, int(kpl), ""), int(wm), int(wn))
        if kind == "slice" and len(args) == 3:
            return Slice(int(args[0]), int(args[1]), _parse(args[2]))
        if kind == "expand" and len(args) == 2:
            return Expand(int(args[0]), _parse(args[1]))
        if kind == "permk" and len(args) == 3:
            return PermK(int(args[0]), tuple(int(x) for x in args[1].split(":")), _parse(args[2]))
    except ValueError as exc:
        raise LayoutError(f"bad layout text '{text}': {exc}") from None
    raise LayoutError(f"bad layout text '{text}': unknown kind '{kind}' or wrong number of fields")


def _split_args(body: str) -> list[str]:
    """'1,64,acc(...)' -> ['1', '64', 'acc(...)'] splitting at top-level commas."""
    args, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    args.append(cur)
    return args


def verify(layout: Layout, shape: tuple[int, ...], threads: Threads, arch: Arch | None = None) -> None:
    """Raise LayoutError saying why `layout` cannot distribute a tile of `shape` over `threads`
    (on `arch`: its matrix instructions and wave size), or return None."""
    shape = tuple(shape)

    def fail(why: str) -> NoReturn:
        raise LayoutError(f"layout {layout} does not fit a tile [{', '.join(map(str, shape))}]: {why}")

    if arch is not None and threads.wave_size != arch.wave_size:
        fail(f"{threads.wave_size}-lane waves, but {arch.name} runs {arch.wave_size}")
    if isinstance(layout, Blocked):
        if layout.vec < 1 or layout.vec & (layout.vec - 1) or not shape:
            fail("blocked needs a power-of-two vector and a tile of rank >= 1")
        if layout.rows < 1 or layout.rows & (layout.rows - 1) or (layout.rows > 1 and len(shape) < 2):
            fail("blocked rows per lane must be a power of two, on a tile of rank >= 2")
    elif isinstance(layout, Mma):
        op, wm, wn = layout.op, layout.wm, layout.wn
        if len(shape) != 2:
            fail("a matrix layout needs a 2-D tile")
        if arch is not None and not any(replace(o, isa_name="") == op for o in arch.matrix_ops):
            fail(f"{arch.name} has no {op.kind} {op.m}x{op.n}x{op.k} {op.in_dtype} instruction")
        if wm * wn != threads.waves:
            fail(f"{wm} x {wn} waves, but the kernel runs {threads.waves}")
        rows, cols = shape if layout.kind != "opbt" else shape[::-1]
        need = {"acc": (wm * op.m, wn * op.n), "acct": (wm * op.m, wn * op.n), "opa": (wm * op.m, op.k),
                "opb": (op.k, wn * op.n), "opbt": (op.k, wn * op.n)}[layout.kind]
        if rows % need[0] or cols % need[1]:
            fail(f"{layout.kind} tiles [{need[0]}k, {need[1]}k] blocks")
        if layout.kind == "acct" and op.m != op.n:
            fail("a transposed accumulator needs a square instruction")
    elif isinstance(layout, Slice):
        if not 0 <= layout.dim <= len(shape) or layout.size < 1:
            fail(f"slice axis {layout.dim} of size {layout.size}")
        verify(layout.parent, shape[:layout.dim] + (layout.size,) + shape[layout.dim:], threads, arch)
    elif isinstance(layout, Expand):
        if not 0 <= layout.dim < len(shape) or shape[layout.dim] != 1:
            fail(f"expand needs a size-1 axis {layout.dim}")
        verify(layout.inner, shape[:layout.dim] + shape[layout.dim + 1:], threads, arch)
    elif isinstance(layout, PermK):
        n = shape[layout.dim] if 0 <= layout.dim < len(shape) else 0
        if sorted(layout.images) != [1 << i for i in range(max(n, 1).bit_length() - 1)] or n & (n - 1):
            fail(f"permk images {list(layout.images)} are not a permutation of the powers of two below {n}")
        verify(layout.inner, shape, threads, arch)
    else:
        fail(f"unknown layout kind {type(layout).__name__}")


# -- coordinates ---------------------------------------------------------------------------------
def coords(layout: Layout | str, shape: tuple[int, ...], threads: Threads) -> np.ndarray:
    """All coordinates as an int array [threads, regs, rank]."""
    return _coords(as_layout(layout), tuple(shape), threads).copy()


def element_indices(layout: Layout | str, shape: tuple[int, ...], threads: Threads) -> np.ndarray:
    """Each thread's registers as row-major element indices, an int array [threads, regs]."""
    return np.ravel_multi_index(np.moveaxis(_coords(as_layout(layout), tuple(shape), threads), -1, 0), shape)


@functools.lru_cache(maxsize=4096)
def _coords(layout: Layout, shape: tuple[int, ...], threads: Threads) -> np.ndarray:
    t = np.arange(threads.count)
    lane, wave = t % threads.wave_size, t // threads.wave_size
    if isinstance(layout, Blocked):
        return _blocked(layout.vec, shape, threads, layout.rows)
    if isinstance(layout, Mma):
        return _mma(layout.kind, layout.op, layout.wm, layout.wn, shape, lane, wave, threads)
    if isinstance(layout, Slice):
        d = layout.dim
        pshape = shape[:d] + (layout.size,) + shape[d:]
        lin = linear(layout.parent, pshape, threads)
        keep = [i for i in range(len(pshape)) if i != d]
        regs = lin.regs[:, keep]
        _, first = np.unique(regs, axis=0, return_index=True)
        regs = regs[np.sort(first)]
        return _compose(Linear(lin.lane_bases[:, keep], lin.wave_bases[:, keep], regs), threads)
    if isinstance(layout, PermK):
        c = _coords(layout.inner, shape, threads).copy()
        x = c[:, :, layout.dim]
        c[:, :, layout.dim] = sum(((x >> i) & 1) * b for i, b in enumerate(layout.images))
        return c
    if isinstance(layout, Expand):
        d = layout.dim
        c = _coords(layout.inner, shape[:d] + shape[d + 1:], threads)
        return np.insert(c, d, 0, axis=2)
    raise LayoutError(f"unknown layout kind {type(layout).__name__}")


LANES_PER_ROW = 8  # 8 lanes x 16-byte vectors = one 128-byte line: the rest of the lanes take other rows


def _blocked(vec: int, shape: tuple[int, ...], threads: Threads, rows_per_lane: int = 1) -> np.ndarray:
    if len(shape) == 1:
        return _blocked(vec, (1,) + shape, threads)[:, :, 1:]
    rows, cols = shape[-2], shape[-1]
    vec = min(vec, cols)
    rpl = min(rows_per_lane, rows)
    # Lanes along a row cover at most one cache line when the other lanes have rows to take (no
    # lane left replicating another's elements), so a row-major tile staged transposed through LDS
    # spreads one store instruction's lanes over more banks (rows of a wide tile were 16 lanes).
    tc = min(cols // vec, threads.count, max(LANES_PER_ROW, -(-threads.count // (rows // rpl))))
    tr = min(rows // rpl, threads.count // tc)
    t = np.arange(threads.count)
    c0, r0 = (t % tc) * vec, ((t // tc) % tr) * rpl
    regs = [(rr * tr * rpl + ri, rc * tc * vec + j) for rr in range(rows // (tr * rpl))
            for rc in range(cols // (tc * vec)) for ri in range(rpl) for j in range(vec)]
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


def linear(layout: Layout | str, shape: tuple[int, ...], threads: Threads) -> Linear:
    """Decompose a layout into lane/wave bases and register offsets; checks it really is linear."""
    return _linear(as_layout(layout), tuple(shape), threads)


@functools.lru_cache(maxsize=4096)
def _linear(layout: Layout, shape: tuple[int, ...], threads: Threads) -> Linear:
    c = _coords(layout, tuple(shape), threads)
    ws, nw = threads.wave_size, threads.waves
    regs = c[0]
    # Integer arrays even when empty (one wave has no wave bits): a float one made k_permutation's
    # bit tests fail on single-wave kernels.
    rank = len(shape)
    lane_bases = np.array([c[1 << k, 0] - regs[0] for k in range(ws.bit_length() - 1)], np.int64).reshape(-1, rank)
    wave_bases = np.array([c[ws << k, 0] - regs[0] for k in range(nw.bit_length() - 1)], np.int64).reshape(-1, rank)
    lin = Linear(lane_bases, wave_bases, regs)
    if not np.array_equal(_compose(lin, threads), c):
        raise AssertionError(f"layout {layout} for shape {shape} is not linear in lane/wave bits")
    return lin


def lane_coords(lin: Linear, wave_size: int) -> np.ndarray:
    """[wave_size, rank]: each lane's coordinate in wave 0, before the register offsets (one
    instruction's lanes, for costing its LDS addresses)."""
    lanes = np.arange(wave_size)
    return sum((((lanes >> k) & 1)[:, None] * b[None, :] for k, b in enumerate(lin.lane_bases)),
               np.zeros((wave_size, lin.regs.shape[1]), np.int64))


class Swizzle(NamedTuple):
    """An LDS staging's rows with their 16-byte chunks permuted: chunk bit i of row r's element is
    flipped by the parity of r & masks[i], so rows that would start on the same banks put a
    lane's vector in other banks, without the padding that would misalign it. Element (r, c) of a
    row-major [R, C] staging with row length `pitch` lies at
    r * pitch + ((c // chunk) ^ flips(r)) * chunk + c % chunk (`swizzled_offsets`)."""
    chunk: int  # elements in one 16-byte chunk
    masks: tuple[int, ...]  # per chunk bit, the row bits whose parity flips it

    def flips(self, rows: np.ndarray) -> np.ndarray:
        out = np.zeros_like(rows)
        for i, m in enumerate(self.masks):
            out |= (np.bitwise_count(rows & m) & 1) << i
        return out

    @property
    def field(self) -> int:
        """The element bits of a column that the flips act on."""
        return ((1 << len(self.masks)) - 1) * self.chunk


def swizzled_offsets(rows: np.ndarray, cols: np.ndarray, pitch: int, swizzle: Swizzle | None) -> np.ndarray:
    """Element offsets of (rows, cols) in a row-major staging of row length `pitch`."""
    if swizzle is None:
        return rows * pitch + cols
    return rows * pitch + (cols ^ (swizzle.flips(rows) * swizzle.chunk))


def swizzle_fits(lin: Linear) -> bool:
    """Can a lane address every register of layout lin from one base per flip (`lds_runs`)? Its
    lane, wave and register parts of each coordinate must use disjoint bits: their sums are then
    XORs, which the flips distribute over."""
    threads = np.concatenate([lin.lane_bases, lin.wave_bases])
    for axis in range(lin.regs.shape[1]):
        steps = threads[:, axis] if len(threads) else np.zeros(0, np.int64)
        t = int(np.bitwise_or.reduce(steps)) if len(steps) else 0
        if t != int(steps.sum()) or t & int(np.bitwise_or.reduce(lin.regs[:, axis])):
            return False
    return True


class LdsRun(NamedTuple):
    regs: list[int]  # the registers one vector access moves, in address order
    align: int  # bytes: the access's proven alignment
    at: int  # elements: the first register's offset from the thread's base address
    flips: int = 0  # with a swizzle: the chunk bits this run flips in the thread's own (its base)


def lds_runs(lin: Linear, weights: np.ndarray, offset: int, elem_bytes: int, lo: int = 0, hi: int | None = None,
             by_address: bool = False, swizzle: Swizzle | None = None, major: int = 0) -> list[LdsRun]:
    """Registers lo..hi-1 of a tile in layout lin, at LDS element offset + coord @ weights, grouped
    into runs at consecutive addresses, each one vector access of at most 16 bytes (a power of
    two) whose alignment follows from the layout: the thread parts of the address are multiples of
    the gcd of the lane and wave steps and the offset. Runs are of consecutive registers, or with
    `by_address` of any registers taken in address order (a store gathers its values from
    anywhere). With a swizzle (axis `major` the stored rows; swizzle_fits holds), a register's
    flips (its own chunk bits and its row's) select the thread's base address, and its offset from
    that base leaves them out. One rule for lower-to-gpu's accesses and stage-lds's pricing."""
    regs = lin.regs
    steps_of = np.concatenate([lin.lane_bases, lin.wave_bases])
    flips = np.zeros(len(regs), np.int64)
    if swizzle is not None:
        minor = 1 - major
        field = swizzle.field
        flips = ((regs[:, minor] & field) // swizzle.chunk) ^ swizzle.flips(regs[:, major])
        regs = regs.copy()
        regs[:, minor] &= ~field
        steps_of = steps_of.copy()
        steps_of[:, minor] = np.where(steps_of[:, minor] & field, swizzle.chunk, steps_of[:, minor])
        steps_of = np.concatenate([steps_of, [[swizzle.chunk if a == minor else 0 for a in range(regs.shape[1])]]])
    consts = [int(c) for c in regs @ weights]
    steps = [int(x) for x in steps_of @ weights] + [offset]
    thread_gcd = int(np.gcd.reduce([abs(x) for x in steps if x] or [0]))
    hi = len(consts) if hi is None else hi
    order = sorted(range(lo, hi), key=lambda r: (flips[r], consts[r])) if by_address else list(range(lo, hi))
    runs = []
    i = 0
    while i < len(order):
        first = order[i]
        n = 1
        while (i + n < len(order) and consts[order[i + n]] == consts[first] + n and flips[order[i + n]] == flips[first]
               and (n + 1) * elem_bytes <= 16):
            n += 1
        n = 1 << (n.bit_length() - 1)  # power-of-two vectors only
        start_gcd = int(np.gcd(thread_gcd, consts[first])) if thread_gcd else abs(consts[first]) or 1 << 30
        align_elems = start_gcd & -start_gcd if start_gcd else 1 << 30
        while n > 1 and (align_elems * elem_bytes) % (n * elem_bytes):
            n //= 2
        align = min(n * elem_bytes, (align_elems * elem_bytes) & -(align_elems * elem_bytes), 16)
        runs.append(LdsRun(order[i:i + n], max(align, elem_bytes), consts[first], int(flips[first])))
        i += n
    return runs


def _compose(lin: Linear, threads: Threads) -> np.ndarray:
    t = np.arange(threads.count)
    lane, wave = t % threads.wave_size, t // threads.wave_size
    base = np.zeros((threads.count, lin.regs.shape[1]), dtype=np.int64)
    for k, b in enumerate(lin.lane_bases):
        base += ((lane >> k) & 1)[:, None] * b[None, :]
    for k, b in enumerate(lin.wave_bases):
        base += ((wave >> k) & 1)[:, None] * b[None, :]
    return base[:, None, :] + lin.regs[None, :, :]


def register_map(src: Layout | str, src_shape: tuple[int, ...], dst: Layout | str, dst_shape: tuple[int, ...],
                 threads: Threads) -> list[int] | None:
    """For each dst register, the src register of the same thread holding its element (size-1 src
    axes broadcast), or None when some element lives in another thread (needs LDS)."""
    found = _register_map(as_layout(src), tuple(src_shape), as_layout(dst), tuple(dst_shape), threads)
    return None if found is None else list(found)


@functools.lru_cache(maxsize=4096)
def _register_map(src: Layout, src_shape: tuple[int, ...], dst: Layout, dst_shape: tuple[int, ...],
                  threads: Threads) -> tuple[int, ...] | None:
    cs = _coords(src, src_shape, threads).astype(np.int64, copy=False)  # read only
    cd = _coords(dst, dst_shape, threads).astype(np.int64)  # a copy: its broadcast axes are zeroed
    for axis, n in enumerate(src_shape):
        if n == 1:
            cd[:, :, axis] = 0
    # A register's elements over all threads, as bytes: equal bytes, equal elements in every thread.
    first_src_register: dict[bytes, int] = {}
    for i in range(cs.shape[1]):
        first_src_register.setdefault(cs[:, i, :].tobytes(), i)
    out = []
    for i in range(cd.shape[1]):
        hit = first_src_register.get(cd[:, i, :].tobytes())
        if hit is None:
            return None
        out.append(hit)
    return tuple(out)


def k_permutation(src: Layout | str, dst: Layout | str, shape: tuple[int, ...], axis: int,
                  threads: Threads) -> list[int] | None:
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
    permuted = with_k_permutation(as_layout(dst), axis, images)
    same = np.array_equal(_coords(permuted, tuple(shape), threads), _coords(as_layout(src), tuple(shape), threads))
    return images if same else None


def with_k_permutation(layout: Layout, axis: int, images: list[int] | None) -> Layout:
    """permk(axis, images, layout), or the layout itself when there is nothing to relabel."""
    if images is None or images == [1 << i for i in range(len(images))]:
        return layout
    return PermK(axis, tuple(images), layout)


# gfx950's ds_read_b64_tr_b16 (Arch.lds_transpose_read): each lane reads 4 16-bit values that
# are consecutive in LDS, and every 16 lanes exchange them so that destination lane d holds, as
# value e, value d % 4 of source lane 4e + d // 4 (the emulator's backends/rocm/emulator/lds.py).
TRANSPOSE_READ_VALUES = 4


def transpose_reads(arch: Arch, enabled: bool, elem_bytes: int) -> bool:
    """Are tiles of `elem_bytes` elements read transposed from LDS here (stage-lds), rather than
    stored column by column? `enabled`: CompileOptions.transpose_reads."""
    return arch.lds_transpose_read and enabled and elem_bytes == 2


def transpose_read_source(lin: Linear) -> Linear | None:
    """For a 16-bit 2-D tile stored row-major in LDS (axis 1 contiguous) and read into layout
    `lin` with transpose reads: the layout the lanes must load (each 4 registers from one address,
    consecutive along axis 1), or None when the exchange cannot produce `lin`. It can when lin's
    lane bits 0 and 1 step axis 1 by 1 and 2 (they pick the value within a source lane's 8 bytes)
    and its registers come in runs of 4 with the same two steps; lin's lane bits 2-3 and those
    register steps become the source lanes' bits 0-3 (a B operand [K, N] with N contiguous:
    each source lane reads 4 N values of one K row)."""
    n = TRANSPOSE_READ_VALUES
    if lin.regs.shape[1] != 2 or len(lin.lane_bases) < 4 or lin.num_regs % n:
        return None
    if lin.lane_bases[0].tolist() != [0, 1] or lin.lane_bases[1].tolist() != [0, 2]:
        return None
    starts = lin.regs[0::n]
    r1, r2 = lin.regs[1] - lin.regs[0], lin.regs[2] - lin.regs[0]
    if not (lin.regs.reshape(-1, n, 2) - starts[:, None, :] == np.array([[0, 0], r1, r2, r1 + r2])).all():
        return None
    lane_bases = np.concatenate([lin.lane_bases[2:4], [r1, r2], lin.lane_bases[4:]])
    regs = (starts[:, None, :] + np.array([[0, e] for e in range(n)])[None, :, :]).reshape(-1, 2)
    return Linear(lane_bases, lin.wave_bases, regs)


def blocked_for(elem_bytes: int) -> Blocked:
    """The default blocked layout: 16-byte vectors along the last axis (4 f32 or 8 f16 values)."""
    return Blocked(max(1, 16 // elem_bytes))


def num_regs(layout: Layout | str, shape: tuple[int, ...], threads: Threads) -> int:
    return _coords(as_layout(layout), tuple(shape), threads).shape[1]
