"""Start the MLflow tracking server with basic authentication (the compose `mlflow` service).

    python docker/mlflow-server.py --app-name basic-auth [other `mlflow server` options]

The admin credentials come from the environment (MLFLOW_ADMIN_USERNAME, MLFLOW_ADMIN_PASSWORD)
together with the auth store's database (MLFLOW_AUTH_DATABASE_URI). They fill
docker/mlflow/basic_auth.ini.template into a file only this user can read, which
MLFLOW_AUTH_CONFIG_PATH names for the server. MLflow itself sets the admin password only when it
creates the admin user, so an existing admin is given the configured password here: the value
in .env is the one in force, and no earlier or built-in default password stays usable.
"""

from __future__ import annotations

import os
import string
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "mlflow" / "basic_auth.ini.template"
REQUIRED = (
    "MLFLOW_ADMIN_USERNAME",
    "MLFLOW_ADMIN_PASSWORD",
    "MLFLOW_AUTH_DATABASE_URI",
    "MLFLOW_FLASK_SERVER_SECRET_KEY",  # read by MLflow itself (CSRF protection)
)
# The admin password that older MLflow releases shipped in their basic_auth.ini: public.
LEGACY_DEFAULT_PASSWORD = "password1234"
MIN_PASSWORD_LENGTH = 12  # MLflow's rule for every user's password
# Variables through which MLflow would take admin credentials past the rendered file.
OVERRIDES = ("MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD")


class ConfigError(Exception):
    pass


def app_name(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--app-name" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--app-name="):
            return arg.partition("=")[2]
    return None


def settings(environ: Mapping[str, str], argv: list[str]) -> dict[str, str]:
    """The values the template needs, checked; raises ConfigError naming what is wrong."""
    if app_name(argv) != "basic-auth":
        raise ConfigError("this entry point starts the server with `--app-name basic-auth` only")
    missing = [name for name in REQUIRED if not environ.get(name)]
    if missing:
        raise ConfigError(f"set {', '.join(missing)} (see .env.example)")
    values = {name: environ[name] for name in REQUIRED}
    password = values["MLFLOW_ADMIN_PASSWORD"]
    if password == LEGACY_DEFAULT_PASSWORD:
        raise ConfigError("MLFLOW_ADMIN_PASSWORD is MLflow's old public default: choose another")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise ConfigError(
            f"MLFLOW_ADMIN_PASSWORD must have at least {MIN_PASSWORD_LENGTH} characters, "
            f"got {len(password)}"
        )
    for name, value in values.items():
        if "\n" in value or "\r" in value:
            raise ConfigError(f"{name} must be a single line")
    return values


def render(values: Mapping[str, str]) -> str:
    # configparser reads '%' as the start of an interpolation: '%%' stands for '%'.
    escaped = {name: value.replace("%", "%%") for name, value in values.items()}
    return string.Template(TEMPLATE.read_text()).substitute(escaped)


def write_private(text: str) -> Path:
    directory = Path(tempfile.mkdtemp(prefix="mlflow-auth-"))  # mode 0700
    path = directory / "basic_auth.ini"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    return path


def enforce_admin_password(values: Mapping[str, str]) -> None:
    """Give an existing admin user the configured password (a new one is created by MLflow)."""
    from mlflow.server.auth.sqlalchemy_store import SqlAlchemyStore

    username, password = values["MLFLOW_ADMIN_USERNAME"], values["MLFLOW_ADMIN_PASSWORD"]
    store = SqlAlchemyStore()
    store.init_db(values["MLFLOW_AUTH_DATABASE_URI"])  # migrates the auth store if needed
    try:
        if store.has_user(username, use_primary=True) and not store.authenticate_user(
            username, password, use_primary=True
        ):
            store.update_user(username, password=password, is_admin=True)
            print(
                f"mlflow-server: set the password of admin user {username!r} from the environment"
            )
    finally:
        store.engine.dispose()


def main(argv: list[str]) -> None:
    try:
        values = settings(os.environ, argv)
    except ConfigError as exc:
        sys.exit(f"mlflow-server: {exc}")
    path = write_private(render(values))
    enforce_admin_password(values)
    env = {k: v for k, v in os.environ.items() if k not in (*OVERRIDES, "MLFLOW_ADMIN_PASSWORD")}
    env["MLFLOW_AUTH_CONFIG_PATH"] = str(path)
    os.execvpe("mlflow", ["mlflow", "server", *argv], env)


if __name__ == "__main__":
    main(sys.argv[1:])
