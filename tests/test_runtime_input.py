"""Bad input to the runtime (launcher, DeviceArray, devices, plans, CLI) is a clear error before
anything runs: found by probing the API as an adversarial user would."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.device import DeviceError
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.cli import main
from tiledsl.device_array import DeviceArray
from tiledsl.driver import compile_source
from tiledsl.errors import TileError
from tiledsl.launcher import launch

pytestmark = pytest.mark.emulator

GEMM = Path(__file__).resolve().parent.parent / "examples" / "gemm.tile"


def gemm(arch: str):
    return compile_source(GEMM.read_text(), str(GEMM), arch, {})


def operands(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((1, 16, 32)).astype(np.float16), rng.standard_normal((1, 8, 32)).astype(np.float16),
            np.zeros((1, 16, 8), np.float16))


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_outputs_that_cannot_take_the_result_are_refused(arch: str) -> None:
    """A read-only or self-overlapping output would lose or scramble the result silently."""
    kernel, dev = gemm(arch), EmulatorDevice(arch)
    a, b, c = operands()
    read_only = c.copy()
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="argument 'c': the kernel writes it, but the array is read-only"):
        launch(kernel, a, b, read_only, 1.0, device=dev)
    with pytest.raises(ValueError, match="argument 'c': the kernel writes it, but the array is read-only"):
        launch(kernel, a, b, np.broadcast_to(np.zeros((1, 1, 8), np.float16), (1, 16, 8)), 1.0, device=dev)
    base = np.zeros(64, np.float16)
    overlapping = np.lib.stride_tricks.as_strided(base, (1, 16, 8), (0, 2, 2))  # rows overlap columns
    with pytest.raises(ValueError, match=r"argument 'c': .* its elements overlap in memory \(shape \(1, 16, 8\), "
                                         r"strides \(0, 1, 1\) elements\)"):
        launch(kernel, a, b, overlapping, 1.0, device=dev)
    assert dev.launches == []
    # Inputs may be read-only or broadcast; the result matches numpy.
    launch(kernel, np.broadcast_to(a, a.shape), b, c, 0.5, device=dev)
    ref = 0.5 * a[0].astype(np.float32) @ b[0].astype(np.float32).T
    np.testing.assert_allclose(c[0].astype(np.float32), ref, atol=2e-2, rtol=2e-2)


def test_interleaved_views_that_do_not_overlap_are_accepted() -> None:
    from tiledsl.launcher import elements_overlap

    assert not elements_overlap((2, 2), (3, 2))  # offsets 0, 2, 3, 5: interleaved but distinct
    assert elements_overlap((2, 3), (2, 1))  # offsets 0, 1, 2, 2, 3, 4
    assert not elements_overlap((4, 1, 8), (8, 0, 1))  # a size-1 dim's stride is never used


def test_scalars_and_empty_arrays() -> None:
    kernel, dev = gemm("gfx942"), EmulatorDevice("gfx942")
    a, b, c = operands()
    with pytest.raises(ValueError, match=r"argument 'alpha': 1e\+39 does not fit in f32"):
        launch(kernel, a, b, c, 1e39, device=dev)
    # numpy gives empty arrays stride 0: nothing is read, so no stride rule applies.
    empty_m = np.zeros((1, 0, 32), np.float16)
    launch(kernel, empty_m, b, np.zeros((1, 0, 8), np.float16), 1.0, device=dev)
    assert dev.launches == []  # an empty grid
    empty_k = (np.zeros((1, 16, 0), np.float16), np.zeros((1, 8, 0), np.float16))
    c[:] = 1
    launch(kernel, *empty_k, c, 1.0, device=dev)
    assert not c.any()  # a sum over no terms


def test_device_arrays_are_checked_when_made() -> None:
    dev = EmulatorDevice("gfx942")
    x = DeviceArray.from_numpy(dev, np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"DeviceArray: offset: expected a tuple of ints >= 0, got \(-4,\)"):
        DeviceArray(x.buffer, x.shape, x.dtype, x.strides, -4)
    with pytest.raises(ValueError, match=r"DeviceArray: shape: expected a tuple of ints >= 0, got \(2, 3.0\)"):
        DeviceArray(x.buffer, (2, 3.0), x.dtype, x.strides)
    with pytest.raises(ValueError, match=r"DeviceArray: strides \(1,\) do not match shape \(2, 3\)"):
        DeviceArray(x.buffer, x.shape, x.dtype, (1,))
    with pytest.raises(ValueError, match="DeviceArray: buffer: expected a device Buffer"):
        DeviceArray(123, x.shape, x.dtype, x.strides)
    assert DeviceArray(x.buffer, x.shape, np.float32, x.strides).dtype == np.dtype(np.float32)
    with pytest.raises(ValueError, match="DeviceArray: dtype: expected a numeric dtype, got object"):
        DeviceArray.empty(dev, (4,), object)
    with pytest.raises(ValueError, match="DeviceArray: dtype: expected a numpy dtype, got 'nope'"):
        DeviceArray.empty(dev, (4,), "nope")
    with pytest.raises(ValueError, match=r"shape: expected a tuple of ints >= 0, got \(-1, 4\)"):
        DeviceArray.empty(dev, (-1, 4), np.float16)
    with pytest.raises(ValueError, match="DeviceArray.from_numpy: expected a numpy array, got list"):
        DeviceArray.from_numpy(dev, [1, 2, 3])
    with pytest.raises(ValueError, match=r"transpose: expected a permutation of 0..1, got \(0, 0\)"):
        x.transpose(0, 0)
    with pytest.raises(ValueError, match=r"squeeze0: expected a leading axis of size 1, got shape \(2, 3\)"):
        x.squeeze0()
    np.testing.assert_array_equal(x.transpose(1, 0).numpy(), np.zeros((3, 2), np.float32))


def test_device_memory_calls_are_checked() -> None:
    dev, other = EmulatorDevice("gfx942"), EmulatorDevice("gfx942")
    with pytest.raises(DeviceError, match="cannot allocate 3.5 bytes for 'buffer': expected an int >= 0"):
        dev.alloc(3.5)
    with pytest.raises(DeviceError, match=r"cannot allocate 1125899906842624 bytes for 'huge': out of memory"):
        dev.alloc(2**50, "huge")
    buf = dev.alloc(64, "kept")  # the failed allocation left the heap usable
    dev.copy_in(buf, np.arange(16, dtype=np.float32))
    assert np.frombuffer(dev.copy_out(buf), np.float32)[15] == 15
    with pytest.raises(DeviceError, match="copy_in: expected bytes or a numpy array of numbers, got str"):
        dev.copy_in(buf, "abc")
    with pytest.raises(DeviceError, match="free: expected a Buffer"):
        dev.free(123)
    with pytest.raises(DeviceError, match=r"copy_out: 'kept' is a buffer of device object 0x[0-9a-f]+ .*, not of"):
        other.copy_out(buf)
    with pytest.raises(TileError, match="unknown arch None: expected one of gfx90a"):
        EmulatorDevice(None)
    with pytest.raises(TileError, match=r"unknown arch \['gfx942'\]"):
        EmulatorDevice(["gfx942"])
    with pytest.raises(DeviceError, match="seed: expected an int >= 0, got 'x'"):
        EmulatorDevice("gfx942", schedule="shuffle", seed="x")
    with pytest.raises(DeviceError, match="lockstep: expected a bool, got 'no'"):
        EmulatorDevice("gfx942", lockstep="no")


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_plan_misuse_is_refused_before_any_launch(arch: str) -> None:
    from tiledsl.ops import fmha_bwd_plan

    dev = EmulatorDevice(arch)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 9, 2, 64)).astype(np.float16)
    kv = q[:, :, :1].copy()
    lse = np.zeros((1, 2, 9), np.float32)
    plan = fmha_bwd_plan(q, q, kv, kv, q, lse, device=dev)
    size = plan.workspace_size
    other = EmulatorDevice(arch)
    for device, workspace, message in (
            (dev, dev.alloc(size - 4), f"workspace: the plan needs {size} bytes, got a buffer of {size - 4}"),
            (dev, None, "workspace: expected a device Buffer"),
            (dev, other.alloc(size), r"workspace: a buffer of device object 0x[0-9a-f]+ .*, but the plan runs on"),
            (f"emulator:{arch}", dev.alloc(size), "device: expected a Device object")):
        with pytest.raises(ValueError, match=message):
            plan.prepare_workspace(device, workspace)
    with pytest.raises(ValueError, match="env: expected a mapping"):
        plan.run(dev, None)
    with pytest.raises(ValueError, match="stage dot_do_o: the call's arguments have no 'out' .its parameter o."):
        plan.run(dev, {})
    d = {name: DeviceArray.from_numpy(dev, x) for name, x in
         (("q", q), ("k", kv), ("v", kv), ("do", q), ("out", q), ("lse", lse))}
    env = {**d, "dq": DeviceArray.empty(dev, (1, 9, 2, 32), np.float16),
           "dk": DeviceArray.empty(dev, kv.shape, kv.dtype), "dv": DeviceArray.empty(dev, kv.shape, kv.dtype),
           "cu_seqlens_q": np.zeros(1, np.int32), "cu_seqlens_k": np.zeros(1, np.int32), "scale": 0.125,
           "softcap": 1.0}
    # dq's head dim is not the plan's: refused by name before the first stage runs (Plan.shapes).
    with pytest.raises(ValueError, match=r"argument 'dq': shape \[1, 9, 2, 32\], but this plan was made for "
                                         r"\[1, 9, 2, 64\]"):
        plan.run(dev, env)
    assert dev.launches == []


def test_plans_follow_the_settings_of_each_call(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cached plan does not outlive the settings it was built under."""
    from tiledsl.ops import fmha_fwd

    q = np.zeros((1, 4, 1, 64), np.float16)
    dev = EmulatorDevice("gfx942")
    fmha_fwd(q, q, q, device=dev)
    monkeypatch.setenv("TILEDSL_OFFLINE", "maybe")
    with pytest.raises(TileError, match="TILEDSL_OFFLINE: expected one of '1', 'true', .* got 'maybe'"):
        fmha_fwd(q, q, q, device=dev)
    monkeypatch.setenv("TILEDSL_OFFLINE", "1")
    monkeypatch.setenv("TILEDSL_KERNELS", str(tmp_path / "nowhere"))
    with pytest.raises(TileError, match="TILEDSL_KERNELS: "):
        fmha_fwd(q, q, q, device=dev)


