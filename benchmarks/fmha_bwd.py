"""FMHA backward: our dq_dk_dv beside Triton's backward for the same arch and shape, as a table.

Per arch, head dim 64/128, f16 and bf16, causal or not. Columns per kernel: cold compile seconds,
instructions, MFMA/WMMA count, instructions per MFMA/WMMA, VGPRs (CDNA: the unified count) and
AGPRs, LDS, spills, occupancy (waves per SIMD), and -- both kernels run on the emulator on the same
problem (1 x 256 x 1 x hdim) -- the executed wave-instructions per 1k (query, key) pairs. That
dynamic figure is the fair one: Triton's kernel recomputes P for dQ (7 products per block pair
against our 5), which a static instructions-per-MFMA figure rewards. Triton is compiled as its JIT specializes the call
(benchmarks/triton_fa_bwd.py: tt.divisibility 16 on pointers, strides and sizes); the table row
shows its config with the fewest executed instructions per pair (no spills), and the timing model
times the best MODEL_CANDIDATES of them at the model shape and keeps the fastest, as Triton's
autotuner would. Its results are checked against the reference before they are counted. The
modeled figures charge every side its whole work: our plan's three stages, Triton's, aiter's and
fa-amd's preprocess (Delta) and main kernel.

aiter's Triton backward (benchmarks/aiter_fa.py, optional: `pip install
amd-aiter==0.1.7.post2.dev18 --no-deps`) is a third row: the one-kernel dK/dV/dQ path its
`flash_attn_func` takes, compiled from its own dispatcher and per-arch config (gfx942 and gfx950
only; the other archs' rows say so), fed with O and LSE from aiter's own forward on the emulator,
checked like Triton's; its dynamic figure counts the main kernel (its preprocess, like our
dot_do_o, is not counted).

flash-attention's AMD Triton backend as aiter ships it (benchmarks/fa_amd.py, row fa-amd; the
same optional install) is a fourth row: `flash_attn_2.bwd` in its default "fused" mode, its
preprocess (Delta) and one dK/dV/dQ kernel, compiled from its own interface over its authors'
default configs for the arch (every arch: it has an RDNA config) and aiter main's newer default,
fed with O and LSE (natural log, [B, H, S]) from its own forward on the emulator, checked like
Triton's; the row shows the config with the fewest executed instructions (its dynamic figure
counts the main kernel), and the model times its best MODEL_CANDIDATES configs, each behind the
preprocess config the model times fastest, and keeps the fastest, as its autotuners would.
Usage: python benchmarks/fmha_bwd.py [--arch A ...] [--hdim 64 128] [--dtype f16 bf16] [--no-emulate]
"""

from __future__ import annotations

import argparse
import os
import re
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.fmha_bwd import bwd_config, plan_from_sizes
from tiledsl.isa_stats import isa_stats
from tiledsl.launcher import numpy_dtype
from tiledsl.ops import fmha_bwd, fmha_fwd
from tiledsl.reference import fmha_bwd_reference, fmha_mask_params

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_rows import HEADER, MODEL_B, MODEL_H, MODEL_S, fastest, format_result, model_tflops, triton_stats  # noqa: E402

SEQ = 256
# Triton's configs the timing model times, best first by executed instructions on the small
# problem (without spills): the model keeps the fastest, as Triton's autotuner would on a GPU.
MODEL_CANDIDATES = 3
LOG2E = 1.4426950408889634
# Max |gradient - reference| over the reference's largest magnitude (at least 1): the test suite's
# bounds (tests/_fmha_util.assert_grads_close).
TOLERANCE = {"f16": 4e-3, "bf16": 2e-2}


def problem(dtype: str, hdim: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, SEQ, 1, hdim)).astype(numpy_dtype(dtype)) for _ in range(4)]  # q, k, v, do


def differs(got, ref, dtype: str) -> str | None:
    """None when the gradients (dq, dk, dv) match the reference, else what differs."""
    for name, g, r in zip(("dq", "dk", "dv"), got, ref, strict=True):
        err = np.abs(np.asarray(g, np.float64) - r).max()
        if err > TOLERANCE[dtype] * max(np.abs(r).max(), 1.0):
            return f"{name} differs from the reference by {err:.3g}"
    return None


def pairs(causal: bool) -> int:
    return SEQ * (SEQ + 1) // 2 if causal else SEQ * SEQ


