"""Where models come from, safely: uploads and server-side files kept by content in a
`ModelStore`, client-named paths confined to a root, and MLflow registered models.

A model from the network is data, never code. What it is, is decided by its bytes, never by
a file name: a safetensors file, an ONNX model, or a zip of one ONNX model with its external
data. Nothing is unpickled, and an ONNX model's external data must lie in its own directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import struct
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

from autotune.core.contract import REGISTERED_URI, REGISTERED_URI_RULE, ModelRef, Workload
from autotune.core.errors import RequestError

if TYPE_CHECKING:
    import onnx
    from mlflow.tracking import MlflowClient

ModelKind = Literal["onnx", "safetensors"]

MODEL_FILE = "model.onnx"
WEIGHTS_FILE = "weights.safetensors"
STORED_FILES: dict[ModelKind, str] = {"onnx": MODEL_FILE, "safetensors": WEIGHTS_FILE}
ACCEPTED = (
    "must be an ONNX model, a zip of one ONNX model with its external data, or a safetensors file"
)
TUNED_TAG = "autotune.tuned"
# Where the study's tracker logs the optimized model in its run; registering the same
# directory there writes the same files, not a second copy.
TUNED_ARTIFACT_PATH = "optimized_model"
_CHUNK = 1 << 20
_NOT_FOUND = {"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"}
# Between a namespace and a model's name in MLflow: in neither a namespace nor a NAME.
NAMESPACE_SEPARATOR = "~"

Transfer = Callable[[Path, Path], Any]


class UploadTooLarge(RequestError):
    """An upload, or what its zip unpacks to, is over the size cap."""


@dataclass(frozen=True)
class StoredModel:
    kind: ModelKind
    path: Path
    sha256: str


@dataclass(frozen=True)
class RegisteredVersion:
    name: str
    version: str
    source: str
    run_id: str | None


class ModelStore:
    """Models kept by content: `root/<sha256>/model.onnx` (its external data beside it) or
    `root/<sha256>/weights.safetensors`. An entry is checked and assembled in a temporary
    directory under `root`, then renamed into place whole; it is never rewritten."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def put_upload(self, stream: BinaryIO, max_bytes: int) -> StoredModel:
        """Store an upload of at most `max_bytes` (a zip: also unpacked); sha256 is over the
        uploaded bytes. Raises UploadTooLarge past the cap, RequestError for other content."""
        with self._staging() as staging:
            received = staging / "received"
            received.mkdir()
            upload = received / "upload"
            sha256 = _receive(stream, upload, max_bytes)
            existing = self._existing(sha256)
            if existing is not None:
                return existing
            kind = _stage(upload, staging / "model", max_bytes, shutil.move)
            return self._place(staging / "model", kind, sha256)

    def put_file(self, path: Path) -> StoredModel:
        """Store a server-side model file, an ONNX model's external data along with it; sha256
        is over the stored files, as `model_file_sha256` computes it."""
        if not path.is_file():
            raise RequestError("model", "file must exist", str(path))
        with self._staging() as staging:
            staged = staging / "model"
            kind = _stage(path, staged, None, shutil.copyfile)
            sha256 = model_file_sha256(staged / STORED_FILES[kind])
            return self._existing(sha256) or self._place(staged, kind, sha256)

    @contextmanager
    def _staging(self) -> Iterator[Path]:
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".staging-") as staging:
            yield Path(staging)

    def _existing(self, sha256: str) -> StoredModel | None:
        for kind, name in STORED_FILES.items():
            if (self.root / sha256 / name).is_file():
                return StoredModel(kind=kind, path=self.root / sha256 / name, sha256=sha256)
        return None

    def _place(self, staged: Path, kind: ModelKind, sha256: str) -> StoredModel:
        target = self.root / sha256
        try:
            os.rename(staged, target)
        except OSError:
            if not target.is_dir():
                raise
            # Stored meanwhile by another request with the same content.
        return StoredModel(kind=kind, path=target / STORED_FILES[kind], sha256=sha256)


