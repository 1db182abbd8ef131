"""Row masks as buffer bounds (tiledsl/ir/row_view.py, CompileOptions.disjoint_rows): a tile access
whose mask bounds one dim's rows goes through a `tile.view`, a buffer descriptor whose base moves
to the rows' start and whose NUM_RECORDS ends at the bound. Each form runs on the emulator against
numpy on every arch, with the manifest saying which dims the variant bounds, and the launchers
(Python here, C in tests/test_c_runtime.py) refusing a tensor whose rows overlap for a variant that
bounds them, which the variant without views accepts.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.driver import compile_source
from tiledsl.launcher import launch, rows_apart
from tiledsl.options import CompileOptions

pytestmark = pytest.mark.emulator

KERNEL = Path(__file__).resolve().parent / "kernels" / "row_bounds.tile"
B, S, H, D = 2, 150, 3, 40  # S: two whole blocks of 64 and a partial one


def _compile(arch: str, form: str, disjoint: bool = True):
    options = CompileOptions.make(arch, disjoint_rows=disjoint)
    return compile_source(KERNEL.read_text(), str(KERNEL), arch, {"FORM": form}, options=options)


def _expected(x: np.ndarray, form: str, n: int) -> np.ndarray:
    t = x.astype(np.float32)
    rows = np.arange(x.shape[1])[None, :, None, None]
    cols = np.arange(x.shape[3])[None, None, None, :]
    if form == "by_cols":
        t = np.where(cols < n, t, 0.0)
    else:
        t = np.where(rows < n, t, 1.0 if form == "fill" else 0.0)
    y = np.full(x.shape, 7.0, np.float32)
    stored = rows < n if form == "plain" else rows < x.shape[1]
    return np.where(stored, 2.0 * t, y).astype(np.float16)


def _bounded(kernel) -> dict[str, list[int]]:
    return {t["name"]: t["row_bounds"] for t in kernel.manifest["tensors"] if t.get("row_bounds")}


VIEWED = {"plain": {"x": [1], "y": [1]}, "flipped": {"x": [1], "y": [1]}, "shifted": {"x": [1], "y": [1]},
          "by_cols": {"x": [1], "y": [1]}, "fill": {"y": [1]}}


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("form", list(VIEWED))
def test_row_masks_read_and_write_what_numpy_does(arch: str, form: str) -> None:
    kernel = _compile(arch, form)
    buffered = {t["name"] for t in kernel.manifest["tensors"] if t["buffer"]}
    # The driver compiles again without buffer accesses where a kernel spills (gfx1201's fill form
    # does, with a select per element): then nothing is bounded by views.
    assert _bounded(kernel) == (VIEWED[form] if buffered == {"x", "y"} else {})
    rng = np.random.default_rng(3)
    x = rng.standard_normal((B, S, H, D)).astype(np.float16)
    for n in (0, 1, 100, S, S + 40):  # nothing, one row, a partial block, all, past the end
        if form != "by_cols" and n > S:
            continue  # a row bound past the tensor's shape reads outside it (undefined)
        y = np.full_like(x, 7.0)
        launch(kernel, x, y, n, device=EmulatorDevice(arch))
        np.testing.assert_array_equal(y, _expected(x, form, n), err_msg=f"n = {n}")


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_row_views_follow_the_strides(arch: str) -> None:
    """bhsd data seen as [B, S, H, D] (rows D apart, heads S * D apart), and rows padded apart."""
    kernel = _compile(arch, "plain")
    rng = np.random.default_rng(4)
    for x, y in (
            (rng.standard_normal((B, H, S, D)).astype(np.float16).transpose(0, 2, 1, 3),
             np.full((B, H, S, D), 7.0, np.float16).transpose(0, 2, 1, 3)),
            (rng.standard_normal((B, S, H, 64)).astype(np.float16)[..., :D],
             np.full((B, S, H, 64), 7.0, np.float16)[..., :D])):
        launch(kernel, x, y, 77, device=EmulatorDevice(arch))
        np.testing.assert_array_equal(y, _expected(x, "plain", 77))


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_overlapping_rows_need_the_variant_without_views(arch: str) -> None:
    rng = np.random.default_rng(5)
    x = np.broadcast_to(rng.standard_normal((B, 1, H, D)).astype(np.float16), (B, S, H, D))  # stride 0 on S
    assert rows_apart(x.shape, [s // 2 for s in x.strides]) == [True, False, True, True]
    with pytest.raises(ValueError, match=r"argument 'x': this kernel variant bounds its dim 1 with a buffer "
                                         r"descriptor, .*stride \(0 elements\) above the last dim's span \(39\).*"
                                         r"CompileOptions\(disjoint_rows=False\)"):
        launch(_compile(arch, "plain"), x, np.zeros((B, S, H, D), np.float16), 5, device=EmulatorDevice(arch))
    general = _compile(arch, "plain", disjoint=False)
    assert _bounded(general) == {}
    y = np.full((B, S, H, D), 7.0, np.float16)
    launch(general, x, y, 100, device=EmulatorDevice(arch))
    np.testing.assert_array_equal(y, _expected(np.ascontiguousarray(x), "plain", 100))


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_a_size_one_row_dim_takes_any_stride(arch: str) -> None:
    """x[:, None] has stride 0 on its size-1 dim: the launcher passes one above the last dim's
    span, which the view's bound needs (index 0 is the only row)."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((B, H, D)).astype(np.float16)[:, None]
    assert x.strides[1] == 0
    y = np.full((B, 1, H, D), 7.0, np.float16)
    launch(_compile(arch, "plain"), x, y, 1, device=EmulatorDevice(arch))
    np.testing.assert_array_equal(y, 2 * x)


