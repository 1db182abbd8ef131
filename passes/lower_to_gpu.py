"""Lower the laid-out tile IR to the gpu dialect: one function per kernel, one rule per op.

Each tile value becomes, in every lane, a `vector<R x T>` of the R elements its layout gives that
lane (passes/layouts.py). Rules emit upstream arith/vector/scf/gpu/llvm/amdgpu ops and ROCDL
intrinsics (exp2, log, readfirstlane) -- never calls into ROCm device libraries.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable

import numpy as np
from mlir import ir
from mlir.dialects import amdgpu, arith, gpu, llvm, math, rocdl, scf, vector

from tiledsl.backends.rocm.arch import Arch
from tiledsl.ir.dialect import int_attr, str_attr
from tiledsl.lang.ast import DTYPE_BYTES
from tiledsl.options import CompileOptions
from tiledsl.passes import layouts as L
from tiledsl.passes.axis_info import AxisAnalysis
from tiledsl.passes.common import (
    PassContext,
    constant_trip_count,
    defining_op,
    is_tile,
    kernel_funcs,
    op_error,
    ops_in,
    reshaped_source,
    tile_dtype,
    tile_shape,
)
from tiledsl.passes.lane_exchange import lane_exchange, lower_exchange, other_row
from tiledsl.passes.lower_fp8 import conversion_rule, from_memory, memory_type, to_memory
from tiledsl.passes.lower_memory import c32, gep, i32, pack_stored, rule_load, rule_view, rule_write
from tiledsl.passes.philox import rule_philox_byte

LDS_SYMBOL = "__tile_lds"


class _Lowering:
    def __init__(self, fn: ir.Operation, arch: Arch, source: str | None, lds_bytes: int, arena_bytes: int,
                 options: CompileOptions):
        self.fn = fn
        self.arch = arch
        self.options = options
        self.source = source
        self.lds_bytes = lds_bytes
        self.arena_bytes = arena_bytes  # LDS below this byte holds resident tiles (see stage_lds)
        self.threads = L.Threads(arch.wave_size, int_attr(fn, "tile.waves"))
        self.vmap: dict[ir.Value, ir.Value] = {}
        self.lazy: dict[ir.Value, ir.Operation] = {}  # local_load results a dot reads fragment-wise
        self.bases: dict[str, list[ir.Value]] = {}
        self.splats: dict[ir.Value, ir.Value] = {}  # lowered splat vector -> its scalar
        self.entry_values: dict[Hashable, ir.Value] = {}  # see once()
        self.axis = AxisAnalysis()
        self.large_args = set(ir.DenseI32ArrayAttr(fn.attributes["tile.large_args"])) \
            if "tile.large_args" in fn.attributes else set()
        self.buffer_args: set[int] = set()  # kernel arguments addressed with buffer instructions
        self.row_bounds: set[tuple[int, int]] = set()  # (argument, dim) whose rows a view bounds
        self.halves_swapped = 0  # reductions across wave halves or rows through permlanes (swap_halves)
        self.awaiting_first_dot = False  # inside a loop body whose first dot is still to come

    # -- types -----------------------------------------------------------------------------------
    def regs(self, t: ir.Type) -> int:
        return L.num_regs(L.layout_of(t), tile_shape(t), self.threads)

    def lowered_type(self, t: ir.Type) -> ir.Type:
        if not isinstance(t, ir.RankedTensorType):
            return t
        return ir.VectorType.get([self.regs(t)], ir.RankedTensorType(t).element_type)

    def lin(self, v: ir.Value) -> L.Linear:
        return L.linear(L.layout_of(v.type), tile_shape(v.type), self.threads)

    # -- function ---------------------------------------------------------------------------------
    def build(self, gpu_module_body: ir.Block) -> None:
        fn = self.fn
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        block = self.threads.count
        with ir.InsertionPoint(gpu_module_body), fn.location:
            gfn = gpu.GPUFuncOp(ir.TypeAttr.get(ir.FunctionType.get(ftype.inputs, [])),
                                sym_name=ir.StringAttr(fn.attributes["sym_name"]).value,
                                kernel=True, known_block_size=[block, 1, 1])
            if "tile.occupancy" in fn.attributes:
                # occupancy(N): LLVM caps the registers so N waves fit on a SIMD
                # (amdgpu-waves-per-eu), spilling rather than exceeding the cap.
                gfn.attributes["rocdl.waves_per_eu"] = fn.attributes["tile.occupancy"]
            if self.options.schedule:  # CompileOptions.schedule, a function attribute LLVM reads
                gfn.attributes["passthrough"] = ir.ArrayAttr.get([ir.ArrayAttr.get(
                    [ir.StringAttr.get("amdgpu-sched-strategy"), ir.StringAttr.get(self.options.schedule)])])
            entry = gfn.add_entry_block()
        old_entry = fn.regions[0].blocks[0]
        for old, new in zip(old_entry.arguments, entry.arguments, strict=True):
            self.vmap[old] = new
        with ir.InsertionPoint(entry), fn.location:
            tid = arith.IndexCastOp(i32(), gpu.thread_id(gpu.Dimension.x)).result
            ws = self.threads.wave_size
            self.lane = arith.AndIOp(tid, c32(ws - 1)).result
            self.wave = rocdl.readfirstlane(i32(), arith.ShRUIOp(tid, c32(ws.bit_length() - 1)).result)
            self.anchor = arith.ConstantOp(i32(), 0)  # thread coordinates are computed before this
            self.lower_block(old_entry)

    def lower_block(self, block: ir.Block) -> None:
        for op in ops_in(block):
            with op.location:
                if op.name == "tile.dot" and self.awaiting_first_dot:
                    self.awaiting_first_dot = False
                    if self.options.interleave:
                        # CompileOptions.interleave: LLVM applies the strategy to the whole block
                        # (scheduling region) that holds it. Only the loop's first dot: the same in
                        # the blocks of its later dots (the forward's P.V) modeled slower.
                        rocdl.iglp_opt(0)
                rule = RULES.get(op.name)
                if rule is None:
                    raise op_error(op, f"internal: no lowering rule for {op.name}", self.source, "lower-to-gpu")
                rule(self, op)

    def v(self, x: ir.Value) -> ir.Value:
        return self.vmap[x]

    # -- thread coordinates -------------------------------------------------------------------------
    def base(self, v: ir.Value) -> list[ir.Value]:
        """Per-dim scalar base coordinate of this lane for v's layout (lane + wave parts)."""
        return self.base_of(f"{ir.RankedTensorType(v.type).encoding}:{tile_shape(v.type)}", self.lin(v))

    def base_of(self, key: str, lin: L.Linear) -> list[ir.Value]:
        """The same for a decomposed layout, cached under `key`."""
        if key not in self.bases:
            with ir.InsertionPoint(self.anchor):
                dims = []
                for d in range(lin.regs.shape[1]):
                    acc = c32(0)
                    for src, bases in ((self.lane, lin.lane_bases), (self.wave, lin.wave_bases)):
                        for k, b in enumerate(bases):
                            if b[d]:
                                bit = arith.AndIOp(arith.ShRUIOp(src, c32(k)).result, c32(1)).result
                                acc = arith.AddIOp(acc, arith.MulIOp(bit, c32(int(b[d]))).result).result
                    dims.append(acc)
            self.bases[key] = dims
        return self.bases[key]

    def scalar_base(self, key: str, build: Callable[[], ir.Value]) -> ir.Value:
        """A per-thread value built once at the kernel's entry from base() values, cached under
        `key` (an LDS staging's base address per swizzle flip)."""
        if key not in self.bases:
            with ir.InsertionPoint(self.anchor):
                self.bases[key] = [build()]
        return self.bases[key][0]

    def coord(self, v: ir.Value, d: int) -> ir.Value:
        """vector<R x i32>: coordinate along axis d of each register of this lane."""
        lin = self.lin(v)
        vt = ir.VectorType.get([lin.num_regs], i32())
        offs = arith.ConstantOp(vt, ir.DenseElementsAttr.get(np.ascontiguousarray(lin.regs[:, d], dtype=np.int32),
                                                             type=vt)).result
        return arith.AddIOp(vector.BroadcastOp(vt, self.base(v)[d]).result, offs).result

    def owner_mask(self, v: ir.Value) -> ir.Value | None:
        """i1 that is true in exactly one of the lanes/waves holding replicated copies (for writes)."""
        lin = self.lin(v)
        cond = None
        for src, bits in ((self.lane, lin.replicated_lane_bits()), (self.wave, lin.replicated_wave_bits())):
            for k in bits:
                is0 = arith.CmpIOp(arith.CmpIPredicate.eq,
                                   arith.AndIOp(src, c32(1 << k)).result, c32(0)).result
                cond = is0 if cond is None else arith.AndIOp(cond, is0).result
        return cond

    def once(self, key: Hashable, build: Callable[[], ir.Value]) -> ir.Value:
        """build()'s value, computed once per kernel where the thread coordinates are, before any
        loop (loop-invariant per-lane constants)."""
        if key not in self.entry_values:
            with ir.InsertionPoint(self.anchor):
                self.entry_values[key] = build()
        return self.entry_values[key]

    # -- element helpers --------------------------------------------------------------------------
    def elems(self, vec: ir.Value) -> list[ir.Value]:
        n = ir.VectorType(vec.type).shape[0]
        return [vector.ExtractOp(vec, [], [i]).result for i in range(n)]

    def splat(self, vt: ir.Type, scalar: ir.Value) -> ir.Value:
        """vector.broadcast of a scalar, remembered so that elementwise users take the scalar."""
        vec = vector.BroadcastOp(vt, scalar).result
        self.splats[vec] = scalar
        return vec

    def pack(self, vals: list[ir.Value], elt: ir.Type) -> ir.Value:
        vt = ir.VectorType.get([len(vals)], elt)
        return vector.FromElementsOp(vt, vals).result


