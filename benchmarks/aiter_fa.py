"""A peer for benchmarks/fmha_fwd.py and fmha_bwd.py: aiter's Triton MHA (AMD's kernel library,
`aiter.ops.triton.mha`: `_attn_fwd`, and the one-kernel backward `bwd_kernel_causal` /
`bwd_kernel_noncausal` with its `_bwd_preprocess`), loaded from the installed package at
benchmark time (`pip install amd-aiter==0.1.7.post2.dev18 --no-deps`; benchmark-only, nothing of
it is copied here).

Compiled at its best, as a real call would: aiter's own dispatcher (`_flash_attn_forward`,
`flash_attn_onekernel_backward`) runs on CPU torch tensors of the benchmark's shape and picks its
config for the arch (its `MI300X-MHA-DEFAULT.json` / `MI350X-MHA-DEFAULT.json`; it ships none for
gfx90a, gfx1100 or gfx1201, and says so by failing); each kernel launch it makes is recorded and
compiled by Triton's JIT itself (`JITFunction.run(warmup=True)`: the JIT's own specialization --
16-byte divisibility of pointers and integers, integers equal to 1 and `None` arguments as
constants). aiter does not autotune these kernels: its one config per arch is its best.

aiter's package `__init__` loads its C++ extensions (ROCm only): it is bypassed by registering
the three parent packages as plain namespaces, and the "current device" aiter and Triton ask for
is a stand-in Triton driver that names the benchmark's arch. The flash-attention backend aiter's
`mha` module imports at load time (`flash_attn_triton_amd`, unused by these entry points, and
querying a GPU while it loads) is replaced by an empty module.
"""

from __future__ import annotations

import importlib
import importlib.util
import struct
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np

AITER_VERSION = "0.1.7.post2.dev18"
INSTALL = f"pip install amd-aiter=={AITER_VERSION} --no-deps"
# aiter's own arch -> device name table (utils/_triton/arch_info.py) decides which config file exists.
_PKG = "aiter.ops.triton"


def missing() -> str | None:
    """Why aiter cannot be used here (None when it can)."""
    for mod in ("torch", "triton"):
        if importlib.util.find_spec(mod) is None:
            return f"not installed: {mod} (aiter's kernels need it)"
    if "aiter" not in sys.modules and importlib.util.find_spec("aiter") is None:
        return f"not installed: {INSTALL}"
    return None


def _driver(arch: str, wave_size: int) -> Any:
    """A Triton driver that only answers 'which target is current': what aiter's config lookup and
    Triton's JIT ask before compiling."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class TargetOnlyDriver(DriverBase):
        def __init__(self) -> None:
            self.target = GPUTarget("hip", arch, wave_size)

        @classmethod
        def is_active(cls) -> bool:
            return False

        def get_current_target(self) -> Any:
            return self.target

        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

        def get_active_torch_device(self) -> Any:
            return torch.device("cpu")

        def map_python_to_cpp_type(self, ty: str) -> str:
            raise NotImplementedError

        def get_benchmarker(self) -> Any:
            raise NotImplementedError

        def get_device_interface(self) -> Any:
            raise NotImplementedError

        def get_empty_cache_for_benchmark(self) -> Any:
            raise NotImplementedError

        def clear_cache(self, cache: Any) -> None:
            raise NotImplementedError

    return TargetOnlyDriver()


def _load(arch: str, wave_size: int) -> dict[str, types.ModuleType]:
    """aiter's mha entry modules with `arch` as the current device (see the module docstring)."""
    import triton

    triton.runtime.driver.set_active(_driver(arch, wave_size))
    if "aiter" not in sys.modules:
        root = importlib.util.find_spec("aiter").submodule_search_locations[0]
        for name, sub in (("aiter", ""), ("aiter.ops", "/ops"), (_PKG, "/ops/triton")):
            pkg = types.ModuleType(name)
            pkg.__path__ = [root + sub]
            sys.modules[name] = pkg
    fa = f"{_PKG}._triton_kernels.flash_attn_triton_amd"
    if fa not in sys.modules:
        stub = types.ModuleType(fa)
        stub.flash_attn_2 = None
        sys.modules[fa] = stub
    arch_info = importlib.import_module(f"{_PKG}.utils._triton.arch_info")
    arch_info.get_arch = lambda: arch
    mods = {"mha": importlib.import_module(f"{_PKG}.mha"),
            "bwd": importlib.import_module(f"{_PKG}.mha_onekernel_bwd"),
            "kfwd": importlib.import_module(f"{_PKG}._triton_kernels.mha"),
            "kbwd": importlib.import_module(f"{_PKG}._triton_kernels.mha_onekernel_bwd")}
    for m in (mods["kfwd"], mods["kbwd"]):  # configs are cached per process: drop another arch's
        m._get_config.cache_clear()
        if hasattr(m._get_config, "_config_dict"):
            del m._get_config._config_dict
    return mods


