"""The forward with each key block's scores computed one iteration ahead (fmha_fwd.tile's OVERLAP,
FmhaConfig.overlap), forced on for every config row and run on the emulator against the float64
reference on every arch: ragged lengths, group mode with a sequence that has no keys, a window,
padded head dims with a soft-cap, split-KV with a sink, and paged caches with pages smaller and
larger than a key block (an empty cache among them)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from _fmha_util import check_out_lse

from tiledsl import ops
from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.kernels import fmha_configs
from tiledsl.library import clear_plan_caches
from tiledsl.reference import fmha_fwd_kvcache_reference, fmha_fwd_reference

pytestmark = pytest.mark.emulator


@pytest.fixture
def overlapped(monkeypatch):
    """Every fmha_fwd config row with OVERLAP (and every plan built anew around the test); records the
    rows handed out, so the test can check that it ran what it meant to. RDNA runs 64x32 tiles
    without reuse: its wider rows hold S twice in more registers than a wave has."""
    row, handed = fmha_configs.fmha_config, []

    def overlapped_row(arch, *args, **kwargs):
        cfg = replace(row(arch, *args, **kwargs), overlap=True)
        if get_arch(arch).wave_size == 32:
            cfg = replace(cfg, block_m=64, block_n=32, waves=4, reuse=False)
        handed.append(cfg)
        return cfg

    monkeypatch.setattr(fmha_configs, "fmha_config", overlapped_row)
    clear_plan_caches()
    yield handed
    clear_plan_caches()


def _qkv(rng, sq, sk, hq, hk, d, dv=None, b=1):
    dv = dv or d
    return (rng.standard_normal((b, sq, hq, d)).astype(np.float16),
            rng.standard_normal((b, sk, hk, d)).astype(np.float16),
            rng.standard_normal((b, sk, hk, dv)).astype(np.float16))


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_overlapped_forward_matches_reference(overlapped, arch: str) -> None:
    rng = np.random.default_rng(21)
    f64 = lambda ts: [np.asarray(t, np.float64) for t in ts]  # noqa: E731

    # Batch mode, bottom-right causal, lengths that end inside a key block.
    q, k, v = _qkv(rng, 70, 203, 2, 1, 64)
    got = ops.fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice(arch))
    check_out_lse(*got, *fmha_fwd_reference(*f64((q, k, v)), causal=True, return_lse=True), 2e-3)

    # Group mode: the second sequence has query rows but no keys (output 0, LSE -inf), the third
    # no rows at all; a window, head dim 80 (padded to 128) and a soft-cap.
    cu_q, cu_k = np.array([0, 40, 75, 75, 150], np.int32), np.array([0, 90, 90, 130, 260], np.int32)
    q, k, v = (x[0] for x in _qkv(rng, 150, 260, 2, 2, 80))
    opts = dict(window=(30, 10), softcap=15.0, return_lse=True)
    got = ops.fmha_fwd(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=75, max_seqlen_k=130,
                       device=EmulatorDevice(arch), **opts)
    for i in range(4):
        qs, ks = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        if qs.stop == qs.start:
            continue
        want = fmha_fwd_reference(*f64((q[None, qs], k[None, ks], v[None, ks])), **opts)
        check_out_lse(got[0][None, qs], got[1][:, qs][None], *want, 2e-3)

    # Split-KV with a sink: three ranges of the keys, the last of them shorter.
    q, k, v = _qkv(rng, 33, 330, 2, 2, 128)
    sink = rng.standard_normal(2).astype(np.float32)
    got = ops.fmha_fwd(q, k, v, sink=sink, num_splits=3, return_lse=True, device=EmulatorDevice(arch))
    check_out_lse(*got, *fmha_fwd_reference(*f64((q, k, v)), sink=sink, return_lse=True), 2e-3)
    assert overlapped and all(row.overlap for row in overlapped)


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("page", [16, 256])
def test_overlapped_paged_cache_matches_reference(overlapped, arch: str, page: int) -> None:
    """Pages of 16 keys (K's next block spans several pages) and of 256 (one page per key block,
    BIG_PAGES), in a shuffled order; the first sequence's cache is empty."""
    rng = np.random.default_rng(22)
    pages = 1024 // page  # 512 keys per sequence
    kc, vc = (rng.standard_normal((pages, page, 1, 64)).astype(np.float16) for _ in range(2))
    table = rng.permutation(pages).reshape(2, pages // 2).astype(np.int32)
    opts = dict(cache_seqlens=np.array([0, 301], np.int32), block_table=table, causal=True, return_lse=True)
    q = rng.standard_normal((2, 20, 4, 64)).astype(np.float16)
    got = ops.fmha_fwd_kvcache(q, kc, vc, num_splits=1, device=EmulatorDevice(arch), **opts)
    check_out_lse(*got, *fmha_fwd_kvcache_reference(q, kc, vc, **opts), 2e-3)
    assert overlapped and all(row.overlap for row in overlapped)
