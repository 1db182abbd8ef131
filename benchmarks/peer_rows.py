"""What the FMHA benchmarks share: a Triton kernel's static figures from its assembly and
metadata, and the table row both kernels print."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tiledsl.backends.rocm.arch import Arch
from tiledsl.isa_stats import count_instructions

HEADER = (f"{'who':7} {'cold s':>7} {'instr':>6} {'MMA':>5} {'instr/MMA':>8} {'VGPR':>5} {'AGPR':>5} "
          f"{'LDS':>6} {'spills':>6} {'occ':>4}")


def triton_stats(asm: str, metadata: dict, seconds: float, kernel: str, arch: Arch, warps: int) -> dict:
    """Instructions, MFMA/WMMA, registers (VGPR, AGPR, SGPR), LDS, spills (VGPR and SGPR) and
    occupancy of a Triton kernel. Triton allocates its LDS at launch: the size is in its metadata,
    not the code object."""
    counts = count_instructions(asm, kernel)

    def meta(key: str) -> int:
        m = re.search(rf"^\s*\.{key}:\s*(\d+)", asm, re.M)
        return int(m.group(1)) if m else 0

    vgpr, agpr, lds = meta("vgpr_count"), meta("agpr_count"), int(metadata.get("shared", 0))
    return {"compile": seconds, "instr": counts.total, "mma": counts.mfma + counts.wmma, "vgpr": vgpr,
            "agpr": agpr, "sgpr": meta("sgpr_count"), "lds": lds,
            "spills": meta("vgpr_spill_count") + meta("sgpr_spill_count"), "occ": arch.occupancy(vgpr, lds, warps)}


def format_row(who: str, r: dict | None, tail: str = "") -> str:
    """One kernel's figures under HEADER, then `tail` (the benchmark's own columns)."""
    if r is None:
        return f"{who:7} (triton not installed: pip install triton)"
    if "error" in r:
        return f"{who:7} failed: {r['error']}"
    per = r["instr"] / r["mma"] if r["mma"] else float("nan")
    return (f"{who:7} {r['compile']:7.2f} {r['instr']:6d} {r['mma']:5d} {per:8.1f} {r['vgpr']:5d} {r['agpr']:5d} "
            f"{r['lds']:6d} {r['spills']:6d} {r['occ']:4d} {tail}")


def format_result(who: str, r: dict | None, lead: str = "") -> str:
    """A row of one kernel's results (or its skip reason or error): `lead` comes before the
    executed count, then the tiles and any note."""
    if r is not None and "skip" in r:
        return f"{who:7} {r['skip']}"
    if r is None or "error" in r:
        return format_row(who, r)
    dyn = f"{r['dyn']:9.1f}" if r["dyn"] is not None else f"{'-':>9}"
    note = f"  ({r['note']})" if "note" in r else ""
    return format_row(who, r, f"{lead}{dyn}  {r['tiles']}{note}")


# The modeled problem: enough workgroups to fill every arch's CUs (the timing model's figures for a
# launch of a few workgroups would measure one workgroup's latency, not the GPU's throughput).
MODEL_B, MODEL_S, MODEL_H = 2, 2048, 16


def model_tflops(arch: Arch, flops: float, run) -> float | str:
    """Modeled TFLOP/s of `run(dev)` (`model_with_ceiling`), or a string that says why there is none."""
    return model_with_ceiling(arch, flops, run)[0]


def fastest(timed: dict[Any, Any], figure: Callable[[Any], float | str] = lambda t: t) -> Any:
    """The key of `timed` (config -> modeled result, non-empty) whose figure (TFLOP/s, or a string
    that says why there is none) is highest: an autotuner's pick; the first key when none has one."""
    modeled = [key for key, t in timed.items() if isinstance(figure(t), float)]
    return max(modeled, key=lambda key: figure(timed[key])) if modeled else next(iter(timed))


def model_with_ceiling(arch: Arch, flops: float, run) -> tuple[float | str, float | str]:
    """Modeled TFLOP/s of `run(dev)`, which launches a kernel (or a plan) on `dev`: an emulator
    device in timing-only mode (runtime.timing_model.TimingOptions(execute=False)), so only the
    sampled workgroups run, and the ceiling of its instruction mix (each launch's busiest pipe
    never idle: LaunchTiming.ceiling_tflops). Reading results back is refused there; a peer's run
    helper that ends by reading its output stops at that refusal, after its launches were modeled.
    A string says why there is no figure."""
    from tiledsl.backends.rocm.runtime.device import DeviceError
    from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
    from tiledsl.backends.rocm.runtime.timing_model import TimingOptions

    dev = EmulatorDevice(arch, timing=TimingOptions(execute=False, sample_cus=2))
    try:
        run(dev)
    except DeviceError as exc:
        if dev.unexecuted is None or "models time only" not in str(exc):
            why = f"not modeled: {str(exc).splitlines()[0][:80]}"
            return why, why
    except Exception as exc:  # a peer that cannot run at the modeled shape is a data point
        why = f"not modeled: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
        return why, why
    timings = [launch["timing"] for launch in dev.launches]
    seconds = sum(t.seconds for t in timings)
    if not seconds:
        return "not modeled: nothing launched", "not modeled: nothing launched"
    at_ceiling = sum(t.matrix_flops / (t.ceiling_tflops * 1e12) for t in timings if t.ceiling_tflops)
    return flops / seconds / 1e12, flops / at_ceiling / 1e12 if at_ceiling else "no ceiling"
