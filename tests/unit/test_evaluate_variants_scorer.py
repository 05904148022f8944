"""The BERT scorer on the BERT family's variants. ALBERT is scored by its own masked-LM
head (tanh GELU, C -> E) and ELECTRA by its jointly trained generator: each equals a hand
computation through that network's full forward, one masked copy of the input at a time.
Plain BERT's head computes what the scorer computed before, bit for bit. The evaluate
driver refuses a family it has no scorer for before any work."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stages.evaluate.requests import LoglikelihoodRequest, RollingRequest
from stages.evaluate.scorers import BertScorer, load_scorer
from stages.evaluate.scorers.bert import masked_language_model
from stages.evaluate.spec import resolve_task_spec
from stages.models import BertConfig, BertForPreTraining
from tests.support.pretrained_dirs import book_paragraphs, write_pretrained

MAX_LENGTH = 24
ARCHITECTURE = {"num_layers": 2, "hidden_size": 32, "num_heads": 2}
REQUESTS = [LoglikelihoodRequest(0, 0, "the dog barked at the", " old farmer all night"),
            LoglikelihoodRequest(1, 0, "", "whateley came home")]
DOCUMENT = RollingRequest(0, "the hills rose beyond")  # fits one window: every token masked once


@pytest.fixture(scope="module", params=["albert", "electra"])
def scorer(request, tmp_path_factory) -> BertScorer:
    # weight_scale: peaked predictions, so that a wrong head moves the scores well past the tolerance
    root = write_pretrained(tmp_path_factory.mktemp(request.param), "bert", {"variant": request.param, **ARCHITECTURE},
                            vocab_size=512, max_seq_len=MAX_LENGTH, texts=book_paragraphs(8000), weight_scale=3.0)
    return load_scorer(root / "model", batch_size=4)


def full_forward_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """(1, T, V) masked-LM logits at every position: BertForPreTraining's own forward, or
    ELECTRA's generator's (the discriminator has no masked-LM head)."""
    if model.config.variant == "electra":
        return model.generator(ids)
    return model(ids)[0]


def pll_by_hand(scorer: BertScorer, text_ids: list[int], scored: range) -> float:
    """Sum over p in scored of log P(text_ids[p] | [CLS] text_ids with p masked [SEP]):
    one row per masked copy, all of one length (no padding)."""
    rows = torch.tensor([[scorer.cls_id, *text_ids, scorer.sep_id]] * len(scored))  # (P, T)
    positions = torch.tensor(list(scored)) + 1  # after [CLS]
    rows[torch.arange(len(scored)), positions] = scorer.mask_id
    with torch.no_grad():
        logits = full_forward_logits(scorer.model, rows)  # (P, T, V)
    log_probs = logits[torch.arange(len(scored)), positions].double().log_softmax(-1)  # (P, V)
    return log_probs.gather(1, torch.tensor([text_ids[p] for p in scored])[:, None]).sum().item()


def test_each_variant_is_scored_by_its_own_masked_lm(scorer):
    encode = scorer.tokenizer.encode
    results = scorer.loglikelihood(REQUESTS)
    for request, result in zip(REQUESTS, results, strict=True):
        context_ids = encode(request.context.rstrip(), add_special_tokens=False).ids
        continuation_ids = encode(request.context + request.continuation, add_special_tokens=False).ids[
            len(context_ids):]
        expected = pll_by_hand(scorer, context_ids + continuation_ids,
                               range(len(context_ids), len(context_ids) + len(continuation_ids)))
        assert result.logprob == pytest.approx(expected, abs=1e-5), request
    document_ids = encode(DOCUMENT.text, add_special_tokens=False).ids
    assert len(document_ids) <= MAX_LENGTH - 2
    rolling = scorer.loglikelihood_rolling([DOCUMENT])[0]
    assert rolling.logprob == pytest.approx(pll_by_hand(scorer, document_ids, range(len(document_ids))), abs=1e-5)


def test_electra_is_scored_by_its_generator_also_inside_the_training_loop(scorer):
    from stages.pretrain.eval_tasks import LiveModule

    if scorer.model.config.variant != "electra":
        assert masked_language_model(scorer.model) is scorer.model
        return
    assert masked_language_model(scorer.model) is scorer.model.generator
    assert scorer.masked_lm.config.hidden_size < scorer.model.config.hidden_size  # the generator, not the discriminator
    # In-loop evaluation hands the scorer a wrapper of the engine's module: the same generator answers.
    live = BertScorer(LiveModule(scorer.model), scorer.tokenizer, cls_id=scorer.cls_id, sep_id=scorer.sep_id,
                      mask_id=scorer.mask_id, pad_id=scorer.pad_id, batch_size=3)
    assert live.masked_lm is scorer.model.generator
    assert [r.logprob for r in live.loglikelihood(REQUESTS)] == pytest.approx(
        [r.logprob for r in scorer.loglikelihood(REQUESTS)], abs=1e-5)


def exact_gelu_head(model: BertForPreTraining, hidden: torch.Tensor) -> torch.Tensor:
    """The head the scorer used to rebuild by hand: exact GELU, whatever the variant's."""
    return model.mlm_decoder(model.mlm_norm(F.gelu(model.mlm_transform(hidden)))) + model.mlm_bias


def test_bert_head_is_unchanged_bit_for_bit_and_albert_needed_its_own():
    torch.manual_seed(0)
    hidden = 3 * torch.randn(7, 32)
    bert = BertForPreTraining(BertConfig(vocab_size=100, **ARCHITECTURE)).eval()
    with torch.no_grad():
        assert masked_language_model(bert) is bert
        assert torch.equal(bert.mlm_logits(hidden), exact_gelu_head(bert, hidden))
        albert = BertForPreTraining(BertConfig(vocab_size=100, variant="albert", embedding_size=16,
                                               **ARCHITECTURE)).eval()
        for parameter in albert.parameters():
            parameter.mul_(3.0)
        # ALBERT's head (tanh GELU) is not the hand-built exact-GELU one
        assert (albert.mlm_logits(hidden) - exact_gelu_head(albert, hidden)).abs().max() > 1e-4


def test_the_driver_refuses_a_family_without_a_scorer_before_any_work():
    from stages.evaluate.run import SCORED_FAMILIES, _check_family_supports
    from stages.models.build import MODEL_FAMILIES

    assert set(SCORED_FAMILIES) == set(MODEL_FAMILIES)  # a new family needs a scorer, or this refusal
    specs = {"copa": resolve_task_spec("copa")}
    for family in SCORED_FAMILIES:
        _check_family_supports(family, specs)
    with pytest.raises(ValueError, match=r"run/model_config.json: no scorer for model family 'mamba'; the "
                                         r"evaluate stage scores gpt, bert, t5 models: leave evaluate.tasks empty"):
        _check_family_supports("mamba", specs, source="run/model_config.json")
