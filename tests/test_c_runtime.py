"""The C runtime (include/tiledsl.h, csrc/) end to end: built with ziglang's C compiler, loaded
through ctypes, it opens a kernel package written here, runs the forward and backward plans on
device memory of the HIP stand-in (tests/_hipstub.py, whose launches run the real code objects
on the emulator), and the results are checked against the float64 reference. So the C code's
HIP calls, argument packing and stage sequencing all run real kernels. Then its errors: each a
non-zero status and a message naming the problem.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from _fmha_util import assert_grads_close

from tiledsl.package import PackagedKernel, write_package
from tiledsl.plan import Plan
from tiledsl.reference import fmha_bwd_reference, fmha_fwd_reference

pytestmark = [pytest.mark.hip]

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "csrc").glob("*.c"))
HEADERS = [ROOT / "include" / "tiledsl.h", *sorted((ROOT / "csrc").glob("*.h"))]
EXAMPLE = ROOT / "examples" / "c" / "attention.c"
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wpedantic", "-O1", f"-I{ROOT / 'include'}"]
ARCHS = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201")

TD_OK, TD_ERROR_ARGUMENT, TD_ERROR_NOT_FOUND, TD_ERROR_PACKAGE, TD_ERROR_HIP = 0, 1, 2, 3, 4
DTYPES = {"f32": 1, "f16": 2, "bf16": 3, "i32": 4, "i64": 5}
NP_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16",
             np.dtype(np.int32): "i32"}
ARG_TENSOR, ARG_I32, ARG_F32 = 1, 2, 3


def _zig_cc(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "ziglang", "cc", *args], capture_output=True, text=True)
    if proc.returncode:
        raise AssertionError(f"zig cc {' '.join(args)} failed:\n{proc.stderr}")


def build_runtime(cache_dir: Path) -> Path:
    """libtiledsl.so from csrc/ (once per source version; safe with parallel test workers)."""
    digest = hashlib.sha256(" ".join(CFLAGS).encode())
    for path in SOURCES + HEADERS:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    lib = cache_dir / digest.hexdigest()[:16] / "libtiledsl.so"
    if not lib.exists():
        lib.parent.mkdir(parents=True, exist_ok=True)
        tmp = lib.with_name(f"libtiledsl.so.{os.getpid()}")
        _zig_cc("-shared", "-fPIC", *CFLAGS, *map(str, SOURCES), "-o", str(tmp), "-ldl", "-lpthread")
        os.replace(tmp, lib)
    return lib


# ---- the C API through ctypes ---------------------------------------------------------------------
class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * 8), ("strides", ctypes.c_int64 * 8)]


class Arg(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("tensor", Tensor), ("i32", ctypes.c_int32),
                ("f32", ctypes.c_float)]


class TdError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"status {status}: {message}")
        self.status = status
        self.message = message


@dataclass
class Dev:
    """A tensor in the stand-in's device memory."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    strides: tuple[int, ...]  # elements


