"""How a torch session reads its module's outputs (`TorchOutputs`), one reader over calls as
the data-parallel session reads its replicas' chunks: several outputs as one structured array,
an output without the batch on its first axis judged whole of a model of a batch of one, else
left out and named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workers.building.observed_outputs import UnjudgedOutputs
from workers.building.torch_io import TorchOutputs, leaf_names


def outputs_of(rows: int) -> dict[str, object]:
    scores = torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3)
    return {"scores": scores, "extra": (scores * 2, torch.ones(5))}


def test_chunks_read_by_one_reader_join_and_say_what_was_left_out() -> None:
    reader = TorchOutputs()
    chunks = [reader.numpy(outputs_of(rows), rows) for rows in (3, 2)]
    joined = np.concatenate(chunks)
    assert joined.dtype.names == ("scores", "extra.0") and joined.shape == (5,)
    assert list(reader.left_out) == ["extra.1"]
    assert "is float32 [5] for a batch of 3: its first axis" in reader.left_out["extra.1"]
    assert leaf_names(reader.structure) == ["scores", "extra.0", "extra.1"]


def test_of_a_batch_of_one_an_output_without_the_batch_first_is_judged_whole() -> None:
    reader = TorchOutputs(fixed_batch=1)
    sequence = torch.arange(12.0).reshape(4, 1, 3)  # [T, 1, C]
    lone = reader.numpy(sequence, 1)
    assert lone.shape == (1, 4, 1, 3) and reader.structure is None and reader.left_out == {}
    both = TorchOutputs(fixed_batch=1).numpy((torch.zeros(1, 2), sequence), 1)
    assert both["output_1"].shape == (1, 4, 1, 3) and both["output_0"].shape == (1, 2)


def test_a_model_without_an_output_to_judge_is_refused() -> None:
    with pytest.raises(UnjudgedOutputs, match="'output' is float32 \\[5\\] for a batch of 2"):
        TorchOutputs().numpy(torch.ones(5), 2)
