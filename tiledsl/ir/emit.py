"""Emit the tile-dialect MLIR for one bound, typed kernel (one variant).

Every op carries the DSL location (file:line:col) of the construct it came from, so later passes
and errors can point at the user's source. Tile values are layout-less `tensor<...>` here;
`passes/assign_layouts.py` decides how they are distributed over lanes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, func, math, scf

from tiledsl.backends.rocm.arch import Arch
from tiledsl.errors import SourceError, TileError
from tiledsl.fp8 import F8_DTYPES
from tiledsl.ir.abi import kernarg_layout
from tiledsl.ir.dialect import element_type, i32_attr, new_context, tensor_type, tile_op
from tiledsl.ir.row_view import IndexedDim, row_view
from tiledsl.lang import ast as A
from tiledsl.options import CompileOptions
from tiledsl.passes.common import constant_trip_count, is_positive_zero, uniform_constant_int
from tiledsl.passes.philox import philox_rounds


@dataclass
class Access:
    """A tensor argument indexed by tiles: base pointer plus an i32 element-offset tile/scalar."""

    ptr: ir.Value
    offsets: ir.Value
    shape: tuple[int, ...]
    dtype: str
    tensor: str  # the argument's name
    dims: list[IndexedDim]  # each dim's index (at the access's shape) and stride


def emit_tile_mlir(bound: A.BoundKernel, arch: Arch, options: CompileOptions) -> str:
    ctx = new_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        module.operation.attributes["tile.arch"] = ir.StringAttr.get(arch.name)
        _Emitter(bound, arch, module, options).emit()
        module.operation.verify()
        return module.operation.get_asm(enable_debug_info=True)


class _Emitter:
    def __init__(self, bound: A.BoundKernel, arch: Arch, module: ir.Module, options: CompileOptions):
        self.options = options
        self.bound = bound
        self.kernel = bound.kernel
        self.arch = arch
        self.module = module
        self.env: list[dict[str, object]] = [{}]

    # -- scopes -------------------------------------------------------------------------------
    def lookup(self, name: str, loc: object) -> object:
        for scope in reversed(self.env):
            if name in scope:
                return scope[name]
        raise SourceError(f"internal: '{name}' has no value", loc, self.kernel.source)  # type: ignore[arg-type]

    def define(self, name: str, value: object) -> None:
        self.env[-1][name] = value

    def rebind(self, name: str, value: object) -> None:
        for scope in reversed(self.env):
            if name in scope:
                scope[name] = value
                return
        self.env[-1][name] = value

    def loc(self, node: A.Expr | A.Stmt | A.Kernel) -> ir.Location:
        return ir.Location.file(node.loc.file, node.loc.line, node.loc.col)

    # -- kernel -------------------------------------------------------------------------------
    def emit(self) -> None:
        self.unit_last_stride = self.options.unit_last_stride
        self.check_options()
        layout = kernarg_layout(self.bound, self.unit_last_stride)
        types = []
        for f in layout:
            types.append(ir.Type.parse("!llvm.ptr<1>") if f.kind == "pointer" else element_type(f.dtype))
        with ir.InsertionPoint(self.module.body), self.loc(self.kernel):
            fn = func.FuncOp(self.kernel.name, ir.FunctionType.get(types, []))
            fn.attributes["tile.kernel"] = ir.UnitAttr.get()
            fn.attributes["tile.waves"] = i32_attr(self.bound.waves)
            if self.bound.occupancy:
                fn.attributes["tile.occupancy"] = i32_attr(self.bound.occupancy)
            # Arguments lower-to-gpu must not address with buffer instructions (2 GiB reach).
            fn.attributes["tile.large_args"] = ir.DenseI32ArrayAttr.get(
                [i for i, f in enumerate(layout) if f.kind == "pointer" and (
                    f.name in self.options.large_tensors or not self.options.buffer_masks)])
            # Arguments both launchers check are not negative (strides and shape symbols): lower-to-gpu
            # may move multiples of them into a buffer access's scalar offset (passes/offset_deltas.py).
            fn.attributes["tile.nonnegative_args"] = ir.DenseI32ArrayAttr.get(
                [i for i, f in enumerate(layout) if f.kind in ("stride", "shape")])
            entry = fn.add_entry_block()
        args = dict(zip([f.name for f in layout], entry.arguments, strict=True))
        for a in self.kernel.args:
            if isinstance(a.type, A.TensorType):
                # None: the compile-time unit stride of the last dim (no multiply, contiguous runs).
                # Passed strides are in units of options.stride_unit elements (alignment facts).
                unit = self.options.stride_unit(a.name)
                strides = [self.scaled_arg(args.get(f"{a.name}.stride{d}"), unit) for d in range(len(a.type.dims))]
                self.define(a.name, (args[a.name], strides, a.type))
            else:
                self.define(a.name, args[a.name])
        for sym in self.bound.shape_symbols:
            # Passed in units of options.dim_unit (a divisibility fact, like the strides').
            unit = max(self.options.dim_unit(sym), self.bound.dim_units.get(sym, 1))  # requires(SYM % K == 0)
            self.define(sym, self.scaled_arg(args[sym], unit))
        with ir.InsertionPoint(entry):
            self.block(self.kernel.body)
            func.ReturnOp([], loc=self.loc(self.kernel))

    def check_options(self) -> None:
        tensors = [a.name for a in self.kernel.args if isinstance(a.type, A.TensorType)]
        for name in self.options.large_tensors:
            if name not in tensors:
                raise TileError(f"large_tensors: '{name}' is not a tensor argument of kernel '{self.kernel.name}' "
                                f"(its tensors: {', '.join(tensors) or 'none'})")
        for sym, unit in self.options.dim_units:
            if sym not in self.bound.shape_symbols:
                raise TileError(f"dim_units: '{sym}' is not a shape symbol of kernel '{self.kernel.name}' "
                                f"(its shape symbols: {', '.join(self.bound.shape_symbols) or 'none'})")
            if unit < 1:
                raise TileError(f"dim_units: the unit of '{sym}' must be a positive integer, got {unit}")

    def scaled_arg(self, arg: ir.Value | None, unit: int) -> ir.Value | None:
        """A stride or shape argument passed in units of `unit`, multiplied back: the product is
        a known multiple of `unit` (the divisibility fact axis_info and LLVM use)."""
        if arg is None or unit == 1:
            return arg
        with ir.InsertionPoint.at_block_begin(arg.owner), self.loc(self.kernel):
            return arith.MulIOp(arg, self.const_i32(unit)).result

    # -- statements ---------------------------------------------------------------------------
    def block(self, stmts: list[A.Stmt]) -> None:
        for s in stmts:
            with self.loc(s):
                self.stmt(s)

    def stmt(self, s: A.Stmt) -> None:
        if isinstance(s, A.Let):
            self.define(s.name, self.expr(s.value))
        elif isinstance(s, A.Assign):
            self.rebind(s.name, self.expr(s.value))
        elif isinstance(s, A.ExprStmt):
            self.expr(s.expr)
        elif isinstance(s, A.For):
            self.for_loop(s)
        elif isinstance(s, A.If):
            self.if_stmt(s)
        else:
            raise SourceError(f"internal: no emitter for {type(s).__name__}", s.loc, self.kernel.source)

    def carried(self, body: list[A.Stmt]) -> list[str]:
        """Variables from enclosing scopes that the body reassigns: they become loop/if results."""
        names: list[str] = []
        local: set[str] = set()

        def visit(stmts: list[A.Stmt], shadow: set[str]) -> None:
            for s in stmts:
                if isinstance(s, A.Let):
                    shadow.add(s.name)
                elif isinstance(s, A.Assign) and s.name not in shadow and s.name not in names:
                    names.append(s.name)
                elif isinstance(s, A.For):
                    visit(s.body, shadow | {s.var})
                elif isinstance(s, A.If):
                    visit(s.then_body, set(shadow))
                    visit(s.else_body, set(shadow))

        visit(body, local)
        return names

    def for_loop(self, s: A.For) -> None:
        lb, ub = self.scalar(s.start), self.scalar(s.end)
        step = self.scalar(s.step) if s.step is not None else self.const_i32(1)
        if constant_trip_count(lb, ub, step) == 1:
            # One iteration known at compile time (a constexpr-sized loop such as PASSES = 1): the
            # body runs inline, so the passes see no loop (a loop changes their choices, e.g. which
            # loads count as loaded once, assign-layouts).
            self.env.append({s.var: lb})
            self.env.append({})
            self.block(s.body)
            self.env.pop()
            self.env.pop()
            return
        names = self.carried(s.body)
        inits = [self.lookup(n, s.loc) for n in names]
        if uniform_constant_int(step) is None:
            # A run-time step of 0 or below runs no iterations (scf.for's step must be positive:
            # a zero step would never end). A constant step is checked positive by the typer.
            positive = arith.CmpIOp(arith.CmpIPredicate.sgt, step, self.const_i32(0)).result
            ub = arith.SelectOp(positive, ub, lb).result
        loop = scf.ForOp(lb, ub, step, inits)  # type: ignore[arg-type]
        if s.stages is not None:
            stages = s.stages.value if isinstance(s.stages, A.Const) else 1
            loop.operation.attributes["tile.stages"] = i32_attr(int(stages))
            if s.stages_option is not None and s.stages_option.value.value is True:
                loop.operation.attributes["tile.reuse"] = ir.UnitAttr.get()
        with ir.InsertionPoint(loop.body):
            self.env.append({s.var: loop.induction_variable})
            for n, v in zip(names, loop.inner_iter_args, strict=True):
                self.env[-1][n] = v
            self.env.append({})
            self.block(s.body)
            self.env.pop()
            scf.YieldOp([self.env[-1][n] for n in names])  # type: ignore[misc]
            self.env.pop()
        for n, r in zip(names, loop.results, strict=True):
            self.rebind(n, r)

    def if_stmt(self, s: A.If) -> None:
        cond = self.scalar(s.cond)
        names = self.carried(s.then_body + s.else_body)
        before = [self.lookup(n, s.loc) for n in names]
        op = scf.IfOp(cond, [v.type for v in before], has_else=True)  # type: ignore[union-attr]
        for blk, body in ((op.then_block, s.then_body), (op.else_block, s.else_body)):
            with ir.InsertionPoint(blk):
                self.env.append(dict(zip(names, before, strict=True)))
                self.env.append({})
                self.block(body)
                self.env.pop()
                scf.YieldOp([self.env[-1][n] for n in names])  # type: ignore[misc]
                self.env.pop()
        for n, r in zip(names, op.results, strict=True):
            self.rebind(n, r)

    # -- expressions --------------------------------------------------------------------------
    def scalar(self, e: A.Expr) -> ir.Value:
        v = self.expr(e)
        assert isinstance(v, ir.Value)
        return v

    def elt(self, dtype: str) -> ir.Type:
        """The MLIR type of `dtype` on this arch (8-bit floats take its fp8 flavour)."""
        return element_type(dtype, self.arch.fp8_flavour)

    def ttype(self, shape: tuple[int, ...], dtype: str) -> ir.RankedTensorType:
        return tensor_type(shape, self.elt(dtype))

    def const_i32(self, value: int) -> ir.Value:
        return arith.ConstantOp(ir.IntegerType.get_signless(32), value).result

    def constant(self, value: float | int | bool, dtype: str) -> ir.Value:
        t = self.elt(dtype)
        if dtype == "i1":
            return arith.ConstantOp(t, ir.IntegerAttr.get(t, int(bool(value)))).result
        if dtype == "i32":
            return arith.ConstantOp(t, ir.IntegerAttr.get(t, int(value))).result
        return arith.ConstantOp(t, ir.FloatAttr.get(t, float(value))).result

    def expr(self, e: A.Expr) -> object:
        with self.loc(e):
            return self._expr(e)

    def _expr(self, e: A.Expr) -> object:
        if isinstance(e, A.Const):
            t = e.type
            assert isinstance(t, A.ScalarType)
            return self.constant(e.value, t.dtype)
        if isinstance(e, A.Name):
            return self.lookup(e.id, e.loc)
        if isinstance(e, A.BinOp):
            return self.binop(e)
        if isinstance(e, A.UnaryOp):
            v = self.to_type(self.expr(e.operand), e.type)
            dt = _dtype(e.type)
            if e.op == "-":
                if dt == "i32":
                    return arith.SubIOp(self.to_type(self.constant(0, "i32"), e.type), v).result
                return arith.NegFOp(v).result
            return arith.XOrIOp(v, self.to_type(self.constant(True, "i1"), e.type)).result
        if isinstance(e, A.Index):
            return self.index(e)
        if isinstance(e, A.Call):
            folded = self._folded_math(e)
            return folded if folded is not None else getattr(self, f"call_{e.func}")(e)
        raise SourceError(f"internal: no emitter for {type(e).__name__}", e.loc, self.kernel.source)

    def _folded_math(self, e: A.Call) -> ir.Value | None:
        """A float builtin of a name bound to a constant (`let lift = 1.0 + exp2(-11.0);` then
        `log2(lift)`) is a constant too; the checker folded those of literal arguments already
        (A.fold_math)."""
        if e.func not in A.MATH_FOLDS or not isinstance(e.type, A.ScalarType) or not isinstance(e.args[0], A.Name):
            return None
        v = self.expr(e.args[0])
        if not (isinstance(v, ir.OpResult) and isinstance(v.type, ir.F32Type)):
            return None
        op = v.owner.operation
        if op.name != "arith.constant":
            return None
        return self.constant(A.fold_math(e.func, ir.FloatAttr(op.attributes["value"]).value), "f32")

    def to_type(self, v: object, t: A.Type | None) -> ir.Value:
        """Splat a scalar or broadcast a tile (size-1 axes) to the tile type `t`."""
        assert isinstance(v, ir.Value)
        if not isinstance(t, A.TileType):
            return v
        if not isinstance(v.type, ir.RankedTensorType):
            return tile_op("splat", [v], [tensor_type(t.shape, v.type)]).result
        shape = tuple(ir.RankedTensorType(v.type).shape)
        if shape == t.shape:
            return v
        elt = ir.RankedTensorType(v.type).element_type
        return tile_op("broadcast", [v], [tensor_type(t.shape, elt)]).result

    def binop(self, e: A.BinOp) -> ir.Value:
        folded = self._fold_logic(e)
        if folded is not None:
            return folded
        lt, rt = e.lhs.type, e.rhs.type
        shape_t = e.type if e.op not in _CMP else _tile_like(e.type, _dtype(lt))
        # Comparisons produce i1 but operate on the operands' (common) dtype.
        operand_t = shape_t if e.op not in _CMP else _tile_like(e.type, _common_dtype(lt, rt))
        lhs = self.to_type(self.expr(e.lhs), operand_t)
        rhs = self.to_type(self.expr(e.rhs), operand_t)
        dt = _common_dtype(lt, rt)
        if e.op in _CMP:
            if dt in A.FLOAT_DTYPES:
                return arith.CmpFOp(_FCMP[e.op], lhs, rhs).result
            return arith.CmpIOp(_ICMP[e.op], lhs, rhs).result
        table = _FLOAT_OPS if dt in A.FLOAT_DTYPES else _INT_OPS
        if e.op in ("<<", ">>"):
            rhs = self._shift_count(rhs, operand_t)
        return table[e.op](lhs, rhs).result

    def _shift_count(self, count: ir.Value, t: A.Type | None) -> ir.Value:
        """A shift's count modulo 32, as the language defines it and the hardware does
        (`v_lshlrev_b32` reads 5 bits, and LLVM drops the mask for it): LLVM's own shift by 32 or
        more is poison, which its constant folding would turn into anything."""
        known = uniform_constant_int(count)
        if known is not None and 0 <= known < 32:
            return count
        return arith.AndIOp(count, self.to_type(self.constant(31, "i32"), t)).result

    def _fold_logic(self, e: A.BinOp) -> ir.Value | None:
        """`x & true`, `x | false` -> x and `x & false`, `x | true` -> the constant, for i1 values
        whose other operand is known at compile time (a literal, a bool constexpr, or a `where`
        on one): a mask that a constexpr switches off (`rows_ok & where(PAD_D, cols < D, true)`)
        then costs nothing."""
        if e.op not in ("&", "|", "and", "or") or _dtype(e.type) != "i1":
            return None
        lhs, rhs = self.expr(e.lhs), self.expr(e.rhs)
        for const, other in ((lhs, rhs), (rhs, lhs)):
            value = uniform_constant_int(const)  # type: ignore[arg-type]
            if value is not None:
                neutral = bool(value) == (e.op in ("&", "and"))  # true for and, false for or
                return self.to_type(other if neutral else const, e.type)
        lhs, rhs = self.to_type(lhs, e.type), self.to_type(rhs, e.type)
        return (arith.AndIOp if e.op in ("&", "and") else arith.OrIOp)(lhs, rhs).result

    def index(self, e: A.Index) -> object:
        base = self.expr(e.base)
        if isinstance(e.type, A.AccessType):
            ptr, strides, ttype = base  # type: ignore[misc]
            offsets: ir.Value | None = None
            dims = []
            for idx, stride in zip(e.indices, strides, strict=True):
                shape_t = A.TileType(e.type.shape, "i32") if e.type.shape else A.ScalarType("i32")
                i = self.to_type(self.expr(idx), shape_t)
                dims.append(IndexedDim(i, stride))
                term = i if stride is None else arith.MulIOp(i, self.to_type(stride, shape_t)).result
                offsets = term if offsets is None else arith.AddIOp(offsets, term).result
            assert offsets is not None and isinstance(e.base, A.Name)
            return Access(ptr, offsets, e.type.shape, ttype.dtype, e.base.id, dims)
        v = base
        axis = 0
        for idx in e.indices:
            if isinstance(idx, A.NoneLit):
                shape = list(ir.RankedTensorType(v.type).shape)  # type: ignore[union-attr]
                shape.insert(axis, 1)
                elt = ir.RankedTensorType(v.type).element_type  # type: ignore[union-attr]
                v = tile_op("expand_dims", [v], [tensor_type(shape, elt)],  # type: ignore[list-item]
                            {"axis": i32_attr(axis)}).result
            axis += 1
        return v

    # -- builtins -----------------------------------------------------------------------------
    def args(self, e: A.Call, names: list[str]) -> dict[str, A.Expr | None]:
        got: dict[str, A.Expr | None] = dict.fromkeys(names)
        for n, a in zip(names, e.args, strict=False):
            got[n] = a
        for kw in e.kwargs:
            got[kw.name] = kw.value
        return got

    def call_program_id(self, e: A.Call) -> ir.Value:
        return tile_op("program_id", [], [element_type("i32")], {"axis": i32_attr(e.args[0].value)}).result  # type: ignore[attr-defined]

    def call_num_programs(self, e: A.Call) -> ir.Value:
        return tile_op("num_programs", [], [element_type("i32")], {"axis": i32_attr(e.args[0].value)}).result  # type: ignore[attr-defined]

    def call_arange(self, e: A.Call) -> ir.Value:
        t = e.type
        assert isinstance(t, A.TileType)
        return tile_op("arange", [], [tensor_type(t.shape, "i32")], {"start": i32_attr(e.args[0].value)}).result  # type: ignore[attr-defined]

    def _fill(self, e: A.Call, value: float | int | bool) -> ir.Value:
        t = e.type
        assert isinstance(t, A.TileType)
        return tile_op("splat", [self.constant(value, t.dtype)], [self.ttype(t.shape, t.dtype)]).result

    def call_zeros(self, e: A.Call) -> ir.Value:
        return self._fill(e, 0)

    def call_full(self, e: A.Call) -> ir.Value:
        t = e.type
        assert isinstance(t, A.TileType)
        v = self.to_type(self.expr(e.args[1]), A.ScalarType(t.dtype)) if not isinstance(e.args[1], A.Const) \
            else self.constant(e.args[1].value, t.dtype)
        return tile_op("splat", [v], [self.ttype(t.shape, t.dtype)]).result

    def _mask(self, mask: A.Expr | None, shape_t: A.Type) -> ir.Value:
        m = self.constant(True, "i1") if mask is None else self.expr(mask)
        return self.to_type(m, _tile_like(shape_t, "i1"))

    def call_load(self, e: A.Call) -> ir.Value:
        a = self.args(e, ["access", "mask", "other", "prefetch"])
        acc = self.expr(a["access"])  # type: ignore[arg-type]
        assert isinstance(acc, Access)
        mask = self._mask(a["mask"], e.type)
        other_node = a["other"]
        if other_node is None:
            other = self.constant(0, acc.dtype)
        elif isinstance(other_node, A.Const):
            other = self.constant(other_node.value, acc.dtype)
        else:
            other = self.scalar(other_node)
        rt = self.ttype(acc.shape, acc.dtype) if acc.shape else self.elt(acc.dtype)
        # prefetch=false: the load stays in its iteration (pipeline-loops leaves it alone).
        attrs = {"prefetch": ir.BoolAttr.get(False)} if isinstance(a["prefetch"], A.Const) \
            and a["prefetch"].value is False else None
        ptr, offsets, mask = self._viewed(acc, mask, zero_fill=is_positive_zero(other))
        return tile_op("load", [ptr, offsets, mask, other], [rt], attrs).result

    def _viewed(self, acc: Access, mask: ir.Value, zero_fill: bool = True) -> tuple[ir.Value, ir.Value, ir.Value]:
        """The access's pointer, offsets and mask, through a `tile.view` where its mask bounds a
        dim's rows (tiledsl/ir/row_view.py): rows past the bound then cost no per-lane work. Only
        where out-of-range buffer reads give the value asked for (+0) and the tensor is addressed
        with buffer instructions (not a large tensor)."""
        o = self.options
        if not (acc.shape and zero_fill and o.disjoint_rows and o.unit_last_stride and o.buffer_masks
                and acc.tensor not in o.large_tensors
                and acc.dtype != "i1" and isinstance(mask.type, ir.RankedTensorType)):
            return acc.ptr, acc.offsets, mask
        return row_view(acc.ptr, acc.dims, acc.shape, mask, A.DTYPE_BYTES[acc.dtype], self.const_i32) \
            or (acc.ptr, acc.offsets, mask)

    def _write(self, e: A.Call, op: str) -> None:
        a = self.args(e, ["access", "value", "mask"])
        acc = self.expr(a["access"])  # type: ignore[arg-type]
        assert isinstance(acc, Access)
        shape_t = A.TileType(acc.shape, acc.dtype) if acc.shape else A.ScalarType(acc.dtype)
        value = self.to_type(self.expr(a["value"]), shape_t)  # type: ignore[arg-type]
        mask = self._mask(a["mask"], shape_t)
        ptr, offsets, mask = self._viewed(acc, mask) if op == "store" else (acc.ptr, acc.offsets, mask)
        tile_op(op, [ptr, offsets, value, mask], [])

    def call_store(self, e: A.Call) -> None:
        self._write(e, "store")

    def call_atomic_add(self, e: A.Call) -> None:
        self._write(e, "atomic_add")

    def call_dot(self, e: A.Call) -> ir.Value:
        a = self.args(e, ["a", "b", "acc", "trans_b"])
        t = e.type
        assert isinstance(t, A.TileType)
        acc = self.to_type(self.expr(a["acc"]), t) if a["acc"] is not None else self._fill(e, 0.0)
        trans = _flag(a["trans_b"])
        return tile_op("dot", [self.scalar(a["a"]), self.scalar(a["b"]), acc], [tensor_type(t.shape, "f32")],  # type: ignore[arg-type]
                       {"trans_b": ir.BoolAttr.get(trans)}).result

    def _reduce(self, e: A.Call, kind: str) -> ir.Value:
        t = e.type
        x = self.scalar(e.args[0])
        rt = self.ttype(t.shape, _dtype(t)) if isinstance(t, A.TileType) else self.elt(_dtype(t))
        return tile_op("reduce", [x], [rt], {"kind": ir.StringAttr.get(kind),
                                             "axis": i32_attr(e.args[1].value)}).result  # type: ignore[attr-defined]

    def call_max(self, e: A.Call) -> ir.Value:
        return self._reduce(e, "max")

    def call_min(self, e: A.Call) -> ir.Value:
        return self._reduce(e, "min")

    def call_sum(self, e: A.Call) -> ir.Value:
        return self._reduce(e, "sum")

    def _binary(self, e: A.Call, float_op: type, int_op: type) -> ir.Value:
        lhs = self.to_type(self.expr(e.args[0]), e.type)
        rhs = self.to_type(self.expr(e.args[1]), e.type)
        return (float_op if _dtype(e.type) in A.FLOAT_DTYPES else int_op)(lhs, rhs).result

    def call_maximum(self, e: A.Call) -> ir.Value:
        return self._binary(e, arith.MaxNumFOp, arith.MaxSIOp)

    def call_minimum(self, e: A.Call) -> ir.Value:
        return self._binary(e, arith.MinNumFOp, arith.MinSIOp)

    def call_fma(self, e: A.Call) -> ir.Value:
        """a * b + c rounded once (math.fma)."""
        a, b, c = (self.to_type(self.expr(x), e.type) for x in e.args)
        return math.FmaOp(a, b, c).result

    def _unary(self, e: A.Call, op: type) -> ir.Value:
        return op(self.to_type(self.expr(e.args[0]), e.type)).result

    def call_exp2(self, e: A.Call) -> ir.Value:
        return self._unary(e, math.Exp2Op)

    def call_log2(self, e: A.Call) -> ir.Value:
        return self._unary(e, math.Log2Op)

    def call_sqrt(self, e: A.Call) -> ir.Value:
        return self._unary(e, math.SqrtOp)

    def call_abs(self, e: A.Call) -> ir.Value:
        if _dtype(e.type) == "i32":
            return self._unary(e, math.AbsIOp)
        return self._unary(e, math.AbsFOp)

    def call_rcp(self, e: A.Call) -> ir.Value:
        x = self.to_type(self.expr(e.args[0]), e.type)
        return tile_op("rcp", [x], [x.type]).result

    # exp, log, tanh and rsqrt are built from the hardware's exp2, log2, rcp and sqrt (what a kernel
    # author would write by hand, and what the ROCm device library does without its slow paths).
    def _scaled(self, x: ir.Value, factor: float, t: A.Type | None) -> ir.Value:
        return arith.MulFOp(x, self.to_type(self.constant(factor, "f32"), t)).result

    def call_exp(self, e: A.Call) -> ir.Value:
        x = self.to_type(self.expr(e.args[0]), e.type)
        return math.Exp2Op(self._scaled(x, _LOG2E, e.type)).result

    def call_log(self, e: A.Call) -> ir.Value:
        x = self.to_type(self.expr(e.args[0]), e.type)
        return self._scaled(math.Log2Op(x).result, _LN2, e.type)

    def call_tanh(self, e: A.Call) -> ir.Value:
        """tanh(x) = 1 - 2 / (exp2(2 x log2e) + 1): -1 and 1 at the extremes (exp2 gives 0 and
        inf, rcp(inf) = 0), NaN for NaN. That form cancels near 0, so unless approx=true, |x| < 1/8
        takes the Taylor polynomial x - x^3/3 + 2x^5/15 - 17x^7/315 instead (relative error below
        1e-6 overall)."""
        t = e.type
        a = self.args(e, ["x", "approx"])
        approx = _flag(a["approx"])
        one = self.to_type(self.constant(1.0, "f32"), t)
        if approx:
            exponent = self._approx_tanh_exponent(a["x"], t)  # type: ignore[arg-type]
        else:
            x = self.to_type(self.expr(a["x"]), t)  # type: ignore[arg-type]
            exponent = self._scaled(x, 2 * _LOG2E, t)
        e2 = arith.AddFOp(math.Exp2Op(exponent).result, one).result
        wide = arith.SubFOp(one, self._scaled(tile_op("rcp", [e2], [e2.type]).result, 2.0, t)).result
        if approx:
            return wide
        x2 = arith.MulFOp(x, x).result
        poly = self.to_type(self.constant(-17 / 315, "f32"), t)
        for c in (2 / 15, -1 / 3, 1.0):
            poly = arith.AddFOp(arith.MulFOp(poly, x2).result, self.to_type(self.constant(c, "f32"), t)).result
        small = arith.CmpFOp(arith.CmpFPredicate.OLT, math.AbsFOp(x).result,
                             self.to_type(self.constant(0.125, "f32"), t)).result
        return arith.SelectOp(small, arith.MulFOp(x, poly).result, wide).result

    def _approx_tanh_exponent(self, arg: A.Expr, t: A.Type | None) -> ir.Value:
        """2 x log2(e) for tanh(x, approx=true). An argument written `y * c`, with c a scalar, is
        multiplied once, by the scalar c * 2 log2(e): one multiply per element, not two (the
        product is reassociated, as fast-math would)."""
        if isinstance(arg, A.BinOp) and arg.op == "*":
            for y, c in ((arg.lhs, arg.rhs), (arg.rhs, arg.lhs)):
                if isinstance(c.type, A.ScalarType):
                    k = self._scaled(self.expr(c), 2 * _LOG2E, None)  # type: ignore[arg-type]
                    return arith.MulFOp(self.to_type(self.expr(y), t), self.to_type(k, t)).result
        return self._scaled(self.to_type(self.expr(arg), t), 2 * _LOG2E, t)

    def call_rsqrt(self, e: A.Call) -> ir.Value:
        x = self.to_type(self.expr(e.args[0]), e.type)
        s = math.SqrtOp(x).result
        return tile_op("rcp", [s], [s.type]).result

    def call_umulhi(self, e: A.Call) -> ir.Value:
        a, b = (self.to_type(self.expr(x), e.type) for x in e.args[:2])
        return tile_op("umulhi", [a, b], [a.type]).result

    def call_philox(self, e: A.Call) -> ir.Value:
        """Philox-4x32-10 (passes/philox.philox_rounds); `word` picks one of the 4 output words
        (calls that differ only in it share the work after LLVM's GVN). tiledsl.reference.
        philox4x32 is the same function in numpy."""
        args = self.args(e, ["key0", "key1", "c0", "c1", "c2", "c3", "word"])
        k0, k1, c0, c1, c2, c3 = (self.expr(args[n])  # type: ignore[arg-type]
                                  for n in ("key0", "key1", "c0", "c1", "c2", "c3"))

        def combine(make: Callable[[ir.Value, ir.Value], ir.Value], a: ir.Value, b: ir.Value) -> ir.Value:
            # Scalar operands stay scalar until they meet a tile: a uniform key schedule splatted
            # up front would become one register per element after LLVM's scalarization.
            if isinstance(a.type, ir.RankedTensorType) or isinstance(b.type, ir.RankedTensorType):
                a, b = self.to_type(a, e.type), self.to_type(b, e.type)
            return make(a, b)

        def umulhi(a: ir.Value, b: ir.Value) -> ir.Value:
            return tile_op("umulhi", [a, b], [a.type]).result

        def const(x: int) -> ir.Value:
            return self.constant(x - (1 << 32) if x >= 1 << 31 else x, "i32")

        words = philox_rounds((k0, k1), (c0, c1, c2, c3), const=const, umulhi=umulhi, combine=combine)
        return self.to_type(words[args["word"].value], e.type)  # type: ignore[union-attr]

    def call_philox_byte(self, e: A.Call) -> ir.Value:
        """One op (tile.philox_byte), lowered by passes/philox.py: it shares one Philox call
        between the elements of a 4 x 4 block of (j, i) that a lane holds."""
        vals = [self.to_type(self.expr(x), e.type) for x in e.args]
        return tile_op("philox_byte", vals, [vals[2].type]).result

    def call_cast(self, e: A.Call) -> ir.Value:
        a = self.args(e, ["x", "dtype", "approx"])
        x = self.expr(e.args[0])
        src = _dtype(e.args[0].type)
        dst = _dtype(e.type)
        t = e.type
        rt = self.ttype(t.shape, dst) if isinstance(t, A.TileType) else self.elt(dst)
        if _flag(a["approx"]) and (src, dst) == ("f32", "bf16") and not self.arch.bf16_convert:
            # Ties away from zero on the bits (passes/lower_to_gpu.rule_round_bf16); an arch with
            # a bf16 convert instruction rounds to nearest even at no more cost.
            return tile_op("round_bf16", [x], [rt]).result
        if _flag(a["approx"]) and (src, dst) == ("f32", "f16"):
            # Toward zero, two values per v_cvt_pkrtz_f16_f32 (passes/lower_to_gpu.rule_round_f16),
            # on every arch, where nearest even takes three instructions a pair on all but gfx950.
            return tile_op("round_f16", [x], [rt]).result
        return _cast(x, src, dst, rt)  # type: ignore[arg-type]

    def call_where(self, e: A.Call) -> ir.Value:
        t = e.type
        cond = e.args[0]
        if isinstance(cond, A.Const) and isinstance(cond.value, bool):  # a constexpr switch: no select
            return self.to_type(self.expr(e.args[1] if cond.value else e.args[2]), t)
        c = self.to_type(self.expr(e.args[0]), _tile_like(t, "i1"))
        a = self.to_type(self.expr(e.args[1]), t)
        b = self.to_type(self.expr(e.args[2]), t)
        return arith.SelectOp(c, a, b).result

    def call_cdiv(self, e: A.Call) -> ir.Value:
        return arith.CeilDivSIOp(self.scalar(e.args[0]), self.scalar(e.args[1])).result


def _cast(x: ir.Value, src: str, dst: str, rt: ir.Type) -> ir.Value:
    if src == dst:
        return x
    if src in F8_DTYPES or dst in F8_DTYPES:
        # 8-bit floats convert to and from f32 only (v_cvt_pk_fp8_f32, v_cvt_f32_fp8): everything
        # else goes through f32, which is exact for every f8, f16, bf16 and i1 value and for the
        # i32 values in the f8 range (larger ones overflow either way), so the f32 -> f8 step is
        # the only rounding (to nearest even).
        if src == "f32":
            return arith.TruncFOp(rt, x).result
        if dst == "f32":
            return arith.ExtFOp(rt, x).result
        return _cast(_cast(x, src, "f32", _retype(rt, "f32")), "f32", dst, rt)
    fl = A.FLOAT_DTYPES
    if src in fl and dst in fl:
        if src in ("f16", "bf16") and dst in ("f16", "bf16"):  # same width: through f32
            return arith.TruncFOp(rt, arith.ExtFOp(_retype(rt, "f32"), x).result).result
        wider = A.DTYPE_BYTES[dst] > A.DTYPE_BYTES[src]
        return (arith.ExtFOp if wider else arith.TruncFOp)(rt, x).result
    if src == "i32" and dst in fl:
        if dst != "f32":
            # Through f32, as the hardware converts (there is no i32 -> 16-bit float instruction),
            # so that LLVM's constant folding, which would round once, gives what run time does:
            # for |x| > 2^24 that rounds twice, as numpy's and ml_dtypes' astype do too.
            return _cast(arith.SIToFPOp(_retype(rt, "f32"), x).result, "f32", dst, rt)
        return arith.SIToFPOp(rt, x).result
    if src in fl and dst == "i32":
        return arith.FPToSIOp(rt, x).result
    if src == "i1" and dst == "i32":
        return arith.ExtUIOp(rt, x).result
    if src == "i32" and dst == "i1":
        zero = arith.ConstantOp(x.type, ir.DenseElementsAttr.get_splat(x.type, ir.IntegerAttr.get(
            ir.IntegerType.get_signless(32), 0))) if isinstance(x.type, ir.RankedTensorType) else \
            arith.ConstantOp(x.type, 0)
        return arith.CmpIOp(arith.CmpIPredicate.ne, x, zero.result).result
    if src == "i1" and dst in fl:
        return arith.UIToFPOp(rt, x).result
    if src in fl and dst == "i1":  # x != 0, NaN included (as C converts to bool)
        zero = arith.ConstantOp(x.type, ir.DenseElementsAttr.get_splat(x.type, ir.FloatAttr.get(
            element_type(src), 0.0))) if isinstance(x.type, ir.RankedTensorType) else \
            arith.ConstantOp(x.type, ir.FloatAttr.get(element_type(src), 0.0))
        return arith.CmpFOp(arith.CmpFPredicate.UNE, x, zero.result).result
    raise ValueError(f"cast {src} -> {dst}")


def _retype(t: ir.Type, dtype: str) -> ir.Type:
    if isinstance(t, ir.RankedTensorType):
        return tensor_type(ir.RankedTensorType(t).shape, dtype)
    return element_type(dtype)


def _flag(node: A.Expr | None) -> bool:
    """A keyword switch (dot's trans_b, approx): absent is false, else the compile-time bool the
    checker made it (Typer.compile_time_bool)."""
    return isinstance(node, A.Const) and node.value is True


def _dtype(t: A.Type | None) -> str:
    assert isinstance(t, A.ScalarType | A.TileType)
    return t.dtype


def _common_dtype(a: A.Type | None, b: A.Type | None) -> str:
    da, db = _dtype(a), _dtype(b)
    return da if da == db or db == "i1" else db if da == "i1" else da


def _tile_like(t: A.Type | None, dtype: str) -> A.Type:
    if isinstance(t, A.TileType):
        return A.TileType(t.shape, dtype)
    return A.ScalarType(dtype)


_LOG2E, _LN2 = 1.4426950408889634, 0.6931471805599453
_CMP = {"<", "<=", ">", ">=", "==", "!="}
_FCMP = {"<": arith.CmpFPredicate.OLT, "<=": arith.CmpFPredicate.OLE, ">": arith.CmpFPredicate.OGT,
         ">=": arith.CmpFPredicate.OGE, "==": arith.CmpFPredicate.OEQ, "!=": arith.CmpFPredicate.UNE}
_ICMP = {"<": arith.CmpIPredicate.slt, "<=": arith.CmpIPredicate.sle, ">": arith.CmpIPredicate.sgt,
         ">=": arith.CmpIPredicate.sge, "==": arith.CmpIPredicate.eq, "!=": arith.CmpIPredicate.ne}
_FLOAT_OPS = {"+": arith.AddFOp, "-": arith.SubFOp, "*": arith.MulFOp, "/": arith.DivFOp}
_INT_OPS = {"+": arith.AddIOp, "-": arith.SubIOp, "*": arith.MulIOp, "//": arith.DivSIOp,
            "%": arith.RemSIOp, "&": arith.AndIOp, "|": arith.OrIOp, "^": arith.XOrIOp,
            "and": arith.AndIOp, "or": arith.OrIOp, "<<": arith.ShLIOp, ">>": arith.ShRSIOp}
