"""A peer for benchmarks/fmha_fwd.py: FlyDSL's flash-attention forward (ROCm/FlyDSL,
`kernels/attention/flash_attn_generic.py`), compiled by FlyDSL on this CPU and run on the emulator.

FlyDSL's wheel (`pip install flydsl==0.5.0 --no-deps`) carries the compiler, not the kernels: they
live in FlyDSL's source tree (`kernels/`, "not installed in the wheel"). Point FLYDSL_KERNELS at a
checkout (the directory holding `kernels/`); nothing of it is copied here.

Compiled as FlyDSL's own entry point (`flash_attn_interface.flydsl_flash_attn_func`) would build
it for a dense call: its tile rule `_dense_generic_tile` (a problem with fewer 128-row blocks than
the arch's CUs takes the 64-row, 128-thread "N32" tile, else 128 rows and 256 threads), its
defaults waves_per_eu 2 and daz. The compile runs in a child process with FlyDSL's COMPILE_ONLY
mode and its IR dump (where the code object and the ISA come from); ROCDL's serializer wants a ROCm
toolkit for `ld.lld` only, given here as a directory whose `llvm/bin/ld.lld` runs the ziglang LLD
the project already uses.

Which archs: FlyDSL's dense f16/bf16 attention targets gfx942 and gfx950 ("High-level FlyDSL
Flash Attention API for gfx950 / gfx942"); for this benchmark's shape on gfx950 its interface picks
the DUALWAVE_SWP kernel (another ABI, not wired here); other archs have no FlyDSL attention kernel.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

FLYDSL_VERSION = "0.5.0"
INSTALL = f"pip install flydsl=={FLYDSL_VERSION} --no-deps, and FLYDSL_KERNELS=<FlyDSL checkout>"
KERNEL = "flash_attn_generic_kernel_0"

_CHILD = r"""
import json, sys
import torch
cfg = json.loads(sys.argv[1])
sys.path.insert(0, cfg["kernels"])
from kernels.attention.flash_attn_generic import build_flash_attn_func_module
B, S, H, D = cfg["shape"]
dt = {"f16": torch.float16, "bf16": torch.bfloat16}[cfg["dtype"]]
launcher = build_flash_attn_func_module(num_heads=H, head_dim=D, causal=cfg["causal"], dtype_str=cfg["dtype"],
                                        num_kv_heads=H, block_m=cfg["block_m"],
                                        flat_work_group_size=cfg["threads"], path_tag=cfg["path"],
                                        waves_per_eu=2, daz=True)
q = torch.zeros(B, S, H, D, dtype=dt)
launcher.compile(q, q.clone(), q.clone(), q.clone(), B, S)
"""


def missing() -> str | None:
    """Why FlyDSL's attention cannot be built here (None when it can)."""
    if importlib.util.find_spec("flydsl") is None or importlib.util.find_spec("torch") is None:
        return f"not installed: {INSTALL}"
    root = os.environ.get("FLYDSL_KERNELS")
    if not root or not (Path(root) / "kernels" / "attention" / "flash_attn_generic.py").is_file():
        return "FLYDSL_KERNELS unset: FlyDSL's kernels are in its source tree, not its wheel"
    return None


def tile(arch: Any, b: int, s: int, h: int, d: int, dtype: str) -> tuple[int, int, str]:
    """FlyDSL's `_dense_generic_tile` for a head count below 32: (block_m, threads, path tag)."""
    if d in (64, 128) and dtype in ("f16", "bf16") and b * h * -(-s // 128) < (arch.compute_units or 256):
        return 64, 128, "N32"
    return 128, 256, "auto"


def _unescape(text: str) -> bytes:
    """An MLIR string attribute's bytes (`\\XX` hex escapes, `\\\\` and `\\"`)."""
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] == "\\" and re.fullmatch(r"[0-9A-Fa-f]{2}", text[i + 1:i + 3]):
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
        elif text[i] == "\\":
            out.append(ord(text[i + 1]))
            i += 2
        else:
            out.append(ord(text[i]))
            i += 1
    return bytes(out)


