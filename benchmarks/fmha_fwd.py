"""FMHA forward: our kernel beside the best of Triton's configs for the same arch and shape, as a table.

Per arch, head dim 64/128, f16/bf16, causal or not, on one problem (B 1, S 512, H 2, contiguous
[B, S, H, D]). Columns per kernel: cold compile seconds, instructions, MFMA/WMMA count,
instructions per MFMA/WMMA (static), VGPRs (the code object's count: on CDNA the unified total of
arch VGPRs and AGPRs) and the AGPRs among them, LDS, spills (VGPR + SGPR), occupancy (waves per
SIMD, `Arch.occupancy`), SGPRs, and -- both kernels run on the emulator and are checked against
the reference -- the executed wave-instructions per 1k (query, key) pairs the mask keeps (the
dynamic figure, the fair one), then the tiles.

Ours is the variant `tiledsl.ops.fmha_fwd` launches (`compile_fmha_fwd`, compiled cold); the
modeled column runs `fmha_fwd` at its own shape, so its tile may differ from the row's (a grid that
large takes `fmha_configs.WIDE` where the variant has a row there: gfx950 hdim 64 full). Triton
(benchmark-only: `pip install triton`) is compiled as its JIT specializes the call
(benchmarks/triton_fa.py: tt.divisibility 16 on pointers, strides and sizes) over the tutorial's
AMD configs: at f16 every config of `triton_fa.configs` with Triton's default waves_per_eu, then the
tutorial's waves_per_eu on the two best; at bf16 the three best f16 configs. The best is kept: no
spills, then one that ran on the emulator, then the fewest executed instructions per pair (static
instructions per MFMA/WMMA where it could not run), then the higher occupancy. A config that fails
to compile is listed; one the emulator cannot run keeps its static figures and names the
instruction it lacks; an output that differs from the reference is flagged in its row (the count
stands: neither kernel's control flow depends on the data).

Peers beyond Triton's tutorial kernel (benchmark-only, each optional: its row says how to install
it when it is missing): aiter's Triton MHA forward (benchmarks/aiter_fa.py, `pip install
amd-aiter==0.1.7.post2.dev18 --no-deps`), compiled from aiter's own dispatcher and per-arch config
(aiter ships configs for gfx942 and gfx950 only; the other archs' rows say so), run on the
emulator and checked like the others; flash-attention's AMD Triton backend as the same aiter package
ships it (benchmarks/fa_amd.py, row fa-amd), the one peer its authors tuned for RDNA too, compiled
from its own interface over its authors' default configs for the arch (the fastest kept);
FlyDSL's flash-attention forward (benchmarks/flydsl_fa.py, `pip install flydsl==0.5.0 --no-deps`
plus FLYDSL_KERNELS=<a FlyDSL checkout>, since its wheel ships no kernels), built by FlyDSL's own
tile rule, on gfx942 (its gfx950 path for this shape is another kernel, not wired; it has none for
the other archs).
Usage: python benchmarks/fmha_fwd.py [--arch A ...] [--hdim 64 128] [--dtype f16 bf16] [--no-emulate] [-j N]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import CompiledKernel, compile_source
from tiledsl.isa_stats import isa_stats
from tiledsl.kernels.fmha_configs import VECTOR_ELEMS, fmha_config
from tiledsl.launcher import numpy_dtype
from tiledsl.ops import KERNELS, compile_fmha_fwd, fmha_fwd
from tiledsl.options import CompileOptions
from tiledsl.reference import fmha_fwd_reference, fmha_mask_params

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_rows import HEADER, MODEL_B, MODEL_H, MODEL_S, fastest, format_result, model_with_ceiling, triton_stats  # noqa: E402

B, S, H = 1, 512, 2
TOLERANCE = {"f16": 5e-3, "bf16": 4e-2}  # max |out - reference| (outputs are O(1))


def compile_contiguous(arch: str, defines: dict[str, str], allow_spills: bool = False,
                       scheduling: dict[str, str | bool] | None = None) -> CompiledKernel:
    """The variant fmha_fwd compiles for contiguous bshd inputs (strides in units of 16 bytes), uncached
    (benchmarks/fmha_tune.py's candidates); scheduling: the config row's (FmhaConfig.scheduling)."""
    src = KERNELS / "fmha_fwd.tile"
    options = CompileOptions.make(arch, defines, allow_spills=allow_spills, **(scheduling or {}),
                                  stride_units=tuple((t, VECTOR_ELEMS) for t in ("k", "o", "q", "v")))
    return compile_source(src.read_text(), str(src), arch, defines, options, cache=None)


def problem(dtype: str, hdim: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((B, S, H, hdim)).astype(numpy_dtype(dtype)) for _ in range(3)]


def pairs(causal: bool) -> int:
    return B * H * (S * (S + 1) // 2 if causal else S * S)


def check(out: np.ndarray, qkv: list[np.ndarray], causal: bool, dtype: str) -> str | None:
    """None when `out` matches the reference, else what differs."""
    err = float(np.abs(out.astype(np.float64) - fmha_fwd_reference(*qkv, causal=causal)).max())
    return None if err <= TOLERANCE[dtype] else f"output differs from the reference by {err:.3g}"


def ours(arch: str, dtype: str, hdim: int, causal: bool, emulate: bool) -> dict:
    t0 = time.perf_counter()
    k = compile_fmha_fwd(arch, dtype=dtype, hdim_q=hdim, hdim_v=hdim, mask=fmha_mask_params(causal))
    seconds = time.perf_counter() - t0  # cold: the benchmark runs with an empty compile cache
    st = isa_stats(k.asm, k.manifest)
    cfg = fmha_config(arch, hdim, masked=causal)
    row = {"compile": seconds, "instr": st.instructions, "mma": st.mfma + st.wmma, "vgpr": st.vgprs,
           "agpr": st.agprs, "sgpr": st.sgprs, "lds": st.lds_bytes, "spills": st.vgpr_spills + st.sgpr_spills,
           "occ": st.occupancy, "dyn": None, "tiles": f"{cfg.block_m}x{cfg.block_n} w{cfg.waves} s{cfg.stages}"}
    if emulate:
        qkv = problem(dtype, hdim)
        dev = EmulatorDevice(arch)
        out = fmha_fwd(*qkv, causal=causal, device=dev)
        row["dyn"] = sum(launch["wave_instructions"] for launch in dev.launches) * 1000 / pairs(causal)
        if (bad := check(out, qkv, causal, dtype)) is not None:
            row["note"] = bad
    return row


def _triton_row(arch: str, dtype: str, hdim: int, causal: bool, config: tuple[int, ...], emulate: bool) -> dict:
    from triton_fa import compile_triton, launch

    a = get_arch(arch)
    bm, bn, warps, stages, wpe = config
    row = {"config": config, "tiles": f"{bm}x{bn} w{warps} s{stages} e{wpe}", "dyn": None}
    try:
        asm, md, seconds, hsaco = compile_triton(arch, a.wave_size, dtype, hdim, causal, config, S, H)
    except Exception as exc:  # a config the peer cannot compile is a data point, not our error
        return {**row, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:80]}"}
    row.update(triton_stats(asm, md, seconds, "attn_fwd", a, warps))
    if emulate and not row["spills"]:  # a spilling config loses anyway: not worth emulating
        qkv = problem(dtype, hdim)
        dev = EmulatorDevice(a)
        try:  # where it cannot run, the static figures stay and the note says why
            missing = dev.unsupported(dev.kernel(hsaco, "attn_fwd"))
            if missing:  # one message per occurrence, naming the instruction in quotes
                names = dict.fromkeys(re.sub(r"^[^']*'([^']+)'.*", r"\1", m) for m in missing)
                row["note"] = f"not run: the emulator lacks {', '.join(names)}"
            else:
                out = launch(dev, hsaco, md, config, *qkv)
        except UnsupportedInstruction as exc:
            row["note"] = f"not run: {str(exc).splitlines()[0][:100]}"
        except Exception as exc:  # a fault is a finding about one config, not the end of the table
            row["note"] = f"not run: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        if "note" not in row:
            row["dyn"] = dev.last_stats["wave_instructions"] * 1000 / pairs(causal)
            if (bad := check(out, qkv, causal, dtype)) is not None:
                row["note"] = bad
    return row


def _key(r: dict) -> tuple:
    per = r["dyn"] if r["dyn"] is not None else r["instr"] / max(r["mma"], 1)
    return (r["spills"] > 0, r["dyn"] is None, per, -r["occ"])


def theirs(arch: str, dtype: str, hdim: int, causal: bool, emulate: bool,
           candidates: list[tuple[int, ...]] | None = None) -> tuple[dict | None, list[dict]]:
    """The best Triton row and every row tried. Without `candidates`: the full sweep (waves_per_eu 0),
    then the tutorial's waves_per_eu on the two best."""
    try:
        from triton_fa import configs
    except ImportError:
        return None, []
    sweep = candidates or [c for c in configs(hdim, causal) if c[4] == 0]
    rows = [_triton_row(arch, dtype, hdim, causal, c, emulate) for c in sweep]
    if candidates is None:
        ok = sorted((r for r in rows if "error" not in r and not r["spills"]), key=_key)
        tutorial = {c[:4]: c for c in configs(hdim, causal) if c[4]}
        rows += [_triton_row(arch, dtype, hdim, causal, tutorial[r["config"][:4]], emulate)
                 for r in ok[:2] if r["config"][:4] in tutorial]
    ran = sorted((r for r in rows if "error" not in r), key=_key)
    return (ran[0] if ran else rows[0] if rows else None), rows


def peers(arch: str, dtype: str, hdim: int, causal: bool, emulate: bool) -> dict[str, dict]:
    """The other peers' rows by name (see the module docstring)."""
    import aiter_fa
    import fa_amd
    import flydsl_fa

    qkv = problem(dtype, hdim)
    a = get_arch(arch)
    return {"aiter": aiter_fa.fwd_row(a, qkv, causal, emulate, pairs(causal),
                                      lambda out: check(out, qkv, causal, dtype)),
            "fa-amd": fa_amd.fwd_row(a, qkv, causal, emulate, pairs(causal),
                                     lambda out: check(out, qkv, causal, dtype)),
            "flydsl": flydsl_fa.fwd_row(a, dtype, qkv, causal, emulate, pairs(causal),
                                        lambda out: check(out, qkv, causal, dtype))}


def modeled(arch: str, dtype: str, hdim: int, causal: bool, best: dict | None) -> dict[str, dict[str, float | str]]:
    """Modeled TFLOP/s at MODEL_B x MODEL_S x MODEL_H of ours and of each peer (Triton: its best
    config of the small problem, compiled again for this shape; fa-amd: the fastest of its configs),
    by the emulator's timing model:
    {"tflops": {kernel: figure}, "ceiling": {kernel: the ceiling of its instruction mix}}."""
    import aiter_fa
    import fa_amd
    import flydsl_fa
    from triton_fa import compile_triton
    from triton_fa import launch as triton_launch

    from tiledsl.device_array import DeviceArray
    from tiledsl.profile import useful_flops

    a = get_arch(arch)
    shape = (MODEL_B, MODEL_S, MODEL_H, hdim)
    # The same standard normal q, k, v for every kernel: a kernel's branches may depend on its data
    # (ours skips the softmax rescale while the running max stands), and zeros would flatter them.
    rng = np.random.default_rng(0)
    data = [rng.standard_normal(shape, dtype=np.float32).astype(numpy_dtype(dtype)) for _ in range(3)]
    flops = useful_flops("fmha_fwd", MODEL_B, MODEL_H, MODEL_S, MODEL_S, hdim, causal)
    runs = {}
    runs["tiledsl"] = (lambda dev: fmha_fwd(
        *(DeviceArray.from_numpy(dev, x) for x in data), causal=causal, device=dev))
    if best is not None and "config" in best:
        def triton(dev):
            _asm, md, _s, hsaco = compile_triton(arch, a.wave_size, dtype, hdim, causal, best["config"], MODEL_S,
                                                 MODEL_H)
            triton_launch(dev, hsaco, md, best["config"], *data)
        runs["triton"] = triton
    if aiter_fa.missing() is None and arch in ("gfx942", "gfx950"):
        def aiter(dev):
            ln, tensors = aiter_fa.compile_fwd(arch, a.wave_size, *data, causal)
            aiter_fa.run(dev, [ln], tensors)
        runs["aiter"] = aiter
    if flydsl_fa.missing() is None and arch == "gfx942":
        runs["flydsl"] = lambda dev: flydsl_fa.run(dev, flydsl_fa.compile_fwd(a, dtype, shape, causal), *data)
    figures = {who: model_with_ceiling(a, flops, run) for who, run in runs.items()}
    tuned = {tiles: model_with_ceiling(a, flops, run) for tiles, run in fa_amd.model_runs(a, data, causal).items()}
    if tuned:  # the fastest config
        figures["fa-amd"] = tuned[fastest(tuned, lambda f: f[0])]
    return {"tflops": {who: f[0] for who, f in figures.items()}, "ceiling": {who: f[1] for who, f in figures.items()}}


def cell(arch: str, hdim: int, causal: bool, dtypes: list[str], emulate: bool, model: bool = True) -> list[tuple]:
    """One arch, head dim and mask: (dtype, ours, best Triton row, Triton rows tried, other peers)
    per dtype; dtypes after the first re-run the first one's three best Triton configs."""
    out, best_configs = [], None
    for dtype in dtypes:
        try:
            mine = ours(arch, dtype, hdim, causal, emulate)
        except Exception as exc:  # keep the Triton figures of this cell
            mine = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:100]}"}
        best, rows = theirs(arch, dtype, hdim, causal, emulate, best_configs)
        if best_configs is None:
            best_configs = [r["config"] for r in sorted((r for r in rows if "error" not in r), key=_key)[:3]] or None
        out.append((dtype, mine, best, rows, peers(arch, dtype, hdim, causal, emulate),
                    modeled(arch, dtype, hdim, causal, best) if model else {}))
    return out


