"""Grid formulas: render a bound kernel's grid expressions as text, evaluate that text safely.

The manifest stores the launch grid as text ("cdiv(M, 64)") so a launcher in any language can
compute it from the run-time shapes without the compiler. The text uses Python's expression
syntax, so evaluation parses it with `ast` and walks a small whitelist — never `eval`.
"""

from __future__ import annotations

import ast as pyast
from collections.abc import Mapping, Sequence

from tiledsl.errors import SourceError, TileError
from tiledsl.lang import ast

# Python's binding strength for the operators a grid expression may use (higher binds tighter).
_PRECEDENCE = {"|": 1, "^": 2, "&": 3, "<<": 4, ">>": 4, "+": 5, "-": 5,
               "*": 6, "/": 6, "//": 6, "%": 6}
_UNARY_PRECEDENCE = 7
_FUNCS = ("cdiv", "maximum", "minimum", "max", "min")
_MAX_FORMULA = 2000  # characters; a grid formula is a handful of symbols
_MAX_DIM = 2**32 - 1  # HIP takes grid sizes as 32-bit unsigned values


def render_expr(expr: ast.Expr, nonneg: frozenset[str] = frozenset()) -> str:
    """DSL expression -> Python-syntax text with the minimal parentheses. `nonneg`: the names
    known to be >= 0 (shape symbols), where the kernel language's truncating // and % agree with
    the formula language's flooring ones (see _render)."""
    return _render(expr, 0, nonneg)


def render_grid(exprs: Sequence[ast.Expr], nonneg: frozenset[str] = frozenset()) -> list[str]:
    """The 1-3 grid expressions of a bound kernel, padded to three dims with "1"."""
    texts = [_readable(render_expr(e, nonneg), e, "grid expression") for e in exprs]
    return texts + ["1"] * (3 - len(texts))


def _readable(text: str, expr: ast.Expr, what: str) -> str:
    """`text`, if a launcher will read it: formulas are bounded (_MAX_FORMULA) where they are read."""
    if len(text) > _MAX_FORMULA:
        raise SourceError(f"this {what} is {len(text)} characters as a host formula, more than the {_MAX_FORMULA} a "
                          "launcher reads", expr.loc, hint="compute the value on the host and pass it as an argument")
    return text


def _nonnegative(expr: ast.Expr, nonneg: frozenset[str]) -> bool:
    """Is `expr` >= 0 whatever the run-time values (its names among `nonneg`)?"""
    if isinstance(expr, ast.Const):
        return isinstance(expr.value, int) and not isinstance(expr.value, bool) and expr.value >= 0
    if isinstance(expr, ast.Name):
        return expr.id in nonneg
    if isinstance(expr, ast.BinOp) and expr.op in ("+", "*", "//", "%", ">>", "&", "|"):
        return _nonnegative(expr.lhs, nonneg) and _nonnegative(expr.rhs, nonneg)
    if isinstance(expr, ast.Call) and expr.func in _FUNCS and not expr.kwargs:
        return all(_nonnegative(a, nonneg) for a in expr.args)
    return False


def _render(expr: ast.Expr, parent: int, nonneg: frozenset[str] = frozenset()) -> str:
    if isinstance(expr, ast.Const):
        if isinstance(expr.value, bool) or not isinstance(expr.value, int):
            raise _unrenderable(expr, f"the constant {expr.value!r} is not an integer")
        text = str(expr.value)
        # A negative literal under a tighter operator needs parentheses like any unary minus.
        return f"({text})" if expr.value < 0 and parent >= _UNARY_PRECEDENCE else text
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.UnaryOp) and expr.op in ("-", "+"):
        text = expr.op + _render(expr.operand, _UNARY_PRECEDENCE, nonneg)
        return f"({text})" if parent > _UNARY_PRECEDENCE else text
    if isinstance(expr, ast.BinOp) and expr.op in ("//", "%") and not (
            _nonnegative(expr.lhs, nonneg) and _nonnegative(expr.rhs, nonneg)):
        # The kernel language's // and % truncate toward zero (C's); the formula language's floor
        # (Python's) and its / truncates. They differ only for a negative operand: then the
        # quotient is written a / b and the remainder a - b * (a / b).
        lhs, rhs = _render(expr.lhs, _UNARY_PRECEDENCE, nonneg), _render(expr.rhs, _UNARY_PRECEDENCE, nonneg)
        text = f"{lhs} / {rhs}" if expr.op == "//" else f"{lhs} - {rhs} * ({lhs} / {rhs})"
        prec = _PRECEDENCE["/" if expr.op == "//" else "-"]
        return f"({text})" if prec < parent else text
    if isinstance(expr, ast.BinOp) and expr.op in _PRECEDENCE:
        prec = _PRECEDENCE[expr.op]
        # Operators are left-associative: the right operand needs parentheses at equal strength.
        text = f"{_render(expr.lhs, prec, nonneg)} {expr.op} {_render(expr.rhs, prec + 1, nonneg)}"
        return f"({text})" if prec < parent else text
    if isinstance(expr, ast.Call) and expr.func in _FUNCS and not expr.kwargs:
        return f"{expr.func}({', '.join(_render(a, 0, nonneg) for a in expr.args)})"
    raise _unrenderable(expr, f"{type(expr).__name__} is not allowed in a grid expression")


