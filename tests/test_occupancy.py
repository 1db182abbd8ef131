"""The occupancy(N) clause end to end (docs/language.md): LLVM is told the target, the code object
reaches it, and a target the kernel cannot fit without spilling is lowered by the driver, recorded
in the manifest and reported by `tiledsl compile`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.cli import main

pytestmark = pytest.mark.compile
KERNEL = Path(__file__).parent / "kernels" / "occupancy.tile"


def compile_cli(tmp_path: Path, arch: str, defines: dict[str, int], capsys) -> tuple[dict, str]:
    out = tmp_path / "out"
    argv = ["compile", str(KERNEL), "--arch", arch, "-o", str(out), "--no-cache", "--dump-ir", str(tmp_path / "ir")]
    for name, value in defines.items():
        argv += ["-D", f"{name}={value}"]
    assert main(argv) == 0
    return json.loads((out / f"occupancy_loop.{arch}.json").read_text()), capsys.readouterr().out


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_target_reached_and_told_to_llvm(arch, tmp_path, capsys):
    m, printed = compile_cli(tmp_path, arch, {"BLOCK": 64, "OCC": 4}, capsys)
    assert m["occupancy_target"] == 4 and "occupancy_lowered_to" not in m and "out of reach" not in printed
    assert get_arch(arch).occupancy(m["vgpr_count"]) >= 4
    ll = (tmp_path / "ir" / f"occupancy_loop.{arch}.06-translate.ll").read_text()
    assert '"amdgpu-waves-per-eu"="4' in ll


def test_target_out_of_reach_is_lowered_and_reported(tmp_path, capsys):
    """128x128 f32 accumulators and both operands in registers need more than the 64 VGPRs that 8
    waves per SIMD leave a gfx942 wave: compiled for fewer, said so, no spills."""
    m, printed = compile_cli(tmp_path, "gfx942", {"BLOCK": 128, "OCC": 8}, capsys)
    assert m["occupancy_target"] == 8 and 0 <= m["occupancy_lowered_to"] < 8
    assert m["vgpr_spill_count"] == 0 and m["sgpr_spill_count"] == 0
    assert get_arch("gfx942").occupancy(m["vgpr_count"]) >= m["occupancy_lowered_to"]
    assert f"occupancy(8) would spill or is out of reach: compiled for {m['occupancy_lowered_to'] or 'no target'}" \
        in printed


def test_no_clause_no_target(tmp_path, capsys):
    m, _ = compile_cli(tmp_path, "gfx942", {"BLOCK": 64, "OCC": 0}, capsys)
    assert m["occupancy_target"] == 0
    assert "amdgpu-waves-per-eu" not in (tmp_path / "ir" / "occupancy_loop.gfx942.06-translate.ll").read_text()
