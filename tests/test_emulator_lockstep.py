"""Lockstep emulation (backends/rocm/emulator/lockstep.py) against the ordinary one-wave-at-a-time
path: the same launches both ways give bit-identical outputs, the same statistics and the same
faults, on every arch; and the launches really ran in lockstep (no silent fallback)."""

from __future__ import annotations

import functools
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from _fmha_util import assert_grads_close

from tiledsl import ops
from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.emulator import lockstep
from tiledsl.backends.rocm.emulator.memory import MemoryFault
from tiledsl.backends.rocm.runtime.device import DeviceError
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.device_array import DeviceArray
from tiledsl.driver import compile_source
from tiledsl.launcher import launch
from tiledsl.ops import fmha_bwd_plan
from tiledsl.options import CompileOptions
from tiledsl.plan import WORKSPACE_POOL
from tiledsl.reference import fmha_bwd_reference

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
from cases import CASES  # noqa: E402

pytestmark = pytest.mark.emulator

SAME_STATS = ("wave_instructions", "workgroups", "max_workgroup_instructions", "global_load_bytes",
              "global_load_unique_bytes")


def both_ways(arch: str, run, same_stats: tuple[str, ...] = SAME_STATS) -> tuple[object, object]:
    """`run(device)` on an ordinary and a lockstep device: both results, after checking the
    launches' statistics `same_stats` agree and the lockstep device ran every multi-wave launch in
    lockstep."""
    old, new = EmulatorDevice(arch, lockstep=False), EmulatorDevice(arch)
    a, b = run(old), run(new)
    assert len(old.launches) == len(new.launches)
    for lo, ln in zip(old.launches, new.launches, strict=True):
        assert lo["path"] == "ordinary"
        assert ln["path"] in ("lockstep", "ordinary"), ln["path"]  # "fallback: ..." would be a lockstep gap
        assert {s: lo[s] for s in same_stats} == {s: ln[s] for s in same_stats}, ln["kernel"]
    assert any(ln["path"] == "lockstep" for ln in new.launches)
    return a, b


def assert_bits_equal(a, b) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