_CONDITION_OPS = {"<", "<=", ">", ">=", "==", "!="}
_LOGIC_OPS = {"and": "and", "or": "or", "&": "and", "|": "or"}


def render_condition(expr: ast.Expr, nonneg: frozenset[str] = frozenset()) -> str:
    """A requires(...) condition -> Python-syntax text, every comparison and logic operation in
    parentheses (Python binds `&` tighter than `<`; the kernel language does not). `nonneg` as
    for render_expr."""
    return _readable(_condition(expr, nonneg), expr, "requires(...) condition")


def _condition(expr: ast.Expr, nonneg: frozenset[str]) -> str:
    if isinstance(expr, ast.BinOp) and expr.op in _CONDITION_OPS:
        return f"({_render(expr.lhs, 0, nonneg)} {expr.op} {_render(expr.rhs, 0, nonneg)})"
    if isinstance(expr, ast.BinOp) and expr.op in _LOGIC_OPS:
        return f"({_condition(expr.lhs, nonneg)} {_LOGIC_OPS[expr.op]} {_condition(expr.rhs, nonneg)})"
    if isinstance(expr, ast.UnaryOp) and expr.op == "not":
        return f"(not {_condition(expr.operand, nonneg)})"
    raise SourceError("cannot use this requires(...) condition: expected comparisons of integer expressions "
                      "joined by and/or/not", expr.loc, hint="e.g. requires(D % 8 == 0, N <= 4096)")


def eval_condition(text: str, values: Mapping[str, int]) -> bool:
    """A requires(...) condition (render_condition's text) with `values` bound."""
    return _Evaluator(text, values).condition(_parse_host(text, "condition"))


def _unrenderable(expr: ast.Expr, why: str) -> TileError:
    return SourceError(f"cannot use this grid expression: {why}", expr.loc,
                       hint="a grid may use integers, shape symbols, i32 scalar args, + - * // % "
                            "and cdiv/min/max")


# ---------------------------------------------------------------------------------------------
# Evaluation.

def eval_grid(formula: str | Sequence[str], values: Mapping[str, int]) -> tuple[int, int, int]:
    """Evaluate a grid formula (a manifest's list of up to 3 texts, or one comma-separated text)
    with the given shape-symbol / scalar values; returns (x, y, z)."""
    texts = _split(formula) if isinstance(formula, str) else list(formula)
    if not 1 <= len(texts) <= 3:
        raise TileError(f"a grid has 1 to 3 dimensions, got {len(texts)}: {texts!r}")
    dims = [eval_formula(t, values) for t in texts]
    for text, dim in zip(texts, dims, strict=True):
        if not 0 <= dim <= _MAX_DIM:
            raise TileError(f"grid dimension '{text}' evaluates to {dim}, outside 0..{_MAX_DIM}")
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


def _split(formula: str) -> list[str]:
    # Top-level commas only: "cdiv(M, 64), N" is two dims, not three.
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(formula):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(formula[start:i].strip())
            start = i + 1
    parts.append(formula[start:].strip())
    return parts


def eval_formula(text: str, values: Mapping[str, int]) -> int:
    """One integer expression in the grid language (see render_expr) with `values` bound."""
    return _Evaluator(text, values).visit(_parse_host(text, "grid formula"))


