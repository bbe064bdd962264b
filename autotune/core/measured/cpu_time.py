"""CPU time per sample: the CPU seconds the measured calls cost the worker (every thread of
its process, and its sharded session's helper processes), per sample. Measured by the
`cpu_time` figure meter (`workers.measuring.figure_meters.cpu_time`)."""

from __future__ import annotations

from autotune.core.metrics import (
    MAX_MS,
    Bound,
    BoundKind,
    Direction,
    Metric,
    register_bound,
    register_metric,
)

CPU_TIME_PER_SAMPLE = register_metric(
    Metric(
        "cpu_time_per_sample_ms",
        "ms",
        Direction.MINIMIZE,
        aggregation="CPU time of the measured window / its samples",
        description="CPU time per inferred sample, every thread and helper process of the "
        "worker counted (what serving a sample costs the CPU, beside its wall time)",
        label="CPU time per sample",
        header="CPU ms per\nsample",
        number_format=".4g",
        lean="per_sample",
        round_reader=lambda figures: figures.figure("cpu_time_per_sample_ms"),
        meter="cpu_time",
    )
)

register_bound(
    Bound(
        "max_cpu_time_per_sample_ms",
        CPU_TIME_PER_SAMPLE,
        BoundKind.UPPER,
        MAX_MS,
        "CPU time per sample, ms",
    )
)
