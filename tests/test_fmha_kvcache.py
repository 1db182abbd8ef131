"""Attention against a KV cache (fmha_fwd_kvcache): contiguous and paged caches, append with rotary
embedding, batch prefill, GQA packing and split-KV, on every arch against the float64 reference;
the memory traffic of a GQA decode step; and every validation error before any launch."""

from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest
from _fmha_util import check_out_lse

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.fmha_splitkv import key_blocks
from tiledsl.ops import fmha_fwd_kvcache
from tiledsl.ops import fmha_num_splits as ops_num_splits
from tiledsl.reference import fmha_fwd_kvcache_reference

pytestmark = pytest.mark.emulator


def kernels(dev) -> list[str]:
    return [x["kernel"] for x in dev.launches]


def paged_cache(rng, pages, page, hk, d, dtype=np.float16):
    return tuple(rng.standard_normal((pages, page, hk, d)).astype(dtype) for _ in range(2))


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_decode_paged_gqa_8_to_1_shuffled_pages(arch):
    """Sq = 1, GQA 8:1 packed into one block, pages of 16 in a shuffled order, the last one
    partial, split counts 1, 2, 3, 16 and the heuristic: all match the reference."""
    rng = np.random.default_rng(3)
    page, pages = 16, 40
    kc, vc = paged_cache(rng, pages, page, 1, 64)
    table = rng.permutation(pages)[:36].reshape(2, 18).astype(np.int32)
    seqlens = np.array([275, 81], np.int32)  # 17.2 and 5.1 pages
    q = rng.standard_normal((2, 1, 8, 64)).astype(np.float16)
    opts = dict(cache_seqlens=seqlens, block_table=table, causal=True, return_lse=True)
    ref = fmha_fwd_kvcache_reference(q, kc, vc, **opts)
    for splits in (1, 2, 3, 16, 0):
        dev = EmulatorDevice(arch)
        got = fmha_fwd_kvcache(q, kc, vc, num_splits=splits, device=dev, **opts)
        check_out_lse(*got, *ref, 2e-3)
        # 0: the heuristic's count (decode: up to a split per key block, enough to fill the CUs)
        want = min(splits or ops_num_splits(arch, batch=2, nhead_q=8, nhead_k=1, max_seqlen_q=1, max_seqlen_k=275,
                                            hdim_q=64, causal=True), key_blocks(arch, 64, 64, True, 275))
        assert kernels(dev)[-1] == ("fmha_fwd" if want == 1 else "fmha_fwd_combine")
        # one block per (sequence, kv head, split): the 8 query heads are packed
        assert dev.launches[0]["workgroups"] == 2 * want


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_append_rotary_contiguous_cache_batch_idx(arch):
    """New rows appended into a contiguous cache at cache_seqlens (entries picked by
    cache_batch_idx), keys and queries rotated (half-split pairs, positions per row because
    causal), bf16 with a window, soft-cap and sink: the cache and the output match the model."""
    rng = np.random.default_rng(4)
    dt = ml_dtypes.bfloat16
    kc, vc = (rng.standard_normal((3, 200, 2, 80)).astype(dt) for _ in range(2))
    q = rng.standard_normal((2, 5, 4, 80)).astype(dt)
    k, v = (rng.standard_normal((2, 5, 2, 80)).astype(dt) for _ in range(2))
    ang = rng.uniform(0, 6, (256, 24))
    opts = dict(cache_seqlens=np.array([0, 150], np.int32), cache_batch_idx=np.array([2, 0], np.int32), k=k, v=v,
                rotary_cos=np.cos(ang), rotary_sin=np.sin(ang), causal=True, window=(60, 0), softcap=20.0,
                sink=rng.standard_normal(4).astype(np.float32), return_lse=True)
    kc_ref, vc_ref = kc.copy(), vc.copy()
    ref = fmha_fwd_kvcache_reference(q, kc_ref, vc_ref, **opts)
    dev = EmulatorDevice(arch)
    got = fmha_fwd_kvcache(q, kc, vc, num_splits=2, device=dev, **opts)
    assert kernels(dev) == ["fmha_kv_append", "fmha_kv_append", "fmha_fwd", "fmha_fwd_combine"]
    # The kernel rotates in f32, the model in f64: at most one bf16 rounding step apart.
    np.testing.assert_allclose(kc.astype(np.float64), kc_ref.astype(np.float64), atol=1e-2, rtol=1e-2)
    assert np.array_equal(vc, vc_ref)
    check_out_lse(*got, *ref, 2e-2)


