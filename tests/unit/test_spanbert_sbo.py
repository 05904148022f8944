"""SpanBERT's span boundary objective (pretrain.model.span_boundary_objective): the spans
read from a batch's labels, the head against eq. 1 computed by hand, BERT and ALBERT
unchanged bit for bit when the option is off, the sbo part of the MaskedLM objective on
static and dynamic span datasets, training through a real DeepSpeed engine, the
Hugging Face export that leaves the head out, and the config's errors."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from pipeline.config import load_config
from stages.data.loader import ExampleLoader
from stages.models import BertConfig, BertForPreTraining, build_model, load_pretrained, save_pretrained
from stages.models.hf_export import export_hf, import_hf
from stages.models.bert.span_boundary import SBO_MAX_SPAN_TOKENS, span_boundary_targets
from stages.objectives.registry import build_batch_builder, build_objective
from stages.pretrain.config import PretrainConfig
from stages.pretrain.model_config import model_config
from tests.support.engine_subprocess import run_engine_script
from tests.support.pretraining_loss import bert_pretraining_loss
from tests.unit.test_dataset_objectives import build, make_corpus, make_tokenizer

X = -100  # not predicted

SMALL = dict(vocab_size=97, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=2, dropout=0.0)


def small_inputs():
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 97, (3, 16), generator=generator)
    labels = torch.full((3, 16), X)
    labels[:, 3:6] = ids[:, 3:6]
    labels[1, 10] = ids[1, 10]
    mask = torch.ones(3, 16, dtype=torch.long)
    mask[2, 12:] = 0
    token_types = (torch.arange(16) >= 8).long().expand(3, 16)
    return ids, mask, token_types, labels


def test_spans_and_their_boundaries_come_from_the_masked_runs_of_the_labels():
    labels = torch.tensor([
        [7, 7, X, X, 7, 7, 7, X, X, 7],   # a run at position 0 and one at the last position
        [X, X, 7, 7, 7, X, X, 7, X, X],   # three touching tokens are one span; one before padding
        [X] * 10,                         # nothing masked
        [X, 1, 2, 3, 4, 5, 6, 7, 8, X],   # longer than max_span_tokens=3
    ])
    attention_mask = torch.ones(4, 10, dtype=torch.long)
    attention_mask[1, 8:] = 0
    targets = span_boundary_targets(labels, attention_mask, max_span_tokens=3)
    found = list(zip(*(t.tolist() for t in targets), strict=True))
    # (row, position, s - 1, e + 1, i - s, token)
    assert found == [(0, 4, 3, 7, 0, 7), (0, 5, 3, 7, 1, 7), (0, 6, 3, 7, 2, 7),
                     (1, 2, 1, 5, 0, 7), (1, 3, 1, 5, 1, 7), (1, 4, 1, 5, 2, 7),
                     (3, 1, 0, 9, 0, 1), (3, 2, 0, 9, 1, 2), (3, 3, 0, 9, 2, 3)]
    # Without an attention mask, row 1's last run has a right boundary (position 8)
    unmasked = span_boundary_targets(labels, None, max_span_tokens=3)
    assert (1, 7, 6, 8, 0, 7) in list(zip(*(t.tolist() for t in unmasked), strict=True))
    assert SBO_MAX_SPAN_TOKENS >= 30  # a 10-word span of 3 pieces a word fits


def test_the_head_is_the_papers_equation_over_the_boundary_states():
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**SMALL, span_boundary_objective=True)).eval()
    ids, mask, token_types, labels = small_inputs()
    with torch.no_grad():
        *_, predictions = model(ids, mask, token_types, span_boundary_labels=labels)
        hidden = model.backbone.hidden_states(ids, mask, token_types)
        head, gelu = model.sbo, F.gelu
        expected = []
        start, stop = 3, 6  # every row's span; row 1 also masks position 10 alone
        for row in range(3):
            for i in range(start, stop):
                h0 = torch.cat([hidden[row, start - 1], hidden[row, stop], head.position_embedding.weight[i - start]])
                h1 = head.norm1(gelu(head.fc1(h0)))
                y = head.norm2(gelu(head.fc2(h1)))
                expected.append((row, i, y @ model.backbone.embeddings.word_embedding.weight.T + head.bias))
        h0 = torch.cat([hidden[1, 9], hidden[1, 11], head.position_embedding.weight[0]])
        y = head.norm2(gelu(head.fc2(head.norm1(gelu(head.fc1(h0))))))
        expected.insert(6, (1, 10, y @ model.backbone.embeddings.word_embedding.weight.T + head.bias))
    assert predictions.logits.shape == (10, 97)
    torch.testing.assert_close(predictions.logits, torch.stack([logits for *_, logits in expected]))
    assert predictions.targets.tolist() == [int(ids[row, i]) for row, i, _ in expected]


def _digest(tensors) -> str:
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


# Taken from BertForPreTraining as it was before the option existed (commit d1bc344's
# bert.py): torch.manual_seed(0), SMALL, small_inputs(). The weights exactly; the loss to
# float32 rounding, so that another CPU's matmul kernels do not fail the pin.
TODAYS_WEIGHTS = {"bert": "db640f181cc22783", "albert": "f4da887cb5c996fd"}
TODAYS_LOSS = {"bert": 5.250154495239258, "albert": 5.328025817871094}


@pytest.mark.parametrize("variant", ["bert", "albert"])
def test_option_off_is_the_model_of_before_bit_for_bit(variant):
    ids, mask, token_types, labels = small_inputs()
    pair_labels = torch.tensor([0, 1, 0])
    models = {}
    for on in (False, True):
        torch.manual_seed(0)
        models[on] = BertForPreTraining(BertConfig(**SMALL, variant=variant, span_boundary_objective=on))
    off, on = models[False], models[True]
    state = off.state_dict()
    assert _digest(state[name] for name in sorted(state)) == TODAYS_WEIGHTS[variant]
    assert not any(name.startswith("sbo") for name in state)
    mlm_logits, nsp_logits = off(ids, mask, token_types)
    loss = bert_pretraining_loss(mlm_logits, nsp_logits, labels, pair_labels)
    assert loss.item() == pytest.approx(TODAYS_LOSS[variant], rel=1e-6)
    # On: BERT's own weights draw the same numbers (the head is created last), its MLM
    # and NSP outputs are the same, and the head predicts every masked token of a span.
    on_state = on.state_dict()
    assert all(torch.equal(on_state[name], tensor) for name, tensor in state.items())
    on_mlm, on_nsp, predictions = on(ids, mask, token_types, span_boundary_labels=labels)
    assert torch.equal(on_mlm, mlm_logits) and torch.equal(on_nsp, nsp_logits)
    assert predictions.logits.shape == (len(predictions.targets), SMALL["vocab_size"]) and len(predictions.targets)


def test_masked_lm_reports_an_sbo_part_and_handles_a_batch_without_spans():
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**SMALL, span_boundary_objective=True))
    ids, mask, token_types, labels = small_inputs()
    index = {"objective": "mlm", "seq_len": 16, "mlm": {"sentence_task": "none"}}
    objective = build_objective(index, "bert", span_boundary=True)
    assert objective.parts == ("mlm", "sbo") and build_objective(index, "bert").parts == ("mlm",)
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": token_types, "labels": labels}
    out = objective(model, batch)
    mlm_loss, sbo_loss = (out.parts[p][0] / out.parts[p][2] for p in ("mlm", "sbo"))
    assert out.parts["sbo"][2] == out.parts["mlm"][2] == 10
    torch.testing.assert_close(out.loss.double(), mlm_loss + sbo_loss)
    out.loss.backward()
    assert model.sbo.fc1.weight.grad.abs().sum() > 0 and model.sbo.position_embedding.weight.grad.abs().sum() > 0
    # nothing masked (the trainer's placeholder batch): the head still runs, loss 0
    empty = objective(model, {**batch, "labels": torch.full_like(labels, X)})
    assert empty.parts["sbo"][2] == 0 and empty.loss.item() == 0
    with pytest.raises(ValueError, match="span_boundary_objective: true"):
        build_objective(index, "bert", span_boundary=True)(BertForPreTraining(BertConfig(**SMALL)), batch)


@pytest.fixture(scope="module")
def span_datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sbo-datasets")
    ingest = make_corpus(root, num_shards=1)
    tokenizer = make_tokenizer(root, "wordpiece", ingest)
    for masking in ("static", "dynamic"):
        build(ingest, tokenizer, root / masking, objective="mlm", seq_len=64,
              mlm={"mask_unit": "span", "masking": masking, "sentence_task": "none"})
    return {masking: root / masking for masking in ("static", "dynamic")}


@pytest.mark.parametrize("masking", ["static", "dynamic"])
def test_sbo_trains_on_static_and_dynamic_span_datasets(span_datasets, masking):
    dataset_dir = span_datasets[masking]
    index = json.loads((dataset_dir / "index.json").read_text())
    torch.manual_seed(0)
    model = build_model(model_config(family="bert", num_layers=1, hidden_size=32, num_heads=2,
                                    span_boundary_objective=True).architecture(),
                        vocab_size=index["vocab_size"], max_seq_len=64, pad_token_id=index["pad_id"])
    objective = build_objective(index, "bert", span_boundary=True)
    batch = next(ExampleLoader(dataset_dir, "train", 16, seed=0, batch_builder=build_batch_builder))
    out = objective(model, batch)
    # Spans never hold [CLS]/[SEP]: every masked run has both boundaries, so SBO predicts
    # every masked token but those past SBO_MAX_SPAN_TOKENS into a long span.
    masked = batch["labels"] != X
    assert int(masked.sum()) == out.parts["mlm"][2]
    assert 0.8 * out.parts["mlm"][2] <= out.parts["sbo"][2] <= out.parts["mlm"][2]
    whole = span_boundary_targets(batch["labels"], batch["attention_mask"], max_span_tokens=64)
    assert len(whole.tokens) == int(masked.sum())
    assert torch.isfinite(out.loss)


# A real DeepSpeed engine in a subprocess (tests/support/engine_subprocess.py): span masks drawn
# by the dataset's SpanMaskingPolicy, a few ZeRO-2 bf16 steps, then the gathered fp32
# weights (SBO head included) scored again in a fresh model.
ENGINE_SCRIPT = r"""
import json, numpy as np, torch
import torch.distributed as dist
from stages.data.span_masking import SpanMaskingPolicy
from stages.models import BertConfig, BertForPreTraining
from stages.objectives.mlm.loss import MaskedLM
from stages.training.engine import full_fp32_state_dict
from tests.support.engine_subprocess import train_steps

dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)
config = BertConfig(vocab_size=64, max_seq_len=32, num_layers=2, hidden_size=32, num_heads=2,
                    dropout=0.0, span_boundary_objective=True)
model = BertForPreTraining(config)
rng = np.random.default_rng(0)
rows = rng.integers(5, 64, (4, 32))
rows[:, 0], rows[:, -1] = 2, 3                           # [CLS] ... [SEP]
word_start = np.arange(64) % 3 != 0                      # every third id continues a word
policy = SpanMaskingPolicy(mask_id=4, special_ids=np.arange(5), vocab_size=64, word_start=word_start,
                           mask_prob=0.3)
masked, labels = policy.mask_rows(rows, rng)
batch = {"input_ids": torch.from_numpy(masked), "attention_mask": torch.ones(4, 32, dtype=torch.long),
         "token_type_ids": torch.zeros(4, 32, dtype=torch.long), "labels": torch.from_numpy(labels)}
objective = MaskedLM(32, "none", span_boundary=True)
sbo_loss = lambda out: (out.parts["sbo"][0] / out.parts["sbo"][2]).item()
before = sbo_loss(objective(model, batch))
engine, losses, out = train_steps(model, objective, batch, steps=6, weight_decay=0.01)
fresh = BertForPreTraining(config)
fresh.load_state_dict(full_fp32_state_dict(engine), strict=True)
print("RESULTS" + json.dumps({"losses": losses, "parts": sorted(out.parts), "sbo_before": before,
                              "sbo_after": sbo_loss(objective(fresh.eval(), batch))}))
