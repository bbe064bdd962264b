"""A watch's notice of a job's end: a small JSON document posted to the watch's `notify`
URL when a job it submitted succeeded, was infeasible or failed.

The post has a short timeout and is tried once; one that fails is logged and never changes
the job's outcome.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

from autotune.service.changes import describe_change, mlflow_run
from autotune.service.client_paths import ClientPaths
from autotune.service.db import Database, Job, Watch
from autotune.service.settings import ServiceSettings

log = logging.getLogger("autotune.notify")

NOTIFIED_STATES = ("succeeded", "infeasible", "failed")
NOTIFY_TIMEOUT_S = 5.0


def notify_job_end(db: Database, settings: ServiceSettings, job_id: str) -> None:
    """Post the end of `job_id` to its watch's URL, if it has one; never raises."""
    try:
        with db.transaction() as session:
            job = session.get(Job, job_id)
            watch = session.get(Watch, job.watch_id) if job and job.watch_id else None
        if job is None or watch is None or watch.notify_url is None:
            return
        if job.state not in NOTIFIED_STATES:
            return
        notice = job_end_notice(job, ClientPaths.of(settings))
        post_json(watch.notify_url, notice, NOTIFY_TIMEOUT_S)
        log.info("job %s: its end was posted to watch %s's URL", job_id, watch.id)
    except Exception as error:  # noqa: BLE001 - a notice never fails the job it tells of
        log.warning("job %s: posting its end to its watch's URL failed: %s", job_id, error)


def job_end_notice(job: Job, paths: ClientPaths) -> dict[str, Any]:
    """What a watch's URL is told of a job's end: which watch and job, what changed, how
    it ended (the headline against the baseline, or the error), and where to look; the
    server's paths and stores shown as the API shows them."""
    result = paths.value(job.result or {})
    mlflow = result.get("mlflow")
    return {
        "watch_id": job.watch_id,
        "job_id": job.id,
        "state": job.state,
        "retune_of": job.retune["of"] if job.retune else None,
        "changed": describe_change(job.retune) if job.retune else "the watch's first tuning",
        "change": job.retune,
        "headline": result.get("headline", {}).get("text"),
        "error": None if job.error is None else paths.text(job.error),
        "job": f"/v1/jobs/{job.id}",
        "study": job.study_name,
        "mlflow": None if mlflow is None else mlflow_run(mlflow),
    }


def post_json(url: str, body: dict[str, Any], timeout_s: float) -> None:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "autotune"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - http(s) only, checked at the watch's creation
        response.read()
