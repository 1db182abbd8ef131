"""The `tile` dialect, defined in IRDL and loaded into each MLIR context at run time.

Tile values are ranked tensors (`tensor<64x32xf16>`); after layout assignment each carries its
distributed layout as the tensor encoding (a string attribute, see passes/layouts.py).
Elementwise math uses the upstream `arith`/`math` ops on those tensors; only what has no upstream
equivalent is a `tile` op. Every op's semantics is documented in docs/compiler.md.
"""

from __future__ import annotations

from mlir import ir

# name: (operand names, result count). Every operand/result is `irdl.any`; the verifier of each op
# is our own checks in the passes (shapes and layouts), since IRDL cannot express them.
TILE_OPS: dict[str, tuple[tuple[str, ...], int]] = {
    "program_id": ((), 1),          # {axis} -> i32
    "num_programs": ((), 1),        # {axis} -> i32
    "arange": ((), 1),              # {start} -> tensor<Nxi32>
    "splat": (("value",), 1),       # scalar -> tensor
    "broadcast": (("value",), 1),   # tensor with size-1 axes -> tensor of the result shape
    "expand_dims": (("value",), 1),  # {axis} tensor<N> -> tensor<1xN> / tensor<Nx1>
    "load": (("ptr", "offsets", "mask", "other"), 1),   # global gather, masked lanes get `other`
    "store": (("ptr", "offsets", "value", "mask"), 0),
    "atomic_add": (("ptr", "offsets", "value", "mask"), 0),
    "dot": (("a", "b", "acc"), 1),  # {trans_b} f32 acc += a @ b (or a @ b^T)
    "reduce": (("value",), 1),      # {kind = max|min|sum, axis}
    "convert_layout": (("value",), 1),
    "local_store": (("value",), 0),  # {offset, row_stride}: write a tile into the LDS arena
    "local_load": ((), 1),          # {offset, row_stride}: read a tile (any layout) from the arena
    "barrier": ((), 0),             # workgroup barrier around LDS reuse
    "rcp": (("value",), 1),         # elementwise hardware reciprocal (1 ulp), scalar or tile
}


def _dialect_source() -> str:
    ops = []
    for name, (operands, nresults) in TILE_OPS.items():
        lines = [f"  irdl.operation @{name} {{"]
        for i in range(len(operands) + nresults):
            lines.append(f"    %t{i} = irdl.any")
        if operands:
            args = ", ".join(f"{n}: %t{i}" for i, n in enumerate(operands))
            lines.append(f"    irdl.operands({args})")
        if nresults:
            lines.append(f"    irdl.results(result: %t{len(operands)})")
        else:
            lines.append("    irdl.results()")
        lines.append("  }")
        ops.append("\n".join(lines))
    return "irdl.dialect @tile {\n" + "\n".join(ops) + "\n}\n"


def load_tile_dialect(ctx: ir.Context) -> None:
    """Register the tile dialect in `ctx` (idempotent per context)."""
    from mlir.dialects import irdl

    if getattr(ctx, "_tiledsl_loaded", False):
        return
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


def element_type(dtype: str) -> ir.Type:
    return {
        "i1": lambda: ir.IntegerType.get_signless(1),
        "i32": lambda: ir.IntegerType.get_signless(32),
        "f32": ir.F32Type.get,
        "f16": ir.F16Type.get,
        "bf16": ir.BF16Type.get,
        "f8e4m3": ir.Float8E4M3FNType.get,
        "f8e5m2": ir.Float8E5M2Type.get,
    }[dtype]()


def dtype_of(t: ir.Type) -> str:
    s = str(t)
    return {"i1": "i1", "i32": "i32", "f32": "f32", "f16": "f16", "bf16": "bf16",
            "f8E4M3FN": "f8e4m3", "f8E5M2": "f8e5m2"}[s]


def tensor_type(shape: tuple[int, ...] | list[int], dtype: str | ir.Type,
                layout: str | None = None) -> ir.RankedTensorType:
    elt = element_type(dtype) if isinstance(dtype, str) else dtype
    enc = ir.StringAttr.get(layout) if layout else None
    return ir.RankedTensorType.get(list(shape), elt, encoding=enc)


def layout_of(t: ir.Type) -> str | None:
    rt = ir.RankedTensorType(t)
    return ir.StringAttr(rt.encoding).value if rt.encoding is not None else None


def is_tile(t: ir.Type) -> bool:
    return isinstance(t, ir.RankedTensorType)

