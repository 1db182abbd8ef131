"""Modeled time of one launch: sampled workgroups traced on the emulator, replayed on the CU model.

Workgroups go to the arch's compute units round-robin in launch order (x fastest), up to the
kernel's occupancy resident per CU. A few CUs are simulated with all the workgroups they get (the
most loaded ones, spanning the grid's x index: `TimingOptions.sample_cus`, see `sample_cus`); the
launch takes as long as the slowest simulated CU, or as long as its compulsory memory traffic
(every tensor argument moved once) takes at the arch's memory bandwidth, whichever is longer.
docs/profile.md describes the model and its limits: it ranks kernels and finds their bottlenecks,
it does not predict clocks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tiledsl.backends.rocm.arch import Arch
from tiledsl.backends.rocm.emulator.executor import BoundKernel, run_workgroup
from tiledsl.backends.rocm.emulator.memory import Heap, Regions
from tiledsl.backends.rocm.emulator.timing import CuResult, TimingError, classify, simulate_cu
from tiledsl.backends.rocm.emulator.trace import Tracer
from tiledsl.backends.rocm.runtime.device import launch_dims


@dataclass(frozen=True)
class TimingOptions:
    """How `EmulatorDevice(arch, timing=...)` models launches.

    sample_cus: CUs simulated per launch (each with every workgroup it gets).
    execute: False runs only the sampled workgroups, for profiling full-size launches quickly:
        the launch's results are then not computed, and the device refuses to copy memory out.
    timeline: keep the first simulated workgroup's instructions by pipe (for `tiledsl profile --plot`)."""

    sample_cus: int = 4
    execute: bool = True
    timeline: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.sample_cus, int) or self.sample_cus < 1:
            raise ValueError(f"sample_cus: expected a positive int, got {self.sample_cus!r}")


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
    timeline: list[tuple[int, str, float, float]] = field(default_factory=list)
    model_seconds: float = 0.0  # host time the model took

    def summary(self) -> str:
        return (f"{self.kernel}: {self.seconds * 1e6:.1f} us modeled ({self.bound}), "
                f"{self.matrix_tflops:.1f} matrix TFLOP/s = {100 * self.peak_fraction:.1f}% of peak, "
                f"{self.waves_per_simd} waves/SIMD")


def sample_cus(workgroups: int, cus: int, n: int, grid_x: int | None = None) -> list[int]:
    """The CUs to simulate: `n` among those that get the most workgroups, spanning the grid's x
    index (workgroup k goes to CU k % cus, so CU c < grid_x first gets x = c): the x index is where
    a kernel's work per workgroup varies most (attention's query or key blocks under a causal
    mask), so the lightest and the heaviest x are both simulated."""
    loaded = workgroups % cus if workgroups % cus else min(workgroups, cus)
    span = min(grid_x or loaded, loaded)
    n = min(n, loaded)
    if n <= 1:
        return [span - 1]
    chosen = {round(i * (span - 1) / (n - 1)) for i in range(n)}
    extra = (c for c in range(loaded) if c not in chosen)
    while len(chosen) < n:  # x spans fewer CUs than asked for: spread the rest over the loaded ones
        chosen.add(next(extra))
    return sorted(chosen)


