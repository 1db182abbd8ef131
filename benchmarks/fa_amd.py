"""A peer for benchmarks/fmha_fwd.py and fmha_bwd.py: flash-attention's AMD Triton backend as aiter
ships it (`aiter.ops.triton._triton_kernels.flash_attn_triton_amd`: the kernel `attn_fwd` behind
`flash_attn_2.fwd`, and `_bwd_preprocess` with the fused dK/dV/dQ kernel `bwd_kernel_fused_causal` /
`bwd_kernel_fused_noncausal` behind `flash_attn_2.bwd`, its default "fused" mode), which
flash-attention's ROCm build runs with FLASH_ATTENTION_TRITON_AMD_ENABLE, loaded from the installed
aiter package at benchmark time (benchmarks/aiter_fa.py installs and loads it the same way; nothing
of it is copied here). Unlike aiter's MHA kernels it has a config for every arch, RDNA included: the
one peer tuned by its authors for gfx1100 and gfx1201.

Compiled at its best, as a real call would: `flash_attn_2.fwd` / `.bwd` runs on CPU torch tensors of
the benchmark's shape (flagged as device tensors for its device assertions), its kernel launches are
recorded and compiled by Triton's JIT (the JIT's own specialization, benchmarks/aiter_fa.py), once
per config in `configs(arch)` (forward) or `bwd_configs(arch, causal)` (backward):
- the package's own default for the arch (`get_fwd_configs(autotune=False)` /
  `get_bwd_configs(False)` of the pinned aiter: a list its autotuner times on a GPU; on gfx942 the
  variant for 304 CUs, MI300X, the arch table's count);
- aiter's newer default for the arch where it differs (ROCm/aiter main at commit 0936616,
  `get_fwd_prefill_configs("off")`: gfx942 and gfx950 128x64 with 4 warps; gfx1100 128x64 and
  other RDNA 128x32 with 8 warps and waves_per_eu 6; `get_bwd_configs("off")`: gfx942 the first
  pinned config with matrix_instr_nonkdim 16, RDNA 32x32 blocks with 4 warps and a 32-row
  preprocess), since the newest aiter on PyPI predates it.
The benchmark keeps the config that runs fastest (modeled) or, without the model, the fewest
executed instructions: a small autotune over the authors' own choices. The backward's preprocess
(Delta) has its own autotuner: the model times each of its configs alone and charges the fastest.
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
_BWD_KERNELS = ("_bwd_preprocess", "bwd_kernel_fused_causal", "bwd_kernel_fused_noncausal")


def _newer_default(arch: str) -> dict[str, Any] | None:
    """aiter main's default forward config for `arch` (see the module docstring), as compile options."""
    if arch in ("gfx942", "gfx950"):
        bm, bn, warps, wpe = 128, 64, 4, 2
    elif arch in ("gfx1100", "gfx1201"):
        bm, bn, warps, wpe = 128, 64 if arch == "gfx1100" else 32, 8, 6
    else:
        return None
    return {"BLOCK_M": bm, "BLOCK_N": bn, "waves_per_eu": wpe, "PRE_LOAD_V": False, "num_warps": warps,
            "num_stages": 1}


def _newer_bwd_default(arch: str, pinned: list[dict[str, Any]]) -> dict[str, Any] | None:
    """aiter main's default backward config for `arch` ({"pre": ..., "main": ...}; see the module
    docstring): gfx942 and gfx950 take the first pinned config (gfx942 with 16x16 MFMAs), RDNA its own."""
    if arch == "gfx942":
        return {**pinned[0], "main": {**pinned[0]["main"], "matrix_instr_nonkdim": 16}}
    if arch in ("gfx1100", "gfx1201"):
        blocks = dict.fromkeys(("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2"), 32)
        return {"pre": {"PRE_BLOCK": 32, "num_warps": 4, "num_stages": 1},
                "main": {**blocks, "BLK_SLICE_FACTOR": 2, "num_warps": 4, "num_stages": 1}}
    return None


