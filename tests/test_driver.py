"""Driver, cache, manifest, grid and ISA-stats tests.

Most tests run the real backend stages behind a fake front-end (tests/driver_fakes.py), so they
check the driver itself; the tests at the end compile the real examples and skip until the
front-end and the tile passes are importable.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.cache import Cache, CacheEntry, compiler_fingerprint, decode_entry, encode_entry
from tiledsl.driver import STAGE_NAMES, STAGES, compile_file, compile_source, input_kind
from tiledsl.errors import CompileError, SourceError, SourceLocation, TileError
from tiledsl.grid import eval_grid, render_expr, render_grid
from tiledsl.isa_stats import count_instructions, isa_stats
from tiledsl.lang.ast import BinOp, Call, Const, Name, UnaryOp
from tiledsl.manifest import check_manifest
from tiledsl.options import CompileOptions

try:
    import driver_fakes as fakes
except ImportError:  # tests/ became a package
    from tests import driver_fakes as fakes

pytestmark = pytest.mark.compile
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake(monkeypatch):
    return fakes.install(monkeypatch)


def _compile(source=fakes.FAKE_SOURCE, arch="gfx942", defines=None, cache=None, dump=None,
             filename="fake.tile"):
    options = CompileOptions.make(arch, defines, dump_ir_dir=str(dump) if dump else None)
    return compile_source(source, filename, arch, defines or {}, options, cache=cache)


# ---------------------------------------------------------------------------------------------
# Grid formulas.

L = SourceLocation("g.tile", 1, 1)


def test_render_grid_expressions():
    cdiv = Call(L, "cdiv", [Name(L, "M"), Const(L, 64)])
    assert render_expr(cdiv) == "cdiv(M, 64)"
    assert render_expr(BinOp(L, "*", BinOp(L, "+", Name(L, "a"), Name(L, "b")), Name(L, "c"))) == "(a + b) * c"
    assert render_expr(BinOp(L, "-", Name(L, "a"), BinOp(L, "-", Name(L, "b"), Name(L, "c")))) == "a - (b - c)"
    assert render_expr(BinOp(L, "+", BinOp(L, "*", Name(L, "a"), Name(L, "b")), Name(L, "c"))) == "a * b + c"
    assert render_expr(UnaryOp(L, "-", BinOp(L, "+", Name(L, "a"), Const(L, 1)))) == "-(a + 1)"
    assert render_grid([cdiv, Name(L, "B")]) == ["cdiv(M, 64)", "B", "1"]
    with pytest.raises(SourceError, match="grid expression"):
        render_expr(Const(L, 1.5))


def test_eval_grid():
    values = {"M": 1000, "N": 64, "BATCH": 3}
    assert eval_grid(["cdiv(M, 64)", "cdiv(N, 64)", "BATCH"], values) == (16, 1, 3)
    assert eval_grid("cdiv(M, 64), BATCH * 2", values) == (16, 6, 1)
    assert eval_grid(["(M + 1) // 2 % 7", "max(N, 2) - min(1, 2)"], values) == ((1001 // 2) % 7, 63, 1)
    assert eval_grid(["-(-M) / 3"], values) == (333, 1, 1)
    assert eval_grid(["1 << 4 | 1"], {}) == (17, 1, 1)


@pytest.mark.parametrize("formula, message", [
    ("cdiv(Q, 64)", "no value for 'Q'"),
    ("__import__('os').system('true')", "not allowed"),
    ("M.bit_length()", "not allowed"),
    ("M ** 2", "not allowed"),
    ("M // 0", "division by zero"),
    ("0 - M", "outside"),
    ("M +", "bad grid formula"),
    ("1 << 100", "shift amount"),
    ("1.5", "not an integer"),
])
def test_eval_grid_rejects(formula, message):
    with pytest.raises(TileError, match=message):
        eval_grid([formula], {"M": 10})


def test_eval_grid_dims_count():
    with pytest.raises(TileError, match="1 to 3"):
        eval_grid(["1", "1", "1", "1"], {})


# ---------------------------------------------------------------------------------------------
# Stage table and input kinds.

def test_stage_table_order():
    assert STAGE_NAMES == ("ast", "typed", "tile.mlir", "gpu.mlir", "rocdl.mlir", "ll", "s", "hsaco")
    assert len({s.action for s in STAGES}) == len(STAGES)


@pytest.mark.parametrize("name, kind", [("a/k.tile", "tile"), ("k.tile.mlir", "tile.mlir"),
                                        ("x.gfx942.04-tile-passes.gpu.mlir", "gpu.mlir"),
                                        ("k.rocdl.mlir", "rocdl.mlir"), ("k.ll", "ll")])
def test_input_kind(name, kind):
    assert input_kind(name) == kind


def test_input_kind_unknown():
    with pytest.raises(TileError, match=r"\.tile"):
        input_kind("k.cpp")


# ---------------------------------------------------------------------------------------------
# Compile through the fake front-end: manifest, cache, dumps, errors.

@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_manifest_matches_code_object(fake, arch):
    k = _compile(arch=arch)
    m = k.manifest
    assert (k.name, k.arch, m["kernel"], m["symbol"]) == ("fake_copy", arch, "fake_copy", "fake_copy")
    assert [(a["name"], a["offset"], a["size"]) for a in m["kernargs"]] == [
        ("x", 0, 8), ("N", 8, 4)]
    assert m["kernarg_size"] == 12
    assert m["workgroup_size"] == [get_arch(arch).wave_size, 1, 1]
    assert m["grid"] == ["cdiv(N, 64)", "1", "1"]
    assert eval_grid(m["grid"], {"N": 1000}) == (16, 1, 1)
    assert m["constexprs"] == {"BLOCK": 64} and m["shape_symbols"] == ["N"]
    assert m["tensors"] == [{"name": "x", "dtype": "f32", "dims": ["N"], "written": False, "unit_last_stride": True,
                             "stride_unit": 1, "buffer": False}]
    assert m["vgpr_count"] > 0 and m["vgpr_spill_count"] == 0
    check_manifest(m, k.hsaco)
    json.dumps(m)  # the manifest must be plain JSON


def test_check_manifest_catches_mismatches(fake):
    k = _compile()
    bad = json.loads(json.dumps(k.manifest))
    bad["kernargs"][1]["offset"] = 16
    bad["lds_bytes"] = 1024
    bad["vgpr_count"] += 1
    with pytest.raises(TileError) as info:
        check_manifest(bad, k.hsaco)
    text = str(info.value)
    assert "kernargs" in text and "lds_bytes" in text and "vgpr_count" in text
    with pytest.raises(TileError, match="arch"):
        check_manifest(dict(k.manifest, arch="gfx90a"), k.hsaco)


def test_isa_stats_from_compile(fake):
    k = _compile()
    stats = isa_stats(k.asm, k.manifest)
    assert stats.instructions >= 3 and stats.matrix_ops == 0 and stats.spills == 0
    assert 1 <= stats.occupancy <= get_arch("gfx942").max_waves_per_simd
    assert count_instructions(k.asm, "no_such_kernel").total == 0


def test_count_instructions_classes():
    asm = textwrap.dedent("""\
        \t.type\tk,@function
        k:
        ; %bb.0:
        \tv_mfma_f32_32x32x8_f16 a[0:15], v[0:1], v[2:3], a[0:15]
        \tv_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]
        \tds_read_b128 v[0:3], v4
        \ts_barrier
        .LBB0_1:
        \ts_endpgm
        \t.amdhsa_kernel k
        .Lfunc_end0:
        \tv_add_f32 v0, v0, v0
        """)
    c = count_instructions(asm)
    assert (c.total, c.mfma, c.wmma, c.barriers) == (5, 1, 1, 1)
    assert c.classes == {"matrix": 2, "lds": 1, "salu": 2}


def test_count_instructions_finds_sgpr_spill_moves_inside_loops():
    """Only the lane moves between a label and a branch back to it count: a spill before the
    loop and its reload after it (a forward branch is no loop) cost once per workgroup."""
    asm = textwrap.dedent("""\
        \t.type\tk,@function
        k:
        \tv_writelane_b32 v255, s7, 0
        .LBB0_1:
        \tv_readlane_b32 s9, v255, 1
        \ts_cbranch_scc1 .LBB0_1
        \ts_cbranch_vccz .LBB0_3
        .LBB0_2:
        \tv_writelane_b32 v255, s8, 1
        \ts_cbranch_scc0 .LBB0_2
        .LBB0_3:
        \tv_readlane_b32 s7, v255, 0
        \ts_endpgm
        .Lfunc_end0:
        """)
    c = count_instructions(asm)
    assert c.total == 8
    assert c.spill_moves_in_loops == 2  # s9's reload in the first loop, s8's spill in the second


def test_count_instructions_loops_by_control_flow():
    """A loop is a cycle of the control flow, wherever LLVM places its blocks: a rotated loop (entered
    by a branch to its body, closed by its latch falling through) counts, a branch back to an
    if-else's arm placed first does not, and only an innermost loop's moves cost every step."""
    asm = textwrap.dedent("""\
        \t.type\tk,@function
        k:
        \tv_writelane_b32 v255, s7, 0
        \ts_cbranch_scc1 .LBB0_3
        \ts_branch .LBB0_2
        .LBB0_1:
        \tv_readlane_b32 s9, v255, 1
        .LBB0_2:
        \tv_readlane_b32 s8, v255, 0
        .LBB0_5:
        \tv_writelane_b32 v255, s8, 1
        \ts_cbranch_scc0 .LBB0_5
        \ts_cbranch_vccnz .LBB0_1
        \ts_branch .LBB0_4
        .LBB0_3:
        \tv_readlane_b32 s7, v255, 2
        \ts_cbranch_vccnz .LBB0_2
        .LBB0_4:
        \ts_endpgm
        .Lfunc_end0:
        """)
    c = count_instructions(asm)
    # The outer loop (.LBB0_2 .. .LBB0_1, entered through .LBB0_2 from both the entry and .LBB0_3,
    # so .LBB0_1 -> .LBB0_2 closes it) holds three moves, the inner one (.LBB0_5) one; .LBB0_3's
    # branch back to .LBB0_2 enters the loop rather than closing it.
    assert (c.spill_moves_in_loops, c.spill_moves_in_inner_loops) == (3, 1)
    assert c.branches_in_inner_loops == 1  # .LBB0_5's own


def test_buffer_accesses_kept_where_branches_would_enter_the_hot_loop(monkeypatch):
    """The driver compiles masked accesses as branches again where buffer descriptors spill SGPRs,
    and takes the branches where they spill less without a branch in the hot loop: a masked access
    as a branch there costs a test and a jump every step, scalars spilled outside it a few moves
    per workgroup, spill moves inside it more than the branch."""
    import types

    import tiledsl.driver as drv

    def kernel(*body: str) -> str:
        return "\t.type\tk,@function\nk:\n" + "".join(f"\t{line}\n" if not line.endswith(":") else f"{line}\n"
                                                         for line in body)

    spill_outside = kernel("v_writelane_b32 v9, s7, 0", ".LBB0_1:", "s_add_u32 s0, s0, 1",
                           "s_cbranch_scc1 .LBB0_1")
    spill_inside = kernel(".LBB0_1:", "v_readlane_b32 s7, v9, 0", "s_cbranch_scc1 .LBB0_1")
    branch_inside = kernel(".LBB0_1:", "s_and_saveexec_b64 s[2:3], vcc", "s_cbranch_execz .LBB0_2",
                           "global_load_dword v1, v[2:3], off", ".LBB0_2:", "s_or_b64 exec, exec, s[2:3]",
                           "s_cbranch_scc1 .LBB0_1")
    branch_outside = kernel("s_cbranch_execz .LBB0_2", "global_load_dword v1, v[2:3], off", ".LBB0_2:",
                            ".LBB0_1:", "s_cbranch_scc1 .LBB0_1")
    for buffers, branches, kept in ((spill_outside, branch_inside, True), (spill_outside, branch_outside, False),
                                    (spill_inside, branch_inside, False)):
        compiled = []

        def once(arch_row, opts, *args, buffers=buffers, branches=branches, compiled=compiled):
            compiled.append(opts.buffer_masks)
            asm = buffers if opts.buffer_masks else branches
            return (types.SimpleNamespace(options=opts, isa=types.SimpleNamespace(asm=asm), facts={}),
                    b"",
                    {"vgpr_spill_count": 0, "sgpr_spill_count": 12 if opts.buffer_masks else 0})

        monkeypatch.setattr(drv, "_compile_once", once)
        best = drv._compile_retrying(get_arch("gfx942"), CompileOptions.make("gfx942", {}), "k.tile", {}, "", "tile")
        assert compiled == [True, False]
        assert best[0].options.buffer_masks is kept, (buffers, branches)


@pytest.mark.parametrize("taken, swapped, retried", [
    (1, 0, []),  # no load took more than one row, no reduction swapped halves: nothing to retry
    (2, 0, [1]),  # only limits below the rows taken change the code
    (4, 3, [2, 1, "no swap"]),
])
def test_retries_skip_options_no_pass_acted_on(monkeypatch, taken, swapped, retried):
    """A kernel that spills a few registers is compiled again with fewer transposed rows per lane
    and without half swaps only where a pass used them (the facts assign-layouts and lower-to-gpu
    record): with a limit at or above the rows taken, or with no swap made, the code is the same."""
    import types

    import tiledsl.driver as drv

    compiled = []

    def once(arch_row, opts, *args):
        compiled.append(opts.transposed_rows if opts.swap_halves else "no swap")
        facts = {"transposed_rows_taken": min(taken, opts.transposed_rows), "halves_swapped": swapped}
        return (types.SimpleNamespace(options=opts, isa=None, facts=facts), b"",
                {"vgpr_spill_count": 2, "sgpr_spill_count": 0})

    monkeypatch.setattr(drv, "_compile_once", once)
    opts = CompileOptions.make("gfx950", {}, buffer_masks=False, lds_spread=False)  # those retries apart
    drv._compile_retrying(get_arch("gfx950"), opts, "k.tile", {}, "", "tile")
    assert compiled == [4, *retried]


def test_a_retry_reuses_what_its_stages_did_not_change(fake, monkeypatch):
    """Within one compile_source call, a retry that changes only options the front end does not
    read reuses its tile.mlir (parse, check and emit run once), and one whose tile passes give the
    gpu.mlir text an earlier compile gave takes that compile's code object instead of running LLVM
    again; an option the front end reads (buffer_masks) runs it again; a new call (a cold compile)
    runs everything again."""
    import tiledsl.driver as drv
    from tiledsl.backends.rocm import codegen

    llvm_runs = []
    real = codegen.make_object
    monkeypatch.setattr(codegen, "make_object", lambda *a, **k: llvm_runs.append(1) or real(*a, **k))
    once = drv._compile_once
    results = []

    def fitting(arch_row, opts, *args):  # retries whose options the fake passes ignore
        results.append(once(arch_row, opts, *args))
        results.append(once(arch_row, dataclasses.replace(opts, transposed_rows=1), *args))
        results.append(once(arch_row, dataclasses.replace(opts, buffer_masks=False), *args))
        return results[1]

    monkeypatch.setattr(drv, "_compile_fitting", fitting)
    first = _compile()
    assert (fake["parse"], fake["emit"], fake["passes"], len(llvm_runs)) == (2, 2, 3, 1)
    assert results[0][1] == results[1][1] == results[2][1] == first.hsaco
    assert results[1][0].isa is results[0][0].isa and results[1][0].bound is results[0][0].bound
    _compile()
    assert (fake["parse"], fake["emit"], fake["passes"], len(llvm_runs)) == (4, 4, 6, 2)


def test_backend_only_options_are_not_read_by_the_front_end():
    """The front end's artifacts are reused across retries that change only BACKEND_ONLY_OPTIONS
    (driver.run_stages): none of their names may occur in the parser, checker or emitter."""
    from tiledsl.options import BACKEND_ONLY_OPTIONS

    for path in [*(ROOT / "tiledsl" / "lang").glob("*.py"), *(ROOT / "tiledsl" / "ir").glob("*.py")]:
        code = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())  # not comments
        for name in BACKEND_ONLY_OPTIONS:
            assert not re.search(rf"\b{name}\b", code), (path.name, name)


@pytest.mark.parametrize("minreg_spills", [0, 3, 9])
def test_a_kernel_that_still_spills_is_compiled_with_the_min_reg_scheduler(monkeypatch, minreg_spills):
    """After every retry, a kernel that spills VGPRs is compiled once more with LLVM's iterative
    min-reg scheduler, kept where it spills less (its manifest says why, and keeps what the
    occupancy steps recorded); a kernel without VGPR spills, or with more than reordering can
    remove, is not compiled again."""
    import types

    import tiledsl.driver as drv

    compiled = []

    def once(arch_row, opts, *args):
        compiled.append(opts.schedule)
        spills = minreg_spills if opts.schedule == drv.MINREG else 9
        return types.SimpleNamespace(options=opts), b"", {"vgpr_spill_count": spills, "sgpr_spill_count": 0}

    monkeypatch.setattr(drv, "_compile_once", once)
    spilled = (types.SimpleNamespace(options=CompileOptions.make("gfx1100", {}, schedule="max-ilp")), b"",
               {"vgpr_spill_count": 9, "sgpr_spill_count": 0, "occupancy_target": 2, "occupancy_lowered_to": 0})
    best = drv._fewest_live_registers(get_arch("gfx1100"), spilled, "k.tile", {}, "", "tile")
    assert compiled == [drv.MINREG]
    if minreg_spills < 9:
        assert best[0].options.schedule == drv.MINREG and best[2]["vgpr_spill_count"] == minreg_spills
        assert best[2]["schedule_fallback"] == "spills 9 VGPRs with the max-ilp scheduler; compiled with " \
                                               "iterative-minreg"
        assert (best[2]["occupancy_target"], best[2]["occupancy_lowered_to"]) == (2, 0)
    else:
        assert best is spilled
    unspilled = (spilled[0], b"", {"vgpr_spill_count": 0, "sgpr_spill_count": 4})
    too_many = (spilled[0], b"", {"vgpr_spill_count": drv.MINREG_SPILLS + 1, "sgpr_spill_count": 0})
    for skipped in (unspilled, too_many):  # nothing to gain, or more than reordering can remove
        assert drv._fewest_live_registers(get_arch("gfx1100"), skipped, "k.tile", {}, "", "tile") is skipped
    assert compiled == [drv.MINREG]


def test_spills_last_resort_accepts_what_the_retries_could_not_remove(monkeypatch):
    """CompileOptions.spills_last_resort (the library's forward variants) returns the kernel that
    still spills after every retry; without it (or allow_spills) that kernel is an error."""
    import types

    import tiledsl.driver as drv

    ctx = types.SimpleNamespace(arch=get_arch("gfx1100"), bound=None, source=None)
    spilled = {"vgpr_spill_count": 9, "vgpr_count": 256, "waves": 4}
    with pytest.raises(TileError, match="spills 9 registers to scratch memory on gfx1100"):
        drv._check_spills(spilled, ctx, CompileOptions.make("gfx1100", {}))
    drv._check_spills(spilled, ctx, CompileOptions.make("gfx1100", {}, spills_last_resort=True))
    drv._check_spills(spilled, ctx, CompileOptions.make("gfx1100", {}, allow_spills=True))


def test_cache_miss_then_hit(fake, tmp_path):
    cache = Cache(tmp_path / "cache")
    first = _compile(cache=cache)
    assert not first.from_cache and fake["parse"] == 1 and fake["bind"] == 1
    second = _compile(cache=cache)
    assert second.from_cache and fake["parse"] == 1 and fake["bind"] == 1  # no front-end on a hit
    assert (second.hsaco, second.asm, second.manifest) == (first.hsaco, first.asm, first.manifest)
    # Every part of the key separates entries.
    assert not _compile(cache=cache, arch="gfx950").from_cache
    assert not _compile(cache=cache, defines={"BLOCK": "128"}).from_cache
    assert not _compile(cache=cache, source=fakes.FAKE_SOURCE + "# edited\n").from_cache
    assert _compile(cache=cache, defines={"BLOCK": "128"}).from_cache
    assert _compile(cache=cache, defines={"BLOCK": "128"}).manifest["grid"] == ["cdiv(N, 128)", "1", "1"]


def test_errors_are_not_cached(fake, tmp_path):
    cache = Cache(tmp_path / "cache")
    for _ in range(2):  # a hit would skip binding; an invalid define must fail every time
        with pytest.raises(SourceError, match="not a constexpr"):
            _compile(cache=cache, defines={"BOGUS": "1"})
    assert fake["bind"] == 2


def test_bad_define_shape_rejected_before_cache(tmp_path):
    with pytest.raises(TileError, match="bad define name"):
        _compile(cache=Cache(tmp_path), defines={"1x": "2"})
    with pytest.raises(TileError, match="unknown arch 'gfx1030'"):
        _compile(arch="gfx1030")


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "header_only"])
def test_corrupted_entry_is_ignored_and_rewritten(fake, tmp_path, damage):
    cache = Cache(tmp_path / "cache")
    good = _compile(cache=cache)
    [entry] = list((tmp_path / "cache").rglob("*.entry"))
    blob = entry.read_bytes()
    damaged = {"truncate": blob[: len(blob) // 2], "flip": blob[:-10] + bytes([blob[-10] ^ 0xFF]) + blob[-9:],
               "garbage": os.urandom(len(blob)), "empty": b"", "header_only": blob[:40]}[damage]
    entry.write_bytes(damaged)
    again = _compile(cache=cache)
    assert not again.from_cache and again.hsaco == good.hsaco
    assert entry.read_bytes() == blob  # overwritten with a good entry
    assert _compile(cache=cache).from_cache


@pytest.mark.parametrize("tamper", ["kernel_path", "kernel_absolute", "garbage_hsaco", "fifo", "dev_zero"])
def test_entry_with_a_recomputed_checksum_or_no_file_is_a_miss(fake, tmp_path, tamper):
    """An entry someone rewrote with a valid checksum (a cache a group shares) is checked like any
    other: a kernel name that is no identifier (output files are named after it: '../evil' would
    write outside -o), a code object that does not parse; and only a regular file is read (a FIFO
    would block, /dev/zero never end). Each is a miss: compiled again, the entry replaced."""
    cache = Cache(tmp_path / "cache")
    good = _compile(cache=cache)
    [path] = list((tmp_path / "cache").rglob("*.entry"))
    entry = decode_entry(path.read_bytes())
    if tamper in ("kernel_path", "kernel_absolute", "garbage_hsaco"):
        if tamper == "garbage_hsaco":
            entry = dataclasses.replace(entry, hsaco=b"\x7fELF\x02\x01\x01")
        else:
            entry.manifest["kernel"] = "../evil" if tamper == "kernel_path" else str(tmp_path / "evil")
        path.write_bytes(encode_entry(entry))
    else:
        path.unlink()
        if tamper == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero")
    again = _compile(cache=cache)
    assert not again.from_cache and again.manifest["kernel"] == good.manifest["kernel"]
    assert again.hsaco == good.hsaco
    assert _compile(cache=cache).from_cache  # the entry was replaced with a good one


def test_cache_unwritable_does_not_fail(fake, tmp_path):
    """The compile succeeds; a warning says, once per directory, that nothing is kept."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(RuntimeWarning, match=r"compile cache .*/file/cache is not writable \(.*\): compiled kernels "
                                            r"are not kept; set TILEDSL_CACHE_DIR"):
        assert not _compile(cache=Cache(blocker / "cache")).from_cache
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not _compile(cache=Cache(blocker / "cache")).from_cache


