"""The kernel registry: variant keys, validation with reasons, receipts, arch specs, and the
`tiledsl list` / `registry export` / `prebuild --receipt` commands."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from _fmha_util import assert_grads_close

from tiledsl import registry
from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.cli import main
from tiledsl.errors import TileError
from tiledsl.fmha_bwd import bwd_config
from tiledsl.kernels.fmha_configs import fmha_config
from tiledsl.prebuild import prebuild_variants
from tiledsl.registry import RECEIPTS, Signature, Variant, algorithm, arch_specs, receipt_variants, validate


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_receipts_hold_valid_variants_with_unique_keys(arch):
    for receipt, (_, make) in RECEIPTS.items():
        if make is None:
            continue
        if receipt == "fp8" and not get_arch(arch).fp8_flavour:
            with pytest.raises(ValueError, match="receipt fp8: none of these archs has fp8"):
                receipt_variants(receipt, [arch])
            continue
        variants = receipt_variants(receipt, [arch])
        keys = [v.key() for v in variants]
        assert variants and len(set(keys)) == len(keys), receipt
        for v in variants:
            validate(arch, v.signature)
    families = {v.signature.family for v in receipt_variants("all", [arch])}
    assert families == set(registry.FAMILIES)
    training = receipt_variants("training", [arch])
    assert {v.signature.family for v in training} == {"fmha_fwd", "fmha_bwd"}
    assert all(v.signature.lse for v in training if v.signature.family == "fmha_fwd")


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_algorithm_is_read_from_the_kernels_tables(arch):
    for hd in (32, 64, 128, 256):
        for mask in ("none", "causal"):
            fwd = algorithm(arch, Signature("fmha_fwd", hdim_q=hd, hdim_v=hd, mask=mask))
            c = fmha_config(arch, hd, hd, masked=mask != "none")
            assert (fwd.block_m, fwd.block_n, fwd.waves, fwd.stages) == (c.block_m, c.block_n, c.waves, c.stages)
        bwd = algorithm(arch, Signature("fmha_bwd", hdim_q=hd, hdim_v=hd))
        b = bwd_config(arch, hd, hd)
        assert (bwd.block_m, bwd.block_n, bwd.waves, bwd.spills) == (b.block_m, b.block_n, b.waves, b.spills)
    specs = json.loads(json.dumps(arch_specs(arch)))  # JSON-ready
    assert specs["facts"]["compute_units"] > 0 and specs["facts"]["wave_size"] in (32, 64)
    assert specs["families"]["fmha_bwd"]["tiles"]["128"]["block_n"] == bwd_config(arch, 128, 128).block_n


@pytest.mark.parametrize(("arch", "sig", "message"), [
    ("gfx90a", Signature("fmha_fwd", dtype="fp8"), r"dtype: .*gfx90a has no fp8 matrix instructions"),
    ("gfx942", Signature("fmha_fwd", dtype="fp8"), r"dtype: fp8 variants are named f8e4m3 \(gfx942 has FNUZ fp8"),
    ("gfx1100", Signature("fmha_fwd", dtype="f8e4m3"), r"dtype: gfx1100 has no fp8 matrix instructions"),
    ("gfx950", Signature("fmha_bwd", dtype="f8e4m3"), r"dtype: f8e4m3 is for the forward"),
    ("gfx942", Signature("fmha_fwd", dtype="f32"), r"dtype: gfx942 supports f16, bf16 for fmha_fwd, got 'f32'"),
    ("gfx950", Signature("fmha_fwd", hdim_q=512), r"hdim_q: fmha_fwd supports head dims 1\.\.256"),
    ("gfx1100", Signature("fmha_fwd", paged=True), r"paged: only fmha_fwd_kvcache has it"),
    ("gfx1100", Signature("fmha_fwd", deterministic=True), r"deterministic: only fmha_bwd"),
    ("gfx1201", Signature("fmha_bwd", lse=True), r"lse: the backward always reads"),
    ("gfx1201", Signature("fmha_fwd", bias="relative"), r"bias: expected one of none, tensor, alibi, got 'relative'"),
    ("gfx1201", Signature("fmha_fwd_kvcache", bias="tensor"), r"bias: fmha_fwd_kvcache takes ALiBi slopes but no bias"),
    ("gfx1201", Signature("fmha_fwd_kvcache", dropout=True), r"dropout: fmha_fwd_kvcache has none"),
    ("gfx942", Signature("fmha_fwd", mask="sliding"), r"mask: expected one of none, causal, top_left, window"),
    ("gfx942", Signature("flash"), r"family: expected one of fmha_fwd"),
    ("gfx908", Signature("fmha_fwd"), r"arch: expected one of gfx90a"),
])
def test_unsupported_combinations_are_refused_with_the_field(arch, sig, message):
    with pytest.raises(ValueError, match=message):
        validate(arch, sig)


def test_registry_export_and_list_commands(tmp_path, capsys):
    out = tmp_path / "specs.json"
    assert main(["registry", "export", "--arch", "gfx942", "-o", str(out)]) == 0
    specs = json.loads(out.read_text())
    assert specs["arch"] == "gfx942" and specs["facts"]["compute_units"] == 304
    assert specs["families"]["fmha_fwd"]["tiles"]["128"] == {"block_m": 128, "block_n": 64, "waves": 4, "stages": 2,
                                                             "occupancy": 2, "reuse": True, "mask_rows": True,
                                                             "mask_keys": True, "schedule": "",
                                                             "interleave": True,
                                                             "lazy_rescale": True, "lane_exchange": False,
                                                             "overlap": False, "fused_scale": None, "loop_arena": False,
                                                             "p_toward_zero": True, "tree_sums": False,
                                                             "swap_halves": True, "swizzle_exchange": False,
                                                             "pack_by_perm": False, "lds_swizzle": True}
    assert specs["families"]["fmha_fwd"]["wide_tiles"]["128"]["block_m"] == 256
    assert specs["families"]["fmha_fwd"]["wide_rounds"] == 4
    assert specs["supports"]["fp8"] == {"dtype": "f8e4m3", "flavour": "fnuz", "families": ["fmha_fwd",
                                                                                      "fmha_fwd_splitkv"]}
    assert main(["registry", "export", "--arch", "gfx1100", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["supports"]["fp8"] is None  # no fp8 matrix instructions
    assert main(["registry", "export", "--arch", "gfx9000"]) == 2
    assert "arch: expected one of" in capsys.readouterr().err

    assert main(["list", "--receipt", "flash", "--arch", "gfx1201", "--family", "fmha_bwd", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["arch"] == "gfx1201" and r["signature"]["family"] == "fmha_bwd" for r in rows)
    assert len(rows) == 2 * 2 * 2 * 2 * 2  # dtypes x hdims x modes x masks x dropout
    assert main(["list", "--receipt", "pytorch", "--arch", "gfx90a"]) == 0
    assert "gfx90a/fmha_fwd-bf16-batch-d128-top_left-lse" in capsys.readouterr().out
    assert main(["list", "--receipt", "fp8", "--arch", "gfx950"]) == 0
    assert "gfx950/fmha_fwd_splitkv-f8e4m3-group-d128-causal" in capsys.readouterr().out
    for argv, err in ((["list", "--receipt", "fp8", "--arch", "gfx1100"], "receipt fp8: none of these archs"),
                      (["list", "--receipt", "nope"], "receipt: expected one of flash"),
                      (["list", "--family", "fmha"], "--family 'fmha': expected one of")):
        assert main(argv) == 2
        assert err in capsys.readouterr().err


def test_prebuild_receipt_argument_errors(capsys):
    for argv, err in ((["prebuild", "--arch", "gfx942"], "give one of a kernel family"),
                      (["prebuild", "fmha_fwd", "--receipt", "flash", "--arch", "gfx942"],
                       "not a kernel family and --receipt"),
                      (["prebuild", "--receipt", "flash", "--arch", "gfx942", "--dtype", "f16"], "--dtype select"),
                      (["prebuild", "--receipt", "flash", "--arch", "gfx942", "-j", "0"], "--jobs"),
                      (["prebuild", "--receipt", "flash", "--arch", "gfx000"], "unknown arch")):
        assert main(argv) == 2, argv
        assert err in capsys.readouterr().err


def test_prebuild_receipt_keeps_going_and_exits_nonzero(tmp_path, monkeypatch, capsys):
    def build(arch, sig):
        if sig.hdim_q == 128:
            raise TileError("no room for this tile")
        return []

    monkeypatch.setitem(registry._BUILDERS, "fmha_fwd", build)
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path))  # restored afterwards (prebuild sets it for its builders)
    status = main(["prebuild", "--receipt", "pytorch", "--arch", "gfx942", "--family", "fmha_fwd", "-j", "1",
                   "-q", "--cache-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 1
    assert captured.err.count("FAILED gfx942/fmha_fwd-") == 8 and "no room for this tile" in captured.err
    assert "pytorch        16        0         0       8" in captured.out


def test_prebuild_names_the_variants_that_spill(tmp_path, monkeypatch, capsys):
    """A variant whose kernel spills to scratch memory builds (a slower kernel, not an error: the
    caller cannot choose its tile), and both prebuild paths name it with its count."""
    def build(arch, sig):
        spills = 9 if sig.hdim_q == 128 else 0
        return [SimpleNamespace(key=f"{arch}-{sig.name()}", name="fmha_fwd", from_cache=False,
                                manifest={"vgpr_spill_count": spills})]

    monkeypatch.setitem(registry._BUILDERS, "fmha_fwd", build)
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path))
    note = "spills registers to scratch memory: fmha_fwd (9 VGPRs)"
    assert main(["prebuild", "--receipt", "pytorch", "--arch", "gfx1100", "--family", "fmha_fwd", "-j", "1",
                 "-q", "--cache-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert err.count(f": {note}") == 8 and "gfx1100/fmha_fwd-f16-batch-d128-none: " in err, err
    assert main(["prebuild", "fmha_fwd", "--arch", "gfx1100", "--dtype", "f16", "--hdim", "64", "128", "--mask",
                 "none", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "hdim 128 mask none: compiled in" in out and f"({note})" in out and out.count(note) == 1, out


def test_prebuilt_receipt_variants_run_without_compiling(tmp_path, monkeypatch):
    """What prebuild_variants builds is exactly what fmha_fwd and fmha_bwd load at run time."""
    from tiledsl import driver
    from tiledsl.ops import fmha_bwd, fmha_fwd
    from tiledsl.reference import fmha_bwd_reference

    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path))
    wanted = [Variant("gfx1201", Signature("fmha_fwd", hdim_q=64, hdim_v=64, mask="causal", lse=True)),
              Variant("gfx1201", Signature("fmha_bwd", hdim_q=64, hdim_v=64, mask="causal")),
              Variant("gfx1201", Signature("fmha_fwd_kvcache", dropout=True))]
    results = prebuild_variants(wanted, jobs=2, progress=False)  # in worker processes: nothing stays in memory here
    assert [r.key for r in results] == [v.key() for v in wanted]
    # Causal: the forward packed and not (its blocks go heaviest first, unpaired); the backward's
    # three stages and the paired dq_dk_dv (tiledsl.pairing).
    assert results[0].kernels == 2 and results[1].kernels == 4 and not results[0].error and not results[1].error
    assert "dropout" in results[2].error

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled at run time although the variant was prebuilt")

    monkeypatch.setattr(driver, "run_stages", no_compiling)
    rng = np.random.default_rng(4)
    q, k, v, do = (rng.standard_normal((1, 40, 2, 64)).astype(np.float16) for _ in range(4))
    dev = EmulatorDevice("gfx1201")
    out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=dev)
    dq, dk, dv = fmha_bwd(do, q, k, v, out, lse, causal=True, device=dev)
    assert_grads_close((dq, dk, dv), fmha_bwd_reference(do, q, k, v, causal=True), np.float16)
    # A grid large enough to pair the backward's key blocks loads the paired kernels from the
    # package too (the forward pairs only on request).
    import tiledsl.fmha_bwd as bwd_module
    import tiledsl.fmha_splitkv as splitkv
    monkeypatch.setattr(bwd_module, "pair_key_blocks", lambda *args: True)
    splitkv.build_attention_plan.cache_clear()
    bwd_module.build_plan.cache_clear()
    try:
        out, lse = fmha_fwd(q, k, v, causal=True, return_lse=True, device=dev)
        assert_grads_close(fmha_bwd(do, q, k, v, out, lse, causal=True, device=dev),
                           fmha_bwd_reference(do, q, k, v, causal=True), np.float16)
    finally:
        splitkv.build_attention_plan.cache_clear()
        bwd_module.build_plan.cache_clear()
    with pytest.raises(AssertionError, match="prebuilt"):  # a variant not prebuilt would compile
        fmha_fwd(q, k, v, causal=False, device=dev)

