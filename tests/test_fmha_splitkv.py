"""Split-KV forward (fmha_fwd with num_splits): producers + combine over one workspace, on every
arch against the float64 reference, and the split heuristic."""

from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest
from _fmha_util import check_out_lse

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.fmha_splitkv import (
    MAX_SPLITS,
    MIN_BLOCKS_PER_DECODE_SPLIT,
    MIN_BLOCKS_PER_SPLIT,
    fmha_num_splits,
    key_blocks,
)
from tiledsl.kernels.fmha_configs import fmha_config
from tiledsl.ops import fmha_fwd
from tiledsl.ops import fmha_num_splits as ops_num_splits
from tiledsl.reference import fmha_fwd_reference, fmha_mask_params

pytestmark = pytest.mark.emulator


def launched(dev) -> list[str]:
    return [x["kernel"] for x in dev.launches]


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_decode_gqa_causal_lse(arch):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 3, 8, 64)).astype(np.float16)
    k, v = (rng.standard_normal((2, 333, 2, 64)).astype(np.float16) for _ in range(2))
    dev = EmulatorDevice(arch)
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, num_splits=3, device=dev)
    assert launched(dev) == ["fmha_fwd", "fmha_fwd_combine"]
    check_out_lse(out, lse, *fmha_fwd_reference(q, k, v, causal=True, return_lse=True), 2e-3)
    one, one_lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice(arch))
    np.testing.assert_allclose(out.astype(np.float64), one.astype(np.float64), atol=2e-3)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_varlen_window_sink_padded_bf16(arch):
    rng = np.random.default_rng(2)
    cu_q = np.array([0, 2, 2, 7], np.int32)  # the middle sequence is empty
    cu_k = np.array([0, 150, 170, 400], np.int32)
    q = rng.standard_normal((7, 4, 48)).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((400, 1, 48)).astype(ml_dtypes.bfloat16) for _ in range(2))
    sink = rng.standard_normal(4).astype(np.float32)
    opts = dict(window=(90, 3), sink=sink, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True)
    out, lse = fmha_fwd(q, k, v, num_splits=4, device=EmulatorDevice(arch), **opts)
    check_out_lse(out, lse, *fmha_fwd_reference(q, k, v, **opts), 2e-2)


def test_more_splits_than_keys_and_fully_masked_rows():
    """Splits past the keys there are are clamped; splits a window hides entirely, and rows with
    no key at all, give 0 and LSE -inf (the sink's logit with a sink), never NaN."""
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 20, 2, 64)).astype(np.float16)
    k, v = (rng.standard_normal((1, 6, 2, 64)).astype(np.float16) for _ in range(2))
    dev = EmulatorDevice("gfx1201")
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, num_splits=50, device=dev)
    check_out_lse(out, lse, *fmha_fwd_reference(q, k, v, causal=True, return_lse=True), 2e-3)
    assert not np.isfinite(lse[:, :, :14]).any()  # bottom-right causal: rows 0..13 see no key
    rng_k = rng.standard_normal((1, 300, 2, 64)).astype(np.float16)
    sink = np.array([0.5, -0.5], np.float32)
    opts = dict(window=(3, 0), sink=sink, return_lse=True)
    out, lse = fmha_fwd(q, rng_k, rng_k, num_splits=4, device=dev, **opts)  # splits 0..2 see nothing
    check_out_lse(out, lse, *fmha_fwd_reference(q, rng_k, rng_k, **opts), 2e-3)
    # Decode-sized queries (one row per combine block, every split folded at once): the same
    # cases, 50 splits in one step of 64, and 70 in two.
    dq = q[:, -8:]
    out, lse = fmha_fwd(dq, k, v, causal=True, return_lse=True, num_splits=50, device=dev)
    check_out_lse(out, lse, *fmha_fwd_reference(dq, k, v, causal=True, return_lse=True), 2e-3)
    assert not np.isfinite(lse[:, :, :2]).any()  # rows 0..1 of these 8 see no key
    out, lse = fmha_fwd(dq, rng_k, rng_k, num_splits=4, device=dev, **opts)
    check_out_lse(out, lse, *fmha_fwd_reference(dq, rng_k, rng_k, **opts), 2e-3)
    long_k = rng.standard_normal((1, 4500, 2, 64)).astype(np.float16)
    out, lse = fmha_fwd(dq, long_k, long_k, num_splits=70, return_lse=True, device=dev)  # two steps of 64
    check_out_lse(out, lse, *fmha_fwd_reference(dq, long_k, long_k, return_lse=True), 2e-3)


