"""The MLflow model registry: a tuned artifact registered as a version (logged as its engine
serves it, `autotune.tracking.mlflow_model`), and registered versions looked up and
downloaded, inside a namespace where the service gives one."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.contract import REGISTERED_URI, REGISTERED_URI_RULE
from autotune.core.errors import RequestError
from autotune.tracking.report import is_number

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

TUNED_TAG = "autotune.tuned"
# Where the study's tracker logs the optimized model in its run; registering the same
# directory there writes the same files, not a second copy.
TUNED_ARTIFACT_PATH = "optimized_model"
_NOT_FOUND = {"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"}
# Between a namespace and a model's name in MLflow: in neither a namespace nor a NAME.
NAMESPACE_SEPARATOR = "~"


@dataclass(frozen=True)
class RegisteredVersion:
    name: str
    version: str
    source: str
    run_id: str | None


def _client(tracking_uri: str) -> MlflowClient:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri, registry_uri=tracking_uri)


def registered_name(name: str, namespace: str | None) -> str:
    """The MLflow name of registered model `name` in `namespace` (the service's: a team's or
    a token's): 'NAMESPACE~NAME'. A request's NAME cannot hold '~', so no request names a
    model outside its own namespace. Without a namespace (the CLI), `name` itself."""
    return name if namespace is None else f"{namespace}{NAMESPACE_SEPARATOR}{name}"


def resolve_registered(
    uri: str, tracking_uri: str, namespace: str | None = None
) -> RegisteredVersion:
    """The version `models:/NAME/VERSION` or `models:/NAME@ALIAS` names now; with a
    `namespace`, NAME is looked up inside it, and a model that is missing there gets one
    error, whether or not a model of that name exists in another namespace."""
    from mlflow.exceptions import MlflowException

    match = REGISTERED_URI.match(uri)
    if match is None:
        raise RequestError("model.registered", REGISTERED_URI_RULE, uri)
    name = registered_name(match["name"], namespace)
    client = _client(tracking_uri)
    try:
        if match["alias"] is not None:
            found = client.get_model_version_by_alias(name, match["alias"])
        else:
            found = client.get_model_version(name, match["version"])
    except MlflowException as error:
        if error.error_code not in _NOT_FOUND:
            raise
        rule = (
            f"must name an existing model version ({error.message})"
            if namespace is None
            else "must name an existing version of a registered model this token can see"
        )
        raise RequestError("model.registered", rule, uri) from error
    return RegisteredVersion(
        name=found.name,
        version=str(found.version),
        source=found.source or "",
        run_id=found.run_id or None,
    )


@contextmanager
def downloaded_onnx(version: RegisteredVersion, tracking_uri: str, into: Path) -> Iterator[Path]:
    """The one ONNX model the version's artifacts hold (its external data beside it),
    downloaded into a temporary directory under `into` that is removed afterwards."""
    import mlflow

    location = _client(tracking_uri).get_model_version_download_uri(version.name, version.version)
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=into, prefix=".download-") as tmp:
        local = Path(
            mlflow.artifacts.download_artifacts(
                artifact_uri=location, dst_path=tmp, tracking_uri=tracking_uri
            )
        )
        files = [local] if local.is_file() else sorted(local.rglob("*"))
        models = [p for p in files if p.suffix.lower() == ".onnx" and p.is_file()]
        if len(models) != 1:
            raise RequestError(
                "model.registered",
                "the version's artifacts must hold exactly one .onnx file",
                f"{version.name}/{version.version}: {[p.name for p in models]}",
            )
        yield models[0]


def register_tuned(
    tracking_uri: str,
    name: str,
    tuned: dict[str, Any],
    tags: dict[str, str],
    alias: str = "tuned",
    namespace: str | None = None,
) -> str:
    """Register the optimized model of `tuned` (a tuned file's document) as a version of
    registered model `name` (created if missing; inside `namespace`, see
    `registered_name`), describe it (`version_description`), tag it (`autotune.tuned=true`,
    its key figures and `tags`), point `alias` at it and return the version. An ONNX
    artifact is logged as an MLflow onnx model (`autotune.tracking.mlflow_model`), so
    `mlflow.pyfunc` loads it too.

    The directory is logged to the run under `optimized_model` and the version's source is
    that artifact location: `models:/NAME@ALIAS` then downloads these very files. Registering
    the same run's directory again reuses its version."""
    from mlflow.exceptions import MlflowException
    from mlflow.store.artifact.runs_artifact_repo import RunsArtifactRepository

    from autotune.tracking.mlflow_model import model_directory

    if REGISTERED_URI.match(f"models:/{name}@{alias}") is None:
        raise RequestError("name", REGISTERED_URI_RULE, f"models:/{name}@{alias}")
    name = registered_name(name, namespace)
    artifact_dir, run_id = Path(tuned["artifact"]).parent, tuned["mlflow"]["run_id"]
    client = _client(tracking_uri)
    try:
        client.create_registered_model(name)
    except MlflowException as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    with tempfile.TemporaryDirectory() as tmp:
        model = model_directory(artifact_dir, Path(tmp) / "model")
        client.log_artifacts(run_id, str(model), TUNED_ARTIFACT_PATH)
    source = RunsArtifactRepository.get_underlying_uri(
        f"runs:/{run_id}/{TUNED_ARTIFACT_PATH}", tracking_uri
    )
    all_tags = {TUNED_TAG: "true", **figure_tags(tuned), **tags}
    description = version_description(tuned)
    registered = client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
    same = [mv for mv in registered if mv.source == source]
    if same:
        version = str(same[0].version)
        for key, value in all_tags.items():
            client.set_model_version_tag(name, version, key, value)
        client.update_model_version(name, version, description=description)
    else:
        created = client.create_model_version(
            name, source, run_id=run_id, tags=all_tags, description=description
        )
        version = str(created.version)
    client.set_registered_model_alias(name, alias, version)
    return version


# The figures a version carries as tags (`metric.NAME`), where the tuned file has them.
KEY_FIGURES = (
    "accuracy",
    "accuracy_drop",
    "latency_p95_ms",
    "latency_per_sample_ms",
    "throughput_per_s",
    "energy_per_sample_j",
    "peak_memory_mb",
)


def figure_tags(tuned: dict[str, Any]) -> dict[str, str]:
    """The chosen configuration's key figures, to 4 significant digits."""
    metrics = tuned["metrics"]
    return {
        f"metric.{name}": f"{metrics[name]:.4g}"
        for name in KEY_FIGURES
        if is_number(metrics.get(name))
    }


def version_description(tuned: dict[str, Any]) -> str:
    """What the MLflow UI shows on the version's page (Markdown): the headline, the
    configuration, the hardware it was tuned for, and a link to the study's run."""
    hardware, study, run = tuned["hardware"], tuned["study"], tuned["mlflow"]
    gpus = hardware.get("gpus") or []
    machine = f"{hardware['cpu_model']}, {hardware['cpu_cores']} cores"
    if gpus:
        machine += f", {len(gpus)}x {gpus[0]['name']}"
    run_link = f"#/experiments/{run['experiment_id']}/runs/{run['run_id']}"
    return "\n".join(
        [
            tuned["headline"]["text"],
            "",
            "**Configuration**",
            "",
            *(f"- `{key}`: {value}" for key, value in tuned["config"].items()),
            "",
            f"**Tuned for** {machine} (hardware fingerprint `{hardware['fingerprint']}`).",
            "",
            f"**Study** `{study['name']}`, trial {study['trial_number']} of "
            f"{study['n_trials']}: [its MLflow run]({run_link}).",
        ]
    )


@dataclass(frozen=True)
class TunedRegistration:
    """Where a tuned model was registered: `uri` is how a request names it
    (`models:/NAME@ALIAS`), `mlflow_name` its name in MLflow (inside its namespace)."""

    name: str
    alias: str
    version: str
    mlflow_name: str

    @property
    def uri(self) -> str:
        return f"models:/{self.name}@{self.alias}"

    def document(self) -> dict[str, str]:
        """What a job's status shows as its `registered_model`."""
        return {
            "name": self.name,
            "version": self.version,
            "alias": self.alias,
            "uri": self.uri,
            "mlflow_name": self.mlflow_name,
        }


def tuned_model_alias(alias: str, fingerprint: str, of_several_kinds: bool) -> str:
    """The alias of a tuned version: `alias` itself, or `ALIAS-FINGERPRINT` for one kind of
    node among several tuned at once (each kind has its own version of the model)."""
    return f"{alias}-{fingerprint}" if of_several_kinds else alias


def register_tuned_model(
    tuned: dict[str, Any],
    name: str,
    *,
    alias: str = "tuned",
    of_several_kinds: bool = False,
    namespace: str | None = None,
    tags: dict[str, str] | None = None,
    tracking_uri: str | None = None,
) -> TunedRegistration | None:
    """Register a tuning's optimized model (`tuned`, a tuned file's document) as a version of
    registered model `name`, the name the tuning was asked under (the request's name, or the
    study name given in its place): the one rule of the command line and the service. The
    version is tagged with the study, the kind of node and `tags`, and `alias`
    (`tuned_model_alias`) points at it. A replayed study exports no model: None."""
    if Path(tuned["artifact"]).suffix == ".json":
        return None
    fingerprint = tuned["hardware"]["fingerprint"]
    chosen_alias = tuned_model_alias(alias, fingerprint, of_several_kinds)
    version = register_tuned(
        tracking_uri or tuned["mlflow"]["tracking_uri"],
        name,
        tuned,
        {
            "autotune.study": tuned["study"]["name"],
            "autotune.hardware_fingerprint": fingerprint,
            **(tags or {}),
        },
        alias=chosen_alias,
        namespace=namespace,
    )
    return TunedRegistration(name, chosen_alias, version, registered_name(name, namespace))