def compile_fwd(arch: Any, dtype: str, shape: tuple[int, int, int, int], causal: bool) -> dict:
    """Compile in a child process: {"asm", "hsaco", "seconds", "block_m", "threads", "tiles"}."""
    block_m, threads, path = tile(arch, *shape, dtype)
    with tempfile.TemporaryDirectory() as tmp:
        lld = Path(tmp) / "rocm" / "llvm" / "bin" / "ld.lld"
        lld.parent.mkdir(parents=True)
        lld.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ziglang ld.lld "$@"\n')
        lld.chmod(0o755)
        env = {**os.environ, "ROCM_PATH": str(Path(tmp) / "rocm"), "FLYDSL_GPU_ARCH": arch.name,
               "COMPILE_ONLY": "1", "FLYDSL_DUMP_IR": "1", "FLYDSL_DUMP_DIR": str(Path(tmp) / "dump"),
               "FLYDSL_RUNTIME_ENABLE_CACHE": "0", "HOME": tmp}
        cfg = {"kernels": os.environ["FLYDSL_KERNELS"], "shape": shape, "dtype": dtype, "causal": causal,
               "block_m": block_m, "threads": threads, "path": path}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cfg)], env=env, capture_output=True,
                              text=True, timeout=900)
        seconds = time.perf_counter() - t0  # includes the child's imports
        dump = Path(tmp) / "dump" / KERNEL
        if proc.returncode != 0 or not (dump / "22_final_isa.s").is_file():
            lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            raise RuntimeError(next((ln for ln in lines if "Error" in ln), lines[-1] if lines else "no output"))
        asm = (dump / "22_final_isa.s").read_text()
        binary = (dump / "20_gpu_module_to_binary.mlir").read_text()
    m = re.search(r'bin = "((?:[^"\\]|\\.)*)"', binary)
    return {"asm": asm, "hsaco": _unescape(m.group(1)), "seconds": seconds, "block_m": block_m,
            "threads": threads, "tiles": f"{block_m} rows t{threads} {path} e2"}


def run(dev: Any, compiled: dict, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Launch on `dev` for contiguous [B, S, H, D] q, k, v. FlyDSL's kernel ABI: per tensor its
    pointer and its dynamic layout (4 x i32 sizes, then the 3 non-unit strides as i64), then
    seq_len, seq_len_kv; the varlen/paged tensors (unused when dense) and LSE get the output."""
    b, s, h, d = q.shape
    kern = dev.kernel(compiled["hsaco"], KERNEL)
    bufs = [dev.to_device(x, n) for n, x in (("Q", q), ("K", k), ("V", v), ("O", np.zeros_like(q)))]

    def tensor(buf: Any) -> bytes:
        return struct.pack("<Q4i3q", buf.addr, b, s, h, d, s * h * d, h * d, d)

    o = tensor(bufs[3])
    ka = b"".join(tensor(x) for x in bufs[:3]) + o + o + struct.pack("<ii", s, s) + o + o + o + struct.pack("<i", 0)
    dev.launch(kern, (b * -(-s // compiled["block_m"]) * h, 1, 1), (compiled["threads"], 1, 1), ka)
    return dev.from_device(bufs[3], q.dtype, q.shape)


def fwd_row(arch: Any, dtype: str, qkv: list[np.ndarray], causal: bool, emulate: bool, pairs: int,
            check: Any) -> dict:
    """FlyDSL's forward as a benchmarks/fmha_fwd.py row, or {"skip": why}."""
    if (why := missing()) is not None:
        return {"skip": why}
    if arch.name == "gfx950":
        return {"skip": "flydsl: this shape routes to its gfx950 DUALWAVE_SWP kernel (not wired here)"}
    if arch.name != "gfx942":
        return {"skip": f"flydsl: no attention kernel for {arch.name} (gfx942/gfx950 only)"}
    from peer_rows import triton_stats

    try:
        c = compile_fwd(arch, dtype, qkv[0].shape, causal)
    except Exception as exc:  # the peer failing to compile is a data point
        return {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:100]}"}
    md = {"shared": int(re.search(r"\.group_segment_fixed_size:\s*(\d+)", c["asm"]).group(1))}
    row = {**triton_stats(c["asm"], md, c["seconds"], KERNEL, arch, c["threads"] // arch.wave_size), "dyn": None,
           "tiles": c["tiles"]}
    if emulate:
        from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
        from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

        dev = EmulatorDevice(arch)
        try:
            if lacks := dev.unsupported(dev.kernel(c["hsaco"], KERNEL)):
                names = dict.fromkeys(m.split("'")[1] if "'" in m else m for m in lacks)
                row["note"] = f"not run: the emulator lacks {', '.join(names)}"
            else:
                out = run(dev, c, *qkv)
                row["dyn"] = dev.last_stats["wave_instructions"] * 1000 / pairs
                if (bad := check(out)) is not None:
                    row["note"] = bad
        except UnsupportedInstruction as exc:
            row["note"] = f"not run: {str(exc).splitlines()[0][:100]}"
        except Exception as exc:
            row["note"] = f"not run: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    return row
