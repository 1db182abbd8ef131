"""A peer for benchmarks/fmha_fwd.py: flash-attention's AMD Triton backend as aiter ships it
(`aiter.ops.triton._triton_kernels.flash_attn_triton_amd`: the kernel `attn_fwd` behind
`flash_attn_2.fwd`, which flash-attention's ROCm build runs with FLASH_ATTENTION_TRITON_AMD_ENABLE),
loaded from the installed aiter package at benchmark time (benchmarks/aiter_fa.py installs and
loads it the same way; nothing of it is copied here). Unlike aiter's MHA kernels it has a config
for every arch, RDNA included: the one peer tuned by its authors for gfx1100 and gfx1201.

Compiled at its best, as a real call would: `flash_attn_2.fwd` runs on CPU torch tensors of the
benchmark's shape (flagged as device tensors for its device assertions), its `attn_fwd` launch is
recorded and compiled by Triton's JIT (the JIT's own specialization, benchmarks/aiter_fa.py), once
per config in `configs(arch)`:
- the package's own default for the arch (`get_fwd_configs(autotune=False)` of the pinned
  aiter; on gfx942 the variant for 304 CUs, MI300X, the arch table's count);
- aiter's newer default for the arch where it differs (ROCm/aiter main at commit 0936616,
  `get_fwd_prefill_configs("off")`: gfx942 and gfx950 128x64 with 4 warps; gfx1100 128x64 and
  other RDNA 128x32 with 8 warps and waves_per_eu 6), since the newest aiter on PyPI predates it.
The benchmark keeps the config that runs fastest (modeled) or, without the model, the fewest
executed instructions: a small autotune over the authors' own choices.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

import numpy as np
from aiter_fa import _PKG, Launch, _compile, _emulate, _load, _record, _static, _torch_of, missing

_FA = f"{_PKG}._triton_kernels.flash_attn_triton_amd"
_CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "waves_per_eu", "PRE_LOAD_V", "num_warps", "num_stages")


def _newer_default(arch: str) -> dict[str, Any] | None:
    """aiter main's default config for `arch` (see the module docstring), as compile options."""
    if arch in ("gfx942", "gfx950"):
        bm, bn, warps, wpe = 128, 64, 4, 2
    elif arch in ("gfx1100", "gfx1201"):
        bm, bn, warps, wpe = 128, 64 if arch == "gfx1100" else 32, 8, 6
    else:
        return None
    return {"BLOCK_M": bm, "BLOCK_N": bn, "waves_per_eu": wpe, "PRE_LOAD_V": False, "num_warps": warps,
            "num_stages": 1}


def _modules(arch: str, wave_size: int, compute_units: int) -> tuple[types.ModuleType, types.ModuleType]:
    """flash_attn_triton_amd's `interface_v2` and `fwd_prefill` with `arch` current. Its package
    `__init__` is bypassed (aiter_fa._load registers it as a stub for aiter's mha module); its arch
    and CU queries are answered from the benchmark's arch (they would ask a GPU)."""
    _load(arch, wave_size)
    pkg = sys.modules[_FA]
    if not hasattr(pkg, "__path__"):
        pkg.__path__ = [sys.modules["aiter"].__path__[0] + "/ops/triton/_triton_kernels/flash_attn_triton_amd"]
    utils = importlib.import_module(f"{_FA}.utils")
    utils.get_cu_count = lambda: compute_units
    for cached in (utils.get_arch, utils.is_rdna, utils.is_cdna):
        cached.cache_clear()  # functools.cache: another arch may have asked first
    fwd = importlib.import_module(f"{_FA}.fwd_prefill")
    fwd.get_cu_count = utils.get_cu_count
    return importlib.import_module(f"{_FA}.interface_v2"), fwd


