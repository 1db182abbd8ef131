"""A seeded sample of the fuzzer (tests/fuzz.py): mutated kernels through parse/check/emit/our
passes and bad fmha_fwd calls must end in located errors, never internal ones. `make fuzz` runs
a larger sample."""

from __future__ import annotations

import os

import pytest
from fuzz import fuzz_api, fuzz_bad_calls, fuzz_sources, report

from tiledsl.backends.rocm.arch import ARCH_NAMES

pytestmark = pytest.mark.frontend

COUNT = int(os.environ.get("TILEDSL_FUZZ_COUNT", "120"))


@pytest.mark.parametrize("seed", [0, 1])
def test_mutated_sources_raise_no_internal_errors(seed: int) -> None:
    findings = fuzz_sources(COUNT, seed, list(ARCH_NAMES))
    assert not findings, report(findings)


def test_bad_api_calls_raise_value_errors() -> None:
    findings = fuzz_api(max(COUNT // 3, 20), 0)
    assert not findings, report(findings)


def test_backward_and_kv_cache_calls_with_a_bad_argument_are_refused() -> None:
    """Valid fmha_bwd / fmha_fwd_kvcache calls (the fuzzer's base calls run as they are) with one
    or two arguments from its table of bad values: each is a ValueError or TileError."""
    findings = fuzz_bad_calls(max(COUNT // 2, 20), 0)
    assert not findings, report(findings)


def test_known_finding_bool_dtype_cast() -> None:
    """Found by the fuzzer (seed 2565 of 3000): cast of a float tile to i1 passed the checker and
    failed in emit (`ValueError: cast f32 -> i1`); it now lowers as x != 0."""
    from fuzz import compile_front

    compile_front("kernel k(x: tensor[f32](N), y: tensor[i1](N)) grid(1) {\n let i = arange(0, 64);\n"
                  " store(y[i], cast(load(x[i], mask=i < N, other=0.0), i1), mask=i < N);\n}\n", "k.tile", "gfx90a", {})