@functools.cache
def example(name: str, arch: str):
    path = EXAMPLES / f"{name}.tile"
    return compile_source(path.read_text(), str(path), arch, {"DT": "f16"})


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_examples_bit_identical(name: str, arch: str) -> None:
    def run(dev):
        args, kwargs, _ = CASES[name]("f16", np.random.default_rng(3))
        launch(example(name, arch), *args, device=dev, **kwargs)
        return [a for a in args if isinstance(a, np.ndarray)]

    for a, b in zip(*both_ways(arch, run), strict=True):
        assert_bits_equal(a, b)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_attention_forward_bit_identical(arch: str) -> None:
    """Causal attention: workgroups loop over different numbers of key blocks, so groups split
    and merge; MFMA/WMMA, LDS, compares and selects run batched."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 256, 2, 64)).astype(np.float16) for _ in range(3))
    (oa, la), (ob, lb) = both_ways(arch, lambda dev: ops.fmha_fwd(q, k, v, causal=True, return_lse=True,
                                                                  device=dev))
    assert_bits_equal(oa, ob)
    assert_bits_equal(la, lb)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_tile_staged_before_a_loop_is_read_before_the_loop_overwrites_it(arch: str) -> None:
    """Q staged in LDS before the key loop, K and V in the loop in Q's bytes: the barrier that
    keeps the first K store behind every wave's reads of Q runs in the loop's first iteration.
    Just before the loop, LLVM sank those reads past it (into the loop's preheader), and a wave
    that ran after another had stored its rows of K read them as Q: waves in shuffled orders
    between barriers expose that; both lockstep and in-order emulation agree with them."""
    kernel = _staged_before_loop(arch, wave_private_stagings=True)
    a, b = both_ways(arch, lambda dev: _run_staged_before_loop(kernel, dev)[0])
    assert_bits_equal(a, b)
    _check_shuffled(arch, kernel)
    np.testing.assert_allclose(a, _run_staged_before_loop(kernel, None)[1], rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_wave_private_stagings_end_without_a_barrier(arch: str) -> None:
    """A staging whose lanes read back only what their own wave stored (stage-lds' _wave_private:
    here Q, whose rows stay with their wave from the coalesced layout to the operand on CDNA and
    gfx11, and gfx11's cast S, from the WMMA accumulator to an operand) ends with a wave fence
    instead of a workgroup barrier: the kernel has one barrier fewer, except on gfx1201, whose
    cast S stays in registers and whose Q rows move between waves. Waves run in shuffled orders
    between barriers still get numpy's result. (gfx11's cast S, with lane exchanges, takes no LDS:
    the next test.)"""
    fenced = _staged_before_loop(arch, wave_private_stagings=True, lane_exchange=False)
    barriers = _staged_before_loop(arch, wave_private_stagings=False, lane_exchange=False)
    fewer = 0 if arch == "gfx1201" else 1
    assert fenced.asm.count("s_barrier") == barriers.asm.count("s_barrier") - fewer
    _check_shuffled(arch, fenced)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_lane_exchanges_replace_an_lds_round_trip(arch: str) -> None:
    """gfx11's cast S goes from the WMMA accumulator to an A operand by exchanging registers with
    the lanes 16 away (passes/lane_exchange.py: 8 v_permlanex16_b32) instead of through LDS: 16
    fewer LDS stores, 4 fewer reads and two barriers fewer. No other arch's conversions here are
    exchanges: their code is the same either way. Shuffled wave orders still get numpy's result."""
    exchanged = _staged_before_loop(arch, lane_exchange=True)
    staged = _staged_before_loop(arch, lane_exchange=False)
    counts = [tuple(k.asm.count(i) for i in ("v_permlanex16", "s_barrier", "ds_store", "ds_load"))
              for k in (exchanged, staged)]
    if arch == "gfx1100":
        assert counts == [(8, 4, 11, 20), (0, 6, 27, 24)], counts
    else:
        assert exchanged.asm == staged.asm
    _check_shuffled(arch, exchanged)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_swizzled_exchanges(arch: str) -> None:
    """With the scores' keys relabelled (lane_exchange.word_relabelling), every word of gfx11's
    cast S is one whole word of a lane's own or of the lane 16 away's: one ds_swizzle_b32 each
    (16), where the exchange took 8 v_permlanex16_b32 and 16 v_perm_b32. K's rows are read in the
    relabelled order. Other archs exchange nothing: their code is the same. Shuffled wave orders
    still get numpy's result."""
    swizzled = _staged_before_loop(arch, lane_exchange=True, swizzle_exchange=True)
    exchanged = _staged_before_loop(arch, lane_exchange=True)
    counts = [tuple(k.asm.count(i) for i in ("ds_swizzle_b32", "v_permlanex16", "v_perm_b32"))
              for k in (swizzled, exchanged)]
    if arch == "gfx1100":
        assert counts == [(16, 0, 0), (0, 8, 16)], counts
    else:
        assert swizzled.asm == exchanged.asm
    _check_shuffled(arch, swizzled)
    a = _run_staged_before_loop(swizzled, EmulatorDevice(arch))
    np.testing.assert_allclose(a[0], a[1], rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_stores_packed_by_perm(arch: str) -> None:
    """CompileOptions.pack_by_perm: at head dim 64, gfx11's V tile goes to LDS transposed, each
    stored word a key pair from two loaded words: one v_perm_b32 per word (8) where true16 codegen
    moved the halves (12 v_mov_b16). The other archs' LLVM already picks v_perm_b32 or stores
    nothing so: their code is the same. Both give the same bits, in any wave order."""
    permuted = _staged_before_loop(arch, d=64, pack_by_perm=True)
    moved = _staged_before_loop(arch, d=64)
    counts = [tuple(k.asm.count(i) for i in ("v_perm_b32", "v_mov_b16")) for k in (permuted, moved)]
    if arch == "gfx1100":
        assert counts == [(8, 0), (0, 12)], counts
    else:
        assert permuted.asm == moved.asm
    for dev in (EmulatorDevice(arch), *(EmulatorDevice(arch, schedule="shuffle", seed=s) for s in range(2))):
        got, want = _run_staged_before_loop(permuted, dev, d=64)
        np.testing.assert_array_equal(got, _run_staged_before_loop(moved, dev, d=64)[0])
        # S rounded to f16 after sums in another order than numpy's: an S near a rounding midpoint
        # may round the other way (up to 0.0124 measured at d 64 over 128 keys).
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-2)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_transposed_stagings_swizzled(arch: str) -> None:
    """CompileOptions.lds_swizzle: V's transposed staging at head dim 64 keeps unpadded rows with
    their 16-byte chunks swizzled where that takes fewer LDS cycles (stage-lds), on RDNA: its reads
    are then whole 16-byte vectors (ds_load_b128) where the padded rows' 8-byte alignment split each
    in two (ds_load_2addr_b64). CDNA's padded rows cost less (gfx950 transposes in its reads): the
    same code. Both give the same bits, in any wave order."""
    swizzled = _staged_before_loop(arch, d=64)
    padded = _staged_before_loop(arch, d=64, lds_swizzle=False)
    reads = [tuple(k.asm.count(i) for i in ("ds_load_b128", "ds_load_2addr_b64")) for k in (swizzled, padded)]
    if arch in ("gfx1100", "gfx1201"):
        assert reads[0][0] > reads[1][0] and reads[0][1] < reads[1][1], reads
    else:
        assert swizzled.asm == padded.asm
    for dev in (EmulatorDevice(arch), *(EmulatorDevice(arch, schedule="shuffle", seed=s) for s in range(2))):
        got, want = _run_staged_before_loop(swizzled, dev, d=64)
        np.testing.assert_array_equal(got, _run_staged_before_loop(padded, dev, d=64)[0])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-2)  # as in test_stores_packed_by_perm