def configs(arch: Any) -> list[dict[str, Any]]:
    """The configs tried for `arch` (an Arch), as compile options: the package's default(s), then
    aiter main's newer default where it differs."""
    _iface, fwd = _modules(arch.name, arch.wave_size, arch.compute_units)
    found = [{k: c.all_kwargs()[k] for k in _CONFIG_KEYS} for c in fwd.get_fwd_configs(False)[0]]
    newer = _newer_default(arch.name)
    return found + ([newer] if newer is not None and newer not in found else [])


def tiles(config: dict[str, Any]) -> str:
    c = config
    return f"{c['BLOCK_M']}x{c['BLOCK_N']} w{c['num_warps']} s{c['num_stages']} e{c['waves_per_eu']}"


def compile_fwd(arch: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool,
                config: dict[str, Any]) -> tuple[Launch, dict[str, Any]]:
    """The forward for contiguous [B, S, H, D] q, k, v with `config`: the compiled launch and the
    torch tensors it reads and writes (`o`, `lse`)."""
    import torch

    class DeviceTensor(torch.Tensor):  # the interface asserts its inputs live on the current device
        @property
        def is_cuda(self) -> bool:
            return True

    iface, fwd = _modules(arch.name, arch.wave_size, arch.compute_units)
    tq, tk, tv = (_torch_of(x).as_subclass(DeviceTensor) for x in (q, k, v))
    saved = torch.cuda.current_device
    torch.cuda.current_device = lambda: None  # a CPU tensor's device index
    try:
        log = _record(fwd, ("attn_fwd",), iface.fwd, tq, tk, tv, None, None, 0.0, q.shape[-1] ** -0.5, causal,
                      -1, -1, 0.0, False)
    finally:
        torch.cuda.current_device = saved
    (tuner, grid, args, kwargs), = log
    launch = _compile(tuner.fn, grid, args, kwargs | config)  # the autotuner's kernel with this config
    return launch, {"o": launch.values["Out"], "lse": launch.values["LSE"]}


def fwd_row(arch: Any, qkv: list[np.ndarray], causal: bool, emulate: bool, pairs: int, check: Any) -> dict:
    """The best config's row for benchmarks/fmha_fwd.py (fewest executed instructions per pair,
    static instructions per MFMA/WMMA where it could not run), with `config` for the modeled run
    and the other configs' figures in its note."""
    if (why := missing()) is not None:
        return {"skip": why}
    rows = []
    for config in configs(arch):
        try:
            ln, tensors = compile_fwd(arch, *qkv, causal, config)
        except Exception as exc:  # the peer failing to compile is a data point
            rows.append({"error": f"{tiles(config)}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:80]}"})
            continue
        row = {**_static(ln, arch), "tiles": tiles(config), "config": config}
        if emulate and (ran := _emulate(row, arch, [ln], tensors)) is not None:
            out, counts = ran
            row["dyn"] = counts[0] * 1000 / pairs
            if (bad := check(out["o"])) is not None:
                row["note"] = bad
        rows.append(row)
    ran = [r for r in rows if "error" not in r]
    if not ran:
        return rows[0]

    def key(r: dict) -> tuple:
        return (r["spills"] > 0, r["dyn"] is None, r["dyn"] if r["dyn"] is not None else r["instr"] / max(r["mma"], 1))

    best = min(ran, key=key)
    others = [f"{r['tiles']} {r['dyn']:.1f}" if r.get("dyn") is not None else r.get("error", r["tiles"])
              for r in rows if r is not best]
    if others:
        best = {**best, "note": "; ".join(([best["note"]] if "note" in best else []) + ["also " + ", ".join(others)])}
    return best


def model_runs(arch: Any, data: list[np.ndarray], causal: bool) -> dict[str, Any]:
    """`run(dev)` per config for the timing model (benchmarks/peer_rows.model_with_ceiling), by tiles."""
    from aiter_fa import run

    def runner(config: dict[str, Any]) -> Any:
        def launch(dev: Any) -> None:
            ln, tensors = compile_fwd(arch, *data, causal, config)
            run(dev, [ln], tensors)
        return launch

    return {tiles(c): runner(c) for c in configs(arch)} if missing() is None else {}
