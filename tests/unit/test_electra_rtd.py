"""Replaced-token detection (stages/objectives/mlm/rtd.py) on an ELECTRA: the labels are
exactly the masked positions whose sample differs from the original, padding is never
scored, no gradient reaches the generator through the sampling, the loss is mlm + 50 x
rtd, sampling is reproducible under a seed, the objective is chosen for variant electra
only (and refuses a sentence task); then a few steps through a real DeepSpeed engine."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stages.models.build import build_preset
from stages.objectives.mlm.loss import MaskedLM
from stages.objectives.mlm.rtd import ReplacedTokenDetection
from stages.objectives.output import LOSS_SUM, NUM_CORRECT, NUM_PREDICTIONS
from stages.objectives.registry import build_objective
from tests.support.engine_subprocess import run_engine_script

MASK_ID, VOCAB, T = 3, 512, 16


def mlm_batch(seed: int = 0, padded_from: int = 12) -> dict[str, torch.Tensor]:
    """Three rows of an mlm dataset batch: 30% of the real tokens masked ([MASK] in the
    input, the original in labels), row 0 padded from `padded_from` on."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (3, T), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, padded_from:] = 0
    ids[0, padded_from:] = 0
    masked = (torch.rand(3, T, generator=generator) < 0.3) & mask.bool()
    return {"input_ids": ids.masked_fill(masked, MASK_ID), "attention_mask": mask,
            "token_type_ids": torch.zeros_like(ids), "labels": ids.masked_fill(~masked, -100)}


def electra(**overrides):
    torch.manual_seed(0)
    return build_preset("electra-debug", dropout=0.0, **overrides)


def test_replaced_is_exactly_the_masked_positions_whose_sample_differs():
    model = electra().train()
    batch = mlm_batch()
    masked = batch["labels"] != -100
    original = torch.where(masked, batch["labels"], batch["input_ids"])
    sampler = torch.Generator().manual_seed(7)
    generator_logits, _, replaced = model(**batch, sampler=sampler)
    # The same draws, by hand: one multinomial over the masked rows' softmax.
    expected = torch.multinomial(torch.softmax(generator_logits.detach()[masked].float(), -1), 1,
                                 generator=torch.Generator().manual_seed(7)).squeeze(-1)
    assert torch.equal(replaced[masked], expected != original[masked])
    assert not replaced[~masked].any()  # unmasked tokens are never replacements
    assert replaced.any()
    # A generator that always samples token x: where the original is x, the sample guessed it
    # and the token counts as original; every other masked token is a replacement.
    x = batch["labels"][masked][0]
    with torch.no_grad():
        model.generator.mlm_bias.fill_(-1e4)
        model.generator.mlm_bias[x] = 1e4
    _, _, replaced = model(**batch)
    assert torch.equal(replaced[masked], original[masked] != x) and not replaced[~masked].any()
    assert (~replaced[masked]).sum() >= 1 and replaced[masked].sum() >= 1


def test_the_discriminator_reads_the_originals_with_the_samples_in_place():
    model = electra().eval()
    batch = mlm_batch()
    masked = batch["labels"] != -100
    seen = {}
    original_logits = model.discriminator_logits

    def spy(input_ids, *args, **kwargs):
        seen["ids"] = input_ids
        return original_logits(input_ids, *args, **kwargs)

    model.discriminator_logits = spy
    _, _, replaced = model(**batch, sampler=torch.Generator().manual_seed(1))
    original = torch.where(masked, batch["labels"], batch["input_ids"])
    assert torch.equal(seen["ids"][~masked], original[~masked])  # no [MASK] left, nothing else touched
    assert torch.equal(seen["ids"] != original, replaced)
    assert not (seen["ids"] == MASK_ID).any()


def test_statistics_padding_and_the_weighted_loss():
    model = electra().train()
    batch = mlm_batch()
    objective = ReplacedTokenDetection(T)
    torch.manual_seed(3)
    out = objective(model, batch)
    torch.manual_seed(3)
    generator_logits, discriminator_logits, replaced = model(**batch)
    real = batch["attention_mask"].bool()
    masked = batch["labels"] != -100
    # rtd: one prediction per real token, padding never counted
    rtd = out.parts["rtd"]
    assert rtd[NUM_PREDICTIONS] == real.sum() == 3 * T - (T - 12)
    bce = F.binary_cross_entropy_with_logits(discriminator_logits[real], replaced[real].float(), reduction="sum")
    torch.testing.assert_close(rtd[LOSS_SUM].float(), bce.detach())
    assert rtd[NUM_CORRECT] == ((discriminator_logits[real] > 0) == replaced[real]).sum()
    # mlm: the generator's predictions at the masked positions
    mlm = out.parts["mlm"]
    assert mlm[NUM_PREDICTIONS] == masked.sum()
    ce = F.cross_entropy(generator_logits[masked], batch["labels"][masked], reduction="sum")
    torch.testing.assert_close(mlm[LOSS_SUM].float(), ce.detach())
    # loss = mlm + lambda * rtd, with the paper's lambda = 50
    assert model.config.rtd_weight == 50
    expected = mlm[LOSS_SUM] / mlm[NUM_PREDICTIONS] + 50 * rtd[LOSS_SUM] / rtd[NUM_PREDICTIONS]
    torch.testing.assert_close(out.loss.double(), expected, rtol=1e-6, atol=1e-6)
    # Padding: whatever sits in the padded positions changes no statistic.
    other = dict(batch, input_ids=batch["input_ids"].clone())
    other["input_ids"][0, 12:] = 77
    torch.manual_seed(3)
    again = objective(model, other)
    for name in ("mlm", "rtd"):
        torch.testing.assert_close(again.parts[name], out.parts[name])
    # rtd_weight comes from the model's config
    weighted = electra(rtd_weight=10.0)
    weighted.load_state_dict(model.state_dict())
    torch.manual_seed(3)
    out10 = objective(weighted.train(), batch)
    torch.testing.assert_close(out10.loss.double(), mlm[LOSS_SUM] / mlm[NUM_PREDICTIONS]
                               + 10 * rtd[LOSS_SUM] / rtd[NUM_PREDICTIONS], rtol=1e-6, atol=1e-6)