@functools.cache
def _staged_before_loop(arch: str, d: int = 32, **options):
    path = Path(__file__).resolve().parent / "kernels" / "staged_before_loop.tile"
    return compile_source(path.read_text(), str(path), arch, {"D": str(d)},
                          options=CompileOptions(arch=arch, **options))


def _run_staged_before_loop(kernel, dev, d: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's output on `dev` (None: not run) and numpy's."""
    rng = np.random.default_rng(5)
    # Q scaled so that the scores are as large at any d as at 32 (the tolerance's measure).
    q = (rng.standard_normal((128, d)) * np.sqrt(32 / d)).astype(np.float16)
    k, v = (rng.standard_normal((128, d)).astype(np.float16) for _ in range(2))
    s = (q.astype(np.float32) @ k.astype(np.float32).T).astype(np.float16).astype(np.float32)
    out = np.zeros((128, d), np.float32)
    if dev is not None:
        launch(kernel, q, k, v, out, device=dev)
    return out, s @ v.astype(np.float32)


def _check_shuffled(arch: str, kernel) -> None:
    # Sums of 128 f32 products up to about 280 in the matrix units' order, not numpy's: measured
    # within 0.004 of numpy; a wave that reads K as Q gets whole rows of other sums.
    for seed in range(3):
        got, want = _run_staged_before_loop(kernel, EmulatorDevice(arch, schedule="shuffle", seed=seed))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-2, err_msg=f"shuffled schedule, seed {seed}")


@pytest.mark.parametrize("arch", ["gfx90a", "gfx1201"])
def test_padded_head_dim_buffer_loads_bit_identical(arch: str) -> None:
    """Head dim 80 (padded to 128): the K/V loads are masked by column, buffer loads whose masked
    lanes read 0, run batched for all member waves (and the loaded-byte counts agree)."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 200, 2, 80)).astype(np.float16) for _ in range(3))
    (oa, la), (ob, lb) = both_ways(arch, lambda dev: ops.fmha_fwd(q, k, v, return_lse=True, device=dev))
    assert_bits_equal(oa, ob)
    assert_bits_equal(la, lb)


@pytest.mark.parametrize("arch,hdim", [("gfx942", 64), ("gfx1100", 256)])
def test_attention_backward_deterministic_bit_identical(arch: str, hdim: int) -> None:
    """The backward plan; on gfx1100 at hdim 256 its main kernel spills VGPRs to scratch, which
    lockstep keeps per wave in one chunk array."""
    rng = np.random.default_rng(1)
    q, k, v, do = (rng.standard_normal((1, 128, 2, hdim)).astype(np.float16) for _ in range(4))
    out, lse = ops.fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice(arch))

    def run(dev):
        return ops.fmha_bwd(do, q, k, v, out, lse, causal=True, deterministic=True, device=dev)

    for a, b in zip(*both_ways(arch, run), strict=True):
        assert_bits_equal(a, b)


