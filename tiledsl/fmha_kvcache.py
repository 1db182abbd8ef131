"""Attention against a KV cache: `fmha_fwd_kvcache` (flash-attention's flash_attn_with_kvcache).

A call is a plan (tiledsl.plan) over one workspace:

    append_kv   fmha_kv_append.tile (TARGET cache)  new k (rotated) and v into the cache, in place
    rotary_q    fmha_kv_append.tile (TARGET query)  q rotated into the workspace (q_rot)
    attention   fmha_fwd.tile (KV_CACHE)            or producers + combine with split-KV

The first two only run when asked for (k/v given, rotary_cos/sin given). Every argument is
checked on the host before anything is launched, including every block-table entry a sequence
reads or writes and every row an append writes, so a validated call never touches memory outside
its tensors (docs/inference.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from tiledsl.device_array import DeviceArray
from tiledsl.fmha_splitkv import SplitShape, attention_stages, made_for_shapes, offset_inputs, splitkv_workspace
from tiledsl.kernels.fmha_configs import VECTOR_ELEMS, head_dim_units, pack_gqa, padded_hdim, unit_defines
from tiledsl.launcher import BUFFER_REACH, arrays_share_memory, check_live_arrays, elements_overlap, span_bytes
from tiledsl.library import plan_builder
from tiledsl.plan import Plan, Ref, Region, Stage, WorkspaceLayout, align_words, unused
from tiledsl.reference import CausalArg

KERNELS = Path(__file__).resolve().parent / "kernels"


@dataclass(frozen=True)
class KvCacheShape:
    """Everything a KV-cache plan depends on (its cache key)."""

    attention: SplitShape
    batch: int  # sequences
    hk: int
    s_new: int  # rows appended per sequence (0: no append)
    rotary: str  # "none", "interleaved", "half"
    q_positions: str  # "rows" (causal or local) or "first"
    new_aligned: bool = False  # the appended k_new and v_new have 16-byte aligned rows (aligned_names)


def _append_kernel(shape: KvCacheShape, target: str) -> Any:
    from tiledsl.library import library_kernel
    from tiledsl.options import CompileOptions

    a = shape.attention
    flag = {True: "true", False: "false"}
    defines = {"DT": a.dtype, "HDIM": str(padded_hdim(a.hdim_q)), "HDIM_V": str(padded_hdim(a.hdim_v)),
               "TARGET": target, "PAGED": flag[a.kv_cache == "paged"], "ROTARY": shape.rotary,
               "POSITIONS": shape.q_positions if target == "query" else "rows",
               "VARLEN": flag[target == "query" and a.varlen],
               **unit_defines(head_dim_units(a.hdim_q, a.hdim_v))}
    # The kernel's tensors that the call's aligned ones are bound to (build_kvcache_plan): their row
    # starts are 16-byte aligned, so rows move in vectors (CompileOptions.stride_units). q_rot, our
    # packed copy of q, is aligned whenever "q" is (its rows are D apart, and D % 8 == 0 then).
    aligned = set(a.aligned) | ({"k_new", "v_new"} if shape.new_aligned else set())
    bound = {"cache": {"x": "k_new", "v_new": "v_new", "k_cache": "k", "v_cache": "v"},
             "query": {"x": "q", "x_rot": "q"}}[target]
    units = tuple((arg, VECTOR_ELEMS) for arg, name in sorted(bound.items()) if name in aligned)
    options = CompileOptions.make(a.arch, defines, unit_last_stride=a.contiguous, disjoint_rows=a.contiguous,
                                  stride_units=units,
                                  buffer_masks=not a.large)
    return library_kernel(KERNELS / "fmha_kv_append.tile", a.arch, defines, options)


@plan_builder
def build_kvcache_plan(shape: KvCacheShape) -> Plan:
    a = shape.attention
    if kvcache_workspace(shape).size > BUFFER_REACH:  # no stage may address it with buffer instructions
        a = dataclasses.replace(a, large=True)
        shape = dataclasses.replace(shape, attention=a)
    common = tuple((n, Ref(n)) for n in ("cache_seqlens", "cache_batch_idx", "block_table"))
    rotary = (("rotary_cos", Ref("rotary_cos")), ("rotary_sin", Ref("rotary_sin")))
    stages = []
    if shape.s_new:
        new = (shape.batch, shape.s_new, shape.hk)  # the new rows' sequences, rows and heads
        stages.append(Stage("append_kv", _append_kernel(shape, "cache"), (
            ("x", Ref("k_new")), ("v_new", Ref("v_new")), ("x_rot", unused((*new, a.hdim_q), a.dtype)),
            ("k_cache", Ref("k")), ("v_cache", Ref("v")), *common, ("cu_seqlens_q", np.zeros(1, np.int32)),
            *rotary, ("page_shift", Ref("page_shift")), ("batch", Ref("batch")), ("max_rows", shape.s_new))))
    if shape.rotary != "none":
        q_shape = (a.b, a.sq, a.hq)
        stages.append(Stage("rotary_q", _append_kernel(shape, "query"), (
            ("x", Ref("q")), ("v_new", unused((*q_shape, a.hdim_v), a.dtype)), ("x_rot", Ref("q_rot")),
            ("k_cache", unused((1, 1, a.hq, a.hdim_q), a.dtype)),
            ("v_cache", unused((1, 1, a.hq, a.hdim_v), a.dtype)),
            *common, ("cu_seqlens_q", Ref("cu_seqlens_q")), *rotary, ("page_shift", Ref("page_shift")),
            ("batch", Ref("batch")), ("max_rows", Ref("max_seqlen_q")))))
    stages.extend(attention_stages(a))
    info = {"arch": a.arch, "kv_cache": a.kv_cache, "num_splits": a.num_splits, "heads_per_block": a.heads_per_block}
    shapes = made_for_shapes(dataclasses.replace(a, q_name="q"))  # the call's q (its rotated copy is ours)
    if shape.s_new:
        new = (shape.batch, shape.s_new, shape.hk)
        shapes.update(k_new=(*new, a.hdim_q), v_new=(*new, a.hdim_v))
    return Plan("fmha_fwd_kvcache", stages, kvcache_workspace(shape), info, shapes, offsets=offset_inputs(a))


def kvcache_workspace(shape: KvCacheShape) -> WorkspaceLayout:
    """The rotated queries (with rotary), then the split-KV partials (with splits)."""
    a = shape.attention
    regions = []
    if shape.rotary != "none":
        words = align_words(-(-a.b * a.sq * a.hq * a.hdim_q // 2))
        regions.append(Region("q_rot", 0, words, a.dtype, (a.b, a.sq, a.hq, a.hdim_q)))
    regions.extend(splitkv_workspace(a, sum(r.words for r in regions)))
    return WorkspaceLayout(tuple(regions))


def _host_ints(name: str, x: Any, shape: tuple[int, ...] | None, what: str) -> np.ndarray:
    """An integer argument's values on the host (a DeviceArray is copied back to check them)."""
    from tiledsl.ops import host_values

    arr = np.asarray(host_values(name, x))
    if not np.issubdtype(arr.dtype, np.integer) or (shape is not None and arr.shape != shape):
        want = what if shape is None else f"shape {shape} ({what})"
        raise ValueError(f"{name}: expected an integer array of {want}, got {arr.dtype} {arr.shape}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:  # astype would wrap it
        raise ValueError(f"{name}: entry {int(arr.max())} is out of range")
    return arr.astype(np.int64)


def _check_paged_writes(table: np.ndarray, seqlens: np.ndarray, total: np.ndarray, page_size: int) -> None:
    """The append writes each sequence's new rows into its pages: no slot it writes may be one that
    another sequence (or the same one through another table entry) reads or writes, since
    workgroups run in no set order (pages shared for a common prefix stay fine: only what lies
    below every reader's length is read). Refused, as for the contiguous cache's entries."""
    writes: dict[int, list[tuple[int, int, int, int]]] = {}  # page -> (sequence, block, first, end slot)
    for b, (start, end) in enumerate(zip(seqlens.tolist(), total.tolist(), strict=True)):
        for j in range(start // page_size, -(-end // page_size)):
            lo, hi = max(start - j * page_size, 0), min(end - j * page_size, page_size)
            writes.setdefault(int(table[b, j]), []).append((b, j, lo, hi))
    pages = -(-total // page_size)
    for b2 in range(len(total)):
        used = table[b2, :pages[b2]]
        for j2 in np.flatnonzero(np.isin(used, list(writes))).tolist():
            read_end = min(int(total[b2]) - j2 * page_size, page_size)  # slots b2 reads (and writes) there
            for b, j, lo, hi in writes[int(used[j2])]:
                if (b, j) != (b2, j2) and lo < read_end:
                    whose = "its own" if b == b2 else f"sequence {b2}'s"
                    raise ValueError(f"block_table: sequence {b} appends into page {int(used[j2])} slots "
                                     f"{lo}..{hi - 1}, which {whose} entry [{b2}, {j2}] also uses (slots "
                                     f"0..{read_end - 1}); sequences must append into pages of their own")


def _share_memory(a: Any, b: Any) -> bool:
    """Whether two numpy arrays, or two DeviceArrays, may share an element's bytes."""
    if isinstance(a, DeviceArray) and isinstance(b, DeviceArray):
        if a.buffer is not b.buffer or not a.size or not b.size:
            return False
        starts = [x.offset * x.dtype.itemsize for x in (a, b)]
        spans = [(s, s + span_bytes(x.shape, x.strides, x.dtype.itemsize))
                 for s, x in zip(starts, (a, b), strict=True)]
        return spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1]
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return arrays_share_memory(a, b)
    return False


def _kernel_ints(x: Any, host: np.ndarray) -> Any:
    """What a kernel gets for an integer argument: the caller's int32 DeviceArray (with a unit last
    stride, as the kernels take it), else int32 numpy."""
    if isinstance(x, DeviceArray) and x.dtype == np.int32 and (not x.ndim or x.shape[-1] <= 1 or x.strides[-1] == 1):
        return x
    return np.ascontiguousarray(host, dtype=np.int32)


def fmha_fwd_kvcache(q: Any, k_cache: Any, v_cache: Any, *, cache_seqlens: Any, block_table: Any = None,
                     cache_batch_idx: Any = None, k: Any = None, v: Any = None, rotary_cos: Any = None,
                     rotary_sin: Any = None, rotary_interleaved: bool = False, cu_seqlens_q: Any = None,
                     max_seqlen_q: int | None = None, scale: float | None = None, causal: CausalArg = False,
                     window: tuple[int, int] = (-1, -1), softcap: float = 0.0, sink: Any = None,
                     num_splits: int = 0, return_lse: bool = False, arch: str | None = None,
                     device: Any = None, alibi_slopes: Any = None, bias: Any = None) -> Any:
    """Attention of q against a KV cache (see `tiledsl.reference.fmha_fwd_kvcache_reference`, the
    numpy model, and docs/inference.md).

    q [B, Sq, Hq, D], or packed [total_q, Hq, D] with cu_seqlens_q (batch prefill). Caches:
    contiguous k_cache/v_cache [B_cache, S_cache, Hk, D(v)] (sequence b in entry cache_batch_idx[b],
    default b), or paged [num_pages, page_size, Hk, D(v)] with block_table int32 [B, max_pages]
    (page_size a power of two; pages in any order). cache_seqlens: int32 [B] (or an int), the keys
    each sequence holds before this call. k/v [B, S_new, Hk, D(v)]: new rows written into the
    caches at cache_seqlens[b] (in place: numpy caches are updated, DeviceArrays stay on the device),
    rotated with rotary_cos/rotary_sin [S_ro, R/2] when given (q too: at positions cache_seqlens[b]
    + i when causal or windowed, else at cache_seqlens[b]; interleaved pairs or halves like
    flash-attention). Sequence b then attends to its cache_seqlens[b] + S_new keys; causal is
    bottom-right aligned to them. Other options as `fmha_fwd`; num_splits: 0 = heuristic.
    alibi_slopes: f32 [Hq] or [B, Hq], ALiBi over each sequence's keys (as flash_attn_with_kvcache;
    there is no bias tensor here: `bias` is refused).
    Returns out [and the LSE] like fmha_fwd (numpy in, numpy out; DeviceArrays in, DeviceArrays out).
    """
    from tiledsl.ops import (
        _check_array,
        _check_cu_seqlens,
        _check_like,
        _dtype_name,
        _splits_count,
        _to_bshd,
        alibi_view,
        aligned_names,
        check_bool,
        check_heads,
        check_max_seqlen,
        check_num_splits,
        check_options,
        check_query_elems,
        free_on_failure,
        host_readable,
        resolve_device,
        rows_apart,
        spans_large,
        unit_last_stride,
        zero_rows_past,
    )

    if bias is not None:
        raise ValueError("bias: fmha_fwd_kvcache takes no bias tensor (as flash_attn_with_kvcache); ALiBi is "
                         "alibi_slopes=")
    num_splits = check_num_splits(num_splits)
    check_bool("return_lse", return_lse)
    check_bool("rotary_interleaved", rotary_interleaved)
    varlen = cu_seqlens_q is not None
    q = _check_array("q", q, 3 if varlen else 4, "[total_q, Hq, D]" if varlen else "[B, Sq, Hq, D]")
    on_device = isinstance(q, DeviceArray)
    dt = _dtype_name(q)
    if dt is None:
        raise ValueError(f"q: expected dtype float16 or bfloat16, got {q.dtype}")
    paged = block_table is not None
    what = "[num_pages, page_size, Hk, D]" if paged else "[B_cache, S_cache, Hk, D]"
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        _check_array(name, x, 4, what)
        if isinstance(x, DeviceArray) != on_device:
            raise ValueError(f"{name}: expected a {'DeviceArray' if on_device else 'numpy array'} like q, "
                             f"got {type(x).__name__}")
        if x.dtype != q.dtype:
            raise ValueError(f"{name}: expected dtype {q.dtype} (the dtype of q), got {x.dtype}")
    q4 = _to_bshd(q, "bshd", varlen)
    b4, sq, hq, d = q4.shape
    n_entries, s_cache, hk, dk = k_cache.shape
    if dk != d:
        raise ValueError(f"k_cache: head dim {dk} differs from q's head dim {d}")
    if tuple(v_cache.shape[:3]) != tuple(k_cache.shape[:3]):
        raise ValueError(f"v_cache: expected the first three sizes of k_cache {tuple(k_cache.shape[:3])}, "
                         f"got {tuple(v_cache.shape[:3])}")
    dv = v_cache.shape[3]
    check_heads(d, dv, hq, hk, "k_cache", "v_cache")
    check_query_elems(b4, sq, hq, max(d, dv))
    scale, mask, sink32 = check_options(scale, d, softcap, causal, window, sink, hq)

    if varlen:
        cuq = _check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, sq)
        batch = len(cuq) - 1
        seqlens_q = np.diff(cuq)
    else:
        cuq = np.zeros(1, np.int32)
        batch, seqlens_q = b4, np.full(b4, sq)
    longest_q = int(seqlens_q.max()) if batch else 0
    max_q = check_max_seqlen("max_seqlen_q", max_seqlen_q, longest_q, sq)

    if isinstance(cache_seqlens, int | np.integer) and not isinstance(cache_seqlens, bool):
        if not 0 <= cache_seqlens < 2**31:
            raise ValueError(f"cache_seqlens: expected an int in 0..2**31-1 (keys held), got {cache_seqlens}")
        cache_seqlens = np.full(batch, int(cache_seqlens), np.int32)
    seqlens = _host_ints("cache_seqlens", cache_seqlens, (batch,), "one per sequence")
    if (seqlens < 0).any():
        raise ValueError(f"cache_seqlens: expected values >= 0, got {int(seqlens.min())}")

    # New rows to append.
    if (k is None) != (v is None):
        raise ValueError(f"{'v' if k is not None else 'k'}: the new keys and values come together, got only "
                         f"{'k' if k is not None else 'v'}")
    s_new = 0
    if k is not None:
        k, v = _check_array("k", k, 4, "[B, S_new, Hk, D]"), host_readable(v)
        for name, x, hd in (("k", k, d), ("v", v, dv)):  # [B, S_new] with the caches' heads and head dims
            _check_like(name, x, q.dtype, (batch, k.shape[1], hk, hd), on_device)
        s_new = k.shape[1]
        for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
            if not on_device and not x.flags.writeable:
                raise ValueError(f"{name}: the new rows are written into the cache in place, but it is read-only")
            strides = list(x.strides) if on_device else [s // x.itemsize for s in x.strides]
            if x.size and elements_overlap(x.shape, strides):
                raise ValueError(f"{name}: the new rows are written into the cache in place, but its elements "
                                 f"overlap in memory (shape {tuple(x.shape)}, strides {tuple(strides)} elements); "
                                 "pass a cache whose elements are distinct")
        if _share_memory(k_cache, v_cache):
            raise ValueError("k_cache and v_cache: the new keys and values are written into them, but they share "
                             "memory (the same array, or views of one); pass separate caches")
    total = seqlens + s_new  # keys per sequence after the append
    if not s_new:  # only read: a reversed numpy view is copied like q (with an append, the copy below)
        k_cache, v_cache = host_readable(k_cache), host_readable(v_cache)

    # Where the keys live.
    if paged:
        if cache_batch_idx is not None:
            raise ValueError("cache_batch_idx: not supported with a paged cache (block_table picks the pages)")
        if s_cache & (s_cache - 1) or s_cache == 0:
            raise ValueError(f"k_cache: the page size (dim 1) must be a power of two, got {s_cache}")
        table = _host_ints("block_table", block_table, None, "[B, max_pages]")
        if table.ndim != 2 or table.shape[0] != batch:
            raise ValueError(f"block_table: expected shape ({batch}, max_pages), got {table.shape}")
        pages = -(-total // s_cache)
        if batch and int(pages.max()) > table.shape[1]:
            b = int(np.argmax(pages))
            raise ValueError(f"block_table: sequence {b} needs {int(pages[b])} pages of {s_cache} for "
                             f"{int(total[b])} keys, but the table has {table.shape[1]} per sequence")
        for b in range(batch):
            used = table[b, :pages[b]]
            bad = (used < 0) | (used >= n_entries)
            if bad.any():
                j = int(np.argmax(bad))
                raise ValueError(f"block_table: entry [{b}, {j}] = {int(used[j])} is not a page of the cache "
                                 f"(0..{n_entries - 1})")
        if s_new:
            _check_paged_writes(table, seqlens, total, s_cache)
        entries = np.zeros(batch, np.int32)  # unused (the kernels' shapes want one per sequence)
        table_arg = _kernel_ints(block_table, table)
    else:
        if batch and int(total.max()) > s_cache:
            b = int(np.argmax(total))
            raise ValueError(f"cache_seqlens: sequence {b} holds {int(seqlens[b])} keys and appends {s_new}, "
                             f"beyond the cache's {s_cache} rows")
        if cache_batch_idx is None:
            if batch > n_entries:
                raise ValueError(f"k_cache: {batch} sequences but {n_entries} cache entries (pass cache_batch_idx)")
            entries = np.arange(batch, dtype=np.int32)
        else:
            idx = _host_ints("cache_batch_idx", cache_batch_idx, (batch,), "one per sequence")
            bad = (idx < 0) | (idx >= n_entries)
            if bad.any():
                b = int(np.argmax(bad))
                raise ValueError(f"cache_batch_idx: entry {b} = {int(idx[b])} is not an entry of the cache "
                                 f"(0..{n_entries - 1})")
            if s_new and len(set(idx.tolist())) != len(idx):
                raise ValueError("cache_batch_idx: two sequences append into the same cache entry")
            entries = _kernel_ints(cache_batch_idx, idx)
        table_arg = np.zeros((batch, 1), np.int32)  # unused

    # Rotary embedding.
    rotary = "none"
    cos32 = sin32 = np.zeros((1, 1), np.float32)
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos and rotary_sin: rotary embedding needs both")
    if rotary_cos is not None:
        if k is None:
            raise ValueError("rotary_cos: rotary embedding applies to the new keys; pass k and v")
        cos, sin = (np.asarray(x.numpy() if isinstance(x, DeviceArray) else x) for x in (rotary_cos, rotary_sin))
        floats = all(np.issubdtype(x.dtype, np.floating) or x.dtype == ml_dtypes.bfloat16 for x in (cos, sin))
        if cos.ndim != 2 or cos.shape != sin.shape or not floats:  # bf16 too: ml_dtypes' is no np.floating
            raise ValueError(f"rotary_cos/rotary_sin: expected two float arrays of one shape [S_ro, rotary_dim / 2], "
                             f"got {cos.dtype} {cos.shape} and {sin.dtype} {sin.shape}")
        if not 1 <= 2 * cos.shape[1] <= d:
            raise ValueError(f"rotary_cos: rotary_dim = 2 * {cos.shape[1]} must be in 2..{d} (the head dim)")
        last = int(total.max()) if batch else 0
        if mask.kind != "none" and batch:
            last = max(last, int((seqlens + seqlens_q).max()))
        if last > cos.shape[0]:
            raise ValueError(f"rotary_cos: positions up to {last - 1} are rotated, but it has {cos.shape[0]} rows")
        rotary = "interleaved" if rotary_interleaved else "half"
        cos32, sin32 = (np.ascontiguousarray(x, np.float32) for x in (cos, sin))

    slopes = None if alibi_slopes is None else alibi_view(alibi_slopes, hq, batch, on_device)
    device, arch = resolve_device(device, on_device, q, arch)
    check_live_arrays(device, {"q": q, "k_cache": k_cache, "v_cache": v_cache, "k": k, "v": v,
                               "cache_seqlens": cache_seqlens, "block_table": block_table,
                               "cache_batch_idx": cache_batch_idx, "cu_seqlens_q": cu_seqlens_q,
                               "sink": sink}, "call")
    out_shape = tuple(q.shape[:-1]) + (dv,)
    if on_device:
        out = DeviceArray.empty(device, out_shape, q.dtype, "out")
        zero_rows_past(device, out, cuq, sq, varlen)
        lse = DeviceArray.from_numpy(device, np.full((b4, hq, sq), -np.inf, np.float32), "lse")
    else:
        out = np.zeros(out_shape, dtype=q.dtype)
        lse = np.full((b4, hq, sq), -np.inf, np.float32)
    try:
        if batch and (sq and max_q or s_new):  # no query rows: still the append
            contiguous = unit_last_stride(q4, k_cache, v_cache, *([k, v] if k is not None else [])) \
                and rows_apart(q4, k_cache, v_cache, k, v)
            out4 = _to_bshd(out, "bshd", varlen)
            aligned = aligned_names(contiguous, q=q4, k=k_cache, v=v_cache, o=out4)
            if rotary != "none" and "q" in aligned and d % VECTOR_ELEMS:
                aligned = tuple(n for n in aligned if n != "q")  # q_rot is packed: rows are d elements apart
            masked = mask.kind != "none"
            packed = pack_gqa(arch, d, dv, masked, max_q, hq, hk)
            splits = _splits_count(num_splits, arch, batch=batch, hq=hq, hk=hk, max_q=max_q,
                                   max_k=int(total.max()), d=d, dv=dv, masked=masked)
            attention = SplitShape(arch=arch, dtype=dt, hdim_q=d, hdim_v=dv, mask=mask, varlen=varlen, lse=return_lse,
                                   sink=sink32 is not None, softcap=softcap > 0, contiguous=contiguous, aligned=aligned,
                                   num_splits=splits, b=b4, hq=hq, sq=sq, kv_cache="paged" if paged else "contiguous",
                                   page_size=s_cache if paged else 0,
                                   heads_per_block=hq // hk if packed else 1,
                                   q_name="q_rot" if rotary != "none" else "q",
                                   bias="alibi" if slopes is not None else "none",
                                   large=spans_large(q4, k_cache, v_cache, out4, k, v))
            new_aligned = k is not None and len(aligned_names(contiguous, k_new=k, v_new=v)) == 2
            plan = build_kvcache_plan(KvCacheShape(attention, batch=batch, hk=hk, s_new=s_new, rotary=rotary,
                                                   q_positions="rows" if masked else "first", new_aligned=new_aligned))
            owned = []
            caches = (k_cache, v_cache)
            if s_new and not on_device:  # the append and the attention share one device copy of each cache
                caches = tuple(DeviceArray.from_numpy(device, np.ascontiguousarray(x), n)
                               for x, n in ((k_cache, "k_cache"), (v_cache, "v_cache")))
                owned.extend(caches)
            env = {"q": q4, "k": caches[0], "v": caches[1], "k_new": k, "v_new": v, "o": out4, "lse": lse,
                   "sink": sink32 if sink32 is not None else np.zeros(hq, np.float32), "cu_seqlens_q": cuq,
                   "cu_seqlens_k": np.zeros_like(cuq), "cache_seqlens": _kernel_ints(cache_seqlens, seqlens),
                   "cache_batch_idx": entries, "block_table": table_arg, "scale": scale, "softcap": softcap or 1.0,
                   "window_left": mask.left, "window_right": mask.right, "batch": batch, "max_seqlen_q": max_q,
                   "seqlen_new": s_new, "page_shift": s_cache.bit_length() - 1 if paged else 0,
                   "rotary_cos": cos32, "rotary_sin": sin32, "alibi_slopes": slopes}
            try:
                plan.run(device, env)
                if owned:
                    k_cache[...] = owned[0].numpy()
                    v_cache[...] = owned[1].numpy()
            finally:
                for arr in owned:
                    arr.free()
    except BaseException:
        if on_device:  # the outputs were never handed over
            free_on_failure([out, lse])
        raise
    if not return_lse:
        return out
    return out, ((lse.squeeze0() if on_device else lse[0]) if varlen else lse)

