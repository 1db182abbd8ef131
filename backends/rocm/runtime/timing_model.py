"""Modeled time of one launch: sampled workgroups traced on the emulator, replayed on the CU model.

Each workgroup's cost is estimated first: a workgroup at a few x indices (`probe_costs`) runs
alone on the CU model, the x in between are interpolated, and a few later workgroups check that
x decides the cost; where it does not, the estimate runs along the launch order instead
(`workgroup_costs`). Workgroups then go to the arch's compute
units as the hardware's dispatcher hands them out: in launch order (x fastest), the first round-robin
up to the kernel's occupancy, each later one to the slot that frees first (`dispatch`). The CUs that
finish last by that estimate (`TimingOptions.sample_cus`) are simulated with all the workgroups they
got; the launch takes as long as the slowest of them, or as long as its compulsory memory traffic
(every tensor argument moved once, a buffer passed twice once) takes at the arch's memory
bandwidth, whichever is longer.
docs/profile.md describes the model and its limits: it ranks kernels and finds their bottlenecks,
it does not predict clocks.
"""

from __future__ import annotations

import functools
import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tiledsl.backends.rocm.arch import Arch
from tiledsl.backends.rocm.emulator.executor import BoundKernel, run_workgroup
from tiledsl.backends.rocm.emulator.memory import Heap, Region, Regions
from tiledsl.backends.rocm.emulator.timing import KIND_NAMES, CuResult, TimingError, classify, simd_pipes, simulate_cu
from tiledsl.backends.rocm.emulator.trace import Tracer, WorkgroupTrace
from tiledsl.backends.rocm.runtime.device import launch_dims


