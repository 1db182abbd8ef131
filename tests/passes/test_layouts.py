"""Typed layouts (passes/layouts.py): parse/print round trips, the verifier, and the pipeline's
checks after every pass (layouts, the tile ops' IRDL constraints, the module's arch)."""

from __future__ import annotations

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.errors import CompileError, TileError
from tiledsl.passes import layouts as L
from tiledsl.passes.pipeline import run_pass

pytestmark = pytest.mark.passes

GFX942 = get_arch("gfx942")
ACC = L.Mma("acct", GFX942.matrix_op("f16", 32), 2, 2)
T4 = L.Threads(64, 4)


@pytest.mark.parametrize("layout", [
    L.Blocked(8), L.Blocked(8, 4), ACC, ACC.with_kind("opa"), L.Slice(1, 64, ACC), L.Expand(1, L.Slice(1, 64, ACC)),
    L.PermK(1, (2, 1, 4), ACC.with_kind("opa")), L.Slice(0, 4, L.Expand(0, L.Blocked(4))),
])
def test_print_parse_round_trip(layout: L.Layout) -> None:
    text = str(layout)
    assert L.Layout.parse(text) == layout and str(L.Layout.parse(text)) == text
    assert hash(L.Layout.parse(text)) == hash(layout)


def test_blocked_rows_per_lane_and_lanes_per_row() -> None:
    """blocked(V,R): each lane holds R consecutive rows of V-element vectors; at most 8 lanes share
    a row (8 x 16 bytes = one 128-byte line) when the other lanes have rows to take."""
    c = L.coords(L.Blocked(8, 4), (128, 128), T4)  # [threads, regs, (row, col)]
    assert c.shape == (256, 64, 2)
    assert [tuple(x) for x in c[0, :9]] == [(0, j) for j in range(8)] + [(1, 0)]  # vectors, then the next row
    assert [tuple(c[t, 0]) for t in (1, 7, 8, 9)] == [(0, 8), (0, 56), (4, 0), (4, 8)]  # 8 lanes a row
    assert sorted(map(tuple, c.reshape(-1, 2))) == [(r, k) for r in range(128) for k in range(128)]  # all, once
    fewer = L.coords(L.Blocked(8, 4), (64, 128), T4)  # 16 row groups for 256 lanes: 16 lanes a row
    assert tuple(fewer[16, 0]) == (4, 0) and len({tuple(x) for x in fewer.reshape(-1, 2)}) == 64 * 128
    one_row = L.coords(L.Blocked(4), (1, 256), L.Threads(64, 1))
    assert sorted(one_row[:, 0, 1].tolist()) == list(range(0, 256, 4))  # one row: every lane along it, no copies
    with pytest.raises(L.LayoutError, match="rows per lane"):
        L.verify(L.Blocked(8, 3), (64, 128), T4)


def test_text_form_is_the_ir_encoding() -> None:
    assert str(ACC) == "acct(mfma,32,32,8,4,f16,2,2)"  # the instruction's ISA name is not part of it
    assert str(L.Slice(1, 64, ACC)) == "slice(1,64,acct(mfma,32,32,8,4,f16,2,2))"
    assert str(L.PermK(1, (2, 1), ACC)) == "permk(1,2:1,acct(mfma,32,32,8,4,f16,2,2))"


@pytest.mark.parametrize("dtype", ["f16", "f8e4m3"])
def test_k_permutation_on_one_wave(dtype: str) -> None:
    """A single-wave kernel has no wave bits: its (empty) wave bases were a float array, and the
    bit tests of k_permutation raised a TypeError in assign-layouts for a chained dot."""
    op = GFX942.matrix_op(dtype, 32)
    one = L.Threads(64, 1)
    acc = L.Mma("acct", op, 1, 1)
    assert L.linear(acc, (32, 32), one).wave_bases.dtype.kind == "i"
    images = L.k_permutation(acc, acc.with_kind("opa"), (32, 32), 1, one)
    if images is not None:  # the relabelled operand layout then puts every element where the accumulator has it
        permuted = L.with_k_permutation(acc.with_kind("opa"), 1, images)
        assert (L.coords(permuted, (32, 32), one) == L.coords(acc, (32, 32), one)).all()


