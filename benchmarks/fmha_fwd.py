"""FMHA forward: our kernel beside Triton's for the same arch and shape, as a table.

Per arch, head dim 64/128, f16/bf16, causal or not: cold compile time, instructions, MFMA/WMMA
count, instructions per MFMA/WMMA, VGPRs (the code object's count: on CDNA the unified total of
arch VGPRs and AGPRs) and the AGPRs among them, LDS, spills, occupancy (waves/SIMD), and for ours
the emulated wave-instructions per query tile (one tile of BLOCK_M rows against 256 keys).
Triton (a benchmark-only dependency: `pip install triton`) is compiled on this CPU with its
tutorial tiles (BLOCK 128x64, 4 warps); it is not run. Targets: zero spills on all five archs at
head dim 128; no more instructions per MFMA/WMMA than Triton.
Usage: python benchmarks/fmha_fwd.py [--arch A ...] [--hdim 64 128] [--dtype f16 bf16] [--no-emulate]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import CompiledKernel, compile_source
from tiledsl.isa_stats import isa_stats
from tiledsl.kernels.fmha_configs import VECTOR_ELEMS, fmha_config, fmha_defines
from tiledsl.ops import KERNELS, fmha_fwd
from tiledsl.options import CompileOptions
from tiledsl.reference import fmha_mask_params

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_rows import HEADER, format_row, triton_stats  # noqa: E402


def compile_contiguous(arch: str, defines: dict[str, str], allow_spills: bool = False) -> CompiledKernel:
    """The variant fmha_fwd compiles for contiguous bshd inputs (strides in units of 16 bytes), uncached."""
    src = KERNELS / "fmha_fwd.tile"
    options = CompileOptions.make(arch, defines, allow_spills=allow_spills,
                                  stride_units=tuple((t, VECTOR_ELEMS) for t in ("k", "o", "q", "v")))
    return compile_source(src.read_text(), str(src), arch, defines, options, cache=None)


def ours(arch: str, dtype: str, hdim: int, causal: bool, emulate: bool) -> dict:
    defines = fmha_defines(arch, dtype=dtype, hdim_q=hdim, mask=fmha_mask_params(causal))
    t0 = time.perf_counter()
    k = compile_contiguous(arch, defines)
    seconds = time.perf_counter() - t0
    st = isa_stats(k.asm, k.manifest)
    row = {"compile": seconds, "instr": st.instructions, "mma": st.mfma + st.wmma, "vgpr": st.vgprs,
           "agpr": st.agprs, "lds": st.lds_bytes, "spills": st.vgpr_spills + st.sgpr_spills, "occ": st.occupancy,
           "emu": None}
    if emulate:
        cfg = fmha_config(arch, hdim, masked=causal)
        rng = np.random.default_rng(0)
        dt = np.float16 if dtype == "f16" else __import__("ml_dtypes").bfloat16
        q = rng.standard_normal((1, cfg.block_m, 1, hdim)).astype(dt)
        kv = rng.standard_normal((1, 256, 1, hdim)).astype(dt)
        dev = EmulatorDevice(arch)
        fmha_fwd(q, kv, kv, causal=causal, device=dev)
        row["emu"] = dev.last_stats["wave_instructions"]
    return row


def theirs(arch: str, dtype: str, hdim: int, causal: bool) -> dict | None:
    try:
        from triton_fa import compile_triton
    except ImportError:
        return None
    a = get_arch(arch)
    try:
        asm, md, seconds = compile_triton(arch, a.wave_size, dtype, hdim, causal)
    except Exception as exc:  # a peer's compiler failing is a data point, not our error
        return {"error": f"{type(exc).__name__}: {str(exc)[:60]}"}
    return {**triton_stats(asm, md, seconds, "attn_fwd", a, 4), "emu": None}


def fmt(who: str, r: dict | None) -> str:
    emu = "" if r is None or "error" in r else (f"{r['emu']:>10,}" if r["emu"] is not None else f"{'-':>10}")
    return format_row(who, r, emu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", default=list(ARCH_NAMES))
    ap.add_argument("--hdim", nargs="+", type=int, default=[64, 128])
    ap.add_argument("--dtype", nargs="+", default=["f16", "bf16"])
    ap.add_argument("--no-emulate", action="store_true", help="skip the emulated instruction counts")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # Cold compiles for Triton too: its own cache would otherwise answer repeated variants.
        os.environ["TRITON_CACHE_DIR"] = tmp
        print(f"{'':24} {HEADER} {'emu instr/tile':>10}")
        for arch in args.arch:
            for hdim in args.hdim:
                for dtype in args.dtype:
                    for causal in (False, True):
                        label = f"{arch:8} d{hdim:<3} {dtype:4} {'causal' if causal else 'full':6}"
                        print(f"{label} {fmt('tiledsl', ours(arch, dtype, hdim, causal, not args.no_emulate))}")
                        print(f"{'':24} {fmt('triton', theirs(arch, dtype, hdim, causal))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