# -- rules: one per op ---------------------------------------------------------------------------

def rule_clone(lw: _Lowering, op: ir.Operation) -> None:
    """Elementwise arith/math ops: the same op on the per-lane vectors. A bitwise op or an i32
    compare with an operand that is a splat of a scalar uses that scalar, in an op per element:
    the broadcast vector would be hoisted out of a loop by LLVM as a vector and then live across
    it as one register per element (an SGPR each when uniform; philox's round keys, 20 x 64 SGPRs
    on wave64; the forward's `(n0 + ns)[None, :] < seqlen_k`, 30 more SGPRs on CDNA). Other ops
    keep the vector form: the same change there moved the forward's masked variants to more
    registers, and for `muli` the backward's dq_acc addresses (rows * D_QK) spilled 16 VGPRs on
    gfx942 -- though without it the forward at head dim 80 holds one stride in 7 SGPRs for
    `cols * stride` on gfx942 (compiler gap, issue 15). Session 44 tried `muli` again: nothing
    spills now and most kernels lose instructions (gfx942's hdim 80 causal forward 314 VGPRs, 58
    AGPRs and 5 SGPR spills -> 251 VGPRs), but it models slower where it matters (B 2, H 16, S
    2048: gfx950's hdim 64 forward 1016.6 -> 923.2 TFLOP/s, gfx942's causal hdim 128 bf16
    backward 320.3 -> 291.4, which then keeps its buffer accesses where it had taken branches).
    With compares kept scalar, the forward's key end is written plainly instead of
    `ns < seqlen_k - n0` folded by hand. Session 31, this and stage-lds' first-iteration barriers
    together, modeled f16 TFLOP/s at B 2, H 16, S 2048:
    gfx950 hdim 64 881.3 -> 934.9 (219 VGPRs instead of 288), gfx942 hdim 128 675.0 -> 681.2,
    gfx1201 hdim 128 131.1 -> 132.7, gfx1100 hdim 64 82.3 -> 80.8 (its row now masks query rows:
    81.9), gfx1201 hdim 64 135.4 -> 133.1, the others within 1 % (docs/profile.md)."""
    attrs = {a: op.attributes[a] for a in op.attributes}
    if op.name == "arith.constant" and is_tile(op.result):
        value = ir.DenseElementsAttr(op.attributes["value"]).get_splat_value()
        vt = lw.lowered_type(op.result.type)
        attrs["value"] = ir.DenseElementsAttr.get_splat(vt, value)
    operands = [lw.v(x) for x in op.operands]
    scalars = [lw.splats.get(x) for x in operands]
    result_types = [lw.lowered_type(r.type) for r in op.results]
    if op.name in _SPLAT_AS_SCALAR and any(s is not None for s in scalars):
        vt = ir.VectorType(result_types[0])
        if ir.VectorType(operands[0].type).element_type == i32():
            columns = [[s] * vt.shape[0] if s is not None else lw.elems(x)
                       for s, x in zip(scalars, operands, strict=True)]
            elems = [ir.Operation.create(op.name, results=[vt.element_type], operands=list(ops), attributes=attrs)
                     .result for ops in zip(*columns, strict=True)]
            lw.vmap[op.result] = lw.pack(elems, vt.element_type)
            return
    new = ir.Operation.create(op.name, results=result_types, operands=operands, attributes=attrs)
    for r, n in zip(op.results, new.results, strict=True):
        lw.vmap[r] = n


