"""Fine-tuned task models convert to the transformers class that computes the same thing
(stages/models/convert_heads.py): for every backbone (BERT, ALBERT, ELECTRA, GPT-2, Llama)
and head (sequence classification and regression, spans, tags), the converted weights
load into that class with no key missing or left over, and its logits equal ours (fp32,
1e-5) on a right-padded batch. A T5 becomes T5ForConditionalGeneration; the original
Transformer is refused with the reason. Weights are perturbed so that no bias or norm
gain sits at a value a wrong mapping would also reproduce."""

from __future__ import annotations

import os

import pytest

from tests.support.pinned import import_pinned
import torch

from stages.finetune.model_source import build_task_model
from stages.models import GPT, Bert, BertConfig, GPTConfig, T5, T5Config
from stages.models.convert_heads import HfExportRefused, task_model_to_hf
from stages.models.t5.transformer import Transformer
from tests.support.perturb import perturb_

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = import_pinned("transformers")

VOCAB, B, T, PAD = 99, 2, 10, 1
BACKBONES = {
    "bert": lambda: Bert(BertConfig(vocab_size=VOCAB, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4,
                                    dropout=0.0, pad_token_id=PAD)),
    "albert": lambda: Bert(BertConfig(vocab_size=VOCAB, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4,
                                      dropout=0.0, variant="albert", embedding_size=16)),
    "electra": lambda: Bert(BertConfig(vocab_size=VOCAB, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4,
                                       dropout=0.0, variant="electra", embedding_size=16)),
    "gpt2": lambda: GPT(GPTConfig(vocab_size=VOCAB, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4)),
    "llama": lambda: GPT(GPTConfig(vocab_size=VOCAB, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4,
                                   variant="llama", num_kv_heads=2)),
}
HEADS = {  # head_config, labels passed to the export, transformers class suffix
    "classification": ({"head": "sequence_classification", "num_labels": 3}, ("a", "b", "c"),
                       "ForSequenceClassification"),
    "regression": ({"head": "sequence_classification", "num_labels": 1}, None, "ForSequenceClassification"),
    "spans": ({"head": "span_extraction"}, None, "ForQuestionAnswering"),
    "tags": ({"head": "token_classification", "num_labels": 5}, ("O", "B-X", "I-X", "B-Y", "I-Y"),
             "ForTokenClassification"),
}
HF_BASE = {"bert": "Bert", "albert": "Albert", "electra": "Electra", "gpt2": "GPT2", "llama": "Llama"}


def batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(5, VOCAB, (B, T), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    ids[0, 6:] = PAD  # HF's GPT and Llama classifiers find the last real token by the pad id
    return {"input_ids": ids, "attention_mask": mask}


def hf_model(config: dict, state: dict):
    hf_config = transformers.AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    model = getattr(transformers, config["architectures"][0])(hf_config).eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    return model, missing, unexpected


@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_task_model_equals_its_transformers_class(backbone, head):
    head_config, labels, suffix = HEADS[head]
    torch.manual_seed(0)
    ours = perturb_(build_task_model(head_config, BACKBONES[backbone]()))
    config, state = task_model_to_hf(ours, labels=labels)
    if backbone in ("gpt2", "llama"):
        config["pad_token_id"] = PAD  # what stages.finetune.hf_export sets from the tokenizer
    assert config["architectures"] == [HF_BASE[backbone] + suffix]
    theirs, missing, unexpected = hf_model(config, state)
    assert not unexpected
    # Buffers HF rebuilds itself (position ids, rotary frequencies) are all it may lack.
    assert not [name for name in missing if name in dict(theirs.named_parameters())]
    inputs = batch()
    with torch.no_grad():
        expected = ours(**inputs)
        got = theirs(**inputs)
    real = inputs["attention_mask"].bool()  # padded positions are never read (a decoder's differ)
    if head == "spans":
        torch.testing.assert_close(got.start_logits[real], expected[0][real], rtol=0, atol=1e-5)
        torch.testing.assert_close(got.end_logits[real], expected[1][real], rtol=0, atol=1e-5)
        return
    if head == "tags":
        torch.testing.assert_close(got.logits[real], expected[0][real], rtol=0, atol=1e-5)
        assert theirs.config.id2label == dict(enumerate(labels))
        return
    torch.testing.assert_close(got.logits, expected[0], rtol=0, atol=1e-5)
    if head == "regression":
        assert theirs.config.problem_type == "regression" and theirs.config.num_labels == 1
    else:
        assert theirs.config.problem_type == "single_label_classification"
        assert theirs.config.id2label == {0: "a", 1: "b", 2: "c"} and theirs.config.label2id == {"a": 0, "b": 1, "c": 2}


def test_t5_converts_to_conditional_generation():
    torch.manual_seed(0)
    ours = perturb_(T5(T5Config(vocab_size=VOCAB, hidden_size=32, ff_size=48, num_heads=2, dropout=0.0)))
    config, state = task_model_to_hf(ours)
    assert config["architectures"] == ["T5ForConditionalGeneration"]
    hf_config = transformers.T5Config(**{k: v for k, v in config.items() if k != "architectures"})
    theirs = transformers.T5ForConditionalGeneration(hf_config).eval()
    theirs.load_state_dict(state, strict=False)
    inputs = batch()
    with torch.no_grad():
        expected = ours(inputs["input_ids"], inputs["attention_mask"], decoder_input_ids=inputs["input_ids"])[0]
        got = theirs(**inputs, decoder_input_ids=inputs["input_ids"]).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_the_original_transformer_and_unknown_pairs_are_refused():
    transformer = Transformer(T5Config(vocab_size=VOCAB, hidden_size=32, ff_size=48, num_heads=2,
                                       variant="transformer"))
    with pytest.raises(HfExportRefused, match="original Transformer .* no transformers class"):
        task_model_to_hf(transformer)
    spans_on_t5 = build_task_model({"head": "span_extraction"}, T5(T5Config(vocab_size=VOCAB)))
    with pytest.raises(HfExportRefused, match="no transformers class is known for a SpanExtractionModel on a T5"):
        task_model_to_hf(spans_on_t5)
