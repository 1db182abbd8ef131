"""The `tile` dialect, defined in IRDL and loaded into each MLIR context at run time.

Tile values are ranked tensors (`tensor<64x32xf16>`); after layout assignment each carries its
distributed layout as the tensor encoding (a string attribute, see passes/layouts.py).
Elementwise math uses the upstream `arith`/`math` ops on those tensors; only what has no upstream
equivalent is a `tile` op. Every op's semantics is documented in docs/compiler.md.
"""

from __future__ import annotations

from mlir import ir
from mlir._mlir_libs import _mlir

from tiledsl.fp8 import F8_DTYPES, FORMATS, MLIR_NAMES, fp8_format

# Each op: its operands as (name, constraint) and its results' constraints, checked by MLIR's
# verifier (IRDL), so a pass that builds a malformed op fails where it built it. Constraints:
# "tile" a ranked tensor, "scalar" an integer or float scalar, "i32"/"i1" those scalars,
# "ptr" an LLVM pointer, "index" i32 (a tile of them, or a scalar: the address of a scalar access),
# "mask" i1 (a tile or a scalar), "value" a tile or a scalar. IRDL checks all but the last three,
# which `kind_error` checks (see _constraint); shapes and layouts are checked by the passes' own
# verifier (passes/pipeline.verify_tile_module), since IRDL cannot express them.
TILE_OPS: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "program_id": ((), ("i32",)),                   # {axis}
    "num_programs": ((), ("i32",)),                 # {axis}
    "arange": ((), ("tile",)),                      # {start} -> tensor<Nxi32>
    "splat": ((("value", "scalar"),), ("tile",)),
    "broadcast": ((("value", "tile"),), ("tile",)),  # size-1 axes stretched to the result shape
    "expand_dims": ((("value", "tile"),), ("tile",)),  # {axis}
    "load": ((("ptr", "ptr"), ("offsets", "index"), ("mask", "mask"), ("other", "scalar")), ("value",)),
    "store": ((("ptr", "ptr"), ("offsets", "index"), ("value", "value"), ("mask", "mask")), ()),
    "atomic_add": ((("ptr", "ptr"), ("offsets", "index"), ("value", "value"), ("mask", "mask")), ()),
    # {row_dim} elements [start, start + length) of the tensor at ptr, as a pointer: accesses
    # through it are relative to start and read 0 / write nothing outside (tiledsl/ir/row_view.py)
    "view": ((("ptr", "ptr"), ("start", "i32"), ("length", "i32")), ("ptr",)),
    "dot": ((("a", "tile"), ("b", "tile"), ("acc", "tile")), ("tile",)),  # {trans_b} f32 acc += a @ b
    "reduce": ((("value", "tile"),), ("value",)),    # {kind = max|min|sum, axis}; 1-D -> scalar
    "convert_layout": ((("value", "tile"),), ("tile",)),
    "local_store": ((("value", "tile"),), ()),       # {offset, row_stride}: a tile into the LDS arena
    "local_load": ((), ("tile",)),                   # {offset, row_stride}: a tile from the arena
    "barrier": ((), ()),                             # workgroup barrier around LDS reuse
    "wave_fence": ((), ()),                          # orders one wave's LDS accesses (stage-lds: wave-private stagings)
    "rcp": ((("value", "value"),), ("value",)),      # elementwise hardware reciprocal (1 ulp)
    "umulhi": ((("a", "value"), ("b", "value")), ("value",)),  # high 32 bits of the unsigned i32 product
    "round_bf16": ((("value", "value"),), ("value",)),  # f32 -> bf16, to nearest with ties away from zero
    "round_f16": ((("value", "value"),), ("value",)),   # f32 -> f16, toward zero (two values per instruction)
    # byte (j mod 4) of word (i mod 4) of Philox-4x32-10 for key (key0, key1), counter (j >> 2, i >> 2, c2, c3)
    "philox_byte": (tuple((n, "value") for n in ("key0", "key1", "j", "i", "c2", "c3")), ("value",)),
}

_SCALARS = ("i1", "i32", "f32", "f16", "bf16", *sorted(f.mlir for f in FORMATS.values()))


def _constraint(c: str, v: str) -> list[str]:
    """IRDL lines defining %v as constraint `c`. Each operand and result gets its own variable:
    one IRDL variable used twice would force the two types to be equal."""
    if c == "tile":
        return [f'%{v} = irdl.base "!builtin.tensor"']
    if c == "ptr":
        return [f'%{v} = irdl.base "!llvm.ptr"']
    if c in ("i32", "i1"):
        return [f"%{v} = irdl.is {c}"]
    if c == "scalar":
        return [f"%{v}_{t} = irdl.is {t}" for t in _SCALARS] + \
            [f"%{v} = irdl.any_of({', '.join(f'%{v}_{t}' for t in _SCALARS)})"]
    # "index", "mask", "value": IRDL 22 aborts on an `irdl.base "!..."` inside `irdl.any_of`, so
    # "tile or scalar" stays unchecked here: kind_error checks it after every pass.
    return [f"%{v} = irdl.any"]