def test_bf16_rotary_tables_equal_their_f32_values():
    """Rotary tables in bf16 (ml_dtypes', which numpy does not count as a float type) are taken,
    and rotate as their f32 values do."""
    rng = np.random.default_rng(12)
    dt = ml_dtypes.bfloat16
    q = rng.standard_normal((1, 2, 2, 64)).astype(dt)
    new = rng.standard_normal((1, 2, 2, 64)).astype(dt)
    ang = rng.uniform(0, 6, (16, 32))
    cos, sin = np.cos(ang).astype(dt), np.sin(ang).astype(dt)
    dev = EmulatorDevice("gfx942")
    results = []
    for tables in ((cos, sin), (cos.astype(np.float32), sin.astype(np.float32))):
        kc, vc = np.zeros((1, 16, 2, 64), dt), np.zeros((1, 16, 2, 64), dt)
        out = fmha_fwd_kvcache(q, kc, vc, cache_seqlens=3, k=new, v=new, rotary_cos=tables[0],
                               rotary_sin=tables[1], device=dev)
        results.append((out, kc))
    assert np.array_equal(results[0][0], results[1][0]) and np.array_equal(results[0][1], results[1][1])


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_batch_prefill_paged_varlen_empty_sequence_interleaved_rotary(arch):
    """Packed queries of different lengths (one empty) against a paged cache of pages of 32,
    appending 3 rows each with interleaved rotary embedding, not causal (q rotated at
    cache_seqlens), heuristic splits."""
    rng = np.random.default_rng(5)
    kc, vc = paged_cache(rng, 24, 32, 2, 64)
    table = rng.permutation(24)[:24].reshape(3, 8).astype(np.int32)
    cu_q = np.array([0, 7, 7, 20], np.int32)
    q = rng.standard_normal((20, 2, 64)).astype(np.float16)
    k, v = (rng.standard_normal((3, 3, 2, 64)).astype(np.float16) for _ in range(2))
    ang = rng.uniform(0, 6, (256, 32))
    opts = dict(cache_seqlens=np.array([100, 0, 61], np.int32), block_table=table, k=k, v=v, cu_seqlens_q=cu_q,
                rotary_cos=np.cos(ang), rotary_sin=np.sin(ang), rotary_interleaved=True, return_lse=True)
    kc_ref, vc_ref = kc.copy(), vc.copy()
    ref = fmha_fwd_kvcache_reference(q, kc_ref, vc_ref, **opts)
    got = fmha_fwd_kvcache(q, kc, vc, device=EmulatorDevice(arch), **opts)
    np.testing.assert_allclose(kc.astype(np.float64), kc_ref.astype(np.float64), atol=2e-3, rtol=2e-3)
    assert np.array_equal(vc, vc_ref)
    check_out_lse(*got, *ref, 2e-3)


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("page", [16, 64])
def test_paged_decode_with_empty_sequences_reads_no_table_entry(arch, page):
    """Sequences holding no keys (the first and the last): their table rows hold -1, which a read
    would turn into a page before the cache (a memory fault), and their output rows are 0. With
    a table of no columns, every sequence empty, nothing is read at all."""
    rng = np.random.default_rng(9)
    kc, vc = paged_cache(rng, 6, page, 2, 32)
    table = np.full((3, 3), -1, np.int32)
    table[1, :2] = [4, 1]
    q = rng.standard_normal((3, 1, 4, 32)).astype(np.float16)
    opts = dict(cache_seqlens=np.array([0, page + 5, 0], np.int32), block_table=table, causal=True)
    ref = fmha_fwd_kvcache_reference(q, kc, vc, **opts)
    for splits in (1, 2):
        got = fmha_fwd_kvcache(q, kc, vc, num_splits=splits, device=EmulatorDevice(arch), **opts)
        np.testing.assert_allclose(got.astype(np.float64), ref, atol=2e-3)
        assert not got[[0, 2]].any()
    none = fmha_fwd_kvcache(q, kc, vc, cache_seqlens=np.zeros(3, np.int32), block_table=np.zeros((3, 0), np.int32),
                            device=EmulatorDevice(arch))
    assert not none.any()