def _hammer(root: str, key: str, seed: int, rounds: int) -> list[str]:
    """Writer/reader worker: returns the problems it saw (an empty list when all is well)."""
    cache = Cache(root)
    problems = []
    for i in range(rounds):
        payload = bytes([seed]) * (50_000 + 997 * i)
        cache.put(key, CacheEntry(payload, f"asm {seed} {i}", {"seed": seed, "i": i}))
        got = cache.get(key)
        if got is None:
            problems.append(f"round {i}: entry unreadable")
        elif got.hsaco != bytes([got.manifest["seed"]]) * (50_000 + 997 * got.manifest["i"]):
            problems.append(f"round {i}: entry mixes two writers")
    return problems


def test_concurrent_writers_never_corrupt(tmp_path):
    key = "ab" * 32
    ctx = multiprocessing.get_context("spawn")  # a fork from a threaded process (xdist) can hang on a copied lock
    with ctx.Pool(4) as pool:
        results = pool.starmap(_hammer, [(str(tmp_path), key, seed, 25) for seed in range(4)])
    assert results == [[], [], [], []]
    assert Cache(tmp_path).get(key) is not None
    assert [p.name for p in (tmp_path / "ab").iterdir()] == [f"{key}.entry"]  # no temp files left


def _compile_softmax_at_once(root: str, barrier, seconds: float) -> tuple[bool, bytes]:
    """Worker: compile examples/softmax.tile into the shared cache `root` once every worker is
    ready, each compile made `seconds` slower so that the workers' compiles would overlap."""
    import time

    import tiledsl.driver as drv

    searching = drv._compile_searching

    def slow(*args):
        time.sleep(seconds)
        return searching(*args)

    drv._compile_searching = slow
    source = (ROOT / "examples" / "softmax.tile").read_text()
    barrier.wait()
    k = compile_source(source, "softmax.tile", "gfx942", {"DT": "f16"}, cache=Cache(root))
    return k.from_cache, k.hsaco


