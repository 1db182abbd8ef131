"""The AST of the tile language: plain dataclasses, built by the parser, typed by the checker.

The parser fills every field but `type` (left None); the checker returns a new, *bound* kernel for
one variant: constexpr names are replaced by `Const` nodes, `if` on a compile-time condition is
folded away, and every `Expr.type` is set. The MLIR emitter only ever sees bound, typed kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, is_dataclass

import numpy as np

from tiledsl.errors import SourceLocation

# ---------------------------------------------------------------------------------------------
# Types. Element dtypes are strings: "i1" (bool), "i32", "f32", "f16", "bf16".

DTYPES = ("i1", "i32", "f32", "f16", "bf16", "f8e4m3", "f8e5m2")
FLOAT_DTYPES = ("f32", "f16", "bf16", "f8e4m3", "f8e5m2")
DTYPE_BYTES = {"i1": 1, "i32": 4, "f32": 4, "f16": 2, "bf16": 2, "f8e4m3": 1, "f8e5m2": 1}
# Spellings accepted in source for each dtype.
DTYPE_ALIASES = {"bool": "i1", "i1": "i1", "i32": "i32", "int32": "i32", "f32": "f32", "float32": "f32",
                 "f16": "f16", "float16": "f16", "bf16": "bf16", "bfloat16": "bf16",
                 "f8e4m3": "f8e4m3", "f8e5m2": "f8e5m2"}


@dataclass(frozen=True)
class ScalarType:
    """A uniform (same in every lane) scalar value: program ids, scalar args, loop variables."""

    dtype: str

    def __str__(self) -> str:
        return self.dtype


@dataclass(frozen=True)
class TileType:
    """A statically shaped tile distributed over the workgroup's lanes."""

    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"tile[{', '.join(map(str, self.shape))}] of {self.dtype}"


@dataclass(frozen=True)
class TensorType:
    """A kernel tensor argument: global memory with a dtype and symbolic (run-time) dims."""

    dtype: str
    dims: tuple[str | int, ...]  # shape symbols (run-time i32 kernargs) or static ints

    def __str__(self) -> str:
        return f"tensor[{self.dtype}]({', '.join(map(str, self.dims))})"


@dataclass(frozen=True)
class AccessType:
    """`t[i, j, ...]`: element addresses of a tensor argument; only valid as load/store target."""

    tensor: str  # argument name
    shape: tuple[int, ...]  # () when every index is a scalar
    dtype: str


Type = ScalarType | TileType | TensorType | AccessType


# ---------------------------------------------------------------------------------------------
# Expressions. `loc` points at the first character of the construct.

@dataclass
class Expr:
    loc: SourceLocation
    type: Type | None = field(default=None, kw_only=True)


@dataclass
class Const(Expr):
    value: int | float | bool


@dataclass
class Name(Expr):
    id: str


@dataclass
class DTypeLit(Expr):
    """A dtype used as a value, e.g. the `f32` in `zeros([64, 64], f32)` or `cast(x, DT)`."""

    dtype: str


@dataclass
class EnumLit(Expr):
    """A bare enum member name compared against an enum constexpr, e.g. `MASK == causal`."""

    name: str


@dataclass
class ListExpr(Expr):
    """`[a, b]`: only as a shape argument (zeros/full)."""

    items: list[Expr]


@dataclass
class BinOp(Expr):
    op: str  # + - * / // % < <= > >= == != & | ^ and or << >>
    lhs: Expr
    rhs: Expr


@dataclass
class UnaryOp(Expr):
    op: str  # "-" or "not"
    operand: Expr


@dataclass
class Slice(Expr):
    """A bare `:` inside an index list."""


@dataclass
class NoneLit(Expr):
    """`None` inside an index list: inserts a size-1 axis (expand_dims)."""


@dataclass
class Index(Expr):
    """`base[i, j, ...]`. On a tensor argument: an access (each index a scalar or i32 tile, tiles
    broadcast together). On a tile value: only `:` and `None` entries (adds size-1 axes)."""

    base: Expr
    indices: list[Expr]


@dataclass
class Keyword:
    name: str
    value: Expr
    loc: SourceLocation


@dataclass
class Call(Expr):
    """A builtin call. `func` is the builtin's name (see BUILTINS)."""

    func: str
    args: list[Expr]
    kwargs: list[Keyword] = field(default_factory=list)


# Every builtin the language knows, with its positional and keyword parameters (for messages).
BUILTINS: dict[str, str] = {
    "program_id": "program_id(axis)",
    "num_programs": "num_programs(axis)",
    "arange": "arange(start, end)",
    "zeros": "zeros([dims...], dtype)",
    "full": "full([dims...], value, dtype)",
    "load": "load(access, mask=None, other=0, prefetch=true)",
    "dot": "dot(a, b, acc=None, trans_b=false)",
    "max": "max(x, axis)",
    "min": "min(x, axis)",
    "sum": "sum(x, axis)",
    "maximum": "maximum(a, b)",
    "minimum": "minimum(a, b)",
    "exp2": "exp2(x)",
    "log2": "log2(x)",
    "rcp": "rcp(x)",
    "sqrt": "sqrt(x)",
    "exp": "exp(x)",
    "log": "log(x)",
    "tanh": "tanh(x, approx=false)",
    "rsqrt": "rsqrt(x)",
    "fma": "fma(a, b, c)",
    "umulhi": "umulhi(a, b)",
    "philox": "philox(key0, key1, c0, c1, c2, c3, word)",
    "philox_byte": "philox_byte(key0, key1, j, i, c2, c3)",
    "abs": "abs(x)",
    "cast": "cast(x, dtype, approx=false)",
    "where": "where(cond, a, b)",
    "cdiv": "cdiv(a, b)",
    "store": "store(access, value, mask=None)",
    "atomic_add": "atomic_add(access, value, mask=None)",
}