def _modules(arch: str, wave_size: int, compute_units: int) -> dict[str, types.ModuleType]:
    """flash_attn_triton_amd's `interface_v2`, `fwd_prefill` and `bwd` (by those names) with `arch`
    current. Its package `__init__` is bypassed (aiter_fa._load registers it as a stub for aiter's
    mha module); its arch and CU queries are answered from the benchmark's arch (they would ask a GPU)."""
    _load(arch, wave_size)
    pkg = sys.modules[_FA]
    if not hasattr(pkg, "__path__"):
        pkg.__path__ = [sys.modules["aiter"].__path__[0] + "/ops/triton/_triton_kernels/flash_attn_triton_amd"]
    utils = importlib.import_module(f"{_FA}.utils")
    utils.get_cu_count = lambda: compute_units
    for cached in (utils.get_arch, utils.is_rdna, utils.is_cdna):
        cached.cache_clear()  # functools.cache: another arch may have asked first
    mods = {name: importlib.import_module(f"{_FA}.{name}") for name in ("fwd_prefill", "bwd", "interface_v2")}
    for m in mods.values():  # each took the query by name when it was imported (the bwd module: its configs)
        m.get_cu_count = utils.get_cu_count
    return mods


def _options(config: Any) -> dict[str, Any]:
    """A triton.Config as compile options: its meta-parameters, warps and stages."""
    return {k: v for k, v in config.all_kwargs().items() if k in config.kwargs or k in ("num_warps", "num_stages")}


def configs(arch: Any) -> list[dict[str, Any]]:
    """The forward configs tried for `arch` (an Arch), as compile options: the package's default(s),
    then aiter main's newer default where it differs."""
    fwd = _modules(arch.name, arch.wave_size, arch.compute_units)["fwd_prefill"]
    found = [{k: c.all_kwargs()[k] for k in _CONFIG_KEYS} for c in fwd.get_fwd_configs(False)[0]]
    newer = _newer_default(arch.name)
    return found + ([newer] if newer is not None and newer not in found else [])