def test_processes_compiling_one_kernel_compile_it_once(tmp_path):
    """Processes sharing a cache that ask for the same kernel at once (the ranks of a job, the
    workers of a build) compile it once: the others wait for its entry and take it."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(3) as pool:
        barrier = manager.Barrier(3)
        results = pool.starmap(_compile_softmax_at_once, [(str(tmp_path), barrier, 3.0)] * 3)
    assert sorted(hit for hit, _ in results) == [False, True, True]
    assert len({hsaco for _, hsaco in results}) == 1


def test_entry_roundtrip_and_checks():
    entry = CacheEntry(b"\x7fELF", "s_endpgm", {"kernel": "k"})
    blob = encode_entry(entry)
    assert decode_entry(blob) == entry
    assert decode_entry(blob + b"x") is None
    assert decode_entry(b"nonsense") is None
    lazy = CacheEntry(b"\x7fELF", None, {"kernel": "k"}, "define void @k() { ret void }", True)
    assert decode_entry(encode_entry(lazy)) == lazy  # the assembly not made: the IR that makes it
    assert decode_entry(encode_entry(CacheEntry(b"\x7fELF", None, {"kernel": "k"}))) is None  # neither


def test_cache_hit_imports_nothing_heavy(fake, tmp_path):
    cache_dir = tmp_path / "cache"
    _compile(cache=Cache(cache_dir))
    # The child reuses this process's compiler fingerprint: files edited in between must not
    # turn the hit into a miss.
    code = textwrap.dedent(f"""
        import sys, time
        import tiledsl.cache
        from tiledsl.cache import Cache
        from tiledsl.driver import compile_source
        tiledsl.cache.compiler_fingerprint = lambda: {compiler_fingerprint()!r}
        t0 = time.perf_counter()
        k = compile_source({fakes.FAKE_SOURCE!r}, "fake.tile", "gfx942", {{}}, cache=Cache({str(cache_dir)!r}))
        dt = time.perf_counter() - t0
        heavy = [m for m in ("mlir", "llvmlite", "tiledsl.lang.parser", "tiledsl.lang.checker",
                             "tiledsl.manifest", "importlib.metadata") if m in sys.modules]
        print(k.from_cache, heavy, round(dt * 1000, 1))
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = proc.stdout.strip()
    assert out.startswith("True []"), out  # the time (ms) is printed for -s runs, not asserted
    print("cache hit in a fresh process:", out.rsplit(" ", 1)[1], "ms")