# The float builtins of one argument that a constant argument folds: the exact result, computed in
# double precision from the f32 argument, rounded to f32. The run-time instructions of some are
# approximations (exp2, log2 and rsqrt within an ulp or so, tanh's approx form more), so a constant
# is at least as accurate folded as computed.
MATH_FOLDS: dict[str, Callable[[float], float]] = {
    "exp2": lambda x: 2.0 ** x, "log2": math.log2, "exp": math.exp, "log": math.log, "sqrt": math.sqrt,
    "abs": abs, "rcp": lambda x: 1.0 / x, "rsqrt": lambda x: 1.0 / math.sqrt(x), "tanh": math.tanh,
}


def fold_math(func: str, x: float) -> float:
    """MATH_FOLDS[func] of x as the f32 value the kernel computes with: x taken to f32 first, the
    result rounded to f32, with the IEEE results at the edges (log2(0) = -inf, sqrt(-1) = NaN,
    rcp(0) = inf, exp2(200) = inf), as at run time."""
    x = float(np.float32(x))
    try:
        r = MATH_FOLDS[func](x)
    except OverflowError:  # exp and 2.0 ** x past double's range
        r = math.inf
    except (ValueError, ZeroDivisionError):  # outside the domain, or a pole
        r = _edge(func, x)
    with np.errstate(over="ignore"):
        return float(np.float32(r))


def _edge(func: str, x: float) -> float:
    if x == 0 and func in ("log2", "log"):
        return -math.inf
    if x == 0 and func in ("rcp", "rsqrt"):
        return math.copysign(math.inf, x)
    return math.nan


# ---------------------------------------------------------------------------------------------
# Statements.

@dataclass
class Stmt:
    loc: SourceLocation


@dataclass
class Let(Stmt):
    name: str
    value: Expr


@dataclass
class Assign(Stmt):
    """Rebinds an existing variable; the new value must have the same type (loop-carried values)."""

    name: str
    value: Expr


@dataclass
class ExprStmt(Stmt):
    """Only `store(...)` and `atomic_add(...)` calls are allowed as statements."""

    expr: Expr


@dataclass
class For(Stmt):
    var: str
    start: Expr
    end: Expr
    step: Expr | None
    stages: Expr | None  # the software-pipelining hint `stages(N)`; None = 1 (no pipelining)
    body: list[Stmt]
    # stages(2, reuse=B): B (a compile-time bool) asks each look-ahead load to be issued after the
    # last use of the tile it replaces, so both share registers (pipeline-loops)
    stages_option: Keyword | None = None


@dataclass
class If(Stmt):
    cond: Expr
    then_body: list[Stmt]
    else_body: list[Stmt]


# ---------------------------------------------------------------------------------------------
# Kernel.

@dataclass
class ConstexprParam:
    """A compile-time parameter. kind: "int", "bool", "dtype" or "enum" (members in `choices`)."""

    name: str
    kind: str
    default: int | bool | str | None
    choices: tuple[str, ...] = ()
    loc: SourceLocation | None = None


@dataclass
class Arg:
    name: str
    type: TensorType | ScalarType
    loc: SourceLocation
    # For tensor args before binding, the dtype may name a dtype constexpr (e.g. "DT"); the checker
    # replaces it. Static int dims may likewise name int constexprs.


@dataclass
class Kernel:
    name: str
    constexprs: list[ConstexprParam]
    args: list[Arg]
    grid: list[Expr]  # 1 to 3 expressions over shape symbols, scalar i32 args and constexprs
    waves: Expr | None  # waves per workgroup; None = default (4)
    body: list[Stmt]
    loc: SourceLocation
    source: str  # the whole source text, for error carets
    file: str
    # requires(...): conditions over shape symbols, i32 scalar args and constexprs, checked by the
    # launcher before every launch; `SYM % K == 0` also lets the compiler assume the divisibility.
    requires: list[Expr] = field(default_factory=list)
    # occupancy(E): waves per SIMD the compiled kernel must fit (registers capped to match, as
    # LLVM's amdgpu-waves-per-eu); None or 0 = the compiler's choice.
    occupancy: Expr | None = None


@dataclass
class BoundKernel:
    """One variant: a kernel with every constexpr bound and every expression typed."""

    kernel: Kernel  # the typed, folded kernel (its grid/body nodes have `type` set)
    constexpr_values: dict[str, int | bool | str]
    shape_symbols: list[str]  # run-time i32 dims, in first-appearance order over the tensor args
    waves: int
    dim_units: dict[str, int] = field(default_factory=dict)  # from requires(SYM % K == 0), K a power of 2
    occupancy: int = 0  # occupancy(...): waves per SIMD to fit; 0 = the compiler's choice


def walk(root: object) -> Iterator[object]:
    """Every AST node under `root` (a node or a list of them), without recursion: bodies may nest
    deeply. Source locations and inferred types are not nodes."""
    nodes = [root]
    while nodes:
        node = nodes.pop()
        if isinstance(node, list | tuple):
            nodes.extend(node)
        elif is_dataclass(node) and not isinstance(node, type):
            yield node
            nodes.extend(getattr(node, f.name) for f in fields(node) if f.name not in ("loc", "type"))