def _receive(stream: BinaryIO, target: Path, max_bytes: int) -> str:
    digest = hashlib.sha256()
    size = 0
    with open(target, "wb") as out:
        while chunk := stream.read(_CHUNK):
            size += len(chunk)
            if size > max_bytes:
                raise UploadTooLarge(
                    "model", f"must be at most {max_bytes} bytes", f"more than {max_bytes} bytes"
                )
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _stage(source: Path, staged: Path, max_bytes: int | None, transfer: Transfer) -> ModelKind:
    """Decide what `source` is by its content and lay it out in `staged` as it is stored."""
    staged.mkdir()
    if _is_safetensors(source):
        transfer(source, staged / WEIGHTS_FILE)
        return "safetensors"
    if zipfile.is_zipfile(source):
        _unzip_onnx(source, staged, max_bytes)
    else:
        _copy_onnx(source, staged, transfer)
    _check_stored_onnx(staged / MODEL_FILE)
    return "onnx"


def _is_safetensors(path: Path) -> bool:
    """An 8-byte little-endian header length, then a JSON header whose every tensor has a
    dtype, a shape and data offsets inside the file."""
    size = path.stat().st_size
    with open(path, "rb") as file:
        prefix = file.read(8)
        if len(prefix) < 8:
            return False
        (header_size,) = struct.unpack("<Q", prefix)
        if header_size > size - 8 or file.read(1) != b"{":
            return False
        file.seek(8)
        try:
            header = json.loads(file.read(header_size))
        except (UnicodeDecodeError, ValueError):
            return False
    if not isinstance(header, dict):
        return False
    data_size = size - 8 - header_size
    tensors = [entry for key, entry in header.items() if key != "__metadata__"]
    return all(_is_tensor_entry(entry, data_size) for entry in tensors)


def _is_tensor_entry(entry: Any, data_size: int) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str):
        return False
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    return (
        isinstance(shape, list)
        and all(isinstance(d, int) and d >= 0 for d in shape)
        and isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) for o in offsets)
        and 0 <= offsets[0] <= offsets[1] <= data_size
    )


def _unzip_onnx(archive_path: Path, staged: Path, max_bytes: int | None) -> None:
    """Unpack a zip of one .onnx file (stored as model.onnx) and its external-data files."""
    try:
        with zipfile.ZipFile(archive_path) as archive:
            entries = archive.infolist()
            model_name = _checked_zip_entries(entries, max_bytes)
            for entry in entries:
                name = MODEL_FILE if entry.filename == model_name else entry.filename
                with archive.open(entry) as source, open(staged / name, "xb") as target:
                    shutil.copyfileobj(source, target, _CHUNK)
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError, zlib.error) as error:
        raise RequestError("model", f"zip archive must be readable ({error})", "zip") from error


def _checked_zip_entries(entries: list[zipfile.ZipInfo], max_bytes: int | None) -> str:
    """The name of the one .onnx entry, once every entry is known to be a plain file."""
    names = [entry.filename for entry in entries]
    for entry in entries:
        file_type = stat.S_IFMT(entry.external_attr >> 16)  # 0: the archiver did not say
        name = entry.filename
        plain = name not in ("", ".", "..") and "/" not in name and "\\" not in name
        if not plain or entry.is_dir() or file_type not in (0, stat.S_IFREG):
            raise RequestError(
                "model",
                "zip entries must be plain files, named without directories, an absolute "
                "path or '..', and no links",
                name,
            )
    if len(set(names)) != len(names):
        raise RequestError("model", "zip entry names must be unique", names)
    # zipfile never yields more than an entry's declared size, so this caps what unpacks.
    unpacked = sum(entry.file_size for entry in entries)
    if max_bytes is not None and unpacked > max_bytes:
        raise UploadTooLarge("model", f"must unpack to at most {max_bytes} bytes", unpacked)
    models = [name for name in names if name.lower().endswith(".onnx")]
    if len(models) != 1:
        raise RequestError("model", "a zip must hold exactly one .onnx file", models)
    return models[0]


