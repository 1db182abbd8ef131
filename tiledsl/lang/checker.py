"""Binds one variant of a parsed kernel and checks it: constexprs, scopes, then types and shapes.

`bind()` runs these passes on a deep copy (the parsed kernel is reused for other variants):

  1. resolve_constexprs   -D values and defaults -> {name: value}
  2. substitute_constexprs  constexpr names -> Const/DTypeLit/EnumLit, enum members -> EnumLit, and
                            constant sub-expressions folded (so `BLOCK_M * 2` or `-inf` is a Const)
  3. resolve_args         tensor dtypes and dims, the run-time shape symbols
  4. check_scopes         names, `let`, assignments; on the *unfolded* body, so code in a branch that
                          this variant drops is still checked for typos
  5. fold_ifs             `if` on a compile-time bool is replaced by the taken branch
  6. infer_types          sets `.type` on every value expression, checks every builtin

Non-value nodes (DTypeLit, EnumLit, Slice, NoneLit, ListExpr) and store/atomic_add calls keep
`type=None`; a tensor-argument Name gets its TensorType and a tensor Index its AccessType.
"""

from __future__ import annotations

import copy
import difflib
import math
import re
from collections.abc import Callable, Iterable
from typing import NoReturn

import numpy as np

from tiledsl.backends.rocm.arch import Arch
from tiledsl.errors import SourceError, SourceLocation
from tiledsl.lang.ast import (
    BUILTINS,
    DTYPE_ALIASES,
    DTYPE_BYTES,
    DTYPES,
    MATH_FOLDS,
    Arg,
    Assign,
    BinOp,
    BoundKernel,
    Call,
    Const,
    ConstexprParam,
    DTypeLit,
    EnumLit,
    Expr,
    ExprStmt,
    For,
    If,
    Index,
    Kernel,
    Let,
    ListExpr,
    Name,
    ScalarType,
    Stmt,
    TensorType,
    TileType,
    UnaryOp,
    fold_math,
    walk,
)
from tiledsl.lang.typer import CMP_OPS, I32_MAX, I32_MIN, Typer

ConstexprValue = int | bool | str
# Names that can never be declared: they are spelled as literals by the parser.
_LITERAL_NAMES = {**{a: "a dtype name" for a in DTYPE_ALIASES}, "inf": "a float constant",
                  "nan": "a float constant"}
# A -D int value: decimal, or 0x / 0o / 0b with ASCII digits, an optional sign, no underscores.
_INT_TEXT = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0|[1-9][0-9]*)", re.ASCII)
# Builtins allowed in grid(...), which is evaluated on the host from kernel arguments.
_GRID_BUILTINS = ("cdiv", "minimum", "maximum")


# Kernel names become file names (NAME.ARCH.hsaco, NAME-KEY12.json in packages, the --dump-ir stages),
# which most file systems cap at 255 bytes.
MAX_KERNEL_NAME = 128


def bind(kernel: Kernel, constexprs: dict[str, str | int | bool], arch: Arch) -> BoundKernel:
    """Bind `constexprs` (from `-D NAME=VALUE`, strings or Python values) and type-check for `arch`."""
    if len(kernel.name) > MAX_KERNEL_NAME:
        _fail(kernel.source, f"kernel name of {len(kernel.name)} characters: at most {MAX_KERNEL_NAME}", kernel.loc,
              hint="the name is the code object's symbol and the start of its file names")
    values = resolve_constexprs(kernel, constexprs)
    k = copy.deepcopy(kernel)
    substitute_constexprs(k, values)
    shape_symbols = resolve_args(k, values)
    check_scopes(k, shape_symbols)
    k.body = fold_ifs(k.body)
    waves, occupancy = infer_types(k, arch)
    check_tile_sizes(k, arch, waves)
    k.requires = check_requirements(k, values)
    return BoundKernel(kernel=k, constexpr_values=values, shape_symbols=shape_symbols, waves=waves,
                       dim_units=declared_dim_units(k, shape_symbols), occupancy=occupancy)


