"""The FMHA backward (tiledsl.ops.fmha_bwd) on the emulator against the float64 reference, on every
arch: its plan and workspace, every feature, determinism across schedules, and bad arguments."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from _fmha_util import assert_grads_close

import tiledsl.fmha_bwd as bwd_module
from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.cli import main
from tiledsl.device_array import DeviceArray
from tiledsl.fmha_bwd import BWD_CONFIGS, bwd_config, plan_from_sizes
from tiledsl.ops import fmha_bwd, fmha_bwd_plan, fmha_fwd
from tiledsl.plan import WORKSPACE_POOL
from tiledsl.reference import fmha_bwd_reference, fmha_mask_params

pytestmark = pytest.mark.emulator

BF16 = ml_dtypes.bfloat16


def inputs(*, b=1, sq=40, sk=56, hq=2, hk=1, d=64, dv=None, dtype=np.float16, layout="bshd", total=None, seed=0):
    """q, k, v, do (batch mode [B, S, H, D] or group mode [total, H, D] when `total` = (tq, tk))."""
    rng = np.random.default_rng(seed)
    dv = d if dv is None else dv

    def make(shape):
        return rng.standard_normal(shape).astype(dtype)

    if total is not None:
        tq, tk = total
        shapes = [(tq, hq, d), (tk, hk, d), (tk, hk, dv), (tq, hq, dv)]
    else:
        shapes = [(b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, dv), (b, sq, hq, dv)]
    arrays = [make(s) for s in shapes]
    if layout == "bhsd":
        arrays = [np.ascontiguousarray(np.swapaxes(a, -3, -2)) for a in arrays]
    return arrays


def run(arch, do, q, k, v, *, device=None, **opts):
    dev = device or EmulatorDevice(arch)
    fwd_opts = {key: val for key, val in opts.items() if key != "deterministic"}
    out, lse = fmha_fwd(q, k, v, return_lse=True, device=dev, **fwd_opts)
    got = fmha_bwd(do, q, k, v, out, lse, device=dev, **opts)
    ref_opts = {key: val for key, val in opts.items() if key not in ("deterministic", "max_seqlen_q", "max_seqlen_k")}
    ref = fmha_bwd_reference(do, q, k, v, **ref_opts)
    return got, ref


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_bwd_causal_gqa_odd_lengths_deterministic(arch):
    q, k, v, do = inputs(sq=70, sk=90, hq=4, hk=2, d=64, seed=1)
    got, ref = run(arch, do, q, k, v, causal=True, deterministic=True)
    assert_grads_close(got, ref, np.float16)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_window_sides_near_2_31_are_unlimited(arch):
    """A window side of 2**30 or more reaches past every key: forward and backward as unlimited
    there (the kernels' i32 bound `i + shift + right` wrapped for 2**31 - 1 and masked every row)."""
    q, k, v, do = inputs(sq=20, sk=36, hq=2, hk=1, d=32, seed=11)
    dev = EmulatorDevice(arch)
    for window in ((-1, 2**31 - 1), (2**31 - 1, 3), (2**30, 2**31 - 8)):
        got, ref = run(arch, do, q, k, v, window=window, device=dev)
        assert_grads_close(got, ref, np.float16)
        out, lse = fmha_fwd(q, k, v, window=window, return_lse=True, device=dev)
        want = fmha_fwd(q, k, v, window=tuple(-1 if w >= 2**30 else w for w in window), return_lse=True,
                        device=dev)
        np.testing.assert_array_equal(out, want[0])
        np.testing.assert_array_equal(lse, want[1])
        assert np.isfinite(lse).all()


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_bwd_varlen_top_left_softcap_padded_mqa_bf16(arch):
    cu_q = np.array([0, 30, 30, 75], np.int32)  # the middle sequence is empty
    cu_k = np.array([0, 20, 44, 100], np.int32)
    q, k, v, do = inputs(hq=3, hk=1, d=48, dtype=BF16, total=(75, 100), seed=2)
    got, ref = run(arch, do, q, k, v, causal="top_left", softcap=5.0, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    assert_grads_close(got, ref, BF16)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_bwd_window_sink_bhsd_unequal_head_dims(arch):
    q, k, v, do = inputs(b=2, sq=33, sk=47, hq=2, hk=2, d=64, dv=32, layout="bhsd", seed=3)
    sink = np.array([0.5, -1.0], np.float32)
    got, ref = run(arch, do, q, k, v, window=(12, 5), sink=sink, layout="bhsd", deterministic=True)
    assert len(got) == 4 and got[3].dtype == np.float32 and got[3].shape == (2,)
    assert_grads_close(got, ref, np.float16)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_bwd_small_qk_head_dim_beside_a_large_v(arch):
    """D_QK 32 beside D_V 128: the row chosen by the larger head dim has more waves than the key
    walk's [32, BLOCK_M] dQ^T has matrix tiles, so dQ takes its own walk (it failed to compile on
    every arch but gfx1100; found by an adversarial sweep, session 45)."""
    assert bwd_config(arch, 32, 128).dq_loop
    q, k, v, do = inputs(sq=50, sk=70, hq=2, hk=2, d=32, dv=128, seed=9)
    got, ref = run(arch, do, q, k, v, causal=True)
    assert_grads_close(got, ref, np.float16)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100", "gfx1201"])
@pytest.mark.parametrize("d", [128, 256])
def test_bwd_large_head_dims(arch, d):
    q, k, v, do = inputs(sq=24, sk=40, hq=1, hk=1, d=d, seed=4)
    got, ref = run(arch, do, q, k, v, causal=True)
    assert_grads_close(got, ref, np.float16)


def test_bwd_seqlen_one_and_fully_masked_rows():
    # top-left causal with more queries than keys leaves no masked row; a window right of the
    # diagonal that starts past the keys masks the first rows entirely (LSE -inf): zero dq there.
    q, k, v, do = inputs(sq=1, sk=1, seed=5)
    got, ref = run("gfx942", do, q, k, v)
    assert_grads_close(got, ref, np.float16)
    q, k, v, do = inputs(sq=20, sk=8, seed=6)
    got, ref = run("gfx942", do, q, k, v, causal=True)  # bottom-right: rows 0..11 see no key
    assert_grads_close(got, ref, np.float16)
    assert not np.asarray(got[0], np.float64)[:, :12].any()


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_deterministic_is_bitwise_identical_across_schedules(arch):
    q, k, v, do = inputs(sq=64, sk=200, hq=2, hk=1, d=64, seed=7)
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice(arch))
    runs = [fmha_bwd(do, q, k, v, out, lse, causal=True, deterministic=True,
                     device=EmulatorDevice(arch, schedule="shuffle", seed=s)) for s in (1, 2)]
    for a, b in zip(*runs, strict=True):
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))


