"""The forward's wider query tile for large grids (fmha_configs.WIDE, fmha_splitkv.wide_query_blocks):
chosen from the call's grid, only for the plain variants it serves; forced on here (the plan takes
it only for grids far larger than the emulator runs in a test) and checked against the float64
reference on every arch the table lists."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from _fmha_util import check_out_lse

import tiledsl.fmha_splitkv as splitkv
from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.kernels.fmha_configs import WIDE, WIDE_ROUNDS, fmha_config
from tiledsl.ops import fmha_fwd
from tiledsl.reference import fmha_fwd_reference, fmha_mask_params

ROWS = [(arch, hdim) for arch, row in sorted(WIDE.items()) for hdim in sorted(row)]


def plain_shape(arch: str, hdim: int, **kw) -> splitkv.SplitShape:
    base = splitkv.SplitShape(arch=arch, dtype="f16", hdim_q=hdim, hdim_v=hdim, mask=fmha_mask_params(False),
                              varlen=False, lse=False, sink=False, softcap=False, contiguous=True,
                              aligned=("k", "o", "q", "v"), num_splits=1, b=1, hq=16, sq=2048, batch=1,
                              max_seqlen_q=2048)
    return dataclasses.replace(base, **kw)


@pytest.mark.parametrize("arch,hdim", ROWS)
def test_the_grid_decides(arch: str, hdim: int) -> None:
    """Wide where its query blocks give the most loaded compute unit no more rows than CONFIGS'
    narrower blocks, within the row's rounds, and each sequence has two; plain variants only."""
    cus, rows = get_arch(arch).compute_units, WIDE[arch][hdim].block_m
    narrow = fmha_config(arch, hdim).block_m
    assert rows == 2 * narrow  # the cases below count on it
    enough = plain_shape(arch, hdim, hq=cus // 2, max_seqlen_q=2 * rows)  # one wide block per unit
    assert splitkv.wide_query_blocks(enough)
    # Fewer wide blocks than units, but more narrow ones: the busiest unit has two narrow blocks.
    assert splitkv.wide_query_blocks(dataclasses.replace(enough, hq=cus // 4 + 1))
    # Every unit has at most one narrow block: a wide one would double the busiest unit's rows.
    assert not splitkv.wide_query_blocks(dataclasses.replace(enough, hq=cus // 4))
    # 2 * rows + 1 queries: 3 wide blocks per sequence (at most one per unit, one round), 5 narrow
    # ones (more than the units: two rounds), the same rows on the busiest unit.
    assert splitkv.wide_query_blocks(dataclasses.replace(enough, max_seqlen_q=2 * rows + 1, hq=cus // 3))
    assert not splitkv.wide_query_blocks(dataclasses.replace(enough, max_seqlen_q=2 * rows - 1, hq=4 * cus))  # short
    assert not splitkv.wide_query_blocks(dataclasses.replace(enough, batch=0))  # a caller that gives no grid
    most = WIDE_ROUNDS.get(arch)
    if most is not None:  # the row's rounds: within them it runs, past them not
        assert splitkv.wide_query_blocks(dataclasses.replace(enough, hq=most * cus // 2))
        assert not splitkv.wide_query_blocks(dataclasses.replace(enough, hq=(most + 1) * cus // 2))
    for other in (dict(mask=fmha_mask_params(True)), dict(bias="alibi"), dict(dropout=True), dict(contiguous=False),
                  dict(aligned=("k", "q", "v")), dict(kv_cache="paged"), dict(heads_per_block=2), dict(num_splits=2),
                  dict(large=True)):
        assert not splitkv.wide_query_blocks(dataclasses.replace(enough, **other)), other
    assert splitkv.wide_query_blocks(dataclasses.replace(enough, hq=1, query_tile="wide"))  # kernel packages


@pytest.mark.parametrize("arch,hdim", ROWS)
def test_group_mode_counts_the_workgroups_with_rows(arch: str, hdim: int) -> None:
    """In group mode the grid has a workgroup per query block of the longest sequence for every
    sequence, but those past a shorter sequence's end have nothing to do: the rule counts the
    others from the lengths, where the longest one would count them all."""
    cus, rows = get_arch(arch).compute_units, WIDE[arch][hdim].block_m
    # cus // 4 sequences, 2 heads: counted at the longest (2 wide blocks), a wide block for every
    # unit where the narrow ones take two rounds, so wide; but one sequence is that long and the
    # others are one narrow block each: every unit has one block of either height, so narrow.
    lens = [2 * rows] + [rows // 4] * (cus // 4 - 1)
    shape = plain_shape(arch, hdim, varlen=True, b=1, sq=sum(lens), batch=len(lens), max_seqlen_q=2 * rows, hq=2)
    assert splitkv.query_workgroups(shape, rows) == cus
    assert splitkv.query_workgroups(shape, rows, lens) == 2 * (2 + cus // 4 - 1)
    assert splitkv.wide_query_blocks(shape)
    assert not splitkv.wide_query_blocks(shape, seqlens_q=lens)
    assert splitkv.wide_query_blocks(shape, seqlens_q=[2 * rows] * len(lens))  # all that long: as counted
    assert not splitkv.wide_query_blocks(dataclasses.replace(shape, query_tile="narrow"))  # the call's choice
    assert splitkv.wide_query_blocks(dataclasses.replace(shape, query_tile="wide"))


def test_group_mode_call_asks_for_its_tile(monkeypatch) -> None:
    """fmha_fwd in group mode decides from the lengths and names the tile in the plan's shape."""
    arch, hdim = ROWS[0]
    shapes = []
    original = splitkv.build_attention_plan

    def build(shape):
        shapes.append(shape)
        return original(shape)

    monkeypatch.setattr(splitkv, "build_attention_plan", build)
    rng = np.random.default_rng(3)
    cu = np.array([0, 40, 57], np.int32)
    q, k, v = (rng.standard_normal((57, 2, hdim)).astype(np.float16) for _ in range(3))
    opts = dict(cu_seqlens_q=cu, cu_seqlens_k=cu)
    out = fmha_fwd(q, k, v, device=EmulatorDevice(arch), **opts)
    assert shapes[-1].query_tile == "narrow"  # two short sequences: far from a grid that wants it
    np.testing.assert_allclose(out, fmha_fwd_reference(q, k, v, **opts), atol=4e-3, rtol=4e-3)


def test_archs_and_head_dims_without_a_wide_row_never_take_one() -> None:
    for arch in ARCH_NAMES:
        for hdim in (32, 64, 128, 256):
            shape = plain_shape(arch, hdim, hq=4096, query_tile="wide")
            assert splitkv.wide_query_blocks(shape) == (hdim in WIDE.get(arch, {})), (arch, hdim)


@pytest.fixture
def wide(monkeypatch):
    """Every plan asks for the wide tile (taken where the variant has one); the plans are recorded."""
    built = []
    original = splitkv.build_attention_plan.__wrapped__

    def build(shape):
        plan = original(dataclasses.replace(shape, query_tile="wide"))
        built.append(plan)
        return plan

    monkeypatch.setattr(splitkv, "build_attention_plan", build)
    return built


@pytest.mark.emulator
@pytest.mark.parametrize("arch,hdim", ROWS)
def test_wide_tile_matches_the_reference(arch: str, hdim: int, wide) -> None:
    """Batch mode with partial query and key blocks (f16, LSE), group mode (bf16, sink, soft-cap)
    and a padded head dim, each run with the WIDE row's tile."""
    rows = WIDE[arch][hdim].block_m
    rng = np.random.default_rng(11)
    dev = EmulatorDevice(arch)

    q, k, v = (rng.standard_normal((2, s, 2, hdim)).astype(np.float16) for s in (rows + 44, rows + 77, rows + 77))
    out, lse = fmha_fwd(q, k, v, return_lse=True, device=dev)
    assert wide[-1].stages[0].kernel.manifest["constexprs"]["BLOCK_M"] == rows
    check_out_lse(out, lse, *fmha_fwd_reference(q, k, v, return_lse=True), 4e-3)

    lens_q, lens_k = [rows + 3, 17, 2 * rows], [rows - 5, 300, 2 * rows + 9]
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (lens_q, lens_k))
    q = rng.standard_normal((int(cu_q[-1]), 2, hdim)).astype(np.float32)
    k, v = (rng.standard_normal((int(cu_k[-1]), 2, hdim)).astype(np.float32) for _ in range(2))
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in (q, k, v))
    sink = rng.standard_normal(2).astype(np.float32)
    opts = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, sink=sink, softcap=20.0)
    out, lse = fmha_fwd(q, k, v, return_lse=True, device=dev, **opts)
    assert wide[-1].stages[0].kernel.manifest["constexprs"]["BLOCK_M"] == rows
    check_out_lse(out, lse, *fmha_fwd_reference(q, k, v, return_lse=True, **opts), 2e-2)

    d = hdim - 24  # a padded head dim runs the same row
    q, k, v = (rng.standard_normal((1, s, 1, d)).astype(np.float16) for s in (rows + 1, 200, 200))
    assert fmha_config(arch, d, wide=True) == WIDE[arch][hdim]
    np.testing.assert_allclose(fmha_fwd(q, k, v, device=dev), fmha_fwd_reference(q, k, v), atol=4e-3, rtol=4e-3)
