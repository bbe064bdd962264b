"""A study's budget: a number of trials (counted across every coordinator of the study) and
a wall-clock time from this coordinator's start, which covers what follows the search too:
no trial starts once what is left is what the conclusion is expected to take (`reserve_s`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Budget:
    trials: int | None
    timeout_s: float | None
    started: float = field(default_factory=time.monotonic)
    reserve_s: float = 0.0

    def allows(self, used: int) -> bool:
        """Whether another trial may start when `used` trials count or run."""
        if self.trials is not None and used >= self.trials:
            return False
        if self.timeout_s is None:
            return True
        return time.monotonic() - self.started + self.reserve_s < self.timeout_s