@pytest.mark.parametrize("text", ["blocked", "blocked(x)", "acc(mfma,32,32,8,4,f16,2)", "swizzle(1)",
                                  "slice(1,64)", "acd(mfma,32,32,8,4,f16,2,2)"])
def test_bad_text_is_a_layout_error(text: str) -> None:
    with pytest.raises(L.LayoutError, match="bad layout text"):
        L.Layout.parse(text)


def test_verifier_accepts_what_fits() -> None:
    L.verify(ACC, (64, 64), T4, GFX942)
    L.verify(ACC.with_kind("opa"), (64, 32), T4, GFX942)
    L.verify(ACC.with_kind("opbt"), (64, 32), T4, GFX942)
    L.verify(L.Slice(1, 64, ACC), (64,), T4, GFX942)
    L.verify(L.Expand(1, L.Slice(1, 64, ACC)), (64, 1), T4, GFX942)
    L.verify(L.PermK(1, (2, 1, 4, 8), ACC.with_kind("opa")), (64, 16), T4, GFX942)


@pytest.mark.parametrize("layout,shape,threads,arch,why", [
    (L.Mma("acc", get_arch("gfx950").matrix_op("f16", 32), 2, 2), (64, 64), T4, GFX942,
     "gfx942 has no mfma 32x32x16 f16 instruction"),
    (ACC, (64, 64), L.Threads(64, 8), GFX942, "2 x 2 waves, but the kernel runs 8"),
    (ACC, (48, 64), T4, GFX942, "tiles [64k, 64k] blocks"),
    (ACC, (64, 64, 1), T4, GFX942, "needs a 2-D tile"),
    (ACC, (64, 64), T4, get_arch("gfx1100"), "64-lane waves, but gfx1100 runs 32"),
    (L.Expand(0, L.Blocked(8)), (4, 64), T4, GFX942, "expand needs a size-1 axis 0"),
    (L.PermK(1, (1, 1), ACC.with_kind("opa")), (64, 4), T4, GFX942, "not a permutation"),
    (L.Blocked(3), (64,), T4, GFX942, "power-of-two vector"),
])
def test_verifier_rejects_what_does_not_fit(layout, shape, threads, arch, why) -> None:
    with pytest.raises(L.LayoutError, match=why.replace("[", r"\[").replace("]", r"\]")):
        L.verify(layout, shape, threads, arch)


MODULE = """module attributes {tile.arch = "gfx942"} {
  func.func @k(%p: !llvm.ptr<1>) attributes {tile.kernel, tile.waves = 4 : i32} {
    %r = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32>
    %true = arith.constant true
    %m = "tile.splat"(%true) : (i1) -> tensor<64xi1>
    %z = arith.constant 0.0 : f32
    %x = "tile.load"(%p, %r, %m, %z) : (!llvm.ptr<1>, tensor<64xi32>, tensor<64xi1>, f32) -> tensor<64xf32>
    "tile.store"(%p, %r, %x, %m) : (!llvm.ptr<1>, tensor<64xi32>, tensor<64xf32>, tensor<64xi1>) -> ()
    return
  }
}
"""


def test_module_for_another_arch_is_refused() -> None:
    run_pass("assign-layouts", MODULE, GFX942)
    with pytest.raises(CompileError, match="emitted for gfx942, but the passes were asked to compile it for gfx1100"):
        run_pass("assign-layouts", MODULE, get_arch("gfx1100"))


BAD_LAYOUT = MODULE.replace('-> tensor<64xf32>\n', '-> tensor<64xf32, "acct(mfma,32,32,8,4,f16,2,2)">\n', 1) \
    .replace("(!llvm.ptr<1>, tensor<64xi32>, tensor<64xf32>,", '(!llvm.ptr<1>, tensor<64xi32>, '
             'tensor<64xf32, "acct(mfma,32,32,8,4,f16,2,2)">,')
BAD_LAYOUT_ERROR = ("internal: tile.load result: layout acct.* does not fit a tile \\[64\\]: "
                    "a matrix layout needs a 2-D tile")


def test_a_layout_that_does_not_fit_fails_at_the_pass() -> None:
    with pytest.raises(TileError, match=BAD_LAYOUT_ERROR):
        run_pass("hoist-conversions", BAD_LAYOUT, GFX942)