@pytest.mark.parametrize("argv,message", [
    (["plan", "fmha_bwd", "--arch", "gfx942", "--hdim", "64", "--batch", "99999999999"],
     "--batch: expected 1..65535"),
    (["plan", "fmha_bwd", "--arch", "gfx942", "--hdim", "64", "--batch", "0"], "--batch: expected 1..65535"),
    (["plan", "fmha_bwd", "--arch", "gfx942", "--hdim", "64", "--varlen="], "--varlen: expected N or N/M"),
    (["plan", "fmha_bwd", "--arch", "gfx942", "--hdim", "64", "--bias-dtype", "f16"],
     "--bias-dtype: the dtype of a bias tensor; add --bias tensor"),
    (["plan", "fmha_bwd", "--arch", "gfx942", "--hdim", "64", "--mask", "window=a,b"],
     "--mask: expected window=LEFT,RIGHT .*, got 'window=a,b'"),
    (["profile", "fmha_fwd", "--arch", "gfx942", "--batch", "70000"], "--batch: expected 1..65535"),
])
def test_cli_size_and_option_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert re.search(message, err), err


def test_cli_output_paths_and_odd_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for argv in (["profile", "fmha_fwd", "--arch", "gfx942", "--plot", str(a_file)],
                 ["prebuild", "fmha_fwd", "--arch", "gfx942", "--hdim", "64", "--dtype", "f16", "--mask", "none",
                  "--cache-dir", str(a_file)]):
        assert main(argv) == 2
        assert f"{a_file}: is a file; expected a directory" in capsys.readouterr().err
    out = tmp_path / "out"
    assert main(["compile", str(GEMM), "--arch", "gfx942", "-o", str(out), "-q"]) == 0
    (out / "gemm.gfx942.s").write_bytes(b"\xff\xfe binary")
    assert main(["inspect", str(out)]) == 2
    assert "gemm.gfx942.s: not a readable assembly listing" in capsys.readouterr().err


