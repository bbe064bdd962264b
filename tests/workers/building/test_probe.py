"""The data plane's probe of the node it runs on."""

from __future__ import annotations

from workers.building.probe import probe


def test_probe_works_without_gpus_and_is_stable() -> None:
    first, second = probe(), probe()
    assert first.cpu_cores >= 1 and first.memory_mb > 0
    assert first.fingerprint == second.fingerprint
    assert "cpu" in first.capabilities()
    if not first.gpus:
        assert "cuda" not in first.capabilities()
