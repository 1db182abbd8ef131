"""A cycle-approximate model of one compute unit, replaying traced waves (trace.py).

The model (docs/profile.md says what it leaves out; it ranks kernels, it does not predict clocks):
- Issue: every `issue_interval` cycles each SIMD may issue, from the waves resident on it (oldest
  first), at most one instruction per wave and one per port: VALU (VALU, transcendental, matrix),
  SALU, branch, LDS, vector memory, scalar memory.
- Pipes: per SIMD a vector ALU (a VALU instruction holds it `valu_cycles`, a transcendental
  `trans_cycles`) and, on CDNA, a matrix pipe (an MFMA holds it for its cycles, derived from the
  arch's published peak: `matrix_cycles`); on RDNA WMMA runs on the vector ALU. Per CU an LDS
  pipe (each access holds it for the cycles its real addresses need, bank conflicts included) and
  a vector memory pipe (each access holds it for the cache lines it touches at
  `vmem_bytes_per_clk`); their results come back `lds_latency` / `vmem_latency` cycles later.
- Waits: s_waitcnt / s_wait_* against per-wave counters (vm, vs, lgkm; gfx12 load, store, ds, km)
  whose results return in order; s_nop N holds the wave N+1 issue slots (on CDNA the compiler's
  hazard wait states are how MFMA results are waited for: the hardware does not interlock them);
  s_delay_alu (RDNA) waits for the named earlier VALU/transcendental result; s_barrier holds a
  workgroup's waves until all arrive; a taken branch costs a refetch.
- Workgroups: up to the kernel's occupancy are resident on the CU, waves spread over its SIMDs;
  a finished workgroup's slot takes the next one after `workgroup_launch_cycles`.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import deque
from dataclasses import dataclass, field

from tiledsl.backends.rocm.arch import Arch
from tiledsl.backends.rocm.emulator.trace import FREE_MEMORY, WorkgroupTrace, memory_kind

# Instruction kinds.
SALU, VALU, TRANS, MATRIX, LDS, VLOAD, VSTORE, SMEM, BRANCH, WAIT, NOP, DELAY, BARRIER, END, SLEEP, FREE = range(16)
KIND_NAMES = ("salu", "valu", "trans", "matrix", "lds", "vmem load", "vmem store", "smem", "branch", "wait", "nop",
              "delay", "barrier", "end", "sleep", "free")
# Issue ports: one instruction per port per SIMD per issue opportunity.
_PORT = {SALU: 0, VALU: 1, TRANS: 1, MATRIX: 1, LDS: 2, VLOAD: 3, VSTORE: 3, SMEM: 4, BRANCH: 5}
# Wait counters (gfx9/gfx11 names; gfx12: load, store, ds, km).
VM, VS, LGKM, KM = range(4)
_COUNTER_REASON = {VM: "wait vmem", VS: "wait vmem", LGKM: "wait lds/smem", KM: "wait smem"}
INF = float("inf")

_TRANS = re.compile(r"^v_(exp|log|rcp|rsq|sqrt|sin|cos)(_legacy|_iflag|_clamp)?_f(16|32|64)$")
_MFMA = re.compile(r"^v_mfma_(f32|i32|f64)_(\d+)x(\d+)x(\d+)(?:_(\d+)b)?_?(\w*)$")
_WMMA = re.compile(r"^v_wmma_(f32|f16|bf16|i32)_(\d+)x(\d+)x(\d+)_(\w+?)(?:_w32|_w64)?$")
_FREE = ("s_clause", "s_setprio", "s_waitcnt_depctr", "s_wait_alu", "s_dcache_inv", "s_dcache_wb", "s_inst_prefetch",
         "s_set_inst_prefetch_distance", "s_barrier_signal", "s_icache_inv", "s_version", "s_sethalt",
         "s_ttracedata", "s_code_end") + FREE_MEMORY


class TimingError(Exception):
    """The timing model cannot price this kernel (an instruction it has no cost for)."""


def _eight_bit_inputs(name: str) -> bool:
    """Whether a matrix instruction takes 8-bit inputs (fp8/bf8, i8); f16/bf16 otherwise, and the
    model has no rate for the rest (f32, xf32, f64 inputs)."""
    suffix = name.lower().split("_", 3)[-1]
    if re.search(r"(fp8|bf8|f8f6f4|i8|iu8)", suffix):
        return True
    if re.search(r"(f16|bf16)", suffix):
        return False
    raise TimingError(f"the timing model has no matrix rate for '{name}' (f16/bf16 and 8-bit inputs only)")


def matrix_cycles(arch: Arch, name: str) -> tuple[int, float]:
    """(cycles the matrix pipe is held, FLOPs) of one MFMA/WMMA: FLOPs over the per-SIMD rate that
    the row's published dense f16 peak implies (peak / (dies x CUs x SIMDs x clock)), scaled by the
    arch's 8-bit rate for 8-bit inputs. A pure matrix loop therefore reaches the published peak exactly when the
    issue model loses no cycles: the calibration tests/test_timing.py checks."""
    t = arch.timing
    m = _MFMA.match(name) or _WMMA.match(name)
    if m is None:
        raise TimingError(f"the timing model cannot read the shape of matrix instruction '{name}'")
    mm, nn, kk = int(m.group(2)), int(m.group(3)), int(m.group(4))
    blocks = int(m.group(5)) if name.startswith("v_mfma") and m.group(5) else 1
    flops = 2.0 * mm * nn * kk * blocks
    rate = 1.0
    if _eight_bit_inputs(name):
        if not t.fp8_rate:
            raise TimingError(f"{arch.name} has no 8-bit matrix rate for '{name}'")
        rate = t.fp8_rate
    per_simd = arch.peak_tflops_f16 * 1e12 / (t.dies * arch.compute_units * arch.simds_per_cu * t.clock_ghz * 1e9)
    return max(round(flops / (per_simd * rate)), 1), flops


@dataclass
class Program:
    """The static facts of a kernel's instructions, one entry per instruction index."""

    kind: list[int]
    busy: list[int]  # cycles a VALU/trans/matrix instruction holds its pipe
    flops: list[float]  # matrix FLOPs
    waits: list[tuple[tuple[int, int], ...]]  # (counter, outstanding allowed) of a wait
    counters: list[tuple[int, ...]]  # counters a memory instruction increments
    arg: list[int]  # s_nop / s_sleep count, s_delay_alu immediate
    text: list[str]  # mnemonic, for reports
    freed: int = 0  # instructions a what-if analysis made free (classify's `free`)


