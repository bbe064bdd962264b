"""docker-compose.yml as the compose tests read it, without Docker: the file as written, its
${...} references substituted as Compose does, and a service's process, environment and the
value of an option of its command."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.conftest import REPO

COMPOSE_FILE = REPO / "docker-compose.yml"
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}, ...
REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?(?P<arg>[^}]*)\}")


def load_compose() -> dict[str, Any]:
    """docker-compose.yml as written (references not substituted; YAML merge keys applied)."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's substitution of ${...} references, for the forms docker-compose.yml uses."""

    def substitute(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"] or "", match["arg"]
        current = env.get(name)
        if op in (":?", "?"):
            if current is None or (op == ":?" and current == ""):
                raise KeyError(f"{name}: {arg}")
            return current
        if op in (":-", "-"):
            return arg if current is None or (op == ":-" and current == "") else current
        return current or ""

    return REFERENCE.sub(substitute, value.replace("$$", "\0")).replace("\0", "$")


def resolved(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [resolved(item, env) for item in node]
    if isinstance(node, dict):
        return {key: resolved(value, env) for key, value in node.items()}
    return node


def command(service: dict[str, Any]) -> list[str]:
    """The service's process: its entrypoint (if the compose file sets one) and command."""
    entrypoint = service.get("entrypoint", [])
    cmd = service.get("command", [])
    entrypoint = entrypoint.split() if isinstance(entrypoint, str) else list(entrypoint)
    cmd = cmd.split() if isinstance(cmd, str) else list(cmd)
    return [str(part) for part in entrypoint + cmd]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def option_value(args: list[str], option: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(option + "="):
            return arg.partition("=")[2]
    return None