def test_reversed_views_numpy_counts_and_freed_tables():
    """A reversed numpy cache view is read like any other (no append: copied), numpy ints count
    splits, and a freed block table is named."""
    from tiledsl.device_array import DeviceArray

    rng = np.random.default_rng(8)
    dev = EmulatorDevice("gfx942")
    kc, vc = paged_cache(rng, 4, 16, 1, 32)
    q = rng.standard_normal((1, 1, 2, 32)).astype(np.float16)
    opts = dict(cache_seqlens=np.array([40], np.int32), block_table=np.array([[3, 0, 2]], np.int32))
    want = fmha_fwd_kvcache(q, kc, vc, num_splits=2, device=dev, **opts)
    got = fmha_fwd_kvcache(q, kc[::-1].copy()[::-1], vc[:, ::-1].copy()[:, ::-1], num_splits=np.int64(2),
                           device=dev, **opts)
    np.testing.assert_array_equal(got, want)  # the same kernels on the same values
    table = DeviceArray.from_numpy(dev, opts["block_table"])
    table.free()
    with pytest.raises(ValueError, match="block_table: its DeviceArray was freed"):
        fmha_fwd_kvcache(q, kc, vc, cache_seqlens=opts["cache_seqlens"], block_table=table, device=dev)


def test_device_arrays_stay_on_the_device():
    """DeviceArrays in: the append updates the device cache, the output is a DeviceArray."""
    from tiledsl.device_array import DeviceArray

    rng = np.random.default_rng(6)
    dev = EmulatorDevice("gfx942")
    kc, vc = paged_cache(rng, 8, 64, 1, 32)
    q = rng.standard_normal((1, 2, 4, 32)).astype(np.float16)
    k, v = (rng.standard_normal((1, 2, 1, 32)).astype(np.float16) for _ in range(2))
    table = np.array([[5, 2, 7]], np.int32)
    opts = dict(cache_seqlens=np.array([130], np.int32), block_table=table, causal=True)
    kc_ref, vc_ref = kc.copy(), vc.copy()
    ref = fmha_fwd_kvcache_reference(q, kc_ref, vc_ref, k=k, v=v, **opts)
    d = {n: DeviceArray.from_numpy(dev, x, n) for n, x in (("q", q), ("kc", kc), ("vc", vc), ("k", k), ("v", v))}
    out = fmha_fwd_kvcache(d["q"], d["kc"], d["vc"], k=d["k"], v=d["v"], **opts)
    assert isinstance(out, DeviceArray)
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref, atol=2e-3)
    assert np.array_equal(d["kc"].numpy(), kc_ref) and np.array_equal(d["vc"].numpy(), vc_ref)


@pytest.mark.parametrize("page", [256, 16])
def test_decode_reads_the_cache_once_with_gqa(page):
    """A GQA 8:1 decode step reads each cached K/V row at most 1.1 times (plus the partials and
    the block table): the packed heads share every load. Pages of a key block or more cost one
    table read per block; smaller pages one per key, which the lanes of a key's row share (one
    request per distinct address: the `unique` count)."""
    rng = np.random.default_rng(7)
    pages = 4096 // page
    kc, vc = paged_cache(rng, pages, page, 1, 128)
    table = rng.permutation(pages).reshape(1, pages).astype(np.int32)
    q = rng.standard_normal((1, 1, 8, 128)).astype(np.float16)
    dev = EmulatorDevice("gfx942")
    fmha_fwd_kvcache(q, kc, vc, cache_seqlens=np.array([4096], np.int32), block_table=table, num_splits=8,
                     device=dev)
    producers, combine = dev.launches
    cache_bytes = 2 * 4096 * 128 * 2
    extra = table.nbytes * 64 + q.nbytes * 64  # table and q reads, generously
    assert producers["global_load_unique_bytes"] <= 1.1 * cache_bytes + extra, producers
    if page >= 64:  # one table read per key block: lane by lane too
        assert producers["global_load_bytes"] <= 1.1 * cache_bytes + extra, producers
    assert combine["global_load_unique_bytes"] <= 2 * 8 * 8 * (128 + 1) * 4


