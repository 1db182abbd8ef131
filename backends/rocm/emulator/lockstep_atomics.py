"""Batched global and buffer atomics for lockstep.py: one execution for all member waves of a
group, in the order the per-wave handlers would apply them one wave after another (a buffer
atomic's lanes out of its descriptor's range do nothing, as on the hardware).

The order is the chunk's lane order -- member waves ascending, each wave's lanes ascending --
which is the order `vmem._build_atomic` serialises the lanes of one wave in, with the waves run
one after another in chunk order as lockstep's per-wave path runs them. Lanes that hit the same
address are applied in *rounds*: round r holds every address's r-th lane in that order, so a
round's addresses are distinct (one gather, one vector operation, one scatter) and each address
sees its lanes in order. The arithmetic is the ordinary handler's: f32 adds round once per add
(denormals flushed in and out where the arch's atomic flushes them), integers wrap in their
width. Anything the handler cannot vouch for -- an address without a pointer tag or outside its
region, a misaligned address (overlapping lanes would not be independent within a round), an
AGPR operand -- runs per wave, the ordinary handler making its checks (PER_WAVE, before any side
effect).
"""

from __future__ import annotations

import numpy as np

from tiledsl.backends.rocm.emulator.lockstep_ops import PER_WAVE, buffer_addresses, tagged_addresses
from tiledsl.backends.rocm.emulator.memory import window

_TINY = np.float32(np.finfo(np.float32).tiny)


def _flush(x: np.ndarray) -> np.ndarray:
    """f32 denormals to zero of the same sign (as vmem._flush_denormal)."""
    return np.where((x != 0) & (np.abs(x) < _TINY), np.copysign(np.float32(0), x), x)


def _operation(op: str, isf: bool, flush: bool, nb: int):
    """`apply(old, data, cmp) -> new` over unsigned arrays of the atomic's width, lane by lane as
    vmem._apply_atomic computes one lane; None for an operation left to the per-wave path."""
    ut = np.uint64 if nb == 8 else np.uint32
    st = np.int64 if nb == 8 else np.int32
    if isf:
        if op != "add" or nb != 4:
            return None

        def fadd(old, data, cmp):
            a, b = old.view(np.float32), data.view(np.float32)
            if flush:
                a, b = _flush(a), _flush(b)
            r = a + b
            return (_flush(r) if flush else r).view(np.uint32)
        return fadd
    one = ut(1)
    ops = {
        "add": lambda m, d, c: m + d,
        "sub": lambda m, d, c: m - d,
        "and": lambda m, d, c: m & d,
        "or": lambda m, d, c: m | d,
        "xor": lambda m, d, c: m ^ d,
        "swap": lambda m, d, c: d.copy(),
        "umin": lambda m, d, c: np.minimum(m, d),
        "umax": lambda m, d, c: np.maximum(m, d),
        "min": lambda m, d, c: np.minimum(m.view(st), d.view(st)).view(ut),
        "max": lambda m, d, c: np.maximum(m.view(st), d.view(st)).view(ut),
        "inc": lambda m, d, c: np.where(m >= d, ut(0), m + one),
        "dec": lambda m, d, c: np.where((m == 0) | (m > d), d, m - one),
        "cmpswap": lambda m, d, c: np.where(m == c, d, m),
    }
    return ops.get(op)


def _rounds(off: np.ndarray) -> list[np.ndarray] | None:
    """Index arrays into `off`, one per round: round r holds the r-th occurrence of every address,
    in lane order. None (one round of everything) when the addresses are distinct."""
    order = np.argsort(off, kind="stable")
    srt = off[order]
    first = np.empty(off.size, dtype=bool)
    first[0] = True
    np.not_equal(srt[1:], srt[:-1], out=first[1:])
    if first.all():
        return None
    starts = np.flatnonzero(first)
    rank = np.empty(off.size, dtype=np.int64)
    rank[order] = np.arange(off.size) - np.repeat(starts, np.diff(np.append(starts, off.size)))
    return [np.flatnonzero(rank == r) for r in range(int(rank.max()) + 1)]


