"""Compile the FMHA forward kernel (tiledsl/kernels/fmha_fwd.tile) per arch, check it statically.

Every arch x dtype x hdim (64, 128) x causal-or-not compiles with the tile config of
fmha_configs.py; each of those 40 variants also switches on a share of the optional features, so
every feature is compiled on every arch at both head dims without more compiles (~3 s each;
the variants are in _fmha_util.py, shared with test_fmha_emulated.py):

    f16,  not causal: no mask, soft-cap, sink, padded head dim (48 -> 64, 96 -> 128)
    bf16, not causal: sliding window, group mode (varlen), LSE
    f16,  causal:     bottom-right causal, LSE, sink
    bf16, causal:     top-left causal, group mode, soft-cap, padded head dim
"""

from __future__ import annotations

import re

import pytest
from _fmha_util import KERNEL, compiled, compiled_variant, variant

from tiledsl.backends.rocm import elf
from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.driver import compile_source, waves_per_simd
from tiledsl.errors import TileError
from tiledsl.isa_stats import isa_stats
from tiledsl.kernels.fmha_configs import (
    CONFIGS,
    HDIMS,
    FmhaConfig,
    fmha_config,
    fmha_defines,
    fmha_dim_units,
    padded_hdim,
)
from tiledsl.manifest import check_manifest
from tiledsl.options import CompileOptions
from tiledsl.reference import fmha_mask_params

CASES = [(arch, dt, h, c) for arch in ARCH_NAMES for dt in ("f16", "bf16") for h in (64, 128)
         for c in (False, True)]


@pytest.mark.compile
@pytest.mark.parametrize("arch,dtype,hdim,causal", CASES,
                         ids=[f"{a}-{d}-d{h}-{'causal' if c else 'nocausal'}" for a, d, h, c in CASES])
def test_fmha_compiles(arch: str, dtype: str, hdim: int, causal: bool) -> None:
    defines = variant(arch, dtype, hdim, causal)
    assert defines["HDIM"] == str(hdim)
    k = compiled_variant(arch, dtype, hdim, causal)
    co = elf.read_code_object(k.hsaco)
    assert co.e_machine == elf.EM_AMDGPU and co.arch == arch
    assert "fmha_fwd.kd" in co.symbols
    row = get_arch(arch)
    stats = isa_stats(k.asm, k.manifest)
    assert (stats.mfma if row.is_cdna else stats.wmma) > 0, f"no matrix instruction on {arch}"
    names = {op.isa_name for op in row.matrix_ops_for(dtype)}
    assert any(n in k.asm for n in names), f"none of {names} in the {dtype} kernel on {arch}"
    m = k.manifest
    figures = (f"{arch} {defines}: {m['vgpr_count']} VGPRs ({m['agpr_count']} AGPRs), {m['sgpr_count']} SGPRs, "
               f"spills {m['vgpr_spill_count']} VGPR / {m['sgpr_spill_count']} SGPR, scratch "
               f"{m['private_segment_size']} B")
    # No VGPR spills (scratch memory); SGPRs spilled to VGPR lanes only outside every loop, where
    # they cost a few moves per workgroup (fmha_configs: the rule its rows are chosen by).
    assert m["vgpr_spill_count"] == 0, "spills: " + figures
    in_loops = stats.sgpr_spill_moves_in_loops
    assert in_loops == 0, f"{in_loops} SGPR spill moves in a loop: " + figures
    assert m["private_segment_size"] == 0, "scratch memory: " + figures
    assert 0 < m["lds_bytes"] <= row.lds_bytes, f"LDS {m['lds_bytes']} B over the {row.lds_bytes} B of {arch}"
    assert m["waves"] == int(defines["WAVES"])
    check_manifest(m, k.hsaco)


@pytest.mark.compile
def test_fmha_unequal_head_dims_compile() -> None:
    """192/128 (DeepSeek-style) runs as HDIM 256, HDIM_V 128, without spills."""
    defines = fmha_defines("gfx942", dtype="bf16", hdim_q=192, hdim_v=128, mask=fmha_mask_params(True))
    assert (defines["HDIM"], defines["HDIM_V"], defines["PAD_D"]) == ("256", "128", "true")
    k = compiled("gfx942", defines, fmha_dim_units(192, 128))
    assert isa_stats(k.asm, k.manifest).mfma > 0
    assert k.manifest["lds_bytes"] <= get_arch("gfx942").lds_bytes
    assert k.manifest["vgpr_spill_count"] == 0 and k.manifest["private_segment_size"] == 0