def test_dump_ir_writes_every_stage(fake, tmp_path):
    dump = tmp_path / "dump"
    cache = Cache(tmp_path / "cache")
    _compile(cache=cache)  # a cached result must not stop a dump
    k = _compile(dump=dump, cache=cache)
    assert not k.from_cache
    names = sorted(p.name for p in dump.iterdir())
    assert names == [
        "fake_copy.gfx942.00-source.tile", "fake_copy.gfx942.01-parse.ast", "fake_copy.gfx942.02-check.typed",
        "fake_copy.gfx942.03-emit.tile.mlir", "fake_copy.gfx942.04-tile-passes.gpu.mlir",
        "fake_copy.gfx942.05-convert-gpu-to-rocdl.rocdl.mlir", "fake_copy.gfx942.06-translate.ll",
        "fake_copy.gfx942.07-codegen.o", "fake_copy.gfx942.07-codegen.s", "fake_copy.gfx942.08-link.hsaco"]
    assert (dump / "fake_copy.gfx942.08-link.hsaco").read_bytes() == k.hsaco
    assert (dump / "fake_copy.gfx942.07-codegen.s").read_text() == k.asm
    assert "llvm.func" in (dump / "fake_copy.gfx942.05-convert-gpu-to-rocdl.rocdl.mlir").read_text()
    assert "BoundKernel" in (dump / "fake_copy.gfx942.02-check.typed").read_text()


