"""Paired query blocks in the forward (fmha_fwd.tile's PASSES = 2, tiledsl.pairing): workgroup x
computes query blocks x and nblocks - 1 - x of its sequence. Forced on here (the plan pairs only on
request) over sequences of odd, even and single block counts, against the float64 reference; the
unpaired masked variants' heaviest-first order too, with the rule that pairs the backward's key
blocks."""

from __future__ import annotations

import numpy as np
import pytest
from _fmha_util import check_out_lse

import tiledsl.fmha_splitkv as splitkv
from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.kernels.fmha_configs import fmha_config
from tiledsl.ops import fmha_fwd
from tiledsl.pairing import paired_fits, pairs_pay
from tiledsl.reference import fmha_fwd_reference

pytestmark = pytest.mark.emulator


@pytest.fixture
def paired(monkeypatch):
    """Every one-stage forward plan pairs its query blocks; the plans built are recorded."""
    built = []
    monkeypatch.setattr(splitkv, "pair_query_blocks", lambda *args: True)
    original = splitkv.build_attention_plan.__wrapped__

    def build(shape):
        plan = original(shape)
        built.append(plan)
        return plan

    monkeypatch.setattr(splitkv, "build_attention_plan", build)
    return built


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_paired_query_blocks_cover_every_block_once(arch, paired):
    bm = fmha_config(arch, 32, 32, masked=True).block_m
    lens_q = [5 * bm - 7, 2 * bm, 1, 4 * bm + 3]  # 5, 2, 1 and 5 blocks: the middle of 5 runs once
    lens_k = [5 * bm + 9, 2 * bm - 5, 17, 3 * bm]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((int(cu_q[-1]), 2, 32)).astype(np.float16)
    k, v = (rng.standard_normal((int(cu_k[-1]), 1, 32)).astype(np.float16) for _ in range(2))
    mask = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    for causal in ("bottom_right", "top_left"):
        out, lse = fmha_fwd(q, k, v, causal=causal, return_lse=True, device=EmulatorDevice(arch), **mask)
        assert paired[-1].info["query_blocks_per_workgroup"] == 2
        want, want_lse = fmha_fwd_reference(q, k, v, causal=causal, return_lse=True, **mask)
        check_out_lse(out, lse, want, want_lse, 4e-3)


def test_blocks_pair_where_the_grid_outnumbers_the_compute_units():
    """The backward's rule (tiledsl.fmha_bwd.pair_key_blocks). gfx942 (304 CUs), two 4-wave
    workgroups per CU: 512 blocks pair, 256 do not, nor does a full mask; twice the resident
    workgroups (1216) is the most that pairs."""
    manifest = {"vgpr_count": 256, "lds_bytes": 17408}
    assert pairs_pay("gfx942", "causal_bottom_right", 512, manifest, 4)
    assert pairs_pay("gfx942", "causal_top_left", 1216, manifest, 4)
    assert not pairs_pay("gfx942", "causal_bottom_right", 256, manifest, 4)
    assert not pairs_pay("gfx942", "causal_bottom_right", 1217, manifest, 4)
    assert not pairs_pay("gfx942", "none", 512, manifest, 4)


def test_a_paired_kernel_may_lose_only_occupancy_its_grid_does_not_use():
    """gfx942, 4-wave workgroups: at 288 VGPRs (one wave per SIMD, one workgroup per CU) the 256
    workgroups of a paired grid still run at once on 304 CUs, 512 do not; scratch spills never."""
    unpaired = {"vgpr_count": 256, "lds_bytes": 17408}
    assert paired_fits("gfx942", 4, unpaired, {"vgpr_count": 256, "lds_bytes": 17408, "sgpr_spill_count": 20}, 512)
    assert paired_fits("gfx942", 4, unpaired, {"vgpr_count": 288, "lds_bytes": 17408}, 256)
    assert not paired_fits("gfx942", 4, unpaired, {"vgpr_count": 288, "lds_bytes": 17408}, 512)
    assert not paired_fits("gfx942", 4, unpaired, {"vgpr_count": 256, "lds_bytes": 17408, "vgpr_spill_count": 2}, 1)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_unpaired_masked_blocks_run_heaviest_first(arch, monkeypatch):
    """Unpaired, a causal forward's workgroups take the query blocks of every head heaviest first in
    launch order (x fastest): the work each does (its wave-instructions) never grows along the
    launch, and the results match the reference."""
    import tiledsl.backends.rocm.runtime.emulator_device as emulator_device

    counts = []

    def counted(*args, **kwargs):
        n = run_workgroup(*args, **kwargs)
        counts.append((args[2], n))
        return n

    run_workgroup = emulator_device.run_workgroup
    monkeypatch.setattr(emulator_device, "run_workgroup", counted)
    bm = fmha_config(arch, 64, 64, masked=True).block_m
    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal((1, 4 * bm, 2, 64)).astype(np.float16) for _ in range(3))
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice(arch, lockstep=False))
    check_out_lse(out, lse, *fmha_fwd_reference(q, k, v, causal=True, return_lse=True), 4e-3)
    assert [wg for wg, _ in counts] == [(x, y, 0) for y in range(2) for x in range(4)]  # launch order
    work = [n for _, n in counts]
    # Four query blocks of a causal mask: 4, 3, 2 and 1 key blocks, each heavier by the same work.
    steps = {a - b for a, b in zip(work[:-1], work[1:], strict=True)} - {0}
    assert all(a >= b for a, b in zip(work[:-1], work[1:], strict=True)) and len(set(work)) == 4, work
    assert len(steps) == 1, work