_SPLAT_AS_SCALAR = ("arith.xori", "arith.andi", "arith.ori", "arith.cmpi")


def rule_mulf(lw: _Lowering, op: ir.Operation) -> None:
    """A loop-carried tile times a broadcast factor (online softmax's `acc * alpha[:, None]`): with
    CompileOptions.skip_unit_scales, a wave whose factors are all exactly 1 skips the multiply
    (x * 1 is x bit for bit, NaN, infinities, signed zeros and denormals included). The test is
    one compare per factor register and a ballot: a branch uniform over the wave. The products
    are written one per element: as one vector multiply, LLVM's SimplifyCFG would count it as one
    cheap instruction and turn the branch back into a select per element."""
    found = _unit_factor(lw, op) if lw.options.skip_unit_scales else None
    if found is None:
        rule_clone(lw, op)
        return
    carried, factor = found
    operands = [lw.v(x) for x in op.operands]
    vt = ir.VectorType(operands[0].type)
    regs = lw.elems(lw.v(factor))
    one = arith.ConstantOp(vt.element_type, 1.0).result
    differs = [arith.CmpFOp(arith.CmpFPredicate.UNE, r, one).result for r in regs]  # NaN differs
    any_lane = functools.reduce(lambda a, b: arith.OrIOp(a, b).result, differs)
    wave_t = ir.IntegerType.get_signless(lw.arch.wave_size)
    ballot = rocdl.ballot(wave_t, any_lane)
    branch = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.ne, ballot, arith.ConstantOp(wave_t, 0).result).result,
                      [vt], has_else=True)
    attrs = {a: op.attributes[a] for a in op.attributes}
    with ir.InsertionPoint(branch.then_block):
        products = [ir.Operation.create("arith.mulf", results=[vt.element_type], operands=[a, b], attributes=attrs)
                    .result for a, b in zip(lw.elems(operands[0]), lw.elems(operands[1]), strict=True)]
        scf.YieldOp([lw.pack(products, vt.element_type)])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([operands[carried]])
    lw.vmap[op.result] = branch.results[0]


def _unit_factor(lw: _Lowering, op: ir.Operation) -> tuple[int, ir.Value] | None:
    """(which operand, factor) when op multiplies a tile its loop carries (an iteration argument)
    by a broadcast of a tile with fewer registers per lane (the factor the test reads): else None."""
    if not is_tile(op.result):
        return None
    for i in (0, 1):
        x, other = op.operands[i], op.operands[1 - i]
        carried = isinstance(x, ir.BlockArgument) and x.owner.owner.name == "scf.for" and x.arg_number > 0
        factor = reshaped_source(other, ("tile.broadcast", "tile.expand_dims", "tile.convert_layout"))
        if carried and factor != other and is_tile(factor) and lw.regs(factor.type) < lw.regs(op.result.type):
            return i, factor
    return None


def _per_element(fn):
    def rule(lw: _Lowering, op: ir.Operation) -> None:
        x = lw.v(op.operands[0])
        if not isinstance(x.type, ir.VectorType):
            lw.vmap[op.result] = fn(x)
            return
        elt = ir.VectorType(x.type).element_type
        lw.vmap[op.result] = lw.pack([fn(e) for e in lw.elems(x)], elt)
    return rule


rule_exp2 = _per_element(lambda x: rocdl.exp2(x.type, x))
rule_log2 = _per_element(lambda x: rocdl.log(x.type, x))
rule_sqrt = _per_element(lambda x: rocdl.sqrt(x.type, x))
rule_absf = _per_element(lambda x: arith.MaxNumFOp(x, arith.NegFOp(x).result).result)
rule_rcp = _per_element(lambda x: rocdl.rcp(x.type, x))


def rule_umulhi(lw: _Lowering, op: ir.Operation) -> None:
    """High word of the 64-bit unsigned product (v_mul_hi_u32), on the per-lane vectors."""
    lw.vmap[op.result] = arith.MulUIExtendedOp(lw.v(op.operands[0]), lw.v(op.operands[1])).high


def _i32_like(x: ir.Value, v: int) -> ir.Value:
    """The i32 constant v in x's type: a scalar, or a splat over x's per-lane vector."""
    attr = ir.IntegerAttr.get(i32(), v)
    if isinstance(x.type, ir.VectorType):
        return arith.ConstantOp(x.type, ir.DenseElementsAttr.get_splat(x.type, attr)).result
    return arith.ConstantOp(i32(), attr).result


def rule_round_bf16(lw: _Lowering, op: ir.Operation) -> None:
    """f32 -> bf16 to nearest, ties away from zero: add half a bf16 ulp to the bits and keep the
    high half (v_add_u32 per value, one v_perm_b32 per pair), for `cast(x, bf16, approx=true)`.
    Exact rounding for finite values and infinities; a NaN whose payload carries into the exponent
    or sign becomes an infinity or a zero (docs/language.md)."""
    x = lw.v(op.operands[0])
    shape = ir.VectorType(x.type).shape if isinstance(x.type, ir.VectorType) else None

    def typed(elt: ir.Type) -> ir.Type:
        return elt if shape is None else ir.VectorType.get(shape, elt)

    bits = arith.BitcastOp(typed(i32()), x).result
    high = arith.ShRUIOp(arith.AddIOp(bits, _i32_like(bits, 0x8000)).result, _i32_like(bits, 16)).result
    half = arith.TruncIOp(typed(ir.IntegerType.get_signless(16)), high).result
    lw.vmap[op.result] = arith.BitcastOp(typed(ir.BF16Type.get()), half).result


def rule_round_f16(lw: _Lowering, op: ir.Operation) -> None:
    """f32 -> f16 toward zero, two values per v_cvt_pkrtz_f16_f32 (a lane's registers in order, the
    last one alone if their count is odd), for `cast(x, f16, approx=true)`. NaN stays NaN and an
    infinity an infinity; a finite value past the f16 range becomes the largest finite f16."""
    x = lw.v(op.operands[0])
    f16 = ir.F16Type.get()
    f16x2 = ir.VectorType.get([2], f16)

    def pair(a: ir.Value, b: ir.Value) -> list[ir.Value]:
        both = rocdl.cvt_pkrtz(f16x2, a, b)
        return [vector.ExtractOp(both, [], [i]).result for i in (0, 1)]

    if not isinstance(x.type, ir.VectorType):
        lw.vmap[op.result] = pair(x, x)[0]
        return
    vals = lw.elems(x)
    out = [h for i in range(0, len(vals), 2) for h in pair(vals[i], vals[min(i + 1, len(vals) - 1)])]
    lw.vmap[op.result] = lw.pack(out[:len(vals)], f16)