@pytest.mark.compile
def test_fmha_manifest_abi() -> None:
    defines = variant("gfx942", "f16", 128, True)
    m = compiled("gfx942", defines).manifest
    names = [a["name"] for a in m["kernargs"]]
    assert names[:5] == ["q", "q.stride0", "q.stride1", "q.stride2", "k"]  # the last dim is contiguous
    tensors = [t["name"] for t in m["tensors"]]
    assert tensors == ["q", "k", "v", "o", "lse", "sink", "o_acc", "lse_acc", "cu_seqlens_q", "cu_seqlens_k",
                       "cache_seqlens", "cache_batch_idx", "block_table", "bias", "alibi_slopes"]
    assert [s["name"] for s in m["scalars"]] == ["scale", "softcap", "window_left", "window_right", "batch",
                                                 "max_seqlen_q", "num_splits", "seqlen_new", "page_shift",
                                                 "heads_per_block", "seed_lo", "seed_hi", "rng_offset",
                                                 "drop_threshold", "drop_scale", "p_scale", "o_scale"]
    # heads_per_block is an i32 argument, which may be negative for all the manifest knows: the
    # language's truncating // is written as the formulas' truncating / (grid.render_expr).
    assert m["grid"] == [f"cdiv(max_seqlen_q * heads_per_block, {defines['BLOCK_M']})", "HQ / heads_per_block",
                         "batch * num_splits"]


def test_config_table_covers_every_arch_and_hdim() -> None:
    assert set(CONFIGS) == set(ARCH_NAMES)
    for rows in CONFIGS.values():
        assert set(rows) == set(HDIMS)
        for cfg in rows.values():
            assert cfg.waves in (1, 2, 4, 8, 16) and cfg.stages >= 1
            assert cfg.block_m % 16 == 0 and cfg.block_n % 16 == 0  # powers of two, >= the dot minimum


def test_config_lookup_and_defines() -> None:
    assert [padded_hdim(d) for d in (16, 32, 64, 80, 96, 128, 192, 256)] == [32, 32, 64, 128, 128, 128, 256, 256]
    with pytest.raises(TileError):
        padded_hdim(320)
    assert fmha_config("gfx1100", 192, 128) == CONFIGS["gfx1100"][256]
    d = fmha_defines("gfx950", dtype="bf16", hdim_q=80, mask=fmha_mask_params(True, (128, -1)), softcap=0.0)
    assert (d["HDIM"], d["HDIM_V"], d["PAD_D"], d["MASK"], d["SOFTCAP"]) == ("128", "128", "true",
                                                                             "causal_bottom_right", "false")
    assert fmha_defines("gfx90a", hdim_q=64)["PAD_D"] == "false"
    with pytest.raises(TileError):
        fmha_defines("gfx942", dtype="f32")


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_v_is_stored_to_lds_several_keys_at_a_time(arch: str) -> None:
    """The forward's V tile (a dot's B operand [keys, d], staged through LDS transposed) is loaded
    with 4 keys per lane (2 where 4 would spill under the config's occupancy), so each LDS store
    writes several keys where it wrote one: no 16-bit LDS stores are left (the timing model: 512
    ds_write_b16 per wave-block, most of the LDS time of the gfx942 d128 forward, became 136
    ds_write2_b64; gfx1201's 32 ds_store_b16 per lane and iteration became 8 64-bit stores).
    gfx950 stores V row-major and transposes in its LDS reads. gfx1100 keeps one 16-bit store per
    element of P a lane holds: P goes through LDS there (gfx11's WMMA accumulator splits a row
    over the two halves of the wave, its A operand does not)."""
    from tiledsl.ops import compile_fmha_fwd
    from tiledsl.reference import fmha_mask_params

    k = compile_fmha_fwd(arch, dtype="f16", hdim_q=128, hdim_v=128, mask=fmha_mask_params(False))
    cfg = fmha_config(arch, 128, 128)
    p_per_lane = cfg.block_m * cfg.block_n // (cfg.waves * get_arch(arch).wave_size)
    stores_16 = len(re.findall(r"ds_(write|store)_b(8|16)", k.asm))
    assert stores_16 <= (p_per_lane if arch == "gfx1100" else 0), stores_16
    assert re.search(r"ds_(write2?|store(_2addr)?)_b(32|64|128)", k.asm)


@pytest.mark.compile
def test_q_is_loaded_in_its_operand_layout() -> None:
    """Q is loaded once, straight in the MFMA operand layout (assign-layouts), so its 128x128 tile
    takes no LDS: the kernel's LDS is K's or V's staging alone, and two workgroups fit a gfx942 CU
    (64 KiB), where Q's 33 KiB staging allowed one."""
    arch = get_arch("gfx942")
    defines = fmha_defines("gfx942", hdim_q=128, mask=fmha_mask_params(False), config=FmhaConfig(128, 64, 4, 1))
    m = compiled("gfx942", defines).manifest
    assert m["lds_bytes"] <= arch.lds_bytes // 2, m["lds_bytes"]


