"""The emulator's timing model (issue 17): calibration against each arch's published matrix peak,
the pieces of the CU model on hand-made instruction streams, and the device and CLI around it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.emulator import timing as tm
from tiledsl.backends.rocm.emulator.memory import Region
from tiledsl.backends.rocm.emulator.trace import WaveTrace, WorkgroupTrace, _lds_cost, cache_lines, lds_cycles
from tiledsl.backends.rocm.runtime.device import DeviceError
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.backends.rocm.runtime.timing_model import (
    TimingOptions,
    dispatch,
    distinct_bytes,
    interpolate,
    mix_ceiling,
    most_loaded,
    pipe_shares,
    probe_costs,
    workgroup_costs,
)
from tiledsl.device_array import DeviceArray
from tiledsl.driver import compile_source
from tiledsl.launcher import launch

pytestmark = pytest.mark.emulator
KERNELS = Path(__file__).resolve().parent / "kernels"


def _matrix_loop(arch: str, groups_per_cu: int, execute: bool = False):
    src = KERNELS / "matrix_loop.tile"
    k = compile_source(src.read_text(), str(src), arch, {})
    a = get_arch(arch)
    dev = EmulatorDevice(arch, timing=TimingOptions(execute=execute, sample_cus=1))
    rng = np.random.default_rng(0)
    x, y = (DeviceArray.from_numpy(dev, rng.standard_normal((64, 64)).astype(np.float16)) for _ in range(2))
    out = DeviceArray.empty(dev, (a.compute_units * groups_per_cu, 64, 64), np.float32)
    launch(k, x, y, out, 128, device=dev)  # long enough that the prologue and the store are noise
    return dev, dev.last_stats["timing"]


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_a_full_matrix_loop_reaches_the_published_peak(arch: str) -> None:
    """Calibration: CUs full of MFMA/WMMA loops run at the arch's published dense f16 peak (the
    matrix cycles come from that peak; this checks the issue model loses no cycles on top)."""
    _dev, t = _matrix_loop(arch, 8)
    assert 0.97 <= t.peak_fraction <= 1.01, t.summary()
    assert t.pipes["matrix"] > 0.97
    assert t.bound == "compute units"
    # Its matrix pipe is never idle: the ceiling of its instruction mix is what it reaches.
    assert "matrix" in t.busiest_pipe
    assert t.ceiling_tflops == pytest.approx(t.matrix_tflops, rel=0.03)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_each_alu_kind_holds_one_simd_pipe(arch: str) -> None:
    """WMMA runs on RDNA's vector ALU and transcendentals on CDNA's; each kind holds one pipe."""
    a = get_arch(arch)
    pipes = tm.simd_pipes(a)
    assert sorted(k for kinds in pipes for k in kinds) == sorted([tm.VALU, tm.TRANS, tm.MATRIX])
    valu = next(kinds for kinds in pipes if tm.VALU in kinds)
    assert (tm.MATRIX in valu) == a.timing.matrix_shares_valu == (not a.is_cdna)
    assert (tm.TRANS in valu) == a.is_cdna
    shares = pipe_shares(a, {"valu": 0.2, "trans": 0.1, "matrix": 0.7, "lds": 0.3, "vmem": 0.1})
    rdna = not a.is_cdna
    assert shares["valu+matrix" if rdna else "matrix"] == pytest.approx(0.9 if rdna else 0.7)
    assert shares["trans" if rdna else "valu+trans"] == pytest.approx(0.1 if rdna else 0.3)
    assert shares["lds"] == 0.3


def test_the_mix_ceiling_is_the_busiest_pipe_or_the_memory_traffic() -> None:
    assert mix_ceiling(2e12, 0.5, 0.1) == pytest.approx(4.0)
    assert mix_ceiling(2e12, 0.5, 1.0) == pytest.approx(2.0)  # memory bound: its traffic takes longer
    assert mix_ceiling(2e12, 0.0, 0.0) == 0.0


@pytest.mark.parametrize(("arch", "name", "cycles"), [
    ("gfx90a", "v_mfma_f32_32x32x8f16", 64),  # 16 passes (CDNA2 ISA)
    ("gfx90a", "v_mfma_f32_16x16x16f16", 32),
    ("gfx942", "v_mfma_f32_32x32x8_f16", 32),  # 8 passes (CDNA3 ISA)
    ("gfx942", "v_mfma_f32_16x16x16_bf16", 16),
    ("gfx942", "v_mfma_f32_32x32x16_fp8_fp8", 32),  # double rate for 8-bit inputs
    ("gfx950", "v_mfma_f32_32x32x16_f16", 32),
    ("gfx950", "v_mfma_f32_32x32x64_f8f6f4", 64),
    ("gfx1100", "v_wmma_f32_16x16x16_f16", 32),
    ("gfx1201", "v_wmma_f32_16x16x16_bf16", 16),
    ("gfx1201", "v_wmma_f32_16x16x16_fp8_fp8", 8),
])
def test_matrix_cycles_follow_from_the_published_peak(arch: str, name: str, cycles: int) -> None:
    assert tm.matrix_cycles(get_arch(arch), name)[0] == cycles


def test_matrix_instructions_without_a_rate_are_refused() -> None:
    with pytest.raises(tm.TimingError, match="v_mfma_f32_32x32x2f32"):
        tm.matrix_cycles(get_arch("gfx942"), "v_mfma_f32_32x32x2f32")
    with pytest.raises(tm.TimingError, match="no 8-bit matrix rate"):
        tm.matrix_cycles(get_arch("gfx1100"), "v_wmma_i32_16x16x16_iu8")


def test_lds_cycles_count_bank_conflicts() -> None:
    lanes = np.arange(64)
    assert lds_cycles(lanes * 4, 4, 32) == 2  # consecutive dwords: two conflict-free groups of 32 lanes
    assert lds_cycles(np.zeros(64, np.int64), 4, 32) == 2  # one dword read by all: a broadcast
    assert lds_cycles(lanes * 128, 4, 32) == 64  # stride 32 dwords: every lane in bank 0
    assert lds_cycles(lanes * 8, 4, 32) == 4  # stride 2 dwords: two lanes per bank
    assert lds_cycles(lanes * 16, 16, 32) == 8  # 128-bit lanes: 8 per group, conflict-free
    assert lds_cycles(lanes * 4, 4, 64) == 1  # a 64-bank LDS (gfx950) serves a wave64 at once


def test_cache_lines_count_distinct_lines() -> None:
    a = np.arange(64, dtype=np.uint64) * 4
    assert cache_lines(a, 4, 128) == 2
    assert cache_lines(a * 32, 4, 128) == 64
    assert cache_lines(np.array([126], np.uint64), 4, 128) == 2  # straddles a line


def test_equal_workgroups_are_dealt_round_robin() -> None:
    per_cu, finish = dispatch([1.0] * 10, 4, 2)
    assert per_cu == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    assert finish == [2.0, 2.0, 1.0, 1.0]
    assert most_loaded(finish, 3) == [0, 1, 2]


def test_workgroups_go_to_the_slot_that_frees_first() -> None:
    """A causal grid's heavy blocks come last in x: with a fixed round-robin the CU that gets
    every head's heaviest block sets the time; handed out as slots free up, the light CUs take more."""
    per_cu, finish = dispatch([1.0, 4.0] * 4, 2, 1)  # 4 heads of 2 blocks on 2 CUs, one slot each
    assert per_cu == [[0, 2, 3, 6, 7], [1, 4, 5]]
    assert finish == [11.0, 9.0]  # round-robin: 4 and 16