VECTORS = Path(__file__).resolve().parent / "kernels" / "view_vectors.tile"


def _load_offset_registers(asm: str) -> set[str]:
    """The VGPR offsets (VADDR) of a kernel's buffer loads."""
    return set(re.findall(r"^\s*buffer_load_\w+ v[\w\[\]:]+, (v\d+), s\[", asm, re.M))


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("reversed_cols", [False, True])
def test_a_lanes_rows_share_one_offset_register(arch: str, reversed_cols: bool) -> None:
    """Each lane loads 8 rows of the 64-row block; the rows' distances from its first go into
    SOFFSET (CompileOptions.split_view_offsets), the rows past the bound still reading 0 and not
    stored, with n cutting a lane's rows anywhere."""
    defines = {"REVERSED": "true" if reversed_cols else "false"}
    kernel = compile_source(VECTORS.read_text(), str(VECTORS), arch, defines,
                            options=CompileOptions.make(arch, split_view_offsets=True))
    if not reversed_cols:
        assert len(_load_offset_registers(kernel.asm)) == 1
        whole = compile_source(VECTORS.read_text(), str(VECTORS), arch, defines, options=CompileOptions.make(arch))
        assert len(_load_offset_registers(whole.asm)) > 1
    rng = np.random.default_rng(7)
    x = rng.standard_normal((150, 64)).astype(np.float16)
    for n in (0, 5, 77, 150):
        y = np.full_like(x, 7.0)
        launch(kernel, x, y, n, device=EmulatorDevice(arch))
        want = np.where(np.arange(150)[:, None] < n, 2 * (x[:, ::-1] if reversed_cols else x), 7.0)
        np.testing.assert_array_equal(y, want.astype(np.float16), err_msg=f"n = {n}")


TAIL = Path(__file__).resolve().parent / "kernels" / "tail_elements.tile"


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f8e4m3"])
def test_a_bound_inside_a_dword_keeps_its_last_elements(arch: str, dtype: str) -> None:
    """`i < N` over 2-byte or 1-byte elements: the hardware range-checks each dword of a vector
    access whole, so a view ending inside a dword would drop the elements before the bound in that
    dword. Such a bound stays a per-lane mask; one declared a multiple of 4 elements is a view."""
    import ml_dtypes

    from tiledsl.backends.rocm.arch import get_arch

    if dtype.startswith("f8") and get_arch(arch).fp8_flavour is None:
        pytest.skip(f"{arch} has no 8-bit floats")
    f8 = ml_dtypes.float8_e4m3fnuz if get_arch(arch).fp8_flavour == "fnuz" else ml_dtypes.float8_e4m3fn
    np_dtype = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f8e4m3": f8}
    for even in (False, True):
        kernel = compile_source(TAIL.read_text(), str(TAIL), arch, {"DT": dtype, "UNIT": "4" if even else "1"})
        assert bool(_bounded(kernel)) == even
        for n in ((256, 300, 516) if even else (255, 2, 253, 301, 514)):
            x = (np.arange(n) % 50 + 1).astype(np.float32).astype(np_dtype[dtype])
            y = np.zeros_like(x)
            launch(kernel, x, y, device=EmulatorDevice(arch))
            np.testing.assert_array_equal(y.astype(np.float32), x.astype(np.float32), err_msg=f"N = {n}")
