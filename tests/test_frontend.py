"""Front-end tests: parsing, constexpr binding, scopes, types and the error messages users see."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.errors import SourceError
from tiledsl.ir.emit import emit_tile_mlir
from tiledsl.lang import ast, parser
from tiledsl.lang.checker import bind
from tiledsl.lang.parser import parse
from tiledsl.options import CompileOptions

pytestmark = pytest.mark.frontend

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NON_VALUES = (ast.DTypeLit, ast.EnumLit, ast.Slice, ast.NoneLit, ast.ListExpr)


def load_example(name: str) -> ast.Kernel:
    path = EXAMPLES / f"{name}.tile"
    return parse(path.read_text(), str(path))


def bind_src(src: str, defines: dict | None = None, arch: str = "gfx942") -> ast.BoundKernel:
    return bind(parse(src, "t.tile"), defines or {}, get_arch(arch))


def error_of(src: str, defines: dict | None = None, arch: str = "gfx942") -> SourceError:
    with pytest.raises(SourceError) as info:
        bind_src(src, defines, arch)
    return info.value


def assert_error(err: SourceError, where: str, message: str, line: str) -> None:
    """`where` is file:line:col; `line` the source line shown (stripped); the caret must sit under col."""
    text = err.render().splitlines()
    assert text[0] == f"{where}: error: {message}", text[0]
    assert text[1].startswith("    ") and text[1].strip() == line
    col = int(where.rsplit(":", 1)[1])
    assert text[2] == " " * (4 + col - 1) + "^"
    assert str(err.loc) == where


def kernel(body: str, header: str = "") -> str:
    """A small kernel around `body` (starting on line 3)."""
    return (f"kernel k{header}(x: tensor[f16](M, N), y: tensor[f32](M, N), n: i32, alpha: f32)\n"
            "    grid(cdiv(M, 64), N) {\n" + body + "\n}\n")


def walk_exprs(e: ast.Expr):
    yield e
    children: list[ast.Expr] = []
    if isinstance(e, ast.BinOp):
        children = [e.lhs, e.rhs]
    elif isinstance(e, ast.UnaryOp):
        children = [e.operand]
    elif isinstance(e, ast.Index):
        children = [e.base, *e.indices]
    elif isinstance(e, ast.Call):
        children = [*e.args, *(k.value for k in e.kwargs)]
    elif isinstance(e, ast.ListExpr):
        children = list(e.items)
    for c in children:
        yield from walk_exprs(c)


def walk_stmts(body: list[ast.Stmt]):
    for s in body:
        yield s
        if isinstance(s, ast.For):
            yield from walk_stmts(s.body)
        elif isinstance(s, ast.If):
            yield from walk_stmts(s.then_body)
            yield from walk_stmts(s.else_body)


def all_exprs(k: ast.Kernel):
    roots = list(k.grid) + ([k.waves] if k.waves else [])
    for s in walk_stmts(k.body):
        if isinstance(s, (ast.Let, ast.Assign)):
            roots.append(s.value)
        elif isinstance(s, ast.ExprStmt):
            roots.append(s.expr)
        elif isinstance(s, ast.For):
            roots += [e for e in (s.start, s.end, s.step, s.stages) if e is not None]
        elif isinstance(s, ast.If):
            roots.append(s.cond)
    for r in roots:
        yield from walk_exprs(r)


def let_types(k: ast.Kernel) -> dict[str, ast.Type]:
    return {s.name: s.value.type for s in walk_stmts(k.body) if isinstance(s, ast.Let)}


# ---------------------------------------------------------------------------------------------
# The examples.

def test_grammar_has_only_named_terminals():
    assert all(not t.name.startswith("__") for t in parser._LARK.terminals)


def test_gemm_parses():
    k = load_example("gemm")
    assert k.name == "gemm"
    assert [p.name for p in k.constexprs] == ["DT", "BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "WAVES",
                                              "EPILOGUE"]
    assert k.constexprs[-1].kind == "enum" and k.constexprs[-1].choices == ("none", "relu")
    assert [a.name for a in k.args] == ["a", "b", "c", "alpha"]
    assert k.args[0].type == ast.TensorType("DT", ("BATCH", "M", "K"))
    assert k.args[3].type == ast.ScalarType("f32")
    assert len(k.grid) == 3 and k.loc.line == 3 and k.loc.col == 1


def test_softmax_parses():
    k = load_example("softmax")
    assert k.name == "softmax" and [a.name for a in k.args] == ["x", "y"]
    assert isinstance(k.body[0], ast.Let) and k.body[0].value == ast.Const(k.body[0].value.loc,
                                                                            1.4426950408889634)


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("name", ["gemm", "softmax"])
@pytest.mark.parametrize("defines", [{}, {"DT": "bf16"}, {"DT": "f16", "WAVES": "8"}])
def test_examples_bind(name, defines, arch):
    b = bind(load_example(name), defines, get_arch(arch))
    assert b.constexpr_values["DT"] == defines.get("DT", "f16")
    assert b.waves == int(defines.get("WAVES", 4))
    for e in all_exprs(b.kernel):
        is_store = isinstance(e, ast.Call) and e.func in ("store", "atomic_add")
        assert (e.type is None) == (isinstance(e, NON_VALUES) or is_store), e


def test_bind_does_not_mutate_the_parsed_kernel():
    k = load_example("gemm")
    bind(k, {"BLOCK_M": 128}, get_arch("gfx942"))
    b = bind(k, {}, get_arch("gfx942"))
    assert let_types(b.kernel)["rows"] == ast.TileType((64,), "i32")
    assert k.args[0].type.dtype == "DT" and k.body[0].value.type is None


def test_gemm_types():
    b = bind(load_example("gemm"), {"BLOCK_M": "128", "BLOCK_K": 64, "DT": "bf16"}, get_arch("gfx950"))
    assert b.shape_symbols == ["BATCH", "M", "K", "N"]
    assert b.kernel.args[0].type == ast.TensorType("bf16", ("BATCH", "M", "K"))
    t = let_types(b.kernel)
    assert t["batch"] == ast.ScalarType("i32")
    assert t["rows"] == ast.TileType((128,), "i32")
    assert t["acc"] == ast.TileType((128, 64), "f32")
    assert t["kk"] == ast.TileType((64,), "i32")
    assert t["ta"] == ast.TileType((128, 64), "bf16")
    assert t["tb"] == ast.TileType((64, 64), "bf16")
    loop = next(s for s in b.kernel.body if isinstance(s, ast.For))
    assert loop.stages == ast.Const(loop.stages.loc, 2, type=ast.ScalarType("i32"))
    ta = next(s for s in loop.body if isinstance(s, ast.Let) and s.name == "ta").value
    assert ta.args[0].type == ast.AccessType("a", (128, 64), "bf16")
    mask = ta.kwargs[0].value
    assert mask.type == ast.TileType((128, 64), "i1")
    assert mask.lhs.lhs.type == ast.TileType((128, 1), "i32")  # rows[:, None]
    other = ta.kwargs[1].value
    assert other.type == ast.ScalarType("bf16")  # the literal 0.0 took the tensor's dtype
    dot = loop.body[-1].value
    assert dot.func == "dot" and dot.type == ast.TileType((128, 64), "f32")


def test_gemm_epilogue_is_folded():
    def top_level_ops(defines):
        body = bind(load_example("gemm"), defines, get_arch("gfx90a")).kernel.body
        assert not any(isinstance(s, ast.If) for s in body)
        return [s.value.func for s in body if isinstance(s, ast.Assign) and isinstance(s.value, ast.Call)]
    assert top_level_ops({}) == []
    assert top_level_ops({"EPILOGUE": "relu"}) == ["maximum"]


def test_softmax_types():
    b = bind(load_example("softmax"), {"BLOCK_R": 8, "BLOCK_C": 256}, get_arch("gfx1100"))
    t = let_types(b.kernel)
    assert t["log2e"] == ast.ScalarType("f32")
    assert t["row_ok"] == ast.TileType((8, 1), "i1")
    assert t["inside"] == ast.TileType((8, 256), "i1")
    assert t["v"] == ast.TileType((8, 256), "f32")
    assert t["new_max"] == ast.TileType((8,), "f32")
    assert t["run_sum"] == ast.TileType((8,), "f32")
    run_max = next(s for s in b.kernel.body if isinstance(s, ast.Let) and s.name == "run_max")
    assert run_max.value.args[1] == ast.Const(run_max.value.args[1].loc, float("-inf"),
                                              type=ast.ScalarType("f32"))


def test_runtime_if_and_else_if():
    src = kernel("    let i = program_id(0) * 64 + arange(0, 64);\n"
                 "    let v = load(y[0, i], mask=i < N, other=0);\n"
                 "    if alpha > 0 { v = v * alpha; } else if n == 0 { v = -v; } else { v = v + 1; }\n"
                 "    store(y[0, i], where(v > 0, v, 0), mask=i < N);")
    b = bind_src(src)
    ifs = [s for s in b.kernel.body if isinstance(s, ast.If)]
    assert len(ifs) == 1 and isinstance(ifs[0].else_body[0], ast.If)
    assert ifs[0].cond.type == ast.ScalarType("i1")


# ---------------------------------------------------------------------------------------------
# Syntax errors.

def syntax_error(src: str) -> SourceError:
    with pytest.raises(SourceError) as info:
        parse(src, "t.tile")
    return info.value


def test_missing_semicolon():
    err = syntax_error(kernel("    let a = 1\n    let b = 2;"))
    assert_error(err, "t.tile:3:14", "expected ';' after statement", "let a = 1")
    assert err.hint == "found 'let' instead"


def test_unexpected_brace():
    err = syntax_error(kernel("    let a = (1 + }"))
    assert_error(err, "t.tile:3:18", "unexpected '}'; expected an expression", "let a = (1 + }")


def test_syntax_error_lists_exact_expected_tokens():
    err = syntax_error(kernel("    let a = cdiv(1 2);"))
    assert_error(err, "t.tile:3:20", "unexpected number '2'; expected ')', ',' or an operator",
                 "let a = cdiv(1 2);")


def test_reserved_word_and_bad_character():
    err = syntax_error(kernel("    let for = 1;"))
    assert_error(err, "t.tile:3:9", "unexpected 'for'; expected a name", "let for = 1;")
    assert "reserved word" in err.hint
    err = syntax_error(kernel("    let a = 1 @ 2;"))
    assert_error(err, "t.tile:3:15", "unexpected character '@'", "let a = 1 @ 2;")


def test_one_kernel_per_file():
    err = syntax_error("kernel a() grid(1) {}\nkernel b() grid(1) {}\n")
    assert_error(err, "t.tile:2:1", "only one kernel per file, but 'b' follows 'a'", "kernel b() grid(1) {}")
    assert syntax_error("# nothing here\n").message.startswith("no kernel found")


# ---------------------------------------------------------------------------------------------
# Checker errors.

def test_unknown_name_suggests():
    err = error_of(kernel("    let rows = arange(0, 64);\n    let q = rowz + 1;"))
    assert_error(err, "t.tile:4:13", "unknown name 'rowz'", "let q = rowz + 1;")
    assert err.hint == "did you mean 'rows'?"


def test_unknown_function():
    err = error_of(kernel("    let q = expm1(alpha);"))
    assert_error(err, "t.tile:3:13", "unknown function 'expm1'", "let q = expm1(alpha);")
    assert err.hint == "did you mean 'exp'?"


def test_typo_in_a_folded_branch_is_still_reported():
    src = kernel("    if F { let q = alhpa; }", header="[F: bool = false]")
    assert_error(error_of(src), "t.tile:3:20", "unknown name 'alhpa'", "if F { let q = alhpa; }")


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_dot_shape_mismatch(arch):
    err = error_of(kernel("    let a = zeros([64, 32], f16);\n    let b = zeros([16, 64], f16);\n"
                          "    let c = dot(a, b);"), arch=arch)
    assert_error(err, "t.tile:5:20", "dot: a is tile[64, 32] of f16 but b is tile[16, 64] of f16 "
                 "(b is [K, N]): inner dims 32 and 16 differ", "let c = dot(a, b);")


def test_dot_trans_b_and_acc():
    ok = kernel("    let a = zeros([64, 32], f16);\n    let b = zeros([16, 32], f16);\n"
                "    let c = dot(a, b, zeros([64, 16], f32), trans_b=true);")
    assert let_types(bind_src(ok).kernel)["c"] == ast.TileType((64, 16), "f32")
    err = error_of(ok.replace("zeros([64, 16], f32)", "zeros([64, 16], f16)"))
    assert err.message == "dot: acc must be tile[64, 16] of f32, got tile[64, 16] of f16"
    err = error_of(ok.replace("[16, 32], f16", "[8, 32], f16"))
    assert err.message.startswith("dot: N=8 is too small")


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_dot_dtype_support_follows_arch(arch, dtype):
    a = get_arch(arch)
    assert a.supports_dot(dtype)
    bind(load_example("gemm"), {"DT": dtype}, a)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_f8_follows_the_arch(arch):
    """8-bit floats exist where the arch has an fp8 format (gfx942 FNUZ, gfx950 and gfx1201 OCP):
    elsewhere the checker refuses the first f8 value, at its source, naming dtype and arch."""
    a = get_arch(arch)
    cast_src = ("kernel k(y: tensor[f32](N)) grid(1) {\n let i = arange(0, 64);\n"
                " store(y[i], cast(cast(i, f8e5m2), f32), mask=i < N);\n}\n")
    if a.fp8_flavour is None:
        for example, (line, col), tensor in (("gemm", (17, 23), "a"), ("softmax", (16, 27), "x")):
            with pytest.raises(SourceError) as info:
                bind(load_example(example), {"DT": "f8e4m3"}, a)
            assert info.value.message == (f"load: '{tensor}' holds f8e4m3: {arch} has no 8-bit float instructions, "
                                          "so it cannot hold f8e4m3 values (fp8 needs gfx942, gfx950 or gfx1201)")
            assert (info.value.loc.line, info.value.loc.col) == (line, col)
        with pytest.raises(SourceError, match=f"cast to f8e5m2: {arch} has no 8-bit float instructions") as info:
            bind(parse(cast_src, "k.tile"), {}, a)
        assert (info.value.loc.line, info.value.loc.col) == (3, 27)  # at the dtype
        return
    for dtype in ("f8e4m3", "f8e5m2"):
        bind(load_example("gemm"), {"DT": dtype}, a)
    bind(parse(cast_src, "k.tile"), {}, a)
    # softmax pads with other=-inf: only OCP's e5m2 has an infinity.
    bind(load_example("softmax"), {"DT": "f8e5m2"}, a) if a.fp8_flavour == "ocp" else None
    with pytest.raises(SourceError) as info:
        bind(load_example("softmax"), {"DT": "f8e4m3"}, a)
    largest = {"fnuz": 240, "ocp": 448}[a.fp8_flavour]
    assert info.value.message == (f"-inf is out of range for f8e4m3 (with load from 'x'): f8e4m3 on {arch} is "
                                  f"{a.fp8_flavour.upper()}, whose largest value is {largest} (and which has no "
                                  "infinity)"), info.value.message


def test_unknown_define_lists_known():
    with pytest.raises(SourceError) as info:
        bind(load_example("gemm"), {"BLOCK_MM": "64"}, get_arch("gfx942"))
    assert info.value.message == ("unknown constexpr '-D BLOCK_MM': kernel 'gemm' has constexprs DT, BLOCK_M, "
                                  "BLOCK_N, BLOCK_K, STAGES, WAVES, EPILOGUE")
    assert info.value.hint == "did you mean 'BLOCK_M'?"


@pytest.mark.parametrize("defines, message, col", [
    ({"BLOCK_M": "sixty"}, "-D BLOCK_M=sixty: BLOCK_M is an int constexpr, expected an integer (such as 64, -3 or "
     "0x40), got 'sixty'", 30),
    # int() alone would take other scripts' digits, underscores and fail on leading zeros
    ({"BLOCK_M": "\u0666\u0664"}, "-D BLOCK_M=\u0666\u0664: BLOCK_M is an int constexpr, expected an integer (such "
     "as 64, -3 or 0x40), got '\u0666\u0664'", 30),
    ({"BLOCK_M": "6_4"}, "-D BLOCK_M=6_4: BLOCK_M is an int constexpr, expected an integer (such as 64, -3 or "
     "0x40), got '6_4'", 30),
    ({"BLOCK_M": "064"}, "-D BLOCK_M=064: BLOCK_M is an int constexpr, expected an integer (such as 64, -3 or "
     "0x40), got '064'", 30),
    ({"DT": "f64"}, "-D DT=f64: DT is a dtype constexpr, expected a dtype (i1, i32, f32, f16, bf16, "
     "f8e4m3, f8e5m2), got 'f64'", 13),
    ({"EPILOGUE": "gelu"}, "-D EPILOGUE=gelu: EPILOGUE is an enum(none, relu) constexpr, expected one of "
     "none, relu, got 'gelu'", 46),
])
def test_bad_define_value(defines, message, col):
    with pytest.raises(SourceError) as info:
        bind(load_example("gemm"), defines, get_arch("gfx942"))
    assert info.value.message == message
    assert (info.value.loc.line, info.value.loc.col) == (3 if col != 46 else 4, col)


def test_missing_constexpr_value_and_bool_define():
    src = kernel("    if F { let q = B; }", header="[B: int, F: bool = false]")
    err = error_of(src)
    assert_error(err, "t.tile:1:10", "constexpr 'B' has no default and no value", src.splitlines()[0])
    assert err.hint == "pass -D B=<int>"
    assert bind_src(src, {"B": "3", "F": "true"}).constexpr_values == {"B": 3, "F": True}


def test_assign_must_keep_type():
    err = error_of(kernel("    let acc = zeros([64, 64], f32);\n    for i in range(0, n) {\n"
                          "        acc = zeros([64, 64], f16);\n    }"))
    assert_error(err, "t.tile:5:15", "cannot assign tile[64, 64] of f16 to 'acc', which is tile[64, 64] of f32",
                 "acc = zeros([64, 64], f16);")
    assert "cast(..., f32)" in err.hint


def test_assign_undeclared_and_let_twice():
    err = error_of(kernel("    total = 1;"))
    assert_error(err, "t.tile:3:5", "assignment to undeclared variable 'total'", "total = 1;")
    assert "let" in err.hint
    err = error_of(kernel("    let t = 1;\n    let t = 2;"))
    assert_error(err, "t.tile:4:5", "'t' is already declared at t.tile:3:5 (as a variable)", "let t = 2;")


def test_expression_result_unused():
    err = error_of(kernel("    let t = 1;\n    t + 1;"))
    assert_error(err, "t.tile:4:5", "expression result unused", "t + 1;")


@pytest.mark.parametrize("body, where, message", [
    ("    let r = arange(0, 80);", "t.tile:3:13", "tile dims must be powers of two, got 80; pad to 128 and mask"),
    ("    let r = arange(0, 64) * 0.5;", "t.tile:3:29", "float literal 0.5 cannot be used with i32 (in '*')"),
    ("    let r = arange(0, 64) / 2;", "t.tile:3:13",
     "'/' needs float operands, got tile[64] of i32 and i32 scalar"),
    ("    let r = zeros([64], f16) + zeros([64], f32);", "t.tile:3:13",
     "'+': operands have different dtypes, tile[64] of f16 and tile[64] of f32"),
    ("    let r = zeros([64], f16) + zeros([64, 1], f16);", "t.tile:3:13",
     "'+': cannot broadcast tile[64] of f16 with tile[64, 1] of f16: ranks differ"),
    ("    let r = x;", "t.tile:3:13", "tensor argument 'x' is not a value"),
    ("    let r = program_id(2);", "t.tile:3:24", "program_id(2) but the grid has 2 dimension(s)"),
    ("    let r = exp2(zeros([4], f16));", "t.tile:3:18", "exp2 needs f32, got tile[4] of f16"),
    ("    let r = load(x[0]);", "t.tile:3:18", "'x' is tensor[f16](M, N) with 2 dims, but 1 index given"),
    ("    store(x[0, arange(0, 64)], zeros([64], f32));", "t.tile:3:32",
     "store: value is tile[64] of f32 but 'x' holds f16"),
    ("    atomic_add(x[0, 0], 1.0);", "t.tile:3:16", "atomic_add needs an f32 tensor, but 'x' is tensor[f16](M, N)"),
    ("    if arange(0, 4) < 2 { }", "t.tile:3:8",
     "if condition must be an i1 scalar (the same in every lane), got tile[4] of i1"),
    ("    let r = max(alpha, 1.0);", "t.tile:3:17", "max reduces a tile along an axis, got f32 scalar"),
    ("    let r = tanh(alpha, approx=alpha > 0.0);", "t.tile:3:32",
     "tanh: approx must be a compile-time bool (true, false or a bool constexpr)"),
    ("    let r = load(x[0, 0], prefetch=1);", "t.tile:3:36",
     "load: prefetch must be a compile-time bool (true, false or a bool constexpr)"),
    ("    for i in range(0, n) stages(2, reuse=alpha > 0.0) { }", "t.tile:3:42",
     "stages: reuse must be a compile-time bool (true, false or a bool constexpr)"),
    ("    for i in range(0, n) stages(2, early=true) { }", "t.tile:3:36", "stages(...) has no option 'early'"),
    ("    for i in range(0, n) stages(4096) { }", "t.tile:3:33", "stages must be between 1 and 8, got 4096"),
    ("    for i in range(0, n) stages(0) { }", "t.tile:3:33", "stages must be between 1 and 8, got 0"),
    ("    for i in range(0, n) stages(3, reuse=true) { }", "t.tile:3:42",
     "stages(N, reuse=true) needs N = 2, got 3: with more stages the look-ahead tile is never live beside "
     "the one it replaces"),
])
def test_type_errors(body, where, message):
    assert_error(error_of(kernel(body)), where, message, body.strip())


def test_occupancy_clause_binds_per_variant():
    src = ("kernel k[OCC: int = 2](x: tensor[f32](N)) grid(1) waves(4) occupancy(OCC) {\n"
           "    store(x[arange(0, 64)], zeros([64], f32));\n}\n")
    assert bind_src(src).occupancy == 2
    assert bind_src(src, {"OCC": 0}).occupancy == 0  # 0: the compiler's choice
    assert bind_src(src.replace(" occupancy(OCC)", "")).occupancy == 0


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_occupancy_out_of_range_is_located(arch):
    src = ("kernel k[OCC: int = 2](x: tensor[f32](N)) grid(1) occupancy(OCC) {\n"
           "    store(x[arange(0, 64)], zeros([64], f32));\n}\n")
    top = get_arch(arch).max_waves_per_simd
    err = error_of(src, {"OCC": top + 1}, arch)
    assert_error(err, "t.tile:1:61", f"occupancy is waves per SIMD, 1 to {top} on {arch} (0: the compiler's "
                 f"choice), got {top + 1}", "kernel k[OCC: int = 2](x: tensor[f32](N)) grid(1) occupancy(OCC) {")


def test_occupancy_takes_compile_time_ints_only():
    src = ("kernel k(x: tensor[f32](N), n: i32) grid(1) occupancy(n) {\n"
           "    store(x[arange(0, 64)], zeros([64], f32));\n}\n")
    err = error_of(src)
    assert "occupancy(...)" in str(err) and str(err.loc).startswith("t.tile:1:")


def test_grid_picks_where_on_a_bool_constexpr():
    """grid(...) may choose with where() on a bool constexpr (a kernel with an optional second
    walk: tiledsl/kernels/fmha_bwd_dq_dk_dv.tile); it folds before the host sees the grid."""
    from tiledsl.grid import render_grid

    src = ("kernel k[TWO: bool = false](x: tensor[f32](N), m: i32) grid(maximum(cdiv(N, 64), where(TWO, m, 0))) {\n"
           "    store(x[arange(0, 64)], zeros([64], f32));\n}\n")
    assert render_grid(bind_src(src).kernel.grid)[0] == "maximum(cdiv(N, 64), 0)"
    assert render_grid(bind_src(src, {"TWO": True}).kernel.grid)[0] == "maximum(cdiv(N, 64), m)"
    err = error_of(src.replace("where(TWO, m, 0)", "where(m > 1, m, 0)"))
    assert "grid(...) cannot call where()" in str(err) and "where() on a bool constexpr" in err.render()


def test_stages_reuse_marks_the_loop():
    """stages(2, reuse=B) with B a bool constexpr: the loop carries tile.reuse only when B is true."""
    src = ("kernel k[R: bool = false](x: tensor[f32](N), n: i32) grid(1) {\n"
           "    let acc = zeros([64], f32);\n"
           "    for i in range(0, n) stages(2, reuse=R) {\n"
           "        acc = acc + load(x[i * 64 + arange(0, 64)]);\n"
           "    }\n"
           "    store(x[arange(0, 64)], acc);\n}\n")
    for flag in (False, True):
        mlir = emit_tile_mlir(bind_src(src, {"R": flag}), get_arch("gfx942"), CompileOptions(arch="gfx942"))
        assert "tile.stages = 2" in mlir and ("tile.reuse" in mlir) == flag



def test_constant_cdiv_by_zero_is_an_error():
    err = error_of("kernel k(o: tensor[i32](1)) grid(1) {\n    store(o[0], cdiv(7, 0));\n}\n")
    assert_error(err, "t.tile:2:17", "division by zero in a constant expression (cdiv(7, 0))",
                 "store(o[0], cdiv(7, 0));")


def test_constant_shifts_drop_the_bits_past_31_as_at_run_time():
    """`1 << 31` folds to the i32 the hardware's shift gives (-2^31), where it was refused as an
    overflow; the count is taken modulo 32, and other operations still may not overflow."""
    src = "kernel k(o: tensor[i32](4)) grid(1) {\n    store(o[arange(0, 4)], full([4], %s, i32));\n}\n"
    for expr, value in (("1 << 31", -2**31), ("3 << 31", -2**31), ("-1 << 31", -2**31), ("1 << 32", 1),
                        ("2147483647 << 1", -2), ("1 << 30", 2**30)):
        mlir = emit_tile_mlir(bind_src(src % expr), get_arch("gfx942"), CompileOptions(arch="gfx942"))
        assert f"arith.constant {value} : i32" in mlir, expr
    err = error_of(src % "(1 << 30) * 2")
    assert_error(err, "t.tile:2:38", "constant expression 1073741824 * 2 = 2147483648 overflows i32",
                 "store(o[arange(0, 4)], full([4], (1 << 30) * 2, i32));")


def _folded_f32(expr: str) -> float:
    """The f32 constant `expr` folds to, as a weak literal (it takes an f16 tile's dtype)."""
    src = kernel(f"    let v = load(x[0, arange(0, 64)]) * {expr};")
    t = let_types(bind_src(src).kernel)
    assert t["v"] == ast.TileType((64,), "f16"), expr  # weak, like a literal (not an f32 that needs a cast)
    let = next(s for s in bind_src(src).kernel.body if isinstance(s, ast.Let) and s.name == "v")
    assert isinstance(let.value.rhs, ast.Const), expr
    return let.value.rhs.value


def test_math_builtins_of_constants_fold_to_f32_literals():
    """exp2(-11.0) and the like fold like `BLOCK_M * 2` does: the exact value rounded to f32 (from
    the argument taken to f32 first), IEEE's results at the edges, NaN outside the domain."""
    f32 = lambda v: float(np.float32(v))  # noqa: E731
    cases = {"exp2(-11.0)": 2.0 ** -11, "log2(8)": 3.0, "exp(1.0)": f32(math.e), "log(2.0)": f32(math.log(2)),
             "sqrt(2.0)": f32(math.sqrt(2)), "rsqrt(4.0)": 0.5, "rcp(3.0)": f32(1 / 3), "abs(-3)": 3.0,
             "tanh(0.5)": f32(math.tanh(0.5)), "tanh(0.5, approx=true)": f32(math.tanh(0.5)),
             "log2(1.0 + exp2(-11.0))": f32(math.log2(f32(1 + 2.0 ** -11))), "exp2(0.1)": f32(2 ** f32(0.1)),
             "log2(0.0)": -math.inf, "log(-0.0)": -math.inf, "rcp(-0.0)": -math.inf, "rsqrt(0.0)": math.inf,
             "exp(1000.0)": math.inf, "exp2(200.0)": math.inf, "exp2(-200.0)": 0.0, "exp2(-inf)": 0.0}
    for expr, want in cases.items():
        assert _folded_f32(expr) == want, expr
    for expr in ("log2(-1.0)", "sqrt(-1.0)", "log(-inf)", "exp2(nan)"):
        assert math.isnan(_folded_f32(expr)), expr
    assert math.copysign(1, _folded_f32("sqrt(-0.0)")) == -1


def test_where_of_constants_folds_and_feeds_a_fold():
    """where(C, a, b) with a compile-time C and constant a, b is a constant, so a float builtin of
    it folds too; with a tile operand it stays a where (its result is a tile)."""
    src = "kernel k[F: bool = true](o: tensor[f32](64)) grid(1) {\n    store(o[arange(0, 64)], %s);\n}\n"
    for flag, want in ((True, "arith.constant 3.000000e+00 : f32"), (False, "arith.constant 1.000000e+00 : f32")):
        mlir = emit_tile_mlir(bind_src(src % "full([64], log2(where(F, 8.0, 2.0)), f32)", {"F": flag}),
                              get_arch("gfx942"), CompileOptions(arch="gfx942"))
        assert want in mlir and "math.log2" not in mlir, flag
    store = bind_src(src % "where(F, cast(arange(0, 64), f32), 2.0)").kernel.body[0].expr
    assert store.args[1].func == "where" and store.args[1].type == ast.TileType((64,), "f32")


def test_math_builtin_of_a_constant_let_folds_in_the_emitter():
    """`let lift = 1.0 + exp2(-11.0);` is a typed f32 constant: log2(lift) and rcp(lift) are emitted as
    constants (fmha_fwd.tile's P lift), not as instructions on a constant."""
    src = ("kernel k(o: tensor[f32](64), s: f32) grid(1) {\n    let lift = 1.0 + exp2(-11.0);\n"
           "    store(o[arange(0, 64)], full([64], s - log2(lift), f32) * rcp(lift) + exp2(s));\n}\n")
    mlir = emit_tile_mlir(bind_src(src), get_arch("gfx942"), CompileOptions(arch="gfx942"))
    lift = np.float32(1 + 2.0 ** -11)
    constants = {np.float32(c) for c in re.findall(r"arith.constant ([-+.\dEe]+) : f32", mlir)}
    assert {np.float32(math.log2(lift)), np.float32(1 / np.float64(lift))} <= constants, constants
    assert "math.log2" not in mlir and "tile.rcp" not in mlir
    assert "math.exp2" in mlir  # of the argument s: not a constant


def test_a_dot_no_instruction_tiles_says_what_would():
    from tiledsl.passes.assign_layouts import dot_config

    with pytest.raises(ValueError, match=r"tiles a \[32, 32\] \+= \[32, 16\] @ \[16, 32\] dot over 2 waves "
                                         r"\(instructions: 32x32x16, 16x16x32\); it fits over 1 wave$"):
        dot_config(get_arch("gfx950"), "f16", 32, 32, 16, 2)
    with pytest.raises(ValueError, match=r"; K = 20 is a multiple of no instruction's K$"):
        dot_config(get_arch("gfx942"), "f16", 32, 32, 20, 1)


def test_integer_literals_in_hex_octal_and_binary():
    """Source takes the forms -D values take (`cast(0x10, f32)` was a syntax error)."""
    src = ("kernel k(o: tensor[i32](0x40)) grid(1) {\n"
           "    store(o[arange(0, 0x40)], full([64], 0x10 + 0b11 + 0o7 + 0XfF, i32));\n}\n")
    mlir = emit_tile_mlir(bind_src(src), get_arch("gfx942"), CompileOptions(arch="gfx942"))
    assert "arith.constant 281 : i32" in mlir and "64xi32" in mlir


def test_kernel_names_that_would_not_fit_a_file_name_are_an_error():
    src = "kernel %s(o: tensor[i32](1)) grid(1) {\n    store(o[0], 1);\n}\n"
    bind_src(src % ("k" * 128))
    err = error_of(src % ("k" * 129))
    assert err.loc.line == 1 and err.loc.col == 1
    assert "kernel name of 129 characters: at most 128" in str(err)


def test_loop_index_that_would_wrap_is_an_error():
    err = error_of("kernel k(o: tensor[i32](1)) grid(1) {\n    for i in range(0, 2147483647, 4) {\n"
                   "        store(o[0], i);\n    }\n}\n")
    assert_error(err, "t.tile:2:23", "range end 2147483647 lets the i32 index pass 2147483647 (step 4), where it "
                 "wraps and the loop would not end",
                 "for i in range(0, 2147483647, 4) {")


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_builtins_by_keyword_compile_as_by_position(arch):
    """Keyword arguments to builtins (`max(x=t, axis=0)`, `arange(start=0, end=64)`, ...) are the
    positional ones: the emitter read some builtins' arguments by position only, and a keyword
    gave an internal compiler error."""
    from tiledsl.driver import compile_source

    kernels = Path(__file__).resolve().parent / "kernels"
    by_position, by_keyword = (compile_source((kernels / f"builtins_by_{how}.tile").read_text(),
                                              f"builtins_by_{how}.tile", arch)
                               for how in ("position", "keyword"))
    assert by_keyword.hsaco == by_position.hsaco
