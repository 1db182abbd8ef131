"""Compile both examples for every arch and dtype and check the code objects statically."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tiledsl.backends.rocm import elf
from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.driver import compile_source
from tiledsl.isa_stats import isa_stats
from tiledsl.manifest import check_manifest

pytestmark = pytest.mark.compile
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@functools.cache
def compiled(example: str, arch: str, dtype: str):
    path = EXAMPLES / f"{example}.tile"
    return compile_source(path.read_text(), str(path), arch, {"DT": dtype}, cache=None)


CASES = [(ex, arch, dt) for ex in ("gemm", "softmax") for arch in ARCH_NAMES for dt in ("f16", "bf16")]


@pytest.mark.parametrize("example,arch,dtype", CASES, ids=["-".join(c) for c in CASES])
def test_example_code_object(example: str, arch: str, dtype: str) -> None:
    k = compiled(example, arch, dtype)
    co = elf.read_code_object(k.hsaco)
    assert co.e_machine == elf.EM_AMDGPU
    assert co.arch == arch, f"e_flags name {co.arch}, expected {arch}"
    assert f"{k.name}.kd" in co.symbols
    stats = isa_stats(k.asm, k.manifest)
    if example == "gemm":
        count = stats.mfma if get_arch(arch).is_cdna else stats.wmma
        assert count > 0, f"no MFMA/WMMA instruction in the GEMM on {arch}"
        names = {op.isa_name for op in get_arch(arch).matrix_ops_for(dtype)}
        assert any(n in k.asm for n in names), f"none of {names} in the {dtype} GEMM on {arch}"
    m = k.manifest
    assert m["vgpr_spill_count"] == 0, "register spills at default tile sizes"
    assert m["private_segment_size"] == 0, "scratch memory in use"
    assert 0 <= m["lds_bytes"] <= get_arch(arch).lds_bytes
    check_manifest(m, k.hsaco)


def test_manifest_kernarg_layout_matches_abi() -> None:
    k = compiled("gemm", "gfx942", "f16")
    names = [a["name"] for a in k.manifest["kernargs"]]
    assert names[:4] == ["a", "a.stride0", "a.stride1", "b"]  # the last dim's stride is the constant 1
    assert names[-4:] == ["BATCH", "M", "K", "N"]
    assert k.manifest["grid"] == ["cdiv(M, 64)", "cdiv(N, 64)", "BATCH"]


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_every_builtin_compiles(arch: str) -> None:
    """tests/kernels/features.tile uses every builtin: each lowering rule must handle every arch."""
    path = Path(__file__).resolve().parent / "kernels" / "features.tile"
    k = compile_source(path.read_text(), str(path), arch, {"FLIP": "true"}, cache=None)
    check_manifest(k.manifest, k.hsaco)
    assert k.manifest["vgpr_spill_count"] == 0