def test_probes_follow_a_linear_cost_with_a_few_measurements() -> None:
    seen = []

    def linear(x: int) -> tuple[float, float]:
        seen.append(x)
        return 100.0 + 10.0 * x, 0.0

    xs, got = probe_costs(linear, 64, 32)
    assert len(seen) == 3 and xs[0] == 0 and xs[-1] == 63
    assert interpolate(xs, [g[0] for g in got], 64) == [100.0 + 10.0 * x for x in range(64)]
    step = {x: (500.0 if x >= 40 else 100.0, 0.0) for x in range(64)}
    xs, got = probe_costs(step.__getitem__, 64, 32)
    assert 39 in xs and 40 in xs  # refined down to the step
    xs, _ = probe_costs(step.__getitem__, 64, 4)
    assert len(xs) == 4  # the budget holds


def test_costs_follow_the_launch_order_where_x_does_not_decide_them() -> None:
    """16 query blocks of 8 heads, launch order x fastest. In x order (block x costs x + 1) the
    first row's probes decide every workgroup; handed out heaviest first (workgroup k takes block
    15 - k // 8, as fmha_fwd.tile's masked variants do), the later workgroups miss the first row's
    estimate and the costs are estimated along the launch order instead."""
    gx, count = 16, 16 * 8
    in_x = [float(k % gx + 1) for k in range(count)]
    heavy_first = [float(gx - k // 8) for k in range(count)]
    for truth in (in_x, heavy_first):
        seen = []

        def measure(k: int, truth=truth, seen=seen) -> tuple[float, float]:
            seen.append(k)
            return truth[k], 2.0 * truth[k]

        costs, flops = workgroup_costs(measure, gx, count, 32)
        if truth is in_x:
            assert costs == truth and flops == [2.0 * c for c in truth]
            assert len(seen) == 3 + 4  # the first row's probes (a linear cost), the checks
        else:  # 32 probes for 16 steps: interpolated within a block's cost (the first row's: off by 15)
            assert max(abs(c - t) for c, t in zip(costs, truth, strict=True)) < 1.0
            assert max(abs(f - 2.0 * t) for f, t in zip(flops, truth, strict=True)) < 2.0


# -- the CU model on hand-made instruction streams --------------------------------------------

def _program(kinds, busy=None, waits=None, counters=None, arg=None) -> tm.Program:
    n = len(kinds)
    return tm.Program(list(kinds), busy or [4 if k == tm.VALU else 0 for k in kinds], [0.0] * n,
                      waits or [()] * n, counters or [(tm.VM,) if k == tm.VLOAD else () for k in kinds],
                      arg or [0] * n, [tm.KIND_NAMES[k] for k in kinds])


def _run(prog: tm.Program, waves: int, costs=(), arch: str = "gfx942", groups: int = 1) -> tm.CuResult:
    traces = [WorkgroupTrace((g, 0, 0), [WaveTrace(i, list(range(len(prog.kind))), list(costs)) for i in range(waves)])
              for g in range(groups)]
    return tm.simulate_cu(get_arch(arch), prog, traces, groups_per_cu=groups)


def test_a_wait_holds_the_wave_until_its_load_returns() -> None:
    t = get_arch("gfx942").timing
    prog = _program([tm.VLOAD, tm.WAIT, tm.VALU, tm.END], waits=[(), ((tm.VM, 0),), (), ()])
    r = _run(prog, 1, costs=[2])
    assert r.cycles >= t.vmem_latency + 2 * t.vmem_line_bytes / t.vmem_bytes_per_clk
    assert r.slots["wait vmem"] > 0.9 * t.vmem_latency
    no_wait = _program([tm.VLOAD, tm.VALU, tm.END])
    assert not _run(no_wait, 1, costs=[2]).pc_stall.get(1)  # nothing waits for the load: the VALU goes on


def test_other_waves_hide_a_waves_memory_latency() -> None:
    """Two workgroups on the CU take much less than twice one: their waits overlap."""
    prog = _program([tm.VLOAD, tm.WAIT] + [tm.VALU] * 50 + [tm.END], waits=[(), ((tm.VM, 0),)] + [()] * 51)
    one = _run(prog, 4, costs=[1])
    two = _run(prog, 4, costs=[1], groups=2)
    assert two.cycles < 1.3 * one.cycles


def test_matrix_pipe_serialises_mfmas_and_s_nop_costs_issue_slots() -> None:
    t = get_arch("gfx942").timing
    mfma = tm.matrix_cycles(get_arch("gfx942"), "v_mfma_f32_32x32x8_f16")[0]
    prog = _program([tm.MATRIX] * 4 + [tm.END], busy=[mfma] * 4 + [0])
    assert _run(prog, 1).cycles == 4 * mfma  # back to back, and the wave ends when the pipe drains
    nops = _program([tm.NOP, tm.END], arg=[7, 0])
    assert _run(nops, 1).cycles == 8 * t.issue_interval


def test_a_barrier_waits_for_the_slowest_wave() -> None:
    t = get_arch("gfx942").timing
    prog = _program([tm.NOP, tm.BARRIER, tm.END], arg=[15, 0, 0])
    traces = [WorkgroupTrace((0, 0, 0), [WaveTrace(0, [1, 2], []), WaveTrace(1, [0, 1, 2], [])])]
    r = tm.simulate_cu(get_arch("gfx942"), prog, traces, groups_per_cu=1)
    assert r.cycles >= 16 * t.issue_interval + t.barrier_cycles
    assert r.pc_stall[1] >= 15 * t.issue_interval  # wave 0 waited at the barrier for wave 1's nops


def test_s_delay_alu_waits_for_the_named_result() -> None:
    t = get_arch("gfx1100").timing
    prog = _program([tm.TRANS, tm.DELAY, tm.VALU, tm.END], busy=[t.trans_cycles, 0, 1, 0], arg=[0, 5, 0, 0])
    r = _run(prog, 1, arch="gfx1100")  # instid0(TRANS32_DEP_1)
    assert r.cycles >= t.trans_cycles + t.trans_latency
    plain = _program([tm.TRANS, tm.VALU, tm.END], busy=[t.trans_cycles, 1, 0])
    assert _run(plain, 1, arch="gfx1100").cycles < r.cycles


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_dual_issue_pairs_hold_the_vector_alu(arch: str) -> None:
    """A VOPD word (decoded as "vopd", two VALU operations) takes one issue slot and one VALU cycle
    like any VALU instruction; it was once left a scalar instruction, free beside the WMMAs."""
    from _lanes import compile_lanes, decoded

    # Four independent multiplies, which LLVM pairs in dual-issue words.
    body = "\n".join(f"  %r{k} = fmul float %x{k}, %x{k + 4}" for k in range(4))
    _, hsaco = compile_lanes(arch, body, ["float"] * 8, ["float"] * 4)
    insts = decoded(hsaco, arch)
    pairs = [k for k, i in enumerate(insts) if i.fam == "VOPD"]
    assert pairs, [i.raw_name for i in insts]
    prog = tm.classify(get_arch(arch), insts)
    assert all(prog.kind[k] == tm.VALU and prog.busy[k] == get_arch(arch).timing.valu_cycles for k in pairs)
    # What-if analysis frees them by either operation's name, as .s text spells the pair.
    freed = tm.classify(get_arch(arch), insts, free=("v_dual_mul",))
    assert freed.freed == len(pairs) and all(freed.kind[k] == tm.FREE for k in pairs)


# -- the device and the CLI ------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_a_timing_device_computes_the_same_results(arch: str) -> None:
    from tiledsl.ops import fmha_fwd

    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 96, 2, 64)).astype(np.float16) for _ in range(3))
    plain = fmha_fwd(q, k, v, causal=True, device=EmulatorDevice(arch))
    dev = EmulatorDevice(arch, timing=True)
    timed = fmha_fwd(q, k, v, causal=True, device=dev)
    assert np.array_equal(plain, timed)
    t = dev.last_stats["timing"]
    assert t.seconds > 0 and t.sampled_workgroups >= 1 and t.hot
    assert dev.last_stats["path"] in ("lockstep", "ordinary")  # the launch itself ran in full


