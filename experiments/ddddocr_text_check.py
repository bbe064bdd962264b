"""Does the tuned ddddocr model read the same text as the unmodified one?

    .venv/bin/python experiments/ddddocr_text_check.py WORK

WORK is the `--work` folder of `experiments/user_models.py` after it tuned `ddddocr-common`
and `ddddocr-old`. For each, the tuned artifact (`autotune.load`) and the unmodified model
read the experiment's captchas; this prints how often their per-timestep classes (argmax over
the characters) agree and for how many captchas the CTC-decoded text (as ddddocr decodes it:
repeats merged, blank 0 dropped) is the same."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODELS = ("ddddocr-common", "ddddocr-old")


def ctc_decoded(classes: Iterable[int]) -> tuple[int, ...]:
    """ddddocr's CTC decoding of per-timestep classes: repeats merged, the blank (0) dropped."""
    kept, previous = [], None
    for index in classes:
        if index != previous and index != 0:
            kept.append(int(index))
        previous = index
    return tuple(kept)


def text_agreement(folder: Path) -> str:
    import autotune
    from autotune.requests.request import load_request
    from workers.cache import WorkloadCache

    loaded = WorkloadCache().get(load_request(folder / "request.yaml").workload(folder))
    with autotune.load(folder / "tuned.yaml", [str(folder)]) as model:
        tuned = model.predict_packed(loaded.data.inputs)
    reference = loaded.reference_outputs()
    classes = [np.asarray(out).reshape(len(out), -1, out.shape[-1]).argmax(-1)
               for out in (reference, tuned)]  # fmt: skip
    same = sum(ctc_decoded(a) == ctc_decoded(b) for a, b in zip(*classes, strict=True))
    return (
        f"{folder.name}: per-timestep classes agree at {(classes[0] == classes[1]).mean():.1%} "
        f"of {classes[0].size} timesteps; decoded text the same for {same} of "
        f"{len(classes[0])} captchas"
    )


def main() -> None:
    work = Path(sys.argv[1])
    for name in MODELS:
        print(text_agreement(work / name), flush=True)


if __name__ == "__main__":
    main()
