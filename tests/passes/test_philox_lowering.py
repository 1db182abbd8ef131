"""passes/philox.py and the axis facts it relies on: which philox_byte calls share one Philox call
per 4 consecutive j (counted in the lowered gpu-dialect IR, before LLVM), and the divisibility the
axis analysis gives a loop's induction variable. The bits themselves are checked on the emulator
(tests/test_philox.py)."""

from __future__ import annotations

import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.driver import STAGE_NAMES, START_EXTENSIONS, StageContext, run_stages
from tiledsl.options import CompileOptions

pytestmark = pytest.mark.passes

KERNEL = """kernel k(out: tensor[i32](R, K), s0: i32, s1: i32, start: i32) grid(1) waves(4) {{
    let rows = arange(0, 64);
    let keys = arange(0, 32);
    for n0 in range({lb}, K, {step}) {{
        let js = {j};
        store(out[rows[:, None], js[None, :]], philox_byte(s0, s1, {use}, {row}, 7, 0));
    }}
}}
"""


def lowered(arch: str, **fill: str) -> str:
    source = KERNEL.format(**{"lb": "0", "step": "32", "j": "n0 + keys", "use": "js[None, :]",
                              "row": "rows[:, None] + 1", **fill})
    ctx = StageContext(get_arch(arch), CompileOptions.make(arch, {}), "k.tile", {}, prefix="test", source=source)
    return run_stages(ctx, source, START_EXTENSIONS["tile"], "tile", stop=STAGE_NAMES.index("gpu.mlir") + 1)


def philox_calls(ir_text: str) -> int:
    """Philox calls in the lowered IR: 20 high-word multiplies each (10 rounds, two per round)."""
    n = ir_text.count("arith.mului_extended")
    assert n % 20 == 0, n
    return n // 20


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_aligned_keys_share_one_call_per_group(arch: str) -> None:
    """Rows not aligned (row + 1): a call per 4 keys. Rows aligned too: at most that."""
    elements = 64 * 32 // (4 * get_arch(arch).wave_size)  # per lane
    assert philox_calls(lowered(arch)) == elements // 4
    assert philox_calls(lowered(arch, row="rows[:, None]")) <= elements // 4


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_aligned_rows_share_one_call_per_group(arch: str) -> None:
    """Keys not aligned, rows aligned, in a [keys, rows] tile as the backward draws them: shared
    wherever a lane holds 4 consecutive rows (the blocked layout here gives whole groups)."""
    elements = 64 * 32 // (4 * get_arch(arch).wave_size)
    transposed = KERNEL.replace("out[rows[:, None], js[None, :]]", "out[js[:, None], rows[None, :]]") \
        .replace("tensor[i32](R, K)", "tensor[i32](K, R)")
    source = transposed.format(lb="0", step="32", j="n0 + keys", use="js[:, None] + 1", row="rows[None, :]")
    ctx = StageContext(get_arch(arch), CompileOptions.make(arch, {}), "k.tile", {}, prefix="test", source=source)
    calls = philox_calls(run_stages(ctx, source, START_EXTENSIONS["tile"], "tile",
                                    stop=STAGE_NAMES.index("gpu.mlir") + 1))
    assert calls == elements // 4


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
@pytest.mark.parametrize("fill", [
    {"use": "js[None, :] + 1"},        # not aligned to 4
    {"lb": "start"},                    # a loop start the compiler knows nothing about
    {"step": "34"},                     # a step that is not a multiple of 4
    {"use": "js[None, :] + rows[:, None]"},  # j varies along both axes
])
def test_unprovable_groups_fall_back_to_a_call_per_element(arch: str, fill: dict[str, str]) -> None:
    elements = 64 * 32 // (4 * get_arch(arch).wave_size)
    assert philox_calls(lowered(arch, **fill)) == elements


@pytest.mark.parametrize("arch", ["gfx942"])
def test_loop_start_divisibility_flows_into_the_induction_variable(arch: str) -> None:
    # start // 8 * 8 is a multiple of 8 and the step 32 keeps it so: groups of 4 are provable.
    elements = 64 * 32 // (4 * get_arch(arch).wave_size)
    assert philox_calls(lowered(arch, lb="start // 8 * 8")) == elements // 4