def check_requirements(kernel: Kernel, values: dict[str, ConstexprValue]) -> list[Expr]:
    """requires(...) after constexpr folding: a condition false for these constexprs is an error
    here; one true is dropped; the rest are checked by the launcher on every call."""
    kept = []
    for r in map(_short_circuit, kernel.requires):
        if isinstance(r, Const):
            if not r.value:
                bound = ", ".join(f"{k}={v}" for k, v in sorted(values.items())) or "no constexprs"
                _fail(kernel.source, f"this kernel requires a condition that is false for this variant ({bound})",
                      r.loc)
            continue
        kept.append(r)
    return kept


def _short_circuit(e: Expr) -> Expr:
    """A requires(...) condition with its compile-time operands of and/or taken out: `PAD_D or
    D == HDIM` is true when PAD_D is, and `D == HDIM` when it is not (only run-time comparisons
    can go to the manifest)."""
    if isinstance(e, UnaryOp) and e.op == "not":
        e.operand = _short_circuit(e.operand)
        return Const(e.loc, not e.operand.value) if isinstance(e.operand, Const) else e
    if not (isinstance(e, BinOp) and e.op in ("and", "or", "&", "|")):
        return e
    e.lhs, e.rhs = _short_circuit(e.lhs), _short_circuit(e.rhs)
    either = e.op in ("or", "|")
    for known, other in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
        if isinstance(known, Const) and isinstance(known.value, bool):
            return known if known.value == either else other
    return e


def declared_dim_units(kernel: Kernel, shape_symbols: list[str]) -> dict[str, int]:
    """Shape symbols a requirement `SYM % K == 0` (K a power of two > 1) makes multiples of K."""
    units: dict[str, int] = {}
    for r in kernel.requires:
        if (isinstance(r, BinOp) and r.op == "==" and isinstance(r.rhs, Const) and r.rhs.value == 0
                and isinstance(r.lhs, BinOp) and r.lhs.op == "%" and isinstance(r.lhs.lhs, Name)
                and r.lhs.lhs.id in shape_symbols and isinstance(r.lhs.rhs, Const)):
            k = r.lhs.rhs.value
            if isinstance(k, int) and not isinstance(k, bool) and k > 1 and not k & (k - 1):
                units[r.lhs.lhs.id] = max(units.get(r.lhs.lhs.id, 1), k)
    return units


def check_tile_sizes(kernel: Kernel, arch: Arch, waves: int) -> None:
    """Refuse a tile that cannot fit a lane's registers on its own (a lower bound: the values
    spread evenly over every lane of the workgroup, packed 4 bytes a register). Such a kernel
    would spend minutes in the compiler before failing on spills; this says so at once."""
    lanes = arch.wave_size * waves
    limit = arch.vgprs_per_lane  # on CDNA the unified file (arch VGPRs and AGPRs together)
    for node in walk(kernel.body):
        t = node.type if isinstance(node, Expr) else None
        if isinstance(t, TileType):
            elements = math.prod(t.shape)
            regs = -(-elements * DTYPE_BYTES[t.dtype] // (4 * lanes))
            if regs > limit:
                _fail(kernel.source, f"this {t} holds {elements} values: at least {regs} registers per lane over "
                      f"{waves} waves of {arch.wave_size} lanes, but a {arch.name} lane has {limit}",
                      node.loc, hint="use smaller blocks and loop over them")


def _fail(source: str, message: str, loc: SourceLocation | None, hint: str | None = None) -> NoReturn:
    raise SourceError(message, loc, source, hint or None)


def _did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f"did you mean '{close[0]}'?" if close else None


# ---------------------------------------------------------------------------------------------
# Pass 1: constexpr values.

def _kind_text(p: ConstexprParam) -> str:
    return f"enum({', '.join(p.choices)})" if p.kind == "enum" else p.kind


def _kind_phrase(p: ConstexprParam) -> str:
    """'an int constexpr', 'a dtype constexpr', 'an enum(a, b) constexpr'."""
    kind = _kind_text(p)
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} constexpr"