def kind_error(op: ir.Operation) -> str | None:
    """What is wrong with a tile op's "index", "mask" and "value" operands and results (the
    constraints IRDL leaves unchecked), or None."""
    spec = TILE_OPS.get(op.name.removeprefix("tile.")) if op.name.startswith("tile.") else None
    if spec is None:
        return None
    operands, results = spec
    named = [(f"operand '{n}'", c, v) for (n, c), v in zip(operands, op.operands, strict=False)]
    named += [(f"result {i}", c, v) for i, (c, v) in enumerate(zip(results, op.results, strict=False))]
    for what, c, value in named:
        t = value.type
        elt = ir.RankedTensorType(t).element_type if isinstance(t, ir.RankedTensorType) else t
        want = {"index": "i32", "mask": "i1"}.get(c)
        if want is not None and str(elt) != want:
            return f"{what} must be {want} (a tile or a scalar), got {t}"
        if c == "value" and not isinstance(t, ir.RankedTensorType) and str(t) not in _SCALARS:
            return f"{what} must be a tile or a scalar, got {t}"
    return None


def _dialect_source() -> str:
    ops = []
    for name, (operands, results) in TILE_OPS.items():
        lines = [f"  irdl.operation @{name} {{"]
        for i, (_, c) in enumerate(operands):
            lines += [f"    {line}" for line in _constraint(c, f"o{i}")]
        for i, c in enumerate(results):
            lines += [f"    {line}" for line in _constraint(c, f"r{i}")]
        lines.append(f"    irdl.operands({', '.join(f'{n}: %o{i}' for i, (n, _) in enumerate(operands))})")
        lines.append(f"    irdl.results({', '.join(f'r{i}: %r{i}' for i in range(len(results)))})")
        lines.append("  }")
        ops.append("\n".join(lines))
    return "irdl.dialect @tile {\n" + "\n".join(ops) + "\n}\n"


# Where the bindings find the `tile` namespace's Python module (see that package's docstring).
_PY_DIALECTS = "tiledsl.ir.py_dialects"


def load_tile_dialect(ctx: ir.Context) -> None:
    """Register the tile dialect in `ctx` (idempotent per context)."""
    from mlir.dialects import irdl

    if getattr(ctx, "_tiledsl_loaded", False):
        return
    if _PY_DIALECTS not in _mlir.globals.dialect_search_modules:
        _mlir.globals.append_dialect_search_prefix(_PY_DIALECTS)
    with ctx, ir.Location.unknown():
        irdl.load_dialects(ir.Module.parse(_dialect_source()))
    ctx._tiledsl_loaded = True  # type: ignore[attr-defined]


def new_context() -> ir.Context:
    ctx = ir.Context()
    load_tile_dialect(ctx)
    return ctx


def tile_op(name: str, operands: list[ir.Value], result_types: list[ir.Type],
            attrs: dict[str, ir.Attribute] | None = None, loc: ir.Location | None = None) -> ir.Operation:
    """Create `tile.<name>` at the current insertion point."""
    return ir.Operation.create(f"tile.{name}", results=result_types, operands=operands,
                               attributes=attrs or {}, loc=loc)


def i32_attr(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(32), value)


def int_attr(op: ir.Operation, name: str) -> int:
    return ir.IntegerAttr(op.attributes[name]).value


def str_attr(op: ir.Operation, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value


def element_type(dtype: str, fp8_flavour: str | None = None) -> ir.Type:
    """The MLIR type of a dtype. The 8-bit floats are the arch's flavour (tiledsl/fp8.py):
    f8E4M3FNUZ/f8E5M2FNUZ for "fnuz" (gfx942), f8E4M3FN/f8E5M2 for "ocp" (gfx950, gfx1201)."""
    if dtype in F8_DTYPES:
        return ir.Type.parse(fp8_format(dtype, fp8_flavour).mlir)
    return {
        "i1": lambda: ir.IntegerType.get_signless(1),
        "i32": lambda: ir.IntegerType.get_signless(32),
        "f32": ir.F32Type.get,
        "f16": ir.F16Type.get,
        "bf16": ir.BF16Type.get,
    }[dtype]()


def dtype_of(t: ir.Type) -> str:
    s = str(t)
    return {"i1": "i1", "i32": "i32", "f32": "f32", "f16": "f16", "bf16": "bf16", **MLIR_NAMES}[s]


def is_f8(t: ir.Type) -> bool:
    """Is `t` (a scalar, vector or tensor type) made of 8-bit floats?"""
    if isinstance(t, ir.ShapedType):
        t = ir.ShapedType(t).element_type
    return str(t) in MLIR_NAMES


def tensor_type(shape: tuple[int, ...] | list[int], dtype: str | ir.Type,
                layout: str | None = None, fp8_flavour: str | None = None) -> ir.RankedTensorType:
    elt = element_type(dtype, fp8_flavour) if isinstance(dtype, str) else dtype
    enc = ir.StringAttr.get(layout) if layout else None
    return ir.RankedTensorType.get(list(shape), elt, encoding=enc)


def is_tile(t: ir.Type) -> bool:
    return isinstance(t, ir.RankedTensorType)

