"""CompileOptions.skip_unit_scales (lower-to-gpu's rule_mulf) and the forward's lazy softmax rescale
(fmha_fwd.tile's LAZY, FmhaConfig.lazy_rescale), run on the emulator against numpy on every arch.

The skip multiplies a loop-carried tile by its broadcast factor only in the waves where some
factor is not exactly 1, so the data here makes both happen: factors that are 1 in some waves'
rows and not in others, changing from step to step, and attention logits whose running max jumps
by more than the lazy margin in later key blocks for some rows and never for others.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tiledsl import ops
from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.fmha_splitkv import build_attention_plan
from tiledsl.kernels import fmha_configs
from tiledsl.launcher import launch
from tiledsl.options import CompileOptions
from tiledsl.reference import fmha_fwd_reference

pytestmark = pytest.mark.emulator

KERNEL = Path(__file__).resolve().parent / "kernels" / "unit_scale.tile"


def _factors(steps: int, rows: int) -> np.ndarray:
    """Row factors per step: all 2 (every wave multiplies), all 1 (none does), 1 but for one row,
    1 but for the last 24 rows of each block of 64, then NaN in one row and 0.5 in another."""
    f = np.ones((steps, rows), np.float32)
    f[0] = 2.0
    f[2, 5] = 0.5
    f[3] = np.where(np.arange(rows) % 64 >= 40, 2.0, 1.0)
    f[4, 70] = np.nan
    f[4, 3] = 0.5
    return f


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("skip", [True, False])
def test_accumulator_rescaled_where_its_factors_are_not_one(arch: str, skip: bool) -> None:
    options = CompileOptions.make(arch, skip_unit_scales=skip)
    kernel = compile_source(KERNEL.read_text(), str(KERNEL), arch, options=options)
    rng = np.random.default_rng(7)
    rows, steps = 128, 6
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    f = _factors(steps, rows)
    want = np.zeros_like(x)
    for t in range(steps):
        want = want * f[t][:, None] + x
    out = np.full_like(x, -1.0)
    launch(kernel, x, f, out, device=EmulatorDevice(arch))
    assert np.isnan(out[70]).all() and not np.isnan(np.delete(out, 70, axis=0)).any()
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


@pytest.fixture
def lazy_rows(monkeypatch):
    """Every fmha_fwd config row with the lazy rescale (and plans built anew around the test)."""
    row = fmha_configs.fmha_config
    monkeypatch.setattr(fmha_configs, "fmha_config", lambda *a, **k: replace(row(*a, **k), lazy_rescale=True))
    build_attention_plan.cache_clear()
    yield
    build_attention_plan.cache_clear()


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("causal", [False, True])
def test_lazy_forward_matches_reference_when_the_max_jumps(lazy_rows, arch: str, causal: bool) -> None:
    rng = np.random.default_rng(11)
    b, sq, sk, h, d = 1, 96, 300, 2, 64
    q = rng.standard_normal((b, sq, h, d))
    q[:, 1::2] *= 0.05  # odd rows: small logits
    q = q.astype(np.float16)
    k = rng.standard_normal((b, sk, h, d))
    k[:, :, 0] *= (1.0 + np.arange(sk) / 25.0)[None, :, None]  # head 0: logits grow along the keys
    k = k.astype(np.float16)
    v = rng.standard_normal((b, sk, h, d)).astype(np.float16)
    sink = rng.standard_normal(h).astype(np.float32)
    f64 = [np.asarray(t, np.float64) for t in (q, k, v)]
    # Some rows' running max (base 2) grows by more than the lazy margin after their first block
    # of 32 keys (head 0's even rows), others' never does, in the same blocks: the test exercises
    # the rescale and its skip.
    logits = np.einsum("bqhd,bkhd->bhqk", f64[0], f64[1]) / np.sqrt(d) * np.log2(np.e)
    if causal:
        logits = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, logits, -np.inf)
    jump = logits.max(-1) - logits[..., :32].max(-1)
    assert (jump > 8).any() and (jump < 8).any()

    out, lse = ops.fmha_fwd(q, k, v, causal=causal, sink=sink, return_lse=True, device=EmulatorDevice(arch))
    want, want_lse = fmha_fwd_reference(*f64, causal=causal, sink=sink, return_lse=True)
    assert np.abs(np.asarray(out, np.float64) - want).max() <= 4e-3
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-4)


LATE = KERNEL.parent / "late_rescale.tile"


def _rescale_before_exponentials(mlir: str) -> bool:
    """In the first loop body of a dumped tile module: the multiply of the carried accumulator (a
    block argument) comes before the exp2 of a 2-D tile."""
    body = mlir[mlir.index("scf.for"):]
    lines = body[:body.index("scf.yield")].splitlines()
    rescale = next(i for i, t in enumerate(lines) if "arith.mulf %arg" in t)
    exponentials = next(i for i, t in enumerate(lines) if "math.exp2" in t and re.search(r"tensor<\d+x\d+x", t))
    return rescale < exponentials


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("skip", [True, False])
def test_rescale_moves_before_the_exponentials(tmp_path, arch: str, skip: bool) -> None:
    """The kernel writes the rescale after the per-element exponentials. With skip_unit_scales,
    place-unit-scales moves it and its factor's exp2 up before them (where the skip's branch then
    does not cut the exponentials from their use); without, the order stays as written. Results
    against numpy either way, with factors that are exactly 1 in some waves and not in others."""
    options = CompileOptions.make(arch, skip_unit_scales=skip, dump_ir_dir=str(tmp_path))
    kernel = compile_source(LATE.read_text(), str(LATE), arch, options=options)
    assert _rescale_before_exponentials(next(tmp_path.glob("*-place-unit-scales.mlir")).read_text()) == skip

    rng = np.random.default_rng(5)
    rows, steps = 128, 6
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    lf = np.log2(_factors(steps, rows))
    want = np.zeros_like(x)
    for t in range(steps):
        want = want * np.exp2(lf[t])[:, None] + np.exp2(x * lf[t][:, None] - 1.0)
    out = np.full_like(x, -1.0)
    launch(kernel, x, lf, out, device=EmulatorDevice(arch))
    assert np.isnan(out[70]).all() and not np.isnan(np.delete(out, 70, axis=0)).any()
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
