"""Row masks as buffer bounds: `tile.view` for a masked access whose mask bounds its row index.

A tile access to a tensor argument under a mask with a factor that bounds one dim's index,

    load(k[b, start + rows[:, None], h, cols[None, :]], mask=(rows < n)[:, None] & rest)
    # rows = first + arange(0, N): the factor is arange < n - first

is the same access through a view of the tensor that begins at that dim's row `start + first`
and ends at row `start + n` (`tile.view`, docs/compiler.md), with the factor dropped from the
mask and only the lane-varying terms left in the offsets:

    view = tile.view(k, b * s0 + (start + first) * s1 + h * s2, max(n - first, 0) * s1)
    load(view[arange(0, N)[:, None] * s1 + cols[None, :]], mask=rest)

lower-to-gpu makes the view the tensor's buffer descriptor with NUM_RECORDS at the view's end and
its start as SOFFSET (added to the address, left out of the range check), so a row past the bound
reads 0 or is not written with no per-lane work, and offsets that do not move with the rows' start
(loop-invariant in a walk over key blocks). This holds when
a row's elements lie within one stride of the row dim: its last-dim offsets, `(n_last - 1) *
stride_last`, stay below the row dim's stride (`CompileOptions.disjoint_rows`, which the launcher
checks for the dims the manifest lists as `row_bounds`), every other dim's index is uniform, and
active lanes index the last dim within the tensor's shape (an index past it is undefined: it may
read the next row or 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith

from tiledsl.ir.dialect import i32_attr, int_attr, tensor_type, tile_op
from tiledsl.passes.axis_info import AxisAnalysis
from tiledsl.passes.common import defining_op, is_tile, reshaped_source, splat_scalar


@dataclass
class IndexedDim:
    """One dim of an access: its index at the access's shape, and its stride (None: the
    compile-time unit stride of the last dim)."""

    index: ir.Value
    stride: ir.Value | None


@dataclass
class _Affine:
    """A tile `sum(uniforms) + core`, the 1-D `core` placed on `axis` of the tile's shape."""

    uniforms: list[ir.Value]
    core: ir.Value
    axis: int


def _uniform(v: ir.Value) -> ir.Value | None:
    """The scalar v stands for: v itself, or what a splat of it (through reshapes) was made from."""
    return splat_scalar(v) if is_tile(v) else v


def _affine(v: ir.Value) -> _Affine | None:
    """v as uniform scalars plus one 1-D tile reshaped onto an axis of v, or None."""
    uniforms: list[ir.Value] = []
    expands: list[int] = []  # expand_dims axes, outermost first
    while True:
        op = defining_op(v)
        if op is not None and op.name == "tile.broadcast":
            v = op.operands[0]
        elif op is not None and op.name == "tile.expand_dims":
            expands.append(int_attr(op, "axis"))
            v = op.operands[0]
        elif op is not None and op.name == "arith.addi" and _uniform(op.operands[0]) is not None:
            uniforms.append(_uniform(op.operands[0]))  # type: ignore[arg-type]
            v = op.operands[1]
        elif op is not None and op.name == "arith.addi" and _uniform(op.operands[1]) is not None:
            uniforms.append(_uniform(op.operands[1]))  # type: ignore[arg-type]
            v = op.operands[0]
        else:
            break
    if not is_tile(v) or len(ir.RankedTensorType(v.type).shape) != 1:
        return None
    return _Affine(uniforms, v, _lift(0, expands))


def _lift(axis: int, expands: list[int]) -> int:
    """Where `axis` of a tile lands through expand_dims by `expands` (outermost first): each
    expand_dims(x, e) moves x's axes at and after e one up."""
    for e in reversed(expands):
        axis += axis >= e
    return axis


def _same_rows(a: ir.Value, b: ir.Value) -> bool:
    """Two 1-D tiles with equal values in every lane: one value, or aranges alike."""
    if a == b:
        return True
    oa, ob = defining_op(a), defining_op(b)
    return (oa is not None and ob is not None and oa.name == ob.name == "tile.arange"
            and a.type == b.type and int_attr(oa, "start") == int_attr(ob, "start"))


def _and_factors(mask: ir.Value) -> list[ir.Value]:
    op = defining_op(mask)
    if op is not None and op.name == "arith.andi":
        return _and_factors(op.operands[0]) + _and_factors(op.operands[1])
    return [mask]


def _row_bound(factor: ir.Value) -> tuple[_Affine, ir.Value] | None:
    """A mask factor `x < n` (or `n > x`) with x affine over an arange and n uniform: (x, n)."""
    src = reshaped_source(factor)
    op = defining_op(src)
    if op is None or op.name != "arith.cmpi" or not is_tile(src):
        return None
    pred = ir.IntegerAttr(op.attributes["predicate"]).value
    a, b = op.operands
    if pred == arith.CmpIPredicate.sgt.value:
        a, b = b, a
    elif pred != arith.CmpIPredicate.slt.value:
        return None
    bound, x = _uniform(b), _affine(a)
    core = defining_op(x.core) if x is not None else None
    if bound is None or x is None or core is None or core.name != "tile.arange" or int_attr(core, "start") < 0:
        return None
    x.axis = _place(x.axis, factor)  # the factor's own reshapes place the compare on the access
    return x, bound


