"""A plan's scalar inputs (batch, max_seqlen_q, page_shift; the GQA packing and split count it
fixes) must agree with the tensors they describe. The C runtime's callers pass them by hand, so
the forward's kernels state them as preconditions (requires), which every launcher checks before
the first stage runs: an error naming the condition, not a wrong result or a fault."""

from __future__ import annotations

import numpy as np
import pytest
from _plans import captured_plan

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.launcher import prepare
from tiledsl.ops import fmha_fwd_kvcache
from tiledsl.plan import Plan
from tiledsl.reference import fmha_fwd_kvcache_reference

pytestmark = pytest.mark.emulator


def captured_call(monkeypatch, **call):
    return captured_plan(monkeypatch, fmha_fwd_kvcache, **call)


def refused(plan: Plan, device, env: dict, pattern: str) -> None:
    before = len(device.launches)
    with pytest.raises(ValueError, match=pattern):
        plan.run(device, env)
    assert len(device.launches) == before, "no stage may run before every stage's arguments are checked"


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_decode_plan_refuses_scalars_that_disagree_with_its_tensors(monkeypatch, arch):
    """Paged decode, GQA 8:1 packed (heads_per_block 8), two splits (producers + combine)."""
    rng = np.random.default_rng(21)
    page = 16
    kc, vc = (rng.standard_normal((12, page, 1, 64)).astype(np.float16) for _ in range(2))
    table = rng.permutation(12).reshape(2, 6).astype(np.int32)
    q = rng.standard_normal((2, 1, 8, 64)).astype(np.float16)
    opts = dict(cache_seqlens=np.array([70, 33], np.int32), block_table=table, causal=True)
    dev = EmulatorDevice(arch)
    plan, device, env, out = captured_call(monkeypatch, q=q, k_cache=kc, v_cache=vc, num_splits=2, device=dev,
                                           **opts)
    assert plan.stage_names == ["producers", "combine"] and plan.info["heads_per_block"] == 8
    np.testing.assert_allclose(out.astype(np.float64), fmha_fwd_kvcache_reference(q, kc, vc, **opts),
                               atol=2e-3, rtol=2e-3)
    # The sizes its workspace follows from are recorded (the C runtime refuses others by them too).
    assert plan.to_json()["shapes"] == {"q": [2, 1, 8, 64], "o": [2, 1, 8, 64]}
    longer = np.zeros((2, 3, 8, 64), np.float16)
    refused(plan, device, {**env, "q": longer}, r"argument 'q': shape \[2, 3, 8, 64\], but this plan was made for")
    refused(plan, device, {**env, "batch": 1}, r"batch == BQ")
    refused(plan, device, {**env, "max_seqlen_q": 2}, r"max_seqlen_q == SQ")
    refused(plan, device, {**env, "page_shift": 5}, r"SK == 1 << page_shift")
    wider = np.zeros((12, page, 2, 64), np.float16)  # two kv heads: 8 / 2 per head, not 8
    refused(plan, device, {**env, "k": wider, "v": wider}, r"HQ == HK \* heads_per_block")
    # What the plan fixes, bound otherwise by a caller of the kernel itself.
    producers = plan.stages[0]
    bound = producers.bind({**env, **plan.workspace.views(device.alloc(plan.workspace_size))})
    for name, value, pattern in (("heads_per_block", 4, r"HQ == HK \* heads_per_block"),
                                 ("num_splits", 3, r"num_splits == NSPLIT")):
        with pytest.raises(ValueError, match=pattern):
            prepare(producers.kernel.manifest, (), {**bound, name: value})


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_batch_prefill_plan_refuses_scalars_that_disagree_with_its_tensors(monkeypatch, arch):
    """Packed queries (group mode) against a paged cache with an append and rotary embedding: the
    append's, the rotation's and the attention's preconditions."""
    rng = np.random.default_rng(22)
    kc, vc = (rng.standard_normal((8, 32, 2, 64)).astype(np.float16) for _ in range(2))
    table = rng.permutation(8).reshape(2, 4).astype(np.int32)
    cu_q = np.array([0, 5, 12], np.int32)
    q = rng.standard_normal((12, 2, 64)).astype(np.float16)
    k, v = (rng.standard_normal((2, 3, 2, 64)).astype(np.float16) for _ in range(2))
    ang = rng.uniform(0, 6, (128, 32))
    opts = dict(cache_seqlens=np.array([40, 9], np.int32), block_table=table, k=k, v=v, cu_seqlens_q=cu_q,
                rotary_cos=np.cos(ang), rotary_sin=np.sin(ang))
    dev = EmulatorDevice(arch)
    plan, device, env, _ = captured_call(monkeypatch, q=q, k_cache=kc.copy(), v_cache=vc.copy(), device=dev, **opts)
    assert plan.stage_names[:2] == ["append_kv", "rotary_q"]
    assert {n: plan.to_json()["shapes"][n] for n in ("q", "k_new", "v_new")} == \
        {"q": [1, 12, 2, 64], "k_new": [2, 3, 2, 64], "v_new": [2, 3, 2, 64]}
    refused(plan, device, {**env, "batch": 1}, r"batch == BX")  # the append's new rows: 2 sequences
    refused(plan, device, {**env, "max_seqlen_q": 13}, r"max_rows <= SX")  # 12 packed query rows
    refused(plan, device, {**env, "page_shift": 4}, r"SC == 1 << page_shift")  # pages of 32
    one_sequence = np.array([0, 12], np.int32)
    refused(plan, device, {**env, "cu_seqlens_q": one_sequence, "max_seqlen_q": 12}, r"batch == NCU - 1")
    refused(plan, device, {**env, "cu_seqlens_q": one_sequence}, r"max_seqlen_q: 7, but cu_seqlens_q holds a "
                                                                 r"sequence of 12 rows")  # Plan.offsets