def test_the_pipeline_verifies_its_input_and_after_each_pass_where_it_fails(monkeypatch) -> None:
    """make_gpu_mlir verifies the tile module as it comes and after its last pass; a failure runs
    the passes again verified after each one, which reports the first wrong module, not what a
    later pass made of it."""
    from tiledsl.options import CompileOptions
    from tiledsl.passes import pipeline

    options = CompileOptions(arch="gfx942")
    with pytest.raises(TileError, match=BAD_LAYOUT_ERROR):
        pipeline.make_gpu_mlir(BAD_LAYOUT, GFX942, options)

    found = []

    def failing(module, context):  # a pass bug
        found.append(dict(context.facts))
        context.facts["seen"] = True
        raise AssertionError("a pass bug")

    monkeypatch.setattr(pipeline, "PASSES", [("failing", failing)] + pipeline.PASSES[1:])
    with pytest.raises(CompileError, match="a pass bug"):
        pipeline.make_gpu_mlir(MODULE, GFX942, options, facts={})
    assert found == [{}, {}]  # run again, verified after each pass, from nothing the failed run found


def test_tile_ops_have_typed_operands() -> None:
    """The IRDL definition checks operand kinds: a dot of scalars does not verify."""
    from mlir import ir

    from tiledsl.ir.dialect import new_context

    text = """func.func @f(%a: f32, %t: tensor<16x16xf32>) {
  %d = "tile.dot"(%a, %t, %t) {trans_b = false} : (f32, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  return
}"""
    with new_context(), ir.Location.unknown(), pytest.raises(ir.MLIRError, match="expected base type 'builtin.tensor'"):
        ir.Module.parse(text)


@pytest.mark.parametrize("old, new, message", [
    ("%m = \"tile.splat\"(%true) : (i1) -> tensor<64xi1>", "%m = \"tile.splat\"(%z) : (f32) -> tensor<64xf32>",
     "tile.load operand 'mask' must be i1 \\(a tile or a scalar\\), got tensor<64xf32"),
    ("%r = \"tile.arange\"() {start = 0 : i32} : () -> tensor<64xi32>",
     "%r0 = \"tile.arange\"() {start = 0 : i32} : () -> tensor<64xi32>\n"
     "    %r = arith.sitofp %r0 : tensor<64xi32> to tensor<64xf32>",
     "tile.load operand 'offsets' must be i32 \\(a tile or a scalar\\), got tensor<64xf32"),
])
def test_index_and_mask_operands_are_checked_after_each_pass(old: str, new: str, message: str) -> None:
    """The kinds IRDL leaves unchecked ("tile or scalar" of i32 / i1) fail at the pass too."""
    zero = "%z = arith.constant 0.0 : f32\n"
    bad = MODULE.replace(zero, "").replace(old, zero + "    " + new)
    bad = bad.replace("tensor<64xi32>, tensor<64xi1>, f32)", "tensor<64xi32>, tensor<64xf32>, f32)") \
        if "mask" in message else bad.replace("(!llvm.ptr<1>, tensor<64xi32>,", "(!llvm.ptr<1>, tensor<64xf32>,")
    bad = bad.replace("tensor<64xf32>, tensor<64xi1>) -> ()", "tensor<64xf32>, tensor<64xf32>) -> ()") \
        if "mask" in message else bad
    with pytest.raises(TileError, match=f"internal: {message}"):
        run_pass("assign-layouts", bad, GFX942)


GFX950 = get_arch("gfx950")


