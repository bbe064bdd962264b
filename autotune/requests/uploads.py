"""Models kept by content, safely: uploads and server-side files in a `ModelStore`, and the
content hashes that name them.

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
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

from autotune.core.errors import RequestError, TooLarge
from autotune.core.model_files import file_sha256

if TYPE_CHECKING:
    import onnx

ModelKind = Literal["onnx", "safetensors"]
MODEL_FILE = "model.onnx"
WEIGHTS_FILE = "weights.safetensors"
STORED_FILES: dict[ModelKind, str] = {"onnx": MODEL_FILE, "safetensors": WEIGHTS_FILE}
ACCEPTED = (
    "must be an ONNX model, a zip of one ONNX model with its external data, or a safetensors file"
)
_CHUNK = 1 << 20
Transfer = Callable[[Path, Path], Any]


class UploadTooLarge(TooLarge):
    """An upload, or what its zip unpacks to, is over the size cap."""


@dataclass(frozen=True)
class StoredModel:
    kind: ModelKind
    path: Path
    sha256: str


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
        except (UnicodeDecodeError, ValueError, RecursionError):  # nested past the parser's depth
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


# The most entries a model's zip may hold: an ONNX model saved with one external-data file a
# tensor has a few thousand; each entry is a file written, so the count is bounded before any.
MAX_ZIP_ENTRIES = 10_000


def _checked_zip_entries(entries: list[zipfile.ZipInfo], max_bytes: int | None) -> str:
    """The name of the one .onnx entry, once every entry is known to be a plain file: all
    read from the archive's central directory, before anything is unpacked."""
    if len(entries) > MAX_ZIP_ENTRIES:
        raise RequestError(
            "model", f"a zip must hold at most {MAX_ZIP_ENTRIES} entries", len(entries)
        )
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
        raise RequestError("model", ACCEPTED, describe_file(file)) from error
    if not model.graph.node:
        raise RequestError("model", ACCEPTED, describe_file(file))
    return model


def describe_file(file: Path) -> str:
    """What a refused file looks like, for the error message."""
    with open(file, "rb") as handle:
        head = handle.read(8)
    if not head:
        return "an empty file"
    if head[0] == 0x80 and 2 <= head[1] <= 5:
        return "a Python pickle"
    return f"no ONNX graph nodes; {file.stat().st_size} bytes starting {head.hex()}"


def directory_sha256(directory: Path) -> str:
    """sha256 over every file of `directory` (recursively): each one's relative name and
    bytes, in name order; a changed, added or removed file changes it."""
    digest = hashlib.sha256()
    for file in sorted(f for f in directory.rglob("*") if f.is_file()):
        digest.update(f"{file.relative_to(directory).as_posix()}\0".encode())
        digest.update(file_sha256(file).encode())
    return digest.hexdigest()


def model_file_sha256(path: Path) -> str:
    """sha256 of a model file; for an .onnx file its external-data files are covered too (the
    same hash a worker records for the model)."""
    if path.suffix.lower() != ".onnx":
        return file_sha256(path)
    from autotune.core.model_files import external_data_files, onnx_sha256

    return onnx_sha256(path, external_data_files(_parse_onnx(path), path, "model"))