@pytest.mark.parametrize("use_dump", [True, False])
def test_failing_stage_is_named_and_its_input_saved(fake, tmp_path, use_dump):
    """Saved in the dump directory, else under the cache directory's reports (not the system
    temp directory, where nobody looks)."""
    dump = tmp_path / "dump" if use_dump else None
    with pytest.raises(CompileError) as info:
        _compile(source=fakes.FAKE_SOURCE + "FAIL_PASSES\n", dump=dump, cache=Cache(tmp_path / "cache"))
    err = info.value
    assert err.stage == "tile-passes"
    assert "stage 'tile-passes' failed" in str(err) and "nothing to lower" in str(err)
    saved = Path(err.saved_input)
    assert saved.name == "fake_copy.gfx942.03-emit.tile.mlir"
    assert "// fake tile mlir" in saved.read_text()
    assert saved.parent == dump if use_dump else saved.parent.parent == tmp_path / "cache" / "reports"
    assert str(saved) in str(err)


def test_failing_upstream_conversion_saves_gpu_mlir(fake, tmp_path):
    with pytest.raises(CompileError) as info:
        _compile(source=fakes.FAKE_SOURCE + "BAD_GPU\n", dump=tmp_path)
    assert info.value.stage == "convert-gpu-to-rocdl"
    assert Path(info.value.saved_input).read_text() == "module { this is not mlir }\n"


