"""The HIP path end to end through hip-python's real bindings, on every arch.

Here (no AMD GPU) the runtime behind the bindings is the stand-in of tests/_hipstub.py, whose
launches run the real code objects on the emulator; where an AMD GPU is visible these tests run
against ROCm's real libamdhip64 instead (the ones that read the stand-in's counters then skip).
"""

from __future__ import annotations

import functools
import struct
import threading

import numpy as np
import pytest
from _emu_util import compile_llvm

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime import device as device_mod
from tiledsl.backends.rocm.runtime.device import DeviceError
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.backends.rocm.runtime.hip_device import HipDevice, library_path
from tiledsl.device_array import DeviceArray
from tiledsl.driver import compile_source

pytestmark = [pytest.mark.hip]

AXPY = r"""
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
define amdgpu_kernel void @axpy(ptr addrspace(1) %x, ptr addrspace(1) %y, float %a, i32 %n) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %b = mul i32 %g, 64
  %i = add i32 %b, %t
  %c = icmp slt i32 %i, %n
  br i1 %c, label %body, label %end
body:
  %px = getelementptr float, ptr addrspace(1) %x, i32 %i
  %py = getelementptr float, ptr addrspace(1) %y, i32 %i
  %xv = load float, ptr addrspace(1) %px
  %yv = load float, ptr addrspace(1) %py
  %m = fmul float %xv, %a
  %s = fadd float %m, %yv
  store float %s, ptr addrspace(1) %py
  br label %end
end:
  ret void
}
"""