def rule_abs_i(lw: _Lowering, op: ir.Operation) -> None:
    x = lw.v(op.operands[0])
    lw.vmap[op.result] = arith.MaxSIOp(x, arith.SubIOp(_i32_like(x, 0), x).result).result


def rule_program_id(lw: _Lowering, op: ir.Operation) -> None:
    axis = int_attr(op, "axis")
    if op.name == "tile.program_id":
        dim = [gpu.Dimension.x, gpu.Dimension.y, gpu.Dimension.z][axis]
        lw.vmap[op.result] = arith.IndexCastOp(i32(), gpu.block_id(dim)).result
        return
    # gpu.grid_dim lowers to a call into ROCm's device library: read the block count from the
    # implicit kernel arguments instead (code object v5: hidden_block_count_x/y/z, u32 at 0/4/8).
    ptr4 = ir.Type.parse("!llvm.ptr<4>")
    hidden = llvm.call_intrinsic(ptr4, "llvm.amdgcn.implicitarg.ptr", [], [], [])
    addr = llvm.getelementptr(ptr4, hidden, [], [axis], i32(), 0)  # the axis-th u32
    lw.vmap[op.result] = llvm.load(i32(), addr, alignment=4, invariant=True)


def rule_arange(lw: _Lowering, op: ir.Operation) -> None:
    c = lw.coord(op.result, 0)
    start = int_attr(op, "start")
    if start:
        c = arith.AddIOp(c, vector.BroadcastOp(c.type, c32(start)).result).result
    lw.vmap[op.result] = c


def rule_splat(lw: _Lowering, op: ir.Operation) -> None:
    lw.vmap[op.result] = lw.splat(lw.lowered_type(op.result.type), lw.v(op.operands[0]))


def rule_identity(lw: _Lowering, op: ir.Operation) -> None:
    """expand_dims: the inserted size-1 axis changes no register (see layouts.expand)."""
    lw.vmap[op.result] = lw.v(op.operands[0])


def rule_permute(lw: _Lowering, op: ir.Operation) -> None:
    """broadcast and in-register convert_layout: pick each destination register from the source."""
    src, dst = op.operands[0], op.result
    sl, dl = L.layout_of(src.type), L.layout_of(dst.type)
    mapping = L.register_map(sl, tile_shape(src.type), dl, tile_shape(dst.type), lw.threads)
    x = lw.v(src)
    if mapping is None:
        ex = lane_exchange(sl, dl, tile_shape(src.type), lw.threads, lw.arch, lw.options) \
            if op.name == "tile.convert_layout" else None
        if ex is None:
            raise op_error(op, f"internal: {op.name} from {sl} to {dl} needs LDS", lw.source, "lower-to-gpu")
        lw.vmap[dst] = lw.pack(lower_exchange(lw.elems(x), ex, lw.lane, lw.once), ir.VectorType(x.type).element_type)
        return
    if mapping == list(range(ir.VectorType(x.type).shape[0])):
        lw.vmap[dst] = x
        return
    lw.vmap[dst] = vector.ShuffleOp(x, x, mapping).result


def rule_dot(lw: _Lowering, op: ir.Operation) -> None:
    acc = lw.v(op.operands[2])
    layout = L.layout_of(op.result.type)
    if isinstance(layout, L.PermK) and layout.dim == 1:  # N relabelled, in B alike: the same instructions
        layout = layout.inner
    if not isinstance(layout, L.Mma) or not layout.is_accumulator:
        raise op_error(op, f"internal: a dot result in layout {layout}", lw.source, "lower-to-gpu")
    mop, wm, wn = layout.op, layout.wm, layout.wn
    m, n = tile_shape(op.result.type)
    k = tile_shape(op.operands[0].type)[1]
    nm, nn, nk = m // wm // mop.m, n // wn // mop.n, k // mop.k
    ce = mop.m * mop.n // lw.threads.wave_size
    kpl = mop.k_per_lane
    f32 = ir.F32Type.get()

    def part(vec: ir.Value, start: int, size: int) -> ir.Value:
        return vector.ShuffleOp(vec, vec, list(range(start, start + size))).result

    def operand(x: ir.Value, reuses: int):
        """Fragment fetcher: from x's registers, or LDS reads of a deferred local_load when each
        fragment is used once (a reused one is read once, as a whole)."""
        if x in lw.lazy:
            load = lw.lazy.pop(x)
            if reuses == 1:
                return lambda start, size: _load_lds_registers(lw, load, start, start + size)
            lw.vmap[x] = _load_lds_registers(lw, load, 0, lw.regs(x.type))
        vec = lw.v(x)
        return lambda start, size: part(vec, start, size)

    a, b = operand(op.operands[0], nn), operand(op.operands[1], nm)

    tiles = []
    for rm in range(nm):
        for rn in range(nn):
            c = part(acc, (rm * nn + rn) * ce, ce)
            for rk in range(nk):
                av = a((rm * nk + rk) * kpl, kpl)
                bv = b((rn * nk + rk) * kpl, kpl)
                ct = ir.VectorType.get([ce], f32)
                if layout.kind == "acct":  # C^T = B^T A^T: each operand's registers serve the other role
                    av, bv = bv, av
                if mop.kind == "mfma":
                    c = amdgpu.mfma(mop.m, mop.n, mop.k, av, bv, c, blocks=1, results=[ct])
                else:
                    c = amdgpu.wmma(mop.m, mop.n, mop.k, av, bv, c)
            tiles.append(c)
    out = tiles[0]
    if len(tiles) > 1:
        elems = [e for t in tiles for e in lw.elems(t)]
        out = lw.pack(elems, f32)
    lw.vmap[op.result] = out


# max/min follow IEEE maxNum/minNum (a NaN operand yields the other one): one v_max/v_min, where
# NaN-propagating maximum costs a compare and a select more per element on these archs.
_COMBINE = {"max": (arith.MaxNumFOp, arith.MaxSIOp), "min": (arith.MinNumFOp, arith.MinSIOp),
            "sum": (arith.AddFOp, arith.AddIOp)}


