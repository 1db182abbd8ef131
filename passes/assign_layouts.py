"""Layout assignment: give every tile value a distributed layout (passes/layouts.py).

Anchors: `tile.load` produces the coalesced blocked layout; `tile.dot` wants its operands in the
MFMA/WMMA operand layouts of the arch's matrix instruction and produces the accumulator layout;
reductions produce the slice of their input's layout. Elementwise ops inherit their operands'
layout. Values computed only from ranges, splats and constants are "free": they are
rematerialised directly in whatever layout each user needs. Where a value's layout differs from
what a user needs, a `tile.convert_layout` is inserted (lowered through LDS or as a register
permutation later).
"""

from __future__ import annotations

import numpy as np
from mlir import ir

from tiledsl.backends.rocm.arch import Arch, MatrixOp
from tiledsl.backends.rocm.lds_banks import lds_cycles
from tiledsl.ir.dialect import int_attr, tensor_type, tile_op
from tiledsl.lang.ast import DTYPE_BYTES
from tiledsl.options import CompileOptions
from tiledsl.passes import layouts as L
from tiledsl.passes.common import PassContext, is_tile, kernel_funcs, op_error, ops_in, tile_dtype, tile_shape
from tiledsl.passes.lane_exchange import word_relabelling
from tiledsl.passes.stage_lds import padded_row

FREE_OPS = {"tile.arange", "tile.splat", "arith.constant"}
ELEMENTWISE_PREFIXES = ("arith.", "math.", "tile.rcp", "tile.umulhi", "tile.philox_byte", "tile.round_bf16",
                        "tile.round_f16")


