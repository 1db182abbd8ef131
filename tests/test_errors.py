"""Bad input through the CLI: a clear message with its location, exit status 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiledsl.cli import main

pytestmark = pytest.mark.frontend
HERE = Path(__file__).resolve().parent / "errors"

CASES = [
    ("syntax.tile", "gfx942", ":2:26: error: expected ';' after statement", "let a = arange(0, 64)"),
    ("unknown_name.tile", "gfx1100", ":3:22: error:", "unknown name 'b'"),
    ("dot_shape.tile", "gfx90a", ":5:23: error: dot: a is tile[64, 32] of f16 but b is", "32 and 64 differ"),
    ("fp8_dot.tile", "gfx90a", ":5:15: error: dot on f8e4m3 is not supported on gfx90a", "supported: f16, bf16"),
    ("lds_too_large.tile", "gfx942", ":4:15: error: this tile needs 133120 bytes of LDS", "65536 bytes"),
    # gfx950 has the LDS (160 KiB) but not the registers for a 256x256 tile over 4 waves.
    ("lds_too_large.tile", "gfx950", ":1:1: error: the kernel spills", "use smaller block sizes"),
]


@pytest.mark.parametrize("name,arch,where,what", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_source_error(name: str, arch: str, where: str, what: str, tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["compile", str(HERE / name), "--arch", arch, "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2, err
    assert f"{name}{where}" in err and what in err, err
    assert "^" in err, "the source line with a caret is shown"
    assert "Traceback" not in err


def test_unknown_arch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["compile", str(HERE / "syntax.tile"), "--arch", "gfx1030", "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2
    assert "gfx1030" in err and "gfx90a, gfx942, gfx950, gfx1100, gfx1201" in err
    assert "Traceback" not in err


def test_errors_survive_pickling() -> None:
    """Errors cross process pools (parallel builds, the tuner) with their whole message."""
    import pickle

    from tiledsl.errors import CompileError, SourceError, SourceLocation

    src = SourceError("bad thing", SourceLocation("k.tile", 1, 5), "let a = 1;", hint="do this")
    back = pickle.loads(pickle.dumps(src))
    assert str(back) == str(src) and back.hint == "do this" and back.loc == src.loc
    comp = CompileError("llvm", "it broke", saved_input="/tmp/x.mlir")
    back = pickle.loads(pickle.dumps(comp))
    assert str(back) == str(comp) and back.stage == "llvm"