class Hip:
    """The few HIP calls the tests make themselves (allocation and copies), on the same library
    the runtime dlopens."""

    def __init__(self, path: str):
        lib = self.lib = ctypes.CDLL(path)
        lib.hipSetDevice.argtypes = [ctypes.c_int]
        lib.hipMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.hipFree.argtypes = [ctypes.c_void_p]
        lib.hipMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.hipDeviceSynchronize.argtypes = []
        self.owned: list[int] = []

    def alloc(self, device: int, nbytes: int) -> int:
        assert self.lib.hipSetDevice(device) == 0
        ptr = ctypes.c_void_p()
        assert self.lib.hipMalloc(ctypes.byref(ptr), max(nbytes, 16)) == 0
        self.owned.append(ptr.value)
        return ptr.value

    def upload(self, device: int, array: np.ndarray) -> Dev:
        a = np.ascontiguousarray(array)
        ptr = self.alloc(device, a.nbytes)
        assert self.lib.hipMemcpy(ptr, a.ctypes.data, a.nbytes, 1) == 0  # hipMemcpyHostToDevice
        return Dev(ptr, a.shape, a.dtype, tuple(s // a.itemsize for s in a.strides))

    def garbage(self, device: int, nbytes: int) -> int:
        """Device memory full of NaN bytes: a run must not rely on fresh memory being zero."""
        junk = np.full(max(nbytes, 16), 0xFF, np.uint8)
        return self.upload(device, junk).ptr

    def empty(self, device: int, shape: tuple[int, ...], dtype) -> Dev:
        a = np.zeros(shape, dtype)
        return self.upload(device, a)

    def download(self, t: Dev) -> np.ndarray:
        self.lib.hipDeviceSynchronize()
        out = np.empty(t.shape, t.dtype)
        assert self.lib.hipMemcpy(out.ctypes.data, t.ptr, out.nbytes, 2) == 0  # hipMemcpyDeviceToHost
        return out

    def free_all(self) -> None:
        for ptr in self.owned:
            assert self.lib.hipFree(ptr) == 0
        self.owned.clear()


class Runtime:
    def __init__(self, lib_path: Path, hip_path: str):
        lib = self.lib = ctypes.CDLL(str(lib_path))
        vp, pvp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        lib.td_last_error.restype = ctypes.c_char_p
        lib.td_init.argtypes = [ctypes.c_char_p]
        lib.td_package_open.argtypes = [ctypes.c_char_p, pvp]
        lib.td_package_close.argtypes = [vp]
        lib.td_kernel_get.argtypes = [vp, ctypes.c_char_p, ctypes.c_int, pvp]
        lib.td_kernel_name.argtypes = [vp]
        lib.td_kernel_name.restype = ctypes.c_char_p
        lib.td_kernel_launch.argtypes = [vp, ctypes.POINTER(Arg), ctypes.c_int, vp]
        lib.td_plan_load.argtypes = [vp, ctypes.c_char_p, ctypes.c_int, pvp]
        lib.td_plan_free.argtypes = [vp]
        lib.td_plan_workspace_size.argtypes = [vp]
        lib.td_plan_workspace_size.restype = ctypes.c_size_t
        lib.td_plan_num_stages.argtypes = [vp]
        lib.td_plan_stage_name.argtypes = [vp, ctypes.c_int]
        lib.td_plan_stage_name.restype = ctypes.c_char_p
        lib.td_plan_prepare_workspace.argtypes = [vp, vp, vp]
        lib.td_plan_run.argtypes = [vp, ctypes.POINTER(Arg), ctypes.c_int, vp, vp]
        lib.td_plan_run_sized.argtypes = [vp, ctypes.POINTER(Arg), ctypes.c_int, vp, ctypes.c_size_t, vp]
        self.check(lib.td_init(hip_path.encode()))

    def check(self, status: int) -> None:
        if status != TD_OK:
            raise TdError(status, self.lib.td_last_error().decode())

    def open(self, root: Path) -> int:
        pkg = ctypes.c_void_p()
        self.check(self.lib.td_package_open(str(root).encode(), ctypes.byref(pkg)))
        return pkg.value

    def kernel(self, pkg: int, key: str, device: int) -> int:
        k = ctypes.c_void_p()
        self.check(self.lib.td_kernel_get(pkg, key.encode(), device, ctypes.byref(k)))
        return k.value

    def plan(self, pkg: int, text_or_path: str, device: int) -> int:
        plan = ctypes.c_void_p()
        self.check(self.lib.td_plan_load(pkg, text_or_path.encode(), device, ctypes.byref(plan)))
        return plan.value

    def run(self, plan: int, env: dict, workspace: int | None, size: int | None = None) -> None:
        """td_plan_run, or td_plan_run_sized when the workspace's `size` is given."""
        args = make_args(env)
        if size is None:
            self.check(self.lib.td_plan_run(plan, args, len(env), workspace, None))
        else:
            self.check(self.lib.td_plan_run_sized(plan, args, len(env), workspace, size, None))

    def launch(self, kernel: int, env: dict) -> None:
        args = make_args(env)
        self.check(self.lib.td_kernel_launch(kernel, args, len(env), None))


def make_args(env: dict) -> ctypes.Array:
    """Named arguments: Dev tensors, ints (i32), floats (f32)."""
    args = (Arg * max(len(env), 1))()
    for a, (name, value) in zip(args, env.items(), strict=False):
        a.name = name.encode()
        if isinstance(value, Dev):
            a.kind = ARG_TENSOR
            a.tensor.data = value.ptr
            a.tensor.dtype = DTYPES[NP_DTYPES[np.dtype(value.dtype)]]
            a.tensor.ndim = len(value.shape)
            for i, (n, s) in enumerate(zip(value.shape, value.strides, strict=True)):
                a.tensor.shape[i], a.tensor.strides[i] = n, s
        elif isinstance(value, float):
            a.kind, a.f32 = ARG_F32, value
        else:
            a.kind, a.i32 = ARG_I32, value
    return args


# ---- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def runtime_lib(request) -> Path:
    cache = getattr(request.config, "cache", None)
    where = Path(cache.mkdir("c_runtime")) if cache else Path(tempfile.gettempdir()) / "tiledsl-c-runtime"
    return build_runtime(where)


@pytest.fixture(scope="session")
def rt(runtime_lib, hip_backend) -> Runtime:
    from tiledsl.backends.rocm.runtime.hip_device import library_path

    if hip_backend.stub is not None:
        path = str(hip_backend.stub.lib_path)
    else:
        hip_backend.device("gfx942")  # loads the real runtime through hip-python
        path = library_path()
    return Runtime(runtime_lib, path)


@pytest.fixture
def hip(rt, hip_backend):
    h = Hip(str(hip_backend.stub.lib_path) if hip_backend.stub is not None else "libamdhip64.so")
    yield h
    h.free_all()


def ordinal(hip_backend, arch: str) -> int:
    return hip_backend.device(arch).ordinal


def write_plan_package(root: Path, *plans: Plan) -> Path:
    """A kernel package holding the kernels of `plans` (from the compile cache)."""
    kernels = {stage.kernel.key: PackagedKernel.of(stage.kernel) for plan in plans for stage in plan.stages}
    return write_package(root, kernels.values(), variants={})


def forward_plan(monkeypatch, q, k, v, **opts) -> Plan:
    """The plan tiledsl.ops.fmha_fwd runs for these arguments (captured, not run)."""
    from tiledsl.ops import fmha_fwd

    captured = []
    with monkeypatch.context() as m:
        m.setattr(Plan, "run", lambda self, device, env, workspace=None: captured.append(self))
        fmha_fwd(q, k, v, **opts)
    assert len(captured) == 1
    return captured[0]


def qkv(sq=70, sk=90, hq=4, hk=2, d=64, seed=1):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, sq, hq, d)).astype(np.float16)
    k, v = (rng.standard_normal((1, sk, hk, d)).astype(np.float16) for _ in range(2))
    return q, k, v


def fwd_env(hip: Hip, dev: int, q, k, v, *, causal: bool, scale: float) -> dict:
    """The forward plan's inputs as tiledsl.ops.fmha_fwd binds them (batch mode, no KV cache)."""
    b, sq, hq, _ = q.shape
    one = np.zeros(1, np.int32)
    return {"q": hip.upload(dev, q), "k": hip.upload(dev, k), "v": hip.upload(dev, v),
            "o": hip.empty(dev, q.shape[:3] + v.shape[3:], np.float16),
            "lse": hip.upload(dev, np.full((b, hq, sq), -np.inf, np.float32)),
            "sink": hip.empty(dev, (hq,), np.float32), "cu_seqlens_q": hip.upload(dev, one),
            "cu_seqlens_k": hip.upload(dev, one), "scale": scale, "softcap": 1.0,
            "window_left": -1, "window_right": 0 if causal else -1, "batch": b, "max_seqlen_q": sq,
            "cache_seqlens": hip.upload(dev, one), "cache_batch_idx": hip.upload(dev, one),
            "block_table": hip.upload(dev, np.zeros((1, 1), np.int32)), "seqlen_new": 0, "page_shift": 0}


