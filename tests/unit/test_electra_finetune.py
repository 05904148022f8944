"""Fine-tuning an ELECTRA: from a pretrain stage's model/ folder the finetune stage keeps the
discriminator (the generator is dropped) and puts every task head on it: GLUE
classification (Hugging Face's ElectraClassificationHead, checked against
ElectraForSequenceClassification within 1e-4) and regression, SQuAD spans and CoNLL tags,
each one forward and backward in-process; and a fine-tuned model saves and loads back."""

from __future__ import annotations

import os

import pytest
import torch

from stages.finetune.families.registry import family_for
from stages.finetune.model_source import load_backbone, resolve_model_source
from stages.finetune.saved_model import load_finetuned, save_finetuned
from stages.finetune.tasks import get_task
from stages.models import (
    Bert, ElectraForPreTraining, ElectraForSequenceClassification, SpanExtractionModel, TokenClassificationModel,
    save_pretrained,
)
from stages.models.bert.convert_electra import electra_to_hf_electra, hf_electra_config
from stages.models.config import preset_config
from tests.support.perturb import perturb_
from tests.support.pinned import import_pinned

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; never reach for the hub
transformers = import_pinned("transformers")

CONFIG = preset_config("electra-debug", dropout=0.0)  # E 32 != C 64: the discriminator projects
B, T = 2, 12


def inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, CONFIG.vocab_size, (B, T), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, 9:] = 0
    token_types = (torch.arange(T) >= 6).long().expand(B, T).contiguous()
    return ids, mask, token_types


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory):
    """A pretrain stage's model/ folder of an ELECTRA (discriminator + generator)."""
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("electra") / "model"
    save_pretrained(perturb_(ElectraForPreTraining(CONFIG)), directory)
    return directory


@pytest.mark.parametrize(("task", "head", "labels"), [
    ("sst2", ElectraForSequenceClassification, dict(labels=torch.tensor([0, 1]))),
    ("stsb", ElectraForSequenceClassification, dict(labels=torch.tensor([0.5, 4.0]))),
    ("squad", SpanExtractionModel, dict(start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4]))),
    ("conll2003", TokenClassificationModel, dict(labels=torch.randint(0, 9, (B, T)).masked_fill(inputs()[1] == 0,
                                                                                                  -100))),
])
def test_every_task_head_fine_tunes_the_discriminator(pretrained_dir, task, head, labels):
    source = resolve_model_source(None, pretrained_dir)
    assert source.family == "bert"
    backbone = load_backbone(source)
    assert type(backbone) is Bert and backbone.config.variant == "electra"  # the generator is dropped
    spec = get_task(task)
    head_config = {"head": spec.head, "task": spec.name, "num_labels": getattr(spec, "num_labels", None)}
    torch.manual_seed(0)
    model = family_for(spec, source.family).build_model(head_config, backbone)
    assert type(model) is head
    ids, mask, token_types = inputs()
    outputs = model(ids, mask, token_type_ids=token_types, **labels)
    loss = outputs[-1]
    assert torch.isfinite(loss)
    loss.backward()
    assert backbone.blocks[0].attn.qkv_proj.weight.grad.abs().sum() > 0
    assert backbone.embedding_projection.weight.grad.abs().sum() > 0  # E -> C, as ElectraModel's
    assert backbone.embeddings.token_type_embedding.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("num_labels", [3, 1], ids=["classification", "regression"])
def test_sequence_classification_matches_transformers(num_labels):
    torch.manual_seed(0)
    ours = perturb_(ElectraForSequenceClassification(Bert(CONFIG), num_labels))
    hf = transformers.ElectraForSequenceClassification(transformers.ElectraConfig(
        **hf_electra_config(CONFIG), num_labels=num_labels)).eval()
    state = {f"electra.{name}": t for name, t in electra_to_hf_electra(ours.backbone.state_dict(), CONFIG,
                                                                        "model").items()}
    state.update({"classifier.dense.weight": ours.dense.weight, "classifier.dense.bias": ours.dense.bias,
                  "classifier.out_proj.weight": ours.classifier.weight,
                  "classifier.out_proj.bias": ours.classifier.bias})
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not missing and not unexpected
    ids, mask, token_types = inputs()
    labels = torch.tensor([0, 2]) if num_labels == 3 else torch.tensor([0.5, 1.5])
    with torch.no_grad():
        logits, loss = ours(ids, mask, labels=labels, token_type_ids=token_types)
        theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=token_types, labels=labels)
    torch.testing.assert_close(logits, theirs.logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, theirs.loss, rtol=1e-4, atol=1e-4)
    assert (logits[0] - logits[1]).abs().max() > 1e-3


def test_a_fine_tuned_electra_saves_and_loads_back(pretrained_dir, tmp_path):
    backbone = load_backbone(resolve_model_source(None, pretrained_dir))
    head_config = {"head": "sequence_classification", "task": "sst2", "num_labels": 2, "labels": ["0", "1"]}
    torch.manual_seed(0)
    model = perturb_(family_for(get_task("sst2"), "bert").build_model(head_config, backbone))
    (tmp_path / "tokenizer.json").write_text("{}")
    save_finetuned(model, tmp_path / "model", head_config=head_config, tokenizer_path=tmp_path / "tokenizer.json")
    loaded, loaded_config = load_finetuned(tmp_path / "model")
    assert loaded_config == head_config and type(loaded) is ElectraForSequenceClassification
    ids, mask, token_types = inputs()
    with torch.no_grad():
        assert torch.equal(loaded(ids, mask, token_type_ids=token_types)[0],
                           model(ids, mask, token_type_ids=token_types)[0])
    # the backbone folder is a Hugging Face ElectraModel, as BERT backbones are BertModel folders
    hf = transformers.ElectraModel.from_pretrained(tmp_path / "model").eval()
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=ids, attention_mask=mask, token_type_ids=token_types)
                                   .last_hidden_state[mask.bool()],
                                   model.backbone.hidden_states(ids, mask, token_types)[mask.bool()],
                                   rtol=1e-4, atol=1e-4)
