"""A .tile.mlir input that went through MLIR's canonicalizer compiles: it drops the empty else
block of an `scf.if`, which emit always writes and the passes read (assign-layouts failed on it
with an IndexError, an internal error)."""

from __future__ import annotations

import pytest
from mlir import ir
from mlir.passmanager import PassManager

from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.driver import compile_source
from tiledsl.ir.dialect import new_context
from tiledsl.options import CompileOptions

pytestmark = pytest.mark.passes

SOURCE = """kernel k(x: tensor[f32](N), n: i32) grid(1) {
    let i = arange(0, 64);
    let v = load(x[i], mask=i < N);
    if n > 0 {
        store(x[i], v * 2.0, mask=i < N);
    }
}
"""


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_canonicalized_tile_mlir_compiles(arch: str, tmp_path) -> None:
    compile_source(SOURCE, "k.tile", arch, options=CompileOptions.make(arch, dump_ir_dir=str(tmp_path)))
    emitted = next(tmp_path.glob("*.tile.mlir")).read_text()
    with new_context():
        module = ir.Module.parse(emitted)
        PassManager.parse("builtin.module(canonicalize,cse)").run(module.operation)
        canonical = module.operation.get_asm(enable_debug_info=True)
    assert "} else {" in emitted and "} else {" not in canonical
    kernel = compile_source(canonical, "k.tile.mlir", arch)
    assert kernel.hsaco