def rule_reduce(lw: _Lowering, op: ir.Operation) -> None:
    src = op.operands[0]
    axis = int_attr(op, "axis")
    fop, iop = _COMBINE[str_attr(op, "kind")]
    is_float = tile_dtype(src.type) != "i32"

    def comb(x: ir.Value, y: ir.Value) -> ir.Value:
        return (fop if is_float else iop)(x, y).result

    lin = lw.lin(src)
    keep = [d for d in range(lin.regs.shape[1]) if d != axis]
    # f16 values widened to f32 are summed as they are, v_dot2_f32_f16 against 1.0 taking two
    halves = _widened_f16(lw, op)
    vals = halves if halves is not None else lw.elems(lw.v(src))
    groups: dict[tuple, list[ir.Value]] = {}
    for i, val in enumerate(vals):  # 1. inside the lane
        groups.setdefault(tuple(lin.regs[i, keep]), []).append(val)
    fsum = is_float and str_attr(op, "kind") == "sum"
    outs = [_sum_dot2(members) if halves is not None
            else _sum_packed(members) if fsum and lw.arch.packed_f32 and len(members) >= 4
            else (_tree if fsum and lw.options.tree_sums else _chain)(members, comb)
            for members in groups.values()]
    ws = lw.threads.wave_size
    for k, b in enumerate(lin.lane_bases):  # 2. across lanes of the wave (ds_bpermute / DPP)
        if b[axis]:
            if b[keep].any():
                raise op_error(op, "internal: reduction axis mixed with another axis in lane bits",
                               lw.source, "lower-to-gpu")
            if 1 << k == 32 and lw.arch.permlane32_swap and lw.options.swap_halves:
                outs = [_combine_halves(x, comb) for x in outs]
                lw.halves_swapped += 1
            elif 1 << k == 16 and ws == 32 and lw.arch.permlanex16 and lw.options.swap_halves:
                outs = [_combine_halves(x, comb, rows=True) for x in outs]
                lw.halves_swapped += 1
            else:
                outs = [comb(x, gpu.shuffle(x, c32(1 << k), c32(ws), gpu.ShuffleMode.XOR)[0]) for x in outs]
    wave_bits = [k for k, b in enumerate(lin.wave_bases) if b[axis]]
    if wave_bits:  # 3. across waves, through LDS (the lds pass reserved the space)
        outs = _reduce_across_waves(lw, outs, wave_bits, comb)
    elt = ir.VectorType(lw.v(src).type).element_type
    if is_tile(op.result):
        # order results like the slice layout's registers (first appearance of each kept coordinate)
        lw.vmap[op.result] = lw.pack(outs, elt)
    else:
        lw.vmap[op.result] = outs[0]


def _combine_halves(x: ir.Value, comb, rows: bool = False) -> ir.Value:
    """comb of lane i's x and lane i ^ 32's, in every lane of a wave64, through one permlane32
    swap of x with itself: it returns the lower half's values in both halves of one register and
    the upper half's in the other, so comb (commutative) of the two is the answer everywhere. A
    shuffle by xor 32 took two more moves, a compare and a select (LLVM's lowering of it). With
    `rows`, lane i ^ 16's in a wave32, through one v_permlanex16_b32 (lane i of each row of 16
    reads lane i of the other row), where a shuffle by xor 16 was a ds_bpermute: an LDS round
    trip, its address and a wait on it for every row max and row sum of RDNA's softmax."""
    i32 = ir.IntegerType.get_signless(32)
    width = x.type.width  # 16-bit values (f16, bf16) travel in the low half of the dword
    narrow = ir.IntegerType.get_signless(width)
    bits = x if x.type == narrow else llvm.bitcast(narrow, x)
    bits = bits if width == 32 else arith.ExtUIOp(i32, bits).result
    if rows:
        lo, hi = bits, other_row(bits)
    else:
        pair = rocdl.permlane32_swap(llvm.StructType.get_literal([i32, i32]), bits, bits, False, False)
        lo, hi = (llvm.extractvalue(i32, pair, ir.DenseI64ArrayAttr.get([j])) for j in (0, 1))
    if width != 32:
        lo, hi = arith.TruncIOp(narrow, lo).result, arith.TruncIOp(narrow, hi).result
    if x.type != narrow:
        lo, hi = llvm.bitcast(x.type, lo), llvm.bitcast(x.type, hi)
    out = comb(lo, hi)
    if out.owner.name in ("arith.maxnumf", "arith.minnumf"):
        # The bitcasts hide what the values are, and LLVM would quiet each operand first
        # (v_max_f32 x, x: two more per row). nnan lets it skip that; v_max_f32/v_min_f32 treat a
        # NaN operand as maxNum/minNum do either way (IEEE mode), so the machine result is the same.
        out.owner.attributes["fastmath"] = ir.Attribute.parse("#arith.fastmath<nnan>")
    return out


