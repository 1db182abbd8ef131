"""Variants of the FMHA forward kernel shared by its compile and emulator tests.

Both test modules compile the same variants through one cache, so a process that runs both
compiles each variant once (the compile budget of the suite is ~40 compiles for FMHA).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import tiledsl
from tiledsl.driver import CompiledKernel, compile_source
from tiledsl.kernels.fmha_configs import fmha_defines, fmha_dim_units, variant_config
from tiledsl.options import CompileOptions
from tiledsl.reference import fmha_mask_params

KERNEL = Path(tiledsl.__file__).resolve().parent / "kernels" / "fmha_fwd.tile"

# Each (dtype, causal) variant also switches on a share of the optional features, so every feature
# is compiled on every arch at both head dims without more compiles.
FEATURES: dict[tuple[str, bool], dict[str, Any]] = {
    ("f16", False): dict(softcap=30.0, sink=True, pad=True),
    ("bf16", False): dict(window=(256, 32), varlen=True, lse=True),
    ("f16", True): dict(causal="bottom_right", lse=True, sink=True),
    ("bf16", True): dict(causal="top_left", varlen=True, softcap=30.0, pad=True),
}


def actual_hdim(hdim: int, dtype: str, causal: bool) -> int:
    """The run-time head dim of a variant: 3/4 of the tile width (48, 96) when it pads."""
    return hdim * 3 // 4 if FEATURES[(dtype, causal)].get("pad") else hdim


def variant(arch: str, dtype: str, hdim: int, causal: bool) -> dict[str, str]:
    f = FEATURES[(dtype, causal)]
    mask = fmha_mask_params(f.get("causal", False), f.get("window", (-1, -1)))
    return fmha_defines(arch, dtype=dtype, hdim_q=actual_hdim(hdim, dtype, causal), mask=mask,
                        varlen=f.get("varlen", False), lse=f.get("lse", False), sink=f.get("sink", False),
                        softcap=f.get("softcap", 0.0))


def variant_dim_units(dtype: str, hdim: int, causal: bool) -> tuple[tuple[str, int], ...]:
    """The dim_units fmha_fwd compiles a variant with (non-empty when it pads)."""
    return fmha_dim_units(actual_hdim(hdim, dtype, causal))


def variant_scheduling(arch: str, dtype: str, hdim: int, causal: bool) -> tuple[tuple[str, str | bool], ...]:
    """The asks of LLVM's scheduler fmha_fwd compiles a variant with (its config row's), as items."""
    f = FEATURES[(dtype, causal)]
    d = actual_hdim(hdim, dtype, causal)
    cfg = variant_config(arch, dtype=dtype, hdim_q=d, hdim_v=d,
                         mask=fmha_mask_params(f.get("causal", False), f.get("window", (-1, -1))))
    return tuple(cfg.scheduling().items())


@functools.cache
def _compiled(arch: str, defines: tuple[tuple[str, str], ...],
              dim_units: tuple[tuple[str, int], ...], scheduling: tuple[tuple[str, str | bool], ...]) -> CompiledKernel:
    d = dict(defines)
    # Spills are asserted by the tests with the figures in the message rather than raised here.
    # Strides get no alignment facts: this is the general variant, the one with the most work.
    opts = CompileOptions.make(arch, d, allow_spills=True, dim_units=dim_units, **dict(scheduling))
    return compile_source(KERNEL.read_text(), str(KERNEL), arch, d, opts, cache=None)


def compiled(arch: str, defines: dict[str, str], dim_units: tuple[tuple[str, int], ...] = (),
             scheduling: tuple[tuple[str, str | bool], ...] = ()) -> CompiledKernel:
    """scheduling: CompileOptions fields as items (variant_scheduling)."""
    return _compiled(arch, tuple(sorted(defines.items())), dim_units, scheduling)


def compiled_variant(arch: str, dtype: str, hdim: int, causal: bool) -> CompiledKernel:
    """A feature-mix variant compiled as fmha_fwd would (general strides): its defines, dim units
    and its config row's scheduler."""
    return compiled(arch, variant(arch, dtype, hdim, causal), variant_dim_units(dtype, hdim, causal),
                    variant_scheduling(arch, dtype, hdim, causal))


def check_out_lse(out: Any, lse: Any, ref_out: Any, ref_lse: Any, tol: float) -> None:
    """An attention output and its LSE against the float64 reference: finite outputs within
    `tol`, -inf exactly where the reference has it, finite LSEs within 1e-4."""
    out = np.asarray(out, np.float64)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, ref_out, atol=tol, rtol=tol)
    assert np.array_equal(np.isfinite(lse), np.isfinite(ref_lse))
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], atol=1e-4, rtol=1e-5)


def assert_grads_close(got, ref, dtype, what=("dq", "dk", "dv", "dsink")) -> None:
    """Backward results against the float64 reference: max error within 4e-3 (f16) or 2e-2 (bf16)
    of the reference's largest magnitude (at least 1), all finite, same shapes."""
    tol = 2e-2 if dtype == ml_dtypes.bfloat16 else 4e-3
    for name, g, r in zip(what, got, ref, strict=False):
        g = np.asarray(g, dtype=np.float64)
        assert g.shape == r.shape, name
        assert np.isfinite(g).all(), f"{name} has non-finite values"
        err = np.abs(g - r).max() if r.size else 0.0
        assert err <= tol * max(np.abs(r).max(initial=0.0), 1.0), f"{name}: max error {err}"


def prebuild_package(tmp_path_factory: Any, *variants: str) -> Path:
    """A kernel package of `variants` built by `tiledsl prebuild -o` (through the test run's
    compile cache), for the package tests' module fixtures."""
    import os

    import pytest

    from tiledsl.cli import main

    out = tmp_path_factory.mktemp("pkg") / "kernels"
    with pytest.MonkeyPatch.context() as mp:  # prebuild sets both for its builders: keep them out of other tests
        mp.setenv("TILEDSL_CACHE_DIR", os.environ.get("TILEDSL_CACHE_DIR", str(Path.home() / ".cache/tiledsl")))
        mp.setenv("TILEDSL_OFFLINE", "0")
        argv = ["prebuild", *(a for v in variants for a in ("--variant", v)), "-o", str(out), "-j", "1", "-q"]
        assert main(argv) == 0
    return out
