"""Where a request's model comes from: what a watch compares between ticks (`source_fingerprint`)
and a registered model made a file (`materialize`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.core.contract import ModelRef
from autotune.core.errors import RequestError
from autotune.requests.checks import resolve_under_root
from autotune.requests.uploads import ModelStore, StoredModel, model_file_sha256
from autotune.tracking.registry import RegisteredVersion, downloaded_onnx, resolve_registered

if TYPE_CHECKING:
    pass


def source_fingerprint(
    ref: ModelRef,
    base_dir: Path,
    models_root: Path | None,
    tracking_uri: str,
    namespace: str | None = None,
) -> str:
    """What a watch compares between ticks to tell whether the model changed.

    A file (`onnx`, or `weights` for an entry point) gives its `model_file_sha256`; relative
    paths are resolved against `base_dir`, or, with `models_root`, confined to it as a client's
    paths are. A registered model gives "NAME/VERSION" resolved now, so a moved alias or a new
    version changes it. A bare entry point gives the entry point itself: changes to its code
    or to what it trains are not detected. A registered model is looked up in `namespace`."""
    if ref.registered is not None:
        version = resolve_registered(ref.registered, tracking_uri, namespace)
        return f"{version.name}/{version.version}"
    if ref.onnx is not None:
        return model_file_sha256(_local_file(ref.onnx, base_dir, models_root, "model.onnx"))
    if ref.weights is not None:
        return model_file_sha256(_local_file(ref.weights, base_dir, models_root, "model.weights"))
    assert ref.entry_point is not None  # the contract guarantees exactly one source
    return ref.entry_point


def _local_file(path: str, base_dir: Path, models_root: Path | None, field: str) -> Path:
    if models_root is not None:
        return resolve_under_root(path, models_root, field)
    candidate = Path(path)
    resolved = candidate if candidate.is_absolute() else (base_dir / candidate).resolve()
    if not resolved.is_file():
        raise RequestError(field, "file must exist", path)
    return resolved


def download_registered(
    version: RegisteredVersion, tracking_uri: str, store: ModelStore
) -> StoredModel:
    """Download the version's artifacts and store the one ONNX model they hold (with its
    external data)."""
    with downloaded_onnx(version, tracking_uri, store.root) as model:
        try:
            return store.put_file(model)
        except RequestError as error:
            label = f"{version.name}/{version.version}"
            raise RequestError(
                "model.registered", f"{error.rule} ({error.value})", label
            ) from error


def materialize(ref: ModelRef, tracking_uri: str, store: ModelStore) -> ModelRef:
    """`ref` itself, unless it names a registered model: then the ONNX file it downloads to
    (with the batch size the request fixes, if it fixes one)."""
    if ref.registered is None:
        return ref
    stored = download_registered(
        resolve_registered(ref.registered, tracking_uri), tracking_uri, store
    )
    return ModelRef(onnx=str(stored.path), fixed_batch=ref.fixed_batch)