def test_a_timing_only_device_refuses_to_hand_out_results() -> None:
    dev, t = _matrix_loop("gfx942", 2)
    # the simulated CU's two workgroups (the first is x = 0) and x = 303, 607 probed for their cost
    assert t.sampled_workgroups == 4 and t.workgroups == 2 * get_arch("gfx942").compute_units
    buf = dev.alloc(16)
    with pytest.raises(DeviceError, match="models time only"):
        dev.copy_out(buf)


def test_timing_options_are_checked() -> None:
    with pytest.raises(ValueError, match="sample_cus"):
        TimingOptions(sample_cus=0)
    with pytest.raises(ValueError, match="probe_x"):
        TimingOptions(probe_x=True)
    with pytest.raises(DeviceError, match="timing"):
        EmulatorDevice("gfx942", timing="yes")  # type: ignore[arg-type]


def test_what_if_frees_alu_instructions_and_barriers_but_not_the_results() -> None:
    """A what-if analysis changes the modeled time only: the conversions and barriers it frees
    cost nothing, the outputs are the same bits, and the report says it is a what-if."""
    from tiledsl.backends.rocm.runtime.timing_model import format_timing
    from tiledsl.ops import fmha_fwd

    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 128, 2, 64)).astype(np.float16) for _ in range(3))
    runs = {}
    for name, opts in (("plain", TimingOptions(sample_cus=1)),
                       ("free", TimingOptions(sample_cus=1, free_instructions=("v_cvt_f16_f32", "v_pack_b32"),
                                              free_barriers=True))):
        dev = EmulatorDevice("gfx1201", timing=opts)
        runs[name] = fmha_fwd(q, k, v, device=dev), dev.last_stats["timing"]
    (plain, t0), (free, t1) = runs["plain"], runs["free"]
    assert np.array_equal(plain, free)
    # No barrier waits, the same instructions: still within the ceiling of the mix, which the
    # plain run is below.
    no_waits = EmulatorDevice("gfx1201", timing=TimingOptions(sample_cus=1, free_barriers=True))
    fmha_fwd(q, k, v, device=no_waits)
    t2 = no_waits.last_stats["timing"]
    assert t0.matrix_tflops < t2.matrix_tflops <= t0.ceiling_tflops * 1.001
    assert t0.busiest_pipe == "valu+matrix"
    assert t2.ceiling_tflops == pytest.approx(t0.ceiling_tflops, rel=0.02)
    assert t1.freed > 0 and t0.freed == 0 and not t0.what_if
    assert t1.seconds < t0.seconds
    assert any("s_barrier" in text for _pc, text, _n, _s in t0.hot)
    assert not any("s_barrier" in text for _pc, text, _n, _s in t1.hot)
    text = format_timing(t1)
    assert text.startswith("fmha_fwd on gfx1201: WHAT-IF, free v_cvt_f16_f32, v_pack_b32; barriers free (")
    assert "WHAT-IF" not in format_timing(t0)
    # Memory, wait and branch instructions order the trace: they cannot be freed.
    with pytest.raises(tm.TimingError, match="only vector, transcendental and scalar ALU"):
        fmha_fwd(q, k, v, device=EmulatorDevice("gfx1201", timing=TimingOptions(free_instructions=("s_wait",))))
    with pytest.raises(ValueError, match="free_instructions"):
        TimingOptions(free_instructions=("ds_load_b128",))
    with pytest.raises(ValueError, match="free_instructions"):
        TimingOptions(free_instructions="v_cvt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="free_barriers"):
        TimingOptions(free_barriers=1)  # type: ignore[arg-type]


def test_manifests_name_the_tensors_a_kernel_writes() -> None:
    src = KERNELS / "matrix_loop.tile"
    k = compile_source(src.read_text(), str(src), "gfx942", {})
    assert {t["name"]: t["written"] for t in k.manifest["tensors"]} == {"a": False, "b": False, "c": True}


def test_profile_cli_prints_a_model_and_refuses_bad_arguments() -> None:
    cmd = [sys.executable, "-m", "tiledsl", "profile", "fmha_fwd", "--arch", "gfx942", "--batch", "1",
           "--heads", "2", "--seqlen", "256", "--hdim", "64", "--causal", "--sample-cus", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "modeled" in r.stdout and "TFLOP/s" in r.stdout and "hottest instructions" in r.stdout
    bad = subprocess.run(cmd[:5] + ["--arch", "gfx000"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown arch 'gfx000'" in bad.stderr
    bad = subprocess.run(cmd + ["--seqlen", "x"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--seqlen" in bad.stderr
    bad = subprocess.run(cmd + ["--seqlen", "2147483647"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--seqlen and --heads: expected at most 131072" in bad.stderr
    bad = subprocess.run(cmd + ["--what-if-free", "ds_load"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--what-if-free: expected instruction name prefixes" in bad.stderr
    bad = subprocess.run(cmd + ["--what-if-free", "v_no_such_op"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "no instruction of fmha_fwd's kernels starts with v_no_such_op" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_profile_plots_a_roofline_and_a_timeline(tmp_path: Path, capsys) -> None:
    from tiledsl.cli import main

    args = ["profile", "fmha_fwd", "--arch", "gfx1100", "--batch", "1", "--heads", "2", "--seqlen", "128",
            "--hdim", "64", "--sample-cus", "1", "--plot", str(tmp_path)]
    assert main(args) == 0
    for name in ("roofline.png", "timeline.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert main([*args, "--json"]) == 0  # stdout is the JSON alone; the files are named on stderr
    out, err = capsys.readouterr()
    assert json.loads(out)["tflops"] > 0 and "wrote " in err


def test_profile_plot_refuses_before_the_run(tmp_path: Path, capsys, monkeypatch) -> None:
    """An unwritable --plot directory, or no matplotlib, is a usage error before the model runs
    (it takes minutes at the default shape)."""
    from tiledsl import profile
    from tiledsl.cli import main

    def no_run(*args, **kwargs):
        raise AssertionError("the model ran")

    monkeypatch.setattr(profile, "run_profile", no_run)
    args = ["profile", "fmha_fwd", "--arch", "gfx942", "--plot"]
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root writes anywhere: make the check see what another user would
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode))
    assert main([*args, str(locked)]) == 2
    assert f"--plot {locked}: the directory is not writable" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    assert main([*args, str(tmp_path / "pictures")]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_profile_models_every_stage_of_the_backward_plan() -> None:
    from tiledsl.profile import run_profile, useful_flops

    r = run_profile("fmha_bwd", get_arch("gfx1201"), batch=1, hq=2, hk=1, sq=128, sk=128, hdim=64, causal=True,
                    sample_cus=1)
    names = [t.kernel for t in r["launches"]]
    assert names == ["fmha_bwd_dot_do_o", "fmha_bwd_dq_dk_dv", "fmha_bwd_convert_dq"]
    assert all(t.seconds > 0 for t in r["launches"]) and r["seconds"] == sum(t.seconds for t in r["launches"])
    assert r["flops"] == useful_flops("fmha_bwd", 1, 2, 128, 128, 64, True) == 5 * 2.0 * 2 * (128 * 129 // 2) * 64
    assert r["launches"][1].matrix_flops > 0 and r["launches"][0].matrix_flops == 0


def test_compulsory_traffic_moves_a_shared_buffer_once() -> None:
    """A buffer passed as two arguments (the backward's workspace as i32 and f32 words) or views
    that overlap count once towards a launch's compulsory memory traffic."""
    regions = [Region("ws_i", 0x1000, 4096), Region("ws_f", 0x1000, 4096), Region("dq", 0x3000, 100),
               Region("part", 0x1800, 0x1000)]  # 0x1800..0x2800: half inside the workspace
    assert distinct_bytes(regions) == 4096 + 100 + 0x800
    assert distinct_bytes([]) == 0


def test_slots_freed_together_start_only_the_waiting_workgroups() -> None:
    """Two resident workgroups finish at once with one still waiting: one start, not two (the
    second one popped an empty queue)."""
    prog = _program([tm.VALU] * 4 + [tm.END])
    traces = [WorkgroupTrace((g, 0, 0), [WaveTrace(0, list(range(5)), [])]) for g in range(3)]
    r = tm.simulate_cu(get_arch("gfx942"), prog, traces, groups_per_cu=2)
    one = tm.simulate_cu(get_arch("gfx942"), prog, traces[:1], groups_per_cu=2)
    launch = get_arch("gfx942").timing.workgroup_launch_cycles
    assert one.cycles < r.cycles <= 2 * one.cycles + launch  # the third ran once, after the first two


@pytest.mark.parametrize("name", ["ds_read_b64_tr_b16", "ds_read_b64_tr_b8", "ds_read_b64"])
def test_transpose_reads_are_priced_by_their_addresses(name: str) -> None:
    """gfx950's transpose reads fetch each lane's 8 bytes like ds_read_b64 (then exchange them
    between lanes): lanes 256 bytes apart meet in the same banks of a 64-bank LDS, which the
    model counts; unpriced, they cost a pass per 64 lanes whatever their addresses."""
    inst = SimpleNamespace(name=name, f={"addr": 0, "offset0": 0, "offset1": 0})
    lanes = np.arange(64)
    wave = SimpleNamespace(v=np.stack([lanes * 256]).astype(np.uint32), lanes=lanes)
    cost = _lds_cost(inst, 64)
    assert cost is not None
    assert cost(wave) == lds_cycles(lanes * 256, 8, 64) == 64  # every lane in banks 0 and 1
    wave.v[0] = lanes * 8
    assert cost(wave) == 2  # consecutive: two conflict-free groups of 32 lanes
