"""Whole-model ONNX int8 with 8-bit weights and with 7-bit weights, side by side, on this CPU.

    .venv/bin/python experiments/int8_saturation.py [--models digits ...]
        [--out experiments/results/int8-saturation-cpu.md]

On a CPU without VNNI (AVX2 or AVX-512 alone), ONNX Runtime's int8 kernels add two products
in 16 bits, which full 8-bit weights can overflow; there autotune's quantizers keep weights in
7 bits (`workers.building.cpu_flags.int8_sums_saturate`, ONNX Runtime's reduce_range). For
each example model this measures the accuracy drop of onnxruntime's int8_dynamic and
int8_static (no node in float) built both ways, by setting that one answer, against the
unmodified model as the study judges it; and prints a markdown table with the machine and the
answer this CPU gives.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiments.engine_comparison import machine  # noqa: E402
from experiments.int8_fallback import BATCH, accuracy_of, config, workload_of  # noqa: E402
from workers.building import quantization  # noqa: E402
from workers.building.cpu_flags import int8_sums_saturate  # noqa: E402
from workers.building.runtimes import opened  # noqa: E402
from workers.cache import WorkloadCache  # noqa: E402

MODES = ("int8_dynamic", "int8_static")


def accuracies(name: str, work: Path, seven_bits: bool) -> tuple[float, dict[str, float]]:
    """The unmodified model's accuracy and each mode's, its weights in 7 bits or in 8, from a
    cache of its own (a variant built the other way is not reused)."""
    quantization.int8_sums_saturate = lambda: seven_bits  # type: ignore[attr-defined]
    loaded = WorkloadCache().get(workload_of(name, work))
    batch = loaded.workload.model.fixed_batch or BATCH
    with opened(loaded.session_for(loaded.parse({}))) as session:
        baseline = loaded.judge(session).accuracy
    return baseline, {m: accuracy_of(loaded, config("onnxruntime", m, 0, batch)) for m in MODES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["digits"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = [
        f"Machine: {machine()}; int8 sums saturate here: {int8_sums_saturate()}.",
        "",
        "| model | float accuracy | mode | drop, 8-bit weights | drop, 7-bit weights |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as work:
        for name in args.models:
            baseline, eight = accuracies(name, Path(work), seven_bits=False)
            _, seven = accuracies(name, Path(work), seven_bits=True)
            for mode in MODES:
                lines.append(
                    f"| {name} | {baseline:.4f} | {mode} | {baseline - eight[mode]:+.4f} | "
                    f"{baseline - seven[mode]:+.4f} |"
                )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