def _waits(inst, gen: str) -> tuple[tuple[int, int], ...]:
    n, imm = inst.name, inst.f.get("simm16", 0)
    if n == "s_waitcnt":
        if gen == "gfx9":
            return ((VM, (imm & 0xF) | ((imm >> 14) & 3) << 4), (LGKM, (imm >> 8) & 0xF))
        return ((VM, (imm >> 10) & 0x3F), (LGKM, (imm >> 4) & 0x3F))
    single = {"s_waitcnt_vscnt": VS, "s_waitcnt_vmcnt": VM, "s_waitcnt_lgkmcnt": LGKM, "s_wait_loadcnt": VM,
              "s_wait_storecnt": VS, "s_wait_dscnt": LGKM, "s_wait_kmcnt": KM}
    if n in single:
        return ((single[n], imm),)
    if n == "s_wait_loadcnt_dscnt":
        return ((VM, (imm >> 8) & 0x3F), (LGKM, imm & 0x3F))
    if n == "s_wait_storecnt_dscnt":
        return ((VS, (imm >> 8) & 0x3F), (LGKM, imm & 0x3F))
    return ()  # expcnt, samplecnt, bvhcnt: nothing of ours waits on them


def _memory_counters(inst, gen: str, load: bool) -> tuple[int, ...]:
    if inst.fam == "SMEM":
        return (KM,) if gen == "gfx12" else (LGKM,)
    if inst.fam == "DS":
        return (LGKM,)
    c = VM if load or gen == "gfx9" else VS  # gfx9 counts stores in vmcnt; gfx10+ in vscnt/storecnt
    return (c, LGKM) if inst.fam == "FLAT" else (c,)  # a flat access may be LDS: both counters


