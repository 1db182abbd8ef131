"""Type and shape inference for a bound kernel (pass 6 of checker.bind).

Values are uniform scalars (`ScalarType`) or tiles (`TileType`). Numeric literals are *weak*: a
`Const` int or float adopts the dtype of the other operand (so `x * 0.5` on an f16 tile stays f16),
and defaults to i32 / f32 where nothing constrains it. Constant sub-expressions were folded to
`Const` by substitution, so `-inf` and `BLOCK_M * 2` are weak literals too.
"""

from __future__ import annotations

from typing import NoReturn

from tiledsl.backends.rocm.arch import Arch
from tiledsl.errors import SourceError, SourceLocation
from tiledsl.fp8 import F8_DTYPES, fp8_archs, fp8_format
from tiledsl.lang.ast import (
    BUILTINS,
    FLOAT_DTYPES,
    AccessType,
    Assign,
    BinOp,
    Call,
    Const,
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
    NoneLit,
    ScalarType,
    Slice,
    Stmt,
    TensorType,
    TileType,
    Type,
    UnaryOp,
)

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
DEFAULT_WAVES = 4
WAVES_CHOICES = (1, 2, 4, 8, 16)
DOT_DTYPES = ("f16", "bf16", "f8e4m3", "f8e5m2")
DOT_MIN_DIM = 16  # the smallest MFMA/WMMA tile side on every supported arch
CMP_OPS = ("<", "<=", ">", ">=", "==", "!=")
# Most stages a loop may ask for: pipeline-loops keeps stages - 1 look-ahead copies of the loop's
# loaded tiles, so a large count only multiplies registers (and the compile's work, unbounded
# before: stages(4096) ran for minutes and took 20 GiB).
MAX_STAGES = 8
_NUMERIC = ("i32", *(d for d in FLOAT_DTYPES if d not in F8_DTYPES))  # with arithmetic

# Parameters of each builtin: (name, required). Messages quote BUILTINS[name] as the signature.
_PARAMS: dict[str, tuple[tuple[str, bool], ...]] = {
    "program_id": (("axis", True),), "num_programs": (("axis", True),),
    "arange": (("start", True), ("end", True)),
    "zeros": (("shape", True), ("dtype", True)),
    "full": (("shape", True), ("value", True), ("dtype", True)),
    "load": (("access", True), ("mask", False), ("other", False), ("prefetch", False)),
    "store": (("access", True), ("value", True), ("mask", False)),
    "atomic_add": (("access", True), ("value", True), ("mask", False)),
    "dot": (("a", True), ("b", True), ("acc", False), ("trans_b", False)),
    **{f: (("x", True), ("axis", True)) for f in ("max", "min", "sum")},
    **{f: (("a", True), ("b", True)) for f in ("maximum", "minimum", "cdiv")},
    **{f: (("x", True),) for f in ("exp2", "log2", "rcp", "sqrt", "abs", "exp", "log", "rsqrt")},
    "tanh": (("x", True), ("approx", False)),
    "cast": (("x", True), ("dtype", True), ("approx", False)),
    "fma": (("a", True), ("b", True), ("c", True)),
    "umulhi": (("a", True), ("b", True)),
    "philox": tuple((n, True) for n in ("key0", "key1", "c0", "c1", "c2", "c3", "word")),
    "philox_byte": tuple((n, True) for n in ("key0", "key1", "j", "i", "c2", "c3")),
    "where": (("cond", True), ("a", True), ("b", True)),
}
assert set(_PARAMS) == set(BUILTINS)



def desc(t: Type | None) -> str:
    """A type as shown in messages."""
    if isinstance(t, ScalarType):
        return f"{t.dtype} scalar"
    if isinstance(t, AccessType):
        return f"access to '{t.tensor}' of shape [{', '.join(map(str, t.shape))}]"
    return "no value" if t is None else str(t)


def _names_in(e: Expr) -> list[Name]:
    """The Name nodes of a host expression (requires, grid), left to right."""
    out: list[Name] = []
    todo: list[Expr] = [e]
    while todo:
        x = todo.pop()
        if isinstance(x, Name):
            out.append(x)
        elif isinstance(x, BinOp):
            todo += [x.rhs, x.lhs]
        elif isinstance(x, UnaryOp):
            todo.append(x.operand)
        elif isinstance(x, Call):
            todo += list(reversed(x.args))
    return out


def _weak(e: Expr) -> bool:
    return isinstance(e, Const) and not isinstance(e.value, bool)


MAX_TILE_RANK = 2


def _overflows(value: float, dtype: str) -> bool:
    """Does the finite `value` round to infinity in the 16/32-bit float `dtype`?"""
    import ml_dtypes
    import numpy as np

    if value != value or abs(value) == float("inf"):
        return False
    np_dtype = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}[dtype]
    with np.errstate(over="ignore"):
        return bool(np.isinf(np.array(value, np.float64).astype(np_dtype)))


def _make(shape: tuple[int, ...] | None, dtype: str) -> ScalarType | TileType:
    return ScalarType(dtype) if shape is None else TileType(shape, dtype)


