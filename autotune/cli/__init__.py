"""The `autotune` command line: one module per group of commands, registered here in the
order `autotune --help` lists them."""

from autotune.cli import client, hardware, serve, study, tokens, tune
from autotune.cli.shared import app, out
from autotune.cli.tables import _print_front
from autotune.cli.tune import _ui_command

app.command()(tune.tune)
app.command()(hardware.hardware)
app.command()(hardware.space)
app.command()(study.report)
app.add_typer(tokens.token_app, name="token")
app.command(name="serve")(serve.serve_command)
app.command()(client.submit)
app.command()(client.status)
app.command()(client.watch)
app.command()(client.watches)

__all__ = ["_print_front", "_ui_command", "app", "out"]