def test_no_gradient_reaches_the_generator_through_the_sampling():
    model = electra().train()
    batch = mlm_batch()
    objective = ReplacedTokenDetection(T)
    out = objective(model, batch)
    rtd_loss = out.parts["rtd"][LOSS_SUM]  # detached: take the loss from the logits instead
    assert not rtd_loss.requires_grad
    _, discriminator_logits, replaced = model(**batch)
    real = batch["attention_mask"].bool()
    F.binary_cross_entropy_with_logits(discriminator_logits[real], replaced[real].float()).backward()
    generator_only = [(name, p) for name, p in model.generator.named_parameters()
                      if not name.startswith("backbone.embeddings.") and name != "mlm_decoder.weight"]
    assert generator_only and all(p.grad is None for _, p in generator_only), [n for n, p in generator_only
                                                                                if p.grad is not None]
    # the shared embeddings learn from the discriminator, as the paper's tied embeddings do
    assert model.backbone.embeddings.word_embedding.weight.grad.abs().sum() > 0
    model.zero_grad(set_to_none=True)
    out.loss.backward()  # the whole objective: both networks learn, each from its own loss
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for _, p in generator_only)
    assert model.discriminator_prediction.weight.grad.abs().sum() > 0


def test_sampling_is_reproducible_and_validation_leaves_the_training_stream_alone():
    model = electra().train()
    batch = mlm_batch()
    objective = ReplacedTokenDetection(T)
    torch.manual_seed(11)
    first = objective(model, batch).parts["rtd"]
    torch.manual_seed(11)
    assert torch.equal(objective(model, batch).parts["rtd"], first)
    # eval: a fixed sampler of its own, the same at every evaluation; the global stream untouched
    model.eval()
    torch.manual_seed(11)
    state = torch.get_rng_state()
    scores = [objective(model, batch).parts for _ in range(2)]
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(scores[0][name], scores[1][name]) for name in ("mlm", "rtd"))


def test_build_objective_trains_rtd_for_electra_only_and_without_a_sentence_task():
    index = {"objective": "mlm", "seq_len": T, "mlm": {"sentence_task": "none"}}
    objective = build_objective(index, "bert", variant="electra")
    assert isinstance(objective, ReplacedTokenDetection) and objective.parts == ("mlm", "rtd")
    assert isinstance(build_objective(index, "bert"), MaskedLM)
    assert isinstance(build_objective(index, "bert", variant="albert"), MaskedLM)
    for task in ("nsp", "sop"):
        with pytest.raises(ValueError, match=f"dataset.mlm.sentence_task is '{task}', but pretrain.model.variant "
                                             "electra .* set dataset.mlm.sentence_task: none"):
            build_objective({**index, "mlm": {"sentence_task": task}}, "bert", "data/index.json", variant="electra")
    model = electra()
    assert objective.flops_per_sample(model) == model.flops_per_token(T) * T


# A real DeepSpeed engine in a subprocess (see tests/support/engine_subprocess.py): ZeRO-2 bf16 with
# the embeddings shared by the two networks, and the gathered state dict reloading strictly.
ENGINE_SCRIPT = r"""
import json, torch
import torch.distributed as dist
from stages.models import ElectraForPreTraining
from stages.models.config import preset_config
from stages.objectives.mlm.rtd import ReplacedTokenDetection
from stages.training.engine import full_fp32_state_dict
from tests.support.engine_subprocess import train_steps

dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)
model = ElectraForPreTraining(preset_config("electra-debug", vocab_size=64, max_seq_len=16))
objective = ReplacedTokenDetection(16)
generator = torch.Generator().manual_seed(0)
ids = torch.randint(4, 64, (4, 16), generator=generator)
masked = torch.rand(4, 16, generator=generator) < 0.3
batch = {"input_ids": ids.masked_fill(masked, 3), "attention_mask": torch.ones_like(ids),
         "token_type_ids": torch.zeros_like(ids), "labels": ids.masked_fill(~masked, -100)}
engine, losses, out = train_steps(model, objective, batch, weight_decay=0.01)
fresh = ElectraForPreTraining(model.config)
fresh.load_state_dict(full_fp32_state_dict(engine), strict=True)
torch.manual_seed(1)
print("RESULTS" + json.dumps({"losses": losses, "parts": sorted(out.parts),
                              "shared": fresh.generator.backbone.embeddings is fresh.backbone.embeddings,
                              "final_loss": objective(fresh.train(), batch).loss.item()}))
"""


def test_rtd_steps_through_a_deepspeed_engine_lower_the_loss():
    result = run_engine_script(ENGINE_SCRIPT)
    losses = result["losses"]
    assert result["parts"] == ["mlm", "rtd"] and result["shared"]
    assert losses[-1] < 0.95 * losses[0], losses
    assert result["final_loss"] < 0.95 * losses[0]