def classify(arch: Arch, insts, free: tuple[str, ...] = (), free_barriers: bool = False) -> Program:
    """The Program of `insts` (a KernelImage's decoded instructions) on `arch`. What-if analysis
    (TimingOptions): the ALU instructions whose names start with one of `free` take no issue slot
    and no pipe, and with `free_barriers` no wave waits at a barrier; the trace, and so every
    result, is unchanged."""
    t = arch.timing
    gen = arch.isa_generation
    p = Program([], [], [], [], [], [], [])
    for inst in insts:
        n, fam = inst.name, inst.fam
        kind, busy, flops, waits, counters, arg = SALU, 0, 0.0, (), (), 0
        if n.startswith(("v_mfma", "v_wmma", "v_smfmac", "v_swmmac")):
            kind = MATRIX
            busy, flops = matrix_cycles(arch, n)
        elif n == "v_nop":
            kind, busy = VALU, t.valu_cycles
        elif fam == "VOPD":
            # RDNA's dual issue: two VALU operations (never a transcendental: VOPD has none) in one
            # instruction, one issue slot and one VALU cycle. Its name is "vopd", not "v_...".
            kind, busy = VALU, t.valu_cycles
        elif n.startswith("v_") and fam not in ("DS", "GLOBAL", "FLAT", "SCRATCH", "MUBUF", "MTBUF", "SMEM"):
            kind, busy = (TRANS, t.trans_cycles) if _TRANS.match(n) else (VALU, t.valu_cycles)
        elif n.startswith(("s_waitcnt", "s_wait_")) and n not in ("s_wait_alu", "s_wait_idle", "s_wait_event"):
            kind, waits = WAIT, _waits(inst, gen)
            if not waits:
                kind = FREE
        elif n == "s_nop":
            kind, arg = NOP, inst.f.get("simm16", 0) & 0xF
        elif n == "s_sleep":
            kind, arg = SLEEP, inst.f.get("simm16", 0) & 0x7F
        elif n == "s_delay_alu":
            kind, arg = DELAY, inst.f.get("simm16", 0)
        elif n in ("s_barrier", "s_barrier_wait"):
            kind = BARRIER
        elif n == "s_endpgm":
            kind = END
        elif n in _FREE:
            kind = FREE
        elif n.startswith(("s_branch", "s_cbranch", "s_setpc", "s_swappc", "s_getpc")):
            kind = BRANCH
        elif fam == "SMEM":
            kind, counters = SMEM, _memory_counters(inst, gen, True)
        elif memory_kind(inst) == "lds":
            kind, counters = LDS, _memory_counters(inst, gen, True)
        elif memory_kind(inst) == "vmem":
            load = "load" in n or ("atomic" in n and ("rtn" in n or inst.f.get("glc") or inst.f.get("sc0")))
            kind, counters = (VLOAD if load else VSTORE), _memory_counters(inst, gen, bool(load))
        if free_barriers and kind == BARRIER:
            kind = FREE
        if free and (n.startswith(free) or (inst.raw_name or n).startswith(free)):
            if kind not in (SALU, VALU, TRANS):
                raise TimingError(f"what-if: {inst.raw_name or n} matches {', '.join(free)}, but only vector, "
                                  "transcendental and scalar ALU instructions can be modeled free (matrix "
                                  "instructions are the work measured; memory, wait, barrier and branch "
                                  "instructions order the trace)")
            kind, busy = FREE, 0
            p.freed += 1
        p.kind.append(kind)
        p.busy.append(busy)
        p.flops.append(flops)
        p.waits.append(waits)
        p.counters.append(counters)
        p.arg.append(arg)
        text = inst.raw_name or n
        if kind == WAIT:
            names = ("vm", "vs", "lgkm", "km") if gen != "gfx12" else ("load", "store", "ds", "km")
            top = {c: 15 if gen == "gfx9" and c == LGKM else 63 for c in range(4)}  # the field's "no wait"
            text += " " + " ".join(f"{names[c]}<={v}" for c, v in waits if v < top[c])
        p.text.append(text)
    return p