SHIFTED = """
kernel shifted[BLOCK: int = 64, WAVES: int = 1, SHIFT: int = 0](
    x: tensor[f32](N), out: tensor[f32](K)) grid(cdiv(K, BLOCK)) waves(WAVES) {
    let i = program_id(0) * BLOCK + arange(0, BLOCK);
    store(out[i], load(x[i + SHIFT], mask=i < K, other=0.0) * 2.0, mask=i < K);
}
"""


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_the_same_first_fault_and_memory(arch: str) -> None:
    """x[i + 5] overruns x from workgroup 2 on: lockstep meets a fault in some wave first, restores
    the heap and reruns the ordinary way, which reports the first fault in launch order and
    leaves `out` as far as the ordinary run got."""
    kern = compile_source(SHIFTED, "shifted.tile", arch, {"BLOCK": "128", "WAVES": "2", "SHIFT": "5"})
    msgs, outs = [], []
    for ls in (False, True):
        dev = EmulatorDevice(arch, lockstep=ls)
        x = DeviceArray.from_numpy(dev, np.arange(3 * 128, dtype=np.float32), "x")
        out = DeviceArray.from_numpy(dev, np.full(8 * 128, -1.0, np.float32), "out")
        with pytest.raises(MemoryFault) as info:
            launch(kern, x, out, device=dev)
        msgs.append(str(info.value))
        outs.append(out.numpy())
        assert dev.launches == []  # a faulting launch records nothing
    assert msgs[0] == msgs[1]
    assert "workgroup (2, 0, 0)" in msgs[0] and "past the end of x" in msgs[0], msgs[0]
    assert_bits_equal(outs[0], outs[1])
    assert (outs[0][:256] == 2 * np.arange(5, 261)).all()  # workgroups 0 and 1 ran before the fault


def test_shuffled_schedule_keeps_the_ordinary_path() -> None:
    """The shuffled schedule's orders are its point: it never runs in lockstep."""
    dev = EmulatorDevice("gfx942", schedule="shuffle", seed=3)
    args, kwargs, check = CASES["gemm"]("f16", np.random.default_rng(3))
    launch(example("gemm", "gfx942"), *args, device=dev, **kwargs)
    assert dev.launches[-1]["path"] == "ordinary"
    assert check() < 1e-2


# -- atomics ---------------------------------------------------------------------------------
# Workgroups (x, y) of 128 threads: every thread adds x[gid] (f32) into acc[gid & 3], adds v[gid]
# (i32) into cnt[0] keeping the value before (ret[gid]) and takes the max into cnt[1].
ATOMICS = r"""
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workgroup.id.y()
define amdgpu_kernel void @atomics(ptr addrspace(1) %x, ptr addrspace(1) %v, ptr addrspace(1) %acc,
                                   ptr addrspace(1) %cnt, ptr addrspace(1) %ret) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %wx = call i32 @llvm.amdgcn.workgroup.id.x()
  %wy = call i32 @llvm.amdgcn.workgroup.id.y()
  %wy3 = mul i32 %wy, 3
  %wg = add i32 %wy3, %wx
  %base = mul i32 %wg, 128
  %gid = add i32 %base, %t
  %slot = and i32 %gid, 3
  %px = getelementptr float, ptr addrspace(1) %x, i32 %gid
  %xv = load float, ptr addrspace(1) %px, align 4
  %pa = getelementptr float, ptr addrspace(1) %acc, i32 %slot
  %o1 = atomicrmw fadd ptr addrspace(1) %pa, float %xv syncscope("agent") monotonic, align 4, MARKS
  %pv = getelementptr i32, ptr addrspace(1) %v, i32 %gid
  %vv = load i32, ptr addrspace(1) %pv, align 4
  %old = atomicrmw add ptr addrspace(1) %cnt, i32 %vv monotonic
  %pr = getelementptr i32, ptr addrspace(1) %ret, i32 %gid
  store i32 %old, ptr addrspace(1) %pr, align 4
  %pm = getelementptr i32, ptr addrspace(1) %cnt, i32 1
  %o2 = atomicrmw max ptr addrspace(1) %pm, i32 %vv monotonic
  ret void
}
!0 = !{}
""".replace("MARKS", "!amdgpu.no.fine.grained.memory !0, !amdgpu.ignore.denormal.mode !0")  # as tile.atomic_add

