"""Compile options: one frozen object read at the edge (CLI/API) and passed down every stage.

Its `cache_key()` is part of the content-addressed cache key, so every option that can change the
generated code must live here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields

# LLVM's AMDGPU scheduling strategies (GCNSchedStrategy / GCNIterativeScheduler in LLVM 22) a kernel
# may ask for; "" is LLVM's default (max-occupancy).
SCHEDULES = ("", "max-ilp", "max-memory-clause", "iterative-ilp", "iterative-minreg", "iterative-maxocc")


# Options the front end (parser, checker, emitter: tiledsl/lang, tiledsl/ir) never reads, only the
# tile passes and LLVM: a driver retry that changes only these reuses the front end's tile.mlir
# (driver.run_stages). tests/test_driver.py checks that the names do not occur there.
BACKEND_ONLY_OPTIONS = ("lds_spread", "lds_swizzle", "transposed_rows", "swap_halves", "tree_sums", "fold_laid_out",
                        "resident_operands", "schedule", "interleave", "allow_spills", "spills_last_resort",
                        "dump_ir_dir", "failure_dir")


@dataclass(frozen=True)
class CompileOptions:
    arch: str
    constexprs: tuple[tuple[str, str], ...] = ()  # -D NAME=VALUE pairs as given, sorted
    dump_ir_dir: str | None = field(default=None, compare=False)  # not part of the key
    # Where a failing stage saves its input IR (a new folder per failure; default: the system temp
    # directory). The CLI and the library put it under the cache directory. Not part of the key.
    failure_dir: str | None = field(default=None, compare=False)
    lds_padding: bool = True  # pad LDS rows to avoid bank conflicts in layout conversions
    # Stagings stored transposed may swizzle their rows' 16-byte chunks instead of padding them,
    # where that takes fewer LDS cycles (stage-lds: _cheapest_transposed). Each flip a lane's
    # accesses use keeps a base address in a register: the driver compiles again without while a
    # kernel spills with them.
    lds_swizzle: bool = True
    # Most rows per lane of a 16/8-bit load that a dot takes as its B operand [K, N] on CDNA (staged
    # through LDS transposed): stored that many elements at once. assign-layouts takes the count up
    # to this whose stores meet the fewest LDS bank conflicts per byte. The driver compiles again
    # with half as many (down to 1) while a kernel spills with more (the extra row addresses take
    # registers).
    transposed_rows: int = 4
    allow_spills: bool = False  # accept a kernel that spills registers to scratch (normally an error)
    # Accept a kernel that still spills after every retry the driver makes for one that must not
    # (allow_spills skips the costly ones for a kernel expected to spill many): the library's
    # variants, whose callers cannot choose the tile.
    spills_last_resort: bool = False
    # Every tensor's last dim has stride 1 (a compile-time constant, checked by the launcher): the
    # condition for vector loads and stores. False passes that stride at run time like the others.
    unit_last_stride: bool = True
    # (tensor, unit): that tensor's passed strides are multiples of `unit` elements (checked by the
    # launcher, which passes stride / unit), so its row starts are provably aligned for vectors.
    stride_units: tuple[tuple[str, int], ...] = ()
    # (shape symbol, unit): that symbol is a multiple of `unit` (checked by the launcher, which
    # passes size / unit), so masks like `arange(0, N) < D` are uniform over vectors of `unit`.
    dim_units: tuple[tuple[str, int], ...] = ()
    # Tensors whose byte span may exceed 2 GiB: always addressed with 64-bit global instructions.
    # A masked access to any other tensor argument uses buffer instructions (masked-off lanes
    # read zero or write nothing, without a branch), whose 32-bit byte offsets reach 2 GiB: the
    # manifest marks those tensors and the launchers refuse a larger one.
    large_tensors: tuple[str, ...] = ()
    # Every tensor's rows lie apart: each dim's stride is above its last dim's span, (n_last - 1) *
    # stride_last (checked by the launcher for the dims the manifest lists as `row_bounds`). A mask
    # that bounds a dim's index (`rows < n`, rows = first + arange) then becomes the bounds of a
    # buffer descriptor over the tensor (tile.view, tiledsl/ir/row_view.py): rows past the bound
    # read 0 or are not written with no per-lane select, and the offsets do not move with `first`.
    # False keeps such masks per lane, for tensors whose rows overlap (a broadcast with stride 0);
    # so does unit_last_stride=False (--strided: any strides).
    disjoint_rows: bool = True
    # A view's offsets split per vector (passes/offset_deltas.py): the lane's vectors share one
    # VGPR offset and each one's distance from the first (multiples of strides and shapes) goes
    # into its SOFFSET, NUM_RECORDS lowered to match: a few scalar instructions per vector where
    # LLVM holds one VGPR per vector across a loop (loop-invariant offsets). Off by default: the
    # forward's rows model slower with it (gfx950 hdim 128 1328.8 -> 1222.4 TFLOP/s), not being
    # short of registers.
    split_view_offsets: bool = False
    # A layout conversion that moves values only between lanes 16 apart (gfx11's P tile, from the
    # WMMA accumulator to an operand) exchanges registers with v_permlanex16 on RDNA instead of
    # an LDS round trip (passes/lane_exchange.py). Off: the timing model finds gfx1100's forward
    # level with the wave-private staging below (4 cells within 3 %, either way) and its backward
    # slower (hdim 64 63.8 -> 60.8 TFLOP/s).
    lane_exchange: bool = False
    # With lane_exchange: the scores' keys relabelled so that each word of the exchanged operand
    # is one whole word of the accumulator's, moved by one ds_swizzle_b32 on the LDS crossbar
    # instead of a v_permlanex16_b32 and a v_perm_b32 on the vector ALU that gfx11's WMMAs share
    # (lane_exchange.word_relabelling). The config rows choose: the model finds the full rows
    # faster and the LDS-bound masked rows slower.
    swizzle_exchange: bool = False
    # A stored word of two 16-bit values from two other words built by one v_perm_b32
    # (lower_memory._pack_stored), where true16 codegen (gfx11) would move the halves: three
    # v_mov_b16 per two words of gfx11's V tile, transposed on its way to LDS. The config rows
    # choose: the model finds gfx1100's hdim 64 rows faster and its hdim 128 rows slower.
    pack_by_perm: bool = False
    # A layout conversion whose lanes read back only what their own wave stored (stage-lds:
    # _wave_private; gfx11's P tile) has a wave fence after its LDS store instead of a workgroup
    # barrier. False is for measuring the difference.
    wave_private_stagings: bool = True
    # Masked accesses through buffer descriptors (above). The driver compiles again with False
    # while a kernel spills a few registers: with branches, LLVM keeps fewer loads in flight.
    buffer_masks: bool = True
    # LDS stagings placed one after another in the arena, each store behind a barrier only where it
    # overwrites bytes read since the last one (stage-lds). The driver compiles again with False
    # when a kernel spills VGPRs: barriers also keep LLVM from hoisting loads, which holds registers.
    lds_spread: bool = True
    # With lds_spread: the arena grows to a loop's stagings together, where that costs no workgroup
    # per compute unit, so that each has bytes of its own and fewer need a barrier before their
    # store in every iteration (stage-lds, _placement: gfx1201's hdim-128 forward goes from four
    # barriers per key block to two). The timing model finds it faster in some kernels and slower
    # in others, where LLVM then schedules the loop's loads worse (gfx942's hdim-64 causal backward
    # 319.4 -> 293.4 TFLOP/s), so the config rows choose (FmhaConfig.loop_arena).
    loop_arena: bool = False
    # With lds_spread: a loop's later stagings whose tiles are at hand at its first staging's store
    # (loop-carried look-ahead tiles) store there too, before its barrier, and read where they are
    # without a barrier of their own (stage-lds, _mergeable_stores); the arena grows for them as
    # with loop_arena. The backward's key walk: one barrier for Q and dO in both orientations
    # instead of four. The config rows choose (BwdConfig.merge_stores).
    merge_stores: bool = False
    # On archs that transpose in LDS reads (gfx950, Arch.lds_transpose_read): a B operand [K, N]
    # staged from a row-major tile is stored row-major and read with transpose reads, instead of
    # stored column by column (stage-lds). False is for measuring the difference.
    transpose_reads: bool = True
    # fold-scalars-laid-out: scalar terms of index sums move to the tile with the fewest registers
    # per lane once layouts are known (a row vector rather than a key vector in gfx12's WMMA
    # accumulator). The driver compiles again with False when a kernel spills: the moved sums can
    # hold more registers live across the loop (gfx1100's causal hdim 128 backward, a small grid).
    fold_laid_out: bool = True
    # A loop-invariant conversion whose result takes more registers per lane than its source (a
    # gfx11 WMMA operand holds every value twice: the forward's Q tile) is done once before the
    # loop and held in registers; True keeps such tiles in LDS instead, read where they are used
    # (hoist-conversions). The driver compiles again with True where the registers cost the kernel
    # waves per SIMD, or spill.
    resident_operands: bool = False
    # Reductions across the halves of a wave64 with one v_permlane32_swap (where the arch has it,
    # Arch.permlane32_swap), and across the rows of 16 of a wave32 with one v_permlanex16_b32
    # (Arch.permlanex16), instead of a shuffle (a ds_bpermute on RDNA). The driver compiles again
    # with False while a kernel spills a few registers: at the 256-register edge the allocation can
    # tip either way (gfx950's 8-wave forward row with group mode, a sink and a soft-cap spilled 1
    # VGPR).
    swap_halves: bool = True
    # A lane's f32 sum (a reduction's first step, lower-to-gpu) as a tree of adds rather than a
    # chain, on archs without packed f32 adds (RDNA): the tree's independent adds pair in dual-issue
    # instructions, where a chain's each wait for the one before. The timing model finds gfx1201's
    # forward faster with it and gfx1100's slower, so the config rows choose (FmhaConfig.tree_sums).
    tree_sums: bool = False
    # LLVM's machine scheduler for the kernel ("amdgpu-sched-strategy"; "" keeps LLVM's default).
    # "iterative-ilp" keeps more LDS reads in flight ahead of the matrix instructions that use them,
    # which the timing model finds faster in some tile rows and slower in others, so the config rows
    # choose (FmhaConfig.schedule, benchmarks/fmha_tune.py --schedule).
    schedule: str = ""
    # LLVM's IGroupLP small-GEMM strategy (llvm.amdgcn.iglp.opt(0)) in the block that holds each
    # loop's first dot (lower-to-gpu): the scheduler places LDS accesses and matrix instructions in
    # turn, two to one, instead of in runs. The timing model finds the CDNA forward 1-4 % faster in
    # most tile rows and slower in some (gfx950's causal hdim 128 row: 13 %), and RDNA slower, so
    # the config rows choose (FmhaConfig.interleave).
    interleave: bool = False
    # A loop-carried tile multiplied by a broadcast factor (online softmax's rescale of its
    # accumulator, `acc * alpha[:, None]`) is multiplied only in the waves where some factor is not
    # exactly 1 (lower-to-gpu, rule_mulf): a compare per factor register and a branch uniform over
    # the wave. It pays where the factors are usually 1 (a softmax that moves its running max only
    # when it grows by more than a margin: fmha_fwd.tile's LAZY) and splits the loop's scheduling
    # region there, so the config rows choose (FmhaConfig.lazy_rescale).
    skip_unit_scales: bool = False
    # Set by the driver only: a kernel's occupancy(N) target lowered to this when N waves per SIMD
    # would spill or cannot be reached (the driver compiles again with N-1, ... 0 = no target).
    occupancy_cap: int | None = None

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: expected one of {', '.join(map(repr, SCHEDULES))}, got {self.schedule!r}")

    def stride_unit(self, tensor: str) -> int:
        return dict(self.stride_units).get(tensor, 1)

    def dim_unit(self, symbol: str) -> int:
        return dict(self.dim_units).get(symbol, 1)

    def cache_key(self) -> str:
        data = {k: v for k, v in asdict(self).items() if k not in ("dump_ir_dir", "failure_dir")}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def front_end_fields(self) -> tuple[tuple[str, object], ...]:
        """(name, value) of every option the parser, checker and emitter may read: all but
        BACKEND_ONLY_OPTIONS (the driver's key for reusing their tile.mlir in a retry)."""
        return tuple((f.name, getattr(self, f.name)) for f in fields(self) if f.name not in BACKEND_ONLY_OPTIONS)

    @staticmethod
    def make(arch: str, constexprs: dict[str, object] | None = None, **kw: object) -> CompileOptions:
        pairs = tuple(sorted((k, define_text(v)) for k, v in (constexprs or {}).items()))
        return CompileOptions(arch=arch, constexprs=pairs, **kw)  # type: ignore[arg-type]


def define_text(value: object) -> str:
    """A -D value as text: bools as true/false (the language's spelling), the rest as str()."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