def _axpy(dev, n: int = 1000, a: float = 2.0, stream=None) -> tuple[np.ndarray, np.ndarray]:
    _asm, hsaco = compile_llvm(AXPY, dev.arch.name)
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    k = dev.kernel(hsaco, "axpy")
    bx, by = dev.to_device(x), dev.to_device(y)
    try:
        dev.launch(k, (n + 63) // 64, 64, struct.pack("<QQfi", bx.addr, by.addr, a, n), stream=stream)
        dev.synchronize(stream)
        return dev.from_device(by, np.float32, n), a * x + y
    finally:
        dev.free(bx)
        dev.free(by)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_hip_device_opens_and_runs_axpy(hip_backend, arch):
    """Defect 1: hipGetDeviceProperties(deviceId) -> (err, props); the device reports its arch."""
    dev = hip_backend.device(arch)
    assert dev.arch.name == arch
    assert arch in dev.name and dev.gcn_arch_name.split(":")[0] == arch
    stream = dev.create_stream()
    got, want = _axpy(dev, stream=stream)
    dev.destroy_stream(stream)
    np.testing.assert_array_equal(got, want)
    emu = EmulatorDevice(arch)
    np.testing.assert_array_equal(got, _axpy(emu)[0])


def test_hip_device_properties_layout_matches_the_bindings(hip_backend):
    hip_backend.needs_stub()
    from hip import hip

    assert hip_backend.stub.lib.tdstub_sizeof_props() == hip.hipDeviceProp_t().c_sizeof()
    err, props = hip.hipGetDeviceProperties(hip_backend.stub.ordinal("gfx942"))
    assert props.multiProcessorCount == 304 and props.warpSize == 64
    assert props.asicRevision == 1  # the struct's last field: the layout agrees to the end


def test_hip_errors_are_decoded(hip_backend):
    """Defect 2: hipGetErrorName/String return (err, text); messages carry the text, not a tuple."""
    dev = hip_backend.device("gfx942")
    with pytest.raises(DeviceError) as info:
        dev.alloc(1 << 60, "too big")
    msg = str(info.value)
    assert "hipMalloc(1152921504606846976) for 'too big' failed: hipErrorOutOfMemory (2)" in msg
    assert "(<" not in msg and "hipSuccess" not in msg


def test_hip_load_module_reads_metadata_only(hip_backend, monkeypatch):
    """Defect 3: loading a module on HIP never runs the emulator's decoder."""
    from tiledsl.backends.rocm.emulator import loader

    class NoDecoder:
        def __init__(self, *a, **k):
            raise AssertionError("HipDevice.load_module decoded instructions")

    monkeypatch.setattr(loader, "Decoder", NoDecoder)
    dev = hip_backend.device("gfx1100")
    _asm, hsaco = compile_llvm(AXPY, "gfx1100")
    module = dev.load_module(hsaco)
    assert ".kernarg_segment_size" in module.kernels["axpy"]
    dev.unload_module(module)


def test_hip_module_for_another_arch_is_refused_before_hip(hip_backend):
    dev = hip_backend.device("gfx90a")
    _asm, hsaco = compile_llvm(AXPY, "gfx942")
    with pytest.raises(DeviceError, match="code object is for gfx942, but the device is gfx90a"):
        dev.load_module(hsaco)


def test_one_device_per_ordinal_and_modules_cached_and_unloaded(hip_backend, monkeypatch):
    """Defect 4: calls without device= share one HipDevice, load each code object once, leak no
    buffers, and `close` unloads the modules."""
    hip_backend.needs_stub()
    from tiledsl.launcher import launch

    stub = hip_backend.stub
    ordinal = stub.ordinal("gfx942")
    assert HipDevice(ordinal) is HipDevice(ordinal)
    monkeypatch.setattr(device_mod, "gpu_visible", lambda: True)
    kernel = _tiny_kernel("gfx942")
    loads, live = stub.count("module_loads"), stub.count("live_allocations")
    outs = []
    for _ in range(3):
        x = np.arange(64, dtype=np.float32)
        launch(kernel, x, 3.0)  # device=None: the default device, the one HipDevice of gfx942
        outs.append(x)
    assert stub.count("module_loads") == loads + 1
    assert stub.count("live_allocations") == live
    np.testing.assert_array_equal(outs[0], np.arange(64, dtype=np.float32) * 3)
    dev = device_mod.default_device("gfx942")
    assert dev is HipDevice(ordinal)
    kept = DeviceArray.from_numpy(dev, np.arange(64, dtype=np.float32))
    launch(kernel, kept, 2.0)
    launch(kernel, kept, 2.0)  # a DeviceArray of an earlier call is accepted by the next
    np.testing.assert_array_equal(kept.numpy(), np.arange(64, dtype=np.float32) * 4)
    kept.free()
    assert stub.count("live_allocations") == live
    unloads, modules, held = stub.count("module_unloads"), stub.count("live_modules"), dev.loaded_modules()
    assert held >= 1
    dev.close()
    assert dev.loaded_modules() == 0
    assert stub.count("module_unloads") == unloads + held and stub.count("live_modules") == modules - held


def test_current_device_is_set_on_every_thread(hip_backend):
    """Defect 5: HIP's current device is per thread; allocations and launches from another thread
    (or after another device was used) go to the device they were made through."""
    hip_backend.needs_stub()
    stub = hip_backend.stub
    dev_a, dev_b = HipDevice(stub.ordinal("gfx90a")), HipDevice(stub.ordinal("gfx1201"))
    results = {}

    def work(dev):
        buf = dev.alloc(256, "probe")
        results[dev.ordinal] = stub.allocation_device(buf.addr)
        dev.free(buf)
        got, want = _axpy(dev, n=200)
        np.testing.assert_array_equal(got, want)

    t = threading.Thread(target=work, args=(dev_b,))
    t.start()
    t.join()
    work(dev_a)
    work(dev_b)
    assert results == {dev_a.ordinal: dev_a.ordinal, dev_b.ordinal: dev_b.ordinal}
    assert stub.launch_devices()[-3:] == [dev_b.ordinal, dev_a.ordinal, dev_b.ordinal]


def test_a_kernel_fault_is_a_hip_error_and_frees_do_not_hide_it(hip_backend, monkeypatch):
    hip_backend.needs_stub()
    dev = hip_backend.device("gfx942")
    _asm, hsaco = compile_llvm(AXPY, "gfx942")
    k = dev.kernel(hsaco, "axpy")
    bx = dev.alloc(16, "x")
    with pytest.raises(DeviceError, match=r"hipModuleLaunchKernel\(axpy\) failed: hipErrorIllegalAddress"):
        dev.launch(k, 1, 64, struct.pack("<QQfi", bx.addr, bx.addr, 1.0, 64))  # 64 floats in 16 bytes
    # The stand-in knows no tensor extents: x's region is the allocation its pointer lies in.
    assert "global load of 4 bytes by lane 4 reads bytes 16..19 of x: past the end of x" in \
        str(hip_backend.stub.last_error)
    dev.free(bx)

    from tiledsl.launcher import launch

    kernel = _tiny_kernel("gfx942")
    monkeypatch.setattr(HipDevice, "launch", lambda *a, **k: (_ for _ in ()).throw(DeviceError("launch broke")))
    real_free = HipDevice.free

    def failing_free(self, buf):
        real_free(self, buf)
        raise DeviceError("free broke")

    monkeypatch.setattr(HipDevice, "free", failing_free)
    with pytest.raises(DeviceError, match="launch broke"):
        launch(kernel, np.zeros(64, np.float32), 1.0, device=dev)


def test_launcher_refuses_grids_hip_cannot_launch():
    from tiledsl.launcher import launch

    kernel = _tiny_kernel("gfx942", grid_y_symbol=True)
    x = np.zeros((70000, 64), np.float32)
    with pytest.raises(ValueError, match="more than 65535 workgroups in y or z"):
        launch(kernel, x, 1.0, device=EmulatorDevice("gfx942"))


def test_freed_device_array_is_refused():
    from tiledsl.launcher import launch

    dev = EmulatorDevice("gfx942")
    arr = DeviceArray.from_numpy(dev, np.zeros(64, np.float32))
    arr.free()
    with pytest.raises(ValueError, match="argument 'x': its DeviceArray was freed"):
        launch(_tiny_kernel("gfx942"), arr, 1.0, device=dev)
    with pytest.raises(DeviceError, match="double free"):
        arr.free()


def _check_stream_and_buffer_misuse(dev, other) -> None:
    """Streams and buffers used after their end, or on another device, are refused before anything
    reaches the runtime: HIP aborts the process on a destroyed stream's handle, and a freed buffer's
    address may belong to a newer buffer already."""
    stream = dev.create_stream()
    with pytest.raises(DeviceError, match="stream belongs to device object"):
        other.synchronize(stream)
    with pytest.raises(DeviceError, match="stream belongs to device object"):
        other.destroy_stream(stream)
    with pytest.raises(DeviceError, match="expected a Stream"):
        dev.synchronize("stream")
    dev.destroy_stream(stream)
    for misuse in (dev.destroy_stream, dev.synchronize):
        with pytest.raises(DeviceError, match="the stream was destroyed"):
            misuse(stream)
    with pytest.raises(DeviceError, match="default stream"):
        dev.destroy_stream(None)

    old = dev.alloc(64, "old")
    dev.free(old)
    young = dev.to_device(np.arange(16, dtype=np.float32), "young")
    for what, use in (("copy_in", lambda: dev.copy_in(old, np.zeros(16, np.float32))),
                      ("copy_out", lambda: dev.copy_out(old)), ("fill", lambda: dev.fill(old, 7)),
                      ("free", lambda: dev.free(old))):
        with pytest.raises(DeviceError, match=f"{what}: 'old' at 0x[0-9a-f]+ was freed"):
            use()
    with pytest.raises(DeviceError, match="value 256 is not a byte"):
        dev.fill(young, 256)
    np.testing.assert_array_equal(dev.from_device(young, np.float32, 16), np.arange(16))
    # numpy integer offsets and sizes work on both devices (HIP's pointer arithmetic took them raw);
    # floats are refused naming the argument (session 45's sweep).
    dev.copy_in(young, np.float32([7.0]).tobytes(), np.int64(4))
    assert np.frombuffer(dev.copy_out(young, np.int32(4), np.int64(4)), np.float32)[0] == 7.0
    dev.fill(young, np.uint8(0), np.int64(8), np.int64(4))
    assert np.frombuffer(dev.copy_out(young, 4, 8), np.float32)[0] == 0.0
    for what, use in (("copy_in offset", lambda: dev.copy_in(young, b"ab", 2.0)),
                      ("copy_out size", lambda: dev.copy_out(young, 4.0)),
                      ("fill offset", lambda: dev.fill(young, 0, True))):
        with pytest.raises(DeviceError, match=f"{what}: expected an integer byte count"):
            use()
    dev.free(young)


def _check_kernel_misuse(dev, other) -> None:
    """A kernel of another device, of an unloaded module, or launched with a dynamic LDS that is not
    a fitting int, is refused the same way on every device, before the runtime sees it."""
    _asm, hsaco = compile_llvm(AXPY, dev.arch.name)
    k = dev.kernel(hsaco, "axpy")
    args = struct.pack("<QQfi", 0, 0, 1.0, 0)
    with pytest.raises(DeviceError, match="the module was loaded on device object"):
        other.launch(k, 1, 64, args)
    for lds, match in ((-1, "dynamic_lds = -1 bytes"), (2**32, "does not fit"), (1.0, "expected an integer")):
        with pytest.raises(DeviceError, match=match):
            dev.launch(k, 1, 64, args, dynamic_lds=lds)
    with pytest.raises(DeviceError, match="expected a Kernel"):
        dev.launch("axpy", 1, 64, args)
    module = dev.load_module(hsaco)
    dev.unload_module(module)
    for use in (lambda: dev.unload_module(module), lambda: dev.get_kernel(module, "axpy")):
        with pytest.raises(DeviceError, match="the module was unloaded"):
            use()
    dev.close()
    with pytest.raises(DeviceError, match="the module was unloaded"):
        dev.launch(k, 1, 64, args)


def test_device_specs_and_grids_are_checked(hip_backend):
    """'hip:N' of a missing ordinal, or of a GPU of another arch than asked, is a ValueError naming
    `device`; a grid that is not integers is a DeviceError, not a TypeError from inside."""
    from tiledsl.backends.rocm.runtime.device import device_from, launch_dims

    with pytest.raises(ValueError, match="device: 'hip:99'"):
        device_from("hip:99")
    ordinal = hip_backend.device("gfx90a").ordinal
    with pytest.raises(ValueError, match=f"device: 'hip:{ordinal}' is a gfx90a GPU, but arch is gfx942"):
        device_from(f"hip:{ordinal}", "gfx942")
    for grid in (2.5, "2", (2.0,)):
        with pytest.raises(DeviceError, match="grid must be 1 to 3 positive integers"):
            launch_dims(grid, 64)


def test_emulator_refuses_kernel_misuse():
    _check_kernel_misuse(EmulatorDevice("gfx942"), EmulatorDevice("gfx942"))


def test_hip_device_refuses_kernel_misuse(hip_backend):
    _check_kernel_misuse(hip_backend.device("gfx942"), hip_backend.device("gfx950"))


def test_emulator_refuses_stream_and_buffer_misuse():
    _check_stream_and_buffer_misuse(EmulatorDevice("gfx942"), EmulatorDevice("gfx942"))


def test_hip_device_refuses_stream_and_buffer_misuse(hip_backend):
    _check_stream_and_buffer_misuse(hip_backend.device("gfx942"), hip_backend.device("gfx950"))


def test_default_device_refuses_a_gpu_of_another_arch(hip_backend, monkeypatch):
    hip_backend.needs_stub()
    monkeypatch.setattr(device_mod, "gpu_visible", lambda: True)
    from hip import hip

    real = hip.hipGetDeviceCount
    monkeypatch.setattr(hip, "hipGetDeviceCount", lambda: (real()[0], 1))  # only gfx90a is visible
    with pytest.raises(DeviceError, match=r"no visible AMD GPU is a gfx942 .*EmulatorDevice\('gfx942'\)"):
        device_mod.default_device("gfx942")


def test_missing_runtime_is_a_device_error(monkeypatch):
    from tiledsl.backends.rocm.runtime import hip_device

    def broken():
        raise RuntimeError("failed to dlopen 'libamdhip64.so'")

    with pytest.raises(DeviceError, match="the HIP runtime .* cannot be loaded: failed to dlopen"):
        hip_device.call("hipGetDeviceCount", broken)


def test_library_path_names_the_loaded_runtime(hip_backend):
    hip_backend.device("gfx942")
    path = library_path()
    assert path is not None and path.endswith("libamdhip64.so") or "libamdhip64.so." in path
    if hip_backend.stub is not None:
        assert path == str(hip_backend.stub.lib_path)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_fmha_fwd_through_hip(hip_backend, arch):
    """The attention forward, through the public API, on a HipDevice: numpy in and out, and
    DeviceArrays kept on the device."""
    from tiledsl.ops import fmha_fwd
    from tiledsl.reference import fmha_fwd_reference

    dev = hip_backend.device(arch)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 40, 2, 64)).astype(np.float16)
    k, v = (rng.standard_normal((1, 72, 1, 64)).astype(np.float16) for _ in range(2))
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=dev)
    ref_out, ref_lse = fmha_fwd_reference(q, k, v, causal=True, return_lse=True)
    np.testing.assert_allclose(out.astype(np.float64), ref_out, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)
    dq, dk, dv = (DeviceArray.from_numpy(dev, a) for a in (q, k, v))
    dout = fmha_fwd(dq, dk, dv, causal=True, device=dev)
    np.testing.assert_array_equal(dout.numpy(), out)
    for a in (dq, dk, dv, dout):
        a.free()