class _Wave:
    __slots__ = ("pcs", "i", "costs", "ci", "simd", "group", "ready", "since", "reason", "cnt", "valu", "trans",
                 "delays", "age", "index", "first")

    def __init__(self, pcs, costs, simd, group, ready, age, index, first) -> None:
        self.pcs, self.costs, self.simd, self.group = pcs, costs, simd, group
        self.i = self.ci = 0
        self.ready = self.since = ready
        self.reason = "launch"
        self.cnt = (deque(), deque(), deque(), deque())
        self.valu: list[float] = []  # completion times of the last VALU results (s_delay_alu)
        self.trans: list[float] = []
        self.delays: list[tuple[int, float]] = []  # (instruction position, time its s_delay_alu dependency is met)
        self.age, self.index, self.first = age, index, first


class _Group:
    __slots__ = ("alive", "arrived")

    def __init__(self, n: int) -> None:
        self.alive = n
        self.arrived: list[tuple[_Wave, int, float]] = []  # (wave, barrier pc, arrival time)


@dataclass
class CuResult:
    """One CU's modeled run of the workgroups it was given."""

    cycles: float
    workgroups: int
    issued: dict[str, int] = field(default_factory=dict)  # instructions by kind
    busy: dict[str, float] = field(default_factory=dict)  # pipe-cycles by pipe (per-SIMD pipes summed)
    slots: dict[str, float] = field(default_factory=dict)  # SIMD-cycles by what the SIMD did
    pc_issued: dict[int, int] = field(default_factory=dict)
    pc_stall: dict[int, float] = field(default_factory=dict)  # wave-cycles waited before issuing pc
    matrix_flops: float = 0.0
    timeline: list[tuple[int, str, float, float]] = field(default_factory=list)  # first workgroup


def simd_pipes(arch: Arch) -> tuple[tuple[int, ...], ...]:
    """The ALU instruction kinds that hold each of a SIMD's pipes: the vector ALU, RDNA's
    transcendental unit, CDNA's matrix pipe. CDNA's transcendentals run on the vector ALU, and so
    does RDNA's WMMA (`matrix_shares_valu`): such kinds cannot overlap each other."""
    valu, trans, matrix = [VALU], [], []
    (valu if arch.is_cdna else trans).append(TRANS)
    (valu if arch.timing.matrix_shares_valu else matrix).append(MATRIX)
    return tuple(valu), tuple(trans), tuple(matrix)


