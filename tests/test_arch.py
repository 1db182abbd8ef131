"""The arch table is the one source of per-arch facts: the ELF machine numbers, the ISA generation
the decoder and the executor use, and the register files are read from it, not listed again."""

from __future__ import annotations

import dataclasses

import pytest

from tiledsl.backends.rocm import elf
from tiledsl.backends.rocm.arch import ARCH_NAMES, ARCHS, Arch, get_arch
from tiledsl.backends.rocm.emulator import decoder, gen_tables

pytestmark = pytest.mark.frontend


def test_rows_are_keyword_only():
    row = get_arch("gfx942")
    values = [getattr(row, f.name) for f in dataclasses.fields(Arch)]
    with pytest.raises(TypeError):
        Arch(*values)  # 20 positional fields in a row were unreadable; rows name every field
    assert Arch(**{f.name: v for f, v in zip(dataclasses.fields(Arch), values, strict=True)}) == row


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_derived_tables_follow_the_row(arch):
    row = get_arch(arch)
    assert elf.MACH_BY_ARCH[arch] == row.elf_mach and elf.ARCH_BY_MACH[row.elf_mach] == arch
    assert decoder.GENERATION[arch] == gen_tables.GEN[arch] == row.isa_generation
    assert row.isa_generation == ("gfx9" if row.is_cdna else {"RDNA3": "gfx11", "RDNA4": "gfx12"}[row.family])
    assert (row.m0_sgpr, row.null_sgpr) == ((124, -1) if row.is_cdna else (125, 124))
    assert row.vgprs_per_lane == (512 if row.is_cdna else 256)


def test_every_arch_has_a_distinct_machine_number():
    assert len({a.elf_mach for a in ARCHS.values()}) == len(ARCHS)
