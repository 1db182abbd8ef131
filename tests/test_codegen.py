"""Backend guards of the code-object emission stage."""

from __future__ import annotations

import pytest

from tiledsl.backends.rocm import codegen
from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.errors import CompileError

pytestmark = pytest.mark.compile

# What gpu.grid_dim used to lower to: a call into ROCm's device library, which nothing links.
LIBRARY_CALL = """target triple = "amdgcn-amd-amdhsa"
declare i32 @__ockl_get_num_groups(i32)
define amdgpu_kernel void @k(ptr addrspace(1) %p) {
  %n = call i32 @__ockl_get_num_groups(i32 0)
  store i32 %n, ptr addrspace(1) %p
  ret void
}
"""


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_device_library_call_is_an_error(arch: str) -> None:
    with pytest.raises(CompileError, match="calls __ockl_get_num_groups, which is not defined"):
        codegen.make_isa_and_object(LIBRARY_CALL, get_arch(arch))