def _copy_onnx(source: Path, staged: Path, transfer: Transfer) -> None:
    from autotune.core.model_files import external_data_files

    external = external_data_files(_parse_onnx(source), source, "model")
    for location, file in external.items():
        target = Path(os.path.normpath(staged / location))
        if not target.is_relative_to(staged) or target == staged / MODEL_FILE:
            raise RequestError(
                "model", "external data must stay inside the model's directory", location
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
    transfer(source, staged / MODEL_FILE)


def _check_stored_onnx(file: Path) -> None:
    import onnx

    from autotune.core.model_files import external_data_files

    external = external_data_files(_parse_onnx(file), file, "model")
    stored = {path.resolve() for path in file.parent.rglob("*") if path.is_file()}
    unused = stored - {file.resolve(), *external.values()}
    if unused:
        raise RequestError(
            "model",
            "a zip must hold only the ONNX model and the external data it names",
            sorted(path.name for path in unused),
        )
    try:
        onnx.checker.check_model(str(file))
    except Exception as error:
        raise RequestError("model", "must be a valid ONNX model", str(error)[:500]) from error


def _parse_onnx(file: Path) -> onnx.ModelProto:
    import onnx

    try:
        model = onnx.load_model(str(file), load_external_data=False)
    except Exception as error:
        raise RequestError("model", ACCEPTED, _describe(file)) from error
    if not model.graph.node:
        raise RequestError("model", ACCEPTED, _describe(file))
    return model


def _describe(file: Path) -> str:
    """What a refused file looks like, for the error message."""
    with open(file, "rb") as handle:
        head = handle.read(8)
    if not head:
        return "an empty file"
    if head[0] == 0x80 and 2 <= head[1] <= 5:
        return "a Python pickle"
    return f"no ONNX graph nodes; {file.stat().st_size} bytes starting {head.hex()}"


def check_workload(workload: Workload) -> None:
    """What can be told about a workload without a worker, checked before one starts, so
    that bad input is answered in seconds: its files exist, an ONNX file holds an ONNX graph
    (external data inside its directory), entry points import and name an attribute.
    Raises RequestError naming the field; what only loading can tell (a factory that fails,
    data that does not fit the model) is left to the worker's inspection."""
    model, data = workload.model, workload.data
    if model.onnx is not None:
        _check_onnx_file(model.onnx, "model.onnx")
    if model.weights is not None and not Path(model.weights).is_file():
        raise RequestError("model.weights", "file must exist", model.weights)
    if data.npz is not None and not Path(data.npz).is_file():
        raise RequestError("data.npz", "file must exist", data.npz)
    entry_points = {
        "model.entry_point": model.entry_point,
        "data.entry_point": data.entry_point,
        "metric.entry_point": workload.metric.entry_point,
    }
    for field, entry_point in entry_points.items():
        if entry_point is not None:
            _check_entry_point(entry_point, workload.python_path, field)


def _check_onnx_file(path: str, field: str) -> None:
    import onnx

    from autotune.core.model_files import external_data_files

    file = Path(path)
    if not file.is_file():
        raise RequestError(field, "file must exist", path)
    try:
        model = onnx.load_model(str(file), load_external_data=False)
    except Exception as error:
        raise RequestError(field, f"must be an ONNX model ({_describe(file)})", path) from error
    if not model.graph.node:
        raise RequestError(field, f"must be an ONNX model ({_describe(file)})", path)
    external_data_files(model, file, field)


def _check_entry_point(entry_point: str, python_path: list[str], field: str) -> None:
    """Import the entry point's module as a worker would (`python_path` first on sys.path);
    sys.path is left as it was."""
    from autotune.core.model_files import resolve_entry_point

    saved = list(sys.path)
    try:
        resolve_entry_point(entry_point, python_path, field)
    finally:
        sys.path[:] = saved


def resolve_under_root(path: str, root: Path, field: str, directory: bool = False) -> Path:
    """A client-named file (or, with `directory`, a directory whose every file stays inside
    `root` too): a relative path that resolves (links followed) to an existing file inside
    `root`."""
    if Path(path).is_absolute():
        raise RequestError(field, "must be a relative path", path)
    base = root.resolve()
    try:
        resolved = (base / path).resolve()
    except (OSError, ValueError, RuntimeError) as error:
        raise RequestError(field, f"must be a valid path ({error})", path) from error
    if not resolved.is_relative_to(base):
        raise RequestError(field, "must stay inside the directory it is relative to", path)
    if directory:
        if not resolved.is_dir():
            raise RequestError(field, "must name an existing directory", path)
        outside = [f for f in resolved.rglob("*") if not f.resolve().is_relative_to(base)]
        if outside:
            raise RequestError(field, "must hold no link that leads outside it", str(outside[0]))
        return resolved
    if not resolved.is_file():
        raise RequestError(field, "must name an existing file", path)
    return resolved


def directory_sha256(directory: Path) -> str:
    """sha256 over every file of `directory` (recursively): each one's relative name and
    bytes, in name order; a changed, added or removed file changes it."""
    digest = hashlib.sha256()
    for file in sorted(f for f in directory.rglob("*") if f.is_file()):
        digest.update(f"{file.relative_to(directory).as_posix()}\0".encode())
        digest.update(file_sha256(file).encode())
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    from autotune.core.model_files import files_sha256

    return files_sha256([path])


def model_file_sha256(path: Path) -> str:
    """sha256 of a model file; for an .onnx file its external-data files are covered too (the
    same hash a worker records for the model)."""
    if path.suffix.lower() != ".onnx":
        return file_sha256(path)
    from autotune.core.model_files import external_data_files, onnx_sha256

    return onnx_sha256(path, external_data_files(_parse_onnx(path), path, "model"))


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


def download_registered(
    version: RegisteredVersion, tracking_uri: str, store: ModelStore
) -> StoredModel:
    """Download the version's artifacts and store the one ONNX model they hold (with its
    external data)."""
    import mlflow

    location = _client(tracking_uri).get_model_version_download_uri(version.name, version.version)
    label = f"{version.name}/{version.version}"
    store.root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=store.root, prefix=".download-") as tmp:
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
                f"{label}: {[p.name for p in models]}",
            )
        try:
            return store.put_file(models[0])
        except RequestError as error:
            raise RequestError(
                "model.registered", f"{error.rule} ({error.value})", label
            ) from error