GRID = (3, 2)


def _sequential(order: list[tuple[int, int]], x: np.ndarray, v: np.ndarray):
    """acc, cnt and ret after the threads' atomics one by one in `order` of workgroups (threads of
    a workgroup in order): f32 adds rounded one at a time, i32 adds wrapping."""
    acc, total, ret = np.zeros(4, np.float32), 0, np.zeros(v.size, np.int64)
    for wx, wy in order:
        for gid in range((wy * GRID[0] + wx) * 128, (wy * GRID[0] + wx + 1) * 128):
            acc[gid & 3] = np.float32(acc[gid & 3] + x[gid])
            ret[gid] = total
            total += int(v[gid])
    return acc, ret.astype(np.int32)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_atomics_run_in_lockstep_order(arch: str) -> None:
    """Atomics run in lockstep, in its order: the waves of a group in chunk order (workgroups x
    slowest), lanes in order. Float sums and returned values follow that order exactly (here it
    differs from the ordinary path's launch order, x fastest); the order-independent results (the
    i32 sum and max) are the ordinary path's bit for bit. Where LLVM makes the max a
    compare-and-swap loop (gfx90a), its trip count depends on the interleaving, and so does the
    number of wave-instructions."""
    from _emu_util import compile_llvm

    _, hsaco = compile_llvm(ATOMICS, arch)
    rng = np.random.default_rng(4)
    n = GRID[0] * GRID[1] * 128
    x = rng.standard_normal(n).astype(np.float32)
    v = rng.integers(-1000, 1000, n).astype(np.int32)

    def run(dev):
        kern = dev.get_kernel(dev.load_module(hsaco), "atomics")
        bufs = [dev.to_device(x), dev.to_device(v), dev.to_device(np.zeros(4, np.float32)),
                dev.to_device(np.array([0, -2**31], np.int32)), dev.alloc(4 * n)]
        dev.launch(kern, GRID, 128, struct.pack("<5Q", *(b.addr for b in bufs)))
        return (dev.from_device(bufs[2], np.float32, 4), dev.from_device(bufs[3], np.int32, 2),
                dev.from_device(bufs[4], np.int32, n))

    counts = ("wave_instructions", "max_workgroup_instructions")
    (acc_o, cnt_o, ret_o), (acc_l, cnt_l, ret_l) = both_ways(arch, run, tuple(s for s in SAME_STATS
                                                                             if s not in counts))
    launch_order = [(wx, wy) for wy in range(GRID[1]) for wx in range(GRID[0])]
    chunk_order = sorted(launch_order)  # x slowest
    for (acc, ret), order in (((acc_o, ret_o), launch_order), ((acc_l, ret_l), chunk_order)):
        want_acc, want_ret = _sequential(order, x, v)
        assert_bits_equal(acc, want_acc)
        assert_bits_equal(ret, want_ret)
    assert_bits_equal(cnt_o, cnt_l)
    assert cnt_l.tolist() == [int(v.sum()), int(v.max())]