def test_bad_input_is_a_value_error_before_any_launch():
    rng = np.random.default_rng(8)
    kc, vc = paged_cache(rng, 4, 16, 2, 32)
    q = rng.standard_normal((2, 1, 4, 32)).astype(np.float16)
    table = np.array([[0, 1], [2, 3]], np.int32)
    ok = dict(cache_seqlens=np.array([20, 5], np.int32), block_table=table)
    dev = EmulatorDevice("gfx942")

    def bad(match, q=q, kc=kc, vc=vc, **changes):
        with pytest.raises(ValueError, match=match):
            fmha_fwd_kvcache(q, kc, vc, device=dev, **{**ok, **changes})

    bad(r"block_table: entry \[1, 0\] = 9 is not a page", block_table=np.array([[0, 1], [9, 3]], np.int32))
    bad(r"block_table: entry \[0, 1\] = -1", block_table=np.array([[0, -1], [2, 3]], np.int32))
    bad("needs 3 pages of 16", cache_seqlens=np.array([33, 5], np.int32))
    bad("needs 2 pages", cache_seqlens=np.array([17, 5], np.int32), block_table=np.array([[0], [1]], np.int32))
    bad("page size .* power of two", kc=kc[:, :12], vc=vc[:, :12])
    bad("multiple of key/value heads", q=rng.standard_normal((2, 1, 3, 32)).astype(np.float16))
    bad("cache_seqlens: expected an integer array of shape", cache_seqlens=np.array([1, 2, 3], np.int32))
    bad("cache_seqlens: expected values >= 0", cache_seqlens=np.array([-1, 2], np.int32))
    bad(r"cache_seqlens: expected an int in 0..2\*\*31-1 \(keys held\), got 1099511627776", cache_seqlens=2**40)
    bad("return_lse: expected a bool, got 1", return_lse=1)
    bad("rotary_interleaved: expected a bool, got 'no'", rotary_interleaved="no")
    bad("cache_batch_idx: not supported with a paged cache", cache_batch_idx=np.array([0, 1], np.int32))
    k = rng.standard_normal((2, 4, 2, 32)).astype(np.float16)
    bad("v: the new keys and values come together", k=k)
    bad(r"k: expected shape \(2, 4, 2, 32\)", k=k[:, :, :1], v=k)
    bad("rotary embedding applies to the new keys", rotary_cos=np.ones((64, 8)), rotary_sin=np.ones((64, 8)))
    bad("rotary_cos and rotary_sin", k=k, v=k, rotary_cos=np.ones((64, 8)))
    bad("positions up to 23 are rotated, but it has 10 rows", k=k, v=k, rotary_cos=np.ones((10, 8)),
        rotary_sin=np.ones((10, 8)))
    bad("rotary_dim = 2 \\* 20 must be in 2..32", k=k, v=k, rotary_cos=np.ones((64, 20)), rotary_sin=np.ones((64, 20)))
    bad("num_splits", num_splits=-1)
    ckc, cvc = (rng.standard_normal((2, 24, 2, 32)).astype(np.float16) for _ in range(2))
    contiguous = dict(block_table=None, kc=ckc, vc=cvc)
    bad("sequence 0 holds 20 keys and appends 8, beyond the cache's 24 rows", k=np.concatenate([k, k], 1),
        v=np.concatenate([k, k], 1), **contiguous)
    bad(r"cache_batch_idx: entry 1 = 2 is not an entry", cache_batch_idx=np.array([0, 2], np.int32), **contiguous)
    bad("two sequences append into the same cache entry", cache_batch_idx=np.array([1, 1], np.int32), k=k, v=k,
        **contiguous)
    bad("k_cache: expected dtype float16", kc=ckc.astype(np.float32), vc=cvc, block_table=None)
    row = ckc[:, :1]  # every row of the cache at one address: an append would be lost
    shared = np.lib.stride_tricks.as_strided(row, ckc.shape, (row.strides[0], 0, *row.strides[2:]), writeable=True)
    bad(r"k_cache: the new rows are written into the cache in place, but its elements overlap in memory",
        k=k, v=k, kc=shared, vc=cvc, block_table=None)
    # Appends that would race (session 45's sweep): one cache for keys and values; two sequences
    # writing one page slot; a sequence writing into a page another reads below its length.
    bad("k_cache and v_cache: .* share memory", k=k, v=k, kc=ckc, vc=ckc, block_table=None)
    bad("k_cache and v_cache: .* share memory", k=k, v=k, kc=ckc[:, :16], vc=ckc[:, 8:], block_table=None)
    k1 = k[:, :1]
    bad(r"sequence 1 appends into page 2 slots 5..5, which sequence 0's entry \[0, 0\] also uses",
        k=k1, v=k1, cache_seqlens=np.array([5, 5], np.int32), block_table=np.array([[2], [2]], np.int32))
    bad(r"sequence 0 appends into page 2 slots 4..4, which sequence 1's entry \[1, 0\] also uses",
        k=k1, v=k1, cache_seqlens=np.array([20, 10], np.int32), block_table=np.array([[1, 2], [2, 3]], np.int32))
    assert dev.launches == []


