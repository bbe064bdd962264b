"""The job runner: claim a queued job, run its study under a lease, record the outcome.

While a job runs, a keeper thread renews the lease and watches for a cancel request; a
cancel (or a lost lease) sets the coordinator's stop event, so the study stops asking for
trials, lets the running ones finish, and stays resumable. A runner that is stopped gives
its job back to the queue, whenever the stop came (before the baseline was measured, or
before the study even started, included).

A job runs on the kind of node it was accepted for (its hardware fingerprint, the request's
target from then on): a retry on a cluster whose kinds changed meanwhile runs on that kind,
or waits for it, and never asks for a target again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from pathlib import Path
from typing import Any

from autotune.core.errors import AutotuneError, Interrupted, NoFeasibleConfiguration
from autotune.service.db import Database, Job
from autotune.service.jobs import JobState, JobStore
from autotune.service.notify import notify_job_end
from autotune.service.settings import ServiceSettings

log = logging.getLogger("autotune.runner")

# A job's error message, as its status shows it, is cut to this length.
MAX_ERROR_CHARS = 1000


class LeaseKeeper(threading.Thread):
    """Renews a job's lease every third of its length; stops the study on a cancel request
    or when the lease was lost to another runner."""

    def __init__(self, store: JobStore, job_id: str, owner: str, lease_s: float) -> None:
        super().__init__(name=f"lease-{job_id[:8]}", daemon=True)
        self.store = store
        self.job_id = job_id
        self.owner = owner
        self.lease_s = lease_s
        self.stop_study = threading.Event()
        self.cancelled = False
        self.lost = False
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.lease_s / 3):
            try:
                lease = self.store.renew(self.job_id, self.owner, self.lease_s)
            except Exception:
                log.exception("renewing the lease of job %s failed; trying again", self.job_id)
                continue
            if not lease.held:
                self.lost = True
                self.stop_study.set()
                return
            if lease.cancel_requested:
                self.cancelled = True
                self.stop_study.set()

    def close(self) -> None:
        self._done.set()
        self.join()


def runner_owner(pid: int, token: str) -> str:
    """The lease owner a runner process claims jobs as (its supervisor knows the token)."""
    return f"{socket.gethostname()}:{pid}:{token}"


class JobRunner:
    def __init__(self, db: Database, settings: ServiceSettings, token: str | None = None) -> None:
        self.store = JobStore(db)
        self.settings = settings
        self.owner = runner_owner(os.getpid(), token or uuid.uuid4().hex[:8])
        self.stopped = threading.Event()
        self._keeper: LeaseKeeper | None = None

    def shutdown(self) -> None:
        """Stop after the running trials: the job goes back to the queue, resumable."""
        self.stopped.set()
        keeper = self._keeper
        if keeper is not None:
            keeper.stop_study.set()

    def give_back(self) -> None:
        """Give back whatever job this runner holds, now (its process is about to end)."""
        for job_id in self.store.release_owner(self.owner):
            log.warning("job %s: its runner is ending; back in the queue", job_id)

    def run_forever(self) -> None:
        while not self.stopped.is_set():
            try:
                ran = self.run_once()
            except Exception:
                log.exception("the job runner failed between jobs; trying again")
                ran = None
            if ran is None:
                self.stopped.wait(self.settings.poll_s)

    def run_once(self) -> str | None:
        """Claim one job and run it to its end; its id, or None if nothing was queued."""
        job = self.store.claim(self.owner, self.settings.lease_s)
        if job is None:
            return None
        log.info("job %s: claimed (attempt %d)", job.id, job.attempts)
        keeper = LeaseKeeper(self.store, job.id, self.owner, self.settings.lease_s)
        self._keeper = keeper
        if self.stopped.is_set():  # stopped while it claimed: `shutdown` saw no keeper
            keeper.stop_study.set()
        keeper.start()
        try:
            state, outcome = self._execute(job, keeper)
        finally:
            keeper.close()
            self._keeper = None
        if keeper.lost:
            log.warning("job %s: lease lost to another runner; its outcome is theirs", job.id)
            return job.id
        if state == "cancelled" and not keeper.cancelled:
            self.store.release(job.id, self.owner)
            self.stopped.set()
            log.info("job %s: runner stopping; back in the queue", job.id)
            return job.id
        finished = self.store.finish(job.id, self.owner, state, **outcome)
        log.info("job %s: %s", job.id, state)
        if finished:
            notify_job_end(self.store.db, self.settings, job.id)
        return job.id

    def _execute(self, job: Job, keeper: LeaseKeeper) -> tuple[JobState, dict[str, Any]]:
        try:
            return "succeeded", self._tune(job, keeper.stop_study)
        except NoFeasibleConfiguration as error:
            return "infeasible", {"error": job_error(error)}
        except Interrupted:
            return "cancelled", {"error": "cancelled; the study stopped cleanly"}
        except Exception as error:
            if keeper.stop_study.is_set():
                # Stopped before its baseline was measured, or before the study started: it
                # raised on its way out, but nothing failed and the study stays resumable.
                log.info("job %s: stopped early (%s)", job.id, job_error(error))
                return "cancelled", {"error": "cancelled before its baseline was measured"}
            if isinstance(error, AutotuneError):
                log.warning("job %s failed: %s", job.id, error)
            else:
                log.exception("job %s failed", job.id)
            return "failed", {"error": job_error(error)}

    def _tune(self, job: Job, stop: threading.Event) -> dict[str, Any]:
        from autotune.requests.request import parse_request
        from autotune.service.progress import JobProgress
        from autotune.tuning import TuneOptions, tune_request

        # The kind it was accepted for, whatever kinds the cluster has now.
        request = parse_request({**job.request, "target": job.hardware_fingerprint})
        options = TuneOptions(
            study=job.study_name,
            executor=self.settings.executor,
            workers=self.settings.workers,
            ray_address=self.settings.ray_address,
            out_dir=self.settings.job_dir(job.id),
            mlflow_artifacts=self.settings.mlflow_artifact_root,
            stop=stop,
            stale_after_s=self.settings.stale_after_s,
            on_note=lambda text: log.info("job %s: %s", job.id, text),
        )
        self._warm_start(job, options)
        progress = JobProgress(self.store, job.id, self.owner, request.selection)
        outcome, _ = tune_request(request, Path(job.base_dir), options, observers=[progress])
        assert outcome.tuned is not None
        tuned = outcome.tuned.model_dump(mode="json")
        best = {"trial": tuned["study"]["trial_number"], "config": tuned["config"]}
        self.store.progress(
            job.id, self.owner, outcome.n_trials, {**best, "metrics": tuned["metrics"]}
        )
        return {"result": tuned, "registered_model": self._register(job, request.name, tuned)}

    def _warm_start(self, job: Job, options: Any) -> None:
        """A re-tune starts from the front and the measurements of the previous job."""
        if job.warm_start_from is None:
            return
        from autotune.search.warm_start import load_warm_start

        previous = self.store.get_any(job.warm_start_from)
        if previous is None or previous.state != "succeeded":
            return
        options.warm_start = load_warm_start(previous.study_name, self.settings.storage)
        options.previous_tuned = previous.result

    def _register(self, job: Job, name: str, tuned: dict[str, Any]) -> dict[str, Any] | None:
        """The tuned artifact becomes a version of the registered model, under the alias, in
        the job's team's namespace (`register_tuned_model`, the command line's rule): `uri`
        is what the team names it by in requests, `mlflow_name` its name in MLflow."""
        from autotune.tracking.registry import register_tuned_model

        registered = register_tuned_model(
            tuned,
            name,
            alias=self.settings.registered_alias,
            namespace=self.store.namespace(job),
            tags={"autotune.job": job.id},
            tracking_uri=self.settings.tracking_uri,
        )
        return None if registered is None else registered.document()


def job_error(error: BaseException) -> str:
    """What a job's status says of the error that ended it, on one line of at most
    `MAX_ERROR_CHARS`: an AutotuneError's own message (bad input: the field, the rule and
    the value), anything else only its type. Tracebacks and pids stay in the server's log;
    the server paths a message names are kept here as they are, and the API shows them as
    the client names them (`autotune.service.client_paths`)."""
    cause = _original(error)
    if not isinstance(cause, AutotuneError):
        return f"internal error ({type(cause).__name__}); the server's log has the details"
    text = str(cause).split("Traceback (most recent call last)")[0]
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def _original(error: BaseException) -> BaseException:
    """The exception a Ray worker raised, out of the RayTaskError that carried it (whose
    message is the worker's traceback)."""
    for _ in range(8):
        cause = getattr(error, "cause", None)
        if not (type(error).__module__.startswith("ray.") and isinstance(cause, BaseException)):
            break
        error = cause
    return error