def _coerce(kernel: Kernel, p: ConstexprParam, raw: object, origin: str) -> ConstexprValue:
    """Turn a default or a -D value into the param's Python value; `origin` prefixes messages."""
    def bad(expected: str) -> NoReturn:
        _fail(kernel.source, f"{origin}: {p.name} is {_kind_phrase(p)}, expected {expected}, got {raw!r}",
              p.loc)

    if p.kind == "int":
        if isinstance(raw, bool):
            bad("an integer")
        if isinstance(raw, str):
            # ASCII digits only, as the language writes them (int(s, 0) alone would also take
            # '6_4' and other scripts' digits, each a cache key and manifest entry of its own).
            text = raw.strip()
            if not _INT_TEXT.fullmatch(text):
                bad("an integer (such as 64, -3 or 0x40)")
            raw = int(text, 0)
        if not isinstance(raw, int):
            bad("an integer")
        if not I32_MIN <= raw <= I32_MAX:
            bad("an integer that fits in i32")
        return raw
    if p.kind == "bool":
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false", "1", "0"):
            return raw.strip().lower() in ("true", "1")
        if isinstance(raw, bool) or raw in (0, 1):
            return bool(raw)
        bad("true or false")
    if p.kind == "dtype":
        if isinstance(raw, str) and raw.strip() in DTYPE_ALIASES:
            return DTYPE_ALIASES[raw.strip()]
        bad(f"a dtype ({', '.join(DTYPES)})")
    if isinstance(raw, str) and raw.strip() in p.choices:  # enum
        return raw.strip()
    bad(f"one of {', '.join(p.choices)}")


def resolve_constexprs(kernel: Kernel, given: dict[str, str | int | bool]) -> dict[str, ConstexprValue]:
    """Validate the constexpr declarations and return each one's value (-D value, else default)."""
    params: dict[str, ConstexprParam] = {}
    for p in kernel.constexprs:
        if p.name in params:
            _fail(kernel.source, f"constexpr '{p.name}' is declared twice", p.loc)
        if p.name in _LITERAL_NAMES:
            _fail(kernel.source, f"'{p.name}' is {_LITERAL_NAMES[p.name]} and cannot name a constexpr", p.loc)
        if p.kind not in ("int", "bool", "dtype", "enum"):
            _fail(kernel.source, f"constexpr '{p.name}' has unknown kind '{p.kind}'",
                  p.loc, hint="expected int, bool, dtype or enum(a, b, ...)")
        if len(set(p.choices)) != len(p.choices):
            _fail(kernel.source, f"enum {p.name} lists a member twice: {', '.join(p.choices)}", p.loc)
        names = {q.name for q in kernel.constexprs}
        for m in p.choices:
            # Members are bare names in the body, so they must not mean anything else.
            if m in names or m in _LITERAL_NAMES:
                what = "a constexpr" if m in names else _LITERAL_NAMES[m]
                _fail(kernel.source, f"enum {p.name}: member '{m}' is already {what}", p.loc)
        if p.default is not None:
            _coerce(kernel, p, p.default, f"default of {p.name}")
        params[p.name] = p
    unknown = [n for n in given if n not in params]
    if unknown:
        known = ", ".join(params) if params else "(none)"
        _fail(kernel.source, f"unknown constexpr '-D {unknown[0]}': kernel '{kernel.name}' has constexprs "
              f"{known}", kernel.loc, hint=_did_you_mean(unknown[0], params))
    values: dict[str, ConstexprValue] = {}
    for p in kernel.constexprs:
        if p.name in given:
            values[p.name] = _coerce(kernel, p, given[p.name], f"-D {p.name}={given[p.name]}")
        elif p.default is not None:
            values[p.name] = _coerce(kernel, p, p.default, f"default of {p.name}")
        else:
            _fail(kernel.source, f"constexpr '{p.name}' has no default and no value",
                  p.loc, hint=f"pass -D {p.name}=<{_kind_text(p)}>")
    return values


