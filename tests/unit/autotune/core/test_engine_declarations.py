"""An engine's declaration is the whole of what the knobs know of it: the precision modes it
runs, with no precision naming it, the package it needs, with the extras of autotune that
install it, and the capabilities it offers on a node, read off the node's profile."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator

import pytest

from autotune.core.contract import CAPABILITIES, HardwareProfile
from autotune.core.knobs import (
    ENGINES,
    PRECISIONS,
    Engine,
    Package,
    Target,
    all_knobs,
    register,
    supports,
)
from autotune.core.knobs.config import parse_config
from tests.conftest import REPO

PROFILES = REPO / "search_spaces" / "profiles"

ANYWHERE = Target(frozenset({"cpu", "cpu.avx2", "cpu.bf16"}), "onnx")


class ExampleEngine(Engine):
    name = "example_float_engine"
    model_format = "onnx"
    precisions = frozenset({"fp32", "bf16"})
    served_as = "files"


@pytest.fixture
def example_engine() -> Iterator[Engine]:
    register(ExampleEngine)
    try:
        yield ENGINES[ExampleEngine.name]
    finally:
        del ENGINES[ExampleEngine.name]


def test_a_new_engine_runs_the_modes_it_declares(example_engine: Engine) -> None:
    for mode in ("fp32", "bf16"):
        config = parse_config(
            {"runtime.engine": example_engine.name, "precision.mode": mode}, "onnx"
        )
        assert supports(config, ANYWHERE) is None


def test_a_new_engine_is_refused_the_modes_it_does_not_declare(example_engine: Engine) -> None:
    config = parse_config(
        {"runtime.engine": example_engine.name, "precision.mode": "int8_static"}, "onnx"
    )
    assert supports(config, ANYWHERE) == (
        "precision.mode=int8_static does not run on runtime.engine=example_float_engine "
        "(it runs bf16, fp32)"
    )


def test_each_engine_declares_the_modes_it_runs() -> None:
    runs_on = {
        mode: {name for name, engine in ENGINES.items() if mode in engine.precisions}
        for mode in PRECISIONS
    }
    assert runs_on == {
        "fp32": {"torch_eager", "torch_compile", "onnxruntime", "openvino"},
        "bf16": {"torch_eager", "torch_compile", "openvino"},
        "fp16": {"torch_eager", "torch_compile", "onnxruntime"},
        "int8_dynamic": {"torch_eager", "torch_compile", "onnxruntime"},
        "int8_static": {"onnxruntime", "openvino"},
        "fp8": {"torch_eager", "torch_compile"},
        "int4_weight_only": {"onnxruntime"},
    }


class AbsentPackageEngine(ExampleEngine):
    name = "example_absent_package"
    package = Package("autotune_example_absent_module", ("cpu",))


def test_an_engine_whose_package_is_missing_says_what_to_install() -> None:
    register(AbsentPackageEngine)
    try:
        config = parse_config({"runtime.engine": AbsentPackageEngine.name}, "onnx")
        missing = Target(
            ANYWHERE.capabilities, "onnx", frozenset({"autotune_example_absent_module"})
        )
        assert supports(config, missing) == (
            "runtime.engine=example_absent_package: autotune_example_absent_module is not "
            "installed; install autotune[cpu] to search runtime.engine=example_absent_package"
        )
        assert supports(config, ANYWHERE) is None
    finally:
        del ENGINES[AbsentPackageEngine.name]


def test_every_declared_package_names_extras_of_autotune() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    declared = {knob.name: knob.package for knob in all_knobs() if knob.package is not None}
    assert {"onnxruntime", "openvino"} <= declared.keys()
    for name, package in declared.items():
        assert package.extras and set(package.extras) <= extras.keys(), name
        for extra in package.extras:
            requirements = " ".join(extras[extra])
            assert package.module in requirements, (name, extra)


def saved_profile(name: str) -> HardwareProfile:
    return HardwareProfile.model_validate_json((PROFILES / f"{name}.json").read_text())


def test_the_contract_holds_no_engines_own_capabilities() -> None:
    """ONNX Runtime's providers and torch.compile are their engines' declarations, not
    entries of the device's table."""
    provided = {capability for engine in ENGINES.values() for capability in engine.provides}
    assert {"ort.cpu", "ort.cuda", "ort.tensorrt", "torch.compile", "openvino"} <= provided
    assert not provided & CAPABILITIES.keys()


def test_engines_read_their_capabilities_off_a_profile() -> None:
    a100 = saved_profile("a100")
    assert {"ort.cpu", "ort.cuda", "ort.tensorrt", "torch.compile"} <= a100.capabilities()
    bare = a100.model_copy(update={"onnxruntime_providers": [], "torch_compile": False})
    assert not {"ort.cpu", "ort.cuda", "ort.tensorrt", "torch.compile"} & bare.capabilities()
    cpu_only = saved_profile("cpu-only").capabilities()
    assert "ort.cpu" in cpu_only and "ort.cuda" not in cpu_only


class ProbedEngine(ExampleEngine):
    name = "example_probed"
    provides = ("example.fast_path",)


def test_a_new_engine_offers_what_its_probe_reported() -> None:
    register(ProbedEngine)
    try:
        profile = saved_profile("cpu-only")
        assert "example.fast_path" not in profile.capabilities()
        probed = profile.model_copy(update={"engines": ["example.fast_path"]})
        assert "example.fast_path" in probed.capabilities()
    finally:
        del ENGINES[ProbedEngine.name]


@pytest.mark.parametrize(
    ("name", "fingerprint"),
    [
        ("a100", "3207142d370f1062"),
        ("cpu-only", "5556b409b82d701d"),
        ("h200x8", "795cb0e456e25dfd"),
    ],
)
def test_saved_profiles_keep_their_fingerprints(name: str, fingerprint: str) -> None:
    """A tuned file names the kind of node it was tuned on by this fingerprint."""
    assert saved_profile(name).fingerprint == fingerprint
