"""What every command shares: the app, the consoles, the options of several commands, and
the exit codes that autotune's errors map to."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from autotune.core.errors import (
    AutotuneError,
    Interrupted,
    MostTrialsFailed,
    NodesGone,
    NoFeasibleConfiguration,
    NotFound,
    RequestError,
    Unauthorized,
)

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3
# No node of the study's kind came back within cluster.node_wait_s; the study is resumable.
EXIT_NODES_GONE = 4
# More than half of the trials that ran failed: the study was not concluded.
EXIT_TRIALS_FAILED = 5
EXIT_INTERRUPTED = 130


def command_group(help_text: str) -> typer.Typer:
    """A group of commands. Its help is click's plain help: each paragraph wrapped to the
    terminal, never a value cut short (rich's help panels cut long values, environment
    variable names among them, at 80 columns)."""
    return typer.Typer(
        help=help_text, no_args_is_help=True, add_completion=False, rich_markup_mode=None
    )


app = command_group("Hardware-aware tuning of ML models.")
# Tables stay whole when the output is piped (rich would otherwise assume 80 columns).
_PIPED_WIDTH = 160
err = Console(stderr=True)
out = Console(width=None if Console().is_terminal else _PIPED_WIDTH)


def _error(label: str, exc: Exception) -> None:
    """One line, however long (the terminal may fold it): the label and the message, whose
    values are printed as they are, never read as markup."""
    err.print(f"{label} {escape(str(exc))}", highlight=False, soft_wrap=True)


@contextmanager
def _exit_codes() -> Iterator[None]:
    try:
        yield
    except RequestError as exc:
        _error("[red]error:[/red]", exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except Unauthorized as exc:
        _error("[red]unauthorized:[/red]", exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except Interrupted as exc:
        _error("[yellow]interrupted:[/yellow]", exc)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except KeyboardInterrupt:
        err.print(
            "[yellow]interrupted:[/yellow] stopped at once; run the same command to resume "
            "(trials that were running are measured again)"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except NoFeasibleConfiguration as exc:
        _error("[yellow]no tuned configuration:[/yellow]", exc)
        raise typer.Exit(EXIT_INFEASIBLE) from None
    except NodesGone as exc:
        _error("[red]nodes gone:[/red]", exc)
        raise typer.Exit(EXIT_NODES_GONE) from None
    except MostTrialsFailed as exc:
        _error("[red]most trials failed:[/red]", exc)
        raise typer.Exit(EXIT_TRIALS_FAILED) from None
    except NotFound as exc:  # not "failed:": nothing failed, there is no such job or watch
        _error("[red]not found:[/red]", exc)
        raise typer.Exit(1) from None
    except AutotuneError as exc:
        _error("[red]failed:[/red]", exc)
        raise typer.Exit(1) from None


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within: SIGTERM (a service manager's stop, `kill PID`) is Ctrl-C. Between a study's
    trials the study stops after its running trials; elsewhere it raises KeyboardInterrupt,
    so that the command unwinds (its Ray stopped, its runs closed) instead of dying where it
    stands."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


ServiceDb = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="AUTOTUNE_DB",
        show_default=False,
        help="SQLAlchemy URL of the service database (default: autotune-service.db here)",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="print as JSON")]
Trials = Annotated[
    int | None,
    typer.Option(min=1, envvar="AUTOTUNE_TRIALS", help="trials in the study (its budget)"),
]