def _shape(t: Type) -> tuple[int, ...] | None:
    return t.shape if isinstance(t, TileType) else None


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


Env = dict[str, Type]


class Typer:
    def __init__(self, kernel: Kernel, arch: Arch):
        self.kernel = kernel
        self.src = kernel.source
        self.arch = arch
        self.tensors = {a.name: a.type for a in kernel.args if isinstance(a.type, TensorType)}
        self.globals: Env = {a.name: a.type for a in kernel.args if isinstance(a.type, ScalarType)}
        for a in kernel.args:
            if isinstance(a.type, TensorType):
                for d in a.type.dims:
                    if isinstance(d, str):
                        self.globals[d] = ScalarType("i32")

    def fail(self, message: str, loc: SourceLocation, hint: str | None = None) -> NoReturn:
        raise SourceError(message, loc, self.src, hint)

    def run(self) -> tuple[int, int]:
        for g in self.kernel.grid:
            t = self.value(g, self.globals)
            if _weak(g):
                t = self.adapt(g, "i32", "grid(...)")
            if t != ScalarType("i32"):
                self.fail(f"grid entries must be i32 scalars, got {desc(t)}", g.loc)
        for r in self.kernel.requires:
            t = self.value(r, self.globals)
            if t != ScalarType("i1"):
                self.fail(f"requires(...) takes conditions (i1 scalars such as N % 8 == 0 or M <= 4096), got "
                          f"{desc(t)}", r.loc)
            for name in _names_in(r):  # the host evaluates them with integers only
                if name.type != ScalarType("i32"):
                    self.fail(f"requires(...) compares i32 values (shape symbols, i32 arguments, constants); "
                              f"'{name.id}' is {desc(name.type)}", name.loc)
        waves = DEFAULT_WAVES
        if self.kernel.waves is not None:
            waves = self.const_int(self.kernel.waves, "waves(...)")
            if waves not in WAVES_CHOICES:
                self.fail(f"waves must be one of {', '.join(map(str, WAVES_CHOICES))}, got {waves}",
                          self.kernel.waves.loc)
        occupancy = 0
        if self.kernel.occupancy is not None:
            occupancy = self.const_int(self.kernel.occupancy, "occupancy(...)")
            if not 0 <= occupancy <= self.arch.max_waves_per_simd:
                self.fail(f"occupancy is waves per SIMD, 1 to {self.arch.max_waves_per_simd} on {self.arch.name} "
                          f"(0: the compiler's choice), got {occupancy}", self.kernel.occupancy.loc)
        self.block(self.kernel.body, dict(self.globals))
        return waves, occupancy

    # ---- statements ------------------------------------------------------------------------
    def block(self, body: list[Stmt], env: Env) -> None:
        for s in body:
            self.stmt(s, env)

    def stmt(self, s: Stmt, env: Env) -> None:
        if isinstance(s, Let):
            env[s.name] = self.value(s.value, env)
        elif isinstance(s, Assign):
            target = env[s.name]
            t = self.value(s.value, env)
            if _weak(s.value) and isinstance(target, ScalarType):
                t = self.adapt(s.value, target.dtype, f"'{s.name}'")
            if t != target:
                hint = "a variable keeps the type of its `let`"
                if _shape(t) == _shape(target):
                    hint += f"; convert with cast(..., {target.dtype})"
                elif isinstance(target, TileType) and isinstance(t, ScalarType):
                    hint += f"; make a tile with full([{', '.join(map(str, target.shape))}], value, " \
                            f"{target.dtype})"
                self.fail(f"cannot assign {desc(t)} to '{s.name}', which is {desc(target)}", s.value.loc,
                          hint=hint)
        elif isinstance(s, ExprStmt):
            self.infer(s.expr, env)
        elif isinstance(s, For):
            for what, e in (("start", s.start), ("end", s.end), ("step", s.step)):
                if e is not None:
                    self.i32_scalar(e, env, f"range {what}")
            if isinstance(s.step, Const) and isinstance(s.step.value, int) and s.step.value <= 0:
                self.fail(f"range step must be positive, got {s.step.value}", s.step.loc)
            step = 1 if s.step is None else s.step.value if isinstance(s.step, Const) else None
            if isinstance(s.end, Const) and type(s.end.value) is int and type(step) is int \
                    and s.end.value > I32_MAX - step + 1:
                self.fail(f"range end {s.end.value} lets the i32 index pass {I32_MAX} (step {step}), where it "
                          f"wraps and the loop would not end", s.end.loc,
                          hint=f"the end may be at most {I32_MAX - step + 1} with this step")
            if s.stages is not None and not 1 <= (n := self.const_int(s.stages, "stages(...)")) <= MAX_STAGES:
                self.fail(f"stages must be between 1 and {MAX_STAGES}, got {n}", s.stages.loc,
                          hint="each stage past the first holds another copy of the loop's loaded tiles")
            if (kw := s.stages_option) is not None:
                if kw.name != "reuse":
                    self.fail(f"stages(...) has no option '{kw.name}'", kw.loc, hint="its one option is reuse=<bool>")
                if self.compile_time_bool(kw.value, "stages: reuse") and n != 2:
                    self.fail(f"stages(N, reuse=true) needs N = 2, got {n}: with more stages the look-ahead "
                              "tile is never live beside the one it replaces", kw.value.loc,
                              hint="pass reuse=false, or a bool constexpr set only with 2 stages")
            self.block(s.body, {**env, s.var: ScalarType("i32")})
        elif isinstance(s, If):
            t = self.value(s.cond, env)
            if t != ScalarType("i1"):
                self.fail(f"if condition must be an i1 scalar (the same in every lane), got {desc(t)}",
                          s.cond.loc, hint="for per-element choices use where(cond, a, b) or a mask")
            self.block(s.then_body, dict(env))
            self.block(s.else_body, dict(env))

    # ---- helpers ---------------------------------------------------------------------------
    def infer(self, e: Expr, env: Env) -> Type | None:
        t = self._infer(e, env)
        if isinstance(t, TileType) and len(t.shape) > MAX_TILE_RANK:
            # Layouts, reductions and the matrix ops are defined for vectors and 2-D tiles only.
            self.fail(f"tiles have at most {MAX_TILE_RANK} dims, this is {t}", e.loc,
                      hint="index one axis with a scalar, or fold two axes into one (i * N + j)")
        e.type = t
        return t

    def value(self, e: Expr, env: Env) -> ScalarType | TileType:
        """Type `e`, which must be a scalar or tile value."""
        t = self.infer(e, env)
        if isinstance(t, (ScalarType, TileType)):
            return t
        if isinstance(e, DTypeLit):
            self.fail(f"dtype {e.dtype} is not a value here", e.loc,
                      hint="dtypes are arguments of zeros, full and cast, e.g. cast(x, f32)")
        if isinstance(e, EnumLit):
            self.fail(f"enum member '{e.name}' can only be compared with its enum constexpr", e.loc,
                      hint="e.g. `if EPILOGUE == relu { ... }`")
        if isinstance(e, (NoneLit, Slice)):
            self.fail("None and ':' are only allowed inside an index, as in x[:, None]", e.loc)
        if isinstance(e, ListExpr):
            self.fail("a list is only allowed as the shape argument of zeros or full", e.loc)
        if isinstance(t, TensorType):
            self.fail(f"tensor argument '{e.id}' is not a value", e.loc,  # type: ignore[attr-defined]
                      hint=f"index it and load, e.g. load({e.id}[i, j])")  # type: ignore[attr-defined]
        if isinstance(t, AccessType):
            self.fail("a tensor access can only be the first argument of load, store or atomic_add", e.loc)
        self.fail(f"{e.func}(...) does not produce a value", e.loc)  # type: ignore[attr-defined]

    def adapt(self, c: Expr, dtype: str, context: str) -> ScalarType:
        """Give the weak literal `c` the dtype `dtype` demanded by `context`."""
        assert isinstance(c, Const)
        if dtype == "i1":
            self.fail(f"number {c.value} cannot be used as i1 (with {context})", c.loc,
                      hint="use true or false, or a comparison")
        if dtype == "i32" and isinstance(c.value, float):
            self.fail(f"float literal {c.value} cannot be used with i32 (in {context})", c.loc,
                      hint="write an integer, or convert the other side with cast(x, f32)")
        if dtype in FLOAT_DTYPES:
            c.value = float(c.value)
        if dtype in F8_DTYPES:
            self.f8_literal(c, dtype, context)
        elif dtype in FLOAT_DTYPES and _overflows(c.value, dtype):
            self.fail(f"{c.value} is out of range for {dtype} (with {context}): it would round to infinity", c.loc,
                      hint="use a value within range, write inf if infinity is meant, or work in f32")
        c.type = ScalarType(dtype)
        return c.type

    def f8_literal(self, c: Const, dtype: str, context: str) -> None:
        """A literal used as an 8-bit float must be one (rounded to nearest) on this arch."""
        self.f8_arch(dtype, f"{c.value} as {dtype} (with {context})", c.loc)
        fmt = fp8_format(dtype, self.arch.fp8_flavour)
        v = float(c.value)
        if v != v or abs(v) <= fmt.max or (fmt.has_inf and abs(v) == float("inf")):
            return
        flavour = self.arch.fp8_flavour.upper()  # type: ignore[union-attr]
        no_inf = "" if fmt.has_inf else " (and which has no infinity)"
        self.fail(f"{c.value} is out of range for {dtype} (with {context}): {dtype} on {self.arch.name} is {flavour}, "
                  f"whose largest value is {fmt.max:g}{no_inf}", c.loc,
                  hint=f"use a value within range, or work in f32 and cast(x, {dtype}) at the end")

    def f8_arch(self, dtype: str, what: str, loc: SourceLocation) -> None:
        """8-bit floats exist only on archs with an fp8 format (arch table fp8_flavour)."""
        if dtype in F8_DTYPES and self.arch.fp8_flavour is None:
            archs = fp8_archs()
            self.fail(f"{what}: {self.arch.name} has no 8-bit float instructions, so it cannot hold {dtype} values "
                      f"(fp8 needs {', '.join(archs[:-1])} or {archs[-1]})", loc,
                      hint="pass and keep the data as f16 or bf16")

    def no_f8_arithmetic(self, t: Type, what: str, loc: SourceLocation) -> None:
        """8-bit floats are a storage and matrix-operand format: no arithmetic of their own."""
        if isinstance(t, ScalarType | TileType) and t.dtype in F8_DTYPES:
            self.fail(f"{what} has no {t.dtype} form: 8-bit floats are loaded, stored, cast and multiplied with "
                      f"dot, not computed with (got {desc(t)})", loc,
                      hint=f"compute in f32: cast(x, f32), and cast(result, {t.dtype}) at the end")

    def i32_scalar(self, e: Expr, env: Env, what: str) -> None:
        t = self.value(e, env)
        if _weak(e):
            t = self.adapt(e, "i32", what)
        if t != ScalarType("i32"):
            self.fail(f"{what} must be an i32 scalar, got {desc(t)}", e.loc)

    def const_int(self, e: Expr, what: str) -> int:
        if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
            e.type = ScalarType("i32")
            return e.value
        got = f"got {e.value}" if isinstance(e, Const) else "got a run-time value"
        self.fail(f"{what} must be a compile-time integer, {got}", e.loc,
                  hint="use an integer literal, an int constexpr, or arithmetic on them")

    def check_dim(self, n: int, loc: SourceLocation) -> None:
        if n <= 0:
            self.fail(f"tile dims must be positive, got {n}", loc)
        if n & (n - 1):
            self.fail(f"tile dims must be powers of two, got {n}; pad to {_next_pow2(n)} and mask", loc)

    def unify(self, nodes: list[Expr], env: Env, what: str) -> tuple[str, list[ScalarType | TileType]]:
        """Type operands that must share a dtype; weak literals adopt the first strong dtype."""
        types = [self.value(n, env) for n in nodes]
        strong = [t for n, t in zip(nodes, types, strict=True) if not _weak(n)]
        if strong:
            target = strong[0].dtype
        else:  # only literals (unfoldable, e.g. `1 / 2`): f32 if any is a float
            target = "f32" if any(isinstance(n.value, float) for n in nodes) else "i32"  # type: ignore
        for i, n in enumerate(nodes):
            if _weak(n):
                types[i] = self.adapt(n, target, what)
        for t in types[1:]:
            if t.dtype != types[0].dtype:
                pair = (types[0].dtype, t.dtype)
                to = "f32" if "f32" in pair else next((d for d in pair if d in FLOAT_DTYPES), "i32")
                self.fail(f"{what}: operands have different dtypes, {desc(types[0])} and {desc(t)}",
                          nodes[0].loc, hint=f"convert one side explicitly, e.g. cast(x, {to})")
        return target, types

    def broadcast(self, types: list[Type], what: str, loc: SourceLocation) -> tuple[int, ...] | None:
        """Numpy-style broadcast among tiles of the same rank; scalars splat. None if all scalar."""
        tiles = [t for t in types if isinstance(t, TileType)]
        if not tiles:
            return None
        for t in tiles[1:]:
            if len(t.shape) != len(tiles[0].shape):
                self.fail(f"{what}: cannot broadcast {desc(tiles[0])} with {desc(t)}: ranks differ", loc,
                          hint="add size-1 axes explicitly, e.g. x[:, None] or x[None, :]")
        out = []
        for axis, dims in enumerate(zip(*(t.shape for t in tiles), strict=True)):
            sizes = sorted(set(dims) - {1})
            if len(sizes) > 1:
                self.fail(f"{what}: cannot broadcast {' with '.join(map(desc, tiles))}: axis {axis} has "
                          f"sizes {sizes[0]} and {sizes[1]}", loc)
            out.append(sizes[0] if sizes else 1)
        return tuple(out)

    def fits(self, t: Type, shape: tuple[int, ...], what: str, loc: SourceLocation) -> None:
        """`t` (a scalar, or a tile with dims equal or 1) must broadcast to exactly `shape`."""
        if isinstance(t, TileType) and (len(t.shape) != len(shape) or any(
                d not in (1, s) for d, s in zip(t.shape, shape, strict=True))):
            self.fail(f"{what} is {desc(t)}, which does not broadcast to the access shape "
                      f"[{', '.join(map(str, shape))}]", loc)

    # ---- expressions -----------------------------------------------------------------------
    def _infer(self, e: Expr, env: Env) -> Type | None:
        if isinstance(e, Const):
            if isinstance(e.value, bool):
                return ScalarType("i1")
            if isinstance(e.value, int):
                if not I32_MIN <= e.value <= I32_MAX:
                    self.fail(f"integer {e.value} does not fit in i32", e.loc)
                return ScalarType("i32")
            return ScalarType("f32")
        if isinstance(e, Name):
            return env[e.id] if e.id in env else self.tensors[e.id]
        if isinstance(e, BinOp):
            return self._binop(e, env)
        if isinstance(e, UnaryOp):
            t = self.value(e.operand, env)
            self.no_f8_arithmetic(t, f"'{e.op}'", e.operand.loc)
            if e.op == "-" and t.dtype not in _NUMERIC:
                self.fail(f"'-' needs a number, got {desc(t)}", e.operand.loc)
            if e.op == "not" and t.dtype != "i1":
                self.fail(f"'not' needs an i1 operand, got {desc(t)}", e.operand.loc,
                          hint="compare first, e.g. not (x < n)")
            return t
        if isinstance(e, Index):
            return self._index(e, env)
        if isinstance(e, Call):
            return getattr(self, f"_call_{e.func}")(e, self._bind_call(e), env)
        return None  # DTypeLit, EnumLit, Slice, NoneLit, ListExpr: not values

    def _binop(self, e: BinOp, env: Env) -> ScalarType | TileType:
        op = e.op
        dtype, types = self.unify([e.lhs, e.rhs], env, f"'{op}'")
        self.no_f8_arithmetic(types[0], f"'{op}'", e.loc)
        operands = f"{desc(types[0])} and {desc(types[1])}"
        if op == "/" and dtype not in FLOAT_DTYPES:
            self.fail(f"'/' needs float operands, got {operands}", e.loc,
                      hint="use // for integer division, or cast(x, f32) for float division")
        if op in ("//", "%", "<<", ">>") and dtype != "i32":
            self.fail(f"'{op}' needs i32 operands, got {operands}", e.loc)
        if op in ("&", "|", "^") and dtype not in ("i1", "i32"):
            self.fail(f"'{op}' needs i1 or i32 operands, got {operands}", e.loc,
                      hint="combine comparisons, e.g. (a < n) & (b < m)")
        if op in ("and", "or") and dtype != "i1":
            self.fail(f"'{op}' needs i1 operands, got {operands}", e.loc,
                      hint="use &, | and ^ for i32 bit operations")
        if op in ("+", "-", "*") and dtype == "i1":
            self.fail(f"'{op}' needs numbers, got {operands}", e.loc, hint="convert with cast(x, i32)")
        if op in ("<", "<=", ">", ">=") and dtype == "i1":
            self.fail(f"'{op}' cannot order i1 values ({operands})", e.loc)
        shape = self.broadcast(list(types), f"'{op}'", e.loc)
        return _make(shape, "i1" if op in CMP_OPS else dtype)

    def _index(self, e: Index, env: Env) -> Type:
        if isinstance(e.base, Name) and e.base.id not in env and e.base.id in self.tensors:
            return self._access(e, e.base, env)
        t = self.value(e.base, env)
        if isinstance(t, ScalarType):
            self.fail(f"cannot index a scalar ({desc(t)})", e.loc)
        for i in e.indices:
            if not isinstance(i, (Slice, NoneLit)):
                self.fail("a tile value can only be indexed with ':' and None (to add size-1 axes)", i.loc,
                          hint="to gather elements, index a tensor argument and load(...)")
        n = sum(isinstance(i, Slice) for i in e.indices)
        if n != len(t.shape):
            self.fail(f"indexing {desc(t)} needs one ':' per axis ({len(t.shape)}), got {n}", e.loc,
                      hint="keep every axis with ':' and add size-1 axes with None, e.g. x[:, None]")
        dims = iter(t.shape)
        return TileType(tuple(next(dims) if isinstance(i, Slice) else 1 for i in e.indices), t.dtype)

    def _access(self, e: Index, base: Name, env: Env) -> AccessType:
        tt = self.tensors[base.id]
        base.type = tt
        if len(e.indices) != len(tt.dims):
            given = f"{len(e.indices)} index" + ("" if len(e.indices) == 1 else "es")
            self.fail(f"'{base.id}' is {tt} with {len(tt.dims)} dims, but {given} given", e.loc,
                      hint="index every dim of a tensor with one i32 scalar or tile")
        types: list[Type] = []
        for i in e.indices:
            if isinstance(i, (Slice, NoneLit)):
                self.fail(f"tensor '{base.id}' must be indexed with i32 scalars or tiles, not ':' or None",
                          i.loc, hint=f"build index tiles with arange, e.g. {base.id}[rows[:, None], "
                                      "cols[None, :]]")
            t = self.value(i, env)
            if _weak(i):
                t = self.adapt(i, "i32", f"an index of '{base.id}'")
            if t.dtype != "i32":
                self.fail(f"indices of '{base.id}' must be i32, got {desc(t)}", i.loc)
            types.append(t)
        return AccessType(base.id, self.broadcast(types, f"indices of '{base.id}'", e.loc) or (), tt.dtype)

    def _bind_call(self, e: Call) -> dict[str, Expr | None]:
        params = _PARAMS[e.func]
        names = [n for n, _ in params]
        sig = BUILTINS[e.func]
        if len(e.args) > len(params):
            self.fail(f"{e.func}() takes at most {len(params)} positional arguments: {sig}",
                      e.args[len(params)].loc)
        bound: dict[str, Expr] = dict(zip(names, e.args, strict=False))
        for kw in e.kwargs:
            if kw.name not in names:
                close = [n for n in names if n.startswith(kw.name[:2])]
                self.fail(f"{e.func}() has no parameter '{kw.name}'; expected {sig}", kw.loc,
                          hint=f"did you mean '{close[0]}'?" if close else None)
            if kw.name in bound:
                self.fail(f"{e.func}() got '{kw.name}' twice", kw.loc)
            bound[kw.name] = kw.value
        for name, required in params:
            if required and name not in bound:
                self.fail(f"{e.func}() is missing '{name}': expected {sig}", e.loc)
        # Required parameters given by keyword become positional (max(x, axis=0) is max(x, 0)): later
        # stages read a builtin's required arguments by position, its optional ones by name.
        while len(e.args) < len(params) and params[len(e.args)][1]:
            e.args.append(bound[names[len(e.args)]])
        e.kwargs = [kw for kw in e.kwargs if names.index(kw.name) >= len(e.args)]
        return {n: bound.get(n) for n in names}

    def _dtype_arg(self, e: Expr, func: str) -> str:
        if not isinstance(e, DTypeLit):
            self.fail(f"{func}: expected a dtype (e.g. f32, f16, i32)", e.loc)
        return e.dtype

    def _shape_arg(self, e: Expr, func: str) -> tuple[int, ...]:
        if not isinstance(e, ListExpr) or not e.items:
            self.fail(f"{func}: the shape must be a non-empty list of compile-time ints, e.g. [64, 64]",
                      e.loc)
        dims = []
        for item in e.items:
            n = self.const_int(item, f"{func}: a shape entry")
            self.check_dim(n, item.loc)
            dims.append(n)
        return tuple(dims)

    def _access_arg(self, e: Expr, env: Env, func: str) -> AccessType:
        if isinstance(e, Index) and isinstance(e.base, Name) and e.base.id in self.tensors:
            t = self.infer(e, env)
            assert isinstance(t, AccessType)
            return t
        what = f"tensor '{e.id}' itself" if isinstance(e, Name) and e.id in self.tensors else \
            desc(self.value(e, env))
        self.fail(f"{func}: the first argument must index a tensor argument, like x[i, j]; got {what}",
                  e.loc)

    def _mask(self, m: Expr | None, acc: AccessType, env: Env, func: str) -> None:
        if m is None:
            return
        t = self.value(m, env)
        if t.dtype != "i1":
            self.fail(f"{func}: mask must be i1 (e.g. rows < M), got {desc(t)}", m.loc)
        self.fits(t, acc.shape, f"{func}: mask", m.loc)

    # ---- builtins: one method per name, called as _call_<name>(call, args, env) ---------------
    def _axis_call(self, e: Call, a: dict, env: Env) -> ScalarType:
        axis = self.const_int(a["axis"], f"{e.func} axis")
        if not 0 <= axis <= 2:
            self.fail(f"{e.func} axis must be 0, 1 or 2, got {axis}", a["axis"].loc)
        if axis >= len(self.kernel.grid):
            self.fail(f"{e.func}({axis}) but the grid has {len(self.kernel.grid)} dimension(s)",
                      a["axis"].loc, hint="add an entry to grid(...)")
        return ScalarType("i32")

    _call_program_id = _axis_call
    _call_num_programs = _axis_call

    def _call_arange(self, e: Call, a: dict, env: Env) -> TileType:
        start = self.const_int(a["start"], "arange start")
        end = self.const_int(a["end"], "arange end")
        if end <= start:
            self.fail(f"arange({start}, {end}) is empty: end must be greater than start", e.loc)
        self.check_dim(end - start, e.loc)
        return TileType((end - start,), "i32")

    def _call_zeros(self, e: Call, a: dict, env: Env) -> TileType:
        shape = self._shape_arg(a["shape"], "zeros")
        dtype = self._dtype_arg(a["dtype"], "zeros")
        self.f8_arch(dtype, f"zeros(..., {dtype})", a["dtype"].loc)
        return TileType(shape, dtype)

    def _call_full(self, e: Call, a: dict, env: Env) -> TileType:
        shape = self._shape_arg(a["shape"], "full")
        dtype = self._dtype_arg(a["dtype"], "full")
        self.f8_arch(dtype, f"full(..., {dtype})", a["dtype"].loc)
        v = a["value"]
        t = self.value(v, env)
        if _weak(v):
            t = self.adapt(v, dtype, "full")
        if not isinstance(t, ScalarType):
            self.fail(f"full: value must be a scalar, got {desc(t)}", v.loc)
        if t.dtype != dtype:
            self.fail(f"full: value is {desc(t)} but the tile is {dtype}", v.loc,
                      hint=f"convert with cast(value, {dtype})")
        return TileType(shape, dtype)

    def _f8_memory(self, acc: AccessType, func: str, loc: SourceLocation) -> None:
        self.f8_arch(acc.dtype, f"{func}: '{acc.tensor}' holds {acc.dtype}", loc)

    def _call_load(self, e: Call, a: dict, env: Env) -> ScalarType | TileType:
        acc = self._access_arg(a["access"], env, "load")
        self._f8_memory(acc, "load", a["access"].loc)
        self._mask(a["mask"], acc, env, "load")
        other = a["other"]
        if other is not None:
            t = self.value(other, env)
            if _weak(other):
                t = self.adapt(other, acc.dtype, f"load from '{acc.tensor}'")
            if not isinstance(t, ScalarType):
                self.fail(f"load: other must be a scalar, got {desc(t)}", other.loc)
            if t.dtype != acc.dtype:
                self.fail(f"load: other is {desc(t)} but '{acc.tensor}' holds {acc.dtype}", other.loc,
                          hint=f"convert with cast(other, {acc.dtype})")
        if a["prefetch"] is not None:
            self.compile_time_bool(a["prefetch"], "load: prefetch")
        return _make(acc.shape or None, acc.dtype)

    def _call_store(self, e: Call, a: dict, env: Env) -> None:
        acc = self._access_arg(a["access"], env, e.func)
        self._f8_memory(acc, e.func, a["access"].loc)
        if e.func == "atomic_add" and acc.dtype != "f32":
            self.fail(f"atomic_add needs an f32 tensor, but '{acc.tensor}' is {self.tensors[acc.tensor]}",
                      a["access"].loc)
        v = a["value"]
        t = self.value(v, env)
        if _weak(v):
            t = self.adapt(v, acc.dtype, f"{e.func} to '{acc.tensor}'")
        if t.dtype != acc.dtype:
            self.fail(f"{e.func}: value is {desc(t)} but '{acc.tensor}' holds {acc.dtype}", v.loc,
                      hint=f"convert with cast(value, {acc.dtype})")
        self.fits(t, acc.shape, f"{e.func}: value", v.loc)
        self._mask(a["mask"], acc, env, e.func)
        return None

    _call_atomic_add = _call_store

    def compile_time_bool(self, flag: Expr | None, what: str) -> bool:
        """A keyword switch such as dot's trans_b: absent (false), or a compile-time bool."""
        if flag is None:
            return False
        if not (isinstance(flag, Const) and isinstance(flag.value, bool)):
            self.fail(f"{what} must be a compile-time bool (true, false or a bool constexpr)", flag.loc)
        flag.type = ScalarType("i1")
        return flag.value

    def _call_dot(self, e: Call, a: dict, env: Env) -> TileType:
        ta, tb = self.value(a["a"], env), self.value(a["b"], env)
        for name, t in (("a", ta), ("b", tb)):
            if not isinstance(t, TileType) or len(t.shape) != 2:
                self.fail(f"dot: {name} must be a 2-D tile, got {desc(t)}", a[name].loc)
        trans = self.compile_time_bool(a["trans_b"], "dot: trans_b")
        if ta.dtype not in DOT_DTYPES:
            self.fail(f"dot: operands must be {', '.join(DOT_DTYPES)}; a is {desc(ta)}", a["a"].loc,
                      hint="convert with cast(a, f16) or cast(a, bf16)")
        if tb.dtype != ta.dtype:
            self.fail(f"dot: a is {desc(ta)} but b is {desc(tb)}: dtypes differ", a["b"].loc,
                      hint=f"convert with cast(b, {ta.dtype})")
        if not self.arch.supports_dot(ta.dtype):
            ok = [d for d in DOT_DTYPES if self.arch.supports_dot(d)]
            self.fail(f"dot on {ta.dtype} is not supported on {self.arch.name} (no matrix instruction); "
                      f"supported: {', '.join(ok)}", e.loc)
        m, k = ta.shape
        n, kb = tb.shape if trans else tb.shape[::-1]
        if k != kb:
            layout = " (trans_b=true, so b is [N, K])" if trans else " (b is [K, N])"
            self.fail(f"dot: a is {desc(ta)} but b is {desc(tb)}{layout}: inner dims {k} and {kb} differ",
                      a["b"].loc)
        for what, size in (("M", m), ("N", n), ("K", k)):
            if size < DOT_MIN_DIM:
                self.fail(f"dot: {what}={size} is too small; M, N and K must be at least {DOT_MIN_DIM}",
                          e.loc, hint="use bigger blocks")
        want = TileType((m, n), "f32")
        if a["acc"] is not None and (t := self.value(a["acc"], env)) != want:
            self.fail(f"dot: acc must be {desc(want)}, got {desc(t)}", a["acc"].loc)
        return want

    def _reduce(self, e: Call, a: dict, env: Env) -> ScalarType | TileType:
        t = self.value(a["x"], env)
        # max/min are reductions; people often mean the elementwise maximum/minimum instead.
        alt = {"max": "for the larger of two values use maximum(a, b)",
               "min": "for the smaller of two values use minimum(a, b)"}.get(e.func)
        if not isinstance(t, TileType):
            self.fail(f"{e.func} reduces a tile along an axis, got {desc(t)}", a["x"].loc, hint=alt)
        if not (isinstance(a["axis"], Const) and type(a["axis"].value) is int):
            self.fail(f"{e.func}: axis must be a compile-time integer", a["axis"].loc, hint=alt)
        axis = self.const_int(a["axis"], f"{e.func} axis")
        if not 0 <= axis < len(t.shape):
            self.fail(f"{e.func}: axis {axis} is out of range for {desc(t)}", a["axis"].loc)
        self.no_f8_arithmetic(t, e.func, a["x"].loc)
        if t.dtype not in _NUMERIC:
            self.fail(f"{e.func} needs numbers, got {desc(t)}", a["x"].loc, hint="convert with cast(x, i32)")
        shape = t.shape[:axis] + t.shape[axis + 1:]
        return _make(shape or None, t.dtype)

    _call_max = _call_min = _call_sum = _reduce

    def _elementwise(self, e: Call, a: dict, env: Env) -> ScalarType | TileType:
        dtype, types = self.unify([a["a"], a["b"]], env, e.func)
        self.no_f8_arithmetic(types[0], e.func, e.loc)
        if dtype not in _NUMERIC:
            self.fail(f"{e.func} needs numbers, got {desc(types[0])}", e.loc)
        return _make(self.broadcast(list(types), e.func, e.loc), dtype)

    _call_maximum = _call_minimum = _elementwise

    def _float_math(self, e: Call, a: dict, env: Env) -> ScalarType | TileType:
        x = a["x"]
        t = self.value(x, env)
        if _weak(x):
            t = self.adapt(x, "f32", e.func)
        self.no_f8_arithmetic(t, e.func, x.loc)
        ok = t.dtype in FLOAT_DTYPES if e.func == "abs" else t.dtype == "f32"
        if not ok:
            need = "a float" if e.func == "abs" else "f32"
            self.fail(f"{e.func} needs {need}, got {desc(t)}", x.loc,
                      hint=f"convert first: {e.func}(cast(x, f32))")
        return t

    _call_exp2 = _call_log2 = _call_rcp = _call_sqrt = _call_abs = _float_math
    _call_exp = _call_log = _call_rsqrt = _float_math

    def _call_tanh(self, e: Call, a: dict, env: Env) -> ScalarType | TileType:
        self.compile_time_bool(a["approx"], "tanh: approx")
        return self._float_math(e, a, env)

    def _call_fma(self, e: Call, a: dict, env: Env) -> ScalarType | TileType:
        nodes = [a["a"], a["b"], a["c"]]
        dtype, types = self.unify(nodes, env, "fma")
        if dtype != "f32":
            self.fail(f"fma needs f32 operands, got {desc(types[0])}", e.loc,
                      hint="convert first: fma(cast(a, f32), cast(b, f32), cast(c, f32))")
        return _make(self.broadcast(list(types), "fma", e.loc), dtype)

    def _call_cast(self, e: Call, a: dict, env: Env) -> ScalarType | TileType:
        t = self.value(a["x"], env)
        dtype = self._dtype_arg(a["dtype"], "cast")
        self.compile_time_bool(a["approx"], "cast: approx")
        self.f8_arch(dtype, f"cast to {dtype}", a["dtype"].loc)  # (an f8 source failed where it was made)
        return _make(_shape(t), dtype)

    def _call_where(self, e: Call, a: dict, env: Env) -> ScalarType | TileType:
        ct = self.value(a["cond"], env)
        if ct.dtype != "i1":
            self.fail(f"where: cond must be i1 (e.g. x < 0), got {desc(ct)}", a["cond"].loc)
        dtype, types = self.unify([a["a"], a["b"]], env, "where")
        return _make(self.broadcast([ct, *types], "where", e.loc), dtype)

    def _i32_operands(self, e: Call, a: dict, names: tuple[str, ...], env: Env) -> ScalarType | TileType:
        types = []
        for n in names:
            t = self.value(a[n], env)
            if _weak(a[n]):
                t = self.adapt(a[n], "i32", e.func)
            if t.dtype != "i32":
                self.fail(f"{e.func}: {n} must be i32 (a scalar or a tile), got {desc(t)}", a[n].loc)
            types.append(t)
        return _make(self.broadcast(types, e.func, e.loc), "i32")

    def _call_umulhi(self, e: Call, a: dict, env: Env) -> ScalarType | TileType:
        return self._i32_operands(e, a, ("a", "b"), env)

    def _call_philox(self, e: Call, a: dict, env: Env) -> ScalarType | TileType:
        word = self.const_int(a["word"], "philox: word")
        if not 0 <= word <= 3:
            self.fail(f"philox: word selects one of the 4 output words, 0..3, got {word}", a["word"].loc)
        return self._i32_operands(e, a, ("key0", "key1", "c0", "c1", "c2", "c3"), env)

    def _call_philox_byte(self, e: Call, a: dict, env: Env) -> ScalarType | TileType:
        return self._i32_operands(e, a, ("key0", "key1", "j", "i", "c2", "c3"), env)

    def _call_cdiv(self, e: Call, a: dict, env: Env) -> ScalarType:
        dtype, types = self.unify([a["a"], a["b"]], env, "cdiv")
        for node, t in zip((a["a"], a["b"]), types, strict=True):
            if t != ScalarType("i32"):
                self.fail(f"cdiv works on i32 scalars, got {desc(t)}", node.loc)
        return ScalarType("i32")
