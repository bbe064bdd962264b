from __future__ import annotations

import os

import pytest

from autotune.core.errors import Unsupported
from autotune.core.knobs.config import TrialConfig, parse_config


def test_defaults_for_a_torch_model() -> None:
    assert parse_config({}, "torch") == TrialConfig(
        batch_size=1,
        precision="fp32",
        prune_method="none",
        prune_ratio=0.0,
        engine="torch_eager",
        threads=len(os.sched_getaffinity(0)),
    )


def test_onnx_models_default_to_onnxruntime() -> None:
    assert parse_config({}, "onnx").engine == "onnxruntime"


def test_torch_eager_cannot_run_onnx() -> None:
    with pytest.raises(Unsupported, match="torch_eager"):
        parse_config({"runtime.engine": "torch_eager"}, "onnx")


def test_reads_every_known_key() -> None:
    config = parse_config(
        {
            "batch.size": 8,
            "precision.mode": "int8_dynamic",
            "prune.method": "magnitude",
            "prune.ratio": 0.3,
            "runtime.engine": "onnxruntime",
            "runtime.threads": 1,
        },
        "torch",
    )
    assert config == TrialConfig(8, "int8_dynamic", "magnitude", 0.3, "onnxruntime", 1)


def test_keys_of_unknown_groups_are_ignored() -> None:
    assert parse_config({"future.devices": 2, "later.mode": "max"}, "torch") == parse_config(
        {}, "torch"
    )


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"precision.mode": "int4"}, "precision.mode"),
        ({"prune.method": "random"}, "prune.method"),
        ({"prune.ratio": 0.99}, "prune.ratio"),
        ({"prune.ratio": -0.1}, "prune.ratio"),
        ({"prune.ratio": "half"}, "prune.ratio"),
        ({"batch.size": 0}, "batch.size"),
        ({"batch.size": 2.5}, "batch.size"),
        ({"batch.size": True}, "batch.size"),
        ({"runtime.threads": 0}, "runtime.threads"),
        ({"runtime.engine": "tensorrt"}, "runtime.engine"),
        ({"runtime.provider": "rocm"}, "runtime.provider"),
        ({"shard.devices": 2}, "shard.devices"),
        ({"cuda.graphs": "yes"}, "cuda.graphs"),
    ],
)
def test_a_bad_known_key_is_unsupported_and_named(config: dict, named: str) -> None:
    with pytest.raises(Unsupported, match=named.replace(".", r"\.")):
        parse_config(config, "torch")


def test_variant_id_ignores_spelling_and_non_variant_keys() -> None:
    plain = parse_config({}, "torch").variant_id
    explicit = parse_config(
        {"precision.mode": "fp32", "prune.method": "none", "prune.ratio": 0.4, "batch.size": 64},
        "torch",
    ).variant_id
    assert plain == explicit
    pruned = parse_config({"prune.method": "magnitude", "prune.ratio": 0.4}, "torch").variant_id
    on_ort = parse_config({"runtime.engine": "onnxruntime"}, "torch").variant_id
    assert len({plain, pruned, on_ort}) == 3