def _tree(vals: list[ir.Value], comb) -> ir.Value:
    """(v0 . v1) . (v2 . v3) ...: independent ops at each level (CompileOptions.tree_sums)."""
    while len(vals) > 1:
        vals = [comb(vals[i], vals[i + 1]) if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
    return vals[0]


def _chain(vals: list[ir.Value], comb) -> ir.Value:
    """((v0 . v1) . v2) ...: LLVM folds chains of max/min into v_max3/v_min3."""
    acc = vals[0]
    for v in vals[1:]:
        acc = comb(acc, v)
    return acc


def _sum_packed(vals: list[ir.Value]) -> ir.Value:
    """An f32 sum as a tree of two-lane vector adds (v_pk_add_f32 on archs with packed f32): n
    values in about n/2 instructions, where a chain of adds takes n - 1 (a softmax row sum of 32
    logits per lane: 16 instead of 31)."""
    f32x2 = ir.VectorType.get([2], vals[0].type)
    pairs = [vector.FromElementsOp(f32x2, vals[i:i + 2]).result for i in range(0, len(vals) - 1, 2)]
    while len(pairs) > 1:
        pairs = [arith.AddFOp(pairs[i], pairs[i + 1]).result if i + 1 < len(pairs) else pairs[i]
                 for i in range(0, len(pairs), 2)]
    lo, hi = (vector.ExtractOp(pairs[0], [], [i]).result for i in range(2))
    total = arith.AddFOp(lo, hi).result
    return arith.AddFOp(total, vals[-1]).result if len(vals) % 2 else total


def _widened_f16(lw: _Lowering, op: ir.Operation) -> list[ir.Value] | None:
    """The lane's f16 values, when op sums (in f32) an arith.extf of an f16 tile, as
    `sum(cast(h, f32), axis)` writes it; None for any other reduction."""
    widen = defining_op(op.operands[0])
    if str_attr(op, "kind") != "sum" or widen is None or widen.name != "arith.extf":
        return None
    narrow = widen.operands[0]
    if tile_dtype(narrow.type) != "f16":
        return None
    return lw.elems(lw.v(narrow))


def _sum_dot2(halves: list[ir.Value]) -> ir.Value:
    """The f32 sum of f16 values, two per v_dot2_f32_f16 against (1.0, 1.0): n values in n/2
    instructions (a chain of adds takes n - 1 after n widening converts). Two interleaved chains
    halve the dependent latency; each product with 1.0 is exact, so the sum rounds only as f32
    adds do (a sum of zeros is +0: the chains start from it)."""
    f16 = halves[0].type
    f32 = ir.F32Type.get()
    pairs_t = ir.VectorType.get([2], f16)
    if len(halves) % 2:
        halves = [*halves, arith.ConstantOp(f16, ir.FloatAttr.get(f16, 0.0)).result]
    ones = arith.ConstantOp(pairs_t, ir.DenseElementsAttr.get_splat(pairs_t, ir.FloatAttr.get(f16, 1.0))).result
    no_clamp = arith.ConstantOp(ir.IntegerType.get_signless(1), ir.IntegerAttr.get(ir.IntegerType.get_signless(1), 0))
    chains: list[ir.Value | None] = [None, None]
    for k in range(0, len(halves), 2):
        pair = vector.FromElementsOp(pairs_t, halves[k:k + 2]).result
        acc = chains[k // 2 % 2]
        if acc is None:
            acc = arith.ConstantOp(f32, ir.FloatAttr.get(f32, 0.0)).result
        chains[k // 2 % 2] = llvm.call_intrinsic(f32, "llvm.amdgcn.fdot2", [pair, ones, acc, no_clamp.result], [], [])
    first, second = chains
    return first if second is None else arith.AddFOp(first, second).result


def _reduce_across_waves(lw: _Lowering, outs: list[ir.Value], wave_bits: list[int], comb) -> list[ir.Value]:
    ws, nw, n = lw.threads.wave_size, lw.threads.waves, len(outs)
    base = _lds_base(lw)
    elt = outs[0].type  # up to 32 bits (stage-lds reserves 4 bytes a value); the arena starts 16-byte aligned
    arena = lw.arena_bytes // (elt.width // 8)  # where the arena starts, in values of this type

    def slot(wave: ir.Value, j: int) -> ir.Value:  # value j of this lane in `wave`, after the resident tiles
        thread = arith.AddIOp(arith.MulIOp(wave, c32(ws)).result, lw.lane).result
        return arith.AddIOp(arith.MulIOp(thread, c32(n)).result, c32(arena + j)).result

    lds_barrier()
    for j, x in enumerate(outs):
        llvm.store(x, gep(base, slot(lw.wave, j), elt))
    lds_barrier()
    mask = sum(1 << k for k in wave_bits)
    home = arith.AndIOp(lw.wave, c32((nw - 1) & ~mask)).result
    result = []
    for j in range(n):
        acc = None
        for combo in range(nw):
            if combo & ~mask:
                continue
            w = arith.OrIOp(home, c32(combo)).result
            val = llvm.load(elt, gep(base, slot(w, j), elt))
            acc = val if acc is None else comb(acc, val)
        result.append(acc)
    return result


def _lds_base(lw: _Lowering) -> ir.Value:
    return llvm.mlir_addressof(ir.Type.parse("!llvm.ptr<3>"), LDS_SYMBOL)


def rule_local_store(lw: _Lowering, op: ir.Operation) -> None:
    src = op.operands[0]
    base = _lds_base(lw)
    elt = memory_type(ir.RankedTensorType(src.type).element_type)
    vals = lw.elems(to_memory(lw.v(src)))
    # Any registers at consecutive addresses make one store (a tile with several rows per lane,
    # stored transposed: its registers i, i + vec, ... are one column's consecutive elements).
    for regs, align, addr in _lds_runs(lw, op, src, base, elt, by_address=True):
        value = vals[regs[0]] if len(regs) == 1 else pack_stored(lw, [vals[r] for r in regs], elt)
        llvm.store(value, addr, alignment=align)


def rule_local_load(lw: _Lowering, op: ir.Operation) -> None:
    if _only_feeds_next_dot(op):
        lw.lazy[op.result] = op  # loaded by the dot, fragment by fragment (see rule_dot)
        return
    lw.vmap[op.result] = _load_lds_registers(lw, op, 0, lw.regs(op.result.type))


def _only_feeds_next_dot(op: ir.Operation) -> bool:
    """Is this LDS read used only as an operand of a dot later in the same block, with nothing
    between them that writes LDS or waits at a barrier? Then the dot can read each fragment just
    before its matrix instruction, so a wave never holds a whole K or V operand in registers."""
    uses = list(op.result.uses)
    if len(uses) != 1 or uses[0].owner.name != "tile.dot" or uses[0].operand_number == 2:
        return False
    user = uses[0].owner.operation
    ops = ops_in(op.operation.block)
    start = next(i for i, o in enumerate(ops) if o == op.operation)
    for o in ops[start + 1:]:
        if o == user:
            return True
        if o.name in ("tile.barrier", "tile.wave_fence", "tile.local_store") or o.regions:
            return False
    return False


def _load_lds_registers(lw: _Lowering, op: ir.Operation, lo: int, hi: int) -> ir.Value:
    """Registers lo..hi-1 of a tile.local_load, as a vector."""
    base = _lds_base(lw)
    value_t = ir.RankedTensorType(op.result.type).element_type
    elt = memory_type(value_t)
    if "transpose_read" in op.attributes:
        return _transpose_read_registers(lw, op, base, elt, lo, hi)
    vals: list[ir.Value] = []
    for regs, align, addr in _lds_runs(lw, op, op.result, base, elt, lo, hi):
        n = len(regs)
        if n == 1:
            vals.append(llvm.load(elt, addr, alignment=align))
        else:
            vals.extend(lw.elems(llvm.load(ir.VectorType.get([n], elt), addr, alignment=align)))
    return from_memory(lw.pack(vals, elt), value_t)


def _transpose_read_registers(lw: _Lowering, op: ir.Operation, base: ir.Value, elt: ir.Type, lo: int,
                              hi: int) -> ir.Value:
    """Registers lo..hi-1 of a local_load that stage-lds marked `transpose_read` (a 16-bit tile
    stored row-major): one ds_read_b64_tr_b16 per 4 registers, each lane reading the 4 values at
    its position in the source layout (layouts.transpose_read_source)."""
    n = L.TRANSPOSE_READ_VALUES
    lin = lw.lin(op.result)
    src = L.transpose_read_source(lin)
    if src is None or lo % n or hi % n:
        raise op_error(op, f"internal: transpose read of registers {lo}..{hi} in layout "
                       f"{L.layout_of(op.result.type)}", lw.source, "lower-to-gpu")
    offset, row_stride = int_attr(op, "offset"), int_attr(op, "row_stride")
    rows, cols = lw.base_of(f"transpose-read:{ir.RankedTensorType(op.result.type).encoding}:"
                            f"{tile_shape(op.result.type)}", src)
    b = arith.AddIOp(arith.AddIOp(arith.MulIOp(rows, c32(row_stride)).result, cols).result, c32(offset)).result
    vt = ir.VectorType.get([n], elt)
    vals: list[ir.Value] = []
    for start in range(lo, hi, n):
        at = int(src.regs[start] @ np.array([row_stride, 1]))
        read = rocdl.ds_read_tr16_b64_(vt, gep(base, arith.AddIOp(b, c32(at)).result, elt))
        vals.extend(lw.elems(read))
    return lw.pack(vals, elt)


def _lds_runs(lw: _Lowering, op: ir.Operation, v: ir.Value, base: ir.Value, elt: ir.Type, lo: int = 0,
              hi: int | None = None, by_address: bool = False):
    """Registers lo..hi-1 of a local_store/local_load in vector accesses (layouts.lds_runs): yields
    (registers, align, addr). Element (row, col) lies at offset + row * row_stride + col (a
    `transposed` staging stores columns: col * row_stride + row; a `swizzle`d one flips its
    16-byte chunks, from one thread base per flip)."""
    offset, row_stride = int_attr(op, "offset"), int_attr(op, "row_stride")
    shape = tile_shape(v.type)
    bases = lw.base(v)
    nbytes = DTYPE_BYTES[tile_dtype(v.type)]
    weights, major, swizzle = np.array([1]), 0, _lds_swizzle(op)
    if len(shape) == 2:
        major, minor = (1, 0) if "transposed" in op.attributes else (0, 1)
        weights = np.zeros(2, dtype=np.int64)
        weights[major], weights[minor] = row_stride, 1
        b = arith.AddIOp(arith.MulIOp(bases[major], c32(row_stride)).result, bases[minor]).result
    else:
        b = bases[0]
    b = arith.AddIOp(b, c32(offset)).result
    for run in L.lds_runs(lw.lin(v), weights, offset, nbytes, lo, hi, by_address, swizzle, major):
        if swizzle is not None:  # one base per flip, at the kernel's entry
            key = f"lds:{ir.RankedTensorType(v.type).encoding}:{shape}:{major}:{row_stride}:{swizzle}:{run.flips}"
            b = arith.AddIOp(lw.scalar_base(key, lambda flips=run.flips: _swizzled_base(
                bases[major], bases[minor], row_stride, swizzle, flips)), c32(offset)).result
        yield run.regs, run.align, gep(base, arith.AddIOp(b, c32(run.at)).result, elt)


def _lds_swizzle(op: ir.Operation) -> L.Swizzle | None:
    """A local_store/local_load's `swizzle` attribute ([chunk, masks...], stage-lds)."""
    if "swizzle" not in op.attributes:
        return None
    chunk, *masks = ir.DenseI32ArrayAttr(op.attributes["swizzle"])
    return L.Swizzle(chunk, tuple(masks))


def _swizzled_base(row: ir.Value, col: ir.Value, pitch: int, swizzle: L.Swizzle, flips: int) -> ir.Value:
    """A thread's element offset in a swizzled staging, before its registers' offsets (lds_runs):
    row * pitch + col, with the swizzle's chunk bits of col flipped by the row's and by the run's."""
    at = arith.MulIOp(row, c32(pitch)).result
    chunk_bits = swizzle.chunk.bit_length() - 1
    flipped = arith.XOrIOp(arith.AndIOp(col, c32(swizzle.field)).result, c32(flips << chunk_bits)).result
    for i, mask in enumerate(swizzle.masks):
        parity = arith.AndIOp(math.CtPopOp(arith.AndIOp(row, c32(mask)).result).result, c32(1)).result
        flipped = arith.XOrIOp(flipped, arith.ShLIOp(parity, c32(i + chunk_bits)).result).result
    rest = arith.AndIOp(col, c32(~swizzle.field)).result
    return arith.AddIOp(at, arith.AddIOp(rest, flipped).result).result


def lds_barrier() -> None:
    """A workgroup barrier that orders LDS accesses only: its fences carry the memory model's
    relaxation `amdgpu-synchronize-as = local` (LLVM AMDGPUUsage, "Memory Model Relaxation
    Annotations"). Every barrier a kernel has is an LDS staging's or a cross-wave reduction's; the
    language orders no global access between the waves of a workgroup. gpu.barrier's fences cover
    every address space: on RDNA, whose workgroups run in WGP mode, a workgroup release then waits
    for every outstanding global load (`s_wait_loadcnt 0`), so a pipelined loop's look-ahead loads
    had to land before the next barrier of the iteration that issued them."""
    local = ir.Attribute.parse('#llvm.mmra_tag<"amdgpu-synchronize-as":"local">')
    llvm.fence(llvm.AtomicOrdering.release, syncscope="workgroup").attributes["llvm.mmra"] = local
    rocdl.s_barrier()
    llvm.fence(llvm.AtomicOrdering.acquire, syncscope="workgroup").attributes["llvm.mmra"] = local


def rule_barrier(lw: _Lowering, op: ir.Operation) -> None:
    lds_barrier()


def rule_wave_fence(lw: _Lowering, op: ir.Operation) -> None:
    """Between a wave-private staging's store and its reads (stage-lds): a wave's LDS accesses
    complete in the order it issues them (the ISA guides' LDS chapters), so no instruction is
    needed, only that neither LLVM nor its scheduler moves the wave's LDS reads above its stores
    to other lanes' addresses, which a wavefront-scope fence forbids and costs nothing at run time
    (LLVM AMDGPUUsage, memory model: no code for the wavefront scope)."""
    local = ir.Attribute.parse('#llvm.mmra_tag<"amdgpu-synchronize-as":"local">')
    llvm.fence(llvm.AtomicOrdering.acq_rel, syncscope="wavefront").attributes["llvm.mmra"] = local


# Loops that run at most this many times keep their loop-invariant code inside (LLVM's LICM is
# told so through the loop's metadata): hoisting saves at most one evaluation per extra
# iteration, but holds every hoisted value across the whole body. The paired key blocks of the
# backward (a 2-pass loop around the query walk) lost ~130 scalar registers to it.
_SHORT_LOOP_TRIPS = 2


def rule_for(lw: _Lowering, op: ir.Operation) -> None:
    lb, ub, step, *inits = (lw.v(x) for x in op.operands)
    loop = scf.ForOp(lb, ub, step, inits)
    trips = constant_trip_count(*op.operands[:3])
    if trips is not None and trips <= _SHORT_LOOP_TRIPS:
        # Carried by scf-to-cf onto the loop's back edge (backends/rocm/codegen.py moves it into
        # the branch's loop_annotation, which becomes !llvm.loop metadata).
        loop.operation.attributes["llvm.loop_annotation"] = ir.Attribute.parse(
            "#llvm.loop_annotation<licm = <disable = true>>")
    body = op.regions[0].blocks[0]
    for old, new in zip(body.arguments, loop.body.arguments, strict=True):
        lw.vmap[old] = new
    outer, lw.awaiting_first_dot = lw.awaiting_first_dot, True
    with ir.InsertionPoint(loop.body):
        lw.lower_block(body)
    lw.awaiting_first_dot = outer
    for r, n in zip(op.results, loop.results, strict=True):
        lw.vmap[r] = n


def rule_if(lw: _Lowering, op: ir.Operation) -> None:
    new = scf.IfOp(lw.v(op.operands[0]), [lw.lowered_type(r.type) for r in op.results], has_else=True)
    for old_region, blk in zip(op.regions, (new.then_block, new.else_block), strict=True):
        with ir.InsertionPoint(blk):
            lw.lower_block(old_region.blocks[0])
    for r, n in zip(op.results, new.results, strict=True):
        lw.vmap[r] = n


def rule_yield(lw: _Lowering, op: ir.Operation) -> None:
    scf.YieldOp([lw.v(x) for x in op.operands])


def rule_return(lw: _Lowering, op: ir.Operation) -> None:
    gpu.ReturnOp([])


RULES = {
    "tile.program_id": rule_program_id, "tile.num_programs": rule_program_id,
    "tile.arange": rule_arange, "tile.splat": rule_splat, "tile.broadcast": rule_permute,
    "tile.expand_dims": rule_identity, "tile.convert_layout": rule_permute,
    "tile.load": rule_load, "tile.store": rule_write("store"), "tile.atomic_add": rule_write("atomic"),
    "tile.view": rule_view,
    "tile.dot": rule_dot, "tile.reduce": rule_reduce,
    "tile.local_store": rule_local_store, "tile.local_load": rule_local_load, "tile.barrier": rule_barrier,
    "tile.wave_fence": rule_wave_fence,
    "math.exp2": rule_exp2, "math.log2": rule_log2, "math.sqrt": rule_sqrt, "math.absf": rule_absf,
    "math.absi": rule_abs_i, "tile.rcp": rule_rcp, "tile.umulhi": rule_umulhi, "tile.philox_byte": rule_philox_byte,
    "tile.round_bf16": rule_round_bf16, "tile.round_f16": rule_round_f16,
    "scf.for": rule_for, "scf.if": rule_if, "scf.yield": rule_yield, "func.return": rule_return,
}
for _name in ("constant", "addf", "subf", "mulf", "divf", "negf", "addi", "subi", "muli", "floordivsi",
              "remsi", "andi", "ori", "xori", "shli", "shrsi", "shrui", "cmpf", "cmpi", "select",
              "maximumf", "minimumf", "maxnumf", "minnumf", "maxsi", "minsi", "extf", "truncf", "sitofp",
              "fptosi", "uitofp", "extui", "extsi", "ceildivsi", "divsi"):
    RULES[f"arith.{_name}"] = rule_clone
RULES["arith.mulf"] = rule_mulf
RULES["math.fma"] = rule_clone  # one rounding: llvm.fma (v_pk_fma_f32 on two values with packed f32 math)
RULES["arith.extf"] = RULES["arith.truncf"] = conversion_rule(rule_clone)  # 8-bit floats: passes/lower_fp8.py


def lower_to_gpu(module: ir.Module, ctx: PassContext) -> ir.Module:
    """Build the gpu-dialect module (container + one gpu.module) from the laid-out tile module."""
    arch, source = ctx.arch, ctx.source
    attrs = module.operation.attributes
    lds_bytes = int(ir.IntegerAttr(attrs["tile.lds_bytes"]).value) if "tile.lds_bytes" in attrs else 0
    # Resident tiles (stage-lds) occupy the LDS below this byte; scratch space starts there.
    arena = int(ir.IntegerAttr(attrs["tile.lds_arena"]).value) if "tile.lds_arena" in attrs else 0
    out = ir.Module.create()
    out.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
    # The arch travels with every later artifact (the kernels' target_cpu, then "target-cpu"), so a
    # .gpu.mlir, .rocdl.mlir or .ll compiled for another arch is refused (driver.check_input_arch).
    out.operation.attributes["tile.arch"] = ir.StringAttr.get(arch.name)
    with ir.InsertionPoint(out.body):
        gm = gpu.GPUModuleOp("kernels")
        gm.bodyRegion.blocks.append()
    body = gm.bodyRegion.blocks[0]
    with ir.InsertionPoint(body):
        if lds_bytes:
            llvm.mlir_global(ir.Type.parse(f"!llvm.array<{lds_bytes} x i8>"), LDS_SYMBOL,
                             ir.Attribute.parse("#llvm.linkage<internal>"), addr_space=3, alignment=16)
    buffer_args: set[int] = set()
    row_bounds: set[tuple[int, int]] = set()
    halves_swapped = 0
    for fn in kernel_funcs(module):
        lowering = _Lowering(fn, arch, source, lds_bytes, arena, ctx.options)
        lowering.build(body)
        buffer_args |= lowering.buffer_args
        row_bounds |= lowering.row_bounds
        halves_swapped += lowering.halves_swapped
    ctx.facts["buffer_args"] = sorted(buffer_args)
    ctx.facts["row_bounds"] = sorted(row_bounds)
    # The driver's swap_halves retry would compile the same code where no reduction swapped halves.
    ctx.facts["halves_swapped"] = halves_swapped
    for op in ops_in(body):
        if op.name == "gpu.func":
            for blk in op.regions[0].blocks:
                for inner in ops_in(blk):
                    if inner.name == "arith.constant" and not list(inner.result.uses):
                        inner.erase()
    return out