def _dot_tiling(arch: Arch, dtype: str, m: int, n: int, k: int, waves: int) -> tuple[MatrixOp, int, int] | None:
    for op in sorted(arch.matrix_ops_for(dtype), key=lambda o: -o.m):
        wm = min(waves, max(1, m // op.m))
        while waves % wm:
            wm -= 1
        wn = waves // wm
        if m % (wm * op.m) == 0 and n % (wn * op.n) == 0 and k % op.k == 0:
            return op, wm, wn
    return None


def dot_config(arch: Arch, dtype: str, m: int, n: int, k: int, waves: int) -> tuple[MatrixOp, int, int]:
    """Pick the matrix instruction and the WM x WN wave grid for a [m, n] += [m, k] @ [k, n] dot."""
    found = _dot_tiling(arch, dtype, m, n, k, waves)
    if found is not None:
        return found
    ops = arch.matrix_ops_for(dtype)
    fewer = next((w for w in (8, 4, 2, 1) if w < waves and _dot_tiling(arch, dtype, m, n, k, w)), None)
    hint = (f"; it fits over {fewer} wave{'s' * (fewer > 1)}" if fewer else
            f"; K = {k} is a multiple of no instruction's K" if all(k % o.k for o in ops) else "")
    raise ValueError(f"no {dtype} matrix instruction of {arch.name} tiles a [{m}, {n}] += [{m}, {k}] @ "
                     f"[{k}, {n}] dot over {waves} waves (instructions: "
                     f"{', '.join(f'{o.m}x{o.n}x{o.k}' for o in ops)}){hint}")


class _Assigner:
    def __init__(self, fn: ir.Operation, arch: Arch, source: str | None, options: CompileOptions):
        self.fn = fn
        self.arch = arch
        self.options = options
        self.source = source
        self.threads = L.Threads(arch.wave_size, int_attr(fn, "tile.waves"))
        self.layout: dict[ir.Value, L.Layout | None] = {}  # None = free (rematerialisable)
        self.free_ops: list[ir.Operation] = []
        self.kperm: dict[ir.Operation, list[int] | None] = {}  # dot -> contraction relabelling

    # -- analysis: decide each value's layout ------------------------------------------------
    def of(self, v: ir.Value) -> L.Layout | None:
        return self.layout.get(v)

    def analyse_block(self, block: ir.Block) -> None:
        for op in ops_in(block):
            self.analyse(op)

    def analyse(self, op: ir.Operation) -> None:
        name = op.name
        tiles = [r for r in op.results if is_tile(r)]
        if name == "scf.for":
            self.analyse_for(op)
            return
        if name == "scf.if":
            for region in op.regions:
                self.analyse_block(region.blocks[0])
            for i, r in enumerate(op.results):
                if is_tile(r):
                    ys = [ops_in(reg.blocks[0])[-1].operands[i] for reg in op.regions]
                    self.layout[r] = next((self.of(y) for y in ys if self.of(y)), self.blocked(r))
            return
        if not tiles:  # scalar results (incl. a 1-D reduce): `needs` picks the inputs' layouts
            return
        res = tiles[0]
        ins = [self.of(v) for v in op.operands if is_tile(v)]
        if name in FREE_OPS:
            self.layout[res] = None
        elif name == "tile.load":
            self.layout[res] = self.retarget.get(res) or self.blocked(res)
        elif name == "tile.dot":
            a_shape = tile_shape(op.operands[0].type)
            m, n = tile_shape(res.type)
            try:
                mop, wm, wn = dot_config(self.arch, tile_dtype(op.operands[0].type), m, n, a_shape[1],
                                         self.threads.waves)
            except ValueError as exc:
                raise op_error(op, str(exc), self.source, "assign-layouts") from None
            kind = "acct" if mop.m == mop.n and not _reduced_along_columns(res) else "acc"
            acc = L.Mma(kind, mop, wm, wn)
            # An A operand computed in registers (P = softmax(S) from an earlier dot) keeps its
            # registers when relabelling the contraction index of both operands makes them agree.
            src = ins[0]
            if src is not None:
                perm = L.k_permutation(src, acc.with_kind("opa"), a_shape, 1, self.threads)
                if perm is None:
                    acc, perm = self.chained(src, acc, (m, n, a_shape[1]), a_shape)
                self.kperm[op] = perm
            # Scores whose P becomes a later dot's A operand by a lane exchange (gfx11): their key
            # order relabelled so that the exchange moves whole words (lane_exchange.word_relabelling).
            relabel = word_relabelling(acc, (m, n), self.threads, self.arch, self.options) \
                if _feeds_dot_operand(res) else None
            self.layout[res] = acc if relabel is None else L.PermK(1, relabel, acc)
        elif name == "tile.reduce":
            src = ins[0] or self.blocked(op.operands[0])
            axis, n = int_attr(op, "axis"), tile_shape(op.operands[0].type)[int_attr(op, "axis")]
            self.layout[res] = L.Slice(axis, n, src)
        elif name == "tile.broadcast":
            src = ins[0]
            self.layout[res] = None if src is None else self.broadcast_target(src, op)
        elif name == "tile.expand_dims":
            src = ins[0]
            axis = int_attr(op, "axis")
            if src is None:
                self.layout[res] = None
            elif isinstance(src, L.Slice) and src.dim == axis:
                self.layout[res] = L.Expand(axis, src)
            else:
                self.layout[res] = self.blocked(res)
        elif name == "tile.convert_layout":
            self.layout[res] = ins[0]
        elif name.startswith(ELEMENTWISE_PREFIXES):
            known = [x for x in ins if x]
            self.layout[res] = max(known, key=_priority) if known else None
        else:
            raise op_error(op, f"internal: no layout rule for {name}", self.source, "assign-layouts")

    def chained(self, src: L.Layout, acc: L.Mma, mnk: tuple[int, int, int],
                a_shape: tuple[int, ...]) -> tuple[L.Mma, list[int] | None]:
        """A dot whose A operand comes from an earlier dot's accumulator (the backward's
        dV += P^T dO after S^T = K Q^T) but whose own instruction or wave grid would move it
        between lanes through LDS: take the earlier dot's instruction and wave grid where they
        tile this dot, so the operand stays in registers (each wave then reads the whole B operand,
        as the forward's P V does). Returns the accumulator layout and the contraction relabelling
        (None: the operand goes through LDS)."""
        if not isinstance(src, L.Mma) or not src.is_accumulator:
            return acc, None
        mop, (m, n, k) = src.op, mnk
        if mop.in_dtype != acc.op.in_dtype or m % (src.wm * mop.m) or n % (src.wn * mop.n) or k % mop.k:
            return acc, None
        kind = "acct" if mop.m == mop.n and acc.kind == "acct" else "acc"
        alt = L.Mma(kind, mop, src.wm, src.wn)
        perm = L.k_permutation(src, alt.with_kind("opa"), a_shape, 1, self.threads)
        return (alt, perm) if perm is not None else (acc, None)

    def broadcast_target(self, src: L.Layout, op: ir.Operation) -> L.Layout:
        """A row/column vector reduced from a tile of layout P broadcasts back into P. P may also
        be taken at another size of the broadcast axis (an online-softmax row max of the
        [M, N] scores scaling the [M, D] accumulator): when P tiles the new shape and keeps the
        vector's elements in the same lanes, the broadcast needs no data movement."""
        shape = tile_shape(op.result.type)
        src_shape = tile_shape(op.operands[0].type)
        if isinstance(src, L.Expand) and isinstance(src.inner, L.Slice):
            parent, axis = src.inner.parent, src.dim
            if src.inner.size == shape[axis]:
                return parent
            if isinstance(parent, L.PermK) and parent.dim == axis:  # the relabelled axis is the one dropped
                parent = parent.inner
            need = L.Expand(axis, L.Slice(axis, shape[axis], parent))
            if self.tiles(parent, shape) and L.register_map(src, src_shape, need, src_shape, self.threads) is not None:
                return parent
        return self.blocked(op.result)

    def tiles(self, layout: L.Layout, shape: tuple[int, ...]) -> bool:
        """Does `layout` cover every element of a tile of `shape` exactly (no gaps)?"""
        try:
            c = L.coords(layout, shape, self.threads)
        except (ValueError, AssertionError, ZeroDivisionError, IndexError):
            return False
        flat = c.reshape(-1, len(shape))
        if flat.size == 0 or (flat < 0).any() or (flat >= np.array(shape)).any():
            return False
        covered = np.zeros(int(np.prod(shape)), bool)
        covered[np.ravel_multi_index(flat.T, shape)] = True
        return bool(covered.all())

    def analyse_for(self, op: ir.Operation) -> None:
        body = op.regions[0].blocks[0]
        inits = list(op.operands)[3:]
        carried = list(body.arguments)[1:]
        for a, init in zip(carried, inits, strict=True):
            if is_tile(a):
                self.layout[a] = self.of(init)
        for _ in range(3):  # fixpoint: a free init takes the layout the body yields
            self.analyse_block(body)
            yields = list(ops_in(body)[-1].operands)
            changed = False
            for a, y in zip(carried, yields, strict=True):
                if is_tile(a) and self.of(a) is None and self.of(y) is not None:
                    self.layout[a] = self.of(y)
                    changed = True
            if not changed:
                break
        for a, r in zip(carried, op.results, strict=True):
            if is_tile(a):
                self.layout[a] = self.of(a) or self.blocked(a)
                self.layout[r] = self.layout[a]

    def blocked(self, v: ir.Value) -> L.Layout:
        return L.blocked_for(DTYPE_BYTES[tile_dtype(v.type)])

    # -- what each op needs from its tile operands, given its own result layout ---------------
    def needs(self, op: ir.Operation) -> list[L.Layout | None]:
        name = op.name
        out: list[L.Layout | None] = []
        res_layout = self.of(op.results[0]) if len(op.results) and is_tile(op.results[0]) else None
        for i, v in enumerate(op.operands):
            if not is_tile(v):
                out.append(None)
                continue
            if name == "tile.dot":
                acc = res_layout.inner if isinstance(res_layout, L.PermK) else res_layout  # N relabelled
                assert isinstance(acc, L.Mma), f"a dot result in {res_layout}"
                trans_b = _bool_attr(op, "trans_b")
                if i == 2:
                    out.append(res_layout)
                    continue
                k_axis = (1, 1 if trans_b else 0)[i]
                need = L.with_k_permutation(acc.with_kind(("opa", "opbt" if trans_b else "opb")[i]), k_axis,
                                            self.kperm.get(op))
                if i == 1 and isinstance(res_layout, L.PermK):  # B's N index relabelled as the result's
                    need = L.PermK(1 - k_axis, res_layout.images, need)
                out.append(need)
            elif name in ("tile.store", "tile.atomic_add"):
                out.append(self.write_layout(op))
            elif name == "tile.reduce":
                if res_layout is None:  # a 1-D tile reduced to a uniform scalar
                    out.append(self.of(v) or self.blocked(v))
                else:
                    assert isinstance(res_layout, L.Slice), f"a reduction result in {res_layout}"
                    out.append(res_layout.parent)
            elif name == "tile.broadcast":
                out.append(self.broadcast_source(op, res_layout))  # type: ignore[arg-type]
            elif name == "tile.expand_dims":
                axis = int_attr(op, "axis")
                out.append(res_layout.inner if isinstance(res_layout, L.Expand)
                           else L.Slice(axis, 1, res_layout))  # type: ignore[arg-type]
            elif name == "scf.yield":
                out.append(self.yield_target(op, i))
            elif name == "scf.for":
                out.append(self.of(list(op.regions[0].blocks[0].arguments)[i - 2]) if i >= 3 else None)
            else:
                out.append(res_layout)
        return out

    def write_layout(self, op: ir.Operation) -> L.Layout:
        value, offsets = op.operands[2], op.operands[1]
        return self.of(value) or self.of(offsets) or self.blocked(value)

    def broadcast_source(self, op: ir.Operation, target: L.Layout) -> L.Layout:
        src_shape, shape = tile_shape(op.operands[0].type), tile_shape(op.result.type)
        need = target
        for d in reversed(range(len(shape))):
            if src_shape[d] == 1 and shape[d] != 1:
                need = L.Expand(d, L.Slice(d, shape[d], need))
        return need

    def yield_target(self, op: ir.Operation, i: int) -> L.Layout | None:
        parent = op.parent
        if parent.name == "scf.for":
            return self.of(list(parent.regions[0].blocks[0].arguments)[i + 1])
        return self.of(parent.results[i])

    # -- rewrite: set types, rematerialise free values, insert conversions --------------------
    def rewrite_block(self, block: ir.Block) -> None:
        for op in ops_in(block):
            for region in op.regions:
                for b in region.blocks:
                    for a in b.arguments:
                        if is_tile(a) and self.of(a):
                            a.set_type(_with_layout(a.type, self.of(a)))
                    self.rewrite_block(b)
            if op.name in FREE_OPS or (self.is_free_result(op)):
                self.free_ops.append(op)
                continue
            needs = self.needs(op)
            for i, (v, need) in enumerate(zip(list(op.operands), needs, strict=True)):
                if need is None:
                    continue
                nv = self.materialise(v, need, op)
                if nv != v:
                    op.operands[i] = nv
            for r in op.results:
                if is_tile(r) and self.of(r):
                    r.set_type(_with_layout(r.type, self.of(r)))

    def is_free_result(self, op: ir.Operation) -> bool:
        return len(op.results) == 1 and is_tile(op.results[0]) and self.of(op.results[0]) is None \
            and op.name != "scf.for"

    def materialise(self, v: ir.Value, need: L.Layout, user: ir.Operation) -> ir.Value:
        have = self.of(v)
        if have is None and not isinstance(v.owner, ir.Block) and is_tile(v):
            return self.remat(v, need)
        if have == need:
            return v
        if not isinstance(v.owner, ir.Block) and v.owner.name == "tile.broadcast":
            return self.rebroadcast(v.owner, need, user)
        if self.from_broadcasts(v):
            return self.redo_elementwise(v.owner, need, user)
        with ir.InsertionPoint(user), user.location:
            return tile_op("convert_layout", [v], [_with_layout(v.type, need)]).result

    def rebroadcast(self, op: ir.Operation, need: L.Layout, user: ir.Operation) -> ir.Value:
        """A broadcast whose result is wanted in another layout is done again from its source in
        that layout: the conversion moves to the small source (an online-softmax row factor is
        [M, 1]) instead of the [M, N] result, which would go through LDS every iteration."""
        src = op.operands[0]
        while (src not in self.layout and not isinstance(src.owner, ir.Block)
               and src.owner.name == "tile.convert_layout"):  # a conversion materialise inserted
            src = src.owner.operands[0]
        src = self.materialise(src, self.broadcast_source(op, need), user)
        with ir.InsertionPoint(user), user.location:
            return tile_op("broadcast", [src], [_with_layout(op.result.type, need)]).result

    def from_broadcasts(self, v: ir.Value, depth: int = 8) -> bool:
        """Is v an elementwise function (up to `depth` levels) of broadcasts and free values, with at
        least one broadcast? Then converting it costs more than converting the broadcasts' sources."""
        if isinstance(v.owner, ir.Block) or depth == 0:
            return False
        op = v.owner
        if len(op.results) != 1 or not op.name.startswith(ELEMENTWISE_PREFIXES):
            return False
        found = False
        for x in op.operands:
            if not is_tile(x):
                continue
            if isinstance(x.owner, ir.Block):
                return False
            if x.owner.name == "tile.broadcast":
                found = True
            elif self.of(x) is None:
                continue  # free: rematerialised in any layout
            elif self.from_broadcasts(x, depth - 1):
                found = True
            else:
                return False
        return found

    def redo_elementwise(self, op: ir.Operation, need: L.Layout, user: ir.Operation) -> ir.Value:
        """An elementwise function of broadcasts wanted in another layout is computed again in
        that layout from its operands: the conversions move to the broadcasts' small sources.
        (Addresses built from a loaded row vector, such as a paged cache's page per key, would
        otherwise convert a whole [rows, cols] i32 tile through LDS.)"""
        operands = [self.materialise(x, need, user) if is_tile(x) else x for x in op.operands]
        attrs = {a: op.attributes[a] for a in op.attributes}
        with ir.InsertionPoint(user), user.location:
            new = ir.Operation.create(op.name, results=[_with_layout(op.results[0].type, need)],
                                      operands=operands, attributes=attrs)
        return new.result

    def remat(self, v: ir.Value, need: L.Layout) -> ir.Value:
        key = (v, need)
        if key in self.memo:
            return self.memo[key]
        op = v.owner
        saved = self.layout.get(v, "<unset>")
        self.layout[v] = need
        needs = self.needs(op)
        if saved == "<unset>":
            del self.layout[v]
        else:
            self.layout[v] = saved
        operands = [self.remat(x, n) if n is not None and self.of(x) is None else
                    (self.materialise(x, n, op) if n is not None else x)
                    for x, n in zip(op.operands, needs, strict=True)]
        attrs = {a: op.attributes[a] for a in op.attributes}
        if op.name == "arith.constant":  # a dense splat constant: retype its value attribute too
            attrs["value"] = ir.DenseElementsAttr.get_splat(
                _with_layout(v.type, need), ir.DenseElementsAttr(op.attributes["value"]).get_splat_value())
        with ir.InsertionPoint(op), op.location:
            new = ir.Operation.create(op.name, results=[_with_layout(v.type, need)], operands=operands,
                                      attributes=attrs)
        self.memo[key] = new.result
        return new.result

    def check_registers(self, block: ir.Block) -> None:
        """A single tile that needs more than half of a lane's registers cannot be held without
        spilling (the compiler needs room for operands and addresses too): report it at its source."""
        budget = self.arch.vgprs_per_lane // 2
        for op in ops_in(block):
            for region in op.regions:
                for b in region.blocks:
                    self.check_registers(b)
            for r in op.results:
                lay = self.of(r) if is_tile(r) else None
                if lay is None:
                    continue
                dwords = -(-L.num_regs(lay, tile_shape(r.type), self.threads)
                           * DTYPE_BYTES[tile_dtype(r.type)] // 4)
                if dwords > budget:
                    raise op_error(op, f"this {'x'.join(map(str, tile_shape(r.type)))} {tile_dtype(r.type)} tile "
                                       f"needs {dwords} registers per lane with {self.threads.waves} waves, more "
                                       f"than {budget} of the {self.arch.vgprs_per_lane} a lane has on "
                                       f"{self.arch.name}; use smaller block sizes or more waves",
                                   self.source, "assign-layouts")

    def retarget_loads(self, block: ir.Block) -> bool:
        """Find loads whose values are only combined, elementwise, with a matrix accumulator (an
        attention bias added to the scores): loading them straight in the accumulator's layout
        costs no conversion, where the coalesced layout would go through LDS as a whole tile each
        time (CK loads its bias in the gemm's C distribution for the same reason). A load
        qualifies when its address and mask are free (rematerialised in any layout) and every
        value on the way has that one use. Records them in `retarget`; True if any was new."""
        found = False
        for op in ops_in(block):
            for region in op.regions:
                for b in region.blocks:
                    found |= self.retarget_loads(b)
            if not op.name.startswith(ELEMENTWISE_PREFIXES) or len(op.results) != 1 or not is_tile(op.results[0]):
                continue
            want = self.of(op.results[0])
            inner = want.inner if isinstance(want, L.PermK) else want
            accumulator = isinstance(inner, L.Mma) and inner.is_accumulator
            if want is None or len(tile_shape(op.results[0].type)) != 2:
                continue
            for x in op.operands:
                # (A broadcast already in `want` may still convert its row vector to get there.)
                if not is_tile(x) or (self.of(x) == want and accumulator):
                    continue
                for load in self.load_chain(x) if accumulator else []:
                    if load.result not in self.retarget:
                        self.retarget[load.result] = want
                        found = True
                for vec_load, layout in self.row_vector_loads(x, want, loose=not accumulator):
                    if vec_load.result not in self.retarget and self.of(vec_load.result) != layout:
                        self.retarget[vec_load.result] = layout
                        found = True
        return found

    def row_vector_loads(self, x: ir.Value, want: L.Layout,
                         loose: bool = False) -> list[tuple[ir.Operation, L.Layout]]:
        """x = broadcast(expand_dims(y, axis)) with y a 1-D function of loaded vectors (the
        backward's per-row LSE and D, which meet the scores): those loads, each with the layout of
        `want` sliced along that axis, so every lane loads the values of its own rows (lanes that
        share rows load the same ones) instead of a coalesced vector that goes through LDS, with a
        barrier, at each use. Only where every value on the way feeds nothing but the chain and
        expansions along the same axis; else none. `loose` (a `want` that is not a matrix
        accumulator, whose kernels were tuned with the strict rule) also lets them feed other 1-D
        elementwise ops and a loop's next iteration, which then take the same layout: the split-KV
        combine's running max and denominator, folded per split and met with the partial outputs."""
        bcast = x.owner
        if isinstance(bcast, ir.Block) or bcast.name != "tile.broadcast":
            return []
        expand = bcast.operands[0].owner
        if isinstance(expand, ir.Block) or expand.name != "tile.expand_dims":
            return []
        axis = int_attr(expand, "axis")
        layout = L.Slice(axis, tile_shape(x.type)[axis], want)
        chain: list[ir.Operation] = []
        todo = [expand.operands[0]]
        while todo:
            v = todo.pop()
            op = v.owner
            if isinstance(op, ir.Block) or op in chain or op.name in FREE_OPS or not is_tile(v):
                continue
            if op.name == "tile.load":
                if len(tile_shape(v.type)) != 1 or any(self.of(o) is not None for o in list(op.operands)[1:3]
                                                       if is_tile(o)):
                    return []
            elif not op.name.startswith(ELEMENTWISE_PREFIXES) or len(op.results) != 1:
                return []
            else:
                todo.extend(o for o in op.operands if is_tile(o))
            chain.append(op)
        for op in chain:
            for use in op.results[0].uses:
                user = use.owner
                along = user.name == "tile.expand_dims" and int_attr(user, "axis") == axis
                if user not in chain and not along and not (loose and _row_vector_use(user)):
                    return []
        return [(op, layout) for op in chain if op.name == "tile.load"]

    def retarget_transposed(self, block: ir.Block) -> bool:
        """Give 16- and 8-bit loads that become a dot's B operand [K, N] (staged through LDS
        transposed, K contiguous: stage-lds) `transposed_rows` rows per lane, so the transposed store
        writes that many elements at once where it wrote one (Triton does the same for V). On every
        arch: RDNA's WMMA operands hold K contiguous too (the gfx1201 hdim 128 forward went from 32
        16-bit LDS stores of V per lane and iteration to 8 of 64 bits, modeled 115.0 -> 131.1
        TFLOP/s; an earlier tile row had measured it slower). Records them in `retarget`; True if
        any was new."""
        found = False
        rows_per_lane = self.options.transposed_rows
        if rows_per_lane <= 1:
            return found
        for op in ops_in(block):
            for region in op.regions:
                for b in region.blocks:
                    found |= self.retarget_transposed(b)
            if op.name != "tile.dot" or _bool_attr(op, "trans_b"):
                continue
            loads = self.load_chain(op.operands[1])  # one, or both versions of a versioned load
            if not loads or any(ld.result in self.retarget for ld in loads):
                continue
            load = loads[0]
            rows, cols = tile_shape(load.result.type)[-2:]
            eb = DTYPE_BYTES[tile_dtype(load.result.type)]
            vec = self.blocked(load.result).vec
            per_lane = rows * cols // self.threads.count
            # gfx950 stores 16-bit ones row-major and transposes in the read (stage-lds).
            read_transposed = L.transpose_reads(self.arch, self.options.transpose_reads, eb)
            if eb < 4 and not read_transposed:
                fits = [r for r in (rows_per_lane >> k for k in range(rows_per_lane.bit_length()))
                        if per_lane >= vec * r and rows % r == 0]
                best = self.cheapest_rows(fits, vec, (rows, cols), eb) if fits else 1
                if best > 1:
                    self.rows_taken = max(self.rows_taken, best)
                    for ld in loads:
                        self.retarget[ld.result] = L.Blocked(vec, best)
                    found = True
        return found

    def cheapest_rows(self, candidates: list[int], vec: int, shape: tuple[int, int], eb: int) -> int:
        """Of the candidate rows per lane (largest first), the one whose transposed LDS stores move
        the most bytes per LDS cycle, bank conflicts counted from one wave's addresses as stage-lds
        will place them (the padded row of the stored [N, K] tile); ties go to more rows (fewer
        stores). More rows per lane widen each store but, with vectors along N, put the lanes of a
        store `vec` LDS rows apart: on gfx942 at hdim 128, 4 rows made 8-way conflicts where 2 made
        4-way (modeled 508 against 578 TFLOP/s)."""
        banks = self.arch.timing.lds_bytes_per_clk // 4
        pitch = padded_row((shape[1], shape[0]), eb, self.options.lds_padding)

        def bytes_per_cycle(r: int) -> float:
            coord = L.lane_coords(L.linear(L.Blocked(vec, r), shape, self.threads), self.arch.wave_size)
            addrs = (coord[:, 1] * pitch + coord[:, 0]) * eb  # [N, K] row-major: K contiguous
            return self.arch.wave_size * r * eb / lds_cycles(addrs, r * eb, banks)
        return max(candidates, key=lambda r: (bytes_per_cycle(r), r))

    def retarget_operands(self, block: ir.Block) -> bool:
        """Give a load outside the dot's loop that becomes a dot operand (attention's Q, loaded
        once and read by every iteration, `_loaded_outside_the_loop`) the operand's own layout,
        when staging it through LDS would take half of the arch's LDS or more, so that it alone
        would keep a second workgroup off the CU (a 128x128 f16 Q takes 33 KiB of a CDNA3 CU's
        64 KiB), when the operand layout reads vectors of at least 8 bytes along the tensor's
        contiguous axis, and when it holds no value twice (gfx11's WMMA operands do: there the
        tile stays resident in LDS, hoist-conversions). The load then needs no conversion and the
        tile no LDS. Smaller tiles keep the staging: a direct load's per-lane addresses cost
        registers, and wave64 kernels near their limit spilled scalar registers with it. CDNA
        only: RDNA's 256 registers per lane are the scarcer resource there (the gfx1201 forward
        spilled with Q loaded this way and modeled no faster). Records them in `retarget`; True
        if any was new."""
        found = False
        if not self.arch.is_cdna:
            return found
        # A second workgroup shares the CU only if both fit at two waves per SIMD, the most these
        # kernels' registers allow: with more waves than SIMDs (the backward's 8) the LDS is not
        # what keeps it off, and the tile would hold registers for nothing, unless its staging
        # would not fit the LDS at all (the 256-row forward's 64 KiB Q at hdim 128).
        one_group = self.threads.waves > self.arch.simds_per_cu
        for op in ops_in(block):
            for region in op.regions:
                for b in region.blocks:
                    found |= self.retarget_operands(b)
            if op.name != "tile.dot":
                continue
            for i, need in enumerate(self.needs(op)[:2]):
                loads = self.load_chain(op.operands[i])
                if len(loads) != 1 or loads[0].result in self.retarget or not _loaded_outside_the_loop(loads[0], op):
                    continue
                load = loads[0]
                shape = tile_shape(load.result.type)
                eb = DTYPE_BYTES[tile_dtype(load.result.type)]
                staged = int(np.prod(shape)) * eb
                if 2 * staged < self.arch.lds_bytes or (one_group and staged < self.arch.lds_bytes):
                    continue
                if L.num_regs(need, shape, self.threads) > L.num_regs(self.blocked(load.result), shape, self.threads):
                    continue
                if _last_axis_run(L.linear(need, shape, self.threads)) * eb >= 8:
                    self.retarget[load.result] = need
                    found = True
        return found

    def load_chain(self, v: ir.Value) -> list[ir.Operation]:
        """The tile.loads that v is an elementwise function of (casts, scaling by free values),
        every value on the way used once, and whose offsets and mask are free: one load, or one
        per branch where v comes out of an scf.if (a load version-masks split); else none."""
        while not isinstance(v.owner, ir.Block) and len(list(v.uses)) == 1:
            op = v.owner
            if op.name == "tile.load":
                free = all(self.of(x) is None for x in list(op.operands)[1:3] if is_tile(x))
                return [op] if free and len(tile_shape(v.type)) >= 2 else []
            if op.name == "scf.if":
                i = list(op.results).index(v)
                loads = [self.load_chain(ops_in(region.blocks[0])[-1].operands[i]) for region in op.regions]
                return [ld for branch in loads for ld in branch] if all(loads) else []
            if not op.name.startswith(ELEMENTWISE_PREFIXES):
                return []
            bound = [x for x in op.operands if is_tile(x) and self.of(x) is not None]
            if len(bound) != 1:
                return []
            v = bound[0]
        return []

    def run(self) -> None:
        self.memo: dict = {}
        self.retarget: dict[ir.Value, L.Layout] = {}
        self.rows_taken = 1  # the most rows per lane retarget_transposed gave a load
        body = self.fn.regions[0].blocks[0]
        self.analyse_block(body)
        # Loads that are better off in another layout than the coalesced one: analyse again with them.
        if self.retarget_loads(body) | self.retarget_transposed(body) | self.retarget_operands(body):
            self.layout.clear()
            self.kperm.clear()
            self.analyse_block(body)
        self.check_registers(body)
        self.rewrite_block(body)
        for op in reversed(self.free_ops):  # originals of rematerialised values are now unused
            if all(len(list(r.uses)) == 0 for r in op.results):
                op.erase()
        _erase_dead(body)


DEAD_KINDS = ("tile.convert_layout", "tile.broadcast", "tile.expand_dims")


def _erase_dead(body: ir.Block) -> None:
    """Erase the tile ops left unused once values were done again in another layout (broadcasts,
    elementwise chains) and the layout conversions that fed only them: a conversion through LDS
    has barriers, so nothing later would drop it. Repeats until nothing more dies."""
    def walk(block: ir.Block) -> list[ir.Operation]:
        out = []
        for op in ops_in(block):
            out.append(op)
            for region in op.regions:
                for b in region.blocks:
                    out.extend(walk(b))
        return out

    changed = True
    while changed:
        changed = False
        for op in reversed(walk(body)):  # users before their producers
            pure = op.name in DEAD_KINDS or (op.name.startswith(ELEMENTWISE_PREFIXES) and len(op.results) == 1
                                              and is_tile(op.results[0]))
            if pure and not any(len(list(r.uses)) for r in op.results):
                op.erase()
                changed = True


def _reduced_along_columns(v: ir.Value) -> bool:
    """Is this dot result (or an elementwise function of it) reduced over axis 0? Then the plain
    accumulator layout keeps that reduction inside the lane; otherwise the transposed one does
    so for the far more common row reductions (softmax) and stores rows as vectors."""
    seen, todo = set(), [v]
    while todo:
        x = todo.pop()
        for use in x.uses:
            user = use.owner
            if user in seen:
                continue
            seen.add(user)
            if user.name == "tile.reduce" and int_attr(user, "axis") == 0:
                return True
            if user.name.startswith(ELEMENTWISE_PREFIXES) or user.name == "tile.convert_layout":
                todo.extend(r for r in user.results if is_tile(r))
    return False


def _feeds_dot_operand(v: ir.Value) -> bool:
    """Does this dot result, or an elementwise function of it (also across a loop's iterations),
    become the A operand of a dot (the forward's S, whose P meets V)?"""
    seen, todo = set(), [v]
    while todo:
        x = todo.pop()
        for use in x.uses:
            user = use.owner
            if user.name == "tile.dot" and use.operand_number == 0:
                return True
            if user in seen:
                continue
            seen.add(user)
            if user.name.startswith(ELEMENTWISE_PREFIXES) or user.name == "tile.convert_layout":
                todo.extend(r for r in user.results if is_tile(r))
            elif user.name == "scf.yield":
                parent = user.parent
                todo.append(parent.results[use.operand_number])
                if parent.name == "scf.for":
                    todo.append(list(parent.regions[0].blocks[0].arguments)[use.operand_number + 1])
    return False


def _row_vector_use(user: ir.Operation) -> bool:
    """A use that keeps a 1-D value in the layout it has: a loop's yield, or an elementwise op with
    one 1-D tile result (which inherits it)."""
    if user.name == "scf.yield":
        return True
    return (user.name.startswith(ELEMENTWISE_PREFIXES) and len(user.results) == 1 and is_tile(user.results[0])
            and len(tile_shape(user.results[0].type)) == 1)


def _enclosing_loops(op: ir.Operation) -> list[ir.Operation]:
    """The scf.for ops around op, innermost first."""
    loops, parent = [], op.parent
    while parent is not None and parent.name not in ("func.func", "builtin.module"):
        if parent.name == "scf.for":
            loops.append(parent)
        parent = parent.parent
    return loops


def _loaded_outside_the_loop(load: ir.Operation, dot: ir.Operation) -> bool:
    """The load runs outside every loop, or only in loops that also hold the dot, which runs in a
    loop of its own inside them: attention's Q, loaded once per query block (per pass of the
    forward's paired blocks) and read by every key block."""
    outer, inner = _enclosing_loops(load), _enclosing_loops(dot)
    return not outer or (len(inner) > len(outer) and inner[len(inner) - len(outer):] == outer)


def _last_axis_run(lin: L.Linear) -> int:
    """Consecutive last-axis elements a lane's first registers hold (the widest vector access)."""
    run = 1
    while run < lin.num_regs and (lin.regs[run, :-1] == lin.regs[0, :-1]).all() \
            and lin.regs[run, -1] == lin.regs[0, -1] + run:
        run += 1
    return run


def _bool_attr(op: ir.Operation, name: str) -> bool:
    return bool(ir.BoolAttr(op.attributes[name]).value) if name in op.attributes else False


def _priority(layout: L.Layout) -> int:
    """Which operand's layout an elementwise result takes: accumulators first (they are the
    expensive ones to move), then operand and relabelled layouts, slices, and blocked last."""
    if isinstance(layout, L.PermK):
        return _priority(layout.inner)
    if isinstance(layout, L.Mma):
        return 4 if layout.is_accumulator else 3
    return {L.Slice: 2, L.Expand: 2}.get(type(layout), 1)


def _with_layout(t: ir.Type, layout: L.Layout) -> ir.Type:
    rt = ir.RankedTensorType(t)
    return tensor_type(tuple(rt.shape), rt.element_type, str(layout))


def assign_layouts(module: ir.Module, ctx: PassContext) -> None:
    taken = 1
    for fn in kernel_funcs(module):
        assigner = _Assigner(fn, ctx.arch, ctx.source, ctx.options)
        assigner.run()
        taken = max(taken, assigner.rows_taken)
    # With options.transposed_rows at or above this, every load keeps the rows it has here: the
    # cheapest count is chosen from the powers of two up to the limit (cheapest_rows), so the
    # driver's retries with fewer rows compile the same code until they go below it.
    ctx.facts["transposed_rows_taken"] = taken