# ---- running plans ------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_forward_plan_from_c(rt, hip, hip_backend, monkeypatch, tmp_path, arch):
    """fmha_fwd's plan (causal GQA, odd lengths, with LSE) from C: one stage and two zero
    stand-ins the runtime allocates at load and frees with the plan."""
    q, k, v = qkv()
    scale = 1 / np.sqrt(q.shape[-1])
    plan = forward_plan(monkeypatch, q, k, v, causal=True, return_lse=True, arch=arch)
    spec = plan.to_json()
    assert [s["name"] for s in spec["stages"]] == ["attention"]
    assert any("zeros" in a for a in spec["stages"][0]["args"])
    dev = ordinal(hip_backend, arch)
    env = fwd_env(hip, dev, q, k, v, causal=True, scale=float(scale))
    assert set(spec["inputs"]) <= set(env)
    stub = hip_backend.stub
    live, modules = (stub.count("live_allocations"), stub.count("live_modules")) if stub else (0, 0)
    pkg = rt.open(write_plan_package(tmp_path / "pkg", plan))
    p = rt.plan(pkg, json.dumps(spec), dev)
    try:
        assert rt.lib.td_plan_workspace_size(p) == 0 and rt.lib.td_plan_stage_name(p, 0) == b"attention"
        # Scalars the caller passes by hand must agree with the tensors (the kernel's requires).
        for change, pattern in (({"batch": 2}, r"requires \(batch == BQ\), but batch = 2, BQ = 1"),
                                ({"max_seqlen_q": 69}, r"requires \(max_seqlen_q == SQ\)")):
            with pytest.raises(TdError, match=r"stage attention \(fmha_fwd\): .*" + pattern):
                rt.run(p, {**env, **change}, None)
        rt.run(p, env, None)
        out, lse = hip.download(env["o"]), hip.download(env["lse"])
    finally:
        rt.lib.td_plan_free(p)
        rt.lib.td_package_close(pkg)
    if stub:
        assert stub.count("live_allocations") == live  # the stand-ins are freed with the plan
        assert stub.count("live_modules") == modules  # and the package unloads its modules
    ref_out, ref_lse = fmha_fwd_reference(q, k, v, causal=True, scale=scale, return_lse=True)
    np.testing.assert_allclose(out.astype(np.float64), ref_out, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_group_mode_forward_plan_checks_its_offsets_from_c(rt, hip, hip_backend, monkeypatch, tmp_path, arch):
    """Group mode from C: cu_seqlens live in device memory, which the runtime reads back to check
    them as tiledsl.ops does (Plan.offsets), and the kv batch must be q's (the kernel's requires)."""
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 75, 2, 64)).astype(np.float16)
    k, v = (rng.standard_normal((1, 100, 2, 64)).astype(np.float16) for _ in range(2))
    cu_q, cu_k = np.array([0, 30, 30, 75], np.int32), np.array([0, 20, 44, 100], np.int32)
    plan = forward_plan(monkeypatch, q[0], k[0], v[0], cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True, arch=arch)
    spec = plan.to_json()
    assert spec["offsets"] == {"cu_seqlens_q": {"rows": ["q", 1], "longest": "max_seqlen_q"},
                               "cu_seqlens_k": {"rows": ["k", 1]}}
    dev = ordinal(hip_backend, arch)
    scale = float(1 / np.sqrt(64))
    env = {**fwd_env(hip, dev, q, k, v, causal=True, scale=scale), "cu_seqlens_q": hip.upload(dev, cu_q),
           "cu_seqlens_k": hip.upload(dev, cu_k), "batch": 3, "max_seqlen_q": 45}
    pkg = rt.open(write_plan_package(tmp_path / "pkg", plan))
    p = rt.plan(pkg, json.dumps(spec), dev)
    stub = hip_backend.stub
    launches = stub.count("launches") if stub else 0
    try:
        for change, pattern in (
                ({"cu_seqlens_q": np.array([0, 30, 30, 7500], np.int32)},
                 r"argument 'cu_seqlens_q': the last offset 7500 is past the packed sequence length 75 "
                 r"\(q.shape\[1\]\)"),
                ({"cu_seqlens_k": np.array([0, 50, 44, 100], np.int32)},
                 r"argument 'cu_seqlens_k': must be non-decreasing, but cu_seqlens_k\[2\] = 44 < "
                 r"cu_seqlens_k\[1\] = 50"),
                ({"cu_seqlens_k": np.array([5, 20, 44, 100], np.int32)}, r"argument 'cu_seqlens_k': must start at 0"),
                ({"max_seqlen_q": 30}, r"argument 'max_seqlen_q': 30, but cu_seqlens_q holds a sequence of 45 rows")):
            bad = {**env, **{n: hip.upload(dev, x) if isinstance(x, np.ndarray) else x for n, x in change.items()}}
            with pytest.raises(TdError, match=pattern):
                rt.run(p, bad, None)
        with pytest.raises(TdError, match=r"fmha_fwd\(\) requires \(BK == BQ\), but BQ = 1, BK = 2"):
            two = np.concatenate([k, k])
            rt.run(p, {**env, "k": hip.upload(dev, two), "v": hip.upload(dev, two)}, None)
        if stub:
            assert stub.count("launches") == launches  # every refusal came before a launch
        rt.run(p, env, None)
        out = hip.download(env["o"])[0]
    finally:
        rt.lib.td_plan_free(p)
        rt.lib.td_package_close(pkg)
    ref = fmha_fwd_reference(q[0], k[0], v[0], causal=True, scale=scale, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_split_kv_forward_plan_from_c(rt, hip, hip_backend, monkeypatch, tmp_path, arch):
    """Split-KV (producers -> combine) from C: the workspace's regions o_acc and lse_acc are
    bound by name between the stages."""
    q, k, v = qkv(sq=2, sk=260, hq=4, hk=2, seed=6)
    scale = 1 / np.sqrt(q.shape[-1])
    plan = forward_plan(monkeypatch, q, k, v, causal=True, num_splits=3, arch=arch)
    assert plan.stage_names == ["producers", "combine"] and plan.workspace_size > 0
    dev = ordinal(hip_backend, arch)
    env = fwd_env(hip, dev, q, k, v, causal=True, scale=float(scale))
    env["lse"] = hip.empty(dev, (1, 4, 2), np.float32)
    pkg = rt.open(write_plan_package(tmp_path / "pkg", plan))
    p = rt.plan(pkg, json.dumps(plan.to_json()), dev)
    try:
        size = rt.lib.td_plan_workspace_size(p)
        ws = hip.alloc(dev, size)
        with pytest.raises(TdError, match=rf"plan fmha_fwd split-KV: workspace: the plan needs {size} bytes, got "
                                          rf"{size - 4}"):
            rt.run(p, env, ws, size - 4)
        rt.run(p, env, ws, size)
        out = hip.download(env["o"])
    finally:
        rt.lib.td_plan_free(p)
        rt.lib.td_package_close(pkg)
    ref = fmha_fwd_reference(q, k, v, causal=True, scale=scale)
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=2e-3, rtol=2e-3)


def bwd_case(arch: str):
    """GQA causal with odd lengths, deterministic (as tests/test_fmha_bwd.py): the plan, the
    inputs and the reference gradients. out and lse come from the float64 forward."""
    from tiledsl.ops import fmha_bwd_plan

    q, k, v = qkv(seed=1)
    do = np.random.default_rng(7).standard_normal(q.shape).astype(np.float16)
    ref_out, ref_lse = fmha_fwd_reference(q, k, v, causal=True, return_lse=True)
    out, lse = ref_out.astype(np.float16), ref_lse.astype(np.float32)
    plan = fmha_bwd_plan(do, q, k, v, out, lse, causal=True, deterministic=True, arch=arch)
    return plan, (q, k, v, do, out, lse), fmha_bwd_reference(do, q, k, v, causal=True)