LDS_ATOMICS = r"""
@cnt = internal addrspace(3) global i32 undef, align 4
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
define amdgpu_kernel void @lds_atomics(ptr addrspace(1) %v, ptr addrspace(1) %ret, ptr addrspace(1) %tot) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %wg, 256
  %gid = add i32 %base, %t
  %first = icmp eq i32 %t, 0
  br i1 %first, label %init, label %go
init:
  store i32 0, ptr addrspace(3) @cnt, align 4
  br label %go
go:
  call void @llvm.amdgcn.s.barrier()
  %pv = getelementptr i32, ptr addrspace(1) %v, i32 %gid
  %vv = load i32, ptr addrspace(1) %pv, align 4
  %old = atomicrmw add ptr addrspace(3) @cnt, i32 %vv monotonic
  %pr = getelementptr i32, ptr addrspace(1) %ret, i32 %gid
  store i32 %old, ptr addrspace(1) %pr, align 4
  call void @llvm.amdgcn.s.barrier()
  br i1 %first, label %fin, label %done
fin:
  %s = load i32, ptr addrspace(3) @cnt, align 4
  %pt = getelementptr i32, ptr addrspace(1) %tot, i32 %wg
  store i32 %s, ptr addrspace(1) %pt, align 4
  br label %done
done:
  ret void
}
"""


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_lds_atomics_in_lockstep(arch: str) -> None:
    """LDS atomics (per wave in lockstep): a workgroup's waves reach the atomic together and run
    it in wave order, the ordinary path's order too, so returned values and sums are identical."""
    from _emu_util import compile_llvm

    _, hsaco = compile_llvm(LDS_ATOMICS, arch)
    groups = 5
    v = np.random.default_rng(6).integers(-1000, 1000, 256 * groups).astype(np.int32)

    def run(dev):
        kern = dev.get_kernel(dev.load_module(hsaco), "lds_atomics")
        bufs = [dev.to_device(v), dev.alloc(4 * v.size), dev.alloc(4 * groups)]
        dev.launch(kern, groups, 256, struct.pack("<3Q", *(b.addr for b in bufs)))
        return dev.from_device(bufs[1], np.int32, v.size), dev.from_device(bufs[2], np.int32, groups)

    (ret_o, tot_o), (ret_l, tot_l) = both_ways(arch, run)
    assert_bits_equal(ret_o, ret_l)
    assert_bits_equal(tot_o, tot_l)
    per = v.reshape(groups, 256).astype(np.int64)
    assert tot_l.tolist() == per.sum(axis=1).tolist()
    assert ret_l.tolist() == (np.cumsum(per, axis=1) - per).reshape(-1).tolist()


def _dq_acc(dev, do, q, k, v, out, lse, deterministic: bool) -> np.ndarray:
    """The f32 dq_acc [B, HQ, nsplits, SQ, D] the backward left in its workspace on `dev`."""
    plan = fmha_bwd_plan(do, q, k, v, out, lse, causal=True, deterministic=deterministic, device=dev)
    region = plan.workspace.region("dq_acc")
    buf = WORKSPACE_POOL.get(dev, plan.workspace_size)
    acc = np.frombuffer(dev.copy_out(buf, 4 * region.words, 4 * region.offset), np.float32)
    b, s, h, d = q.shape
    return acc[:b * h * plan.info["nsplits"] * s * d].reshape(b, h, -1, s, d)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_attention_backward_with_float_atomics(arch: str) -> None:
    """The backward's default mode adds dQ with float atomics; lockstep runs it (no fallback).
    dK and dV (no atomics) are the ordinary path's bits; each dq_acc element, both ways, is the
    sum of the deterministic mode's per-key-block terms within the rounding of recursive f32
    summation in some order, |acc - sum| <= (n - 1) u / (1 - (n - 1) u) * sum |terms| (u = 2^-24,
    n terms); and the gradients match the float64 reference."""
    rng = np.random.default_rng(2)
    # 512 keys: 4 key blocks on gfx942, 8 on gfx1201 -- sums of 2 terms would not depend on the order.
    q, k, v, do = (rng.standard_normal((1, 512, 2, 64)).astype(np.float16) for _ in range(4))
    out, lse = ops.fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice(arch))
    accs, devs = [], []

    def run(dev):
        got = ops.fmha_bwd(do, q, k, v, out, lse, causal=True, device=dev)
        accs.append(_dq_acc(dev, do, q, k, v, out, lse, deterministic=False))
        devs.append(dev)
        return got

    (dq_o, dk_o, dv_o), (dq_l, dk_l, dv_l) = both_ways(arch, run)
    main = [ln for ln in devs[1].launches if "dq_dk_dv" in ln["kernel"]]
    assert main and all(ln["path"] == "lockstep" for ln in main)
    assert_bits_equal(dk_o, dk_l)
    assert_bits_equal(dv_o, dv_l)
    det = EmulatorDevice(arch)
    ops.fmha_bwd(do, q, k, v, out, lse, causal=True, deterministic=True, device=det)
    terms = _dq_acc(det, do, q, k, v, out, lse, deterministic=True).astype(np.float64)
    n = terms.shape[2]
    gamma = (n - 1) * 2.0**-24 / (1 - (n - 1) * 2.0**-24)
    exact, bound = terms.sum(axis=2), gamma * np.abs(terms).sum(axis=2)
    for acc in accs:
        assert (np.abs(acc[:, :, 0].astype(np.float64) - exact) <= bound).all()
    ref = fmha_bwd_reference(do, q, k, v, causal=True)
    assert_grads_close((dq_l, dk_l, dv_l), ref, np.float16)