def _bwd_tables(arch: Any, causal: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pinned package's default preprocess and main-kernel configs for `arch`, as compile options."""
    bwd = _modules(arch.name, arch.wave_size, arch.compute_units)["bwd"]
    (pre, _), (causal_cfgs, _), (noncausal_cfgs, _) = bwd.get_bwd_configs(False)
    return [_options(c) for c in pre], [_options(c) for c in (causal_cfgs if causal else noncausal_cfgs)]


def bwd_configs(arch: Any, causal: bool) -> list[dict[str, Any]]:
    """The backward configs tried for `arch`, {"pre": preprocess options, "main": dK/dV/dQ kernel
    options}: each of the package's default main configs with its first preprocess config, then aiter
    main's newer default where it differs; `pre_configs` lists every preprocess config."""
    pre, mains = _bwd_tables(arch, causal)
    found = [{"pre": pre[0], "main": c} for c in mains]
    newer = _newer_bwd_default(arch.name, found)
    return found + ([newer] if newer is not None and newer not in found else [])


def pre_configs(arch: Any, causal: bool) -> list[dict[str, Any]]:
    """Every preprocess config of `arch` (the package's list, then the newer default's), as compile options."""
    found = _bwd_tables(arch, causal)[0]
    return found + [c["pre"] for c in bwd_configs(arch, causal) if c["pre"] not in found][:1]


def tiles(config: dict[str, Any]) -> str:
    """A config's tiles (forward: BLOCK_M x BLOCK_N; backward: BLOCK_M1/N1/M2/N2), warps, stages,
    waves per EU (and a non-default MFMA size); the backward's preprocess block after "pre"."""
    if "main" in config:
        c, p = config["main"], config["pre"]
        blocks = "/".join(str(c[k]) for k in ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2"))
        return f"{blocks}{_opts(c)} pre {p['PRE_BLOCK']}{_opts(p)}"
    return f"{config['BLOCK_M']}x{config['BLOCK_N']}{_opts(config)}"


def _opts(c: dict[str, Any]) -> str:
    return "".join(f" {s}{c[k]}" for k, s in (("num_warps", "w"), ("num_stages", "s"), ("waves_per_eu", "e"),
                                              ("matrix_instr_nonkdim", "k")) if k in c)


def _call(arch: Any, module: str, names: tuple[str, ...], entry: str, tensors: list[Any], *args: Any) -> list:
    """Record the launches of kernels `names` of module `module` that `interface_v2.<entry>` makes for
    torch `tensors` (flagged as device tensors: the interface asserts its inputs live on the current
    device) followed by `args`."""
    import torch

    class DeviceTensor(torch.Tensor):
        @property
        def is_cuda(self) -> bool:
            return True

    mods = _modules(arch.name, arch.wave_size, arch.compute_units)
    saved = torch.cuda.current_device
    torch.cuda.current_device = lambda: None  # a CPU tensor's device index
    try:
        return _record(mods[module], names, getattr(mods["interface_v2"], entry),
                       *(t.as_subclass(DeviceTensor) for t in tensors), *args)
    finally:
        torch.cuda.current_device = saved


def compile_fwd(arch: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool,
                config: dict[str, Any]) -> tuple[Launch, dict[str, Any]]:
    """The forward for contiguous [B, S, H, D] q, k, v with `config`: the compiled launch and the
    torch tensors it reads and writes (`o`, `lse`)."""
    log = _call(arch, "fwd_prefill", ("attn_fwd",), "fwd", [_torch_of(x) for x in (q, k, v)], None, None, 0.0,
                q.shape[-1] ** -0.5, causal, -1, -1, 0.0, False)
    (tuner, grid, args, kwargs), = log
    launch = _compile(tuner.fn, grid, args, kwargs | config)  # the autotuner's kernel with this config
    return launch, {"o": launch.values["Out"], "lse": launch.values["LSE"]}


def compile_bwd(arch: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, lse: np.ndarray,
                do: np.ndarray, causal: bool, config: dict[str, Any] | None = None) -> tuple[list[Launch], dict]:
    """The backward for contiguous [B, S, H, D] q, k, v, o, do and `lse` [B, H, S] (natural log, as
    its forward writes it) with `config` (bwd_configs; default the first): every launch it makes,
    compiled in order (the preprocess, Delta, then the fused dK/dV/dQ kernel), and the torch
    tensors (`dq`, `dk`, `dv`, `delta`)."""
    import torch

    config = config or bwd_configs(arch, causal)[0]
    t = {n: _torch_of(x) for n, x in (("do", do), ("q", q), ("k", k), ("v", v), ("o", o))}
    t["lse"] = torch.from_numpy(np.ascontiguousarray(lse, np.float32))
    t["dq"], t["dk"], t["dv"] = (torch.zeros_like(t[n]) for n in ("q", "k", "v"))
    log = _call(arch, "bwd", _BWD_KERNELS, "bwd", list(t.values()), None, 0.0, q.shape[-1] ** -0.5, causal,
                -1, -1, 0.0, False)
    launches = []
    for tuner, grid, args, kwargs in log:  # each autotuner's kernel with this config
        launches.append(_compile(tuner.fn, grid, args, kwargs | config["pre" if len(launches) == 0 else "main"]))
    values = launches[-1].values  # the interface's own dq, dk, dv (it zeroes the ones passed) and Delta
    return launches, {"dq": values["DQ"], "dk": values["DK"], "dv": values["DV"], "delta": values["Delta"]}


def _tuned_row(arch: Any, cfgs: list[dict[str, Any]], build: Any, emulate: bool, pairs: int, check: Any) -> dict:
    """The best config's row (fewest executed instructions per pair of its last launch, static
    instructions per MFMA/WMMA where it could not run; spilling configs last), with `config` for
    the modeled run, `candidates` (every config that compiled, best first) and the other configs'
    figures in its note. `build(config)` returns (launches, tensors); `check(out)`
    None or what differs from the reference."""
    rows = []
    for config in cfgs:
        try:
            launches, tensors = build(config)
        except Exception as exc:  # the peer failing to compile is a data point
            rows.append({"error": f"{tiles(config)}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:80]}"})
            continue
        row = {**_static(launches[-1], arch), "tiles": tiles(config), "config": config}
        if emulate and (ran := _emulate(row, arch, launches, tensors)) is not None:
            out, counts = ran
            row["dyn"] = counts[-1] * 1000 / pairs
            if (bad := check(out)) is not None:
                row["note"] = bad
        rows.append(row)
    ran = [r for r in rows if "error" not in r]
    if not ran:
        return rows[0]

    def key(r: dict) -> tuple:
        return (r["spills"] > 0, r["dyn"] is None, r["dyn"] if r["dyn"] is not None else r["instr"] / max(r["mma"], 1))

    ranked = sorted(ran, key=key)
    best = {**ranked[0], "candidates": [r["config"] for r in ranked]}
    others = [r.get("error", r["tiles"]) + (f" {r['dyn']:.1f}" if r.get("dyn") is not None else "")
              + (f" spills {r['spills']}" if r.get("spills") else "") for r in rows if r is not ranked[0]]
    if others:
        best["note"] = "; ".join(([best["note"]] if "note" in best else []) + ["also " + ", ".join(others)])
    return best


def fwd_row(arch: Any, qkv: list[np.ndarray], causal: bool, emulate: bool, pairs: int, check: Any) -> dict:
    """The best forward config's row for benchmarks/fmha_fwd.py (_tuned_row)."""
    if (why := missing()) is not None:
        return {"skip": why}

    def build(config: dict[str, Any]) -> tuple[list[Launch], dict]:
        ln, tensors = compile_fwd(arch, *qkv, causal, config)
        return [ln], tensors

    return _tuned_row(arch, configs(arch), build, emulate, pairs, lambda out: check(out["o"]))


def bwd_row(arch: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, causal: bool, emulate: bool,
            pairs: int, check: Any) -> dict:
    """The best backward config's row for benchmarks/fmha_bwd.py (_tuned_row: the figures of the
    fused dK/dV/dQ kernel; its preprocess, like our dot_do_o, is not counted). O and LSE come from
    this backend's own forward (its first config) run on the emulator (static figures only without
    emulation); `check(dq, dk, dv)` returns None or what differs."""
    if (why := missing()) is not None:
        return {"skip": why}
    o, lse = np.zeros_like(q), np.zeros(q.shape[:1] + q.shape[2:3] + q.shape[1:2], np.float32)
    fwd_row: dict = {}
    try:
        cfgs = bwd_configs(arch, causal)
        if emulate:
            fwd, ftensors = compile_fwd(arch, q, k, v, causal, configs(arch)[0])
            if (ran := _emulate(fwd_row, arch, [fwd], ftensors)) is None:
                emulate = False  # static figures only, and the row says why
            else:
                o, lse = ran[0]["o"].astype(q.dtype), ran[0]["lse"]
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:100]}"}
    row = _tuned_row(arch, cfgs, lambda c: compile_bwd(arch, q, k, v, o, lse, do, causal, c), emulate, pairs,
                     lambda out: check(out["dq"], out["dk"], out["dv"]))
    if "note" in fwd_row and "error" not in row:
        notes = [f"its forward (for O and LSE) {fwd_row['note']}"] + ([row["note"]] if "note" in row else [])
        row["note"] = "; ".join(notes)
    return row


