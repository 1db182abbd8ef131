"""The emulator's memory checks know which tensor a pointer came from (memory.Regions): an access
outside the tensor (or DeviceArray view) its pointer argument names is a fault naming the tensor,
the element, the instruction, the workgroup and the lane -- even when it lands in the next
tensor, in an allocation's padding, or elsewhere in a view's buffer."""

from __future__ import annotations

import functools
import re
import struct

import numpy as np
import pytest

from tiledsl.backends.rocm.emulator.memory import GUARD, MemoryFault
from tiledsl.backends.rocm.runtime.device import DeviceError
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.device_array import DeviceArray
from tiledsl.driver import compile_source
from tiledsl.launcher import launch, prepare
from tiledsl.options import CompileOptions

pytestmark = pytest.mark.emulator

ARCHS = ["gfx942", "gfx1100"]  # CDNA (wave64) and RDNA (wave32)

# out[i + STORE_SHIFT] = x[i + SHIFT] + y[i % M] for i < K: the shifts make it overrun on purpose.
SHIFTED = """
kernel shifted[BLOCK: int = 64, WAVES: int = 1, SHIFT: int = 0, STORE_SHIFT: int = 0](
    x: tensor[f32](N),
    y: tensor[f32](M),
    out: tensor[f32](K),
) grid(cdiv(K, BLOCK)) waves(WAVES) {
    let i = program_id(0) * BLOCK + arange(0, BLOCK);
    let ok = i < K;
    let v = load(x[i + SHIFT], mask=ok, other=0.0) + load(y[i % M], mask=ok, other=0.0);
    store(out[i + STORE_SHIFT], v, mask=ok);
}
"""

# y = x for [R, C] f32 rows, 16-byte accesses (C a multiple of 4), the rows read SHIFT rows on.
ROWS = """
kernel rows[BLOCK_R: int = 16, BLOCK_C: int = 64, SHIFT: int = 0](x: tensor[f32](R, C), y: tensor[f32](R, C))
    grid(cdiv(R, BLOCK_R)) {
    let rows = program_id(0) * BLOCK_R + arange(0, BLOCK_R);
    let cols = arange(0, BLOCK_C);
    let v = load(x[rows[:, None] + SHIFT, cols[None, :]]);
    store(y[rows[:, None], cols[None, :]], v);
}
"""


# out[i] = x[i] * n[AT]: a uniform load, which LLVM makes a scalar load (s_load).
SCALAR = """
kernel scal[BLOCK: int = 64, AT: int = 0](x: tensor[f32](N), n: tensor[i32](M), out: tensor[f32](N))
    grid(cdiv(N, BLOCK)) {
    let i = program_id(0) * BLOCK + arange(0, BLOCK);
    let s = load(n[AT]);
    store(out[i], load(x[i], mask=i < N, other=0.0) * cast(s, f32), mask=i < N);
}
"""


@functools.cache
def shifted(arch: str, access: str = "buffer", **defines: int):
    """access: "buffer" (the masked accesses through buffer descriptors, the default), "view" (the
    mask `i < K` as a tile.view's bound: the descriptor's NUM_RECORDS, the row start in SOFFSET,
    tiledsl/ir/row_view.py) or "global" (CompileOptions.buffer_masks=False: 64-bit addresses and
    branches)."""
    opts = CompileOptions.make(arch, {k: str(v) for k, v in defines.items()}, buffer_masks=access != "global",
                               disjoint_rows=access == "view")
    return compile_source(SHIFTED, "shifted.tile", arch, {k: str(v) for k, v in defines.items()}, opts)


def load_name(arch: str, access: str, nbytes: int = 4) -> str:
    suffix = {4: ("dword", "b32"), 16: ("dwordx4", "b128")}[nbytes][arch != "gfx942"]
    return f"{access}_load_{suffix}"


@functools.cache
def rows(arch: str, shift: int):
    opts = CompileOptions.make(arch, {}, stride_units=(("x", 4), ("y", 4)))
    return compile_source(ROWS, "rows.tile", arch, {"SHIFT": str(shift)}, opts)


def fault(kernel, *args, device) -> str:
    with pytest.raises(MemoryFault) as info:
        launch(kernel, *args, device=device)
    return str(info.value)


