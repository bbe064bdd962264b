"""Model sources: the content-addressed store, confined paths, and the MLflow registry."""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import pickle
import stat
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from mlflow.tracking import MlflowClient
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import set_external_data
from safetensors.numpy import save as save_safetensors

from autotune.core.contract import ModelRef
from autotune.core.errors import RequestError
from autotune.core.model_files import file_sha256
from autotune.requests.checks import resolve_under_root
from autotune.requests.sources import download_registered, materialize, source_fingerprint
from autotune.requests.uploads import (
    ACCEPTED,
    ModelStore,
    UploadTooLarge,
    model_file_sha256,
)
from autotune.tracking.registry import register_tuned, resolve_registered
from tests.conftest import copy_mlflow_store
from tests.onnx_models import tiny_onnx
from tests.tuned_documents import tuned_document
from workers.loading.workloads import load_onnx

CAP = 1 << 20


def save_with_external_data(model: onnx.ModelProto, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "net.onnx"
    onnx.save_model(
        model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0
    )
    return path


def escaping_onnx() -> bytes:
    """A model whose initializer claims its data lies in '../secret'."""
    model = tiny_onnx()
    tensor = model.graph.initializer[0]
    set_external_data(tensor, location="../secret")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    return model.SerializeToString()


def sparse_escaping_onnx(where: str) -> bytes:
    """A model with a sparse tensor whose indices claim their data lies in '../secret': a
    sparse initializer, or the sparse value of a Constant node."""
    values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "W")
    indices = numpy_helper.from_array(np.array([0, 3], np.int64), "W_indices")
    set_external_data(indices, location="../secret")
    indices.data_location = TensorProto.EXTERNAL
    indices.ClearField("raw_data")
    indices.ClearField("int64_data")
    sparse = helper.make_sparse_tensor(values, indices, [4])
    nodes = [helper.make_node("Add", ["X", "W"], ["Y"])]
    if where == "attribute":
        nodes.insert(0, helper.make_node("Constant", [], ["W"], sparse_value=sparse))
    graph = helper.make_graph(
        nodes,
        "sparse",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
        sparse_initializer=[sparse] if where == "initializer" else None,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def zipped(entries: dict[str, bytes], links: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def upload(store: ModelStore, data: bytes, max_bytes: int = CAP):  # type: ignore[no-untyped-def]
    return store.put_upload(io.BytesIO(data), max_bytes)


def run_onnx(path: Path, inputs: np.ndarray) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": inputs})[0]


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "models")


def test_onnx_upload_is_detected_and_stored_by_content(store: ModelStore) -> None:
    data = tiny_onnx().SerializeToString()
    stored = upload(store, data)
    sha256 = hashlib.sha256(data).hexdigest()
    assert (stored.kind, stored.sha256) == ("onnx", sha256)
    assert stored.path == store.root / sha256 / "model.onnx"
    assert stored.path.read_bytes() == data
    assert load_onnx(str(stored.path), "model.onnx").sha256 == sha256
    assert [p.name for p in store.root.iterdir()] == [sha256], "no staging left behind"


def test_safetensors_upload_is_detected(store: ModelStore) -> None:
    data = save_safetensors({"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    stored = upload(store, data)
    assert stored.kind == "safetensors"
    assert stored.path == store.root / hashlib.sha256(data).hexdigest() / "weights.safetensors"
    assert stored.path.read_bytes() == data


def test_the_same_bytes_twice_give_the_same_path_without_rewriting(store: ModelStore) -> None:
    data = tiny_onnx().SerializeToString()
    first = upload(store, data)
    written = first.path.stat().st_mtime_ns
    second = upload(store, data)
    assert second == first
    assert first.path.stat().st_mtime_ns == written
    assert len(list(store.root.iterdir())) == 1


def test_a_server_side_file_is_stored_like_its_upload(store: ModelStore, tmp_path: Path) -> None:
    path = tmp_path / "anything.bin"
    path.write_bytes(tiny_onnx().SerializeToString())
    assert store.put_file(path) == upload(store, path.read_bytes())


@pytest.mark.parametrize(
    ("data", "detected"),
    [
        (pickle.dumps({"weights": [1.0, 2.0]}), "pickle"),
        (np.random.default_rng(0).bytes(4096), "bytes starting"),
        (b"", "empty"),
        (b'{"not": "a model"}', "bytes starting"),
    ],
    ids=["pickle", "random", "empty", "json"],
)
def test_other_content_is_refused(store: ModelStore, data: bytes, detected: str) -> None:
    with pytest.raises(RequestError) as info:
        upload(store, data)
    assert (info.value.field, info.value.rule) == ("model", ACCEPTED)
    assert detected in info.value.value
    assert not any(store.root.iterdir())


def test_an_upload_over_the_cap_is_refused_and_leaves_nothing(store: ModelStore) -> None:
    data = tiny_onnx().SerializeToString()
    with pytest.raises(UploadTooLarge) as info:
        upload(store, data, max_bytes=len(data) - 1)
    assert info.value.field == "model"
    assert not any(store.root.iterdir())


def test_a_zip_bomb_is_refused_by_its_unpacked_size(store: ModelStore) -> None:
    bomb = zipped({"model.onnx": tiny_onnx().SerializeToString(), "weights.bin": bytes(CAP)})
    assert len(bomb) < CAP // 100
    with pytest.raises(UploadTooLarge, match="unpack"):
        upload(store, bomb)
    assert not any(store.root.iterdir())


def test_a_zip_of_too_many_entries_is_refused_before_any_is_unpacked(
    store: ModelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.requests import uploads

    entries = {"model.onnx": tiny_onnx().SerializeToString()}
    entries |= {f"part-{i}.bin": b"" for i in range(uploads.MAX_ZIP_ENTRIES)}
    archive = zipped(entries)
    opened: list[str] = []
    real_open = uploads.zipfile.ZipFile.open
    monkeypatch.setattr(
        uploads.zipfile.ZipFile,
        "open",
        lambda self, name, *a, **k: opened.append(str(name)) or real_open(self, name, *a, **k),
    )
    with pytest.raises(RequestError, match=f"at most {uploads.MAX_ZIP_ENTRIES} entries"):
        upload(store, archive)
    assert not opened and not any(store.root.iterdir())


def test_a_zip_with_the_model_and_its_external_data_is_accepted(
    store: ModelStore, tmp_path: Path
) -> None:
    path = save_with_external_data(tiny_onnx(2.0), tmp_path / "src")
    archive = zipped({p.name: p.read_bytes() for p in path.parent.iterdir()})
    stored = upload(store, archive)
    assert stored.kind == "onnx" and stored.sha256 == hashlib.sha256(archive).hexdigest()
    assert sorted(p.name for p in stored.path.parent.iterdir()) == ["model.onnx", "weights.bin"]
    outputs = run_onnx(stored.path, np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(outputs, np.arange(4, dtype=np.float32) + 2.0)
    assert load_onnx(str(stored.path), "model.onnx").sha256 == model_file_sha256(stored.path)


@pytest.mark.parametrize(
    ("entries", "links", "rule_fragment"),
    [
        ({"model.onnx": b"m", "../x": b"x"}, (), "plain files"),
        ({"model.onnx": b"m", "/etc/x": b"x"}, (), "plain files"),
        ({"sub/model.onnx": b"m"}, (), "plain files"),
        ({"model.onnx": b"m"}, ("weights.bin",), "plain files"),
        ({"a.onnx": b"m", "b.onnx": b"m"}, (), "exactly one .onnx"),
        ({"weights.bin": b"w"}, (), "exactly one .onnx"),
        ({"model.onnx": None, "notes.txt": b"x"}, (), "only the ONNX model"),
    ],
    ids=["dotdot", "absolute", "directory", "symlink", "two-models", "no-model", "extra-file"],
)
def test_unsafe_or_unexpected_zips_are_refused(
    store: ModelStore, entries: dict[str, bytes | None], links: tuple[str, ...], rule_fragment: str
) -> None:
    real = tiny_onnx().SerializeToString()
    archive = zipped({name: data or real for name, data in entries.items()}, links)
    with pytest.raises(RequestError) as info:
        upload(store, archive)
    assert info.value.field == "model" and rule_fragment in info.value.rule
    assert not isinstance(info.value, UploadTooLarge)
    assert not any(store.root.iterdir())


def test_external_data_outside_the_model_directory_is_refused(
    store: ModelStore, tmp_path: Path
) -> None:
    (tmp_path / "secret").write_bytes(bytes(16))
    (tmp_path / "dir").mkdir()
    server_file = tmp_path / "dir" / "model.onnx"
    server_file.write_bytes(escaping_onnx())
    attempts = [
        lambda: upload(store, escaping_onnx()),
        lambda: upload(store, zipped({"model.onnx": escaping_onnx()})),
        lambda: store.put_file(server_file),
    ]
    for attempt in attempts:
        with pytest.raises(RequestError) as info:
            attempt()
        assert "inside the model's directory" in info.value.rule
        assert info.value.value == "../secret"
    assert not any(store.root.iterdir())


@pytest.mark.parametrize("where", ["initializer", "attribute"])
def test_sparse_tensor_indices_outside_the_model_directory_are_refused(
    store: ModelStore, tmp_path: Path, where: str
) -> None:
    """Not left to onnx.checker: the external-data check itself refuses them."""
    from autotune.core.model_files import external_data_files

    data = sparse_escaping_onnx(where)
    (tmp_path / "secret").write_bytes(bytes(16))
    (tmp_path / "dir").mkdir()
    server_file = tmp_path / "dir" / "model.onnx"
    server_file.write_bytes(data)
    attempts = [
        lambda: external_data_files(
            onnx.load_model(str(server_file), load_external_data=False), server_file, "model"
        ),
        lambda: upload(store, data),
        lambda: upload(store, zipped({"model.onnx": data})),
        lambda: store.put_file(server_file),
    ]
    for attempt in attempts:
        with pytest.raises(RequestError) as info:
            attempt()
        assert (info.value.field, info.value.value) == ("model", "../secret")
        assert info.value.rule == "external data must stay inside the model's directory"
    assert not any(store.root.iterdir())


def test_a_server_side_file_brings_its_external_data(store: ModelStore, tmp_path: Path) -> None:
    path = save_with_external_data(tiny_onnx(3.0), tmp_path / "src")
    stored = store.put_file(path)
    assert stored.sha256 == model_file_sha256(path) == model_file_sha256(stored.path)
    outputs = run_onnx(stored.path, np.zeros(4, np.float32))
    np.testing.assert_array_equal(outputs, np.full(4, 3.0, np.float32))


def test_model_file_sha256_covers_external_data(tmp_path: Path) -> None:
    path = save_with_external_data(tiny_onnx(1.0), tmp_path)
    before, model_bytes = model_file_sha256(path), file_sha256(path)
    data = tmp_path / "weights.bin"
    data.write_bytes(np.full(4, 5.0, np.float32).tobytes())
    assert file_sha256(path) == model_bytes
    assert model_file_sha256(path) != before


def test_resolve_under_root_keeps_client_paths_inside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "m.onnx").write_bytes(b"m")
    (tmp_path / "outside.onnx").write_bytes(b"o")
    os.symlink(tmp_path / "outside.onnx", root / "link.onnx")
    assert resolve_under_root("sub/m.onnx", root, "model.onnx") == (root / "sub/m.onnx").resolve()
    refused = {
        str(root / "sub" / "m.onnx"): "relative",
        "../outside.onnx": "inside",
        "sub/../../outside.onnx": "inside",
        "link.onnx": "inside",
        "sub/absent.onnx": "existing file",
        "sub": "existing file",
    }
    for path, rule_fragment in refused.items():
        with pytest.raises(RequestError) as info:
            resolve_under_root(path, root, "model.onnx")
        assert (info.value.field, info.value.value) == ("model.onnx", path)
        assert rule_fragment in info.value.rule


# ---------------------------------------------------------------------------------------------
# MLflow registry


@pytest.fixture(scope="module")
def registry(
    tmp_path_factory: pytest.TempPathFactory, mlflow_store_template: Path
) -> tuple[str, str]:
    """A tracking URI of a fresh SQLite store and an experiment whose artifacts stay in tmp."""
    root = tmp_path_factory.mktemp("mlflow")
    uri = copy_mlflow_store(mlflow_store_template, root / "mlflow.db")
    experiment = MlflowClient(uri).create_experiment("t", artifact_location=str(root / "art"))
    return uri, experiment


def tuned_dir(path: Path, offset: float) -> Path:
    path.mkdir(parents=True)
    onnx.save_model(tiny_onnx(offset), str(path / "model.onnx"))
    (path / "tuned.yaml").write_text(f"offset: {offset}\n")
    return path


def test_a_registered_version_is_described_and_carries_its_key_figures(
    registry: tuple[str, str], tmp_path: Path
) -> None:
    uri, experiment = registry
    client = MlflowClient(uri)
    run = client.create_run(experiment).info.run_id
    tuned = tuned_document(tuned_dir(tmp_path / "t", 1.0), run, experiment)
    version = client.get_model_version("described", register_tuned(uri, "described", tuned, {}))
    description = version.description
    assert description.startswith("2.00× throughput (95% CI 1.90–2.10×)")
    assert "- `runtime.engine`: onnxruntime" in description and "- `batch.size`: 8" in description
    assert "Xeon, 2 cores (hardware fingerprint `cpu-abc`)" in description
    assert f"[its MLflow run](#/experiments/{experiment}/runs/{run})" in description
    assert "trial 7 of 16" in description
    figures = {k: v for k, v in version.tags.items() if k.startswith("metric.")}
    assert figures == {"metric.accuracy": "0.9844", "metric.latency_p95_ms": "0.06013"}


def test_registry_round_trip(
    registry: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, experiment = registry
    client = MlflowClient(uri)
    store = ModelStore(tmp_path / "models")
    first = tuned_dir(tmp_path / "first", 1.0)
    run = client.create_run(experiment).info.run_id
    assert register_tuned(uri, "tiny", tuned_document(first, run), {"autotune.study": "s1"}) == "1"
    assert register_tuned(uri, "tiny", tuned_document(first, run), {"autotune.study": "s1"}) == "1"
    assert client.get_model_version("tiny", "1").tags["autotune.tuned"] == "true"

    by_alias = resolve_registered("models:/tiny@tuned", uri)
    assert by_alias == resolve_registered("models:/tiny/1", uri)
    assert (by_alias.version, by_alias.run_id) == ("1", run)
    stored = download_registered(by_alias, uri, store)
    assert stored.sha256 == file_sha256(first / "model.onnx")
    ref = ModelRef(registered="models:/tiny@tuned")
    assert source_fingerprint(ref, tmp_path, None, uri) == "tiny/1"

    second = tuned_dir(tmp_path / "second", 2.0)
    other_run = client.create_run(experiment).info.run_id
    assert register_tuned(uri, "tiny", tuned_document(second, other_run), {}) == "2"
    assert source_fingerprint(ref, tmp_path, None, uri) == "tiny/2"
    assert resolve_registered("models:/tiny/1", uri).version == "1"
    materialized = materialize(ref, uri, store)
    assert materialized.onnx is not None
    assert materialize(ref.model_copy(update={"fixed_batch": 2}), uri, store).fixed_batch == 2
    assert file_sha256(Path(materialized.onnx)) == file_sha256(second / "model.onnx")

    # Plain MLflow finds the same files behind the alias.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    import mlflow

    downloaded = Path(mlflow.artifacts.download_artifacts("models:/tiny@tuned"))
    assert (downloaded / "model.onnx").read_bytes() == (second / "model.onnx").read_bytes()


def batched_dir(path: Path, offset: float, config: dict[str, Any]) -> Path:
    """An export of Y = X + W over a batch of four-element rows, as the data plane writes it:
    the model, `variant.json` and the input and output examples."""
    from workers.building.exports import write_examples

    model = tiny_onnx(offset)
    model.graph.input[0].type.tensor_type.shape.dim.insert(0, onnx.TensorShapeProto.Dimension())
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim.insert(0, onnx.TensorShapeProto.Dimension())
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    path.mkdir(parents=True)
    onnx.save_model(model, str(path / "model.onnx"))
    (path / "variant.json").write_text(json.dumps({"config": config}))
    write_examples(model.SerializeToString(), np.ones((2, 4), np.float32), path)
    return path


def test_a_registered_onnx_runtime_artifact_is_an_mlflow_onnx_model_run_as_measured(
    registry: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mlflow.pyfunc` loads `models:/NAME@tuned` with the measured threads and graph level,
    the input example the export wrote and the signature MLflow inferred from it."""
    import mlflow
    import yaml

    uri, experiment = registry
    config = {"runtime.engine": "onnxruntime", "runtime.threads": 1, "runtime.graph_opt": "basic"}
    artifact = batched_dir(tmp_path / "artifact", 3.0, config)
    run = MlflowClient(uri).create_run(experiment).info.run_id
    register_tuned(uri, "served", tuned_document(artifact, run), {})

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    loaded = mlflow.pyfunc.load_model("models:/served@tuned")
    outputs = loaded.predict(np.zeros((3, 4), np.float32))
    np.testing.assert_allclose(outputs["Y"], np.full((3, 4), 3.0))
    assert loaded.metadata.signature is not None
    assert loaded.metadata.metadata["autotune_config"] == config
    local = Path(mlflow.artifacts.download_artifacts("models:/served@tuned"))
    flavour = yaml.safe_load((local / "MLmodel").read_text())["flavors"]["onnx"]
    assert flavour["onnx_session_options"] == {
        "inter_op_num_threads": 1,
        "intra_op_num_threads": 1,
        "graph_optimization_level": 1,  # ORT_ENABLE_BASIC
    }
    assert flavour["providers"] == ["CPUExecutionProvider"]
    assert (local / "model.onnx").read_bytes() == (artifact / "model.onnx").read_bytes()
    assert json.loads((local / "variant.json").read_text())["config"] == config
    requirements = (local / "requirements.txt").read_text().splitlines()
    import onnxruntime

    assert f"onnx=={onnx.__version__}" in requirements
    assert f"onnxruntime=={onnxruntime.__version__}" in requirements
    assert f"numpy=={np.__version__}" in requirements
    assert any(line.startswith("mlflow==") for line in requirements)


def test_a_registered_openvino_artifact_is_served_by_openvino_as_measured(
    registry: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine that declares `served_as = "autotune"` is registered as a pyfunc whose loader
    runs the artifact on that engine: OpenVINO's choice is served by OpenVINO, with the
    measured threads and batch size, not by ONNX Runtime."""
    pytest.importorskip("openvino")
    import mlflow
    import yaml

    from workers.building.knobs.openvino import OpenVinoSession

    uri, experiment = registry
    config = {"runtime.engine": "openvino", "runtime.threads": 1, "batch.size": 2}
    artifact = batched_dir(tmp_path / "artifact", 3.0, config)
    run = MlflowClient(uri).create_run(experiment).info.run_id
    register_tuned(uri, "served-ov", tuned_document(artifact, run), {})

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    loaded = mlflow.pyfunc.load_model("models:/served-ov@tuned")
    outputs = loaded.predict(np.zeros((3, 4), np.float32))
    np.testing.assert_allclose(outputs["Y"], np.full((3, 4), 3.0))
    served = loaded._model_impl
    assert isinstance(served.predictor.session, OpenVinoSession)
    assert served.predictor.session.applied["threads"] == "1"
    assert served.predictor.batch_size == 2
    assert loaded.metadata.signature is not None
    local = Path(mlflow.artifacts.download_artifacts("models:/served-ov@tuned"))
    flavours = yaml.safe_load((local / "MLmodel").read_text())["flavors"]
    assert "onnx" not in flavours
    assert flavours["python_function"]["loader_module"] == "workers.serving"
    assert (local / "model.onnx").read_bytes() == (artifact / "model.onnx").read_bytes()
    requirements = (local / "requirements.txt").read_text().splitlines()
    assert f"openvino=={importlib.metadata.version('openvino')}" in requirements


@pytest.mark.parametrize(
    "uri", ["models:/known@nowhere", "models:/absent/1", "models:/absent@tuned", "models:/known/99"]
)
def test_unknown_registered_models_are_request_errors(
    registry: tuple[str, str], tmp_path: Path, uri: str
) -> None:
    tracking_uri, experiment = registry
    if uri.startswith("models:/known"):
        run = MlflowClient(tracking_uri).create_run(experiment).info.run_id
        register_tuned(
            tracking_uri, "known", tuned_document(tuned_dir(tmp_path / "d", 1.0), run), {}
        )
    with pytest.raises(RequestError) as info:
        resolve_registered(uri, tracking_uri)
    assert (info.value.field, info.value.value) == ("model.registered", uri)


def test_a_registered_version_without_an_onnx_model_is_refused(
    registry: tuple[str, str], tmp_path: Path
) -> None:
    tracking_uri, experiment = registry
    directory = tmp_path / "no-model"
    directory.mkdir()
    (directory / "tuned.yaml").write_text("config: {}\n")
    run = MlflowClient(tracking_uri).create_run(experiment).info.run_id
    register_tuned(tracking_uri, "no-onnx", tuned_document(directory, run), {})
    version = resolve_registered("models:/no-onnx@tuned", tracking_uri)
    with pytest.raises(RequestError, match="exactly one .onnx") as info:
        download_registered(version, tracking_uri, ModelStore(tmp_path / "models"))
    assert info.value.field == "model.registered"


def test_file_fingerprints_follow_the_file_and_entry_points_the_name(tmp_path: Path) -> None:
    path = save_with_external_data(tiny_onnx(1.0), tmp_path / "m")
    ref = ModelRef(onnx="m/net.onnx")
    before = source_fingerprint(ref, tmp_path, None, "unused")
    assert before == model_file_sha256(path)
    assert source_fingerprint(ref, tmp_path / "elsewhere", tmp_path, "unused") == before
    (path.parent / "weights.bin").write_bytes(np.full(4, 7.0, np.float32).tobytes())
    assert source_fingerprint(ref, tmp_path, None, "unused") != before
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(save_safetensors({"w": np.zeros(2, np.float32)}))
    with_weights = ModelRef(entry_point="pkg.mod:build", weights=str(weights))
    assert source_fingerprint(with_weights, tmp_path, None, "unused") == file_sha256(weights)
    bare = ModelRef(entry_point="pkg.mod:build")
    assert source_fingerprint(bare, tmp_path, None, "unused") == "pkg.mod:build"
    with pytest.raises(RequestError, match="relative"):
        source_fingerprint(with_weights, tmp_path, tmp_path, "unused")