@dataclass
class Launch:
    """One `kernel[grid](...)` call aiter's dispatcher made, compiled as Triton's JIT compiles it."""
    name: str
    grid: tuple[int, int, int]
    values: dict[str, Any]  # every parameter by name (constexprs included)
    config: dict[str, Any]
    asm: str = ""
    metadata: dict = field(default_factory=dict)
    hsaco: bytes = b""
    signature: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def warps(self) -> int:
        return int(self.metadata["num_warps"])

    @property
    def tiles(self) -> str:
        c = self.config
        blocks = "/".join(str(c[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2")
                          if k in c)
        extra = "".join(f" {s}{c[k]}" for k, s in (("num_warps", "w"), ("num_stages", "s"), ("waves_per_eu", "e"))
                        if k in c)
        return blocks + extra + (" preload_v" if c.get("PRELOAD_V") else "")


_OPTIONS = ("num_warps", "num_stages", "num_ctas", "waves_per_eu", "matrix_instr_nonkdim", "kpack")


class _Recorder:
    def __init__(self, jit: Any, log: list) -> None:
        self.jit, self.log = jit, log

    def __getitem__(self, grid: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            self.log.append((self.jit, grid, args, kwargs))
        return call


def _record(module: types.ModuleType, names: tuple[str, ...], entry: Any, *args: Any, **kwargs: Any) -> list:
    """Run aiter's dispatcher `entry` with the kernels `names` of `module` replaced by recorders."""
    log: list = []
    saved = {n: getattr(module, n) for n in names}
    try:
        for n in names:
            setattr(module, n, _Recorder(saved[n], log))
        entry(*args, **kwargs)
    finally:
        for n, jit in saved.items():
            setattr(module, n, jit)
    return log


def _compile(jit: Any, grid: Any, args: tuple, kwargs: dict) -> Launch:
    values = dict(zip(jit.arg_names, args, strict=False)) | {k: v for k, v in kwargs.items() if k in jit.arg_names}
    g = tuple(grid(values) if callable(grid) else grid)
    g = (*g, *(1,) * (3 - len(g)))
    jit.device_caches.clear()  # the JIT caches the target per device: this call's arch may differ
    t0 = time.perf_counter()
    kern = jit.run(*args, grid=grid, warmup=True, **kwargs)  # the JIT's own specialization and compile
    seconds = time.perf_counter() - t0
    config = {k: v for k, v in kwargs.items() if k in _OPTIONS or k.startswith(("BLOCK_", "PRELOAD"))}
    return Launch(jit.__name__, g, values, config, kern.asm["amdgcn"], dict(kern.metadata._asdict()),
                  kern.asm["hsaco"], dict(kern.src.signature), seconds)


def _torch_of(x: np.ndarray) -> Any:
    import torch

    if x.dtype.name == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(x))


def _numpy_of(t: Any) -> np.ndarray:
    return t.detach().contiguous().view(-1).view(__import__("torch").uint8).numpy()


def compile_fwd(arch: str, wave_size: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                causal: bool) -> tuple[Launch, dict[str, Any]]:
    """aiter's forward for contiguous [B, S, H, D] q, k, v: the compiled launch and the torch
    tensors its dispatcher made (`o`, `softmax_lse`). Raises KeyError for an arch aiter has no config for."""
    mods = _load(arch, wave_size)
    tq, tk, tv = (_torch_of(x) for x in (q, k, v))
    d = q.shape[-1]
    log = _record(mods["mha"], ("_attn_fwd",), mods["mha"]._flash_attn_forward, tq, tk, tv, 0.0, d ** -0.5, causal,
                  -1, -1, None, None, True, False, q.shape[1], k.shape[1])
    (jit, grid, args, kwargs), = log
    launch = _compile(jit, grid, args, kwargs)
    return launch, {"q": tq, "k": tk, "v": tv, "o": launch.values["out_ptr"], "lse": launch.values["softmax_lse_ptr"]}


def compile_bwd(arch: str, wave_size: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray,
                lse: np.ndarray, do: np.ndarray, causal: bool) -> tuple[list[Launch], dict[str, Any]]:
    """aiter's default backward (the one-kernel path `flash_attn_func` takes): its preprocess and
    its dK/dV/dQ kernel, compiled, and the tensors (`dq`, `dk`, `dv`, `delta`)."""
    import torch

    mods = _load(arch, wave_size)
    t = {n: _torch_of(x) for n, x in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do))}
    t["lse"] = torch.from_numpy(np.ascontiguousarray(lse, np.float32))
    t["dq"], t["dk"], t["dv"] = torch.zeros_like(t["q"]), torch.empty_like(t["k"]), torch.empty_like(t["v"])
    log = _record(mods["bwd"], ("_bwd_preprocess", "bwd_kernel_causal", "bwd_kernel_noncausal"),
                  mods["bwd"].flash_attn_onekernel_backward, t["do"], t["q"], t["k"], t["v"], t["o"], t["lse"],
                  t["dq"], t["dk"], t["dv"], None, q.shape[-1] ** -0.5, None, causal, None, None,
                  max_seqlen_q=q.shape[1], max_seqlen_k=k.shape[1], dropout_p=0.0,
                  USE_INT64_STRIDES=mods["mha"]._USE_INT64_STRIDES)
    launches = [_compile(*entry) for entry in log]
    t["delta"] = launches[0].values["delta_ptr"] if "delta_ptr" in launches[0].values else None
    return launches, t