def f32(n: int, start: float = 0.0) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.float32)


@pytest.mark.parametrize("access", ["buffer", "global"])
@pytest.mark.parametrize("arch", ARCHS)
def test_reading_past_a_tensor_into_the_next_one_faults_naming_it(arch, access):
    """x[i + 64] on a 64-element x: x and y are adjacent views of one buffer, so the read lands in
    y's elements -- bytes the kernel may read, but not through x's pointer. A buffer descriptor
    (48-bit base, no room for the tag) is checked against the tensor whose pointer it starts at."""
    dev = EmulatorDevice(arch)
    buf = DeviceArray.from_numpy(dev, f32(128), "xy")
    x = DeviceArray(buf.buffer, (64,), buf.dtype, (1,), 0)
    y = DeviceArray(buf.buffer, (64,), buf.dtype, (1,), 64)
    out = np.zeros(64, np.float32)
    msg = fault(shifted(arch, access, SHIFT=64), x, y, out, device=dev)
    assert re.search(rf"kernel 'shifted' \({arch}\), workgroup \(0, 0, 0\), wave 0, instruction "
                     rf"'{load_name(arch, access)}' at 0x[0-9a-f]+: global load of 4 bytes by lane 0 reads x\[64\]: "
                     r"past the end of x \(64 elements, f32; a view at byte 0 of buffer 'xy' \(512 bytes\)\)$",
                     msg), msg
    # The same kernel without the shift reads what it should, through the same views.
    launch(shifted(arch, access), x, y, out, device=dev)
    np.testing.assert_array_equal(out, f32(64) + f32(64, 64))


@pytest.mark.parametrize("arch", ARCHS)
def test_reading_past_a_tensor_through_a_row_view_faults_naming_it(arch):
    """The same read where the mask bounds the index (a tile.view): the descriptor keeps x's base
    and the block's start goes into SOFFSET, so the emulator still checks against x; the lanes'
    offsets no longer carry the shift, so the loads are 16 bytes wide."""
    dev = EmulatorDevice(arch)
    buf = DeviceArray.from_numpy(dev, f32(128), "xy")
    x = DeviceArray(buf.buffer, (64,), buf.dtype, (1,), 0)
    y = DeviceArray(buf.buffer, (64,), buf.dtype, (1,), 64)
    out = np.zeros(64, np.float32)
    msg = fault(shifted(arch, "view", SHIFT=64), x, y, out, device=dev)
    assert re.search(rf"instruction '{load_name(arch, 'buffer', 16)}' at 0x[0-9a-f]+: global load of 16 bytes by "
                     r"lane 0 reads x\[64\.\.67\]: past the end of x \(64 elements", msg), msg
    launch(shifted(arch, "view"), x, y, out, device=dev)
    np.testing.assert_array_equal(out, f32(64) + f32(64, 64))


@pytest.mark.parametrize("arch", ARCHS)
def test_negative_index_faults_before_the_start(arch):
    dev = EmulatorDevice(arch)
    msg = fault(shifted(arch, "global", SHIFT=-64), f32(64), f32(64), np.zeros(64, np.float32), device=dev)
    assert "by lane 0 reads x[-64]: before the start of x (64 elements, f32)" in msg, msg


@pytest.mark.parametrize("arch", ARCHS)
def test_negative_buffer_offsets_read_zero_like_the_hardware(arch):
    """Through a buffer descriptor x[-64] is a byte offset above 2 GiB: out of the descriptor's
    range, so the hardware reads 0 (and drops a store) -- the emulator does the same, no fault."""
    out = np.zeros(64, np.float32)
    launch(shifted(arch, SHIFT=-64), f32(64), f32(64, 1), out, device=EmulatorDevice(arch))
    np.testing.assert_array_equal(out, f32(64, 1))


