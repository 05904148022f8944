"""A fine-tuned task's `hf/` folder (stages/finetune/hf_export.py), loaded back by
transformers alone (AutoTokenizer + AutoModelFor*, and its `pipeline`), predicts what the
pipeline's own model predicts on the stage's own encoding: a GPT SST-2 classifier
(batched, so the pad id must be right), a BERT STS-B regressor on sentence pairs (token
type ids) and a T5 generating SST-2 label words (generation_config.json). No Ray: the
task's model/ is written by save_finetuned, as the worker does, from random weights and
tokenizers trained by the pipeline's recipes. A model with no transformers class, and a
task without model/, get no hf/ and a reason in the facts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.support.pinned import import_pinned
import torch

from stages.finetune.config import FinetuneConfig
from stages.finetune.encode import encode_texts, load_task_tokenizer
from stages.finetune.families.registry import family_for
from stages.finetune.glue.text_to_text import encode_text_to_text
from stages.finetune.glue.text_to_text import source_texts
from stages.finetune.hf_export import HF_DIR, HF_EXPORT_KEY, export_task_hf
from stages.finetune.saved_model import save_finetuned
from stages.finetune.tasks import get_task
from stages.finetune.text_to_text.pairs import generated_texts
from stages.models import BertForPreTraining, build_model
from tests.support.perturb import perturb_
from tests.support.pretrained_dirs import book_paragraphs, train_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = import_pinned("transformers")

SEQ_LEN = 32
ARCHITECTURES = {"gpt": {"num_layers": 2, "hidden_size": 32, "num_heads": 4},
                 "bert": {"num_layers": 2, "hidden_size": 32, "num_heads": 4},
                 "t5": {"num_layers": 2, "hidden_size": 32, "num_heads": 2, "ff_size": 64,
                        "feed_forward": "gated-gelu", "tie_word_embeddings": False}}  # v1.1: its own LM head
# Real sentences of different lengths (so a batch pads), pairs for STS-B.
TEXTS = [("the film is a gripping , funny ride from start to finish",),
         ("dull",), ("an ambitious mess that never finds its feet , despite a fine cast",),
         ("warm and wise",), ("it 's hard to care about any of these people",)]
PAIRS = [("A man is playing a guitar.", "A man plays the guitar."), ("A dog runs.", "The stock market fell sharply today."),
         ("Two women are dancing in the rain.", "Women dance."), ("A cat sleeps.", "A cat is sleeping on the sofa.")]


def finetuned_task(root: Path, family: str, task: str, variant: dict | None = None) -> tuple[Path, torch.nn.Module]:
    """root/<task>/model/ as the worker writes it (random, perturbed weights); (task dir, model)."""
    tokenizer, _ = train_tokenizer(family, 600, book_paragraphs(20_000))
    tokenizer_path = root / "tokenizer.json"
    tokenizer.save(str(tokenizer_path))
    token_ids = {}
    if family == "t5":
        token_ids = {"pad_token_id": tokenizer.token_to_id("<pad>"), "eos_token_id": tokenizer.token_to_id("</s>"),
                     "decoder_start_token_id": tokenizer.token_to_id("<pad>")}
    torch.manual_seed(0)
    backbone = build_model({"family": family, "dropout": 0.0, **ARCHITECTURES[family], **(variant or {})},
                           vocab_size=tokenizer.get_vocab_size(), max_seq_len=64, **token_ids)
    if isinstance(backbone, BertForPreTraining):
        backbone = backbone.backbone
    spec = get_task(task)
    head_config = {"head": spec.head, "task": spec.name, "num_labels": getattr(spec, "num_labels", 2),
                   "labels": getattr(spec, "labels", None)}
    model = perturb_(family_for(spec, family).build_model(head_config, backbone))
    if family == "t5" and not backbone.config.tie_word_embeddings:  # a random T5 mostly generates <pad>: leave it no logit there, so the texts say something
        with torch.no_grad():
            backbone.lm_head.weight[token_ids["pad_token_id"]] = -backbone.lm_head.weight.abs().max()
    task_dir = root / task
    save_finetuned(model, task_dir / "model", head_config=json.loads(json.dumps(head_config)),
                   tokenizer_path=tokenizer_path)
    return task_dir, model


def export(task_dir: Path, task: str) -> Path:
    facts = export_task_hf(task_dir, get_task(task), FinetuneConfig(max_seq_len=SEQ_LEN))
    assert facts == {HF_EXPORT_KEY: HF_DIR}
    return task_dir / HF_DIR


def stage_inputs(task_dir: Path, texts) -> dict[str, torch.Tensor]:
    """The rows as the stage encodes them (fixed length, right-padded)."""
    encoded = encode_texts(load_task_tokenizer(task_dir / "model" / "tokenizer.json", SEQ_LEN), texts, None)
    inputs = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
    if encoded.token_type_ids is not None:
        inputs["token_type_ids"] = encoded.token_type_ids
    return {name: torch.from_numpy(array.astype(np.int64)) for name, array in inputs.items()}


def test_gpt_classifier_folder_classifies_like_the_pipeline(tmp_path):
    task_dir, model = finetuned_task(tmp_path, "gpt", "sst2")
    hf_dir = export(task_dir, "sst2")
    config = json.loads((hf_dir / "config.json").read_text())
    assert config["architectures"] == ["GPT2ForSequenceClassification"] and config["finetuning_task"] == "sst2"
    assert config["id2label"] == {"0": "0", "1": "1"} and config["problem_type"] == "single_label_classification"
    with torch.no_grad():
        expected = model.eval()(**stage_inputs(task_dir, TEXTS))[0]
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert config["pad_token_id"] == tokenizer.pad_token_id != tokenizer.eos_token_id
    hf_model = transformers.AutoModelForSequenceClassification.from_pretrained(hf_dir).eval()
    batch = tokenizer([t[0] for t in TEXTS], padding=True, return_tensors="pt")
    assert "token_type_ids" not in batch  # GPT-2 would add them to the embeddings
    with torch.no_grad():
        torch.testing.assert_close(hf_model(**batch).logits, expected, rtol=0, atol=1e-5)
    classifier = transformers.pipeline("text-classification", model=str(hf_dir), batch_size=3)
    labels = [out["label"] for out in classifier([t[0] for t in TEXTS])]
    assert labels == [str(i) for i in expected.argmax(dim=1).tolist()]


def test_bert_regression_folder_scores_pairs_like_the_pipeline(tmp_path):
    task_dir, model = finetuned_task(tmp_path, "bert", "stsb")
    hf_dir = export(task_dir, "stsb")
    config = json.loads((hf_dir / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["problem_type"] == "regression" and config["id2label"] == {"0": "score"}
    with torch.no_grad():
        expected = model.eval()(**stage_inputs(task_dir, PAIRS))[0][:, 0]
    scorer = transformers.pipeline("text-classification", model=str(hf_dir))
    scores = [scorer({"text": a, "text_pair": b})["score"] for a, b in PAIRS]  # regression: the raw output
    np.testing.assert_allclose(scores, expected.numpy(), rtol=0, atol=1e-5)
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert tokenizer("a b", "c")["token_type_ids"] == stage_inputs(task_dir, [("a b", "c")])["token_type_ids"][0][:6].tolist()


def test_t5_folder_generates_like_the_pipeline(tmp_path):
    task_dir, model = finetuned_task(tmp_path, "t5", "sst2")
    hf_dir = export(task_dir, "sst2")
    assert json.loads((hf_dir / "config.json").read_text())["architectures"] == ["T5ForConditionalGeneration"]
    generation = json.loads((hf_dir / "generation_config.json").read_text())
    assert generation["max_new_tokens"] == model.max_target_len and generation["num_beams"] == 1
    spec = get_task("sst2")
    encoded = encode_text_to_text(load_task_tokenizer(task_dir / "model" / "tokenizer.json", SEQ_LEN), spec, TEXTS,
                                  None)
    with torch.no_grad():
        generated, _ = model.eval()(torch.from_numpy(encoded.input_ids.astype(np.int64)),
                                    torch.from_numpy(encoded.attention_mask.astype(np.int64)))
    expected = generated_texts(str(task_dir / "model" / "tokenizer.json"), generated.numpy())
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    batch = tokenizer(source_texts(spec, TEXTS), padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        ids = hf_model.generate(**batch)
    assert [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)] == expected


def test_no_folder_without_a_transformers_class_or_a_model(tmp_path):
    task_dir, _ = finetuned_task(tmp_path, "t5", "sst2", variant={"variant": "transformer", "feed_forward": "relu",
                                                                  "tie_word_embeddings": True})
    (task_dir / HF_DIR).mkdir()  # an older export of other weights goes too
    facts = export_task_hf(task_dir, get_task("sst2"), FinetuneConfig(max_seq_len=SEQ_LEN))
    assert facts[HF_EXPORT_KEY].startswith("not written: the original Transformer")
    assert not (task_dir / HF_DIR).exists()
    facts = export_task_hf(tmp_path / "cola", get_task("cola"), FinetuneConfig(max_seq_len=SEQ_LEN))
    assert facts == {HF_EXPORT_KEY: "not written: finetune.save_model is false, so there is no model/ to export"}