def test_compiler_bug_keeps_traceback_and_saves_input(fake, tmp_path):
    with pytest.raises(ZeroDivisionError) as info:
        _compile(source=fakes.FAKE_SOURCE + "CRASH_EMIT\n")
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "stage 'emit'" in notes and "saved at" in notes
    fakes.remove_saved(notes.rsplit("saved at ", 1)[1])


def test_compile_file_writes_outputs_per_arch(fake, tmp_path):
    src = tmp_path / "fake.tile"
    src.write_text(fakes.FAKE_SOURCE)
    files = compile_file(src, ["gfx90a", "gfx1201"], {}, tmp_path / "out")
    assert [p.name for p in files] == [
        "fake_copy.gfx90a.hsaco", "fake_copy.gfx90a.s", "fake_copy.gfx90a.json",
        "fake_copy.gfx1201.hsaco", "fake_copy.gfx1201.s", "fake_copy.gfx1201.json"]
    for arch in ("gfx90a", "gfx1201"):
        manifest = json.loads((tmp_path / "out" / f"fake_copy.{arch}.json").read_text())
        check_manifest(manifest, (tmp_path / "out" / f"fake_copy.{arch}.hsaco").read_bytes())


def test_compile_file_missing(tmp_path):
    with pytest.raises(TileError, match="no such file"):
        compile_file(tmp_path / "nope.tile", ["gfx942"], {}, tmp_path)