# -- worker processes ---------------------------------------------------------------------------
@pytest.fixture
def parallel_always(monkeypatch):
    """Worker processes for every launch of three or more chunks, however fast its first chunk
    ran (the real threshold is a time, which a test must not depend on)."""
    monkeypatch.setattr(lockstep, "MIN_PARALLEL_SECONDS", 0.0)


def by_workers(arch: str, run) -> tuple[list, list, list, list]:
    """`run(device)` in one process and with two workers: (results, results, launches, launches)
    after checking the launches' statistics agree."""
    one, two = EmulatorDevice(arch), EmulatorDevice(arch, workers=2)
    a, b = run(one), run(two)
    for lo, ln in zip(one.launches, two.launches, strict=True):
        assert lo["path"] == ln["path"] == "lockstep" and lo["processes"] == 1
        assert {s: lo[s] for s in SAME_STATS} == {s: ln[s] for s in SAME_STATS}, ln["kernel"]
    return a, b, one.launches, two.launches


def test_workers_give_the_same_results(parallel_always) -> None:
    """Chunks of one launch in two worker processes: the forward's output and LSE and the
    deterministic backward's gradients are one process's bits, with the same statistics; the
    backward's atomic mode keeps its main kernel (global atomics) in one process. (One arch: the
    workers run lockstep's chunks unchanged; the fault test below runs a wave32 arch too.)"""
    arch = "gfx942"
    rng = np.random.default_rng(5)
    q, k, v, do = (rng.standard_normal((24, 128, 8, 64)).astype(np.float16) for _ in range(4))

    def fwd(dev):
        return ops.fmha_fwd(q, k, v, causal=True, return_lse=True, device=dev)

    (oa, la), (ob, lb), _, launches = by_workers(arch, fwd)
    assert_bits_equal(oa, ob)
    assert_bits_equal(la, lb)
    assert [ln["processes"] for ln in launches] == [2]

    def bwd(dev, deterministic):
        return ops.fmha_bwd(do, q, k, v, oa, la, causal=True, deterministic=deterministic, device=dev)

    a, b, _, launches = by_workers(arch, lambda dev: bwd(dev, True))
    for x, y in zip(a, b, strict=True):
        assert_bits_equal(x, y)
    assert {ln["kernel"]: ln["processes"] for ln in launches}["fmha_bwd_dq_dk_dv"] == 2
    dev = EmulatorDevice(arch, workers=2)
    bwd(dev, False)
    assert {ln["kernel"]: ln["processes"] for ln in dev.launches}["fmha_bwd_dq_dk_dv"] == 1


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_workers_report_the_same_first_fault(arch: str, parallel_always, monkeypatch) -> None:
    """x[i + 5] overruns x in the middle of the second of three chunks, which a worker runs: the
    worker's error sends the launch to the ordinary path, which reports the ordinary run's first
    fault and leaves memory as the ordinary run does."""
    from tiledsl.backends.rocm.emulator import lockstep_workers

    errors = []
    run_chunks = lockstep_workers.run_chunks

    def spy(*args):
        try:
            return run_chunks(*args)
        except lockstep_workers.WorkerError as exc:
            errors.append(str(exc))
            raise
    monkeypatch.setattr(lockstep_workers, "run_chunks", spy)
    kern = compile_source(SHIFTED, "shifted.tile", arch, {"BLOCK": "128", "WAVES": "2", "SHIFT": "5"})
    chunk = lockstep.LANES // get_arch(arch).wave_size // 2  # workgroups per chunk
    bad = chunk + chunk // 2  # x ends here: the first workgroup to overrun it is bad - 1
    msgs, outs = [], []
    for opts in ({"lockstep": False}, {"workers": 2}):
        dev = EmulatorDevice(arch, **opts)
        x = DeviceArray.from_numpy(dev, np.arange(bad * 128, dtype=np.float32), "x")
        out = DeviceArray.from_numpy(dev, np.full(3 * chunk * 128, -1.0, np.float32), "out")
        with pytest.raises(MemoryFault) as info:
            launch(kern, x, out, device=dev)
        msgs.append(str(info.value))
        outs.append(out.numpy())
    assert msgs[0] == msgs[1]
    assert f"workgroup ({bad - 1}, 0, 0)" in msgs[0] and "past the end of x" in msgs[0], msgs[0]
    assert_bits_equal(outs[0], outs[1])
    assert len(errors) == 1 and "past the end of x" in errors[0], errors


