"""The arch table: every arch-dependent fact lives here, one row per target.

Code asks this table (``arch.wave_size``, ``arch.matrix_op(dtype)``, ``arch.lds_bytes``) and never
parses arch strings. Sources: AMD CDNA2/CDNA3/CDNA4 and RDNA3/RDNA4 ISA manuals, LLVM AMDGPUUsage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tiledsl.errors import TileError


@dataclass(frozen=True)
class MatrixOp:
    """One MFMA/WMMA instruction: D[MxN] f32 += A[MxK] * B[KxN].

    ``kind`` selects the per-lane operand layout (see backends/rocm/fragments.py):
    "mfma" (CDNA), "wmma_gfx11" (A/B replicated in both lane halves), "wmma_gfx12".
    ``k_per_lane`` is how many K elements of A (and B) one lane holds.
    """

    kind: str
    m: int
    n: int
    k: int
    in_dtype: str
    k_per_lane: int
    isa_name: str

    @property
    def in_bits(self) -> int:
        """Bits of one A/B element (16 for f16/bf16, 8 for the 8-bit floats)."""
        return 8 if self.in_dtype.startswith("f8") else 16


@dataclass(frozen=True, kw_only=True)
class Timing:
    """The emulator's timing model parameters (backends/rocm/emulator/timing.py; docs/profile.md
    gives each one's source). Cycles are at `clock_ghz`. The matrix pipe's cycles per instruction
    are not listed: they follow from the row's published peak (see timing.matrix_cycles), which is
    the calibration a pure MFMA/WMMA loop must reproduce."""

    clock_ghz: float  # peak engine clock of the product
    hbm_tb_s: float  # memory bandwidth of the product (all of its dies)
    issue_interval: int  # cycles between one SIMD's issue opportunities (CDNA: 4 SIMDs take turns)
    valu_cycles: int  # cycles one VALU instruction holds the SIMD's vector ALU (wave64 on 16 lanes: 4)
    trans_cycles: int  # the same for a transcendental (exp, log, rcp, sqrt, sin, cos)
    valu_latency: int  # result latency a dependent VALU waits for (RDNA's s_delay_alu VALU_DEP_n)
    trans_latency: int  # the same after a transcendental (TRANS32_DEP_n)
    matrix_shares_valu: bool  # WMMA runs on the vector ALU (RDNA); MFMA has its own pipe (CDNA)
    lds_bytes_per_clk: int  # LDS bandwidth of one CU (banks x 4 bytes)
    lds_latency: int  # LDS instruction issue to data returned, without conflicts
    vmem_bytes_per_clk: int  # vector memory (L1/L0) bandwidth of one CU
    vmem_line_bytes: int  # cache line: an access costs the distinct lines its lanes touch
    vmem_latency: int  # vector load issue to data returned, an L2 hit
    smem_latency: int  # scalar load issue to data returned, a scalar cache hit
    branch_taken_cycles: int  # a taken branch refetches: the wave issues nothing for this long
    barrier_cycles: int  # last wave arriving at s_barrier to the workgroup's release
    workgroup_launch_cycles: int  # a free slot on a CU to the new workgroup's first instruction
    dies: int = 1  # peak_tflops_f16 and hbm_tb_s cover `dies` x compute_units (MI250X: 2 GCDs)
    fp8_rate: float = 2.0  # 8-bit matrix ops per 16-bit one (CDNA3/4, RDNA4)


@dataclass(frozen=True, kw_only=True)
class Arch:
    name: str
    family: str  # "CDNA2", "CDNA3", "CDNA4", "RDNA3", "RDNA4"
    isa_generation: str  # instruction encodings: "gfx9" (CDNA), "gfx11", "gfx12"
    elf_mach: int  # EF_AMDGPU_MACH_* in a code object's e_flags (LLVM AMDGPUUsage)
    wave_size: int
    lds_bytes: int
    vgprs_per_lane: int  # VGPRs a single wave may address (CDNA: the unified file, AGPRs included)
    agprs_per_lane: int  # of those, accumulation VGPRs (CDNA only; 0 on RDNA)
    sgprs: int
    simds_per_cu: int
    max_waves_per_simd: int
    vgpr_file_per_simd: int  # VGPRs per lane in one SIMD's file (occupancy)
    fp8_flavour: str | None  # "fnuz", "ocp" or None
    peak_tflops_f16: float
    product: str
    llvm_features: str
    matrix_ops: tuple[MatrixOp, ...] = field(default=())
    timing: Timing | None = None  # the timing model's parameters (None: the arch is not modeled)
    compute_units: int = 0  # of the product named above (one GCD of an MI250X): the split-KV heuristic
    # global_atomic_add_f32 ignores the denormal mode and flushes f32 denormals (MI200: LLVM's
    # "global FP atomics have a hardcoded FP mode"); later archs honour the mode.
    atomic_fadd_flushes_denormals: bool = False
    # Flat scratch instructions take VADDR only when their SVE bit is set (gfx940+ and gfx10+, where
    # `scratch_store_dword off, v1, off offset:N` addresses by the immediate alone); gfx90a has no
    # SVE bit and takes VADDR whenever SADDR is off.
    scratch_sve: bool = True
    # LDS reads that transpose 16-bit (and 8-bit) blocks across each 16 lanes into the MFMA operand
    # layout (CDNA4 ISA 11.4, ds_read_b64_tr_b16): a B operand [K, N] reads straight from a tile
    # stored row-major (N contiguous), where other archs store it column by column.
    lds_transpose_read: bool = False
    # Packed f32 arithmetic (v_pk_fma_f32, v_pk_mul_f32, v_pk_add_f32: two f32 values per
    # instruction; CDNA2 on). RDNA has none: it dual-issues pairs of VOPD operations instead.
    packed_f32: bool = False
    # v_permlane32_swap (CDNA4 ISA): swaps a VGPR's upper 32 lanes with another's lower 32, so a
    # reduction across the halves of a wave64 takes one swap and one op (lower-to-gpu).
    permlane32_swap: bool = False
    # v_cvt_pk_bf16_f32 (CDNA4 ISA): two f32 values to bf16, rounded to nearest even, in one
    # instruction. Elsewhere LLVM expands the rounding (about 4.5 VALU per value), which a cast
    # with approx=true replaces by ties-away rounding on the bits (1.5; tile.round_bf16).
    bf16_convert: bool = False

    @property
    def m0_sgpr(self) -> int:
        """The operand encoding of M0 (gfx9: 124; gfx10+ moved it to 125 and made 124 NULL)."""
        return 124 if self.isa_generation == "gfx9" else 125

    @property
    def null_sgpr(self) -> int:
        """The operand encoding of the NULL register (-1: none on gfx9)."""
        return -1 if self.isa_generation == "gfx9" else 124

    @property
    def buffer_word3(self) -> int:
        """Word 3 of a raw (untyped, unswizzled) buffer descriptor: a valid 32-bit data format and,
        on gfx11+, the raw out-of-range mode (the values AMD's Composable Kernel uses; the format
        and OOB_SELECT fields moved between generations). The emulator reads the bits it models."""
        return 0x0002_0000 if self.isa_generation == "gfx9" else 0x3100_4000

    @property
    def buffer_offset_max(self) -> int:
        """The largest immediate offset of a buffer instruction (12 bits unsigned; gfx12's VBUFFER
        encoding has 24 bits, of which LLVM uses the non-negative half)."""
        return 0x7F_FFFF if self.isa_generation == "gfx12" else 0xFFF

    @property
    def permlanex16(self) -> bool:
        """v_permlanex16_b32 (RDNA ISA guides, every RDNA generation): each lane reads a chosen lane
        of the other 16 in its row of 32."""
        return not self.is_cdna

    @property
    def is_cdna(self) -> bool:
        return self.family.startswith("CDNA")

    def matrix_ops_for(self, dtype: str) -> tuple[MatrixOp, ...]:
        return tuple(op for op in self.matrix_ops if op.in_dtype == dtype)

    def supports_dot(self, dtype: str) -> bool:
        return bool(self.matrix_ops_for(dtype))

    def matrix_op(self, dtype: str, m: int | None = None) -> MatrixOp:
        """The instruction for `dtype`; with `m`, the one of that M size."""
        ops = [op for op in self.matrix_ops_for(dtype) if m is None or op.m == m]
        if not ops:
            raise TileError(f"{self.name} has no matrix instruction for {dtype}"
                            + (f" with M={m}" if m else ""))
        return ops[0]

    def occupancy(self, vgprs: int, lds_bytes: int = 0, waves_per_group: int = 1) -> int:
        """Waves per SIMD this kernel can keep resident (register and LDS limits). vgprs is the code
        object's `.vgpr_count`: on CDNA (gfx90a on) that is already the unified total, arch VGPRs
        rounded up to 4 plus AGPRs (LLVM's getTotalNumVGPRs), so AGPRs are not added again."""
        if self.is_cdna:
            used = _round_up(max(vgprs, 1), 8)  # one unified file, granules of 8
        else:
            used = _round_up(max(vgprs, 1), 16 if self.wave_size == 32 else 8)
        by_regs = self.vgpr_file_per_simd // used
        waves = min(self.max_waves_per_simd, by_regs)
        if lds_bytes:
            groups_per_cu = self.lds_bytes // lds_bytes if lds_bytes <= self.lds_bytes else 0
            waves = min(waves, groups_per_cu * waves_per_group // self.simds_per_cu)
        return max(waves, 0)

    def workgroups_per_cu(self, vgprs: int, lds_bytes: int, waves_per_group: int) -> int:
        """Workgroups one compute unit keeps resident: its SIMDs' waves at this kernel's occupancy
        (at least one workgroup), within the CU's LDS."""
        groups = max(self.occupancy(vgprs, lds_bytes, waves_per_group) * self.simds_per_cu // waves_per_group, 1)
        return min(groups, self.lds_bytes // lds_bytes) if lds_bytes else groups


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _cdna_ops(k32: int, k16: int, names: dict[str, tuple[str, str]]) -> tuple[MatrixOp, ...]:
    """The 32x32xk32 and 16x16xk16 MFMAs of each input dtype: every lane of the wave64 holds
    m * k / 64 elements of A (and of B)."""
    ops = []
    for dt, (n32, n16) in names.items():
        ops.append(MatrixOp("mfma", 32, 32, k32, dt, k_per_lane=32 * k32 // 64, isa_name=n32))
        ops.append(MatrixOp("mfma", 16, 16, k16, dt, k_per_lane=16 * k16 // 64, isa_name=n16))
    return tuple(ops)


# The fp8 MFMAs of CDNA3 (FNUZ operands) and CDNA4 (the same instructions read OCP operands).
# Operands of one dot share one dtype, so the mixed fp8_bf8/bf8_fp8 forms are not listed.
_CDNA_FP8 = {
    "f8e4m3": ("v_mfma_f32_32x32x16_fp8_fp8", "v_mfma_f32_16x16x32_fp8_fp8"),
    "f8e5m2": ("v_mfma_f32_32x32x16_bf8_bf8", "v_mfma_f32_16x16x32_bf8_bf8"),
}


# CDNA4's double-K 8-bit MFMAs (the f8f6f4 family: the operand formats are fields of the
# instruction, fp8 and bf8 here); listed before the CDNA3 forms, which serve dots with less K.
_CDNA4_F8F6F4 = {dt: ("v_mfma_f32_32x32x64_f8f6f4", "v_mfma_f32_16x16x128_f8f6f4") for dt in ("f8e4m3", "f8e5m2")}


# Timing parameters (docs/profile.md lists the source of each; latencies are estimates, see there).
_CDNA_TIMING = {"issue_interval": 4, "valu_cycles": 4, "trans_cycles": 16, "valu_latency": 0, "trans_latency": 0,
                "matrix_shares_valu": False, "lds_latency": 64, "vmem_bytes_per_clk": 64, "vmem_latency": 500,
                "smem_latency": 60, "branch_taken_cycles": 16, "barrier_cycles": 16, "workgroup_launch_cycles": 200}
_RDNA_TIMING = {"issue_interval": 1, "valu_cycles": 1, "trans_cycles": 4, "valu_latency": 5, "trans_latency": 10,
                "matrix_shares_valu": True, "lds_bytes_per_clk": 128, "lds_latency": 40, "vmem_bytes_per_clk": 64,
                "vmem_line_bytes": 128, "vmem_latency": 300, "smem_latency": 40, "branch_taken_cycles": 8,
                "barrier_cycles": 8, "workgroup_launch_cycles": 200}

_CDNA = {"isa_generation": "gfx9", "wave_size": 64, "vgprs_per_lane": 512, "agprs_per_lane": 256, "sgprs": 102,
         "simds_per_cu": 4, "max_waves_per_simd": 8, "vgpr_file_per_simd": 512, "llvm_features": "",
         "packed_f32": True}
_RDNA = {"wave_size": 32, "lds_bytes": 64 * 1024, "vgprs_per_lane": 256, "agprs_per_lane": 0, "sgprs": 106,
         "simds_per_cu": 2, "max_waves_per_simd": 16, "vgpr_file_per_simd": 1536, "llvm_features": "+wavefrontsize32"}

ARCHS: dict[str, Arch] = {
    "gfx90a": Arch(
        name="gfx90a", family="CDNA2", elf_mach=0x3F, lds_bytes=64 * 1024, fp8_flavour=None, peak_tflops_f16=383.0,
        product="MI200 (MI250X)", compute_units=110,
        timing=Timing(clock_ghz=1.7, hbm_tb_s=3.2, dies=2, lds_bytes_per_clk=128, vmem_line_bytes=64, fp8_rate=0.0,
                      **_CDNA_TIMING), atomic_fadd_flushes_denormals=True, scratch_sve=False, **_CDNA,
        matrix_ops=_cdna_ops(8, 16, {
            "f16": ("v_mfma_f32_32x32x8f16", "v_mfma_f32_16x16x16f16"),
            "bf16": ("v_mfma_f32_32x32x8bf16_1k", "v_mfma_f32_16x16x16bf16_1k"),
        })),
    "gfx942": Arch(
        name="gfx942", family="CDNA3", elf_mach=0x4C, lds_bytes=64 * 1024, fp8_flavour="fnuz", peak_tflops_f16=1307.0,
        product="MI300X", compute_units=304,
        timing=Timing(clock_ghz=2.1, hbm_tb_s=5.3, lds_bytes_per_clk=128, vmem_line_bytes=128, **_CDNA_TIMING), **_CDNA,
        matrix_ops=_cdna_ops(8, 16, {
            "f16": ("v_mfma_f32_32x32x8_f16", "v_mfma_f32_16x16x16_f16"),
            "bf16": ("v_mfma_f32_32x32x8_bf16", "v_mfma_f32_16x16x16_bf16"),
        }) + _cdna_ops(16, 32, _CDNA_FP8)),
    "gfx950": Arch(
        name="gfx950", family="CDNA4", elf_mach=0x4F, lds_bytes=160 * 1024, fp8_flavour="ocp", peak_tflops_f16=2500.0,
        product="MI355X", compute_units=256, lds_transpose_read=True, permlane32_swap=True,
        bf16_convert=True,
        timing=Timing(clock_ghz=2.4, hbm_tb_s=8.0, lds_bytes_per_clk=256, vmem_line_bytes=128, **_CDNA_TIMING), **_CDNA,
        matrix_ops=_cdna_ops(16, 32, {
            "f16": ("v_mfma_f32_32x32x16_f16", "v_mfma_f32_16x16x32_f16"),
            "bf16": ("v_mfma_f32_32x32x16_bf16", "v_mfma_f32_16x16x32_bf16"),
        }) + _cdna_ops(64, 128, _CDNA4_F8F6F4) + _cdna_ops(16, 32, _CDNA_FP8)),
    "gfx1100": Arch(
        name="gfx1100", family="RDNA3", isa_generation="gfx11", elf_mach=0x41, fp8_flavour=None,
        peak_tflops_f16=123.0, product="RX 7900 XTX", compute_units=96,
        timing=Timing(clock_ghz=2.5, hbm_tb_s=0.96, fp8_rate=0.0, **_RDNA_TIMING), **_RDNA,
        matrix_ops=(
            MatrixOp("wmma_gfx11", 16, 16, 16, "f16", 16, "v_wmma_f32_16x16x16_f16"),
            MatrixOp("wmma_gfx11", 16, 16, 16, "bf16", 16, "v_wmma_f32_16x16x16_bf16"),
        )),
    "gfx1201": Arch(
        name="gfx1201", family="RDNA4", isa_generation="gfx12", elf_mach=0x4E, fp8_flavour="ocp",
        peak_tflops_f16=195.0, product="RX 9070 XT", compute_units=64,
        timing=Timing(clock_ghz=2.97, hbm_tb_s=0.64, **_RDNA_TIMING), **_RDNA,
        matrix_ops=(
            MatrixOp("wmma_gfx12", 16, 16, 16, "f16", 8, "v_wmma_f32_16x16x16_f16"),
            MatrixOp("wmma_gfx12", 16, 16, 16, "bf16", 8, "v_wmma_f32_16x16x16_bf16"),
            MatrixOp("wmma_gfx12", 16, 16, 16, "f8e4m3", 8, "v_wmma_f32_16x16x16_fp8_fp8"),
            MatrixOp("wmma_gfx12", 16, 16, 16, "f8e5m2", 8, "v_wmma_f32_16x16x16_bf8_bf8"),
        )),
}

ARCH_NAMES: tuple[str, ...] = tuple(ARCHS)


def get_arch(name: str) -> Arch:
    """The row for `name`, or a clear error listing the supported archs."""
    if isinstance(name, str) and name in ARCHS:
        return ARCHS[name]
    raise TileError(f"unknown arch {name!r}: expected one of {', '.join(ARCH_NAMES)}")