"""


def test_mlm_and_sbo_steps_through_a_deepspeed_engine_lower_both_losses():
    result = run_engine_script(ENGINE_SCRIPT)
    losses = result["losses"]
    assert result["parts"] == ["mlm", "sbo"]
    assert losses[-1] < 0.9 * losses[0], losses
    assert result["sbo_after"] < 0.9 * result["sbo_before"], result


def test_hugging_face_export_leaves_the_head_out_and_our_format_keeps_it(tmp_path):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**SMALL, span_boundary_objective=True)).eval()
    ids, mask, token_types, labels = small_inputs()
    with pytest.warns(UserWarning, match=r"no span boundary objective head \(sbo\.\*\)"):
        export_hf(model, tmp_path / "hf")
    exported = import_hf(tmp_path / "hf").eval()
    assert exported.sbo is None and not exported.config.span_boundary_objective
    with torch.no_grad():
        assert torch.equal(exported(ids, mask, token_types)[0], model(ids, mask, token_types)[0])
    save_pretrained(model, tmp_path / "ours")
    again = load_pretrained(tmp_path / "ours").eval()
    with torch.no_grad():
        assert torch.equal(again(ids, mask, token_types, span_boundary_labels=labels)[2].logits,
                           model(ids, mask, token_types, span_boundary_labels=labels)[2].logits)


def test_config_errors_and_fingerprints():
    with pytest.raises(ValidationError, match=r"does not use span_boundary_objective \(bert only\)"):
        model_config(family="gpt", span_boundary_objective=True)
    with pytest.raises(ValueError, match="span_boundary_objective must be True or False"):
        BertConfig(**SMALL, span_boundary_objective="yes")
    on = model_config(family="bert", span_boundary_objective=True)
    assert on.architecture()["span_boundary_objective"] is True
    assert isinstance(build_model(on.architecture(), vocab_size=50, max_seq_len=16).sbo, torch.nn.Module)
    # Unset or off: the pretrain section dumps (and fingerprints) as before the key existed
    before = PretrainConfig(model={"family": "bert"}).model_dump(mode="json")
    assert "span_boundary_objective" not in before["model"]
    assert PretrainConfig(model={"family": "bert", "span_boundary_objective": False}).model_dump(mode="json") == before
    assert PretrainConfig(**before) == PretrainConfig(model={"family": "bert"})


def test_the_spanbert_tiny_config(monkeypatch):
    monkeypatch.setenv("DATA_DIR", "/data")
    cfg = load_config("configs/spanbert-tiny.yaml")
    assert (cfg.dataset.mlm.mask_unit, cfg.dataset.mlm.masking, cfg.dataset.mlm.sentence_task) == \
        ("span", "dynamic", "none")
    assert cfg.pretrain.model.architecture()["span_boundary_objective"] is True
    assert np.isclose(cfg.dataset.mlm.span_geometric_p, 0.2) and cfg.dataset.mlm.max_span_words == 10
