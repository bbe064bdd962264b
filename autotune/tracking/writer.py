"""Writers of trial child runs: a process beside the caller, or the caller itself.

Writing a child run costs the store some 20 ms of CPU; a writer process takes that off the
caller's interpreter. It is forked from a forkserver (a clean process of its own, MLflow
already imported, so a writer starts in a fraction of a second), or spawned where there is no
forkserver; never forked from the caller, which may hold threads, Ray and database
connections. It takes requests as plain tuples on one queue, in order:

    ("trial", *TrialRun)    write the run (runs queued together are written together: in one
                            transaction on an MLflow SQL store, see `runs`)
    ("flush", token)        answer ("flushed", token, {trial number: run id}, [failure])
                            with what was written and what failed since the last answer
    ("stop",)               exit

Where no process can start, the caller writes each run as it is logged.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import multiprocessing
import pickle
import queue
import signal
import sys
import threading
import traceback
import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from autotune.core.errors import AutotuneError
from autotune.tracking.runs import BulkRuns, StudyRuns, TrialRun, sql_store, write_trial

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess
    from multiprocessing.queues import Queue

    from mlflow.tracking import MlflowClient

# Tried in order: a forkserver (MLflow preloaded into it), else spawn.
START_METHODS = ("forkserver", "spawn")
# What the forkserver imports once, so that each writer forked from it starts at once (the
# SQL store's module alone takes seconds to import; every writer imports it, see sql_store).
FORKSERVER_PRELOAD = [
    "autotune.tracking.writer",
    "mlflow.tracking",
    "mlflow.store.tracking.sqlalchemy_store",
]
# How long a stopped writer may take to exit (it has written everything before it is told to
# stop, unless its tracker was dropped unfinished), how often the writer checks that its
# caller is still alive, and how often a caller waiting for an answer checks the writer (a
# flush is answered as soon as it is written; the check only bounds how long a dead writer
# goes unnoticed).
STOP_TIMEOUT_S = 30.0
LIVENESS_CHECK_S = 1.0
WRITER_CHECK_S = 0.05
# The most child runs written in one transaction.
BATCH_RUNS = 200

logger = logging.getLogger(__name__)

ClientFactory = Callable[[str], "MlflowClient"]
RecordRun = Callable[[int, str], None]


class WriterFailed(AutotuneError):
    """The writer process exited or hung before it answered."""


class WriterTraceback(Exception):
    """Where a write failed in the writer process, as text (tracebacks do not pickle)."""

    def __str__(self) -> str:
        return str(self.args[0])


class TrialWriter(Protocol):
    @property
    def running(self) -> bool: ...

    def submit(self, trial: TrialRun) -> None: ...

    def flush(self) -> None:
        """Return once every submitted run is written; raise what a write raised."""
        ...

    def close(self) -> None:
        """Flush, then release what the writer holds, even when the flush raised."""
        ...


def start_writer(
    runs: StudyRuns, record: RecordRun, caller_client: MlflowClient, client: ClientFactory | None
) -> TrialWriter:
    """A writer process, or, where none can start, the caller writing with its own client."""
    try:
        return ProcessWriter(runs, record, client)
    except (ValueError, OSError) as error:
        logger.warning("MLflow child runs are written in this process: %s", error)
        return InlineWriter(runs, record, caller_client)


class Failures:
    """What writes raised, kept until the caller's next flush raises the first of them."""

    def __init__(self) -> None:
        self._errors: list[BaseException] = []

    def add(self, error: BaseException) -> None:
        self._errors.append(error)

    def raise_first(self) -> None:
        if not self._errors:
            return
        first, *others = self._errors
        self._errors.clear()
        if others:
            first.add_note(f"{len(others)} later deferred writes failed too")
        raise first


class InlineWriter:
    """Writes each run as it is submitted, in the caller; a write error waits for the next
    flush, as a deferred one would."""

    running = False

    def __init__(self, runs: StudyRuns, record: RecordRun, client: MlflowClient) -> None:
        self._runs = runs
        self._record = record
        self._client = client
        self._failures = Failures()

    def submit(self, trial: TrialRun) -> None:
        try:
            self._record(trial.trial_number, write_trial(self._client, self._runs, trial))
        except Exception as error:  # raised by the next flush
            self._failures.add(error)

    def flush(self) -> None:
        self._failures.raise_first()

    def close(self) -> None:
        self.flush()


def _start_context() -> Any:
    available = multiprocessing.get_all_start_methods()
    method = next((m for m in START_METHODS if m in available), None)
    if method is None:
        raise ValueError(f"none of the start methods {START_METHODS} is available here")
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(FORKSERVER_PRELOAD)
    return context


_MAIN_LOCK = threading.Lock()


@contextmanager
def _without_main_module() -> Iterator[None]:
    """While a writer process starts, the caller's `__main__` is hidden: the child would
    otherwise run the caller's script again (a script without an
    `if __name__ == "__main__"` guard would start its work twice). The writer needs nothing
    from it: its entry point is this module's `serve`."""
    with _MAIN_LOCK:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


