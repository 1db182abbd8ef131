"""Hoist loop-invariant layout conversions out of `scf.for` bodies.

Layout assignment puts each `tile.convert_layout` right before the op that needs it, so a tile
loaded before a loop and used inside it (the Q tile of attention) would be re-staged through LDS
on every iteration. A conversion whose operand is defined outside the loop computes the same
value every time: it moves in front of the loop (repeatedly, out of nested loops).

When the converted tile takes more registers per lane than its source (a gfx11 WMMA operand,
which holds every value twice), holding it across the loop costs registers, and keeping it in LDS
costs LDS and a read at every use. Held in registers by default, such a conversion is marked
`tile.held` and its registers per lane are counted (`held_registers`; stage-lds adds what LDS the
kernel would take with the tiles resident), and the driver compiles the kernel again with
`CompileOptions.resident_operands` where the registers could cost it waves per SIMD or spill:
such a conversion is then marked `tile.resident`, and stage-lds keeps the tile in its own LDS
region, read inside the loop where it is used (a dot reads it fragment by fragment). Modeled on
gfx1100, the forward's Q in registers: hdim 128 73.6 -> 80.5 TFLOP/s (its LDS no longer limits
the CU to two workgroups), but hdim 64 82.3 -> 78.3 (196 VGPRs: one wave per SIMD fewer).
"""

from __future__ import annotations

from mlir import ir

from tiledsl.ir.dialect import int_attr
from tiledsl.lang.ast import DTYPE_BYTES
from tiledsl.passes import layouts as L
from tiledsl.passes.common import (
    PassContext,
    as_operation,
    defined_inside,
    kernel_funcs,
    ops_in,
    tile_dtype,
    tile_shape,
    walk_blocks,
)


def _grows(op: ir.Operation, threads: L.Threads) -> bool:
    src, dst = op.operands[0], op.result
    shape = tile_shape(src.type)
    return L.num_regs(L.layout_of(dst.type), shape, threads) > L.num_regs(L.layout_of(src.type), shape, threads)


def hoist_conversions(module: ir.Module, ctx: PassContext) -> int:
    arch = ctx.arch
    moved = 0
    held = 0
    changed = True
    while changed:  # a hoisted conversion may now be invariant in an enclosing loop too
        changed = False
        for fn in kernel_funcs(module):
            threads = L.Threads(arch.wave_size, int_attr(fn, "tile.waves"))
            for block in list(walk_blocks(fn)):
                loop = as_operation(block.owner)
                if loop is None or loop.name != "scf.for":
                    continue
                for op in ops_in(block):
                    if op.name == "tile.convert_layout" and not defined_inside(op.operands[0], loop):
                        grows = _grows(op, threads)
                        if grows and ctx.options.resident_operands:
                            op.attributes["tile.resident"] = ir.UnitAttr.get()
                        elif grows and "tile.held" not in op.attributes:  # counted once, out of nested loops
                            op.attributes["tile.held"] = ir.UnitAttr.get()
                            held += _registers(op, threads)
                        op.move_before(loop)
                        moved += 1
                        changed = True
    ctx.facts["held_registers"] = held  # the driver's resident_operands retry weighs these
    return moved


def _registers(op: ir.Operation, threads: L.Threads) -> int:
    """32-bit registers per lane of a converted tile held across its loop."""
    shape = tile_shape(op.result.type)
    return -(-L.num_regs(L.layout_of(op.result.type), shape, threads) * DTYPE_BYTES[tile_dtype(op.result.type)] // 4)
