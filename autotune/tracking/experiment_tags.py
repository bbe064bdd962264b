"""An experiment's tags, which every study logged into it writes."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

# Several kinds' studies run in one process and share their experiment: its tags are written
# by one at a time, so that none loses the link another adds to the description.
EXPERIMENT_TAGS = threading.Lock()


def set_experiment_tag(client: MlflowClient, experiment_id: str, key: str, value: str) -> None:
    """Set one tag of the experiment. Another process setting the same new tag at the same
    moment makes MLflow's insert collide; asked again, the tag is there and is updated."""
    from mlflow.exceptions import MlflowException

    try:
        client.set_experiment_tag(experiment_id, key, value)
    except MlflowException:
        client.set_experiment_tag(experiment_id, key, value)