def test_appends_race_free_and_without_query_rows():
    """A page both sequences read below their lengths (a shared prefix) is fine to share while each
    appends into its own; an append with no query rows (Sq = 0) still writes the cache (it was
    skipped with the attention); a transposed DeviceArray block table is taken (copied)."""
    from tiledsl.device_array import DeviceArray

    rng = np.random.default_rng(11)
    kc, vc = paged_cache(rng, 4, 16, 1, 64)
    k, v = (rng.standard_normal((2, 1, 1, 64)).astype(np.float16) for _ in range(2))
    q = rng.standard_normal((2, 1, 1, 64)).astype(np.float16)
    lens, table = np.array([16, 16], np.int32), np.array([[0, 1], [0, 2]], np.int32)
    want = fmha_fwd_kvcache_reference(q, kc.copy(), vc.copy(), cache_seqlens=lens, block_table=table, k=k, v=v)
    dev = EmulatorDevice("gfx942")
    kc2, vc2 = kc.copy(), vc.copy()
    out = fmha_fwd_kvcache(q, kc2, vc2, cache_seqlens=lens, block_table=table, k=k, v=v, device=dev)
    np.testing.assert_allclose(out.astype(np.float32), want.astype(np.float32), atol=2e-3)
    assert np.array_equal(kc2[1, 0], k[0, 0]) and np.array_equal(kc2[2, 0], k[1, 0])
    kc3, vc3 = kc.copy(), vc.copy()
    empty = fmha_fwd_kvcache(q[:, :0], kc3, vc3, cache_seqlens=np.array([3, 7], np.int32),
                             block_table=np.array([[0, 1], [2, 3]], np.int32), k=k, v=v, device=dev)
    assert empty.shape == (2, 0, 1, 64)
    assert np.array_equal(kc3[0, 3], k[0, 0]) and np.array_equal(vc3[2, 7], v[1, 0])
    transposed = DeviceArray.from_numpy(dev, np.ascontiguousarray(table.T)).transpose(1, 0)
    qd, kd, vd = (DeviceArray.from_numpy(dev, x) for x in (q, kc, vc))
    got = fmha_fwd_kvcache(qd, kd, vd, cache_seqlens=lens, block_table=transposed)
    base = fmha_fwd_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table, device=dev)
    np.testing.assert_array_equal(got.numpy(), base)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_appended_rows_move_in_vectors(arch):
    """The append and rotary stages declare the call's aligned tensors 16-byte aligned
    (CompileOptions.stride_units): the new rows are read and the cache rows written in 16-byte
    vectors. Not when the new rows' strides do not allow it (KvCacheShape.new_aligned)."""
    from tiledsl.fmha_kvcache import KvCacheShape, build_kvcache_plan
    from tiledsl.fmha_splitkv import SplitShape
    from tiledsl.reference import fmha_mask_params

    att = SplitShape(arch=arch, dtype="f16", hdim_q=64, hdim_v=64, mask=fmha_mask_params(True), varlen=False,
                     lse=False, sink=False, softcap=False, contiguous=True, aligned=("k", "o", "q", "v"), num_splits=1,
                     b=1, hq=2, sq=4, kv_cache="contiguous", q_name="q_rot")
    shape = KvCacheShape(att, batch=1, hk=2, s_new=4, rotary="half", q_positions="rows", new_aligned=True)
    append, rotary = (s.kernel for s in build_kvcache_plan(shape).stages[:2])
    def units(kernel) -> dict[str, int]:
        return {t["name"]: t["stride_unit"] for t in kernel.manifest["tensors"]}

    assert [units(append)[n] for n in ("x", "v_new", "k_cache", "v_cache", "x_rot")] == [8, 8, 8, 8, 1]
    assert units(rotary)["x"] == units(rotary)["x_rot"] == 8
    for k in (append, rotary):
        assert re.search(r"(?:buffer|global)_load_(?:dwordx4|b128)\b", k.asm)
        assert re.search(r"(?:buffer|global)_store_(?:dwordx[24]|b64|b128)\b", k.asm)
    unaligned = build_kvcache_plan(dataclasses.replace(shape, new_aligned=False)).stages[0].kernel
    assert units(unaligned)["x"] == units(unaligned)["v_new"] == 1 and units(unaligned)["k_cache"] == 8