TWO_OUTPUTS = """kernel two_outputs(x: tensor[f32](R, C), a: tensor[f32](R, C), b: tensor[f32](R, C)) grid(R) waves(1) {
    let r = program_id(0);
    let c = arange(0, 64);
    let v = load(x[r, c], mask=c < C, other=0.0);
    store(a[r, c], v + 100.0, mask=c < C);
    store(b[r, c], v + 200.0, mask=c < C);
}
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_outputs_that_are_views_of_one_array(arch: str) -> None:
    """numpy outputs are copied back element by element: two views of one array side by side (column
    halves, interleaved rows) both keep their results, where copying back each view's byte span
    wrote one's stale gaps over the other's results. Views that share elements are refused."""
    kernel, dev = compile_source(TWO_OUTPUTS, "two_outputs.tile", arch), EmulatorDevice(arch)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    halves = np.zeros((3, 8), np.float32)
    launch(kernel, x, halves[:, :4], halves[:, 4:], device=dev)
    np.testing.assert_array_equal(halves, np.concatenate([x + 100, x + 200], axis=1))
    rows = np.zeros((6, 4), np.float32)
    launch(kernel, x, rows[0::2], rows[1::2], device=dev)
    np.testing.assert_array_equal(rows, np.stack([x + 100, x + 200], axis=1).reshape(6, 4))
    for a, b in ((halves[:, :4], halves[:, :4]), (halves[:, :4], halves[:, 2:6])):
        with pytest.raises(ValueError, match="arguments 'a' and 'b': the kernel writes both, and they share elements"):
            launch(kernel, x, a, b, device=dev)


def test_launch_and_compile_argument_types() -> None:
    """Wrong argument types are errors naming the argument, not failures deep inside; a DeviceArray
    whose shape's product passes 2**63 is not taken for an empty one (its view checked, not skipped);
    a long double beyond f64's range does not become an f32 infinity."""
    from tiledsl.load import load_kernel

    with pytest.raises(TypeError, match="defines must be a mapping"):
        compile_source(TWO_OUTPUTS, "two_outputs.tile", "gfx942", [("B", "1")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="source must be a str, got bytes"):
        compile_source(TWO_OUTPUTS.encode(), "two_outputs.tile", "gfx942")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path: expected a file or directory path"):
        load_kernel(None)  # type: ignore[arg-type]
    dev = EmulatorDevice("gfx942")
    small = DeviceArray.from_numpy(dev, np.arange(8, dtype=np.float32))
    huge = DeviceArray(small.buffer, (2**29, 2**29, 64), np.float32, (0, 0, 1))
    assert huge.size == 2**64
    kernel = compile_source(TWO_OUTPUTS, "two_outputs.tile", "gfx942")
    with pytest.raises(ValueError, match="argument 'x'"):
        launch(kernel, DeviceArray(small.buffer, (2**31 + 1, 2**31 + 1), np.float32, (0, 1)),
               np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32), device=dev)
    scalar = compile_source("kernel fill(y: tensor[f32](N), a: f32) grid(1) waves(1) {\n"
                            "    let c = arange(0, 64);\n    store(y[c], zeros([64], f32) + a, mask=c < N);\n}\n",
                            "fill.tile", "gfx942")
    with pytest.raises(ValueError, match="argument 'a': .* does not fit in f32"):
        launch(scalar, np.zeros(4, np.float32), np.longdouble("1e4000"), device=dev)