@pytest.mark.compile
def test_occupancy_caps_the_registers() -> None:
    """OCCUPANCY (the kernel's occupancy(...) clause) caps the registers so that many waves fit a
    SIMD: the gfx942 d128 128x64 two-stage tile, aligned as fmha_fwd compiles it for contiguous
    inputs, fits 2 waves (256 of the 512 unified VGPRs) without spilling."""
    from tiledsl.ops import compile_fmha_fwd

    arch = get_arch("gfx942")
    plain = compile_fmha_fwd("gfx942", dtype="f16", hdim_q=128, hdim_v=128, mask=fmha_mask_params(False))
    assert plain.manifest["occupancy_target"] == fmha_config("gfx942", 128).occupancy
    defines = fmha_defines("gfx942", hdim_q=128, mask=fmha_mask_params(False),
                           config=FmhaConfig(128, 64, 4, 2, occupancy=2))
    options = CompileOptions.make("gfx942", defines, stride_units=tuple((t, 8) for t in ("k", "o", "q", "v")))
    m = compile_source(KERNEL.read_text(), str(KERNEL), "gfx942", defines, options, cache=None).manifest
    assert arch.occupancy(m["vgpr_count"]) >= 2, m["vgpr_count"]
    assert m["vgpr_spill_count"] == 0 and m["private_segment_size"] == 0
    assert m["occupancy_target"] == 2 and "occupancy_lowered_to" not in m


@pytest.mark.compile
def test_occupancy_out_of_reach_is_lowered_and_recorded() -> None:
    """A target the kernel cannot reach without spilling (d256 at 4 waves per SIMD: at most 128
    VGPRs) is lowered one wave at a time until it compiles without spills; the manifest keeps the
    target and what it was lowered to, and `tiledsl compile` says so."""
    defines = fmha_defines("gfx942", hdim_q=256, mask=fmha_mask_params(False),
                           config=FmhaConfig(64, 32, 4, 2, occupancy=4))
    options = CompileOptions.make("gfx942", defines)
    m = compile_source(KERNEL.read_text(), str(KERNEL), "gfx942", defines, options, cache=None).manifest
    assert m["vgpr_spill_count"] == 0
    assert m["occupancy_target"] == 4 and m["occupancy_lowered_to"] < 4
    assert get_arch("gfx942").occupancy(m["vgpr_count"]) >= m["occupancy_lowered_to"]


@pytest.mark.compile
@pytest.mark.parametrize("hdim,causal", [(64, True), (128, False)])
def test_gfx11_operands_stay_in_registers_unless_that_costs_waves(hdim: int, causal: bool) -> None:
    """gfx11 WMMA operands hold every value twice, so the forward's Q tile, converted once before
    the key loop, takes more registers than it was loaded in (hoist-conversions holds it there).
    Where those registers could cost waves per SIMD, the driver compiles the kernel again with
    the tile kept in LDS (CompileOptions.resident_operands) and keeps what runs more waves. hdim
    128: in registers, Q frees the LDS that limited a CU to two workgroups (more waves than in
    LDS); hdim 64 causal: the registers would take a wave per SIMD (7 instead of 8), and the
    manifest says Q stayed in LDS."""
    from tiledsl.ops import compile_fmha_fwd

    arch = get_arch("gfx1100")
    mask = fmha_mask_params(causal)
    chosen = compile_fmha_fwd("gfx1100", dtype="f16", hdim_q=hdim, hdim_v=hdim, mask=mask)
    defines = fmha_defines("gfx1100", hdim_q=hdim, mask=mask)
    # The row's compiler options too, as compile_fmha_fwd passes them (lane_exchange keeps P out of
    # LDS, which changes the stagings' row padding: stage-lds' _align_rows).
    options = CompileOptions.make("gfx1100", defines, stride_units=tuple((t, 8) for t in ("k", "o", "q", "v")),
                                  resident_operands=True, **fmha_config("gfx1100", hdim, masked=causal).scheduling())
    resident = compile_source(KERNEL.read_text(), str(KERNEL), "gfx1100", defines, options, cache=None).manifest

    m = chosen.manifest
    chosen_waves, resident_waves = waves_per_simd(arch, m), waves_per_simd(arch, resident)
    assert m["vgpr_spill_count"] == 0 and chosen_waves >= resident_waves
    if hdim == 128:
        assert "resident_operands" not in m and chosen_waves > resident_waves and m["lds_bytes"] < resident["lds_bytes"]
    else:
        assert m["resident_operands"].startswith("operand tiles kept in LDS: in registers")
        assert (m["vgpr_count"], m["lds_bytes"]) == (resident["vgpr_count"], resident["lds_bytes"])
