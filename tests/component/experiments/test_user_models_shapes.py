from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("PIL")

from experiments.onet_entry import onet_class  # noqa: E402
from experiments.user_models_shapes import captcha, ddddocr_input, face_crops  # noqa: E402

PACKAGE_SOURCE = """
import numpy as np
from .utils.detect_face import detect_face


class PNet(nn.Module):
    pass


class ONet(nn.Module):
    def __init__(self, pretrained=True):
        super().__init__()
        self.dense = nn.Linear(3, 2)

    def forward(self, x):
        return self.dense(x), torch.softmax(self.dense(x), dim=1)
"""


def test_onet_class_is_taken_from_the_source_without_its_imports() -> None:
    onet = onet_class(PACKAGE_SOURCE)(pretrained=False)
    box, probability = onet(torch.ones(4, 3))
    assert box.shape == probability.shape == (4, 2)
    assert torch.allclose(probability.sum(dim=1), torch.ones(4))


def test_a_source_without_onet_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="mtcnn.py: expected one top-level class ONet, found 0"):
        onet_class(PACKAGE_SOURCE.replace("class ONet", "class RNet"))


def test_captchas_are_ddddocr_inputs_that_differ_by_seed() -> None:
    first = ddddocr_input(captcha(0))
    assert first.shape == (1, 64, 160) and first.dtype == np.float32
    assert 0.0 <= first.min() < first.max() <= 1.0
    assert np.array_equal(first, ddddocr_input(captcha(0)))
    assert not np.array_equal(first, ddddocr_input(captcha(1)))


def test_face_crops_are_normalised_as_mtcnn_does() -> None:
    pytest.importorskip("sklearn")
    crops = face_crops(6)
    assert crops.shape == (6, 3, 48, 48) and crops.dtype == np.float32
    assert crops.min() >= -1.0 and crops.max() <= 1.0
    assert len({crop.tobytes() for crop in crops}) == 6
    assert np.array_equal(crops, face_crops(6))


def test_ctc_decoding_merges_repeats_and_drops_the_blank() -> None:
    from experiments.ddddocr_text_check import ctc_decoded

    assert ctc_decoded([0, 5, 5, 0, 5, 7, 7, 0, 0]) == (5, 5, 7)
    assert ctc_decoded([]) == ()