def _exchange(src: L.Linear, threads: L.Threads) -> np.ndarray:
    """What ds_read_b64_tr_b16 leaves in each lane (CDNA4 ISA 11.4; the emulator's lds.py): each
    lane reads the 4 elements at its position in `src`, consecutive along axis 1, and in every
    group of 16 lanes destination lane d takes, as value e, value d % 4 of source lane 4e + d // 4."""
    read = L._compose(src, threads)  # [thread, register, (row, col)]
    out = np.empty_like(read)
    for t in range(threads.count):
        group, d = t - t % 16, t % 16
        for q in range(0, src.num_regs, 4):
            for e in range(4):
                out[t, q + e] = read[group + 4 * e + d // 4, q + d % 4]
    return out


@pytest.mark.parametrize("layout, shape, waves", [
    (L.Mma("opb", GFX950.matrix_op("f16", 32), 2, 2), (32, 64), 4),   # B [K, N] of a 32x32x16 MFMA
    (L.Mma("opb", GFX950.matrix_op("f16", 16), 4, 2), (64, 128), 8),  # 16x16x32, two K steps
    (L.PermK(0, (1, 2, 8, 4, 16), L.Mma("opb", GFX950.matrix_op("f16", 32), 4, 1)), (32, 128), 4),  # K permuted
])
def test_transpose_read_source_yields_the_operand_layout(layout, shape, waves) -> None:
    """The source layout's reads, exchanged as the instruction does, put every element where the
    operand layout wants it; each lane's 4 values are consecutive along axis 1 (one 8-byte read)."""
    threads = L.Threads(64, waves)
    dst = L.linear(layout, shape, threads)
    src = L.transpose_read_source(dst)
    assert src is not None
    assert (src.regs.reshape(-1, 4, 2)[:, :, 1] - src.regs[0::4, None, 1] == np.arange(4)).all()
    assert np.array_equal(_exchange(src, threads), L._compose(dst, threads))


@pytest.mark.parametrize("layout, shape", [
    (L.Mma("opa", GFX950.matrix_op("f16", 32), 2, 2), (64, 32)),  # lanes step axis 0: already K-contiguous rows
    (L.Blocked(8), (32, 64)),                                       # 8 values per lane along axis 1
])
def test_transpose_read_source_refuses_other_layouts(layout, shape) -> None:
    assert L.transpose_read_source(L.linear(layout, shape, T4)) is None


def _register_map_by_search(src, src_shape, dst, dst_shape, threads):
    """register_map's definition, element by element: for each dst register, the first src
    register holding the same element in every thread (size-1 src axes broadcast)."""
    cs, cd = L.coords(src, src_shape, threads), L.coords(dst, dst_shape, threads)
    cd[:, :, [axis for axis, n in enumerate(src_shape) if n == 1]] = 0
    out = []
    for i in range(cd.shape[1]):
        hits = [j for j in range(cs.shape[1]) if (cs[:, j, :] == cd[:, i, :]).all()]
        if not hits:
            return None
        out.append(hits[0])
    return out


@pytest.mark.parametrize("src, src_shape, dst, dst_shape", [
    (ACC, (64, 64), ACC, (64, 64)),                                   # the identity
    (ACC, (64, 64), ACC.with_kind("acc"), (64, 64)),                  # lanes swap: None
    (ACC.with_kind("opa"), (64, 64), L.PermK(1, (2, 1, 4), ACC.with_kind("opa")), (64, 64)),  # registers permuted
    (L.Expand(1, L.Slice(1, 64, ACC)), (64, 1), ACC, (64, 64)),       # a row vector broadcast
    (L.Expand(1, L.Slice(1, 64, ACC)), (64, 1), ACC, (64, 128)),      # ... into a wider tile
    (L.Blocked(8, 4), (128, 64), L.Blocked(8, 2), (128, 64)),         # fewer rows per lane: None
])
def test_register_map_is_its_definition(src, src_shape, dst, dst_shape) -> None:
    assert L.register_map(src, src_shape, dst, dst_shape, T4) == \
        _register_map_by_search(src, src_shape, dst, dst_shape, T4)


def test_tile_ops_are_read_without_an_import_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bindings look up a Python class for every op they hand out, importing the dialect's
    module, and remember only a module found: tiledsl.ir.py_dialects.tile is that module for
    `tile` ops, so reading them imports nothing (each failed import cost ~0.1 ms, a fifth of a
    compile's Python time)."""
    import builtins
    from pathlib import Path

    from mlir import ir

    from tiledsl.ir.dialect import new_context
    from tiledsl.passes.common import ops_in, walk_blocks

    text = (Path(__file__).parents[1] / "ir" / "dot.tile.mlir").read_text()
    with new_context():
        module = ir.Module.parse(text)
        names = [op.name for block in walk_blocks(module.operation) for op in ops_in(block)]
        assert any(n.startswith("tile.") for n in names)
        imported = []
        real_import = builtins.__import__

        def counting_import(name, *args, **kwargs):
            imported.append(name)
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", counting_import)
        again = [op.name for block in walk_blocks(module.operation) for op in ops_in(block)]
    assert again == names
    assert not [n for n in imported if n.endswith(".tile")], imported
