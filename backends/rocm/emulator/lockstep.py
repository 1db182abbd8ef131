"""Lockstep execution: the waves of several workgroups of one launch run as one batch.

A numpy call costs about a microsecond whatever its size up to a few thousand elements, so one
instruction executed for 128 waves at once costs little more than for one. The waves of a
*chunk* (consecutive workgroups, x slowest: see `run_launch`) keep their VGPRs in one array
`V[reg, wave, lane]`: a register row `V[r]` of the whole chunk is one contiguous vector of N*W
lanes, and each wave's own registers are the strided view `V[:, k, :]`.

Scheduling (SIMT style): the waves at the same program counter form a group; the group with the
lowest pc runs next, so a group that left a loop early waits at the exit for the others and the
two merge again -- unless the lowest groups have run YIELD_STEPS steps (SPIN_STEPS inside the
innermost loop around a returning atomic: a lock's wait, a compare-and-swap retry) since a group
further on last ran: then the furthest group runs, undisturbed, until it ends, splits or reaches
a barrier, so a wave waiting for another (a spin lock) lets it go on. Per instruction, a group either
- runs a *batched* handler once over the chunk's rows, the lanes of non-member waves masked off
  like EXEC-disabled lanes: lane-local VALU instructions (bound by the ordinary builders with a
  wave size of N*W; SGPR operands read from shadow rows holding each wave's value), compares,
  carries, selects, MFMA/WMMA, LDS, global and scratch accesses (lockstep_ops.py), or
- runs the ordinary handler once per member wave, in chunk order (scalar and cross-lane
  instructions, and whatever a batched handler declines with PER_WAVE); the waves' next program
  counters split the group where they differ.
Barriers hold a workgroup's waves until all its running waves reach one; LDS stays per workgroup.

What stays exact: per wave the ordinary handlers run, every check included; batched handlers do the
same arithmetic and make the same checks, and send to the per-wave path whatever they cannot vouch
for (tests/test_emulator_lockstep.py compares bits). Faults: the first fault of an ordinary run is
defined by its order, so any error here restores the heap as it was before the launch and reruns
the launch the ordinary way, which then reports exactly its own first fault (and leaves memory as
it would have). The shuffled schedule always takes the ordinary path (its orders are its point),
and so do kernels reading the instruction counter (s_memtime and friends).

The guarantee, precisely. A lockstep run is one interleaving of the waves' instruction streams,
each wave-instruction one indivisible step over its lanes in lane order (a batched execution for
several waves equals their per-wave executions one after another in chunk order) -- a different
interleaving from the ordinary path's (workgroups in launch order, x fastest; a workgroup's waves
one after another between barriers). Lockstep's order: chunks one after another, each holding
consecutive workgroups of the launch sorted x slowest (then z, y); inside a chunk the groups in the
order the scheduler picks them (lowest pc first, the furthest after YIELD_STEPS/SPIN_STEPS), a
group's member waves in chunk order (workgroup, then wave index), each wave's lanes in order. It is
deterministic: the same launch runs in the same order every time. Therefore:
- memory, registers and statistics are the ordinary path's bit for bit when the kernel's results
  do not depend on the interleaving: no races between workgroups or waves (outside barriers), and
  atomics whose combined effect does not depend on their order (integer add/sub/and/or/xor/min/
  max on the final memory, with no use of returned values);
- atomics (global, flat, buffer, LDS) run in lockstep's order: global ones batched
  (lockstep_atomics.py, the same order), the others per wave. An f32 atomic add rounds once per
  add as on the ordinary path, but a sum's terms arrive in lockstep's order, so each sum is the
  ordinary path's up to rounding: both are within (n-1)u/(1-(n-1)u) * sum|term| of the exact sum
  of the n terms (u = 2^-24), and equal whenever the partial sums are exact; returning atomics
  return the values before them in lockstep's order;
- loops whose trip count depends on the interleaving (compare-and-swap retries, a lock's wait)
  may run a different number of wave-instructions;
- a kernel whose workgroups wait for each other (a spin lock) finishes in lockstep when some
  interleaving lets it finish (the furthest group always gets its turn); the ordinary path only
  when each waits for an earlier one in launch order. Each hand-over of a contended lock costs
  SPIN_STEPS steps of the waiting groups.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from tiledsl.backends.rocm.emulator import lockstep_atomics, lockstep_ops, lockstep_workers
from tiledsl.backends.rocm.emulator.executor import BUILDERS, END, BoundKernel, Wave, _abi_setup
from tiledsl.backends.rocm.emulator.lockstep_ops import PER_WAVE
from tiledsl.backends.rocm.emulator.memory import EmulatorError, Heap, Regions, UnsupportedInstruction

LANES = 8192  # lanes per chunk: past a few thousand elements a numpy call's cost grows with size
MIN_WAVES = 2  # launches with fewer waves gain nothing
# Worker processes cost a fork each, a copy of the heap both ways and a pipe per launch (15-30 ms
# with an 8 MB heap): only launches whose remaining chunks would take this long use them.
MIN_PARALLEL_SECONDS = 0.25

_VALU = ("VOP1", "VOP2", "VOP3", "VOP3P", "VOPD")
# Not lane-local, or reading/writing state a batch does not share (SGPR results, VCC, EXEC, M0,
# lane ids, other lanes): these run per wave.
_PER_WAVE = ("v_cmp", "v_mfma", "v_wmma", "v_swmmac", "v_smfmac", "v_readlane", "v_readfirstlane",
             "v_writelane", "v_mbcnt", "v_permlane", "v_movrel", "v_div_fmas", "v_div_scale", "v_interp",
             "v_s_", "v_cndmask", "v_dual_cndmask", "v_pipeflush")
_ORDER_SENSITIVE = ("s_memtime", "s_memrealtime", "s_getreg_b32_const")

K_WAVE, K_BATCH, K_NOP = 0, 1, 2
# The lowest pc runs first, so a group waiting for another -- spinning on a lock a higher-pc group
# holds -- would keep the lead forever. Once the lowest groups have run this many steps since a
# group further on last ran, the furthest group runs instead (and a single group run stops after
# this many steps, so the count is seen). A loop that is merely longer than its neighbours' loses
# at most the merge of the group that ran ahead meanwhile; this is far above what the attention
# kernels' loops need (2048 cost the causal forward at 512 a fifth more group-steps, 8192 nothing
# at 512 and 0.4 % at 4096, 32768 nothing).
YIELD_STEPS = 32768
# When the lowest group started inside the innermost loop around a returning atomic (a
# compare-and-swap lock, a ticket: the usual shape of a wait), counting only such runs, the
# furthest group gets its turn much sooner: each hand-over of a contended lock costs this many
# steps of the waiting groups (64 cost the backward's CAS-loop float adds on gfx90a/gfx1100 2-4 %
# more group-steps, 256 nothing; a 64-workgroup contended lock: 0.1 s -> 0.3-0.5 s).
SPIN_STEPS = 256
YIELDS = [0]  # how many times the furthest group ran out of turn (each may cost a lost merge)
PROFILE: dict | None = None  # set to a dict to count per-wave steps by mnemonic (benchmarks)


def eligible(bk: BoundKernel) -> bool:
    """Whether lockstep may run `bk`: not when it reads the instruction counter (s_memtime and
    friends return the wave's instruction count so far, which lockstep's schedule would change)."""
    return not any(inst.name.startswith(_ORDER_SENSITIVE) for inst in bk.image.insts)


def global_atomics(bk: BoundKernel) -> bool:
    """Whether `bk` has atomics on memory other workgroups see (global, flat, buffer, scalar):
    their read-modify-writes would race between worker processes, so its chunks run in one.
    (LDS atomics stay inside a workgroup, and a workgroup inside a chunk.)"""
    return any("atomic" in inst.name and inst.fam != "DS" for inst in bk.image.insts)


def _classify(inst) -> tuple[str, tuple[str, ...]]:
    """How lockstep runs one instruction: "nop" (once for all), "valu" / "cmp" / "cndmask" (batched,
    with its scalar source fields), "ds" / "matrix" / "global" / "buffer" / "scratch" (batched by
    lockstep_ops when the form is covered), "atomic" (global and buffer atomics, lockstep_atomics) or
    "wave" (per wave)."""
    from tiledsl.backends.rocm.emulator.salu import _NOPS
    from tiledsl.backends.rocm.emulator.valu import VOP3B
    from tiledsl.backends.rocm.emulator.valu_ops import CARRY, OPS

    n = inst.name
    if n in _NOPS and n != "s_sleep_var" or n.startswith(_CACHE_NOPS):
        return "nop", ()
    if inst.fam == "DS":
        return "ds", ()
    if n.startswith(("v_mfma", "v_wmma")):
        return "matrix", ()
    if inst.fam.lower() == "global" and n.startswith(("global_load", "global_store")):
        return "global", ()
    if inst.fam.lower() == "global" and n.startswith("global_atomic"):
        return "atomic", ()
    if inst.fam == "MUBUF" and n.startswith(("buffer_load", "buffer_store")):
        return "buffer", ()
    if inst.fam == "MUBUF" and n.startswith("buffer_atomic"):
        return "atomic", ()
    if inst.fam == "SCRATCH" and n.startswith(("scratch_load", "scratch_store")):
        return "scratch", ()
    if inst.dpp is not None:
        return "wave", ()
    if n.startswith(("v_cmp_", "v_cmpx_")) and inst.fam in ("VOPC", "VOP3"):
        return "cmp", ("src0", "src1")
    if n == "v_cndmask_b32" and inst.fam in ("VOP2", "VOP3") and inst.sdwa is None:
        return "cndmask", ("src0", "src1")
    if inst.fam not in _VALU:
        return "wave", ()
    names = inst.xy if inst.fam == "VOPD" else (n,)
    if any(nm.startswith(_PER_WAVE) for nm in names):
        return "wave", ()
    if n in CARRY and inst.fam in ("VOP2", "VOP3"):
        return "carry", ("src0", "src1")
    if n.startswith("v_mad_") and n in VOP3B and inst.fam == "VOP3":
        return "mad64", ("src0", "src1", "src2")
    if n in VOP3B or n in CARRY:  # these write an SGPR (VCC) besides their VGPR
        return "wave", ()
    spec = OPS.get(n)
    if spec is not None and "mask" in spec[1]:
        return "wave", ()
    if inst.fam == "VOPD":
        return "valu", ("src0", "src1", "src0y", "src1y")
    return "valu", tuple(k for k in ("src0", "src1", "src2") if k.replace("src", "s") in inst.widths)


_CACHE_NOPS = ("s_dcache_inv", "s_dcache_wb", "buffer_gl0_inv", "buffer_gl1_inv", "buffer_inv", "buffer_wb",
               "global_inv", "global_wb")


def _scalar_sources(inst, keys) -> tuple[tuple[int, ...], bool] | None:
    """(the SGPRs the source fields `keys` read, whether each is a whole 32/64-bit operand), or
    None when one reads vccz/execz/scc."""
    reads: list[int] = []
    whole = True
    for key in keys:
        e = inst.f.get(key)
        if e is None:
            continue
        if e in (251, 252, 253):
            return None
        if e < 128:
            w = inst.widths.get(key.replace("src", "s").rstrip("y"), 1)
            whole &= w in (1, 2)
            reads.extend(range(e, e + max(w, 1)))
    return tuple(sorted(set(reads))), whole


def _shadowed(inst, keys, row0: int):
    """`inst` with each SGPR source of `keys` read from VGPR row row0 + sgpr instead (the chunk's
    shadow rows, filled with each wave's SGPR value before the instruction runs)."""
    f = dict(inst.f)
    for key in keys:
        e = f.get(key)
        if e is not None and e < 128:
            f[key] = 256 + row0 + e
    return replace(inst, f=f)


def _build(cls, inst, ctx, wctx):
    if cls == "cmp":
        return lockstep_ops.compare(inst, ctx, wctx)
    if cls == "cndmask":
        return lockstep_ops.cndmask(inst, ctx, wctx)
    if cls == "carry":
        return lockstep_ops.carry(inst, ctx, wctx)
    if cls == "mad64":
        return lockstep_ops.mad64(inst, ctx, wctx)
    b = BUILDERS.get(inst.name)
    try:
        return b(inst, ctx) if b is not None else None
    except UnsupportedInstruction:
        return None


def spin_loops(bk: BoundKernel) -> list[bool]:
    """Per instruction: whether it lies in the innermost loop (a backward branch and its target)
    around a returning atomic -- a compare-and-swap retry or a lock's wait, where a wave may be
    waiting for another (SPIN_STEPS). Only the innermost: a loop that merely contains such a retry
    loop (the backward's query loop around a CAS-loop float add on gfx90a/gfx1100) is not a wait."""
    insts = bk.image.insts
    loops = []
    for b, inst in enumerate(insts):
        if inst.name.startswith(("s_branch", "s_cbranch")) and "simm16" in inst.f:
            try:
                t = bk.ctx.target(inst, inst.f["simm16"])
            except EmulatorError:
                continue
            if t <= b:
                loops.append((t, b))
    spin = [False] * len(insts)
    for a, i in enumerate(insts):
        if ("atomic" in i.name and (i.f.get("glc") or "cmpswap" in i.name)) or (i.fam == "DS" and "rtn" in i.name):
            around = [(b - t, t, b) for t, b in loops if t <= a <= b]
            if around:
                _, t, b = min(around)
                spin[t:b + 1] = [True] * (b + 1 - t)
    return spin


def bind_batch(bk: BoundKernel, N: int) -> tuple[list, list, list, list, list]:
    """(kinds, SGPR read sets, batched handlers, shadow handlers, spin_loops) of `bk` for chunks of
    N waves, bound once. A batched handler needs the SGPRs of its read set equal in every member
    wave; a shadow handler (for whole 32/64-bit scalar operands) reads them from the shadow rows."""
    got = bk.lockstep.get(N)
    if got is not None:
        return got
    ctx = replace(bk.ctx, wave_size=bk.ctx.wave_size * N)
    kinds, reads, handlers, shadows = [], [], [], []
    for i, inst in enumerate(bk.image.insts):
        cls, keys = _classify(inst)
        if hasattr(bk.handlers[i], "unsupported"):  # refused by the ordinary binder: never batch it
            cls = "wave"
        ctx.index, ctx.nxt = i, i + 1
        kind, rs, h, sh = K_WAVE, (), None, None
        if cls == "nop":
            kind = K_NOP
        elif cls in ("ds", "matrix"):
            h = lockstep_ops.batched(inst, ctx, bk.handlers[i])
        elif cls == "global":
            h = lockstep_ops.global_access(inst, ctx, bk.ctx)
        elif cls == "buffer":
            h = lockstep_ops.buffer_access(inst, ctx, bk.ctx)
        elif cls == "atomic":
            h = lockstep_atomics.global_atomic(inst, ctx, bk.ctx)
        elif cls == "scratch":
            h = lockstep_ops.scratch_access(inst, ctx, bk.ctx)
        elif cls != "wave":
            src = _scalar_sources(inst, keys)
            if src is not None:
                rs, whole = src
                h = _build(cls, inst, ctx, bk.ctx)
                if h is not None and rs and whole:
                    sh = _build(cls, _shadowed(inst, keys, bk.nvgpr), ctx, bk.ctx)
        if h is not None:
            kind = K_BATCH
        kinds.append(kind)
        reads.append(rs)
        handlers.append(h)
        shadows.append(sh)
    bk.lockstep[N] = got = (kinds, reads, handlers, shadows, spin_loops(bk))
    return got


class LockWave(Wave):
    """A wave whose registers are a view into its chunk's array; EXEC changes are noted so the
    chunk's lane masks are rebuilt."""

    __slots__ = ("chunk", "slot")

    def set_exec(self, value: int) -> None:
        Wave.set_exec(self, value)
        c = self.chunk
        c.em[self.slot] = self.mask
        c.epoch += 1


class BatchWave:
    """What a batched handler sees: the chunk's register rows, and as EXEC the member waves' lanes.
    `s` is the first member's SGPRs (plain batched handlers read only SGPRs equal in every member;
    the others read each wave's through `waves`/`kl` or the shadow rows)."""

    __slots__ = ("s", "v", "vf", "vi", "h", "hf", "mask", "lanes", "full", "exec", "W", "fullmask", "ctx",
                 "mode", "lane_ids", "count", "dppvalid", "scc", "V3", "km", "ldsall", "ldsbase", "ldswin", "lds_size",
                 "waves", "kl", "heap", "mem", "lane_wave", "scratch")

    def __init__(self, V: np.ndarray, ctx) -> None:
        nv = V.shape[0]
        self.V3 = V  # [reg, wave, lane] (lockstep_ops)
        self.km = np.zeros(0, dtype=np.int64)  # the member waves
        self.v = V.reshape(nv, -1)
        self.vf = self.v.view(np.float32)
        self.vi = self.v.view(np.int32)
        self.h = self.v.view(np.uint16)
        self.hf = self.v.view(np.float16)
        self.W = self.v.shape[1]
        self.fullmask = (1 << self.W) - 1
        self.ctx = ctx
        self.exec = None  # no batched handler may read EXEC as a number: fail loudly if one does
        self.s = [0] * 128
        self.mode = 0
        self.lane_ids = np.arange(self.W)
        self.count = 0
        self.scc = None
        self.full = False


class _Chunk:
    __slots__ = ("em", "epoch")

    def __init__(self, N: int, W: int) -> None:
        self.em = np.zeros((N, W), dtype=bool)  # every wave's EXEC lanes
        self.epoch = 0


class Fallback(Exception):
    """Lockstep met something it leaves to the ordinary path (an error, a fault)."""


def run_launch(bk: BoundKernel, heap: Heap, order: list, grid, block, kernarg_addr: int, dispatch_addr: int,
               dynamic_lds: int, mem: Regions, workers: int = 1) -> tuple[list[int], int]:
    """Run the workgroups `order` (launch order) in lockstep chunks: (the wave-instructions of each
    workgroup in chunk order, the number of processes that ran chunks). Raises Fallback (heap left
    as it was mid-run) on any error.

    Chunks take workgroups x slowest: grids put the tile index in x and batch/head in y/z, and the
    workgroups of one tile column share their control flow (a causal forward's query block sets
    its loop count), so a chunk's waves stay together; in launch order a chunk would hold a row of
    query blocks whose loops end one after another, half its lanes idle on average.

    With `workers` > 1, the first chunk runs here and times the launch: when the chunks left would
    take MIN_PARALLEL_SECONDS or more at that pace, at least two of them are left, and the kernel
    has no global atomics, they run in up to `workers` forked processes (lockstep_workers.py).
    Chunks stay full size: a chunk's cost is mostly per-instruction overhead along its longest
    workgroup's path, which splitting a chunk in two would not shorten."""
    img = bk.image
    W = img.wave_size
    nthreads = block[0] * block[1] * block[2]
    per_wg = (nthreads + W - 1) // W
    wgs_per_chunk = max(1, min(len(order), (LANES // W) // per_wg))
    N = wgs_per_chunk * per_wg
    order = sorted(order, key=lambda wg: (wg[0], wg[2], wg[1]))
    chunks = [order[c0:c0 + wgs_per_chunk] for c0 in range(0, len(order), wgs_per_chunk)]
    processes = 1
    try:
        tables = bind_batch(bk, N)  # before any fork: the workers inherit the bound handlers

        def run(i: int) -> list[int]:
            return _run_chunk(bk, heap, chunks[i], N, per_wg, nthreads, block, kernarg_addr, dispatch_addr,
                              dynamic_lds, mem, tables)
        with np.errstate(all="ignore"):
            t0 = time.perf_counter()
            per_chunk = [run(0)]
            rest = len(chunks) - 1
            if workers > 1 and rest >= 2 and (time.perf_counter() - t0) * rest >= MIN_PARALLEL_SECONDS \
                    and not global_atomics(bk):
                processes = min(workers, rest)
                per_chunk += lockstep_workers.run_chunks(lambda i: run(i + 1), rest, heap, processes)
            else:
                per_chunk += [run(i) for i in range(1, len(chunks))]
    except Exception as exc:  # noqa: BLE001 -- every error goes to the ordinary path
        raise Fallback(str(exc)) from exc
    return [n for counts in per_chunk for n in counts], processes


def _run_chunk(bk, heap, wgs, N, per_wg, nthreads, block, kernarg_addr, dispatch_addr, dynamic_lds, mem,
               tables) -> list[int]:
    img = bk.image
    W = img.wave_size
    kinds, reads, bhs, shs, spin = tables
    # VGPRs, then 128 shadow rows: row nvgpr + s holds each wave's SGPR s for a shadow handler.
    V = np.zeros((bk.nvgpr + 128, N, W), dtype=np.uint32)
    shadow = V[bk.nvgpr:]
    chunk = _Chunk(N, W)
    bctx = replace(bk.ctx, wave_size=W * N)
    waves: list[LockWave] = []
    bw = BatchWave(V, bctx)
    bw.waves = waves
    bw.heap, bw.mem = heap, mem
    bw.lane_wave = np.repeat(np.arange(N, dtype=np.int64), W)  # each chunk lane's wave
    tid = np.arange(per_wg * W)
    tx, ty, tz = tid % block[0], (tid // block[0]) % block[1], tid // (block[0] * block[1])
    packed = (tx | (ty << 10) | (tz << 20)).astype(np.uint32)
    lds_size = img.lds_bytes + dynamic_lds
    priv = img.kd.private_segment_size
    # The chunk's private memory: wave k's lanes are rows k*W.. (each wave's scratch is its slice).
    scratch = np.zeros((N * W, priv + 16), dtype=np.uint8) if priv else None
    bw.scratch = scratch
    wg_of: list[int] = []
    # One array for the LDS of every workgroup of the chunk (batched LDS accesses index it with
    # each lane's workgroup base); each workgroup's LDS is its slice.
    ldsall = np.zeros(len(wgs) * lds_size + 4, dtype=np.uint8)
    bw.ldsall, bw.ldswin, bw.lds_size = ldsall, {}, lds_size
    bw.ldsbase = np.repeat(np.arange(N, dtype=np.int64) // per_wg * lds_size, W)
    for g, wg in enumerate(wgs):
        lds_view = ldsall[g * lds_size:(g + 1) * lds_size]
        ldswin: dict = {}
        for i in range(per_wg):
            k = len(waves)
            w = LockWave(W, bk.nvgpr, heap, lds_view, bk.ctx, V[:, k, :])
            w.chunk, w.slot = chunk, k
            w.wg, w.index, w.mem, w.ldswin = wg, i, mem, ldswin
            _abi_setup(w, bk, wg, kernarg_addr, dispatch_addr)
            w.v[0] = packed[i * W:(i + 1) * W]
            w.set_exec((1 << min(W, nthreads - i * W)) - 1)
            if priv:
                w.scratch = scratch[k * W:(k + 1) * W]
            waves.append(w)
            wg_of.append(g)
    n = len(waves)
    hs = bk.handlers
    counts = [0] * n
    alive = [per_wg] * len(wgs)
    waiting: list[list[int]] = [[] for _ in wgs]
    wpc = [0] * n
    groups: dict[int, list[int]] = {0: list(range(n))}
    member = np.zeros((N, 1), dtype=bool)
    inf = 1 << 62

    def push(p: int, ks: list[int]) -> None:
        old = groups.get(p)
        groups[p] = ks if old is None else sorted(old + ks)

    def park(ks: list[int], how: int, p: int) -> None:
        for k in ks:
            g = wg_of[k]
            if how == END:
                alive[g] -= 1
            else:
                wpc[k] = p + 1
                waiting[g].append(k)
            if waiting[g] and len(waiting[g]) == alive[g]:  # every running wave is at a barrier
                for j in waiting[g]:
                    push(wpc[j], [j])
                waiting[g] = []

    starve = 0  # steps the lowest-pc groups ran since a group further on last ran,
    spun = 0  # and those of them that started inside a spin loop (spin_loops)
    while groups:
        pc = min(groups)
        if len(groups) > 1 and (starve >= YIELD_STEPS or spin[pc] and spun >= SPIN_STEPS):
            # A group further on may hold what the lowest ones wait for: the furthest runs now,
            # undisturbed, until it ends, splits, reaches a barrier or runs YIELD_STEPS steps.
            pc = max(groups)
            ks = groups.pop(pc)
            gmin = inf
            starve = spun = 0
            YIELDS[0] += 1
        else:
            ks = groups.pop(pc)
            gmin = min(groups) if groups else inf
            if not groups:  # nobody waits
                starve = spun = 0
        spinning = spin[pc]
        # The batch's lanes: the members' EXEC lanes (rebuilt when an EXEC changes).
        member[:] = False
        member[ks] = True
        bw.km = np.array(ks, dtype=np.intp)
        bw.kl = ks
        allin = len(ks) == N
        epoch = -1
        first = waves[ks[0]]
        steps = 0
        while True:
            kind = kinds[pc]
            if kind == K_BATCH:
                rs = reads[pc]
                h = bhs[pc]
                sh = shs[pc]
                if sh is not None:  # each wave's SGPRs into the shadow rows
                    h = sh
                    for r in rs:
                        vals = np.array([waves[k].s[r] for k in ks], dtype=np.uint32)
                        if allin:
                            shadow[r] = vals[:, None]
                        else:
                            shadow[r, ks] = vals[:, None]
                elif rs:
                    s0 = first.s
                    same = True
                    for k in ks:
                        s = waves[k].s
                        for r in rs:
                            if s[r] != s0[r]:
                                same = False
                                break
                        if not same:
                            break
                    if not same:
                        kind = K_WAVE
                if kind == K_BATCH:
                    if epoch != chunk.epoch:
                        epoch = chunk.epoch
                        em = chunk.em if allin else chunk.em & member
                        full = allin and bool(em.all())
                        bw.full = full
                        bw.mask = em.reshape(-1)
                        bw.lanes = bw.lane_ids if full else np.flatnonzero(bw.mask)
                    bw.s = first.s
                    npc = h(bw)
                    if npc != PER_WAVE:
                        pc = npc
                        steps += 1
                        if pc >= gmin or steps >= SPIN_STEPS and (steps >= YIELD_STEPS or spin[pc]):
                            break
                        continue
            elif kind == K_NOP:
                pc = hs[pc](first)
                steps += 1
                if pc >= gmin or steps >= SPIN_STEPS and (steps >= YIELD_STEPS or spin[pc]):
                    break
                continue
            h = hs[pc]
            if PROFILE is not None:
                key = bk.image.insts[pc].name + (" (sgpr)" if kinds[pc] == K_BATCH else "")
                PROFILE[key] = PROFILE.get(key, 0) + len(ks)
            npc0 = h(waves[ks[0]])
            split = None
            for j in range(1, len(ks)):
                npc = h(waves[ks[j]])
                if npc != npc0:
                    if split is None:
                        split = {npc0: ks[:j]}
                    split.setdefault(npc, []).append(ks[j])
                elif split is not None:
                    split[npc0].append(ks[j])
            steps += 1
            if split is None and npc0 >= 0:
                pc = npc0
                if pc >= gmin or steps >= SPIN_STEPS and (steps >= YIELD_STEPS or spin[pc]):
                    break
                continue
            for k in ks:
                counts[k] += steps
            starve += steps
            spun += steps if spinning else 0
            steps = 0
            for npc, sub in (split.items() if split is not None else ((npc0, ks),)):
                if npc >= 0:
                    push(npc, sub)
                else:
                    park(sub, npc, pc)
            ks = []
            break
        for k in ks:
            counts[k] += steps
        starve += steps
        spun += steps if spinning else 0
        if ks:
            push(pc, ks)
    per = [0] * len(wgs)
    for k in range(n):
        per[wg_of[k]] += counts[k]
    return per
