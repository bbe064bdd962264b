"""How a trial measures: `MeasurementSettings`, with the bounds of every number a request
may send."""

from __future__ import annotations

from pydantic import Field, model_validator

from autotune.core.contract.refs import ContentionPolicy, Strict

# Upper bounds of a request's numbers: generous, but finite, so that no number a user sends
# overflows a database column or keeps a worker busy for ever.
MAX_SECONDS = 7 * 24 * 3600  # a week
MAX_ITERATIONS = 10_000_000
MAX_WATTS_PER_CORE = 1000.0


class MeasurementSettings(Strict):
    """How latency is timed and energy estimated."""

    warmup_iters: int = Field(default=10, ge=0, le=MAX_ITERATIONS)
    min_iters: int = Field(default=50, ge=5, le=MAX_ITERATIONS)
    max_iters: int = Field(default=2000, ge=5, le=MAX_ITERATIONS)
    min_seconds: float = Field(default=0.5, ge=0.0, le=MAX_SECONDS)
    max_seconds: float = Field(default=5.0, gt=0.0, le=MAX_SECONDS)
    cpu_watts_per_core: float | None = Field(
        default=None,
        gt=0.0,
        le=MAX_WATTS_PER_CORE,
        description="flat power model of the energy estimate: watts drawn per fully busy "
        "core; set, it wins over the CPU's TDP per core; unset: the TDP per core where the "
        "CPU is known, else 10 W",
    )
    settle_tolerance: float | None = Field(
        default=0.02,
        gt=0.0,
        le=1.0,
        description="once the minimums are met, stop when the 95% confidence interval of the "
        "median latency is within this fraction of it; None: stop at the minimums",
    )
    max_call_ms: float | None = Field(
        default=500.0,
        gt=0.0,
        le=MAX_SECONDS * 1000,
        description="the longest one call (one batch) should take: a larger batch whose call "
        "time, extrapolated from smaller batches of the same configuration, passes it is not "
        "run (status 'skipped'), and a trial with a call SLOW_CALL_FACTOR times longer stops "
        "(status 'too_slow'); None: no bound",
    )
    screen_seconds: float | None = Field(
        default=0.3,
        gt=0.0,
        le=MAX_SECONDS,
        description="each trial is first timed this long (or min_seconds where shorter; 8 "
        "calls at least, a quarter of max_seconds at most); one whose figures "
        "could not reach the feasible front, even screen_margin better than its short interval "
        "says, stops there (status 'screened'); None: every trial is timed in full",
    )
    screen_margin: float = Field(
        default=0.2,
        ge=0.0,
        le=10.0,
        description="how much better than its short window a trial's timed figures are "
        "assumed to be, beyond the window's own interval, before it is screened out",
    )
    energy_window_s: float = Field(
        default=1.0,
        gt=0.0,
        le=MAX_SECONDS,
        description="an energy counter is read over a window of at least this long, the "
        "workload repeated inside it (NVML updates about every 100 ms)",
    )
    contention_window_s: float = Field(
        default=0.2,
        ge=0.0,
        le=MAX_SECONDS,
        description="the machine is watched for at least this long around each measurement, "
        "idle after a shorter one: /proc/stat counts in ticks of 10 ms, so a shorter window's "
        "shares of other load say little",
    )
    contention: ContentionPolicy = Field(
        default="wait",
        description="what to do when other processes load the trial's cores: 'wait' up to "
        "contention_max_wait_s for quiet, then measure and mark the result contended; 'warn' "
        "measure at once and mark it; 'fail' end the trial (status 'contended')",
    )
    contention_max_wait_s: float = Field(
        default=10.0,
        ge=0.0,
        le=MAX_SECONDS,
        description="the longest 'wait' waits for quiet before measuring",
    )
    contention_threshold: float = Field(
        default=0.1,
        gt=0.0,
        le=1.0,
        description="a measurement is contended when other processes used (or the hypervisor "
        "stole) more than this share of the trial's cores while it ran",
    )

    @model_validator(mode="after")
    def _ordered(self) -> MeasurementSettings:
        if self.max_iters < self.min_iters:
            raise ValueError("max_iters must be >= min_iters")
        if self.max_seconds < self.min_seconds:
            raise ValueError("max_seconds must be >= min_seconds")
        return self