@dataclass(frozen=True)
class TimingOptions:
    """How `EmulatorDevice(arch, timing=...)` models launches.

    sample_cus: CUs simulated per launch (each with every workgroup it gets).
    probe_x: at most this many x indices have a workgroup traced to estimate the others' cost
        (which decides which CU gets which workgroup; see `probe_costs`).
    execute: False runs only the sampled workgroups, for profiling full-size launches quickly:
        the launch's results are then not computed, and the device refuses to copy memory out.
    timeline: keep the first simulated workgroup's instructions by pipe (for `tiledsl profile --plot`).
    free_instructions, free_barriers: what-if analysis, a bound on what removing work would gain.
        The ALU instructions whose names start with one of these prefixes (such as "v_cvt_f16_f32")
        cost no issue slot and no pipe time, and with free_barriers no wave waits at a barrier. The
        trace is unchanged (results stay right); only the modeled time answers "what if"."""

    sample_cus: int = 4
    probe_x: int = 32
    execute: bool = True
    timeline: bool = False
    free_instructions: tuple[str, ...] = ()
    free_barriers: bool = False

    def __post_init__(self) -> None:
        for name in ("sample_cus", "probe_x"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")
        free = self.free_instructions
        if not isinstance(free, tuple) or not all(isinstance(x, str) and x.startswith(("v_", "s_")) for x in free):
            raise ValueError("free_instructions: expected a tuple of instruction name prefixes such as "
                             f"('v_cvt_f16_f32',), got {free!r}")
        if not isinstance(self.free_barriers, bool):
            raise ValueError(f"free_barriers: expected a bool, got {self.free_barriers!r}")

    def what_if(self) -> str:
        """The what-if analysis these options ask for, in words ("" for none)."""
        parts = [f"free {', '.join(self.free_instructions)}"] if self.free_instructions else []
        return "; ".join(parts + (["barriers free"] if self.free_barriers else []))


@dataclass
class LaunchTiming:
    """The model's figures for one launch."""

    kernel: str
    arch: str
    seconds: float  # modeled time of the launch
    cu_seconds: float  # the slowest simulated CU
    dram_seconds: float  # the compulsory memory traffic at the arch's bandwidth
    bound: str  # "compute units" or "memory bandwidth"
    workgroups: int
    cus_used: int
    sampled_cus: tuple[int, ...]
    sampled_workgroups: int
    waves_per_simd: int  # occupancy
    groups_per_cu: int
    matrix_flops: float  # the launch's (sampled figure scaled to every workgroup)
    matrix_tflops: float
    peak_fraction: float  # of the dense f16 matrix peak of the CUs the launch may use
    dram_bytes: int
    pipes: dict[str, float]  # busy fraction of each pipe on the slowest simulated CU
    slots: dict[str, float]  # fraction of that CU's SIMD-cycles by what the SIMD did or waited for
    hot: list[tuple[int, str, int, float]]  # (instruction index, text, issues, wave-cycles stalled before it)
    # The busiest pipe of the slowest CU ("valu+matrix" for RDNA's vector ALU with its WMMAs) and
    # the matrix TFLOP/s this instruction mix would reach were that pipe never idle (`mix_ceiling`).
    busiest_pipe: str = ""
    ceiling_tflops: float = 0.0
    timeline: list[tuple[int, str, float, float]] = field(default_factory=list)
    model_seconds: float = 0.0  # host time the model took
    what_if: str = ""  # the what-if analysis modeled (TimingOptions.what_if), with the instructions freed
    freed: int = 0  # instructions of the kernel the what-if analysis made free

    def summary(self) -> str:
        return (f"{self.kernel}: {self.seconds * 1e6:.1f} us modeled ({self.bound}), "
                f"{self.matrix_tflops:.1f} matrix TFLOP/s = {100 * self.peak_fraction:.1f}% of peak, "
                f"{self.waves_per_simd} waves/SIMD")


def probe_costs(measure: Callable[[int], tuple], grid_x: int, budget: int,
                tolerance: float = 0.02) -> tuple[list[int], list[tuple]]:
    """The x indices measured to estimate every workgroup's cost, and what `measure(x)` returned
    for them (its first item the cost). The first and last x are measured, then the middle of an
    interval, and the middles of its halves if the interpolation between the interval's ends missed
    it by more than `tolerance` of the largest cost, at most `budget` in all: a cost linear in x (a
    causal mask's blocks) or constant takes three measurements."""
    got = {x: measure(x) for x in {0, grid_x - 1}}
    todo = [(0, grid_x - 1)]
    while todo and len(got) < budget:
        a, b = todo.pop(0)
        if b - a < 2:
            continue
        m = (a + b) // 2
        got[m] = measure(m)
        top = max(v[0] for v in got.values()) or 1.0
        guess = got[a][0] + (got[b][0] - got[a][0]) * (m - a) / (b - a)
        if abs(got[m][0] - guess) > tolerance * top:
            todo += [(a, m), (m, b)]
    xs = sorted(got)
    return xs, [got[x] for x in xs]


def interpolate(xs: list[int], values: list[float], grid_x: int) -> list[float]:
    """`values` measured at the sorted indices `xs`, linearly interpolated for every x < grid_x."""
    return [float(v) for v in np.interp(np.arange(grid_x), xs, values)]


def workgroup_costs(measure: Callable[[int], tuple], grid_x: int, count: int, budget: int,
                    tolerance: float = 0.02, checks: int = 4) -> tuple[list[float], list[float]]:
    """Each workgroup's estimated cost and matrix flops, in launch order (x fastest), from
    `measure(k)` of a few workgroups k run alone. First by x, as `probe_costs` along the first row
    (y = z = 0; where attention's work varies: query or key blocks under a causal mask), then
    checked on `checks` workgroups spread over the later rows. A kernel whose work varies with
    more than x (one that hands its blocks out in another order, or sequences of unequal length)
    misses that check by more than `tolerance` of the largest cost: its costs are then estimated
    along the launch order itself, where they step with the blocks it hands out."""
    xs, got = probe_costs(measure, grid_x, budget, tolerance)
    by_x = [interpolate(xs, [m[i] for m in got], grid_x) for i in (0, 1)]
    costs = [by_x[0][k % grid_x] for k in range(count)]
    if count > grid_x:
        top = max(m[0] for m in got) or 1.0
        later = sorted({grid_x + (count - 1 - grid_x) * i // max(1, checks - 1) for i in range(checks)})
        if any(abs(measure(k)[0] - costs[k]) > tolerance * top for k in later):
            ks, got = probe_costs(measure, count, budget, tolerance)
            return interpolate(ks, [m[0] for m in got], count), interpolate(ks, [m[1] for m in got], count)
    return costs, [by_x[1][k % grid_x] for k in range(count)]


def dispatch(costs: list[float], cus: int, slots_per_cu: int) -> tuple[list[list[int]], list[float]]:
    """Which workgroups each CU runs, in start order, and when each CU finishes, if workgroup k
    takes `costs[k]` and the dispatcher hands workgroups out in launch order: the first `cus x
    slots_per_cu` round-robin over the CUs, then each to the slot that frees first (ties to the
    lower CU, so that equal costs give workgroup k to CU k % cus). A slot's workgroups run one
    after another, each as long as its cost: the CU's other slots are not modeled here (the CU
    model does that for the sampled CUs); this only decides who goes where."""
    per_cu: list[list[int]] = [[] for _ in range(cus)]
    finish = [0.0] * cus
    free: list[tuple[float, int, int]] = []  # (time a slot frees, its rank, its CU)
    for k, cost in enumerate(costs):
        if k < cus * slots_per_cu:
            at, rank, cu = 0.0, k, k % cus
        else:
            at, rank, cu = heapq.heappop(free)
        per_cu[cu].append(k)
        finish[cu] = max(finish[cu], at + cost)
        heapq.heappush(free, (at + cost, rank, cu))
    return per_cu, finish


def most_loaded(finish: list[float], n: int) -> list[int]:
    """The `n` CUs that finish last (ties: the lower CU), in CU order: the launch takes as long
    as its slowest CU."""
    return sorted(sorted(range(len(finish)), key=lambda c: (-finish[c], c))[:n])


def model_launch(bk: BoundKernel, meta: dict, heap: Heap, grid, block, dynamic_lds: int, karg: int, packet: int,
                 mem: Regions, options: TimingOptions) -> LaunchTiming:
    """Model one launch whose kernargs and dispatch packet are at `karg`/`packet` in `heap`
    (runtime.emulator_device.write_launch); the traced workgroups run on `heap`."""
    t_start = time.perf_counter()
    arch: Arch = bk.image.arch
    tp = arch.timing
    if tp is None:
        raise TimingError(f"{arch.name} has no timing parameters")
    g, b = launch_dims(grid, block)
    order = [(x, y, z) for z in range(g[2]) for y in range(g[1]) for x in range(g[0])]
    W = bk.image.wave_size
    waves_per_group = -(-(b[0] * b[1] * b[2]) // W)
    vgprs = int(meta.get(".vgpr_count", 0)) or bk.nvgpr
    lds = bk.image.lds_bytes + dynamic_lds
    occupancy = arch.occupancy(vgprs, lds, waves_per_group)
    if occupancy < 1:
        raise TimingError(f"kernel '{bk.image.name}' fits no SIMD ({vgprs} VGPRs, {lds} bytes of LDS)")
    groups_per_cu = arch.workgroups_per_cu(vgprs, lds, waves_per_group)
    cus = arch.compute_units
    prog = classify(arch, bk.image.insts, options.free_instructions, options.free_barriers)
    what_if = options.what_if()
    if options.free_instructions:
        what_if += f" ({prog.freed} of the kernel's {len(prog.kind)} instructions freed)"
    tracer = Tracer(bk, tp.lds_bytes_per_clk // 4, tp.vmem_line_bytes)
    traces: dict[tuple[int, int, int], WorkgroupTrace] = {}

    def trace(wg: tuple[int, int, int]) -> WorkgroupTrace:
        if wg not in traces:
            run_workgroup(tracer.kernel, heap, wg, g, b, karg, packet, dynamic_lds, None, mem)
            traces[wg] = tracer.take(wg)
        return traces[wg]

    # Each workgroup's cost (which decides who goes where), from a few workgroups run alone on
    # the CU model (workgroup_costs).
    @functools.cache
    def alone(k: int) -> tuple[float, float]:
        r = simulate_cu(arch, prog, [trace(order[k])], 1)
        return r.cycles, r.matrix_flops

    costs, flops_wg = workgroup_costs(alone, g[0], len(order), options.probe_x)
    per_cu, finish = dispatch(costs, cus, groups_per_cu)
    chosen = most_loaded(finish, options.sample_cus)
    results: list[tuple[int, CuResult]] = []
    for n, c in enumerate(chosen):
        cu_traces = [trace(order[k]) for k in per_cu[c]]
        results.append((c, simulate_cu(arch, prog, cu_traces, groups_per_cu,
                                       timeline=options.timeline and n == 0)))
    slowest = max(results, key=lambda r: r[1].cycles)[1]
    cu_seconds = slowest.cycles / (tp.clock_ghz * 1e9)
    dram_bytes = distinct_bytes(mem.regions)  # each pointer argument's extent, moved once
    dram_seconds = dram_bytes / (tp.hbm_tb_s * 1e12 / tp.dies)
    seconds = max(cu_seconds, dram_seconds)
    flops = sum(flops_wg)
    peak = arch.peak_tflops_f16 * 1e12 / tp.dies
    cus_used = min(len(order), cus)
    sim_cycles = slowest.cycles * arch.simds_per_cu
    pipes = {k: (v / sim_cycles if k in ("valu", "trans", "matrix") else v / max(slowest.cycles, 1))
             for k, v in slowest.busy.items()} if sim_cycles else {}
    slots = {k: v / sim_cycles for k, v in sorted(slowest.slots.items(), key=lambda kv: -kv[1])} if sim_cycles else {}
    busiest_pipe, busiest = max(pipe_shares(arch, pipes).items(), key=lambda kv: kv[1], default=("", 0.0))
    hot = sorted(((pc, prog.text[pc], slowest.pc_issued.get(pc, 0), slowest.pc_stall.get(pc, 0.0))
                  for pc in set(slowest.pc_issued) | set(slowest.pc_stall)), key=lambda h: -h[3])[:12]
    timeline = next((r.timeline for _, r in results if r.timeline), [])
    return LaunchTiming(
        kernel=bk.image.name, arch=arch.name, seconds=seconds, cu_seconds=cu_seconds, dram_seconds=dram_seconds,
        bound="compute units" if cu_seconds >= dram_seconds else "memory bandwidth", workgroups=len(order),
        cus_used=cus_used, sampled_cus=tuple(chosen), sampled_workgroups=len(traces), waves_per_simd=occupancy,
        groups_per_cu=groups_per_cu, matrix_flops=flops, matrix_tflops=flops / seconds / 1e12 if seconds else 0.0,
        peak_fraction=flops / seconds / peak if seconds else 0.0, dram_bytes=dram_bytes, pipes=pipes, slots=slots,
        hot=hot, busiest_pipe=busiest_pipe, ceiling_tflops=mix_ceiling(flops, cu_seconds * busiest, dram_seconds),
        timeline=timeline, model_seconds=time.perf_counter() - t_start, what_if=what_if,
        freed=prog.freed)


def pipe_shares(arch: Arch, pipes: dict[str, float]) -> dict[str, float]:
    """Busy shares by physical pipe: the SIMD's (named by the instruction kinds that share one,
    `simd_pipes`: "valu+matrix" on RDNA, "valu+trans" on CDNA) and the CU's LDS and memory."""
    shares = {"+".join(KIND_NAMES[k] for k in kinds): sum(pipes.get(KIND_NAMES[k], 0.0) for k in kinds)
              for kinds in simd_pipes(arch) if kinds}
    return shares | {k: pipes[k] for k in ("lds", "vmem") if k in pipes}


def mix_ceiling(flops: float, busiest_seconds: float, dram_seconds: float) -> float:
    """Matrix TFLOP/s at the bound of an instruction mix: no launch with this work per CU finishes
    before its busiest pipe has done that work, nor before its compulsory memory traffic has moved.
    What scheduling, latency hiding and barriers could win at most; past it only less work helps."""
    seconds = max(busiest_seconds, dram_seconds)
    return flops / seconds / 1e12 if seconds > 0 else 0.0


def format_timing(t: LaunchTiming) -> str:
    """A launch's figures as the text `tiledsl profile` prints."""
    lines = [f"{t.kernel} on {t.arch}: WHAT-IF, {t.what_if}: not the kernel's time, a bound on what removing "
             "that work would gain"] if t.what_if else []
    lines += [f"{t.kernel} on {t.arch}: {t.seconds * 1e6:.2f} us modeled, bound by {t.bound} "
              f"(CUs {t.cu_seconds * 1e6:.2f} us, compulsory memory traffic {t.dram_bytes / 1e6:.2f} MB = "
              f"{t.dram_seconds * 1e6:.2f} us)",
              f"  matrix {t.matrix_tflops:.1f} TFLOP/s = {100 * t.peak_fraction:.1f}% of peak; occupancy "
              f"{t.waves_per_simd} waves/SIMD, {t.groups_per_cu} workgroups/CU; {t.workgroups} workgroups on "
              f"{t.cus_used} CUs, {len(t.sampled_cus)} CUs simulated ({t.sampled_workgroups} workgroups)",
              "  pipes busy (slowest simulated CU): " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in t.pipes.items()),
              f"  ceiling of this instruction mix: {t.ceiling_tflops:.1f} TFLOP/s with its busiest pipe "
              f"({t.busiest_pipe}) never idle",
              "  SIMD cycles: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in t.slots.items()),
              "  hottest instructions (wave-cycles stalled before issue, issues):"]
    for pc, text, n, stall in t.hot[:8]:
        lines.append(f"    #{pc:<5} {text:<34} stalled {stall:>10.0f}  issued {n}")
    return "\n".join(lines)


def distinct_bytes(regions: Sequence[Region]) -> int:
    """The bytes the regions span together: a buffer passed as two arguments (the backward's
    workspace, read as i32 and as f32 words) or views that overlap are moved once."""
    total, end = 0, 0
    for r in sorted(regions, key=lambda r: r.addr):
        lo, hi = max(r.addr, end), r.addr + r.size
        if hi > lo:
            total += hi - lo
        end = max(end, hi)
    return total
