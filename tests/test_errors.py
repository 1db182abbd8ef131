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
    ("fp8_dot.tile", "gfx90a", ":4:19: error: load: 'a' holds f8e4m3: gfx90a has no 8-bit float instructions",
     "fp8 needs gfx942, gfx950 or gfx1201"),
    ("fp8_dot.tile", "gfx1100", ":4:19: error: load: 'a' holds f8e4m3: gfx1100 has no 8-bit float instructions",
     "fp8 needs gfx942, gfx950 or gfx1201"),
    ("lds_too_large.tile", "gfx942", ":4:15: error: this tile needs 133120 bytes of LDS", "65536 bytes"),
    ("literal_range.tile", "gfx942", ":4:30: error: 70000.0 is out of range for f16 (with '+'): it would round to "
     "infinity", "write inf if infinity is meant"),
    ("rank3.tile", "gfx1100", ":4:20: error: tiles have at most 2 dims, this is tile[4, 1, 1] of i32",
     "fold two axes into one"),
    ("static_dim.tile", "gfx1201", ":2:19: error: tensor 'x': static dim 4294967296 is above the i32 limit 2147483647",
     "kernel static_dim("),
    # gfx950 has the LDS (160 KiB) but not the registers for a 256x256 tile over 4 waves.
    ("lds_too_large.tile", "gfx950", ":1:1: error: the kernel spills",
     "hint: tiledsl compile --allow-spills, or CompileOptions(allow_spills=True), accepts it anyway"),
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


def _deep_kernel(shape: str, n: int) -> str:
    """A kernel nesting n levels of one shape: an n-term sum, n unary minuses or n nested ifs."""
    body = {"sum": "let v = load(x[i])" + " + 1.0" * n + ";\n store(x[i], v, mask=i < N);",
            "minus": "let v = " + "-" * n + "load(x[i]);\n store(x[i], v, mask=i < N);",
            "ifs": "if N > 0 { " * n + "store(x[i], load(x[i]), mask=i < N);" + " }" * n}[shape]
    return "kernel k(x: tensor[f32](N)) grid(1) {\n let i = arange(0, 64);\n " + body + "\n}\n"


# Per shape: a nesting past the parser's limit, and one just under it.
DEPTHS = {"sum": (2000, 980), "minus": (1000, 980), "ifs": (600, 490)}