def compile_decode(arch: str, wave_size: int, q: np.ndarray, kc: np.ndarray, vc: np.ndarray, seq_lens: np.ndarray,
                   table: np.ndarray) -> tuple[list[Launch], dict[str, Any]]:
    """aiter's paged-attention decode (`aiter.ops.triton.pa_decode.paged_attention_decode`, its own
    choice of the one-pass or the partitioned kernel and reduce) for q [B, Hq, D] and caches
    [pages, Hk, page, D] (its layout), compiled: the launches and tensors (`o`)."""
    import torch
    import triton.language as tl

    _load(arch, wave_size)
    pa = importlib.import_module(f"{_PKG}.pa_decode")
    t = {"q": _torch_of(q), "kc": _torch_of(kc), "vc": _torch_of(vc),
         "seq_lens": torch.from_numpy(np.ascontiguousarray(seq_lens, np.int32)),
         "table": torch.from_numpy(np.ascontiguousarray(table, np.int32))}
    t["o"] = torch.empty_like(t["q"])
    one = torch.ones(1, dtype=torch.float32)
    names = tuple(n for n in vars(pa) if n.startswith("_paged_attn_decode_"))
    log = _record(pa, names, pa.paged_attention_decode, t["o"], t["q"], t["kc"], t["vc"], t["seq_lens"], t["table"],
                  q.shape[-1] ** -0.5, int(seq_lens.max()), tl.float16 if q.dtype == np.float16 else tl.bfloat16,
                  one, one)
    return [_compile(*entry) for entry in log], t


def run(dev: Any, launches: list[Launch], tensors: dict[str, Any]) -> tuple[dict[str, np.ndarray], list[int]]:
    """Run compiled launches in order on `dev` (a tiledsl Device), every torch tensor argument in a
    device buffer of its own (shared between launches); returns the named `tensors` read back as
    numpy arrays and each launch's executed wave-instructions."""
    import torch

    bufs: dict[int, Any] = {}
    scratch = dev.to_device(np.zeros(16, np.uint8), "scratch")

    def addr(t: Any, name: str) -> int:
        if t.data_ptr() not in bufs:
            bufs[t.data_ptr()] = (dev.to_device(_numpy_of(t), name), t)
        return bufs[t.data_ptr()][0].addr

    counts = []
    for ln in launches:
        kern = dev.kernel(ln.hsaco, ln.name)
        runtime = [(n, ty) for n, ty in ln.signature.items() if ty != "constexpr"]
        args = [a for a in kern.meta[".args"] if not a.get(".value_kind", "").startswith("hidden_")]
        ka = bytearray(args[-1][".offset"] + args[-1][".size"])
        for i, arg in enumerate(args):
            if i >= len(runtime):  # Triton's global and profile scratch pointers
                struct.pack_into("<Q", ka, arg[".offset"], scratch.addr)
                continue
            name, ty = runtime[i]
            value = ln.values[name]
            if ty.startswith("*"):
                struct.pack_into("<Q", ka, arg[".offset"], addr(value, name))
            else:
                fmt = {"i32": "<i", "u32": "<I", "i64": "<q", "u64": "<Q", "fp32": "<f", "i1": "<B"}[ty]
                struct.pack_into(fmt, ka, arg[".offset"], float(value) if ty == "fp32" else int(value))
        dev.launch(kern, ln.grid, (ln.warps * dev.arch.wave_size, 1, 1), bytes(ka),
                   dynamic_lds=int(ln.metadata["shared"]))
        counts.append(dev.last_stats.get("wave_instructions", 0))  # none when the device only models time
    out = {}
    for name, t in tensors.items():
        if t is None or t.data_ptr() not in bufs:
            continue
        raw = dev.copy_out(bufs[t.data_ptr()][0], t.numel() * t.element_size())
        host = torch.frombuffer(bytearray(raw), dtype=t.dtype).reshape(t.shape)
        out[name] = host.float().numpy() if t.dtype == torch.bfloat16 else host.numpy()
    return out, counts