@pytest.mark.parametrize("arch", ARCHS)
def test_reads_in_allocation_padding_fault(arch):
    """A 60-byte allocation (15 floats) read at element 15; a 3-float DeviceArray (a 16-byte
    buffer: DeviceArray.empty never allocates less) read at element 3 -- both inside memory the
    runtime handed out, both past the tensor."""
    dev = EmulatorDevice(arch)
    msg = fault(shifted(arch), f32(15), f32(16), np.zeros(16, np.float32), device=dev)
    assert re.search(r"global load of 4 bytes by lane \d+ reads x\[15\]: past the end of x \(15 elements, f32\)$",
                     msg), msg
    small = DeviceArray.from_numpy(dev, f32(3), "small")
    assert small.buffer.size == 16
    msg = fault(shifted(arch), small, f32(4), np.zeros(4, np.float32), device=dev)
    assert re.search(r"reads x\[3\]: past the end of x \(3 elements, f32; a view at byte 0 of buffer 'small' "
                     r"\(16 bytes\)\)$", msg), msg


@pytest.mark.parametrize("arch", ARCHS)
def test_store_past_the_end_faults(arch):
    dev = EmulatorDevice(arch)
    out = np.zeros(64, np.float32)
    msg = fault(shifted(arch, STORE_SHIFT=1), f32(64), f32(64), out, device=dev)
    wave_store = "buffer_store_dword" if arch == "gfx942" else "buffer_store_b32"
    assert re.search(rf"workgroup \(0, 0, 0\), wave 0, instruction '{wave_store}' at 0x[0-9a-f]+: global store of "
                     r"4 bytes by lane \d+ writes out\[64\]: past the end of out \(64 elements, f32\)$", msg), msg
    assert not out.any()  # a faulting launch copies nothing back


@pytest.mark.parametrize("arch", ARCHS)
def test_scalar_load_past_the_end_faults(arch):
    """n has 3 i32s (the launcher allocates 16 bytes): n[3] is inside the allocation, not n."""
    k = compile_source(SCALAR, "scal.tile", arch, {"AT": "3"})
    msg = fault(k, f32(64), np.arange(3, dtype=np.int32), np.zeros(64, np.float32), device=EmulatorDevice(arch))
    assert re.search(r"instruction 's_load_(dword|b32)' at 0x[0-9a-f]+: scalar load of 4 bytes reads n\[3\]: past "
                     r"the end of n \(3 elements, i32\)$", msg), msg


@pytest.mark.parametrize("arch", ARCHS)
def test_view_inside_its_buffer(arch):
    """A DeviceArray view of elements [64, 128) of a 256-float buffer: reading past its end or
    before its start stays inside the buffer, and faults."""
    dev = EmulatorDevice(arch)
    whole = DeviceArray.from_numpy(dev, f32(256), "whole")
    view = DeviceArray(whole.buffer, (64,), whole.dtype, (1,), 64)
    out = np.zeros(64, np.float32)
    for shift, where in ((64, r"reads x\[64\]: past the end of x"), (-1, r"reads x\[-1\]: before the start of x")):
        msg = fault(shifted(arch, "global", SHIFT=shift), view, f32(64), out, device=dev)
        assert re.search(where + r" \(64 elements, f32; a view at byte 256 of buffer 'whole' \(1024 bytes\)\)$",
                         msg), msg
    launch(shifted(arch), view, np.zeros(64, np.float32), out, device=dev)
    np.testing.assert_array_equal(out, f32(64, 64))


@pytest.mark.parametrize("arch", ARCHS)
def test_vector_access_names_the_elements(arch):
    """16-byte loads of a [16, 64] f32 x one row past its end: lane 0 reads x[1024..1027]."""
    dev = EmulatorDevice(arch)
    x, y = f32(16 * 64).reshape(16, 64), np.zeros((16, 64), np.float32)
    k = rows(arch, 1)
    assert any(m in k.asm for m in ("global_load_dwordx4", "global_load_b128"))
    msg = fault(k, x, y, device=dev)
    assert re.search(r"global load of 16 bytes by lane \d+ reads x\[1024\.\.1027\]: past the end of x "
                     r"\(shape \(16, 64\) spanning 1024 elements, f32\)$", msg), msg
    launch(rows(arch, 0), x, y, device=dev)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("arch", ARCHS)