def test_failed_attention_calls_free_what_they_allocated():
    """A freed or foreign DeviceArray argument is refused before the call allocates its outputs,
    and outputs allocated before a later failure are freed: before, each such call leaked its
    outputs (2 to 5 buffers; found by an adversarial sweep of the HIP path, session 45)."""
    from tiledsl.ops import fmha_bwd, fmha_fwd, fmha_fwd_kvcache

    dev, other = EmulatorDevice("gfx942"), EmulatorDevice("gfx942")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 20, 2, 64)).astype(np.float16)
    k = rng.standard_normal((1, 33, 1, 64)).astype(np.float16)
    dq, dk, dv = (DeviceArray.from_numpy(dev, a) for a in (q, k, k))
    foreign = DeviceArray.from_numpy(other, k)
    out, lse = fmha_fwd(dq, dk, dv, return_lse=True)
    live = len(dev.heap._allocs)
    freed = DeviceArray.from_numpy(dev, k)
    freed.free()
    for call, match in ((lambda: fmha_fwd(dq, freed, dv, return_lse=True), "argument 'k': its DeviceArray was freed"),
                        (lambda: fmha_fwd(dq, foreign, dv), "argument 'k': a DeviceArray of device object"),
                        (lambda: fmha_bwd(out, dq, dk, dv, out, DeviceArray.from_numpy(other, lse.numpy())),
                         "argument 'lse': a DeviceArray of"),
                        (lambda: fmha_fwd_kvcache(dq, freed, dv, cache_seqlens=5),
                         "argument 'k_cache': its DeviceArray")):
        with pytest.raises(ValueError, match=match):
            call()
        assert len(dev.heap._allocs) == live
    # A failure after the outputs exist (the plan refuses a workspace of another device) frees them.
    with pytest.raises(ValueError):
        fmha_bwd(out, dq, dk, dv, out, lse, workspace=DeviceArray.from_numpy(other, np.zeros(1 << 20, np.uint8)))
    assert len(dev.heap._allocs) == live