def _no_config(exc: KeyError, arch: str) -> str:
    return f"aiter: no {arch} config (it ships MI300X/gfx942 and MI350X/gfx950 only)" if exc.args == (arch,) \
        else f"KeyError: {exc}"


def _static(ln: Launch, arch: Any) -> dict:
    from peer_rows import triton_stats

    return {**triton_stats(ln.asm, ln.metadata, ln.seconds, ln.name, arch, ln.warps), "dyn": None, "tiles": ln.tiles}


def _emulate(row: dict, arch: Any, launches: list[Launch], tensors: dict[str, Any]) -> tuple[dict, list[int]] | None:
    """Run on the emulator; on failure the row's note says why and None is returned."""
    from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
    from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

    dev = EmulatorDevice(arch)
    try:
        for ln in launches:
            if missing_ops := dev.unsupported(dev.kernel(ln.hsaco, ln.name)):
                names = dict.fromkeys(m.split("'")[1] if "'" in m else m for m in missing_ops)
                row["note"] = f"not run: the emulator lacks {', '.join(names)}"
                return None
        return run(dev, launches, tensors)
    except UnsupportedInstruction as exc:
        row["note"] = f"not run: {str(exc).splitlines()[0][:100]}"
    except Exception as exc:  # a fault is a finding about the peer's run, not the end of the table
        row["note"] = f"not run: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    return None


def fwd_row(arch: Any, qkv: list[np.ndarray], causal: bool, emulate: bool, pairs: int,
            check: Any) -> dict:
    """aiter's forward as a benchmark row (benchmarks/fmha_fwd.py's columns): {"skip": why} when it
    cannot be built here; `check(out)` returns None or what differs from the reference."""
    if (why := missing()) is not None:
        return {"skip": why}
    try:
        ln, tensors = compile_fwd(arch.name, arch.wave_size, *qkv, causal)
    except KeyError as exc:
        return {"skip": _no_config(exc, arch.name)}
    except Exception as exc:  # the peer failing to compile is a data point
        return {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:100]}"}
    row = _static(ln, arch)
    if emulate and (ran := _emulate(row, arch, [ln], tensors)) is not None:
        out, counts = ran
        row["dyn"] = counts[0] * 1000 / pairs
        if (bad := check(out["o"])) is not None:
            row["note"] = bad
    return row


def bwd_row(arch: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, causal: bool, emulate: bool,
            pairs: int, check: Any) -> dict:
    """aiter's backward (its dK/dV/dQ kernel; the preprocess is a separate small launch, like our
    dot_do_o) as a benchmarks/fmha_bwd.py row. Its O and LSE come from aiter's own forward run on
    the emulator (static figures only without emulation); `check(dq, dk, dv)` returns None or what differs."""
    if (why := missing()) is not None:
        return {"skip": why}
    try:
        fwd, ftensors = compile_fwd(arch.name, arch.wave_size, q, k, v, causal)
        o, lse = np.zeros_like(q), np.zeros(q.shape[:1] + q.shape[2:3] + q.shape[1:2], np.float32)
        row: dict = {}
        if emulate and (ran := _emulate(row, arch, [fwd], ftensors)) is not None:
            o, lse = ran[0]["o"].astype(q.dtype), ran[0]["lse"]
        launches, tensors = compile_bwd(arch.name, arch.wave_size, q, k, v, o, lse, do, causal)
    except KeyError as exc:
        return {"skip": _no_config(exc, arch.name)}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:100]}"}
    main = launches[-1]
    row = {**_static(main, arch), **({"note": "forward " + row["note"]} if "note" in row else {})}
    if emulate and "note" not in row and (ran := _emulate(row, arch, launches, tensors)) is not None:
        out, counts = ran
        row["dyn"] = counts[-1] * 1000 / pairs
        if (bad := check(out["dq"], out["dk"], out["dv"])) is not None:
            row["note"] = bad
    return row