def ours(arch: str, dtype: str, hdim: int, causal: bool, emulate: bool) -> dict:
    t0 = time.perf_counter()
    plan = plan_from_sizes(arch, dtype=dtype, hdim_q=hdim, hdim_v=hdim, hq=1, hk=1, seqlens_q=(SEQ,),
                           seqlens_k=(SEQ,), varlen=False, mask=fmha_mask_params(causal))
    seconds = time.perf_counter() - t0  # all stages; the table shows dq_dk_dv
    k = plan.stages[1].kernel
    st = isa_stats(k.asm, k.manifest)
    cfg = bwd_config(arch, hdim, hdim)
    tiles = f"{cfg.block_m}x{cfg.block_n}x{cfg.waves}" + (" dq{}x{}".format(*cfg.dq_block) if cfg.dq_loop else "")
    row = {"compile": seconds, "instr": st.instructions, "mma": st.mfma + st.wmma, "vgpr": st.vgprs,
           "agpr": st.agprs, "lds": st.lds_bytes, "spills": st.vgpr_spills + st.sgpr_spills,
           "occ": st.occupancy, "dyn": None, "tiles": tiles}
    if emulate:
        q, kk, v, do = problem(dtype, hdim)
        dev = EmulatorDevice(arch)
        out, lse = fmha_fwd(q, kk, v, causal=causal, return_lse=True, device=dev)
        dev.launches.clear()
        got = fmha_bwd(do, q, kk, v, out, lse, causal=causal, device=dev)[:3]
        if (bad := differs(got, fmha_bwd_reference(do, q, kk, v, causal=causal), dtype)) is not None:
            row["note"] = bad
        stage = next(s for s in dev.launches if s["kernel"] == "fmha_bwd_dq_dk_dv")
        row["dyn"] = stage["wave_instructions"] * 1000 / pairs(causal)
    return row


def theirs(arch: str, dtype: str, hdim: int, causal: bool, emulate: bool) -> dict | None:
    try:
        from triton_fa_bwd import CONFIGS, compile_triton_bwd
    except ImportError:
        return None
    a = get_arch(arch)
    best = None
    ranked: list[dict] = []
    for config in CONFIGS:
        try:
            row = _triton_row(a, dtype, hdim, causal, config, compile_triton_bwd, emulate)
        except Exception as exc:  # a config the peer cannot compile or run is a data point
            row = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:60]}"}
        if "error" in row:
            best = best or row
            continue
        # Executed counts rank the configs; one the emulator could not run ranks after them by its static count.
        key = (row["spills"] > 0, row["dyn"] is None, row["dyn"] if row["dyn"] is not None
               else row["instr"] / max(row["mma"], 1))
        row = {**row, "_key": key, "config": config}
        ranked.append(row)
        if best is None or "error" in best or key < best["_key"]:
            best = row
    if best is not None and "config" in best:  # the runners-up the model also times (modeled())
        best["candidates"] = [r["config"] for r in sorted(ranked, key=lambda r: r["_key"])
                              if r["spills"] == 0][:MODEL_CANDIDATES] or [best["config"]]
    return best


def _triton_row(a, dtype: str, hdim: int, causal: bool, config, compile_fn, emulate: bool) -> dict:
    asm, md, seconds, hsaco = compile_fn(a.name, a.wave_size, dtype, hdim, causal, config)
    warps = config[4]
    row = {**triton_stats(asm, md, seconds, "attn_bwd", a, warps), "dyn": None,
           "tiles": "/".join(map(str, config[:4])) + f" w{warps} s{config[5]}"}
    if emulate:
        try:
            row["dyn"] = _run_triton(a, dtype, hdim, causal, config, md, hsaco)
        except UnsupportedInstruction as exc:  # static figures stay; say why the dynamic one is missing
            row["note"] = "not run: " + re.sub(r".*unsupported instruction '([^']+)'.*", r"the emulator lacks \1",
                                               str(exc).splitlines()[0])
    return row


def _run_triton(a, dtype: str, hdim: int, causal: bool, config, md: dict, hsaco: bytes) -> float:
    """Run Triton's preprocess and its code object on the emulator, check dq/dk/dv, return the
    main kernel's dynamic figures."""
    q, k, v, do = problem(dtype, hdim)
    dev = EmulatorDevice(a)
    ref_out, ref_lse = _forward(q, k, v, causal)
    bufs = {name: dev.to_device(arr, name) for name, arr in (
        ("Q", q), ("K", k), ("V", v), ("DO", do), ("DQ", np.zeros_like(q)), ("DK", np.zeros_like(k)),
        ("DV", np.zeros_like(v)), ("LSE", (ref_lse[0, 0] * LOG2E).astype(np.float32)),
        ("O", ref_out.astype(q.dtype)), ("Delta", np.zeros(SEQ, np.float32)), ("scratch", np.zeros(16, np.uint8)))}
    _launch_triton(dev, a, dtype, hdim, config, md, hsaco, bufs, SEQ, 1)
    count = dev.last_stats["wave_instructions"]  # the main kernel's, launched last
    got = [dev.from_device(bufs[n], q.dtype, q.shape) for n in ("DQ", "DK", "DV")]
    if (bad := differs(got, fmha_bwd_reference(do, q, k, v, causal=causal), dtype)) is not None:
        raise RuntimeError(f"Triton's {bad}")
    return count * 1000 / pairs(causal)