@pytest.mark.parametrize("kind", ["gpu.mlir", "ll"])
def test_start_from_intermediate_file(fake, tmp_path, kind):
    dump = tmp_path / "dump"
    _compile(dump=dump)
    produced = {"gpu.mlir": "04-tile-passes.gpu.mlir", "ll": "06-translate.ll"}[kind]
    src = tmp_path / f"k.{kind}"
    src.write_text((dump / f"fake_copy.gfx942.{produced}").read_text())
    cache = Cache(tmp_path / "cache")
    files = compile_file(src, ["gfx942"], {}, tmp_path / "out", cache=cache)
    manifest = json.loads(files[2].read_text())
    assert files[0].name == "fake_copy.gfx942.hsaco" and manifest["partial"] is True
    check_manifest(manifest, files[0].read_bytes())
    assert compile_source(src.read_text(), str(src), "gfx942", cache=cache).from_cache
    with pytest.raises(TileError, match="defines apply to .tile sources only"):
        compile_source(src.read_text(), str(src), "gfx942", {"BLOCK": "32"})


def test_dump_fed_back_keeps_kernel_name(fake, tmp_path):
    _compile(dump=tmp_path / "d1")
    src = tmp_path / "d1" / "fake_copy.gfx942.04-tile-passes.gpu.mlir"
    options = CompileOptions.make("gfx942", dump_ir_dir=str(tmp_path / "d2"))
    compile_source(src.read_text(), str(src), "gfx942", {}, options)
    assert sorted(p.name for p in (tmp_path / "d2").iterdir()) == [
        "fake_copy.gfx942.00-source.gpu.mlir", "fake_copy.gfx942.05-convert-gpu-to-rocdl.rocdl.mlir",
        "fake_copy.gfx942.06-translate.ll", "fake_copy.gfx942.07-codegen.o", "fake_copy.gfx942.07-codegen.s",
        "fake_copy.gfx942.08-link.hsaco"]


# ---------------------------------------------------------------------------------------------
# The real front-end (skipped until parser, checker, emitter and passes land).

def _need_real_frontend():
    for mod in ("tiledsl.lang.parser", "tiledsl.lang.checker", "tiledsl.ir.emit", "tiledsl.passes.pipeline"):
        pytest.importorskip(mod)


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("example, dtype", [("gemm", "f16"), ("gemm", "bf16"), ("softmax", "f16")])
def test_real_examples_compile(tmp_path, arch, example, dtype):
    _need_real_frontend()
    source = (ROOT / "examples" / f"{example}.tile").read_text()
    cache = Cache(tmp_path / "cache")
    k = compile_source(source, f"{example}.tile", arch, {"DT": dtype}, cache=cache)
    check_manifest(k.manifest, k.hsaco)
    row = get_arch(arch)
    stats = isa_stats(k.asm, k.manifest)
    if example == "gemm":
        assert (stats.mfma if row.is_cdna else stats.wmma) > 0
    assert stats.spills == 0 and stats.scratch_bytes == 0
    assert k.manifest["lds_bytes"] <= row.lds_bytes
    assert k.manifest["constexprs"]["DT"] == dtype
    assert compile_source(source, f"{example}.tile", arch, {"DT": dtype}, cache=cache).from_cache