def global_atomic(inst, ctx, wctx):
    """global_atomic_* and buffer_atomic_* (offen, raw descriptors) for all member waves (see the
    module's docstring), or None when the form runs per wave."""
    from tiledsl.backends.rocm.arch import get_arch
    from tiledsl.backends.rocm.emulator.vmem import _atomic_info, soffset_reader

    name = inst.name
    info = _atomic_info(name)
    f = inst.f
    if info is None or "pk_add" in name or "fmin" in name or "fmax" in name or f.get("acc"):
        return None
    if info[0] == "buffer":
        if f.get("idxen") or not f.get("offen") or f.get("tfe") or f.get("lds"):
            return None
    elif info[0] != "global":
        return None
    _, op, wide = info
    # The operation as vmem._build_atomic names it.
    op = {"smin": "min", "smax": "max"}.get(op, op)
    if name.endswith(("_u32", "_u64")) and op in ("min", "max"):
        op = "u" + op
    isf = name.endswith("_f32") or "add_f32" in name
    nb = 8 if wide else 4
    apply = _operation(op, isf, isf and get_arch(wctx.arch).atomic_fadd_flushes_denormals, nb)
    if apply is None:
        return None
    nxt, ret = ctx.nxt, bool(f.get("glc"))
    if info[0] == "buffer":  # the data register also receives the old value (GLC)
        d = s = f["vdata"]
        soffset = soffset_reader(f, wctx)
    else:
        d, s, va, k0 = f["vdst"], f["data"], f["addr"], f["offset"]
        saddr = f["saddr"]
        use_saddr = saddr != f["null"] and not (wctx.gen == "gfx9" and saddr == 0x7F)
        if use_saddr and saddr >= 128:
            return None
    ut = np.uint64 if wide else np.uint32
    k = 2 if wide else 1  # VGPRs per value

    def values(w, r, sel):
        """The lanes' values from VGPR r (a pair when wide) as unsigned ints of the width."""
        if not wide:
            return w.v[r][sel]
        return np.ascontiguousarray(w.v[r:r + 2].T[sel]).view(np.uint64).reshape(-1)

    def h(w):
        lanes = w.lanes
        if lanes.size == 0:
            return nxt
        sel = slice(None) if w.full else lanes
        if info[0] == "buffer":  # lanes out of the descriptor's range do nothing (and return 0)
            got = buffer_addresses(w, sel, f["srsrc"], soffset, f["vaddr"], f["offset"], nb, wctx.gen)
            if got is None:
                return PER_WAVE
            real, ok = got
            if not ok.all():
                if ret:
                    return PER_WAVE
                sel = (np.arange(w.V3.shape[1] * w.V3.shape[2]) if w.full else lanes)[ok]
        else:
            real = tagged_addresses(w, sel, use_saddr, saddr, va, k0, nb)
        if real is None:
            return PER_WAVE
        off = real - w.heap.base
        if (off & (nb - 1)).any():
            return PER_WAVE
        data = values(w, s, sel)
        cmp = values(w, s + k, sel) if op == "cmpswap" else None
        heap = w.heap
        win = heap.windows.get(nb)
        if win is None:
            win = window(heap.data, nb, heap.windows)
        rounds = _rounds(off)
        if rounds is None:  # distinct addresses: one round
            old = win[off]
            win[off] = apply(old, data, cmp)
        else:
            old = np.empty(off.size, dtype=ut)
            for idx in rounds:
                o = off[idx]
                cur = win[o]
                old[idx] = cur
                win[o] = apply(cur, data[idx], None if cmp is None else cmp[idx])
        if ret:
            if wide:
                pair = old.view(np.uint32).reshape(-1, 2)
                w.v[d][sel], w.v[d + 1][sel] = pair[:, 0], pair[:, 1]
            else:
                w.v[d][sel] = old
        return nxt
    return h