def simulate_cu(arch: Arch, prog: Program, traces: list[WorkgroupTrace], groups_per_cu: int,
                timeline: bool = False) -> CuResult:
    """Run `traces` (the workgroups dispatched to one CU, in dispatch order) on the model, at most
    `groups_per_cu` resident at once."""
    t_ = arch.timing
    simds, interval = arch.simds_per_cu, t_.issue_interval
    kind, busy, flops, waits, counters, arg = prog.kind, prog.busy, prog.flops, prog.waits, prog.counters, prog.arg
    pipe_of = {k: p for p, kinds in enumerate(simd_pipes(arch)) for k in kinds}
    res = CuResult(0.0, len(traces))
    pc_issued: dict[int, int] = {}
    pc_stall: dict[int, float] = {}
    issued_kind = [0] * 16
    busy_pipe = {"valu": 0.0, "trans": 0.0, "matrix": 0.0, "lds": 0.0, "vmem": 0.0}
    slots: dict[str, float] = {}
    on_simd: list[list[_Wave]] = [[] for _ in range(simds)]
    pipe_free = [[0.0, 0.0, 0.0] for _ in range(simds)]
    lds_free = vmem_free = 0.0
    line_cycles = t_.vmem_line_bytes / t_.vmem_bytes_per_clk
    pending = deque(traces)
    starts: list[float] = []  # when the next workgroups start (a slot freed)
    age = 0
    next_simd = 0

    def launch(at: float) -> None:
        nonlocal age, next_simd
        tr = pending.popleft()
        grp = _Group(len(tr.waves))
        first = age == 0  # the CU's first workgroup (the timeline's)
        for wt in tr.waves:
            s = next_simd
            next_simd = (next_simd + 1) % simds
            on_simd[s].append(_Wave(wt.pcs, wt.costs, s, grp, at, age, wt.index, first))
            age += 1

    for _ in range(min(groups_per_cu, len(pending))):
        launch(0.0)
    t = 0.0
    end = 0.0
    while True:
        while starts and starts[0] <= t:
            launch(starts.pop(0))
        if not any(on_simd) and not starts:
            break
        did = [False] * simds
        for s in range(simds):
            used = 0
            for w in list(on_simd[s]):
                if w.ready > t:
                    continue
                pc = w.pcs[w.i]
                k = kind[pc]
                while k == FREE or k == DELAY:  # taken by the instruction buffer: no issue slot
                    if k == DELAY:
                        _delay(w, arg[pc])
                    w.i += 1
                    pc = w.pcs[w.i]
                    k = kind[pc]
                if w.delays:
                    due = max((d for at, d in w.delays if at == w.i), default=0.0)
                    w.delays = [x for x in w.delays if x[0] > w.i]
                    if due > t:
                        w.ready, w.reason = due, "dependency"
                        continue
                port = _PORT.get(k, -1)
                if port >= 0 and used >> port & 1:
                    w.reason = "issue"
                    continue
                if k == WAIT:
                    r = t
                    why = ""
                    for c, n in waits[pc]:
                        dq = w.cnt[c]
                        while dq and dq[0] <= t:
                            dq.popleft()
                        if len(dq) > n and dq[len(dq) - n - 1] > r:
                            r, why = dq[len(dq) - n - 1], _COUNTER_REASON[c]
                    if r > t:
                        w.ready, w.reason = r, why
                        continue
                elif k in pipe_of:
                    p = pipe_of[k]
                    if pipe_free[s][p] > t:
                        w.ready, w.reason = pipe_free[s][p], ("matrix busy" if k == MATRIX else "valu busy")
                        continue
                # Issue.
                stall = t - w.since
                if stall > 0:
                    pc_stall[pc] = pc_stall.get(pc, 0.0) + stall
                pc_issued[pc] = pc_issued.get(pc, 0) + 1
                issued_kind[k] += 1
                if port >= 0:
                    used |= 1 << port
                did[s] = True
                nxt = t + interval
                if k in pipe_of:
                    b = busy[pc]
                    pipe_free[s][pipe_of[k]] = t + b
                    busy_pipe["matrix" if k == MATRIX else "trans" if k == TRANS else "valu"] += b
                    done = t + b + (t_.trans_latency if k == TRANS else t_.valu_latency)
                    w.valu.append(done)
                    if len(w.valu) > 4:
                        del w.valu[0]
                    if k == TRANS:
                        w.trans.append(done)
                        if len(w.trans) > 3:
                            del w.trans[0]
                    if k == MATRIX:
                        res.matrix_flops += flops[pc]
                    if timeline and w.first:
                        res.timeline.append((w.index, KIND_NAMES[k], t, t + b))
                elif k == LDS or k == VLOAD or k == VSTORE or k == SMEM:
                    if k == LDS:
                        cost = max(w.costs[w.ci], 1)
                        w.ci += 1
                        start = max(t, lds_free)
                        lds_free = start + cost
                        busy_pipe["lds"] += cost
                        done = lds_free + t_.lds_latency
                    elif k == SMEM:
                        start, done = t, t + t_.smem_latency
                    else:
                        cost = max(w.costs[w.ci] * line_cycles, 1.0)
                        w.ci += 1
                        start = max(t, vmem_free)
                        vmem_free = start + cost
                        busy_pipe["vmem"] += cost
                        done = vmem_free + t_.vmem_latency
                    for c in counters[pc]:
                        dq = w.cnt[c]
                        dq.append(max(done, dq[-1]) if dq else done)  # results return in order
                    if timeline and w.first:
                        res.timeline.append((w.index, KIND_NAMES[k], start, done))
                elif k == NOP:
                    nxt = t + (arg[pc] + 1) * interval
                    w.reason = "dependency"
                elif k == SLEEP:
                    nxt = t + 64 * max(arg[pc], 1)
                    w.reason = "sleep"
                elif k == BRANCH:
                    if w.i + 1 < len(w.pcs) and w.pcs[w.i + 1] != pc + 1:
                        nxt = t + t_.branch_taken_cycles
                        w.reason = "branch"
                elif k == BARRIER:
                    g = w.group
                    g.arrived.append((w, pc, t))
                    w.i += 1
                    w.ready, w.reason = INF, "barrier"
                    if len(g.arrived) >= g.alive:
                        _release(g, t + t_.barrier_cycles, pc_stall)
                    continue
                elif k == END:
                    on_simd[s].remove(w)
                    g = w.group
                    g.alive -= 1
                    # The wave is done when its pipes drain and its memory operations complete.
                    done = max([t, *pipe_free[s]] + [dq[-1] for dq in w.cnt if dq])
                    end = max(end, done)
                    # A freed slot starts a waiting workgroup; several groups can finish before
                    # the next start, so only as many starts as workgroups are still waiting.
                    if g.alive == 0 and len(starts) < len(pending):
                        bisect.insort(starts, done + t_.workgroup_launch_cycles)
                    elif g.arrived and len(g.arrived) >= g.alive:
                        _release(g, t + t_.barrier_cycles, pc_stall)
                    continue
                w.i += 1
                w.ready = w.since = nxt
                if nxt == t + interval:
                    w.reason = "issue"
        # The next time anything can happen.
        cand = [w.ready for ws in on_simd for w in ws] + starts
        if not cand:
            break
        t_next = max(t + interval, min(cand))
        if t_next == INF:
            raise TimingError("timing model deadlock: every wave waits at a barrier")
        t_next = math.ceil(t_next / interval) * interval
        for s in range(simds):
            idle = t_next - t - (interval if did[s] else 0)
            if did[s]:
                slots["issued"] = slots.get("issued", 0.0) + interval
            if idle > 0:
                ws = on_simd[s]
                why = min(ws, key=lambda w: w.age).reason if ws else "no wave"
                slots[why] = slots.get(why, 0.0) + idle
        t = t_next
    res.cycles = end
    res.issued = {KIND_NAMES[k]: n for k, n in enumerate(issued_kind) if n}
    res.busy = busy_pipe
    res.slots = slots
    res.pc_issued, res.pc_stall = pc_issued, pc_stall
    return res