def _launch_triton(dev, a, dtype: str, hdim: int, cfg, md: dict, hsaco: bytes, buf: dict, seq: int,
                   heads: int) -> None:
    """Triton's preprocess (Delta from O and dO), then its main kernel, over `heads` contiguous
    [seq, hdim] heads in the buffers named as the kernels' arguments (and a 16-byte "scratch")."""
    from triton_fa_bwd import PRE_BLOCK, compile_triton_preprocess

    scratch = buf["scratch"].addr
    _asm, pre_md, _s, pre = compile_triton_preprocess(a.name, a.wave_size, dtype, hdim)
    dev.launch(dev.kernel(pre, "attn_bwd_preprocess"), (seq // PRE_BLOCK, heads, 1), (4 * a.wave_size, 1, 1),
               struct.pack("<QQQi4xQQ", buf["O"].addr, buf["DO"].addr, buf["Delta"].addr, seq, scratch, scratch),
               dynamic_lds=int(pre_md["shared"]))
    ka = struct.pack("<QQQf4xQQQQQQiiI4xQQ", buf["Q"].addr, buf["K"].addr, buf["V"].addr, hdim ** -0.5,
                     buf["DO"].addr, buf["DQ"].addr, buf["DK"].addr, buf["DV"].addr, buf["LSE"].addr,
                     buf["Delta"].addr, seq * hdim, hdim, seq, scratch, scratch)
    dev.launch(dev.kernel(hsaco, "attn_bwd"), (seq // cfg[1], heads, 1), (cfg[4] * a.wave_size, 1, 1), ka,
               dynamic_lds=int(md["shared"]))


def _forward(q, k, v, causal):
    from tiledsl.reference import fmha_fwd_reference

    return fmha_fwd_reference(q, k, v, causal=causal, return_lse=True)


def aiter(arch: str, dtype: str, hdim: int, causal: bool, emulate: bool) -> dict:
    import aiter_fa

    q, k, v, do = problem(dtype, hdim)
    return aiter_fa.bwd_row(get_arch(arch), q, k, v, do, causal, emulate, pairs(causal),
                            lambda *got: differs(got, fmha_bwd_reference(do, q, k, v, causal=causal), dtype))


def fa_amd(arch: str, dtype: str, hdim: int, causal: bool, emulate: bool) -> dict:
    import fa_amd

    q, k, v, do = problem(dtype, hdim)
    return fa_amd.bwd_row(get_arch(arch), q, k, v, do, causal, emulate, pairs(causal),
                          lambda *got: differs(got, fmha_bwd_reference(do, q, k, v, causal=causal), dtype))


def modeled(arch: str, dtype: str, hdim: int, causal: bool, best: dict | None,
            fa: dict | None = None) -> dict[str, float | str]:
    """Modeled TFLOP/s (5 products per visible pair) at the benchmarks' model shape: ours is the
    whole plan (dot_do_o, dq_dk_dv, convert_dq), Triton its preprocess (Delta, our dot_do_o) and
    main kernel, with the fastest of its candidate configs (theirs()), aiter its preprocess and
    one-kernel backward (gfx942 and gfx950), fa-amd its preprocess and fused kernel with the
    fastest of its candidate configs (`fa`, its row: fa_amd()). Every kernel reads the same
    standard normal inputs."""
    import aiter_fa
    import fa_amd
    from triton_fa_bwd import compile_triton_bwd

    from tiledsl.device_array import DeviceArray
    from tiledsl.profile import useful_flops

    a = get_arch(arch)
    flops = useful_flops("fmha_bwd", MODEL_B, MODEL_H, MODEL_S, MODEL_S, hdim, causal)

    shape = (MODEL_B, MODEL_S, MODEL_H, hdim)
    rng = np.random.default_rng(0)
    q, k, v, o, do = (rng.standard_normal(shape, dtype=np.float32).astype(numpy_dtype(dtype)) for _ in range(5))
    lse = np.full((MODEL_B, MODEL_H, MODEL_S), np.log(MODEL_S), np.float32)  # a plausible row scale
    # Triton's tutorial takes [B, H, S, D] tensors (made once for its candidate configs) and a base-2 LSE.
    bhsd = {name: np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for name, x in
            (("Q", q), ("K", k), ("V", v), ("O", o), ("DO", do))}

    def ours(dev) -> None:
        fmha_bwd(*(DeviceArray.from_numpy(dev, x) for x in (do, q, k, v, o, lse)), causal=causal, device=dev)

    def triton(dev, cfg) -> None:
        _asm, md, _s, hsaco = compile_triton_bwd(arch, a.wave_size, dtype, hdim, causal, cfg)
        heads = MODEL_B * MODEL_H
        buf = {name: dev.to_device(x, name) for name, x in bhsd.items()}
        buf.update({name: dev.to_device(np.zeros_like(q), name) for name in ("DQ", "DK", "DV")})
        buf["LSE"] = dev.to_device(lse * LOG2E, "LSE")
        buf["Delta"] = dev.alloc(heads * MODEL_S * 4, "Delta")
        buf["scratch"] = dev.alloc(16, "scratch")
        _launch_triton(dev, a, dtype, hdim, cfg, md, hsaco, buf, MODEL_S, heads)

    def aiter(dev) -> None:
        launches, tensors = aiter_fa.compile_bwd(arch, a.wave_size, q, k, v, o, lse, do, causal)
        aiter_fa.run(dev, launches, tensors)

    out: dict[str, float | str] = {"tiledsl": model_tflops(a, flops, ours)}
    if best is not None and "config" in best:
        timed = {cfg: model_tflops(a, flops, lambda dev, cfg=cfg: triton(dev, cfg)) for cfg in best["candidates"]}
        out["triton"] = timed[cfg := fastest(timed)]
        if isinstance(out["triton"], float):
            out["triton config"] = "/".join(map(str, cfg[:4])) + f" w{cfg[4]} s{cfg[5]}"
    if aiter_fa.missing() is None and arch in ("gfx942", "gfx950"):
        out["aiter"] = model_tflops(a, flops, aiter)
    if fa is not None and "candidates" in fa:
        runs = fa_amd.bwd_model_runs(a, [q, k, v, o, lse, do], causal, flops, fa["candidates"][:MODEL_CANDIDATES])
        timed = {tiles: model_tflops(a, flops, run) for tiles, run in runs.items()}
        if timed:
            out["fa-amd"] = timed[tiles := fastest(timed)]
            if isinstance(out["fa-amd"], float):
                out["fa-amd config"] = tiles
    elif fa is not None:
        out["fa-amd"] = "not modeled: " + fa.get("skip", fa.get("error", "no config"))
    return out


def fmt(who: str, r: dict | None) -> str:
    return format_result(who, r)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", default=list(ARCH_NAMES))
    ap.add_argument("--hdim", nargs="+", type=int, default=[64, 128])
    ap.add_argument("--dtype", nargs="+", choices=["f16", "bf16"], default=["f16", "bf16"])
    ap.add_argument("--no-emulate", action="store_true", help="static figures only")
    ap.add_argument("--no-model", action="store_true", help="no timing-model table (modeled TFLOP/s)")
    args = ap.parse_args()
    emulate = not args.no_emulate
    models = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TRITON_CACHE_DIR"] = tmp  # cold compiles for Triton too
        os.environ["TILEDSL_CACHE_DIR"] = str(Path(tmp) / "tiledsl")
        print(f"{'':26} {HEADER} {'dyn/1kpr':>9}  tiles")
        for arch in args.arch:
            for hdim in args.hdim:
                for dtype in args.dtype:
                    for causal in (False, True):
                        label = f"{arch:8} d{hdim:<3} {dtype:4} {'causal' if causal else 'full':6}"
                        print(f"{label}  {fmt('tiledsl', ours(arch, dtype, hdim, causal, emulate))}")
                        best = theirs(arch, dtype, hdim, causal, emulate)
                        print(f"{'':26} {fmt('triton', best)}", flush=True)
                        print(f"{'':26} {fmt('aiter', aiter(arch, dtype, hdim, causal, emulate))}", flush=True)
                        fa = fa_amd(arch, dtype, hdim, causal, emulate)
                        print(f"{'':26} {fmt('fa-amd', fa)}", flush=True)
                        if not args.no_model:
                            models.append((label, modeled(arch, dtype, hdim, causal, best, fa)))
    if models:
        print(f"\nmodeled TFLOP/s at B {MODEL_B}, S {MODEL_S}, H {MODEL_H} (emulator timing model, docs/profile.md: a "
              "ranking tool); ours: the whole plan; ratio = ours / peer (> 1: ours faster)")
        names = ("triton", "aiter", "fa-amd")
        print(f"{'':26} {'tiledsl':>9}" + "".join(f" {n:>9} {'ratio':>6}" for n in names))
        for label, m in models:
            a = m.get("tiledsl")
            line = f"{label} {a:9.1f}" if isinstance(a, float) else f"{label} {'-':>9}"
            for n in names:
                b = m.get(n)
                line += f" {b:9.1f}" if isinstance(b, float) else f" {'-':>9}"
                line += f" {a / b:6.2f}" if isinstance(a, float) and isinstance(b, float) else f" {'-':>6}"
            notes = "; ".join(f"{n}: {v}" for n, v in m.items() if isinstance(v, str))
            print(line + (f"  ({notes})" if notes else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