# ---------------------------------------------------------------------------------------------
# Pass 2: substitution and constant folding.

def _map_exprs(kernel: Kernel, body: list[Stmt], f: Callable[[Expr], Expr]) -> None:
    """Replace every expression of `body` (recursively) by f(expr)."""
    for s in body:
        if isinstance(s, (Let, Assign)):
            s.value = f(s.value)
        elif isinstance(s, ExprStmt):
            s.expr = f(s.expr)
        elif isinstance(s, For):
            s.start, s.end = f(s.start), f(s.end)
            s.step = f(s.step) if s.step is not None else None
            s.stages = f(s.stages) if s.stages is not None else None
            if s.stages_option is not None:
                s.stages_option.value = f(s.stages_option.value)
            _map_exprs(kernel, s.body, f)
        elif isinstance(s, If):
            s.cond = f(s.cond)
            _map_exprs(kernel, s.then_body, f)
            _map_exprs(kernel, s.else_body, f)


def _trunc_div(a: int, b: int) -> int:
    # Integer `//` and `%` truncate toward zero like the hardware (arith.divsi/remsi), so a folded
    # constant equals what the same expression computes at run time.
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _fold(source: str, e: BinOp) -> Expr:
    a, b, op = e.lhs, e.rhs, e.op
    if isinstance(a, DTypeLit) and isinstance(b, DTypeLit) and op in ("==", "!="):
        return Const(e.loc, (a.dtype == b.dtype) == (op == "=="))
    if not (isinstance(a, Const) and isinstance(b, Const)):
        return e
    x, y = a.value, b.value
    if isinstance(x, bool) or isinstance(y, bool):
        if not (isinstance(x, bool) and isinstance(y, bool)):
            return e  # mixed bool/number: left for the type checker's message
        ops = {"and": x and y, "&": x and y, "or": x or y, "|": x or y, "^": x != y, "==": x == y,
               "!=": x != y}
        return Const(e.loc, ops[op]) if op in ops else e
    if op in ("and", "or"):
        return e
    if op in CMP_OPS:
        return Const(e.loc, {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y,
                             "!=": x != y}[op])
    if isinstance(x, int) and isinstance(y, int):
        if op in ("//", "%") and y == 0:
            _fail(source, f"division by zero in a constant expression ({x} {op} {y})", e.loc)
        # Shifts take their count modulo 32, as the hardware does (the emitter masks run-time counts).
        table = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y,
                 "//": lambda: _trunc_div(x, y), "%": lambda: x - y * _trunc_div(x, y),
                 "<<": lambda: x << (y & 31), ">>": lambda: x >> (y & 31), "&": lambda: x & y,
                 "|": lambda: x | y, "^": lambda: x ^ y}
        if op not in table:
            return e  # `/` on integers: the type checker explains
        r = table[op]()
        if op == "<<":  # a shift moves bits: those past bit 31 are gone, as at run time (1 << 31 is I32_MIN)
            r = (r - I32_MIN) % (1 << 32) + I32_MIN
        if not I32_MIN <= r <= I32_MAX:
            _fail(source, f"constant expression {x} {op} {y} = {r} overflows i32", e.loc)
        return Const(e.loc, r)
    # Float literals are f32: each folded operation rounds to f32, as the same one at run time does
    # ((16777216.0 + 1.0) + 1.0 is 16777216.0, not the 16777218.0 of double precision).
    fx, fy = np.float32(x), np.float32(y)
    with np.errstate(all="ignore"):
        if op in ("+", "-", "*"):
            return Const(e.loc, float(fx + fy if op == "+" else fx - fy if op == "-" else fx * fy))
        if op == "/" and y != 0:
            return Const(e.loc, float(fx / fy))
    return e