def _init_worker(tmp: str) -> None:
    # Cold compiles for both: neither compiler's cache answers from an earlier run.
    os.environ["TRITON_CACHE_DIR"] = str(Path(tmp) / f"triton-{os.getpid()}")
    os.environ["TILEDSL_CACHE_DIR"] = str(Path(tmp) / f"tiledsl-{os.getpid()}")


def fmt(who: str, r: dict | None) -> str:
    return format_result(who, r, f"{r['sgpr']:5d} " if r is not None and "sgpr" in r else "")


def summary(rows: list[dict]) -> str:
    failed = [r for r in rows if "error" in r]
    spilled = sum(1 for r in rows if "error" not in r and r["spills"])
    text = f"{'':26} triton: {len(rows)} configs tried, {spilled} spill, {len(failed)} failed to compile"
    return text + "".join(f"\n{'':28} {r['tiles']}: {r['error']}" for r in failed)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", default=list(ARCH_NAMES))
    ap.add_argument("--hdim", nargs="+", type=int, default=[64, 128])
    ap.add_argument("--dtype", nargs="+", default=["f16", "bf16"])
    ap.add_argument("--no-emulate", action="store_true", help="static figures only")
    ap.add_argument("--no-model", action="store_true", help="no timing-model column (modeled TFLOP/s)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="cells compiled and emulated in parallel")
    args = ap.parse_args()
    cells = [(arch, hdim, causal) for arch in args.arch for hdim in args.hdim for causal in (False, True)]
    results = []
    with tempfile.TemporaryDirectory() as tmp, \
            ProcessPoolExecutor(args.jobs, initializer=_init_worker, initargs=(tmp,)) as pool:
        print(f"B {B}, S {S}, H {H}, contiguous [B, S, H, D]; dyn/1kpr: executed wave-instructions per 1k "
              f"(query, key) pairs")
        print(f"{'':26} {HEADER} {'SGPR':>5} {'dyn/1kpr':>9}  tiles")
        futures = [pool.submit(cell, *c, args.dtype, not args.no_emulate, not args.no_model) for c in cells]
        for (arch, hdim, causal), future in zip(cells, futures, strict=True):
            for dtype, mine, best, rows, others, model in future.result():
                label = f"{arch:8} d{hdim:<3} {dtype:4} {'causal' if causal else 'full':6}"
                print(f"{label}   {fmt('tiledsl', mine)}")
                print(f"{'':26} {fmt('triton', best)}")
                if rows:
                    print(summary(rows), flush=True)
                for who, r in others.items():
                    print(f"{'':26} {fmt(who, r)}", flush=True)
                results.append((label, mine, {"triton": best, **others}, model))
    names = list(results[0][2]) if results else ["triton"]
    print("\ndyn/1kpr, ours beside each peer; ratio = ours / peer (< 1: ours executes fewer instructions)")
    print(f"{'':26} {'tiledsl':>9}" + "".join(f" {n:>9} {'ratio':>6}" for n in names))
    for label, mine, theirs_, _model in results:
        a = mine.get("dyn")
        line = f"{label} {a:9.1f}" if a is not None else f"{label} {'-':>9}"
        for n in names:
            r = theirs_.get(n)
            b = r.get("dyn") if r and "error" not in r and "skip" not in r else None
            line += f" {b:9.1f}" if b is not None else f" {'-':>9}"
            line += f" {a / b:6.2f}" if a is not None and b is not None else f" {'-':>6}"
        print(line)
    if not args.no_model:
        print(f"\nmodeled TFLOP/s at B {MODEL_B}, S {MODEL_S}, H {MODEL_H} (emulator timing model, docs/profile.md: "
              f"a ranking tool); ratio = ours / peer (> 1: ours faster)")
        print_ratios(names, [(label, model.get("tflops", {})) for label, _mine, _theirs, model in results])
        print("\nceiling of each kernel's instruction mix (modeled TFLOP/s were its busiest pipe never idle: "
              "what scheduling could win at most, docs/profile.md)")
        print_ratios(names, [(label, model.get("ceiling", {})) for label, _mine, _theirs, model in results])
    return 0


def print_ratios(names: list[str], rows: list[tuple[str, dict[str, float | str]]]) -> None:
    """Per row ours beside each peer and ours / peer, the reasons for missing figures after."""
    print(f"{'':26} {'tiledsl':>9}" + "".join(f" {n:>9} {'ratio':>6}" for n in names))
    for label, figures in rows:
        a = figures.get("tiledsl")
        line = f"{label} {a:9.1f}" if isinstance(a, float) else f"{label} {'-':>9}"
        notes = [f"{n}: {v}" for n, v in figures.items() if isinstance(v, str)]
        for n in names:
            b = figures.get(n)
            line += f" {b:9.1f}" if isinstance(b, float) else f" {'-':>9}"
            line += f" {a / b:6.2f}" if isinstance(a, float) and isinstance(b, float) else f" {'-':>6}"
        print(line + ("  (" + "; ".join(notes) + ")" if notes else ""))


if __name__ == "__main__":
    sys.exit(main())
