"""What the CPU flags say of this CPU that changes how a model is built: whether its int8
kernels add products in 16 bits (`int8_sums_saturate`)."""

from __future__ import annotations

import pytest

from workers.building import cpu_flags


@pytest.mark.parametrize(
    ("flags", "saturates"),
    [
        (["avx2", "fma"], True),  # e.g. AMD EPYC (Zen 3), Intel Xeon before Cascade Lake
        (["avx2", "fma", "avx512f"], True),  # AVX-512 without VNNI (Skylake-SP)
        (["avx2", "avx512f", "avx512_vnni"], False),
        (["avx2", "avx_vnni"], False),
        (["avx2", "avx512f", "amx_int8", "amx_tile"], False),
        ([], False),  # no x86 int8 kernels of these kinds (another architecture)
    ],
)
def test_int8_sums_saturate_on_avx2_or_avx512_without_vnni(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], saturates: bool
) -> None:
    monkeypatch.setattr(cpu_flags, "cpu_flags", lambda: flags)
    assert cpu_flags.int8_sums_saturate() is saturates