def _fold_cdiv(source: str, e: Call) -> Expr:
    """`cdiv(a, b)` of two integer constants: folded, and a zero divisor is an error here as in
    `a // 0` (at run time it gives an arch-dependent value)."""
    if e.func != "cdiv" or len(e.args) != 2 or e.kwargs or not all(
            isinstance(a, Const) and type(a.value) is int for a in e.args):
        return e
    x, y = e.args[0].value, e.args[1].value  # type: ignore[attr-defined]
    if y == 0:
        _fail(source, f"division by zero in a constant expression (cdiv({x}, {y}))", e.loc)
    r = -(-x // y)  # the ceiling of x / y, whatever the signs
    if not I32_MIN <= r <= I32_MAX:
        _fail(source, f"constant expression cdiv({x}, {y}) = {r} overflows i32", e.loc)
    return Const(e.loc, r)


def _fold_math(e: Call) -> Expr:
    """A float builtin of one constant number (`exp2(-11.0)`, `tanh(0.5, approx=true)`): folded to
    its f32 value; anything else (a bool, a keyword that is not a constant `approx`) is left for
    the type checker."""
    if e.func not in MATH_FOLDS or len(e.args) != 1 or not isinstance(e.args[0], Const):
        return e
    x = e.args[0].value
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return e
    if any(kw.name != "approx" or not isinstance(kw.value, Const) or not isinstance(kw.value.value, bool)
           for kw in e.kwargs) or (e.kwargs and e.func != "tanh"):
        return e
    return Const(e.loc, fold_math(e.func, x))


def _fold_where(e: Call) -> Expr:
    """`where(C, a, b)` of a compile-time C and two constant numbers of one kind: a or b (with a
    tile operand the result is a tile, so only constants fold)."""
    if e.func != "where" or len(e.args) != 3 or e.kwargs or not all(isinstance(a, Const) for a in e.args):
        return e
    cond, a, b = (x.value for x in e.args)  # type: ignore[attr-defined]
    if not isinstance(cond, bool) or type(a) is not type(b) or isinstance(a, bool):
        return e
    return Const(e.loc, a if cond else b)


def _fold_call(source: str, e: Call) -> Expr:
    return _fold_math(e) if e.func in MATH_FOLDS else _fold_where(e) if e.func == "where" else _fold_cdiv(source, e)


def substitute_constexprs(kernel: Kernel, values: dict[str, ConstexprValue]) -> None:
    """Replace constexpr names by their values in place, and fold constant sub-expressions."""
    params = {p.name: p for p in kernel.constexprs}
    members = {m for p in kernel.constexprs if p.kind == "enum" for m in p.choices}
    src = kernel.source

    def enum_param(e: Expr) -> ConstexprParam | None:
        if isinstance(e, Name) and e.id in params and params[e.id].kind == "enum":
            return params[e.id]
        return None

    def enum_compare(e: BinOp) -> Expr | None:
        """`EPILOGUE == relu`: checked against the enum's own members, then folded."""
        p = enum_param(e.lhs) or enum_param(e.rhs)
        if p is None:
            return None
        other = e.rhs if enum_param(e.lhs) is p else e.lhs
        if enum_param(other) is not None:
            equal = values[p.name] == values[other.id]  # type: ignore[attr-defined]
        elif isinstance(other, Name) and other.id in p.choices:
            equal = values[p.name] == other.id
        elif isinstance(other, Name):
            _fail(src, f"'{other.id}' is not a member of enum {p.name}", other.loc,
                  hint=f"{p.name} is one of: {', '.join(p.choices)}")
        else:
            _fail(src, f"{p.name} is an enum constexpr and can only be compared with one of its members",
                  other.loc, hint=f"members: {', '.join(p.choices)}, e.g. `{p.name} == {p.choices[0]}`")
        return Const(e.loc, equal == (e.op == "=="))

    def sub(e: Expr) -> Expr:
        if isinstance(e, Name):
            if e.id in params:
                p, v = params[e.id], values[e.id]
                if p.kind == "dtype":
                    return DTypeLit(e.loc, str(v))
                return EnumLit(e.loc, str(v)) if p.kind == "enum" else Const(e.loc, v)
            return EnumLit(e.loc, e.id) if e.id in members else e
        if isinstance(e, BinOp):
            if e.op in ("==", "!=") and (folded := enum_compare(e)) is not None:
                return folded
            e.lhs, e.rhs = sub(e.lhs), sub(e.rhs)
            return _fold(src, e)
        if isinstance(e, UnaryOp):
            e.operand = sub(e.operand)
            v = e.operand.value if isinstance(e.operand, Const) else None
            if e.op == "-" and isinstance(v, (int, float)) and not isinstance(v, bool):
                return Const(e.loc, -v)
            if e.op == "not" and isinstance(v, bool):
                return Const(e.loc, not v)
            return e
        if isinstance(e, Index):
            e.base, e.indices = sub(e.base), [sub(i) for i in e.indices]
        elif isinstance(e, Call):
            e.args = [sub(a) for a in e.args]
            for kw in e.kwargs:
                kw.value = sub(kw.value)
            return _fold_call(src, e)
        elif isinstance(e, ListExpr):
            e.items = [sub(i) for i in e.items]
        return e

    def pick(e: Expr) -> Expr:
        """grid(...) only: `where(C, a, b)` with a compile-time C is a or b (a host expression has
        no tiles to broadcast, so the choice is the whole value)."""
        if isinstance(e, Call) and e.func == "where" and len(e.args) == 3 and not e.kwargs \
                and isinstance(e.args[0], Const) and isinstance(e.args[0].value, bool):
            return pick(e.args[1] if e.args[0].value else e.args[2])
        if isinstance(e, BinOp):
            e.lhs, e.rhs = pick(e.lhs), pick(e.rhs)
            return _fold(src, e)
        if isinstance(e, Call):
            e.args = [pick(a) for a in e.args]
        return e

    kernel.grid = [pick(sub(g)) for g in kernel.grid]
    kernel.waves = sub(kernel.waves) if kernel.waves is not None else None
    kernel.occupancy = sub(kernel.occupancy) if kernel.occupancy is not None else None
    kernel.requires = [sub(r) for r in kernel.requires]
    _map_exprs(kernel, kernel.body, sub)


# ---------------------------------------------------------------------------------------------
# Pass 3: arguments.

def resolve_args(kernel: Kernel, values: dict[str, ConstexprValue]) -> list[str]:
    """Resolve tensor dtypes/dims in place; return the shape symbols in first-appearance order."""
    src = kernel.source
    params = {p.name: p for p in kernel.constexprs}
    members = {m: p.name for p in kernel.constexprs if p.kind == "enum" for m in p.choices}
    arg_names: dict[str, Arg] = {}
    for a in kernel.args:
        if a.name in arg_names:
            _fail(src, f"argument '{a.name}' is declared twice", a.loc)
        why = (_LITERAL_NAMES.get(a.name) or ("a constexpr" if a.name in params else None)
               or (f"a member of enum {members[a.name]}" if a.name in members else None))
        if why:
            _fail(src, f"argument '{a.name}' clashes with {why} of the same name", a.loc)
        arg_names[a.name] = a
    symbols: list[str] = []
    for a in kernel.args:
        if isinstance(a.type, ScalarType):
            if a.type.dtype not in ("i32", "f32"):
                _fail(src, f"scalar argument '{a.name}' must be i32 or f32, got {a.type.dtype}", a.loc,
                      hint="pass other dtypes as a tensor argument")
            continue
        dt = a.type.dtype
        if dt in params:
            if params[dt].kind != "dtype":
                _fail(src, f"tensor '{a.name}': {dt} is {_kind_phrase(params[dt])}, not a dtype", a.loc)
            dt = str(values[dt])
        elif dt not in DTYPES:
            _fail(src, f"tensor '{a.name}' has unknown dtype '{dt}'", a.loc,
                  hint=f"expected a dtype ({', '.join(DTYPES)}) or a dtype constexpr")
        dims: list[str | int] = []
        for d in a.type.dims:
            if isinstance(d, str) and d in params:
                if params[d].kind != "int":
                    _fail(src, f"tensor '{a.name}': dim {d} is {_kind_phrase(params[d])}, not an int", a.loc)
                d = values[d]
            if isinstance(d, int):
                if d <= 0:
                    _fail(src, f"tensor '{a.name}': static dims must be positive, got {d}", a.loc)
                if d > I32_MAX:  # sizes are i32 (the launchers refuse larger run-time ones alike)
                    _fail(src, f"tensor '{a.name}': static dim {d} is above the i32 limit {I32_MAX}", a.loc)
            else:
                why = (_LITERAL_NAMES.get(d) or ("an argument" if d in arg_names else None)
                       or (f"a member of enum {members[d]}" if d in members else None))
                if why:
                    _fail(src, f"tensor '{a.name}': dim '{d}' clashes with {why} of the same name", a.loc)
                if d not in symbols:
                    symbols.append(d)
            dims.append(d)
        a.type = TensorType(dt, tuple(dims))
    return symbols


# ---------------------------------------------------------------------------------------------
# Pass 4: scopes.

class _ScopeChecker:
    def __init__(self, kernel: Kernel, shape_symbols: list[str]):
        self.src = kernel.source
        self.globals: dict[str, tuple[str, SourceLocation | None]] = {}
        for a in kernel.args:
            kind = "a tensor argument" if isinstance(a.type, TensorType) else "a scalar argument"
            self.globals[a.name] = (kind, a.loc)
        for s in shape_symbols:
            self.globals[s] = ("a shape symbol", None)
        self.reserved = dict(_LITERAL_NAMES)
        for p in kernel.constexprs:
            self.reserved[p.name] = "a constexpr"
            for m in p.choices:
                self.reserved[m] = f"a member of enum {p.name}"
        self.scopes: list[dict[str, tuple[str, SourceLocation | None]]] = []

    def lookup(self, name: str) -> tuple[str, SourceLocation | None] | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return self.globals.get(name)

    def visible(self) -> set[str]:
        return set(self.globals).union(*self.scopes)

    def declare(self, name: str, kind: str, loc: SourceLocation) -> None:
        if name in self.reserved:
            _fail(self.src, f"cannot declare '{name}': it is {self.reserved[name]}", loc)
        prev = self.lookup(name)
        if prev is not None:
            where = f" at {prev[1]}" if prev[1] else ""
            # No shadowing: folding an `if` splices its body into the enclosing block, which must
            # not change what a name refers to.
            _fail(self.src, f"'{name}' is already declared{where} (as {prev[0]})", loc,
                  hint=f"assign to it with `{name} = ...;` or pick another name")
        self.scopes[-1][name] = (kind, loc)

    def expr(self, e: Expr, host: str = "") -> None:
        if isinstance(e, Name):
            found = self.lookup(e.id)
            if found is None:
                _fail(self.src, f"unknown name '{e.id}'", e.loc, hint=_did_you_mean(e.id, self.visible()))
            if host and found[0] not in ("a shape symbol", "a scalar argument"):
                _fail(self.src, f"{host} cannot use '{e.id}' ({found[0]})", e.loc,
                      hint=f"{host} is computed on the host from shape symbols, scalar i32 arguments "
                           "and constants")
        elif isinstance(e, Call):
            if e.func not in BUILTINS:
                _fail(self.src, f"unknown function '{e.func}'", e.loc,
                      hint=_did_you_mean(e.func, BUILTINS) or f"builtins: {', '.join(BUILTINS)}")
            if host and e.func not in _GRID_BUILTINS:
                picks = " (and, in grid(...), where() on a bool constexpr)" if host == "grid(...)" else ""
                _fail(self.src, f"{host} cannot call {e.func}()", e.loc,
                      hint=f"only {', '.join(_GRID_BUILTINS)} and arithmetic are allowed in {host}{picks}")
            for a in e.args:
                self.expr(a, host)
            for kw in e.kwargs:
                self.expr(kw.value, host)
        elif isinstance(e, BinOp):
            self.expr(e.lhs, host)
            self.expr(e.rhs, host)
        elif isinstance(e, UnaryOp):
            self.expr(e.operand, host)
        elif isinstance(e, Index):
            self.expr(e.base, host)
            for i in e.indices:
                self.expr(i, host)
        elif isinstance(e, ListExpr):
            for i in e.items:
                self.expr(i, host)

    def block(self, body: list[Stmt], new_vars: tuple[tuple[str, str, SourceLocation], ...] = ()) -> None:
        self.scopes.append({})
        for name, kind, loc in new_vars:
            self.declare(name, kind, loc)
        for s in body:
            self.stmt(s)
        self.scopes.pop()

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Let):
            self.expr(s.value)
            self.declare(s.name, "a variable", s.loc)
        elif isinstance(s, Assign):
            self.expr(s.value)
            found = self.lookup(s.name)
            if found is None:
                if s.name in self.reserved:
                    _fail(self.src, f"cannot assign to '{s.name}': it is {self.reserved[s.name]}", s.loc)
                _fail(self.src, f"assignment to undeclared variable '{s.name}'", s.loc,
                      hint=f"use `let {s.name} = ...;` to declare it")
            if found[0] != "a variable":
                _fail(self.src, f"cannot assign to '{s.name}': it is {found[0]}", s.loc,
                      hint="declare a new variable with `let`" if found[0] != "a tensor argument"
                      else f"write to a tensor with store({s.name}[...], value)")
        elif isinstance(s, ExprStmt):
            self.expr(s.expr)
            if not (isinstance(s.expr, Call) and s.expr.func in ("store", "atomic_add")):
                _fail(self.src, "expression result unused", s.expr.loc,
                      hint="only store(...) and atomic_add(...) can be statements; name a value with `let`")
        elif isinstance(s, For):
            option = s.stages_option.value if s.stages_option is not None else None
            for e in (s.start, s.end, s.step, s.stages, option):
                if e is not None:
                    self.expr(e)
            self.block(s.body, ((s.var, "a loop variable", s.loc),))
        elif isinstance(s, If):
            self.expr(s.cond)
            self.block(s.then_body)
            self.block(s.else_body)