def model_runs(arch: Any, data: list[np.ndarray], causal: bool) -> dict[str, Any]:
    """`run(dev)` per forward config for the timing model (benchmarks/peer_rows.model_with_ceiling), by tiles."""
    from aiter_fa import run

    def runner(config: dict[str, Any]) -> Any:
        def launch(dev: Any) -> None:
            ln, tensors = compile_fwd(arch, *data, causal, config)
            run(dev, [ln], tensors)
        return launch

    return {tiles(c): runner(c) for c in configs(arch)} if missing() is None else {}


def bwd_model_runs(arch: Any, data: list[np.ndarray], causal: bool, flops: float,
                   cfgs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`run(dev)` per backward config (`cfgs`, default bwd_configs) for the timing model, by tiles,
    for data (q, k, v, o, lse, do): each launches the preprocess config the model times fastest
    alone (its own autotuner's pick; `flops` only scales the figures it compares), then the
    config's dK/dV/dQ kernel."""
    from aiter_fa import run
    from peer_rows import fastest, model_tflops

    if missing() is not None:
        return {}

    def runner(config: dict[str, Any], launched: slice) -> Any:
        def launch(dev: Any) -> None:
            launches, tensors = compile_bwd(arch, *data, causal, config)
            run(dev, launches[launched], tensors)
        return launch

    cfgs = cfgs or bwd_configs(arch, causal)
    pres = pre_configs(arch, causal)
    if len(pres) > 1:
        timed = {i: model_tflops(arch, flops, runner({**cfgs[0], "pre": p}, slice(0, 1))) for i, p in enumerate(pres)}
        cfgs = [{**c, "pre": pres[fastest(timed)]} for c in cfgs]
    return {tiles(c): runner(c, slice(None)) for c in cfgs}