@pytest.mark.parametrize("shape", DEPTHS)
def test_deep_nesting_is_a_located_error(shape: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Fuzzing found RecursionErrors (an internal error, whose report then recursed too)."""
    src = tmp_path / "deep.tile"
    src.write_text(_deep_kernel(shape, DEPTHS[shape][0]))
    status = main(["compile", str(src), "--arch", "gfx942", "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "deep.tile:3:" in err and "nests expressions and blocks more than 1000 levels deep" in err
    assert "internal compiler error" not in err and "Traceback" not in err


@pytest.mark.parametrize("shape", DEPTHS)
def test_just_under_the_nesting_limit_compiles(shape: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every stage walks the program recursively: nesting just under the parser's limit must
    compile (a 99-term sum was refused when the limit was 100 levels)."""
    src = tmp_path / "deep.tile"
    src.write_text(_deep_kernel(shape, DEPTHS[shape][1]))
    assert main(["compile", str(src), "--arch", "gfx1100", "-o", str(tmp_path / "out"), "--no-cache"]) == 0, \
        capsys.readouterr().err


@pytest.mark.parametrize("separator", ["\f", "\x0b", "\u2028", "\x1c"])
def test_caret_lines_follow_the_parser(separator: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only '\\n' ends a line for the parser; the error display used str.splitlines, which also
    splits at form feeds, U+2028 and others, and put the caret on the wrong line."""
    src = tmp_path / "sep.tile"
    src.write_text("kernel k(x: tensor[f32](N)) grid(1) {\n let i = arange(0, 64);" + separator
                   + " store(x[i], load(x[i]) + nope);\n}\n")
    assert main(["compile", str(src), "--arch", "gfx942", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    if separator in "\f":  # whitespace to the lexer: the unknown name is reported
        at = lines[0].index("error:")
        assert lines[0].startswith(f"{src}:2:") and "unknown name 'nope'" in lines[0][at:]
        caret = lines[2].index("^")
        assert lines[1][caret:caret + 4] == "nope", err
    else:  # not whitespace: named, not shown raw
        assert f"{src}:2:24: error: unexpected character {ascii(separator)}" in err, err
        assert lines[2].index("^") == lines[1].index(" store") - 1, err  # under the (blanked) separator


def test_a_long_line_shows_a_window_around_the_caret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A generated source with a very long line: the error shows 100 columns around the caret,
    not the whole line twice."""
    src = tmp_path / "long.tile"
    padding = " i = i + 0;" * 5_000  # 55,000 columns on either side of the error
    src.write_text(f"kernel k(x: tensor[f32](N)) grid(1) {{\n let i = arange(0, 64);{padding}"
                   f" store(x[i], load(x[i]) + nope);{padding}\n}}\n")
    assert main(["compile", str(src), "--arch", "gfx942", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "unknown name 'nope'" in lines[0] and len(err) < 1000
    caret = lines[2].index("^")
    assert lines[1].startswith("    ...") and lines[1].endswith("...") and lines[1][caret:caret + 4] == "nope"


def test_source_encodings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A byte that is not UTF-8 is located like any source error; a UTF-8 byte-order mark is no
    error; a code object is not a compiler input."""
    src = tmp_path / "latin1.tile"
    src.write_bytes(b"kernel k(x: tensor[f32](N)) grid(1) {\n let i = arange(0, 64); # caf\xe9\n}\n")
    assert main(["compile", str(src), "--arch", "gfx942", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{src}:2:30: error: byte 0xe9 is not UTF-8 text" in err and "hint: save the file as UTF-8" in err
    lines = err.splitlines()
    assert lines[2].index("^") == lines[1].index("\ufffd")
    bom = tmp_path / "bom.tile"
    bom.write_bytes(b"\xef\xbb\xbf" + (HERE / "syntax.tile").read_bytes())
    assert main(["compile", str(bom), "--arch", "gfx942", "-o", str(tmp_path / "out")]) == 2
    assert f"{bom}:2:26: error: expected ';' after statement" in capsys.readouterr().err
    hsaco = tmp_path / "k.hsaco"
    hsaco.write_bytes(b"\x7fELF\xff\xfe")
    assert main(["compile", str(hsaco), "--arch", "gfx942", "-o", str(tmp_path / "out")]) == 2
    assert f"cannot compile '{hsaco}': expected one of .tile, .tile.mlir" in capsys.readouterr().err


def test_internal_error_report_goes_to_the_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from tiledsl import driver

    def boom(*args, **kwargs):
        raise RuntimeError("unexpected")

    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(driver, "compile_file", boom)
    assert main(["compile", str(HERE / "syntax.tile"), "--arch", "gfx942", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    saved = Path(err.split("the traceback is saved at ")[1].split()[0])
    assert saved.parent == tmp_path / "cache" / "reports" and "RuntimeError: unexpected" in saved.read_text()


def test_a_tile_too_large_for_the_registers_fails_fast(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by fuzzing: it compiled for minutes before failing on spills."""
    src = tmp_path / "big.tile"
    src.write_text("kernel k(x: tensor[f32](N, M)) grid(1) {\n let i = arange(0, 4096);\n"
                   " store(x[i[:, None], i[None, :]], zeros([4096, 4096], f32));\n}\n")
    for arch, lanes, regs in (("gfx942", 64, 512), ("gfx1100", 32, 256)):
        assert main(["compile", str(src), "--arch", arch, "-o", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert f"big.tile:3:35: error: this tile[4096, 4096] of f32 holds 16777216 values: at least " \
               f"{16777216 // (4 * lanes)} registers per lane over 4 waves of {lanes} lanes, but a {arch} lane has " \
               f"{regs}" in err, err