def _release(g: _Group, at: float, pc_stall: dict[int, float]) -> None:
    """Let a workgroup's waves past its barrier at `at`, charging each wave's wait to the barrier."""
    for w, pc, arrived in g.arrived:
        w.ready = w.since = at
        pc_stall[pc] = pc_stall.get(pc, 0.0) + at - arrived
    g.arrived = []


def _delay(w: _Wave, imm: int) -> None:
    """An s_delay_alu: instid0 delays the next instruction, instid1 the one `instskip` names (SAME,
    NEXT, SKIP_1..SKIP_4), until the named earlier result is ready."""
    skip = (imm >> 4) & 7
    nxt = w.i + 1
    for at, instid in ((nxt, imm & 0xF), (nxt + (skip if skip >= 1 else 0), (imm >> 7) & 0xF)):
        when = _dep(w, instid)
        if when is not None:
            w.delays.append((at, when))


def _dep(w: _Wave, instid: int) -> float | None:
    """When the result an s_delay_alu field names is ready (None: no dependency, or one too short
    for the model to hold: the SALU_CYCLE and FMA_ACCUM ones)."""
    if 1 <= instid <= 4:
        return w.valu[-instid] if len(w.valu) >= instid else None
    if 5 <= instid <= 7:
        n = instid - 4
        return w.trans[-n] if len(w.trans) >= n else None
    return None


