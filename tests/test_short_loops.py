"""Loops that run at most twice keep their invariant code inside (passes/lower_to_gpu.rule_for):
the loop's back edge carries `llvm.licm.disable` into the LLVM IR, and only that loop's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.cli import main

pytestmark = pytest.mark.compile
KERNEL = Path(__file__).parent / "kernels" / "short_loops.tile"


def translated(tmp_path: Path, arch: str, passes: int) -> str:
    out, dump = tmp_path / "out", tmp_path / "ir"
    argv = ["compile", str(KERNEL), "--arch", arch, "-o", str(out), "--no-cache", "--dump-ir", str(dump),
            "-D", f"PASSES={passes}"]
    assert main(argv) == 0
    return (dump / f"short_loops.{arch}.06-translate.ll").read_text()


def loop_metadata(ll: str) -> list[str]:
    """The !llvm.loop nodes the branches reference, each resolved to its text."""
    nodes = dict(re.findall(r"^(![0-9]+) = (.*)$", ll, re.M))
    return [nodes[ref] + " " + " ".join(nodes.get(m, "") for m in re.findall(r"![0-9]+", nodes[ref]))
            for ref in re.findall(r"!llvm\.loop (![0-9]+)", ll)]


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_a_two_pass_loop_keeps_its_invariants_inside(tmp_path, arch):
    loops = loop_metadata(translated(tmp_path, arch, 2))
    assert len(loops) == 1 and '"llvm.licm.disable"' in loops[0]


def test_longer_loops_are_left_to_llvm(tmp_path):
    assert not any("llvm.licm.disable" in m for m in loop_metadata(translated(tmp_path, "gfx942", 3)))