SCALE = """
kernel scale(x: tensor[f32](N), a: f32) grid(cdiv(N, 64)) waves(1) {
    let i = program_id(0) * 64 + arange(0, 64);
    store(x[i], load(x[i], mask=i < N, other=0.0) * a, mask=i < N);
}
"""

SCALE_ROWS = """
kernel scale(x: tensor[f32](R, N), a: f32) grid(cdiv(N, 64), R) waves(1) {
    let i = program_id(0) * 64 + arange(0, 64);
    let r = program_id(1);
    store(x[r, i], load(x[r, i], mask=i < N, other=0.0) * a, mask=i < N);
}
"""


@functools.cache
def _tiny_kernel(arch: str, grid_y_symbol: bool = False):
    """x *= a, one workgroup per 64 elements (per row, with grid_y_symbol: grid y is the rows)."""
    return compile_source(SCALE_ROWS if grid_y_symbol else SCALE, "scale.tile", arch, cache=None)


def test_doctor_reports_the_loaded_runtime_and_devices(hip_backend, capsys):
    from tiledsl.cli import main

    for arch in ARCH_NAMES:
        hip_backend.device(arch)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    path = library_path()
    assert f"HIP runtime: {path}" in out
    if hip_backend.stub is not None:
        assert path == str(hip_backend.stub.lib_path)
        for arch in ARCH_NAMES:
            assert f"HIP device {hip_backend.stub.ordinal(arch)} ({arch}" in out, out


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_fmha_bwd_plan_through_hip(hip_backend, arch):
    """The multi-stage backward through HIP: three launches over one workspace from the device's
    pool (allocated once, reused by the next call), nothing leaked."""
    from tiledsl.ops import fmha_bwd, fmha_fwd
    from tiledsl.plan import WORKSPACE_POOL
    from tiledsl.reference import fmha_bwd_reference

    dev = hip_backend.device(arch)
    rng = np.random.default_rng(5)
    q, do = (rng.standard_normal((1, 30, 2, 64)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((1, 50, 1, 64)).astype(np.float16) for _ in range(2))
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=dev)
    got = fmha_bwd(do, q, k, v, out, lse, causal=True, deterministic=True, device=dev)
    ref = fmha_bwd_reference(do, q, k, v, causal=True)
    for g, r in zip(got, ref, strict=True):
        assert np.abs(g.astype(np.float64) - r).max() <= 4e-3 * max(np.abs(r).max(), 1.0)
    if hip_backend.stub is not None:
        live, launches = hip_backend.stub.count("live_allocations"), hip_backend.stub.count("launches")
        again = fmha_bwd(do, q, k, v, out, lse, causal=True, deterministic=True, device=dev)
        assert hip_backend.stub.count("launches") == launches + 3
        assert hip_backend.stub.count("live_allocations") == live  # the pooled workspace is reused
        for a, b in zip(got, again, strict=True):
            assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    WORKSPACE_POOL.release(dev)


def test_fmha_splitkv_through_hip(hip_backend):
    """The split-KV plan (producers + combine) through HIP on one arch per family."""
    from tiledsl.ops import fmha_fwd
    from tiledsl.reference import fmha_fwd_reference

    rng = np.random.default_rng(6)
    q = rng.standard_normal((1, 2, 4, 64)).astype(np.float16)
    k, v = (rng.standard_normal((1, 260, 2, 64)).astype(np.float16) for _ in range(2))
    ref = fmha_fwd_reference(q, k, v, causal=True)
    for arch in ("gfx942", "gfx1100"):
        dev = hip_backend.device(arch)
        out = fmha_fwd(q, k, v, causal=True, num_splits=3, device=dev)
        np.testing.assert_allclose(out.astype(np.float64), ref, atol=2e-3, rtol=2e-3)