def _parse_host(text: str, what: str) -> pyast.AST:
    """The Python expression tree of a host formula or condition (never evaluated as Python)."""
    if not isinstance(text, str) or len(text) > _MAX_FORMULA:
        raise TileError(f"bad {what} {text!r}")
    try:
        return pyast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise TileError(f"bad {what} '{text}': {exc.msg}") from None


class _Evaluator:
    def __init__(self, text: str, values: Mapping[str, int]):
        self.text = text
        self.values = values

    def fail(self, why: str) -> TileError:
        return TileError(f"bad grid formula '{self.text}': {why}")

    def visit(self, node: pyast.AST) -> int:
        if isinstance(node, pyast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int):
                raise self.fail(f"{node.value!r} is not an integer")
            return node.value
        if isinstance(node, pyast.Name):
            if node.id not in self.values:
                raise self.fail(f"no value for '{node.id}' (given: {', '.join(sorted(self.values)) or 'none'})")
            value = self.values[node.id]
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(f"'{node.id}' must be an integer, got {value!r}")
            return value
        if isinstance(node, pyast.UnaryOp) and isinstance(node.op, pyast.USub | pyast.UAdd):
            v = self.visit(node.operand)
            return -v if isinstance(node.op, pyast.USub) else v
        if isinstance(node, pyast.BinOp):
            return self.binop(node.op, self.visit(node.left), self.visit(node.right))
        if (isinstance(node, pyast.Call) and isinstance(node.func, pyast.Name)
                and node.func.id in _FUNCS and not node.keywords):
            args = [self.visit(a) for a in node.args]
            if node.func.id == "cdiv":
                if len(args) != 2:
                    raise self.fail("cdiv takes 2 arguments")
                return -(-args[0] // self.nonzero(args[1]))
            if len(args) < 1:
                raise self.fail(f"{node.func.id} needs arguments")
            return max(args) if node.func.id in ("max", "maximum") else min(args)
        raise self.fail(f"'{pyast.unparse(node)}' is not allowed")

    def condition(self, node: pyast.AST) -> bool:
        _cmp = {pyast.Lt: int.__lt__, pyast.LtE: int.__le__, pyast.Gt: int.__gt__, pyast.GtE: int.__ge__,
                pyast.Eq: int.__eq__, pyast.NotEq: int.__ne__}
        if isinstance(node, pyast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _cmp:
            return bool(_cmp[type(node.ops[0])](self.visit(node.left), self.visit(node.comparators[0])))
        if isinstance(node, pyast.BoolOp):
            parts = [self.condition(v) for v in node.values]
            return all(parts) if isinstance(node.op, pyast.And) else any(parts)
        if isinstance(node, pyast.UnaryOp) and isinstance(node.op, pyast.Not):
            return not self.condition(node.operand)
        raise self.fail(f"'{pyast.unparse(node)}' is not a condition")

    def nonzero(self, v: int) -> int:
        if v == 0:
            raise self.fail("division by zero")
        return v

    def binop(self, op: pyast.operator, a: int, b: int) -> int:
        if isinstance(op, pyast.Add):
            return a + b
        if isinstance(op, pyast.Sub):
            return a - b
        if isinstance(op, pyast.Mult):
            return a * b
        if isinstance(op, pyast.FloorDiv):
            return a // self.nonzero(b)
        if isinstance(op, pyast.Div):
            # Integer division in the kernel language truncates toward zero (i32 sdiv).
            q = abs(a) // abs(self.nonzero(b))
            return q if (a >= 0) == (b > 0) else -q
        if isinstance(op, pyast.Mod):
            return a % self.nonzero(b)
        if isinstance(op, pyast.LShift | pyast.RShift):
            if not 0 <= b < 64:  # bounds the result: `1 << N` with a huge N would eat memory
                raise self.fail(f"shift amount {b} outside 0..63")
            return a << b if isinstance(op, pyast.LShift) else a >> b
        if isinstance(op, pyast.BitAnd):
            return a & b
        if isinstance(op, pyast.BitOr):
            return a | b
        if isinstance(op, pyast.BitXor):
            return a ^ b
        raise self.fail(f"operator {type(op).__name__} is not allowed")