def test_raw_launch_checks_the_allocation_each_pointer_lies_in(arch):
    """Without the launcher's tensor extents (a raw Device.launch), each pointer argument's region
    is its allocation: reading past x's 256 bytes faults in the guard gap, never reaching y."""
    dev = EmulatorDevice(arch)
    k = shifted(arch, SHIFT=64)
    fn = dev.kernel(k.hsaco, k.manifest["symbol"])
    bx, by, bo = dev.to_device(f32(64), "x"), dev.to_device(f32(64), "y"), dev.alloc(256, "out")
    assert by.addr - bx.addr >= 256 + GUARD
    prep = prepare(k.manifest, [np.zeros(64, np.float32)] * 3, {})
    args = prep.kernargs(k.manifest, {"x": bx.addr, "y": by.addr, "out": bo.addr})
    with pytest.raises(MemoryFault, match=r"global load of 4 bytes by lane 0 reads bytes 256\.\.259 of x: past the "
                                          r"end of x \(256-byte allocation\)$"):
        dev.launch(fn, prep.grid, prep.block, args)


@pytest.mark.parametrize("schedule_seed", range(4))
def test_the_first_fault_does_not_depend_on_the_schedule(schedule_seed):
    """Workgroups 3..7 overrun x (and in each, both waves do): shuffled or not, the fault is the
    one of workgroup 3's wave 0, as in launch order."""
    k = shifted("gfx942", BLOCK=128, WAVES=2)
    args = f32(3 * 128), f32(64), np.zeros(8 * 128, np.float32)
    want = fault(k, *args, device=EmulatorDevice("gfx942"))
    assert "workgroup (3, 0, 0), wave 0," in want and "reads x[384]" in want, want
    got = fault(k, *args, device=EmulatorDevice("gfx942", schedule="shuffle", seed=schedule_seed))
    assert got == want


@pytest.mark.hip
def test_the_hip_stand_in_checks_each_pointer_against_its_allocation(hip_backend):
    """Through HIP the tensor extents are unknown; the stand-in's launches tag each pointer with
    the allocation it lies in, so reading past x never reads the buffer next to it."""
    hip_backend.needs_stub()
    dev = hip_backend.device("gfx942")
    bx = dev.to_device(f32(64), "x")
    by = dev.to_device(f32(64), "y")
    assert by.addr == bx.addr + 256  # the stand-in's arena packs them back to back
    out = np.zeros(64, np.float32)
    with pytest.raises(DeviceError, match="hipErrorIllegalAddress"):
        launch(shifted("gfx942", "global", SHIFT=64), DeviceArray(bx, (64,), np.dtype(np.float32), (1,)),
               DeviceArray(by, (64,), np.dtype(np.float32), (1,)), out, device=dev)
    msg = str(hip_backend.stub.last_error)
    assert re.search(r"workgroup \(0, 0, 0\), wave 0, instruction 'global_load_dword' at 0x[0-9a-f]+: global load of "
                     r"4 bytes by lane 0 reads bytes 256\.\.259 of allocation \d+ of device \d+: past the end of "
                     r"allocation \d+ of device \d+ \(256-byte allocation\)$", msg), msg
    dev.free(bx)
    dev.free(by)


def test_kernarg_pointers_are_tagged_and_restored():
    """What the kernel sees: tagged pointers in its kernarg segment (tag t in bits 48 and up for
    the t-th pointer argument); the caller's addresses are unchanged."""
    from tiledsl.backends.rocm.emulator.memory import TAG_SHIFT, Heap
    from tiledsl.backends.rocm.runtime.emulator_device import tag_pointers

    heap = Heap()
    a, b = heap.alloc(100, "a"), heap.alloc(8, "b")
    meta = {".args": [{".offset": 0, ".size": 8, ".value_kind": "global_buffer"},
                      {".offset": 8, ".size": 4, ".value_kind": "by_value"},
                      {".offset": 16, ".size": 8, ".value_kind": "global_buffer", ".name": "bee"},
                      {".offset": 24, ".size": 8, ".value_kind": "global_buffer"}]}
    raw = struct.pack("<QiiQQ", a + 4, 7, 0, b, 0)  # a pointer inside a, b, and a null pointer
    tagged, regions = tag_pointers(meta, raw, heap)
    p0, n, _, p1, p2 = struct.unpack("<QiiQQ", tagged)
    assert (p0, n, p1, p2) == (a + 4 | 1 << TAG_SHIFT, 7, b | 2 << TAG_SHIFT, 0)
    assert [(r.name, r.addr, r.size, r.tag) for r in regions] == [("a", a, 100, 1), ("bee", b, 8, 2)]
