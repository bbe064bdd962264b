"""A study's budget: a number of trials (counted across every coordinator of the study) and
a wall-clock time from this coordinator's start."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Budget:
    trials: int | None
    timeout_s: float | None
    started: float = field(default_factory=time.monotonic)

    def allows(self, used: int) -> bool:
        """Whether another trial may start when `used` trials count or run."""
        if self.trials is not None and used >= self.trials:
            return False
        return self.timeout_s is None or time.monotonic() - self.started < self.timeout_s
