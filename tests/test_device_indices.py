"""Offsets, lengths, cache rows and pages that live in device memory (cu_seqlens, cache_seqlens,
cache_batch_idx, block_table): tiledsl.ops checks them on the host, but a C caller or a direct
launch passes them as they are. Whatever their values, the kernels keep every access inside its
tensor (they clamp them; an appended row whose position falls outside its cache is not stored),
which the emulator's sanitizer checks access by access: wrong values give wrong rows, never a
memory fault or a write into another sequence's cache. The backward's group-mode plan, whose
split counts and workspace offsets follow from the sequence lengths, refuses other cu_seqlens."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from _plans import captured_plan

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.ops import fmha_bwd_plan, fmha_fwd, fmha_fwd_kvcache
from tiledsl.reference import fmha_fwd_reference

pytestmark = pytest.mark.emulator
I32 = np.int32


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_group_mode_forward_keeps_inside_its_tensors_for_any_cu_seqlens(monkeypatch, arch):
    rng = np.random.default_rng(31)
    q = rng.standard_normal((75, 2, 64)).astype(np.float16)
    k, v = (rng.standard_normal((100, 2, 64)).astype(np.float16) for _ in range(2))
    cu_q, cu_k = np.array([0, 30, 30, 75], I32), np.array([0, 20, 44, 100], I32)
    for splits in (1, 2):  # one kernel; producers and combine
        plan, dev, env, _ = captured_plan(monkeypatch, fmha_fwd, q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                          causal=True, num_splits=splits, return_lse=True, arch=arch)
        # The plan's runners check the offsets first, as tiledsl.ops does (Plan.offsets; the C
        # runtime reads them back too): the kernels' clamps are for a launch without them.
        assert plan.offsets == {"cu_seqlens_q": ("q", 1, "max_seqlen_q"), "cu_seqlens_k": ("k", 1, None)}
        unchecked = dataclasses.replace(plan, offsets={})
        for bad_q, bad_k, message in (
                ([0, 30, 30, 7500], cu_k, r"cu_seqlens_q: the last offset 7500 is past the packed sequence length 75"),
                (cu_q, [0, 20, 44, 100000], r"cu_seqlens_k: the last offset 100000 is past"),
                ([0, -40, 30, 75], [0, 2**31 - 1, 44, 100], r"cu_seqlens_q: must be non-decreasing"),
                ([0, 60, 30, 75], [0, 90, 10, 100], r"cu_seqlens_q: must be non-decreasing"),
                ([0, 0, 0, 75], cu_k, r"max_seqlen_q: 45, but cu_seqlens_q holds a sequence of 75 rows"),
                (np.array([0, 30, 2**64 - 1, 75], np.uint64), cu_k,
                 r"cu_seqlens_q: cu_seqlens_q\[2\] = 18446744073709551615 does not fit in i32")):
            bad = {**env, "cu_seqlens_q": np.asarray(bad_q), "cu_seqlens_k": np.array(bad_k, I32)}
            with pytest.raises(ValueError, match=message):
                plan.run(dev, bad)
            unchecked.run(dev, {**bad, "cu_seqlens_q": np.asarray(bad_q).astype(I32)})  # as C passes them: i32


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_paged_decode_keeps_inside_its_cache_for_any_table_or_length(monkeypatch, arch):
    rng = np.random.default_rng(32)
    kc, vc = (rng.standard_normal((12, 16, 1, 64)).astype(np.float16) for _ in range(2))
    table = rng.permutation(12).reshape(2, 6).astype(I32)
    q = rng.standard_normal((2, 1, 8, 64)).astype(np.float16)
    plan, dev, env, _ = captured_plan(monkeypatch, fmha_fwd_kvcache, q=q, k_cache=kc, v_cache=vc, num_splits=2,
                                      cache_seqlens=np.array([70, 33], I32), block_table=table, causal=True,
                                      arch=arch)
    for name, value in (("block_table", np.where(table == table[0, 4], 50, table)),
                        ("block_table", np.where(table == table[0, 4], -7, table)),
                        ("cache_seqlens", np.array([700, 33], I32)),
                        ("cache_seqlens", np.array([-70, 2**31 - 1], I32))):
        plan.run(dev, {**env, name: value.astype(I32)})


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_append_stores_only_inside_its_sequence_rows(monkeypatch, arch):
    """A contiguous cache with an append of 4 rows: positions past the cache's end or before its
    start are not stored (other cache entries keep their values), and a cache row index out of
    range is clamped into the cache."""
    rng = np.random.default_rng(33)
    kc, vc = (rng.standard_normal((3, 64, 2, 64)).astype(np.float16) for _ in range(2))
    kn, vn = (rng.standard_normal((2, 4, 2, 64)).astype(np.float16) for _ in range(2))
    q = rng.standard_normal((2, 4, 2, 64)).astype(np.float16)
    plan, dev, env, _ = captured_plan(monkeypatch, fmha_fwd_kvcache, q=q, k_cache=kc.copy(), v_cache=vc.copy(), k=kn,
                                      v=vn, cache_seqlens=np.array([10, 20], I32),
                                      cache_batch_idx=np.array([2, 0], I32), causal=True, arch=arch)
    assert plan.stage_names == ["append_kv", "attention"]
    for lengths, rows in (([62, 20], {2: (62, 64)}), ([-30, 20], {}), ([-2, 20], {2: (0, 2)})):
        k2, v2 = kc.copy(), vc.copy()
        plan.run(dev, {**env, "k": k2, "v": v2, "cache_seqlens": np.array(lengths, I32)})
        want_k, want_v = kc.copy(), vc.copy()
        want_k[0, 20:24], want_v[0, 20:24] = kn[1], vn[1]  # sequence 1, in range
        for entry, (lo, hi) in rows.items():  # sequence 0: the rows that fall inside the cache
            first = lo - lengths[0]
            want_k[entry, lo:hi], want_v[entry, lo:hi] = kn[0, first:first + hi - lo], vn[0, first:first + hi - lo]
        np.testing.assert_array_equal(k2, want_k, err_msg=f"cache_seqlens {lengths}")
        np.testing.assert_array_equal(v2, want_v, err_msg=f"cache_seqlens {lengths}")
    for index in ([5, 0], [-1, 0]):
        plan.run(dev, {**env, "k": kc.copy(), "v": vc.copy(), "cache_batch_idx": np.array(index, I32)})


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_group_mode_backward_plan_refuses_other_sequence_lengths(arch):
    rng = np.random.default_rng(34)
    cu_q, cu_k = np.array([0, 30, 30, 75], I32), np.array([0, 20, 44, 100], I32)
    q, do = (rng.standard_normal((75, 2, 64)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((100, 1, 64)).astype(np.float16) for _ in range(2))
    opts = {"causal": "top_left", "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
    out, lse = fmha_fwd_reference(q, k, v, return_lse=True, **opts)
    out, lse = out.astype(np.float16), lse.astype(np.float32)
    plan = fmha_bwd_plan(do, q, k, v, out, lse, deterministic=True, arch=arch, **opts)
    assert plan.values == {"cu_seqlens_q": (0, 30, 30, 75), "cu_seqlens_k": (0, 20, 44, 100)}
    env = {"q": q[None], "k": k[None], "v": v[None], "do": do[None], "out": out[None], "lse": lse[None],
           "dq": np.zeros((1, 75, 2, 64), np.float16), "dk": np.zeros((1, 100, 1, 64), np.float16),
           "dv": np.zeros((1, 100, 1, 64), np.float16), "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k,
           "scale": 0.125, "softcap": 0.0}
    for name, value in (("cu_seqlens_q", [0, 0, 0, 75]), ("cu_seqlens_k", [0, 0, 100, 100])):
        with pytest.raises(ValueError, match=rf"argument '{name}': values \[{', '.join(map(str, value))}\], but this "
                                             r"plan was made for \["):
            plan.run(EmulatorDevice(arch), {**env, name: np.array(value, I32)})
