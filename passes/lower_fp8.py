"""Lowering rules for 8-bit floats (part of lower-to-gpu): conversions and memory access (which
bools share: memory holds them as bytes too).

Per-lane values of an f8 tile are `vector<R x f8E4M3FNUZ>` (or the arch's other f8 types, see
tiledsl/fp8.py). LLVM has no 8-bit float type, so memory sees them as bytes (`to_memory` /
`from_memory` bitcast to and from i8 around every load and store), and conversions go through the
hardware instructions, as `amdgpu` ops:

- f32 -> f8 (`arith.truncf`): `amdgpu.packed_trunc_2xfp8`, two values per instruction into one
  16-bit half of a dword (v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32, op_sel picking the half): round to
  nearest even, not saturating (out-of-range values become NaN, or infinity on OCP e5m2).
- f8 -> f32 (`arith.extf`): `amdgpu.ext_packed_fp8` of a 16-bit word to two f32 (v_cvt_pk_f32_fp8
  with a word select), or of one byte (v_cvt_f32_fp8): exact.

The emitter routes every other conversion to or from f8 through f32 (tiledsl/ir/emit.py `_cast`).
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import amdgpu, arith, vector

from tiledsl.ir.dialect import is_f8

PACK = 4  # f8 values per 32-bit register


def _is_bool(t: ir.Type) -> bool:
    t = ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t
    return isinstance(t, ir.IntegerType) and t.width == 1


def memory_type(elt: ir.Type) -> ir.Type:
    """The type an element is loaded and stored as: i8 for 8-bit floats and for bools (a byte
    each in memory, as numpy and torch hold them: LLVM's `vector<N x i1>` in memory is N packed
    bits), itself otherwise."""
    return ir.IntegerType.get_signless(8) if is_f8(elt) or _is_bool(elt) else elt


def _retyped(t: ir.Type, elt: ir.Type) -> ir.Type:
    return ir.VectorType.get(ir.VectorType(t).shape, elt) if isinstance(t, ir.VectorType) else elt


def to_memory(value: ir.Value) -> ir.Value:
    """An f8 scalar or vector as i8 bits, a bool as a byte 0 or 1 (anything else unchanged)."""
    if _is_bool(value.type):
        return arith.ExtUIOp(_retyped(value.type, ir.IntegerType.get_signless(8)), value).result
    if not is_f8(value.type):
        return value
    return arith.BitcastOp(_retyped(value.type, ir.IntegerType.get_signless(8)), value).result


def from_memory(value: ir.Value, elt: ir.Type) -> ir.Value:
    """i8 bits loaded for elements of type `elt`, as `elt`: a bool is a nonzero byte (anything
    else unchanged)."""
    if _is_bool(elt):
        zero = ir.IntegerAttr.get(ir.IntegerType.get_signless(8), 0)
        zeros = arith.ConstantOp(value.type, ir.DenseElementsAttr.get_splat(value.type, zero)
                                 if isinstance(value.type, ir.VectorType) else zero).result
        return arith.CmpIOp(arith.CmpIPredicate.ne, value, zeros).result
    if not is_f8(elt):
        return value
    return arith.BitcastOp(_retyped(value.type, elt), value).result


def _chunks(x: ir.Value, n: int) -> tuple[list[ir.Value], int]:
    """A vector as consecutive vector<PACK x T> pieces (the last one padded by repeating its
    last element), or a scalar as one piece; and the number of real elements."""
    if not isinstance(x.type, ir.VectorType):
        return [vector.BroadcastOp(ir.VectorType.get([PACK], x.type), x).result], 1
    total = ir.VectorType(x.type).shape[0]
    pieces = []
    for start in range(0, total, n):
        idx = [min(start + i, total - 1) for i in range(n)]
        pieces.append(x if idx == list(range(total)) else vector.ShuffleOp(x, x, idx).result)
    return pieces, total


def _join(pieces: list[ir.Value], total: int, scalar: bool) -> ir.Value:
    """The first `total` elements of the pieces, in order, as one vector (element 0 of a scalar)."""
    if scalar:
        return vector.ExtractOp(pieces[0], [], [0]).result
    elems = [vector.ExtractOp(p, [], [i]).result for p in pieces for i in range(ir.VectorType(p.type).shape[0])]
    elt = ir.VectorType(pieces[0].type).element_type
    return vector.FromElementsOp(ir.VectorType.get([total], elt), elems[:total]).result


def truncate(x: ir.Value, f8: ir.Type) -> ir.Value:
    """f32 scalar or vector<R x f32> -> the same shape of `f8`, two values per v_cvt_pk."""
    scalar = not isinstance(x.type, ir.VectorType)
    pieces, total = _chunks(x, PACK)
    out = []
    packed_t = ir.VectorType.get([PACK], f8)
    for piece in pieces:
        e = [vector.ExtractOp(piece, [], [i]).result for i in range(PACK)]
        lo = amdgpu.packed_trunc_2xfp8(packed_t, e[0], 0, source_b=e[1])
        out.append(amdgpu.packed_trunc_2xfp8(packed_t, e[2], 1, source_b=e[3], existing=lo))
    return _join(out, total, scalar)


def extend(x: ir.Value) -> ir.Value:
    """f8 scalar or vector<R x f8> -> the same shape of f32, a 16-bit word per v_cvt_pk_f32."""
    scalar = not isinstance(x.type, ir.VectorType)
    pieces, total = _chunks(x, PACK)
    f32 = ir.F32Type.get()
    if scalar:
        return amdgpu.ext_packed_fp8(f32, pieces[0], 0)
    pair = ir.VectorType.get([2], f32)
    out = [amdgpu.ext_packed_fp8(pair, piece, word) for piece in pieces for word in (0, 1)]
    return _join(out, total, False)


def conversion_rule(fallback: Callable[[object, ir.Operation], None]) -> Callable[[object, ir.Operation], None]:
    """arith.extf / arith.truncf: the f8 forms above, every other one by `fallback`."""
    def rule(lw, op: ir.Operation) -> None:
        src, res = op.operands[0], op.results[0]
        if not (is_f8(src.type) or is_f8(res.type)):
            fallback(lw, op)
            return
        x = lw.v(src)
        if is_f8(res.type):
            lw.vmap[res] = truncate(x, ir.ShapedType(res.type).element_type if isinstance(res.type, ir.ShapedType)
                                    else res.type)
        else:
            lw.vmap[res] = extend(x)
    return rule