def check_scopes(kernel: Kernel, shape_symbols: list[str]) -> None:
    """Every name is declared before use, declared once, and only variables are reassigned."""
    checker = _ScopeChecker(kernel, shape_symbols)
    if not 1 <= len(kernel.grid) <= 3:
        _fail(kernel.source, f"grid(...) takes 1 to 3 entries, got {len(kernel.grid)}",
              kernel.grid[min(3, len(kernel.grid) - 1)].loc)
    for g in kernel.grid:
        checker.expr(g, host="grid(...)")
    if kernel.waves is not None:
        checker.expr(kernel.waves, host="waves(...)")
    if kernel.occupancy is not None:
        checker.expr(kernel.occupancy, host="occupancy(...)")
    for r in kernel.requires:
        checker.expr(r, host="requires(...)")
    checker.block(kernel.body)


# ---------------------------------------------------------------------------------------------
# Pass 5: compile-time `if`.

def fold_ifs(body: list[Stmt]) -> list[Stmt]:
    """Replace each `if` whose condition folded to a bool by the statements of the taken branch."""
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, If) and isinstance(s.cond, Const) and isinstance(s.cond.value, bool):
            out.extend(fold_ifs(s.then_body if s.cond.value else s.else_body))
            continue
        if isinstance(s, If):
            s.then_body, s.else_body = fold_ifs(s.then_body), fold_ifs(s.else_body)
        elif isinstance(s, For):
            s.body = fold_ifs(s.body)
        out.append(s)
    return out


# ---------------------------------------------------------------------------------------------
# Pass 6: types and shapes. The rules live in typer.py only to keep each file readable.

def infer_types(kernel: Kernel, arch: Arch) -> tuple[int, int]:
    """Type the grid and body in place; return the waves per workgroup and the occupancy asked for
    (waves per SIMD, 0 when the kernel leaves it to the compiler)."""
    return Typer(kernel, arch).run()