# B as [K, N]: a dot operand staged through LDS transposed, where assign-layouts picks rows per lane.
KN_GEMM = """kernel kn_gemm(
    a: tensor[f16](M, K),
    b: tensor[f16](K, N),
    c: tensor[f32](M, N),
) grid(cdiv(M, 64), cdiv(N, 128)) waves(4) {
    let rows = program_id(0) * 64 + arange(0, 64);
    let cols = program_id(1) * 128 + arange(0, 128);
    let acc = zeros([64, 128], f32);
    for k0 in range(0, K, 64) {
        let kk = k0 + arange(0, 64);
        let ta = load(a[rows[:, None], kk[None, :]], mask=(rows[:, None] < M) & (kk[None, :] < K), other=0.0);
        let tb = load(b[kk[:, None], cols[None, :]], mask=(kk[:, None] < K) & (cols[None, :] < N), other=0.0);
        acc = dot(ta, tb, acc);
    }
    store(c[rows[:, None], cols[None, :]], acc, mask=(rows[:, None] < M) & (cols[None, :] < N));
}
"""


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_assembly_is_made_on_first_use_and_is_the_code_objects(tmp_path, arch):
    """A compile makes the code object alone; its assembly (a second codegen run) is made when it
    is asked for, from a cache hit too (the cache keeps the optimized IR), and it is the code
    object's own code: the mnemonics of LLVM's .s are those the emulator decodes from the object."""
    _need_real_frontend()
    from _emu_util import asm_mnemonics

    from tiledsl.backends.rocm.emulator.loader import disassembly, load_code_object
    from tiledsl.driver import LazyAssembly

    source, cache = (ROOT / "examples" / "gemm.tile").read_text(), Cache(tmp_path / "cache")
    k = compile_source(source, "gemm.tile", arch, {"DT": "f16"}, cache=cache)
    assert isinstance(k.assembly, LazyAssembly) and not k.assembly.made
    hit = compile_source(source, "gemm.tile", arch, {"DT": "f16"}, cache=cache)
    assert hit.from_cache and isinstance(hit.assembly, LazyAssembly)
    assert hit.asm == k.asm and isinstance(k.assembly, str)
    want = asm_mnemonics(k.asm, k.name)
    assert len(want) > 50 and disassembly(load_code_object(k.hsaco, arch)[k.name])[:len(want)] == want


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_transposed_rows_taken_is_where_the_code_changes(arch):
    """assign-layouts' fact `transposed_rows_taken` is what the driver's fewer-rows retries trust:
    a limit at the rows taken compiles the same code object, one below them another (gfx950
    stores 16-bit operands row-major and transposes in the read: one row, nothing to retry)."""
    _need_real_frontend()
    import tiledsl.driver as drv

    def compile_with(rows: int) -> tuple[int, bytes]:
        ctx, hsaco, _ = drv._compile_once(get_arch(arch), CompileOptions.make(arch, {}, transposed_rows=rows),
                                          "kn_gemm.tile", {}, KN_GEMM, "tile")
        return ctx.facts["transposed_rows_taken"], hsaco

    taken, code = compile_with(4)
    assert taken > 1 or arch == "gfx950"
    assert compile_with(taken)[1] == code
    if taken > 1:
        assert compile_with(taken // 2)[1] != code


def test_real_gemm_grid_and_dumps(tmp_path):
    _need_real_frontend()
    source = (ROOT / "examples" / "gemm.tile").read_text()
    k = _compile(source=source, filename="gemm.tile", dump=tmp_path, defines={"BLOCK_M": "64"})
    assert eval_grid(k.manifest["grid"], {"M": 1000, "N": 128, "BATCH": 2, "K": 64}) == (16, 2, 2)
    stage_files = [p.name for p in tmp_path.iterdir() if re.match(r"gemm\.gfx942\.\d\d-", p.name)]
    assert len(stage_files) == 10, stage_files  # per-pass dumps of the tile passes may sit beside them
    with pytest.raises(SourceError):
        _compile(source=source, filename="gemm.tile", defines={"NOT_A_PARAM": "1"})


@pytest.mark.parametrize("arch,vgprs,lds,waves,want", [
    ("gfx942", 416, 0, 4, 1),  # .vgpr_count 416 = 256 arch + 160 AGPRs: the unified total, counted once
    ("gfx942", 512, 0, 4, 1),
    ("gfx942", 256, 0, 4, 2),
    ("gfx942", 128, 0, 4, 4),
    ("gfx90a", 64, 0, 4, 8),
    ("gfx942", 128, 40 * 1024, 4, 1),  # one 40 KiB workgroup per CU: 4 waves over 4 SIMDs
    ("gfx1100", 256, 0, 8, 6),  # 1536-entry file, granules of 16 on wave32
    ("gfx1201", 96, 0, 8, 16),
])
def test_occupancy(arch: str, vgprs: int, lds: int, waves: int, want: int) -> None:
    assert get_arch(arch).occupancy(vgprs, lds, waves) == want
