"""version-masks: a select, store or load whose mask moves with its loop does its per-element work
only on the blocks the mask does not pass whole.

In a loop over key blocks, `s = where(margin >= 0, s, -inf)` (the end of the keys, a causal
diagonal, a window) masks only the blocks that cross an edge; every other block passes whole, and
its compares and selects are wasted. For a select, a store or a load that stays in its iteration
(not pipelined: see _mask_of) whose mask is the `&` of terms, some of which

- compare integer tiles built from aranges, scalars and constants by sums, differences,
  minimum/maximum, products by a constant, quotients by a positive scalar and broadcasts
  (`cmpi slt/sle/sgt/sge`, joined by `&` and `|`),
- and change with the innermost loop around it,

the pass computes those terms' bounds over the tile as scalars (interval arithmetic: the least
and greatest value of every integer node) and writes

    if <every element of them passes> { op under the other terms } else { <the mask's own ops>; op }

moving into the else branch the ops only the mask needed (its per-element work and its tiles).

Integer arithmetic in the language wraps, and bounds are exact only where no node's value wraps.
So the test also requires, in i64, that every node's bounds stay inside the i32 range for every
value the loop's index takes (from the loop's bounds: the checks do not depend on the iteration,
and LLVM hoists them out of the loop; a check the compile-time range of the values answers is
left out). Where a node could wrap, the masked branch runs: the result is the op's, always.
Each comparison of bounds is made strict (`p <= q` as `p < q + 1`, the `+ 1` checked like a
node) so that the checks can join one of them as an operand that makes it false when they fail:
the test per iteration is the comparisons alone (see _test).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from tiledsl.ir.dialect import tile_op
from tiledsl.passes.common import (
    PassContext,
    ancestor_in,
    as_operation,
    clone_op,
    constant_int,
    defined_inside,
    defining_op,
    is_tile,
    kernel_funcs,
    loop_invariant,
    loop_of,
    ops_in,
    uniform_constant_int,
    walk_blocks,
)
from tiledsl.passes.pipeline_loops import pipelined_loop

Bounds = tuple[ir.Value, ir.Value]  # (least, greatest) as scalars
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
_PREDICATES = {2: "slt", 3: "sle", 4: "sgt", 5: "sge"}  # arith.CmpIPredicate values the pass bounds
_INT_NODES = ("arith.addi", "arith.subi", "arith.minsi", "arith.maxsi", "arith.muli", "arith.divsi")
_SHAPE_OPS = ("tile.broadcast", "tile.expand_dims")
# Ops the masked branch may take along when only it uses them (pure, no regions).
_SINKABLE = ("tile.splat", "tile.broadcast", "tile.expand_dims", "tile.arange")


def version_masks(module: ir.Module, ctx: PassContext) -> int:
    count = 0
    for fn in kernel_funcs(module):
        masked = [op for block in walk_blocks(fn) for op in ops_in(block) if _mask_of(op) is not None]
        for op in masked:
            loop = loop_of(op)
            if loop is None:
                continue
            terms = _and_terms(_mask_of(op))
            tested = [t for t in terms if _modeled_condition(t)]
            if any(_varies(t, loop) and not _uniform(t) for t in tested):
                chain = _with_consumers(op) if op.name == "tile.load" else [op]
                _version(chain, loop, tested, [t for t in terms if t not in tested])
                count += 1
    return count


def _mask_of(op: ir.Operation) -> ir.Value | None:
    """The tile condition of a select, or the mask of a store or of a load that stays in its
    iteration. Atomic adds keep their masks: the backward's dq_acc adds, two copies of them in
    the branches, modeled 6 % faster on gfx942 and 13 % (gfx950 hdim 64) and 18 % (gfx90a causal
    hdim 64) slower. So do the loads pipeline-loops may take: a load inside a branch is not
    pipelined (a kernel that wants a tile versioned rather than prefetched says prefetch=false)."""
    if op.name == "arith.select" and is_tile(op.operands[0]):
        return op.operands[0]
    if op.name == "tile.store":
        return op.operands[3]
    if op.name == "tile.load" and is_tile(op.operands[2]) and pipelined_loop(op) is None:
        return op.operands[2]
    return None


def _uniform(v: ir.Value) -> bool:
    """v is one value for every element (a splat or constant, through broadcasts): a mask of that
    kind is one uniform branch already (lower-to-gpu), with nothing per element to skip."""
    op = defining_op(v)
    while op is not None and op.name in _SHAPE_OPS:
        op = defining_op(op.operands[0])
    return op is not None and (op.name == "tile.splat" or op.name == "arith.constant")


def _and_terms(v: ir.Value) -> list[ir.Value]:
    """v as the `&` of terms of its own shape."""
    op = defining_op(v)
    if op is not None and op.name == "arith.andi":
        return _and_terms(op.operands[0]) + _and_terms(op.operands[1])
    return [v]


# -- what the pass can bound ----------------------------------------------------------------------

def _i32(t: ir.Type) -> bool:
    elt = ir.RankedTensorType(t).element_type if isinstance(t, ir.RankedTensorType) else t
    return elt == ir.IntegerType.get_signless(32)


def _scalar_of(v: ir.Value) -> ir.Value | None:
    """The scalar v is (a scalar itself, or a tile.splat of one); None for other tiles."""
    if not is_tile(v):
        return v
    op = defining_op(v)
    return op.operands[0] if op is not None and op.name == "tile.splat" else None


def _modeled_int(v: ir.Value) -> bool:
    """The bounds of i32 tile v are computable: its tree reaches only scalars, aranges and constants."""
    if not _i32(v.type):
        return False
    op = defining_op(v)
    if not is_tile(v) or op is None:
        return not is_tile(v)
    if op.name in ("tile.arange", "tile.splat") or constant_int(v) is not None:
        return True
    if op.name in _SHAPE_OPS:
        return _modeled_int(op.operands[0])
    if op.name == "arith.muli":  # by a constant
        return any(uniform_constant_int(op.operands[i]) is not None and _modeled_int(op.operands[1 - i])
                   for i in (0, 1))
    if op.name == "arith.divsi":  # by a scalar (which the test requires to be positive)
        return _scalar_of(op.operands[1]) is not None and _modeled_int(op.operands[0])
    return op.name in _INT_NODES and all(_modeled_int(x) for x in op.operands)


def _modeled_condition(v: ir.Value) -> bool:
    op = defining_op(v)
    if op is None:
        return False
    if op.name in _SHAPE_OPS:
        return _modeled_condition(op.operands[0])
    if op.name in ("arith.andi", "arith.ori"):
        return all(_modeled_condition(x) for x in op.operands)
    if op.name == "arith.cmpi":
        return _predicate(op) is not None and all(_modeled_int(x) for x in op.operands)
    return op.name == "tile.splat" or uniform_constant_int(v) == 1


def _predicate(cmp: ir.Operation) -> str | None:
    return _PREDICATES.get(ir.IntegerAttr(cmp.attributes["predicate"]).value)


def _varies(v: ir.Value, loop: ir.Operation) -> bool:
    """v changes in the loop: it is made from a block argument of the loop's body (its index, an
    iteration argument) through ops inside the loop."""
    if not defined_inside(v, loop):
        return False
    op = defining_op(v)
    return op is None or any(_varies(x, loop) for x in op.operands)


# -- bounds as scalar ops -------------------------------------------------------------------------

class _Intervals:
    """Scalar bounds of integer values, emitted at the insertion point.

    exact (i32): scalars are their own bounds, for this iteration's test; `requires` collects what
    the bounds assume (a divisor > 0).
    wide (i64, `loop` given): the loop's index ranges over its bounds, scalar arithmetic on it is
    bounded through, and `fits` collects, for every node, that its bounds lie in the i32 range.
    Each i64 value also has a range known at compile time (an i32 widened is in the i32 range;
    a node that passed its check is too), and a check that range already answers is left out."""

    def __init__(self, loop: ir.Operation, wide: bool = False):
        self.loop, self.wide = loop, wide
        self.type = ir.IntegerType.get_signless(64 if wide else 32)
        self.memo: dict[ir.Value, Bounds] = {}
        self.known: dict[ir.Value, tuple[int, int]] = {}  # wide: compile-time range of each value
        self.widened: dict[ir.Value, ir.Value] = {}
        self.fits: list[ir.Value] = []
        self.requires: list[ir.Value] = []

    def const(self, c: int) -> ir.Value:
        v = arith.ConstantOp(self.type, c).result
        self.known[v] = (c, c)
        return v

    def of(self, v: ir.Value) -> Bounds:
        if v not in self.memo:
            self.memo[v] = self._compute(v)
        return self.memo[v]

    def arith(self, name: str, a: ir.Value, b: ir.Value) -> ir.Value:
        """a <name> b (add, sub, mul, min, max) as an op, its compile-time range recorded."""
        op = {"add": arith.AddIOp, "sub": arith.SubIOp, "mul": arith.MulIOp, "min": arith.MinSIOp,
              "max": arith.MaxSIOp}[name]
        v = op(a, b).result
        (alo, ahi), (blo, bhi) = self.known.get(a, (I32_MIN, I32_MAX)), self.known.get(b, (I32_MIN, I32_MAX))
        if name == "add":
            self.known[v] = (alo + blo, ahi + bhi)
        elif name == "sub":
            self.known[v] = (alo - bhi, ahi - blo)
        elif name == "mul":
            corners = [x * y for x in (alo, ahi) for y in (blo, bhi)]
            self.known[v] = (min(corners), max(corners))
        else:
            pick = min if name == "min" else max
            self.known[v] = (pick(alo, blo), pick(ahi, bhi))
        return v

    def check(self, lo: ir.Value | None, hi: ir.Value | None) -> None:
        """Wide mode: lo and hi (either may be None) lie in the i32 range; from here on they are
        known to (the test requires it)."""
        if lo is not None and self.known[lo][0] < I32_MIN:
            self.fits.append(arith.CmpIOp(arith.CmpIPredicate.sge, lo, self.const(I32_MIN)).result)
            self.known[lo] = (I32_MIN, max(self.known[lo][1], I32_MIN))
        if hi is not None and self.known[hi][1] > I32_MAX:
            self.fits.append(arith.CmpIOp(arith.CmpIPredicate.sle, hi, self.const(I32_MAX)).result)
            self.known[hi] = (min(self.known[hi][0], I32_MAX), I32_MAX)

    def leaf(self, v: ir.Value) -> ir.Value:
        """An i32 scalar as a value of this mode: itself, or widened (once)."""
        c = constant_int(v)
        if c is not None:
            return self.const(c)
        if not self.wide:
            return v
        if v not in self.widened:
            self.widened[v] = arith.ExtSIOp(self.type, v).result
            self.known[self.widened[v]] = (I32_MIN, I32_MAX)
        return self.widened[v]

    def _leaf(self, v: ir.Value) -> Bounds:
        return self.leaf(v), self.leaf(v)

    def _compute(self, v: ir.Value) -> Bounds:
        c = uniform_constant_int(v)
        if c is not None:
            return self.const(c), self.const(c)
        op = defining_op(v)
        if not is_tile(v):
            if not self.wide or not defined_inside(v, self.loop):
                return self._leaf(v)
            if op is None:
                return self._index(v)
            if not _modeled_int_scalar(op):
                return self._leaf(v)  # exact where it stands: the check then varies with the loop
        if op.name == "tile.arange":
            start = ir.IntegerAttr(op.attributes["start"]).value
            n = ir.RankedTensorType(v.type).shape[0]
            return self.const(start), self.const(start + n - 1)
        if op.name == "tile.splat" or op.name in _SHAPE_OPS:
            return self.of(op.operands[0])
        bounds = self._node(op)
        if self.wide:
            self.check(*bounds)
        return bounds

    def _index(self, v: ir.Value) -> Bounds:
        """The loop index (wide mode): from the lower bound to the upper bound minus 1 (a positive
        constant step keeps it there); a block argument of anything else is its own bound."""
        loop = as_operation(v.owner.owner)
        step = constant_int(loop.operands[2]) if loop.name == "scf.for" else None
        if loop != self.loop or v != loop.regions[0].blocks[0].arguments[0] or step is None or step <= 0:
            return self._leaf(v)
        return self._leaf(loop.operands[0])[0], self.arith("sub", self._leaf(loop.operands[1])[0], self.const(1))

    def _node(self, op: ir.Operation) -> Bounds:
        if op.name == "arith.muli":
            i = 0 if uniform_constant_int(op.operands[0]) is not None else 1
            c = uniform_constant_int(op.operands[i])
            lo, hi = self.of(op.operands[1 - i])
            k = self.const(c)
            lo, hi = self.arith("mul", lo, k), self.arith("mul", hi, k)
            return (lo, hi) if c >= 0 else (hi, lo)
        if op.name == "arith.divsi":
            lo, hi = self.of(op.operands[0])
            if self.wide:  # a quotient by a positive divisor lies between 0 and the dividend
                zero = self.const(0)
                return self.arith("min", lo, zero), self.arith("max", hi, zero)
            d = self.of(_scalar_of(op.operands[1]))[0]
            self.requires.append(arith.CmpIOp(arith.CmpIPredicate.sgt, d, self.const(0)).result)
            return arith.DivSIOp(lo, d).result, arith.DivSIOp(hi, d).result
        a, b = self.of(op.operands[0]), self.of(op.operands[1])
        if op.name == "arith.subi":
            return self.arith("sub", a[0], b[1]), self.arith("sub", a[1], b[0])
        name = {"arith.addi": "add", "arith.minsi": "min", "arith.maxsi": "max"}[op.name]
        return self.arith(name, a[0], b[0]), self.arith(name, a[1], b[1])


def _modeled_int_scalar(op: ir.Operation) -> bool:
    """A scalar op inside the loop the wide bounds go through (else it is a leaf)."""
    if op.name == "arith.muli":
        return any(constant_int(x) is not None for x in op.operands)
    return op.name in _INT_NODES and op.name != "arith.divsi"


# -- the test -------------------------------------------------------------------------------------

def _conjuncts(v: ir.Value) -> list[ir.Value]:
    """v as the `&` of terms, through broadcasts."""
    op = defining_op(v)
    if op.name in _SHAPE_OPS:
        return _conjuncts(op.operands[0])
    if op.name == "arith.andi":
        return _conjuncts(op.operands[0]) + _conjuncts(op.operands[1])
    return [v]


def _strict(cmp: ir.Operation, exact: _Intervals, wide: _Intervals) -> tuple[ir.Value, ir.Value]:
    """(p, q) such that every element of the comparison passes iff p < q (i32 scalars)."""
    a, b = cmp.operands
    pred = _predicate(cmp)
    if pred in ("sgt", "sge"):
        a, b = b, a  # all a > b: all b < a
    (p, q), (wp, wq) = ((exact.of(a)[1], exact.of(b)[0]), (wide.of(a)[1], wide.of(b)[0]))
    if pred in ("sle", "sge"):  # p <= q: p < q + 1, or p - 1 < q
        if loop_invariant(q, wide.loop) or not loop_invariant(p, wide.loop):
            q = exact.arith("add", q, exact.const(1))
            wide.check(None, wide.arith("add", wq, wide.const(1)))
        else:
            p = exact.arith("sub", p, exact.const(1))
            wide.check(wide.arith("sub", wp, wide.const(1)), None)
    return p, q


def _all_pass(v: ir.Value, exact: _Intervals, wide: _Intervals) -> ir.Value:
    """i1: every element of the condition v is true."""
    op = defining_op(v)
    if op.name in _SHAPE_OPS:
        return _all_pass(op.operands[0], exact, wide)
    if op.name == "tile.splat":
        return op.operands[0]
    if op.name in ("arith.andi", "arith.ori"):
        a, b = (_all_pass(x, exact, wide) for x in op.operands)
        return (arith.AndIOp if op.name == "arith.andi" else arith.OrIOp)(a, b).result
    if op.name == "arith.cmpi":
        return arith.CmpIOp(arith.CmpIPredicate.slt, *_strict(op, exact, wide)).result
    return arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result  # a constant true tile


Affine = tuple[int, ir.Value | None]  # coef * the loop index + a loop-invariant rest


def _affine(v: ir.Value, loop: ir.Operation, ints: _Intervals | None) -> Affine | None:
    """v, a scalar of the test, as coef * the loop index + a rest that does not change in the loop,
    the rest built with `ints`: in i32 as the program wraps, or in i64 exactly (ints None: only
    the coefficient, nothing built). None if v is not linear in the index (a minimum, a load ...)."""
    def build(name: str, a: ir.Value | None, b: ir.Value | None) -> ir.Value | None:
        return None if ints is None else ints.arith(name, a, b)

    def const(c: int) -> ir.Value | None:
        return None if ints is None else ints.const(c)

    if v == loop.regions[0].blocks[0].arguments[0]:
        return 1, const(0)
    if loop_invariant(v, loop):
        c = constant_int(v)
        return 0, const(c) if c is not None else None if ints is None else ints.leaf(v)
    op = defining_op(v)
    if op is None or op.name not in ("arith.addi", "arith.subi", "arith.muli"):
        return None
    if op.name == "arith.muli":
        i = 0 if constant_int(op.operands[0]) is not None else 1
        c, inner = constant_int(op.operands[i]), _affine(op.operands[1 - i], loop, ints)
        return None if c is None or inner is None else (inner[0] * c, build("mul", inner[1], const(c)))
    a, b = (_affine(x, loop, ints) for x in op.operands)
    if a is None or b is None:
        return None
    if op.name == "arith.addi":
        return a[0] + b[0], build("add", a[1], b[1])
    return a[0] - b[0], build("sub", a[1], b[1])


def _against_index(p: ir.Value, q: ir.Value, exact: _Intervals, wide: _Intervals) -> tuple[int, ir.Value] | None:
    """p < q as `index < bound` (+1) or `bound < index` (-1) when p - q is the loop index plus or
    minus a loop-invariant rest: the test per iteration is then one compare with the index, and
    the checks join the bound (see _test). The bound must not wrap: checked like a node."""
    loop = exact.loop
    step = constant_int(loop.operands[2])
    forms = [_affine(x, loop, None) for x in (p, q)]
    if step is None or step <= 0 or None in forms or forms[0][0] - forms[1][0] not in (1, -1):
        return None
    (cp, rp), (cq, rq) = (_affine(x, loop, exact) for x in (p, q))
    (_, wp), (_, wq) = (_affine(x, loop, wide) for x in (p, q))
    if cp - cq == 1:  # index + rp < rq: index < rq - rp
        gap, bound = wide.arith("sub", wq, wp), exact.arith("sub", rq, rp)
    else:  # rp - index < rq: rp - rq < index
        gap, bound = wide.arith("sub", wp, wq), exact.arith("sub", rp, rq)
    wide.check(gap, gap)
    return cp - cq, bound


def _test(terms: list[ir.Value], loop: ir.Operation) -> ir.Value:
    """i1: every element of every term is true, and the bounds that say so are exact.

    The checks (`fits`, loop-invariant) join one comparison as an operand that makes it false when
    they fail, so the test per iteration is the comparisons alone: `index < (fits ? bound : lb)`
    (the index is never below the loop's lower bound), `(fits ? bound : ub) < index`, or, for a
    comparison that is not with the index, `p < (fits ? q : INT_MIN)`."""
    exact, wide = _Intervals(loop), _Intervals(loop, wide=True)
    tests = [_strict(defining_op(t), exact, wide) if defining_op(t).name == "arith.cmpi" else _all_pass(t, exact, wide)
             for term in terms for t in _conjuncts(term)]
    tests = [(t, _against_index(*t, exact, wide)) if isinstance(t, tuple) else (t, None) for t in tests]
    fits = None
    for f in wide.fits:
        fits = f if fits is None else arith.AndIOp(fits, f).result
    index = loop.regions[0].blocks[0].arguments[0]
    parts = []
    for test, against in tests:
        if against is not None:
            side, bound = against
            if fits is not None:
                never = loop.operands[0] if side > 0 else loop.operands[1]  # lb <= index < ub
                bound, fits = arith.SelectOp(fits, bound, never).result, None
            test = (index, bound) if side > 0 else (bound, index)
        if isinstance(test, tuple):
            p, q = test
            if fits is not None and loop_invariant(q, loop):  # fits ? q : INT_MIN -- nothing is below
                q, fits = arith.SelectOp(fits, q, exact.const(I32_MIN)).result, None
            elif fits is not None and loop_invariant(p, loop):  # fits ? p : INT_MAX -- nothing is above
                p, fits = arith.SelectOp(fits, p, exact.const(I32_MAX)).result, None
            test = arith.CmpIOp(arith.CmpIPredicate.slt, p, q).result
        parts.append(test)
    parts += exact.requires + ([fits] if fits is not None else [])
    result = parts[0]
    for part in parts[1:]:
        result = arith.AndIOp(result, part).result
    return result


def _with_consumers(load: ir.Operation) -> list[ir.Operation]:
    """The load and the elementwise ops that take its value on to its use: each the only user of
    the one before, in the same block, its other operands available before the load (constants
    and splats between are moved up). They are versioned with it, so each branch yields their
    result, as a kernel written by hand adds a bias tile to the scores inside each branch: a
    branch that yields the loaded tile itself made LLVM merge it through copies (the forward's
    bias: up to 150 more instructions and 40 more SGPRs per variant). A select or compare ends
    the chain (a mask of its own, which the pass versions separately)."""
    chain = [load]
    while len(chain[-1].results) == 1:
        uses = list(chain[-1].results[0].uses)
        if len(uses) != 1:
            break
        user = as_operation(uses[0].owner)
        if user.block != load.block or not user.name.startswith("arith.") \
                or user.name in ("arith.select", "arith.cmpi", "arith.cmpf") \
                or len(user.results) != 1 or not is_tile(user.results[0]):
            break
        if not all(_hoisted_above(v, load) for v in user.operands if v != chain[-1].results[0]):
            break
        chain.append(user)
    return chain


def _hoisted_above(v: ir.Value, anchor: ir.Operation) -> bool:
    """v is available before `anchor` (an op of the same block as v's user): defined by an
    enclosing block or before it, or made so by moving up its constant or splat."""
    op = defining_op(v)
    if op is None or op.block != anchor.block:
        return True
    ops = ops_in(anchor.block)
    if ops.index(op) < ops.index(anchor):
        return True
    if op.name not in ("arith.constant", "tile.splat") or not all(_hoisted_above(x, anchor) for x in op.operands):
        return False
    op.move_before(anchor)
    return True


def _version(chain: list[ir.Operation], loop: ir.Operation, tested: list[ir.Value], kept: list[ir.Value]) -> None:
    """if <the tested terms pass whole> { chain under the kept terms } else { chain }: chain is
    the masked op and what it feeds on its way (a load's, _with_consumers)."""
    op, last = chain[0], chain[-1]
    mask = _mask_of(op)
    results = [r.type for r in last.results]
    with ir.InsertionPoint(op), op.location:
        branch = scf.IfOp(_test(tested, loop), results, has_else=True)
    with ir.InsertionPoint(branch.then_block), op.location:
        rest = kept[0] if kept else None
        for term in kept[1:]:
            rest = arith.AndIOp(rest, term).result
        if op.name == "arith.select":
            fast = [op.operands[1] if rest is None else arith.SelectOp(rest, *op.operands[1:]).result]
        else:
            if rest is None:
                rest = tile_op("splat", [arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result],
                               [mask.type]).result
            mapping = {mask: rest}
            for each in chain:
                fast = clone_op(each, mapping).results
                mapping.update(zip(each.results, fast, strict=True))
        scf.YieldOp(list(fast))
    for old, new in zip(last.results, branch.results, strict=True):
        old.replace_all_uses_with(new)
    with ir.InsertionPoint(branch.else_block), op.location:
        done = scf.YieldOp(list(last.results))
    for each in chain:
        each.move_before(done)
    if op.name == "tile.load":
        _sink_into_both(branch)
    else:
        _sink_into(branch.else_block, branch.operation)
    _sink_dots_below(branch.operation)


def _sink_dots_below(branch: ir.Operation) -> None:
    """Move the dots before `branch` that nothing uses until after it to just below it, in order.
    The branch ends a basic block, the region LLVM's scheduler works in: a dot left above it runs
    its matrix instructions back to back there, where below it they interleave with the vector
    work after the branch (the forward's next key block's scores, OVERLAP, beside this block's
    exponentials: gfx950 hdim 64 modeled 843.9 above the mask's branch, 903.3 below)."""
    ops = ops_in(branch.block)
    at = ops.index(branch)
    below = branch
    for op in ops[:at]:
        if op.name != "tile.dot":
            continue
        users = [ancestor_in(as_operation(u.owner), branch.block) for r in op.results for u in r.uses]
        if users and all(u is not None and ops.index(u) > at for u in users):
            op.move_after(below)
            below = op


def _sinkable(op: ir.Operation) -> bool:
    """A pure op without regions that a branch may take along."""
    return not op.regions and (op.name.startswith("arith.") or op.name in _SINKABLE)


def _sink_into(block: ir.Block, branch: ir.Operation) -> None:
    """Move the pure ops before `branch` that only `block` uses into it, in order."""
    ops = ops_in(branch.block)
    for op in reversed(ops[:ops.index(branch)]):
        if not _sinkable(op):
            continue
        users = [as_operation(u.owner) for r in op.results for u in r.uses]
        if users and all(ancestor_in(u, block) is not None for u in users):
            op.move_before(ops_in(block)[0])


def _sink_into_both(branch: scf.IfOp) -> None:
    """Move the pure ops before `branch` that only it uses into the branches, copied into each
    that uses them: a versioned load's addresses are computed where it is issued, as in a kernel
    that writes both loads by hand. Computed before the branch, LLVM scheduled them ahead of the
    score MFMAs, where their registers cost the LDS reads their double buffering (gfx942 hdim 128
    with a bias: 7 % slower, modeled)."""
    blocks = (branch.then_block, branch.else_block)
    ops = ops_in(branch.operation.block)
    for op in reversed(ops[:ops.index(branch.operation)]):
        if not _sinkable(op) or len(op.results) != 1:
            continue
        uses = list(op.results[0].uses)
        into = [next((i for i, b in enumerate(blocks) if ancestor_in(as_operation(u.owner), b) is not None), None)
                for u in uses]
        if not uses or None in into:
            continue
        if 0 in into and 1 in into:  # the then branch gets a copy, the else branch the op
            with ir.InsertionPoint(ops_in(blocks[0])[0]):
                copy = clone_op(op, {}).results[0]
            for use, i in zip(uses, into, strict=True):
                if i == 0:
                    as_operation(use.owner).operands[use.operand_number] = copy
        op.move_before(ops_in(blocks[1 if 1 in into else 0])[0])