def bwd_env(hip: Hip, dev: int, q, k, v, do, out, lse) -> dict:
    """The backward plan's inputs as tiledsl.ops.fmha_bwd binds them (batch mode, no sink)."""
    one = np.zeros(1, np.int32)
    return {"q": hip.upload(dev, q), "k": hip.upload(dev, k), "v": hip.upload(dev, v), "do": hip.upload(dev, do),
            "out": hip.upload(dev, out), "lse": hip.upload(dev, lse), "dq": hip.empty(dev, q.shape, np.float16),
            "dk": hip.empty(dev, k.shape, np.float16), "dv": hip.empty(dev, v.shape, np.float16),
            "cu_seqlens_q": hip.upload(dev, one), "cu_seqlens_k": hip.upload(dev, one),
            "scale": float(1 / np.sqrt(q.shape[-1])), "softcap": 1.0}


@pytest.mark.parametrize("arch", ARCHS)
def test_backward_plan_from_c(rt, hip, hip_backend, tmp_path, arch):
    """fmha_bwd's three stages over one workspace from C (plan read from a file), against the
    reference; a second run gives the same bits (deterministic), launching three kernels."""
    plan, inputs, ref = bwd_case(arch)
    assert plan.stage_names == ["dot_do_o", "dq_dk_dv", "convert_dq"]
    dev = ordinal(hip_backend, arch)
    env = bwd_env(hip, dev, *inputs)
    path = tmp_path / "bwd.json"
    path.write_text(json.dumps(plan.to_json(), indent=1))
    pkg = rt.open(write_plan_package(tmp_path / "pkg", plan))
    p = rt.plan(pkg, str(path), dev)
    stub = hip_backend.stub
    try:
        assert rt.lib.td_plan_workspace_size(p) == plan.workspace_size
        assert rt.lib.td_plan_num_stages(p) == 3
        ws = hip.garbage(dev, plan.workspace_size)  # the runtime copies nsplits in and zeroes dq_acc
        rt.run(p, env, ws)
        got = [hip.download(env[n]) for n in ("dq", "dk", "dv")]
        if stub and arch == "gfx942":
            launches = stub.count("launches")
            rt.run(p, env, ws)
            assert stub.count("launches") == launches + 3
            again = [hip.download(env[n]) for n in ("dq", "dk", "dv")]
            for a, b in zip(got, again, strict=True):
                assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    finally:
        rt.lib.td_plan_free(p)
        rt.lib.td_package_close(pkg)
    assert_grads_close(got, ref, np.float16)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_backward_group_mode_from_c(rt, hip, hip_backend, tmp_path, arch):
    """Group mode (an empty middle sequence), bf16, top-left causal, soft-cap, MQA, head dim 48
    (padded: a dim unit), deterministic: the host segment holds per-sequence split counts and
    dq_acc offsets, copied in by the runtime."""
    from tiledsl.ops import fmha_bwd_plan

    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(2)
    cu_q, cu_k = np.array([0, 30, 30, 75], np.int32), np.array([0, 20, 44, 100], np.int32)
    q, do = (rng.standard_normal((75, 3, 48)).astype(bf16) for _ in range(2))
    k, v = (rng.standard_normal((100, 1, 48)).astype(bf16) for _ in range(2))
    opts = {"causal": "top_left", "softcap": 5.0, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
    ref_out, ref_lse = fmha_fwd_reference(q, k, v, return_lse=True, **opts)
    out, lse = ref_out.astype(bf16), ref_lse.astype(np.float32)
    plan = fmha_bwd_plan(do, q, k, v, out, lse, deterministic=True, arch=arch, **opts)
    assert "offsets" in [r.name for r in plan.workspace.regions]
    dev = ordinal(hip_backend, arch)
    # The kernels see group mode's tensors with a batch dim of 1, as tiledsl.ops binds them.
    env = {name: hip.upload(dev, x[None]) for name, x in (("q", q), ("k", k), ("v", v), ("do", do), ("out", out),
                                                          ("lse", lse))}
    env.update({"dq": hip.empty(dev, (1, 75, 3, 48), bf16), "dk": hip.empty(dev, (1, 100, 1, 48), bf16),
                "dv": hip.empty(dev, (1, 100, 1, 48), bf16), "cu_seqlens_q": hip.upload(dev, cu_q),
                "cu_seqlens_k": hip.upload(dev, cu_k), "scale": float(1 / np.sqrt(48)), "softcap": 5.0})
    spec = plan.to_json()
    # The split counts and dq_acc offsets follow from the sequence lengths: the plan records them.
    assert spec["values"] == {"cu_seqlens_q": [0, 30, 30, 75], "cu_seqlens_k": [0, 20, 44, 100]}
    pkg = rt.open(write_plan_package(tmp_path / "pkg", plan))
    p = rt.plan(pkg, json.dumps(spec), dev)
    try:
        # Other lengths (here the last key sequence longer, as far as k's rows reach) would send
        # the kernels' stores past their workspace slices: read back and refused before any launch.
        launches = hip_backend.stub.count("launches") if hip_backend.stub else 0
        other = {**env, "cu_seqlens_k": hip.upload(dev, np.array([0, 0, 0, 100], np.int32))}
        with pytest.raises(TdError, match=r"argument 'cu_seqlens_k': values \[0, 0, 0, 100\], but this plan was "
                                          r"made for \[0, 20, 44, 100\] \(first difference at \[1\]\)") as info:
            rt.run(p, other, hip.garbage(dev, plan.workspace_size))
        assert info.value.status == TD_ERROR_ARGUMENT
        if hip_backend.stub:
            assert hip_backend.stub.count("launches") == launches
        rt.run(p, env, hip.garbage(dev, plan.workspace_size))
        got = [hip.download(env[n])[0] for n in ("dq", "dk", "dv")]
    finally:
        rt.lib.td_plan_free(p)
        rt.lib.td_package_close(pkg)
    assert_grads_close(got, fmha_bwd_reference(do, q, k, v, **opts), bf16)


def test_plan_json_from_the_cli(capsys):
    from tiledsl.cli import main

    assert main(["plan", "fmha_bwd", "--arch", "gfx942", "--hdim", "64", "--heads", "4/2", "--seqlen", "70/90",
                 "--mask", "causal", "--deterministic", "--json"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["format"] == "tiledsl-plan" and spec["op"] == "fmha_bwd"
    assert [s["name"] for s in spec["stages"]] == ["dot_do_o", "dq_dk_dv", "convert_dq"]
    assert all(len(s["kernel"]) == 64 for s in spec["stages"])
    regions = {r["name"]: r for r in spec["workspace"]["regions"]}
    assert set(regions) == {"nsplits", "dq_acc", "lse2", "d"} and regions["dq_acc"]["zero"]  # causal: zeroed
    # nsplits: 90 keys in blocks of 64 (gfx942's causal hdim 64 row, fmha_bwd.BWD_MASKED_CONFIGS)
    assert bytes.fromhex(spec["workspace"]["host"]) == np.array([2], np.int32).tobytes()
    assert {"q", "k", "v", "do", "out", "lse", "dq", "dk", "dv", "scale", "softcap"} <= set(spec["inputs"])
    assert "ws_i" not in spec["inputs"] and "d" not in spec["inputs"]
    args = {a["param"]: a for a in spec["stages"][1]["args"]}
    assert args["window_right"] == {"param": "window_right", "value": 0, "dtype": "i32"}
    assert args["ws_f"] == {"param": "ws_f", "ref": "ws_f"}


def test_to_json_refuses_a_fixed_array_that_is_not_zeros():
    from tiledsl.plan import Stage, WorkspaceLayout

    class K:
        key = "0" * 64
        manifest = {"kernel": "k", "arch": "gfx942"}

    plan = Plan("op", [Stage("s", K(), (("x", np.ones(4, np.float32)),))], WorkspaceLayout(()))
    with pytest.raises(ValueError, match="stage s, parameter 'x': a fixed array that is not all zeros"):
        plan.to_json()
    K.key = None
    with pytest.raises(ValueError, match="its kernel has no package key"):
        Plan("op", [Stage("s", K(), ())], WorkspaceLayout(())).to_json()


# ---- errors -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bwd_gfx942():
    return bwd_case("gfx942")


@pytest.fixture
def bwd_package(bwd_gfx942, tmp_path):
    return write_plan_package(tmp_path / "pkg", bwd_gfx942[0])


def test_unknown_key_and_bad_keys(rt, bwd_package):
    pkg = rt.open(bwd_package)
    try:
        with pytest.raises(TdError, match=r"no kernel with key 0123456789ab \(it holds 3 kernels\)") as info:
            rt.kernel(pkg, "0123456789ab", 0)
        assert info.value.status == TD_ERROR_NOT_FOUND
        with pytest.raises(TdError, match="kernel key 'abc': expected 64 lower-case hex digits, or a prefix"):
            rt.kernel(pkg, "abc", 0)
    finally:
        rt.lib.td_package_close(pkg)
    with pytest.raises(TdError, match="no such directory") as info:
        rt.open(bwd_package / "missing")
    assert info.value.status == TD_ERROR_NOT_FOUND


def test_corrupted_code_object(rt, hip_backend, bwd_gfx942, bwd_package):
    plan = bwd_gfx942[0]
    key = plan.stages[1].kernel.key
    index = json.loads((bwd_package / "index.json").read_text())
    hsaco = bwd_package / index["kernels"][key]["hsaco"]
    data = bytearray(hsaco.read_bytes())
    data[len(data) // 2] ^= 1
    hsaco.write_bytes(bytes(data))
    pkg = rt.open(bwd_package)
    try:
        dev = ordinal(hip_backend, "gfx942")
        rt.kernel(pkg, plan.stages[0].kernel.key[:12], dev)  # the other kernels load
        with pytest.raises(TdError, match=rf"{index['kernels'][key]['hsaco']} is corrupted \(its sha256 does not "
                                          "match index.json\\)") as info:
            rt.kernel(pkg, key, dev)
        assert info.value.status == TD_ERROR_PACKAGE
        with pytest.raises(TdError, match=r"plan fmha_bwd: stage dq_dk_dv: .* is corrupted"):
            rt.plan(pkg, json.dumps(plan.to_json()), dev)
    finally:
        rt.lib.td_package_close(pkg)


def test_truncated_code_object_with_its_digest_updated(rt, hip_backend, bwd_gfx942, bwd_package):
    """A code object cut short whose sha256 index.json was updated to match: refused as no AMDGPU
    code object (its section headers lie past its end) before HIP sees it, as Python refuses it."""
    plan = bwd_gfx942[0]
    key = plan.stages[1].kernel.key
    index = json.loads((bwd_package / "index.json").read_text())
    hsaco = bwd_package / index["kernels"][key]["hsaco"]
    data = hsaco.read_bytes()[:-64]
    hsaco.write_bytes(data)
    index["kernels"][key]["sha256"] = hashlib.sha256(data).hexdigest()
    (bwd_package / "index.json").write_text(json.dumps(index))
    _kernel_refused(rt, hip_backend, bwd_package, key, r"is not an AMDGPU code object \(its section headers lie past "
                                                       r"its end: truncated\)")


def test_code_object_whose_segment_lies_past_its_end(rt, hip_backend, bwd_gfx942, bwd_package):
    """Header tables in the file but a loaded segment grown past its end (the digest updated to
    match): refused before HIP sees it, as Python's elf.read_code_object refuses it."""
    key = bwd_gfx942[0].stages[1].kernel.key
    index = json.loads((bwd_package / "index.json").read_text())
    hsaco = bwd_package / index["kernels"][key]["hsaco"]
    data = bytearray(hsaco.read_bytes())
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    headers = (phoff + i * phentsize for i in range(phnum))
    load = next(at for at in headers if struct.unpack_from("<I", data, at)[0] == 1)  # the first PT_LOAD
    struct.pack_into("<QQ", data, load + 32, 1 << 26, 1 << 26)  # p_filesz, p_memsz: 64 MiB
    hsaco.write_bytes(bytes(data))
    index["kernels"][key]["sha256"] = hashlib.sha256(data).hexdigest()
    (bwd_package / "index.json").write_text(json.dumps(index))
    _kernel_refused(rt, hip_backend, bwd_package, key, r"is not an AMDGPU code object \(a loaded segment lies past its "
                                                       r"end: truncated or corrupted\)")


@pytest.mark.parametrize("digest", ["absent", None, 5])
def test_index_without_a_manifest_digest(rt, hip_backend, bwd_gfx942, bwd_package, digest):
    """The C runtime trusts a manifest by its digest alone (it does not read the code object's
    metadata, which Python checks the manifest against): an index entry without one, as packages
    written before manifest digests have, or with one that is not a string, is refused."""
    key = bwd_gfx942[0].stages[1].kernel.key
    index = json.loads((bwd_package / "index.json").read_text())
    if digest == "absent":
        del index["kernels"][key]["manifest_sha256"]
    else:
        index["kernels"][key]["manifest_sha256"] = digest
    (bwd_package / "index.json").write_text(json.dumps(index))
    _kernel_refused(rt, hip_backend, bwd_package, key, r"index.json records no manifest_sha256 string for .*: rebuild "
                                                       r"the package")


def _kernel_refused(rt, hip_backend, package, key: str, pattern: str) -> None:
    """Loading kernel `key` of `package` is a TD_ERROR_PACKAGE whose message matches `pattern`."""
    pkg = rt.open(package)
    try:
        with pytest.raises(TdError, match=pattern) as info:
            rt.kernel(pkg, key, ordinal(hip_backend, "gfx942"))
        assert info.value.status == TD_ERROR_PACKAGE
    finally:
        rt.lib.td_package_close(pkg)


def test_edited_manifest(rt, hip_backend, bwd_gfx942, bwd_package):
    """A package manifest edited by hand (still valid JSON, still a valid manifest) is refused by
    its sha256 in index.json, as tiledsl.load_package refuses it."""
    plan = bwd_gfx942[0]
    key = plan.stages[1].kernel.key
    entry = json.loads((bwd_package / "index.json").read_text())["kernels"][key]
    manifest = bwd_package / entry["manifest"]
    edited = json.loads(manifest.read_text())
    edited["grid"][0] = "1"
    manifest.write_text(json.dumps(edited))
    _kernel_refused(rt, hip_backend, bwd_package, key, rf"{entry['manifest']} is corrupted \(its sha256 does not "
                                                       r"match index.json: it was edited or damaged\)")


def test_kernel_for_another_arch_is_a_hip_error(rt, hip_backend, bwd_gfx942, bwd_package):
    hip_backend.needs_stub()
    pkg = rt.open(bwd_package)
    try:
        with pytest.raises(TdError, match=r"hipModuleLoadData\(gfx942/fmha_bwd_dot_do_o-\w+\.hsaco, a gfx942 code "
                                          r"object, on device \d\) failed: hipErrorNoBinaryForGpu") as info:
            rt.kernel(pkg, bwd_gfx942[0].stages[0].kernel.key, ordinal(hip_backend, "gfx1100"))
        assert info.value.status == TD_ERROR_HIP
    finally:
        rt.lib.td_package_close(pkg)


@pytest.fixture
def bwd_loaded(rt, hip, hip_backend, bwd_gfx942, bwd_package):
    """The gfx942 backward plan loaded, its inputs on the device, and a workspace."""
    plan, inputs, _ref = bwd_gfx942
    dev = ordinal(hip_backend, "gfx942")
    pkg = rt.open(bwd_package)
    p = rt.plan(pkg, json.dumps(plan.to_json()), dev)
    yield plan, p, bwd_env(hip, dev, *inputs), hip.alloc(dev, plan.workspace_size)
    rt.lib.td_plan_free(p)
    rt.lib.td_package_close(pkg)


def test_wrong_arguments_are_refused_before_any_launch(rt, hip, hip_backend, bwd_loaded):
    plan, p, env, ws = bwd_loaded
    stub = hip_backend.stub
    launches = stub.count("launches") if stub else 0

    def refused(change: dict, pattern: str, status: int = TD_ERROR_ARGUMENT) -> None:
        with pytest.raises(TdError, match=pattern) as info:
            rt.run(p, {**env, **change}, ws)
        assert info.value.status == status, info.value

    q = env["q"]
    refused({"q": Dev(q.ptr, q.shape, np.dtype(np.float32), q.strides)},
            r"plan fmha_bwd: stage dq_dk_dv \(fmha_bwd_dq_dk_dv\): argument 'q': expected dtype f16, got f32")
    k = env["k"]
    # The plan's split counts and workspace follow from its sizes: a tensor of others would run and give
    # wrong gradients (session 47's audit: 200 keys on a plan made for 90 returned TD_OK).
    refused({"k": Dev(k.ptr, (1, 91, 2, 64), k.dtype, k.strides)},
            r"plan fmha_bwd: argument 'k': shape \[1, 91, 2, 64\], but this plan was made for \[1, 90, 2, 64\]; "
            r"make a plan for these sizes")
    refused({"k": Dev(k.ptr, k.shape, k.dtype, (k.strides[0], 0, *k.strides[2:]))},  # keys broadcast
            r"stage dq_dk_dv .*argument 'k': this kernel variant bounds its dim 1 with a buffer descriptor, which "
            r"needs that dim's stride \(0 elements\) above the last dim's span \(63\).*--overlapping-rows")
    refused({"lse": Dev(env["lse"].ptr, (1, 4), np.dtype(np.float32), (280, 70))},
            r"argument 'lse': shape \[1, 4\], but this plan was made for \[1, 4, 70\]")
    refused({"out": Dev(env["out"].ptr, (1, 70, 4, 64), np.dtype(np.float16), (17920, 256, 64, 2))},
            r"stage dot_do_o \(fmha_bwd_dot_do_o\): argument 'o' \(input 'out'\): the kernel was compiled for a "
            r"contiguous last dim \(stride 1, the default\), got stride 2")
    dk = env["dk"]  # written with its two heads on one address (as tiledsl.launcher refuses too)
    refused({"dk": Dev(dk.ptr, dk.shape, dk.dtype, (*dk.strides[:2], 0, dk.strides[3]))},
            r"stage dq_dk_dv .*argument 'dk': the kernel writes it, but its elements overlap in memory \(shape "
            r"\[1, 90, 2, 64\], strides \[\d+, \d+, 0, 1\] elements\)")
    refused({"softcap": env["q"]}, r"argument 'softcap': expected an f32 number, got a tensor of f16 with 4 dims")
    missing = {n: v for n, v in env.items() if n != "dv"}
    with pytest.raises(TdError, match=r"plan fmha_bwd: stage dq_dk_dv \(fmha_bwd_dq_dk_dv\): no value for input "
                                      r"'dv' \(parameter dv\)") as info:
        rt.run(p, missing, ws)
    assert info.value.status == TD_ERROR_NOT_FOUND
    refused({"d": env["q"]}, "argument 'd' has the name of the plan's workspace region")
    with pytest.raises(TdError, match=r"workspace: the plan needs \d+ bytes, got NULL"):
        rt.run(p, env, None)
    if stub:
        assert stub.count("launches") == launches  # every refusal came before the first launch


def test_kernel_launch_checks_its_arguments(rt, hip, hip_backend, bwd_gfx942, bwd_package):
    plan = bwd_gfx942[0]
    dev = ordinal(hip_backend, "gfx942")
    pkg = rt.open(bwd_package)
    try:
        k = rt.kernel(pkg, plan.stages[0].kernel.key, dev)
        assert rt.lib.td_kernel_name(k) == b"fmha_bwd_dot_do_o"
        assert rt.kernel(pkg, plan.stages[0].kernel.key[:12], dev) == k  # loaded once per device
        o = hip.empty(dev, (1, 70, 4, 64), np.float16)
        rows = {name: hip.empty(dev, (1, 4, 70), np.float32) for name in ("lse", "d", "lse2")}
        env = {"o": o, "do": o, **rows,
               "cu_seqlens_q": hip.upload(dev, np.zeros(1, np.int32)), "batch": 1, "max_seqlen_q": 70}
        launches = hip_backend.stub.count("launches") if hip_backend.stub else 0
        rt.launch(k, env)  # zeros in, zeros out: the launch itself is what runs
        rt.launch(k, {**env, "max_seqlen_q": 0})  # an empty grid: nothing to launch, not an error
        # Empty tensors take any strides and pointer (numpy's 0 strides, torch's NULL data), as in
        # tiledsl.launcher: nothing is read or written.
        no_rows = {"o": Dev(0, (1, 0, 4, 64), np.dtype(np.float16), (0, 0, 0, 0)),
                   **{n: Dev(0, (1, 4, 0), np.dtype(np.float32), (0, 0, 0)) for n in rows}}
        rt.launch(k, {**env, **no_rows, "do": no_rows["o"], "max_seqlen_q": 0})
        if hip_backend.stub:
            assert hip_backend.stub.count("launches") == launches + 1
        with pytest.raises(TdError, match=r"fmha_bwd_dot_do_o: missing argument\(s\) batch, max_seqlen_q") as info:
            rt.launch(k, {n: v for n, v in env.items() if n not in ("batch", "max_seqlen_q")})
        assert info.value.status == TD_ERROR_NOT_FOUND
        with pytest.raises(TdError, match=r"fmha_bwd_dot_do_o: no argument 'x'; the arguments are o, do, lse, d, lse2, "
                                          r"cu_seqlens_q, batch, max_seqlen_q"):
            rt.launch(k, {**env, "x": 1})
        with pytest.raises(TdError, match=r"argument 'batch': expected an i32 number, got the f32 1"):
            rt.launch(k, {**env, "batch": 1.0})
        with pytest.raises(TdError, match=r"argument 'd': dim 2 is SQ = 71, but SQ = 70 from o.shape\[1\]"):
            rt.launch(k, {**env, "d": Dev(env["d"].ptr, (1, 4, 71), np.dtype(np.float32), (284, 71, 1))})
        # Rows 2^24 elements apart: 2^31 elements not reached, 2 GiB of bytes passed (buffer accesses).
        assert {t["name"]: t["buffer"] for t in plan.stages[0].kernel.manifest["tensors"]}["o"]
        with pytest.raises(TdError, match=r"argument 'o': spans 2315256320 bytes; this kernel variant addresses it "
                                          r"with buffer instructions, which reach 2147483648 bytes \(2 GiB\): "
                                          r"compile it with CompileOptions\(large_tensors=\('o',\)\)$"):
            rt.launch(k, {**env, "o": Dev(o.ptr, (1, 70, 4, 64), np.dtype(np.float16), (0, 2**24, 64, 1))})
    finally:
        rt.lib.td_package_close(pkg)


@pytest.mark.parametrize("text, pattern", [
    ('{"format": "tiledsl-plan", "version": 1, "op": "x", "stages": [}',
     r"plan: not valid JSON \(expected a value at line 1, column 64\)"),
    ('{"format": "tiledsl-plan", "version": 1, "op": "x" "stages": []}',
     r"plan: not valid JSON \(expected ',' or '\}' at line 1, column 52\)"),
    ('{"format": "tiledsl-plan", "version": 1, "op": "x", "stages": [], "workspace": {"size": 8, "host": "zz", '
     '"regions": []}}', "plan x: workspace: the host segment is not hex"),
    ('{"format": "other"}', "not a tiledsl plan of format version 1"),
    ('{"format": "tiledsl-plan", "version": 1, "op": "x", "stages": [{"name": "s", "kernel": "%s", "args": [{"param": '
     '"batch", "value": 1.5, "dtype": "i32"}]}], "workspace": {"size": 0, "host": "", "regions": []}}',
     r"plan x: stage s: parameter 'batch': the value 1.5 is not an i32"),
    ('{"format": "tiledsl-plan", "version": 1, "op": "x", "stages": [], "workspace": {"size": 64, "host": "", '
     '"regions": [{"name": "a", "offset": 0, "words": 8, "dtype": "f32", "shape": [8]}, {"name": "b", "offset": 4, '
     '"words": 8, "dtype": "f32", "shape": [8]}]}}', r"plan x: workspace regions 'a' and 'b' overlap \(words 0..8 "
     r"and 4..12\)"),
    ('{"format": "tiledsl-plan", "version": 1, "op": "x", "stages": [], "workspace": {"size": 64, "host": "", '
     '"regions": [{"name": "a", "offset": 0, "words": 8, "dtype": "f32", "shape": [8], "zero": "yes"}]}}',
     r"plan x: workspace region 'a': 'zero' is a string, not a bool"),
    ('{"format": "tiledsl-plan", "version": 1, "op": "x", "op": "y", "stages": []}',
     r"plan: not valid JSON \(a member name repeated in one object at line 1, column 53\)"),
    ('{"format": "tiledsl-plan", "version": 1, "op": "x", "stages": [], "shapes": {"q": [1, -2]}, "workspace": '
     '{"size": 0, "host": "", "regions": []}}', r"plan x: shapes: 'q' is not a list of at most 8 sizes"),
])
def test_bad_plan_json(rt, hip_backend, bwd_gfx942, bwd_package, text, pattern):
    pkg = rt.open(bwd_package)
    try:
        with pytest.raises(TdError, match=pattern) as info:
            rt.plan(pkg, text.replace("%s", bwd_gfx942[0].stages[0].kernel.key), ordinal(hip_backend, "gfx942"))
        assert info.value.status == TD_ERROR_PACKAGE
    finally:
        rt.lib.td_package_close(pkg)


def test_bad_package_index(rt, tmp_path, bwd_package):
    (bwd_package / "index.json").write_text('{"format": "tiledsl-kernel-package", "version": 1, "kernels": {')
    with pytest.raises(TdError, match=r"kernel package .*: index.json is not valid JSON \(expected a member name in "
                                      r"quotes at the end of the text \(line 1\)\)") as info:
        rt.open(bwd_package)
    assert info.value.status == TD_ERROR_PACKAGE
    (tmp_path / "empty").mkdir()
    with pytest.raises(TdError, match=r"no index.json \(write one with `tiledsl prebuild"):
        rt.open(tmp_path / "empty")


def test_package_files_outside_or_irregular_are_refused(rt, tmp_path, bwd_package):
    """As tiledsl.load_package: index.json's files are paths inside the package ('..' and absolute
    paths refused when it opens), and only regular files are read (a FIFO would block)."""
    index = json.loads((bwd_package / "index.json").read_text())
    key = next(iter(index["kernels"]))
    for path in ("../../elsewhere.hsaco", "/dev/zero"):
        bad = json.loads(json.dumps(index))
        bad["kernels"][key]["hsaco"] = path
        (bwd_package / "index.json").write_text(json.dumps(bad))
        with pytest.raises(TdError, match=f"names the hsaco file '{path}', which is not a path inside the package"):
            rt.open(bwd_package)
    (bwd_package / "index.json").unlink()
    os.mkfifo(bwd_package / "index.json")
    with pytest.raises(TdError, match=r"cannot read the .*index.json \(not a regular file\)"):
        rt.open(bwd_package)


def test_init_twice(rt):
    assert rt.lib.td_init(None) == TD_OK
    assert rt.lib.td_init(b"/elsewhere/libamdhip64.so") == 5  # TD_ERROR_STATE
    assert "the runtime already uses the HIP library" in rt.lib.td_last_error().decode()


def test_example_program_builds(runtime_lib, hip_backend, tmp_path):
    """examples/c/attention.c (the README's example) compiles with the header alone and links
    against the runtime and a libamdhip64."""
    hip_backend.needs_stub()
    _zig_cc(*CFLAGS, str(EXAMPLE), f"-L{runtime_lib.parent}", "-ltiledsl",
            f"-L{hip_backend.stub.lib_path.parent}", "-lamdhip64", "-o", str(tmp_path / "attention"))
    assert (tmp_path / "attention").exists()


GRID_SHIM = r"""
#include "internal.h"
#pragma GCC visibility push(default)
int grid_eval(const char *text, const char **names, const long long *values, int n, long long *out) {
    td_binding b[16];
    for (int i = 0; i < n; i++) b[i] = (td_binding){names[i], values[i]};
    int64_t v = 0;
    int s = td__eval_formula(text, b, n, &v);
    *out = v;
    return s;
}
#pragma GCC visibility pop
"""


def _grid_shim(tmp_path, source: str) -> ctypes.CDLL:
    """csrc/grid.c (and runtime.c for its errors) with a small exported shim, as a library."""
    shim = tmp_path / "shim.c"
    shim.write_text(source)
    lib_path = tmp_path / "libshim.so"
    _zig_cc("-shared", "-fPIC", *CFLAGS, f"-I{ROOT / 'csrc'}", str(shim), str(ROOT / "csrc" / "grid.c"),
            str(ROOT / "csrc" / "runtime.c"), "-o", str(lib_path), "-ldl", "-lpthread")
    return ctypes.CDLL(str(lib_path))


def test_grid_formulas_agree_with_python(runtime_lib, tmp_path):
    """csrc/grid.c against tiledsl/grid.py on the operators whose meanings differ between C and
    Python (floor division and modulo of negatives, truncating '/', shifts) and on errors."""
    from tiledsl.errors import TileError
    from tiledsl.grid import eval_formula

    lib = _grid_shim(tmp_path, GRID_SHIM)
    lib.td_last_error.restype = ctypes.c_char_p
    values = {"M": 70, "N": -9, "HQ": 4, "batch": 3}
    names = (ctypes.c_char_p * 4)(*(n.encode() for n in values))
    ints = (ctypes.c_longlong * 4)(*values.values())
    formulas = ["cdiv(M, 64)", "cdiv(N, 4)", "M // -8", "N // 4", "N % 4", "M % -8", "N / 4", "M / -8", "-N",
                "1 << 40", "M >> 2", "N >> 1", "max(M, HQ, 3)", "minimum(M, N)", "(M + 1) * 2 - batch",
                "M ^ HQ | 1 & 3", "-(-M) + +HQ", "HQ * batch * cdiv(M - 1, 32)", "M // 0", "1 << 64", "M % 0",
                "cdiv(M)", "unknown + 1", "M +", "M ** 2", "pow(M, 2)", "(M", "9223372036854775807 + 1"]
    for text in formulas:
        out = ctypes.c_longlong()
        status = lib.grid_eval(text.encode(), names, ints, 4, ctypes.byref(out))
        try:
            want = eval_formula(text, values)
        except TileError:
            want = None
        if want is not None and not -2**63 <= want < 2**63:
            want = None  # past int64: C refuses what Python's unbounded ints compute
        if want is None:
            assert status == TD_ERROR_PACKAGE, text
            assert lib.td_last_error().decode().startswith(f"bad grid formula '{text}'")
        else:
            assert status == TD_OK and out.value == want, (text, out.value, want)


CONDITION_SHIM = r"""
#include "internal.h"
#pragma GCC visibility push(default)
int cond_eval(const char *text, const char **names, const long long *values, int n, int *out) {
    td_binding b[16];
    for (int i = 0; i < n; i++) b[i] = (td_binding){names[i], values[i]};
    return td__eval_condition(text, b, n, out);
}
#pragma GCC visibility pop
"""


def test_requires_conditions_agree_with_python(runtime_lib, tmp_path):
    """requires(...) conditions as render_condition writes them: C and Python give the same truth."""
    from tiledsl.grid import eval_condition, render_condition
    from tiledsl.lang.parser import parse

    lib = _grid_shim(tmp_path, CONDITION_SHIM)
    sources = ["D % 8 == 0", "N <= 4096", "(N + 1) * 2 > D", "N > 0 and D < 64", "not (N == 3) or D != 64",
               "N > 0 and (D % 16 == 0 or N % 2 == 1)", "not (not (N >= D))", "cdiv(N, 8) * 8 == N"]
    for values in ({"N": 3, "D": 64}, {"N": 4096, "D": 8}, {"N": 7, "D": 12}):
        names = (ctypes.c_char_p * 2)(*(n.encode() for n in values))
        ints = (ctypes.c_longlong * 2)(*values.values())
        for src in sources:
            kernel = parse(f"kernel k(x: tensor[f32](N, D)) grid(1) requires({src}) {{ }}", "k.tile")
            text = render_condition(kernel.requires[0])
            out = ctypes.c_int(-1)
            assert lib.cond_eval(text.encode(), names, ints, 2, ctypes.byref(out)) == TD_OK, text
            assert bool(out.value) == eval_condition(text, values), (text, values)