def test_worker_count_option() -> None:
    assert EmulatorDevice("gfx942").workers == 1
    assert 1 <= EmulatorDevice("gfx942", workers=None).workers <= 8
    for bad in (0, -1, 1.5, True):
        with pytest.raises(DeviceError, match="workers"):
            EmulatorDevice("gfx942", workers=bad)


# A spin lock between workgroups, shaped like Triton's (tl.atomic_cas on a scalar): thread 0
# tries the lock and tells its workgroup through LDS between barriers; the holder adds one to a
# plain counter, records its ticket and releases the lock.
SPIN_LOCK = r"""
@flag = internal addrspace(3) global i32 undef, align 4
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
define amdgpu_kernel void @spin(ptr addrspace(1) %lock, ptr addrspace(1) %count, ptr addrspace(1) %ticket) {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %first = icmp eq i32 %t, 0
  br label %acquire
acquire:
  br i1 %first, label %try, label %wait
try:
  %r = cmpxchg ptr addrspace(1) %lock, i32 0, i32 1 syncscope("agent") acquire monotonic, align 4
  %old = extractvalue {i32, i1} %r, 0
  store i32 %old, ptr addrspace(3) @flag, align 4
  br label %wait
wait:
  call void @llvm.amdgcn.s.barrier()
  %f = load i32, ptr addrspace(3) @flag, align 4
  call void @llvm.amdgcn.s.barrier()
  %held = icmp ne i32 %f, 0
  br i1 %held, label %acquire, label %owned
owned:
  br i1 %first, label %update, label %done
update:
  %c = load volatile i32, ptr addrspace(1) %count, align 4
  %c1 = add i32 %c, 1
  store volatile i32 %c1, ptr addrspace(1) %count, align 4
  %pt = getelementptr i32, ptr addrspace(1) %ticket, i32 %wg
  store volatile i32 %c, ptr addrspace(1) %pt, align 4
  store atomic i32 0, ptr addrspace(1) %lock syncscope("agent") release, align 4
  br label %done
done:
  ret void
}
"""


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_spin_lock_between_workgroups(arch: str) -> None:
    """Workgroups of one chunk waiting for a lock another holds: lockstep's lowest-pc-first order
    alone would spin forever; the starved furthest group gets its turn (lockstep.SPIN_STEPS) and
    the launch ends in lockstep, every workgroup through the lock once (the ordinary path: in
    launch order). How many times a wait spins depends on the interleaving."""
    from _emu_util import compile_llvm

    _, hsaco = compile_llvm(SPIN_LOCK, arch)
    groups = 24

    def run(dev):
        kern = dev.get_kernel(dev.load_module(hsaco), "spin")
        bufs = [dev.to_device(np.zeros(1, np.int32)), dev.to_device(np.zeros(1, np.int32)), dev.alloc(4 * groups)]
        dev.launch(kern, groups, 128, struct.pack("<3Q", *(b.addr for b in bufs)))
        return [dev.from_device(b, np.int32, n) for b, n in zip(bufs, (1, 1, groups), strict=True)]

    counts = ("wave_instructions", "max_workgroup_instructions")
    (lock_o, count_o, ticket_o), (lock_l, count_l, ticket_l) = both_ways(
        arch, run, tuple(s for s in SAME_STATS if s not in counts))
    assert lock_o.tolist() == lock_l.tolist() == [0]
    assert count_o.tolist() == count_l.tolist() == [groups]
    assert ticket_o.tolist() == list(range(groups))
    assert sorted(ticket_l.tolist()) == list(range(groups))