def test_varlen_sink_longer_queries():
    """Group mode with a sink where the combine takes blocks of rows (queries longer than
    decode's), an empty sequence among them."""
    rng = np.random.default_rng(4)
    cu_q = np.array([0, 30, 30, 47], np.int32)
    cu_k = np.array([0, 200, 230, 400], np.int32)
    q = rng.standard_normal((47, 2, 64)).astype(np.float16)
    k, v = (rng.standard_normal((400, 2, 64)).astype(np.float16) for _ in range(2))
    opts = dict(causal=True, sink=rng.standard_normal(2).astype(np.float32), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                return_lse=True)
    dev = EmulatorDevice("gfx942")
    out, lse = fmha_fwd(q, k, v, num_splits=3, device=dev, **opts)
    assert launched(dev) == ["fmha_fwd", "fmha_fwd_combine"]
    check_out_lse(out, lse, *fmha_fwd_reference(q, k, v, **opts), 2e-3)


def test_heuristic_fills_the_compute_units_and_declines_full_grids():
    for arch in ARCH_NAMES:
        cus = get_arch(arch).compute_units
        g = fmha_num_splits(arch, batch=1, nhead_q=8, max_seqlen_q=1, max_seqlen_k=8192, hdim_q=128)
        blocks = key_blocks(arch, 128, 128, False, 8192)
        assert g == min(-(-cus // 8), blocks // MIN_BLOCKS_PER_DECODE_SPLIT, MAX_SPLITS) and g > 1
        # Longer queries (the combine takes blocks of rows) give each split more key blocks.
        long_q = fmha_num_splits(arch, batch=1, nhead_q=8, max_seqlen_q=64, max_seqlen_k=2048, hdim_q=128)
        wg = -(-64 // fmha_config(arch, 128, 128).block_m) * 8
        assert long_q == max(1, min(-(-cus // wg), key_blocks(arch, 128, 128, False, 2048) // MIN_BLOCKS_PER_SPLIT))
        assert fmha_num_splits(arch, batch=64, nhead_q=32, max_seqlen_q=2048, max_seqlen_k=2048, hdim_q=128) == 1
        assert fmha_num_splits(arch, batch=1, nhead_q=1, max_seqlen_q=1, max_seqlen_k=10, hdim_q=64) == 1
        assert ops_num_splits(arch, batch=1, nhead_q=8, max_seqlen_q=1, max_seqlen_k=8192, hdim_q=128) == g


def test_heuristic_through_the_api_and_bad_values():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 1, 4, 64)).astype(np.float16)
    k, v = (rng.standard_normal((1, 2100, 4, 64)).astype(np.float16) for _ in range(2))  # 2+ splits of 8 blocks
    dev = EmulatorDevice("gfx942")
    out, lse = fmha_fwd(q, k, v, return_lse=True, num_splits=0, device=dev)
    assert launched(dev) == ["fmha_fwd", "fmha_fwd_combine"]
    check_out_lse(out, lse, *fmha_fwd_reference(q, k, v, return_lse=True), 2e-3)
    for bad in (-1, 1.5, True, "auto"):
        with pytest.raises(ValueError, match="num_splits: expected an int >= 0"):
            fmha_fwd(q, k, v, num_splits=bad, device=dev)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_partial_outputs_move_in_vectors(arch):
    """The split plan's partial outputs (o_acc, our workspace, rows of D_V f32 words) are declared
    16-byte aligned to both stages (CompileOptions.stride_units): the producers store them (but on
    gfx11, whose accumulator rows are not in one lane) and the combine loads them in 16-byte
    vectors, and the combine stores an aligned output in vectors too. Not where a strided
    variant passes every stride, nor for a head dim that is not a multiple of 4 words."""
    from tiledsl.fmha_splitkv import SplitShape, attention_stages

    shape = SplitShape(arch=arch, dtype="f16", hdim_q=64, hdim_v=64, mask=fmha_mask_params(False), varlen=False,
                       lse=True, sink=False, softcap=False, contiguous=True, aligned=("k", "o", "q", "v"),
                       num_splits=2, b=1, hq=2, sq=1)
    producers, combine = (stage.kernel for stage in attention_stages(shape))
    for kernel in (producers, combine):
        units = {t["name"]: t["stride_unit"] for t in kernel.manifest["tensors"]}
        assert units["o_acc"] == 8 and units["o"] == 8
    wide = r"(?:dwordx4|b128)\b"
    if arch != "gfx1100":  # gfx11's WMMA accumulator gives each lane one column of the output rows
        assert re.search(r"(?:buffer|global)_store_" + wide, producers.asm)
    assert re.search(r"(?:buffer|global)_load_" + wide, combine.asm)
    assert re.search(r"(?:buffer|global)_store_(?:dwordx[24]|b64|b128)\b", combine.asm)
    for other in (dataclasses.replace(shape, contiguous=False), dataclasses.replace(shape, hdim_v=66)):
        combine = attention_stages(other)[1].kernel
        assert {t["name"]: t["stride_unit"] for t in combine.manifest["tensors"]}["o_acc"] == 1