def model_launch(bk: BoundKernel, meta: dict, heap: Heap, grid, block, dynamic_lds: int, karg: int, packet: int,
                 mem: Regions, options: TimingOptions) -> LaunchTiming:
    """Model one launch whose kernargs and dispatch packet are at `karg`/`packet` in `heap`
    (runtime.emulator_device.write_launch); the sampled workgroups run on `heap`."""
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
    chosen = sample_cus(len(order), cus, options.sample_cus, g[0])
    prog = classify(arch, bk.image.insts)
    tracer = Tracer(bk, tp.lds_bytes_per_clk // 4, tp.vmem_line_bytes)
    results: list[tuple[int, CuResult]] = []
    sampled = 0
    for n, c in enumerate(chosen):
        traces = []
        for wg in order[c::cus]:
            run_workgroup(tracer.kernel, heap, wg, g, b, karg, packet, dynamic_lds, None, mem)
            traces.append(tracer.take(wg))
        sampled += len(traces)
        results.append((c, simulate_cu(arch, prog, traces, groups_per_cu, timeline=options.timeline and n == 0)))
    slowest = max(results, key=lambda r: r[1].cycles)[1]
    cu_seconds = slowest.cycles / (tp.clock_ghz * 1e9)
    dram_bytes = sum(r.size for r in mem.regions)  # each pointer argument's extent, moved once
    dram_seconds = dram_bytes / (tp.hbm_tb_s * 1e12 / tp.dies)
    seconds = max(cu_seconds, dram_seconds)
    flops = sum(r.matrix_flops for _, r in results) / max(sampled, 1) * len(order)
    peak = arch.peak_tflops_f16 * 1e12 / tp.dies
    cus_used = min(len(order), cus)
    sim_cycles = slowest.cycles * arch.simds_per_cu
    pipes = {k: (v / sim_cycles if k in ("valu", "trans", "matrix") else v / max(slowest.cycles, 1))
             for k, v in slowest.busy.items()} if sim_cycles else {}
    slots = {k: v / sim_cycles for k, v in sorted(slowest.slots.items(), key=lambda kv: -kv[1])} if sim_cycles else {}
    hot = sorted(((pc, prog.text[pc], slowest.pc_issued.get(pc, 0), slowest.pc_stall.get(pc, 0.0))
                  for pc in set(slowest.pc_issued) | set(slowest.pc_stall)), key=lambda h: -h[3])[:12]
    timeline = next((r.timeline for _, r in results if r.timeline), [])
    return LaunchTiming(
        kernel=bk.image.name, arch=arch.name, seconds=seconds, cu_seconds=cu_seconds, dram_seconds=dram_seconds,
        bound="compute units" if cu_seconds >= dram_seconds else "memory bandwidth", workgroups=len(order),
        cus_used=cus_used, sampled_cus=tuple(chosen), sampled_workgroups=sampled, waves_per_simd=occupancy,
        groups_per_cu=groups_per_cu, matrix_flops=flops, matrix_tflops=flops / seconds / 1e12 if seconds else 0.0,
        peak_fraction=flops / seconds / peak if seconds else 0.0, dram_bytes=dram_bytes, pipes=pipes, slots=slots,
        hot=hot, timeline=timeline, model_seconds=time.perf_counter() - t_start)


def format_timing(t: LaunchTiming) -> str:
    """A launch's figures as the text `tiledsl profile` prints."""
    lines = [f"{t.kernel} on {t.arch}: {t.seconds * 1e6:.2f} us modeled, bound by {t.bound} "
             f"(CUs {t.cu_seconds * 1e6:.2f} us, compulsory memory traffic {t.dram_bytes / 1e6:.2f} MB = "
             f"{t.dram_seconds * 1e6:.2f} us)",
             f"  matrix {t.matrix_tflops:.1f} TFLOP/s = {100 * t.peak_fraction:.1f}% of peak; occupancy "
             f"{t.waves_per_simd} waves/SIMD, {t.groups_per_cu} workgroups/CU; {t.workgroups} workgroups on "
             f"{t.cus_used} CUs, {len(t.sampled_cus)} CUs simulated ({t.sampled_workgroups} workgroups)",
             "  pipes busy (slowest simulated CU): " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in t.pipes.items()),
             "  SIMD cycles: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in t.slots.items()),
             "  hottest instructions (wave-cycles stalled before issue, issues):"]
    for pc, text, n, stall in t.hot[:8]:
        lines.append(f"    #{pc:<5} {text:<34} stalled {stall:>10.0f}  issued {n}")
    return "\n".join(lines)