def test_atomic_mode_depends_on_the_schedule_and_stays_close():
    """The shuffled schedule is live: with float atomics the f32 dq_acc sums in another order."""
    q, k, v, do = inputs(sq=32, sk=512, hq=1, hk=1, d=64, seed=8)
    out, lse = fmha_fwd(q, k, v, return_lse=True, device=EmulatorDevice("gfx942"))
    accs, grads = [], []
    for seed in (1, 2):
        dev = EmulatorDevice("gfx942", schedule="shuffle", seed=seed)
        grads.append(fmha_bwd(do, q, k, v, out, lse, device=dev))
        plan = fmha_bwd_plan(do, q, k, v, out, lse, device=dev)
        region = plan.workspace.region("dq_acc")
        buf = WORKSPACE_POOL.get(dev, plan.workspace_size)
        accs.append(np.frombuffer(dev.copy_out(buf, 4 * region.words, 4 * region.offset), np.float32))
    assert (accs[0] != accs[1]).any()
    ref = fmha_bwd_reference(do, q, k, v)
    for g in grads:
        assert_grads_close(g, ref, np.float16)


def test_workspace_layout_is_compact_in_group_mode():
    mask = fmha_mask_params(True)
    seq_q, seq_k = (100, 300, 0, 17), (120, 250, 64, 0)
    plan = plan_from_sizes("gfx942", dtype="f16", hdim_q=96, hdim_v=96, hq=8, hk=2, seqlens_q=seq_q,
                           seqlens_k=seq_k, varlen=True, mask=mask, deterministic=True)
    bn = bwd_config("gfx942", 96, 96).block_n
    nsplits = [-(-sk // bn) for sk in seq_k]
    acc = sum(8 * ns * sq * 96 for ns, sq in zip(nsplits, seq_q, strict=True))
    host = 16 + 48  # nsplits: 4 x i32 = 16 bytes; offsets: 5 x i64 = 40 bytes, padded to 48
    # lse2 and d: one f32 per (head, query row) each and two of the most rows a walk's block
    # takes, padded to 16 bytes and zeroed
    cfg = bwd_config("gfx942", 96, 96)
    rows = 8 * sum(seq_q) + 2 * max(cfg.block_m, cfg.dq_block[0])
    assert plan.workspace_size == host + 4 * acc + 2 * 4 * (-(-rows // 4) * 4)
    assert plan.workspace.region("lse2").zero and plan.workspace.region("d").zero
    assert plan.info["nsplits"] == nsplits
    assert plan.stage_names == ["dot_do_o", "dq_dk_dv", "convert_dq"]
    head = plan.workspace.host
    assert struct.unpack("<4i", head[:16]) == tuple(nsplits)
    offsets = struct.unpack("<5q", head[16:56])
    assert offsets == tuple(np.concatenate([[0], np.cumsum([8 * n * s * 96 for n, s in zip(nsplits, seq_q,
                                                                                             strict=True)])]))
    rectangular = 4 * len(seq_q) * 8 * max(nsplits) * max(seq_q) * 96
    assert 4 * acc < rectangular
    assert plan.workspace.region("dq_acc").zero  # masked: skipped tiles must read as zero
    unmasked = plan_from_sizes("gfx942", dtype="f16", hdim_q=96, hdim_v=96, hq=8, hk=2, seqlens_q=seq_q,
                               seqlens_k=seq_k, varlen=True, mask=fmha_mask_params(False), deterministic=True)
    assert not unmasked.workspace.region("dq_acc").zero


def test_caller_workspace_is_used_and_too_small_is_refused():
    dev = EmulatorDevice("gfx1100")
    q, k, v, do = inputs(sq=20, sk=30, seed=9)
    out, lse = fmha_fwd(q, k, v, return_lse=True, device=dev)
    plan = fmha_bwd_plan(do, q, k, v, out, lse, device=dev)
    ws = dev.alloc(plan.workspace_size, "my workspace")
    got = fmha_bwd(do, q, k, v, out, lse, device=dev, workspace=ws)
    assert_grads_close(got, fmha_bwd_reference(do, q, k, v), np.float16)
    launches = len(dev.launches)
    got = fmha_bwd(do, q, k, v, out, lse, arch="gfx1100", workspace=ws)  # no device: the workspace's
    assert_grads_close(got, fmha_bwd_reference(do, q, k, v), np.float16)
    assert len(dev.launches) == launches + 3
    small = dev.alloc(plan.workspace_size - 4, "small")
    with pytest.raises(ValueError, match="workspace: the plan needs"):
        fmha_bwd(do, q, k, v, out, lse, device=dev, workspace=small)
    with pytest.raises(ValueError, match="workspace: expected a device Buffer"):
        fmha_bwd(do, q, k, v, out, lse, device=dev, workspace=1 << 20)
    other = EmulatorDevice("gfx1100").alloc(plan.workspace_size)
    with pytest.raises(ValueError, match=r"workspace: a buffer of device object 0x[0-9a-f]+ \(emulated .*\), "
                                         r"but the plan runs on device object"):
        fmha_bwd(do, q, k, v, out, lse, device=dev, workspace=other)
    # DeviceArrays decide the device: a workspace elsewhere is the workspace's error, not q's.
    on_dev = [DeviceArray.from_numpy(dev, x) for x in (do, q, k, v, out, lse)]
    with pytest.raises(ValueError, match="workspace: a buffer of device object .* but the plan runs on"):
        fmha_bwd(*on_dev, workspace=other)


def test_a_plan_refuses_tensors_of_other_sizes():
    """A plan's workspace and split counts follow from the sizes it was made for (Plan.shapes):
    run on others it would give wrong gradients, so it refuses them by name (as the C runtime)."""
    from tiledsl.fmha_bwd import plan_from_sizes
    from tiledsl.reference import MaskParams

    plan = plan_from_sizes("gfx942", dtype="f16", hdim_q=64, hdim_v=64, hq=4, hk=2, seqlens_q=(70,),
                           seqlens_k=(90,), varlen=False, mask=MaskParams("none", -1, -1))
    assert plan.shapes["k"] == (1, 90, 2, 64) and plan.to_json()["shapes"]["lse"] == [1, 4, 70]
    with pytest.raises(ValueError, match=r"argument 'k': shape \[1, 200, 2, 64\], but this plan was made for "
                                         r"\[1, 90, 2, 64\]; make a plan for these sizes"):
        plan.run(EmulatorDevice("gfx942"), {"k": np.zeros((1, 200, 2, 64), np.float16)})


def _bad_lse(args):
    args["lse"] = args["lse"][:, :1]


@pytest.mark.parametrize("change, message", [
    (lambda a: a.update(do=a["do"][..., :32]), r"do: expected shape \(1, 20, 2, 64\), got \(1, 20, 2, 32\)"),
    (lambda a: a.update(out=a["out"].astype(np.float32)), "out: expected dtype float16, got float32"),
    (_bad_lse, r"lse: expected shape \(1, 2, 20\)"),
    (lambda a: a.update(deterministic="yes"), "deterministic: expected a bool"),
    (lambda a: a.update(lse=a["lse"].astype(np.float16)), "lse: expected dtype float32, got float16"),
    (lambda a: a.update(window=(3,)), "window: expected a pair of ints"),
])
def test_bad_arguments_are_value_errors(change, message):
    q, k, v, do = inputs(sq=20, sk=24)
    out = np.zeros_like(do)
    lse = np.zeros((1, 2, 20), np.float32)
    args = dict(do=do, q=q, k=k, v=v, out=out, lse=lse, arch="gfx942")
    change(args)
    with pytest.raises(ValueError, match=message):
        fmha_bwd(**args)


def test_plan_cli_prints_stages_and_workspace(capsys):
    assert main(["plan", "fmha_bwd", "--arch", "gfx950", "--varlen", "100,300/250,0", "--heads", "8/2",
                 "--hdim", "128", "--mask", "causal", "--deterministic"]) == 0
    text = capsys.readouterr().out
    for word in ("dot_do_o", "dq_dk_dv", "convert_dq", "nsplits", "offsets", "dq_acc", "zeroed"):
        assert word in text
    assert main(["plan", "fmha_bwd", "--arch", "gfx950", "--heads", "8/3"]) == 2
    assert "--heads 8/3: the query heads must be a positive multiple of the key/value heads" in capsys.readouterr().err
    assert main(["plan", "fmha_bwd", "--arch", "gfx950", "--hdim", "64/300"]) == 2
    assert "--hdim: expected 1..256 per head dim, got 300" in capsys.readouterr().err
    assert main(["plan", "fmha_bwd", "--arch", "gfx942", "--hdim", "64", "--heads", "4/2", "--seqlen", "128",
                 "--bias", "tensor", "--bias-dtype", "f16", "--dbias"]) == 0
    text = capsys.readouterr().out
    assert "bias tensor, dbias reduce" in text and "fmha_bwd_dbias" in text and "dbias_acc" in text
    assert main(["plan", "fmha_bwd", "--arch", "gfx942", "--dbias"]) == 2
    assert "--dbias: the gradient of a bias tensor; add --bias tensor" in capsys.readouterr().err


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_f16_backward_rounds_p_and_ds_to_nearest_even(arch):
    """f16's approx cast rounds toward zero (the forward's P_TOWARD_ZERO, which lifts P to cancel
    the bias); the backward takes it for bf16 only, so its f16 P and dS are not biased low."""
    plan = plan_from_sizes(arch, dtype="f16", hdim_q=64, hdim_v=64, hq=2, hk=2, seqlens_q=(128,),
                           seqlens_k=(128,), varlen=False, mask=fmha_mask_params(False), softcap=False,
                           deterministic=False)
    asm = str(next(s for s in plan.stages if s.name == "dq_dk_dv").kernel.asm)
    assert "rtz_f16_f32" not in asm  # v_cvt_pkrtz_f16_f32 (gfx9), v_cvt_pk_rtz_f16_f32 (gfx11+)


def test_config_table_covers_every_arch_and_head_dim():
    assert set(BWD_CONFIGS) == set(ARCH_NAMES)
    assert all(set(row) == {32, 64, 128, 256} for row in BWD_CONFIGS.values())


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("features", ["plain", "masked"])
def test_bwd_hdim128_compiles_without_spills(arch, features):
    """Every stage at hdim 128, plain and with the most register-hungry features on (RDNA's rows
    take dQ from its own walk)."""
    masked = features == "masked"
    plan = plan_from_sizes(arch, dtype="bf16" if masked else "f16", hdim_q=128, hdim_v=128, hq=4, hk=1,
                           seqlens_q=(100, 60), seqlens_k=(90, 70), varlen=masked,
                           mask=fmha_mask_params(True if masked else False), softcap=masked, deterministic=masked)
    allowed = bwd_config(arch, 128, 128).spills
    for stage in plan.stages:
        m = stage.kernel.manifest
        spills = m["vgpr_spill_count"] + m["sgpr_spill_count"]
        assert spills == 0 or (allowed and stage.name == "dq_dk_dv"), f"{stage.name}: {spills} spills"
        assert stage.kernel.manifest["lds_bytes"] <= 65536 or arch == "gfx950"


def test_bwd_device_arrays_with_general_strides():
    """DeviceArrays stay on the device (gradients come back as DeviceArrays) and any strides work,
    here views into larger buffers with a strided head dim (the general-stride variant)."""
    dev = EmulatorDevice("gfx942")
    q, k, v, do = inputs(sq=24, sk=40, hq=2, hk=1, d=32, seed=11)
    big = [np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype) for a in (q, k, v, do)]
    for b, a in zip(big, (q, k, v, do), strict=True):
        b[..., ::2] = a
    host = [DeviceArray.from_numpy(dev, b) for b in big]
    views = [DeviceArray(h.buffer, a.shape, a.dtype, h.strides[:-1] + (2,), 0)
             for h, a in zip(host, (q, k, v, do), strict=True)]
    out, lse = fmha_fwd(q, k, v, return_lse=True, device=dev)
    out_d, lse_d = DeviceArray.from_numpy(dev, out), DeviceArray.from_numpy(dev, lse)
    dq, dk, dv = fmha_bwd(views[3], views[0], views[1], views[2], out_d, lse_d, device=dev)
    assert all(isinstance(g, DeviceArray) for g in (dq, dk, dv))
    assert_grads_close([g.numpy() for g in (dq, dk, dv)], fmha_bwd_reference(do, q, k, v), np.float16)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_paired_key_blocks_cover_every_block_once(arch, monkeypatch):
    """Paired workgroups (key blocks x and nblocks - 1 - x) on sequences of odd, even and single
    key-block counts: every block's dK/dV and dQ share exactly once, deterministic and bitwise
    stable across schedules."""
    monkeypatch.setattr(bwd_module, "pair_key_blocks", lambda *args: True)
    monkeypatch.setattr(bwd_module, "paired_fits", lambda *args: True)
    bwd_module.build_plan.cache_clear()
    try:
        bn = bwd_config(arch, 32, 32).block_n
        lens_k = [5 * bn - 7, 2 * bn, 1, 4 * bn]
        lens_q = [45, 20, 3, 2 * bn + 5]
        cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
        cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
        q, k, v, do = inputs(hq=2, hk=1, d=32, total=(int(cu_q[-1]), int(cu_k[-1])), seed=11)
        mask = dict(causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        dev = EmulatorDevice(arch, schedule="shuffle", seed=3)
        out, lse = fmha_fwd(q, k, v, return_lse=True, device=dev, **mask)
        ref = fmha_bwd_reference(do, q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        # Float atomics add a block's dQ share as often as the block runs: a duplicate shows.
        assert_grads_close(fmha_bwd(do, q, k, v, out, lse, device=dev, **mask), ref, np.float16)
        plan = fmha_bwd_plan(do, q, k, v, out, lse, device=dev, deterministic=True, **mask)
        assert plan.info["key_blocks_per_workgroup"] == 2
        runs = [fmha_bwd(do, q, k, v, out, lse, deterministic=True, **mask,
                         device=EmulatorDevice(arch, schedule="shuffle", seed=s)) for s in (4, 5)]
        assert_grads_close(runs[0], ref, np.float16)
        for a, b in zip(*runs, strict=True):
            assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    finally:
        bwd_module.build_plan.cache_clear()


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_dq_walk_covers_every_query_block_once(arch, monkeypatch):
    """dQ from its own walk (the kernel's DQ_LOOP: gfx1100 at hdim 128, gfx1201 there with a bias),
    forced at hdim 32 on every arch (the forward variant is the paired test's): group mode with an
    empty sequence, more query blocks than key blocks and the reverse, GQA, causal, paired
    workgroups. One dq_acc slice of plain stores: bitwise stable across schedules with
    deterministic=False too (the same kernel serves both), no zeroing."""
    cfg = bwd_config(arch, 32, 32)
    monkeypatch.setitem(BWD_CONFIGS[arch], 32, bwd_module._b(cfg.block_m, cfg.block_n, cfg.waves, dq_block=(32, 32)))
    monkeypatch.setattr(bwd_module, "pair_key_blocks", lambda *args: True)
    monkeypatch.setattr(bwd_module, "paired_fits", lambda *args: True)
    bwd_module.build_plan.cache_clear()
    try:
        lens_q, lens_k = [70, 0, 37, 9], [40, 17, 50, cfg.block_n + 1]
        cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
        cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
        q, k, v, do = inputs(hq=2, hk=1, d=32, total=(int(cu_q[-1]), int(cu_k[-1])), seed=12)
        mask = dict(causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        out, lse = fmha_fwd(q, k, v, return_lse=True, device=EmulatorDevice(arch), **mask)
        plans = [fmha_bwd_plan(do, q, k, v, out, lse, deterministic=d, device=EmulatorDevice(arch), **mask)
                 for d in (False, True)]
        assert plans[0].stages[1].kernel.hsaco == plans[1].stages[1].kernel.hsaco
        assert plans[0].info["dq_walk"] == "32x32" and plans[0].info["nsplits"] == 1
        assert plans[0].info["key_blocks_per_workgroup"] == 2
        assert not plans[0].workspace.region("dq_acc").zero
        runs = [fmha_bwd(do, q, k, v, out, lse, **mask, device=EmulatorDevice(arch, schedule="shuffle", seed=s))
                for s in (1, 2)]
        assert_grads_close(runs[0], fmha_bwd_reference(do, q, k, v, **mask), np.float16)
        for a, b in zip(*runs, strict=True):
            assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    finally:
        bwd_module.build_plan.cache_clear()


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_rdna_hdim128_dq_walk_with_window_softcap_alibi_dropout(arch):
    """RDNA's hdim 128 backward with dQ from its own walk (gfx1100 always, gfx1201 with a bias): every
    term that walk recomputes P and dS with -- sliding window, soft-cap, ALiBi, dropout -- against
    the reference, padded head dims."""
    assert bwd_config(arch, 128, 128, dropout=True, bias=True).dq_loop  # gfx1100: always; gfx1201: with a bias
    assert bwd_config(arch, 128, 128).dq_loop == (arch == "gfx1100")
    q, k, v, do = inputs(b=2, sq=45, sk=70, hq=2, hk=1, d=112, seed=13)
    slopes = np.array([[0.3, 0.1], [0.05, 0.2]], np.float32)
    got, ref = run(arch, do, q, k, v, window=(20, 9), softcap=4.0, alibi_slopes=slopes, dropout_p=0.25, seed=5)
    assert_grads_close(got, ref, np.float16)


def test_rdna_hdim64_tiles_keep_the_8_wave_tile_where_the_small_one_spills():
    """RDNA at hdim 64 walks 16 query rows with 4 waves; gfx1100 keeps 32x64 with 8 waves with the
    bias gradient or dropout, where 16x64 spills; a bias without its gradient takes 16x64 since
    session 48 (32x64 came to spill 31 VGPRs with an f32 bias, a soft-cap and a causal mask)."""
    for arch in ("gfx1100", "gfx1201"):
        assert (bwd_config(arch, 64, 64).block_m, bwd_config(arch, 64, 64).waves) == (16, 4)
    for flags in ({"dbias": True}, {"dropout": True}):
        cfg = bwd_config("gfx1100", 64, 64, **flags)
        assert (cfg.block_m, cfg.block_n, cfg.waves) == (32, 64, 8), flags
    assert (bwd_config("gfx1100", 64, 64, bias=True).block_m, bwd_config("gfx1100", 64, 64, bias=True).waves) == \
        (16, 4)
    assert bwd_config("gfx1201", 64, 64, bias=True).waves == 4
    assert bwd_config("gfx1100", 128, 128, bias=True) == BWD_CONFIGS["gfx1100"][128]


def test_pairing_follows_the_grid_against_the_compute_units():
    """Pairs only under a causal mask, and only once the unpaired grid outnumbers the compute
    units, up to twice the workgroups they hold at once (gfx942: 304 CUs, one 8-wave workgroup
    each at 2 waves/SIMD at hdim 128, two 4-wave ones at hdim 64)."""
    cfg = bwd_config("gfx942", 128, 128)
    kernel = SimpleNamespace(manifest={"vgpr_count": 256, "lds_bytes": 32768})

    def shape(mask, b, h, s):
        return bwd_module.BwdShape(arch="gfx942", dtype="f16", hdim_q=128, hdim_v=128, hq=h, hk=h, mask=mask,
                                   softcap=False, sink=False, deterministic=False, varlen=False, b=b, sq=s,
                                   seqlens_q=(s,) * b, seqlens_k=(s,) * b, contiguous=True)

    causal, full = fmha_mask_params("bottom_right"), fmha_mask_params(False)
    assert bwd_module.pair_key_blocks(shape(causal, 2, 16, 2048), cfg, kernel)  # 512 workgroups
    assert not bwd_module.pair_key_blocks(shape(causal, 1, 16, 2048), cfg, kernel)  # 256
    assert not bwd_module.pair_key_blocks(shape(causal, 4, 16, 2048), cfg, kernel)  # 1024
    assert not bwd_module.pair_key_blocks(shape(full, 2, 16, 2048), cfg, kernel)
    # Two workgroups per CU: 512 share 304 CUs (paired), 1216 is twice the 608 resident, 1280 more.
    cfg64, kernel64 = bwd_config("gfx942", 64, 64), SimpleNamespace(manifest={"vgpr_count": 256, "lds_bytes": 17408})
    assert bwd_module.pair_key_blocks(shape(causal, 2, 16, 2048), cfg64, kernel64)
    assert not bwd_module.pair_key_blocks(shape(causal, 1, 16, 2048), cfg64, kernel64)
    assert bwd_module.pair_key_blocks(shape(causal, 2, 38, 2048), cfg64, kernel64)
    assert not bwd_module.pair_key_blocks(shape(causal, 2, 40, 2048), cfg64, kernel64)
    # The paired kernel is taken when it spills nothing more to scratch and keeps the occupancy,
    # or loses only occupancy its grid does not use: 256 paired workgroups at one wave per SIMD
    # (one workgroup per CU) still all run at once on 304 CUs, 608 do not.
    s = shape(causal, 2, 16, 2048)
    paired = SimpleNamespace(manifest={"vgpr_count": 256, "lds_bytes": 32768, "sgpr_spill_count": 40})
    assert bwd_module.paired_fits(s, cfg, kernel, paired)
    fewer_waves = SimpleNamespace(manifest={"vgpr_count": 300, "lds_bytes": 32768})
    assert bwd_module.paired_fits(s, cfg, kernel, fewer_waves)
    assert not bwd_module.paired_fits(shape(causal, 2, 38, 2048), cfg, kernel, fewer_waves)
    scratch = SimpleNamespace(manifest={"vgpr_count": 256, "lds_bytes": 32768, "vgpr_spill_count": 4})
    assert not bwd_module.paired_fits(s, cfg, kernel, scratch)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_causal_hdim128_small_batch_plan_compiles(arch):
    """A causal hdim 128 backward over 2 x 512 tokens and 4 heads builds its plan on every arch: the
    kernels the planner picks for a small grid compile within the registers (with
    fold-scalars-laid-out, gfx1100's dq_dk_dv spills 3 VGPRs here through every other retry: the
    driver compiles it again without that pass)."""
    shape = bwd_module.BwdShape(arch=arch, dtype="f16", hdim_q=128, hdim_v=128, hq=4, hk=4,
                                mask=fmha_mask_params(True), softcap=False, sink=False, deterministic=False,
                                varlen=False, b=2, sq=512, seqlens_q=(512, 512), seqlens_k=(512, 512),
                                contiguous=True)
    plan = bwd_module.build_plan(shape)
    assert [s.name for s in plan.stages][1] == "dq_dk_dv"


def test_bwd_stages_vectorize_only_aligned_tensors():
    """BwdShape.aligned: a tensor whose rows are 68 elements apart (not a multiple of 16 bytes) is
    compiled without the 16-byte stride fact, the others with it, and the gradients still match."""
    dev = EmulatorDevice("gfx942")
    q, k, v, do = inputs(sq=24, sk=40, hq=2, hk=1, d=64, seed=12)
    padded = np.zeros(q.shape[:-1] + (68,), q.dtype)
    padded[..., :64] = q
    host = DeviceArray.from_numpy(dev, padded)
    q_view = DeviceArray(host.buffer, q.shape, q.dtype, host.strides[:-1] + (1,), 0)
    out, lse = fmha_fwd(q, k, v, return_lse=True, device=dev)
    args = [DeviceArray.from_numpy(dev, x) for x in (do, k, v, out, lse)]
    plan = fmha_bwd_plan(args[0], q_view, *args[1:], device=dev)
    units = {t["name"]: t["stride_unit"] for s in plan.stages if s.name == "dq_dk_dv"
             for t in s.kernel.manifest["tensors"]}
    assert units["q"] == 1 and units["k"] == units["v"] == units["do"] == units["dk"] == 8
    grads = fmha_bwd(args[0], q_view, *args[1:], device=dev)
    assert_grads_close([g.numpy() for g in grads], fmha_bwd_reference(do, q, k, v), np.float16)
    aligned = fmha_bwd_plan(*args[:1], DeviceArray.from_numpy(dev, q), *args[1:], device=dev)
    assert all(t["stride_unit"] == 8 for s in aligned.stages if s.name == "dq_dk_dv"
               for t in s.kernel.manifest["tensors"] if t["name"] in ("q", "k", "v", "do", "dk", "dv"))