def _place(axis: int, v: ir.Value) -> int:
    """Where axis `axis` of reshaped_source(v) lands in v (through its expand_dims)."""
    expands = []
    op = defining_op(v)
    while op is not None and op.name in ("tile.broadcast", "tile.expand_dims"):
        if op.name == "tile.expand_dims":
            expands.append(int_attr(op, "axis"))
        op = defining_op(op.operands[0])
    return _lift(axis, expands)


def _sum(values: list[ir.Value], zero: Callable[[], ir.Value]) -> ir.Value:
    total = values[0] if values else zero()
    for v in values[1:]:
        total = arith.AddIOp(total, v).result
    return total


def _times(v: ir.Value, stride: ir.Value | None) -> ir.Value:
    return v if stride is None else arith.MulIOp(v, stride).result


def _on_axis(core: ir.Value, axis: int, shape: tuple[int, ...]) -> ir.Value:
    """The 1-D tile `core` laid along `axis` of `shape` (expand_dims, then broadcast)."""
    v, dims = core, [shape[axis]]
    for ax in range(len(shape)):
        if ax != axis:
            dims.insert(ax, 1)
            v = tile_op("expand_dims", [v], [tensor_type(dims, "i32")], {"axis": i32_attr(ax)}).result
    if tuple(dims) != shape:
        v = tile_op("broadcast", [v], [tensor_type(shape, "i32")]).result
    return v


def row_view(ptr: ir.Value, dims: list[IndexedDim], shape: tuple[int, ...], mask: ir.Value, elt_bytes: int,
             const_i32: Callable[[int], ir.Value]) -> tuple[ir.Value, ir.Value, ir.Value] | None:
    """(view, offsets, mask) for an access to `ptr` whose mask bounds one dim's rows (the module
    docstring), or None when it does not have that form.

    Elements narrower than a dword, bounded along the last dim, need the bound to be a known
    multiple of a dword: the hardware checks each dword of a vector access against NUM_RECORDS
    whole, so a dword holding the last element and one past the bound would read 0 (or not be
    written) entire. A bound on another dim ends at a row boundary, which a vector never crosses;
    vectors along rows whose starts are not known to be dword-aligned are not made at all."""
    last, factors = len(dims) - 1, _and_factors(mask)
    for factor in factors:
        bound = _row_bound(factor)
        if bound is None:
            continue
        rows, n = bound
        for r, dim in enumerate(dims):
            index = _affine(dim.index)
            if index is None or index.axis != rows.axis or not _same_rows(index.core, rows.core):
                continue
            others = [d for i, d in enumerate(dims) if i not in (r, last)]
            if any(_uniform(d.index) is None for d in others):
                break  # a lane-varying index in another dim: rows may interleave (try the next factor)
            if r == last and elt_bytes < 4 and _divisor(n, rows.uniforms) * elt_bytes % 4:
                break  # the view's end may split a vector's dword: the mask stays per lane
            start = _sum([_times(_uniform(d.index), d.stride) for d in others]  # type: ignore[arg-type]
                         + [_times(_sum(index.uniforms, lambda: const_i32(0)), dim.stride)], lambda: const_i32(0))
            rows_left = arith.MaxSIOp(arith.SubIOp(n, _sum(rows.uniforms, lambda: const_i32(0))).result,
                                      const_i32(0)).result
            view = tile_op("view", [ptr, start, _times(rows_left, dim.stride)], [ptr.type],
                           {"row_dim": i32_attr(r)}).result
            offsets = _on_axis(index.core, index.axis, shape)
            if dim.stride is not None:
                offsets = arith.MulIOp(offsets, tile_op("splat", [dim.stride], [offsets.type]).result).result
            if r != last:
                offsets = arith.AddIOp(offsets, _times_tile(dims[last])).result
            rest = [f for f in factors if f != factor]
            kept = rest[0] if rest else tile_op("splat", [_true()], [mask.type]).result
            for f in rest[1:]:
                kept = arith.AndIOp(kept, f).result
            return view, offsets, kept
    return None


def _divisor(n: ir.Value, firsts: list[ir.Value]) -> int:
    """A power of two dividing the view's rows, max(n - sum(firsts), 0)."""
    axis = AxisAnalysis()
    return min(axis.info(v).div for v in [n, *firsts])


def _times_tile(dim: IndexedDim) -> ir.Value:
    if dim.stride is None:
        return dim.index
    return arith.MulIOp(dim.index, tile_op("splat", [dim.stride], [dim.index.type]).result).result


def _true() -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