class ProcessWriter:
    """A writer process, started with the object; what it wrote reaches `record` at each
    flush. A writer dropped without `close` is stopped when it is collected or at exit."""

    def __init__(self, runs: StudyRuns, record: RecordRun, client: ClientFactory | None) -> None:
        context = _start_context()
        self._record = record
        self._failures = Failures()
        self._lock = threading.Lock()
        self._flushes = 0
        self._requests: Queue[tuple[Any, ...]] = context.Queue()
        self._replies: Queue[tuple[Any, ...]] = context.Queue()
        # typeshed's BaseContext lacks Process, which every context has
        self._process: SpawnProcess = context.Process(  # type: ignore[attr-defined]
            target=serve,
            args=(runs, client, self._requests, self._replies),
            name=f"mlflow-writer-{runs.study}",
            daemon=True,
        )
        with _without_main_module():
            self._process.start()
        self._reaper = weakref.finalize(self, stop_process, self._process, self._requests)
        # registered after multiprocessing's own exit hook, so run before it terminates
        # daemonic processes: a writer still open at exit writes what is queued first
        self._reaper.atexit = False
        atexit.register(self._reaper)

    @property
    def running(self) -> bool:
        return self._process.is_alive()

    def submit(self, trial: TrialRun) -> None:
        self._requests.put(("trial", *trial))

    def flush(self) -> None:
        with self._lock:
            self._flushes += 1
            self._requests.put(("flush", self._flushes))
            while self._take_reply() != self._flushes:
                pass
        self._failures.raise_first()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._reaper.detach()
            atexit.unregister(self._reaper)
            stop_process(self._process, self._requests)

    def _take_reply(self) -> int:
        """Record one flush's answer (an earlier, interrupted flush's comes first) and
        return its token."""
        while True:
            try:
                _, token, written, failures = self._replies.get(timeout=WRITER_CHECK_S)
                break
            except queue.Empty:
                if not self._process.is_alive():
                    code = self._process.exitcode
                    raise WriterFailed(f"the MLflow writer process exited (code {code})") from None
        for trial_number, run_id in written.items():
            self._record(trial_number, run_id)
        for error, where in failures:
            error.__cause__ = WriterTraceback(where)
            self._failures.add(error)
        return int(token)


def stop_process(process: SpawnProcess, requests: Queue[tuple[Any, ...]]) -> None:
    """Tell the writer to stop once it has written what is queued, wait for it, and
    terminate it if it does not exit in time."""
    if process.is_alive():
        with contextlib.suppress(ValueError, OSError):  # the queue is already closed
            requests.put(("stop",))
        process.join(STOP_TIMEOUT_S)
    hung = process.is_alive()
    if hung:
        process.terminate()
        process.join()
    requests.cancel_join_thread()
    requests.close()
    if hung:
        raise WriterFailed(f"the MLflow writer process did not stop in {STOP_TIMEOUT_S:.0f} s")


def serve(
    runs: StudyRuns,
    make_client: ClientFactory | None,
    requests: Queue[tuple[Any, ...]],
    replies: Queue[tuple[Any, ...]],
) -> None:
    """The writer process: write each requested run in order until told to stop, or until
    the process that started it is gone."""
    # Ctrl-C reaches the whole process group; the tracker stops its writer itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # What the forkserver imported is shared with it until written to; a collection that
    # walked those objects would copy every page of them (0.15 s before the first write).
    gc.freeze()
    if runs.tracking_uri.startswith("sqlite:"):
        journal_sqlite_ahead()
    from mlflow.tracking import MlflowClient

    client = (make_client or MlflowClient)(runs.tracking_uri)
    store = sql_store(client)
    # a client of the caller's own writes run by run, through its methods
    bulk = BulkRuns(store, runs) if store is not None and type(client) is MlflowClient else None
    written: dict[int, str] = {}
    failures: list[tuple[BaseException, str]] = []
    pending: list[TrialRun] = []
    while (request := next_request(requests, wait=not pending)) is not None:
        kind, *fields = request
        if kind == "trial":
            pending.append(TrialRun(*fields))
            if len(pending) < BATCH_RUNS:
                continue
        written.update(write_trials(client, bulk, runs, pending, failures))
        pending = []
        if kind == "flush":
            replies.put(("flushed", fields[0], written, failures))
            written, failures = {}, []
    write_trials(client, bulk, runs, pending, failures)
    replies.close()
    replies.join_thread()


def write_trials(
    client: MlflowClient,
    bulk: BulkRuns | None,
    runs: StudyRuns,
    trials: list[TrialRun],
    failures: list[tuple[BaseException, str]],
) -> dict[int, str]:
    """Write `trials`' runs: in one transaction where the store allows, else (or where that
    failed) one by one, each failure added to `failures`."""
    written: dict[int, str] = {}
    if bulk is not None and trials:
        try:
            written = bulk.write(trials)
        except Exception:
            logger.warning("a batch of child runs failed; writing them one by one", exc_info=True)
    for trial in trials:
        try:
            if trial.trial_number not in written:
                written[trial.trial_number] = write_trial(client, runs, trial)
            for name, text in trial.texts.items():
                client.log_text(written[trial.trial_number], text, name)
        except Exception as error:  # answered at the next flush
            failures.append((portable(error), traceback.format_exc()))
    return written


def next_request(requests: Queue[tuple[Any, ...]], wait: bool = True) -> tuple[Any, ...] | None:
    """The next request, or None when told to stop or when the parent process is gone.
    Without `wait`, a queue with nothing in it answers ("idle",) at once."""
    parent = multiprocessing.parent_process()
    while True:
        try:
            request = requests.get(timeout=LIVENESS_CHECK_S) if wait else requests.get_nowait()
        except queue.Empty:
            if not wait:
                return ("idle",)
            if parent is not None and not parent.is_alive():
                return None
            continue
        return None if request[0] == "stop" else request


def portable(error: Exception) -> BaseException:
    """The error itself if it survives pickling, else one that tells the same."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return WriterFailed(f"{type(error).__name__}: {error}")
    return error


def journal_sqlite_ahead() -> None:
    """Open every SQLite connection with a write-ahead journal, synced at checkpoints only.
    The listener is on SQLAlchemy's Engine class, so it reaches every engine of the process:
    acceptable only because this process does nothing but write child runs."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def on_connect(connection: Any, _record: Any) -> None:
        if type(connection).__module__.startswith("sqlite3"):
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

    event.listen(Engine, "connect", on_connect)