def register_tuned(
    tracking_uri: str,
    name: str,
    artifact_dir: Path,
    run_id: str,
    tags: dict[str, str],
    alias: str = "tuned",
    namespace: str | None = None,
) -> str:
    """Register `artifact_dir` as a version of registered model `name` (created if missing;
    inside `namespace`, see `registered_name`), tag it (`autotune.tuned=true` and `tags`),
    point `alias` at it and return the version. An ONNX artifact is logged as an MLflow
    onnx model (`autotune.tracking.mlflow_model`), so `mlflow.pyfunc` loads it too.

    The directory is logged to the run under `optimized_model` and the version's source is
    that artifact location: `models:/NAME@ALIAS` then downloads these very files. Registering
    the same run's directory again reuses its version."""
    from mlflow.exceptions import MlflowException
    from mlflow.store.artifact.runs_artifact_repo import RunsArtifactRepository

    from autotune.tracking.mlflow_model import model_directory

    if REGISTERED_URI.match(f"models:/{name}@{alias}") is None:
        raise RequestError("name", REGISTERED_URI_RULE, f"models:/{name}@{alias}")
    name = registered_name(name, namespace)
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
    all_tags = {TUNED_TAG: "true", **tags}
    registered = client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
    same = [mv for mv in registered if mv.source == source]
    if same:
        version = str(same[0].version)
        for key, value in all_tags.items():
            client.set_model_version_tag(name, version, key, value)
    else:
        created = client.create_model_version(name, source, run_id=run_id, tags=all_tags)
        version = str(created.version)
    client.set_registered_model_alias(name, alias, version)
    return version


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


def materialize(ref: ModelRef, tracking_uri: str, store: ModelStore) -> ModelRef:
    """`ref` itself, unless it names a registered model: then the ONNX file it downloads to."""
    if ref.registered is None:
        return ref
    stored = download_registered(
        resolve_registered(ref.registered, tracking_uri), tracking_uri, store
    )
    return ModelRef(onnx=str(stored.path))
