"""ALBERT (Lan et al. 2020) as variant "albert" of the BERT family, against Hugging Face
`AlbertForPreTraining`: MLM and SOP logits within 1e-4 both ways of the conversion
(factorized embeddings E != H, all layers shared or none, padding in the batch), the
exported hf/ folder loading in transformers, `pretrain.init_from` of an ALBERT folder,
the presets' parameter counts against the paper's Table 1 and transformers' own count,
cross-layer sharing of attention or FFN only, the fine-tuning heads on an ALBERT
backbone, and mlm + sop steps through a real DeepSpeed engine."""

from __future__ import annotations

import json
import os

import pytest
import torch

from stages.models import (
    Bert, BertConfig, BertForPreTraining, BertForSequenceClassification, SpanExtractionModel,
    TokenClassificationModel, build_model, load_pretrained, save_pretrained,
)
from stages.models.bert.convert_albert import (
    albert_config_from_hf, albert_to_hf_albert, hf_albert_config, hf_albert_to_albert,
)
from stages.models.hf_export import export_hf, import_hf
from stages.models.build import build_preset
from stages.models.config import preset_config
from stages.objectives.mlm.loss import MaskedLM
from stages.pretrain.model_config import model_config
from tests.support.engine_subprocess import run_engine_script
from tests.support.perturb import perturb_
from tests.support.pinned import import_pinned
from tests.support.pretraining_loss import bert_pretraining_loss

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; never reach for the hub
transformers = import_pinned("transformers")

VOCAB = 99
# E (16) != H (32); 3 layers so that "all" really reuses one layer twice more.
SHARED = BertConfig(variant="albert", vocab_size=VOCAB, max_seq_len=32, num_layers=3, hidden_size=32,
                    embedding_size=16, num_heads=4, intermediate_size=48, dropout=0.0)
UNSHARED = BertConfig(**{**SHARED.__dict__, "share_layers": "none", "hidden_act": "gelu"})


def hf_albert(config: BertConfig):
    return perturb_(transformers.AlbertForPreTraining(transformers.AlbertConfig(**hf_albert_config(config))))


def padded_inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (2, 12), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, 8:] = 0  # right padding in row 0
    ids[0, 8:] = 0
    token_types = torch.zeros_like(ids)
    token_types[:, 5:] = 1  # a sentence pair, as SOP reads it
    return ids, mask, token_types


@pytest.mark.parametrize("config", [SHARED, UNSHARED], ids=["share-all", "share-none"])
def test_mlm_and_sop_logits_match_albert_for_pretraining_both_ways(config):
    ids, mask, token_types = padded_inputs()
    real = mask.bool()
    labels = ids.masked_fill(~real, -100)
    order = torch.tensor([0, 1])
    # Hugging Face -> ours
    hf = hf_albert(config)
    ours = BertForPreTraining(config).eval()
    ours.load_state_dict(hf_albert_to_albert(hf.state_dict(), config), strict=True)
    with torch.no_grad():
        mlm, sop = ours(ids, mask, token_types)
        loss = bert_pretraining_loss(mlm, sop, labels, order)
        theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=token_types, labels=labels,
                    sentence_order_label=order)
    torch.testing.assert_close(mlm[real], theirs.prediction_logits[real], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(sop, theirs.sop_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, theirs.loss, rtol=1e-4, atol=1e-4)
    assert mlm.std() > 0.1 and (sop[0] - sop[1]).abs().max() > 1e-3  # not degenerate
    # ours -> Hugging Face
    ours = perturb_(BertForPreTraining(config), seed=5)
    hf = transformers.AlbertForPreTraining(transformers.AlbertConfig(**hf_albert_config(config))).eval()
    missing, unexpected = hf.load_state_dict(albert_to_hf_albert(ours.state_dict(), config), strict=False)
    assert not missing and not unexpected
    with torch.no_grad():
        mlm, sop = ours(ids, mask, token_types)
        theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=token_types)
    torch.testing.assert_close(theirs.prediction_logits[real], mlm[real], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(theirs.sop_logits, sop, rtol=1e-4, atol=1e-4)


def test_the_embedding_projection_and_layer_order_matter():
    # Guards the parity test: a converter that skipped the E -> H projection or read the
    # layers of an unshared model out of order would not give the same logits.
    hf = hf_albert(UNSHARED)
    ids, mask, token_types = padded_inputs()
    reference = hf(input_ids=ids, attention_mask=mask, token_type_ids=token_types).prediction_logits
    state = hf_albert_to_albert(hf.state_dict(), UNSHARED)
    swapped = dict(state)
    for name in [n for n in state if n.startswith("backbone.blocks.0.")]:
        swapped[name], swapped[name.replace("blocks.0.", "blocks.1.")] = (
            state[name.replace("blocks.0.", "blocks.1.")], state[name])
    unprojected = {**state, "backbone.embedding_projection.weight": torch.eye(32, 16)}
    for broken in (swapped, unprojected):
        model = BertForPreTraining(UNSHARED).eval()
        model.load_state_dict(broken)
        with torch.no_grad():
            assert (model(ids, mask, token_types)[0] - reference).abs().max() > 1e-3


@pytest.mark.parametrize("pretraining", [True, False], ids=["AlbertForPreTraining", "AlbertModel"])
def test_exported_folder_loads_in_transformers_and_imports_back(tmp_path, pretraining):
    model = perturb_(BertForPreTraining(SHARED) if pretraining else Bert(SHARED))
    export_hf(model, tmp_path / "hf")
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["model_type"] == "albert" and hf_config["num_hidden_groups"] == 1
    assert albert_config_from_hf(hf_config) == SHARED
    cls = transformers.AlbertForPreTraining if pretraining else transformers.AlbertModel
    hf = cls.from_pretrained(tmp_path / "hf").eval()
    back = import_hf(tmp_path / "hf").eval()
    assert type(back) is type(model) and back.config == SHARED
    ids, mask, token_types = padded_inputs()
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=token_types)
        if pretraining:
            assert hf.predictions.decoder.weight is hf.albert.embeddings.word_embeddings.weight
            expected = model(ids, mask, token_types)[0]
            torch.testing.assert_close(theirs.prediction_logits[real], expected[real], rtol=1e-4, atol=1e-4)
        else:
            expected = model.hidden_states(ids, mask, token_types)
            torch.testing.assert_close(theirs.last_hidden_state[real], expected[real], rtol=1e-4, atol=1e-4)
        actual = back(ids, mask, token_types)[0] if pretraining else back.hidden_states(ids, mask, token_types)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def test_shared_layers_are_one_set_of_parameters_and_save_as_such(tmp_path):
    model = BertForPreTraining(SHARED)
    blocks = model.backbone.blocks
    assert all(block is blocks[0] for block in blocks)
    hf = transformers.AlbertForPreTraining(transformers.AlbertConfig(**hf_albert_config(SHARED)))
    assert model.num_parameters() == sum(p.numel() for p in hf.parameters())
    # Compute follows the layers: FLOPs count the shared block once per layer.
    one_block = sum(p.numel() for p in blocks[0].parameters())
    assert model.backbone.reused_block_parameters() == 2 * one_block
    n = model.num_parameters() - 32 * 16 - 2 * 16  # without the position and token-type tables
    assert model.flops_per_token(32) == 6 * (n + 2 * one_block) + 12 * 3 * 32 * 32
    save_pretrained(model, tmp_path / "model")
    loaded = load_pretrained(tmp_path / "model")
    assert loaded.config == SHARED and all(block is loaded.backbone.blocks[0] for block in loaded.backbone.blocks)
    ids, mask, token_types = padded_inputs()
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(ids, mask, token_types)[0], model.eval()(ids, mask, token_types)[0],
                                   rtol=0, atol=0)


@pytest.mark.parametrize("share", ["attention", "ffn"])
def test_attention_or_ffn_sharing_shares_only_that_sublayer(share):
    config = BertConfig(**{**SHARED.__dict__, "share_layers": share})
    model = BertForPreTraining(config)
    first, last = model.backbone.blocks[0], model.backbone.blocks[2]
    shared, own = ("attn", "mlp") if share == "attention" else ("mlp", "attn")
    assert getattr(last, shared) is getattr(first, shared) and getattr(last, f"{shared}_norm") is getattr(
        first, f"{shared}_norm")
    assert getattr(last, own) is not getattr(first, own)
    sublayer = sum(p.numel() for m in (getattr(first, shared), getattr(first, f"{shared}_norm"))
                   for p in m.parameters())
    unshared = BertForPreTraining(BertConfig(**{**SHARED.__dict__, "share_layers": "none"}))
    assert model.num_parameters() == unshared.num_parameters() - 2 * sublayer
    ids, mask, token_types = padded_inputs()
    bert_pretraining_loss(*model(ids, mask, token_types), ids).backward()
    shared_weight = first.attn.qkv_proj.weight if share == "attention" else first.mlp.fc_out.weight
    assert shared_weight.grad.abs().sum() > 0  # one gradient, summed over the layers
    with pytest.raises(ValueError, match=f"share_layers='{share}' has no Hugging Face ALBERT layout"):
        hf_albert_config(config)


# ALBERT's Table 1 prints 12M / 18M / 60M. transformers' AlbertModel (embeddings, E -> H
# projection, one shared layer, pooler) gives 11.68M / 17.68M / 58.73M: the paper rounds
# xlarge up to 60M, so the check against it allows 3%; the exact figure is transformers'.
@pytest.mark.parametrize(("name", "expected", "paper"), [
    ("albert-base", 11_683_584, 12e6), ("albert-large", 17_683_968, 18e6), ("albert-xlarge", 58_724_864, 60e6)])
def test_preset_parameter_counts_match_the_paper_and_transformers(name, expected, paper):
    config = preset_config(name)
    assert (config.vocab_size, config.embedding_size, config.share_layers) == (30000, 128, "all")
    with torch.device("meta"):
        ours = build_preset(name)
        theirs = transformers.AlbertModel(transformers.AlbertConfig(**hf_albert_config(config)))
        theirs_pretraining = transformers.AlbertForPreTraining(transformers.AlbertConfig(**hf_albert_config(config)))
    assert ours.backbone.num_parameters() == sum(p.numel() for p in theirs.parameters()) == expected
    assert ours.num_parameters() == sum(p.numel() for p in theirs_pretraining.parameters())
    assert abs(expected - paper) / paper < 0.03


def test_heads_fine_tune_on_an_albert_backbone():
    torch.manual_seed(0)
    ids, mask, token_types = padded_inputs()
    heads = [
        (BertForSequenceClassification(Bert(SHARED), 3), dict(labels=torch.tensor([0, 2]), token_type_ids=token_types)),
        (SpanExtractionModel(Bert(SHARED)), dict(start_positions=torch.tensor([1, 2]),
                                                 end_positions=torch.tensor([3, 4]), token_type_ids=token_types)),
        (TokenClassificationModel(Bert(SHARED), 5),
         dict(labels=torch.randint(0, 5, (2, 12)).masked_fill(mask == 0, -100), token_type_ids=token_types)),
    ]
    for model, inputs in heads:
        loss = model(ids, mask, **inputs)[-1]
        assert torch.isfinite(loss)
        loss.backward()
        backbone = model.backbone
        # the one shared layer and the E -> H projection both learn
        assert backbone.blocks[0].attn.qkv_proj.weight.grad.abs().sum() > 0
        assert backbone.embedding_projection.weight.grad.abs().sum() > 0
        assert backbone.embeddings.word_embedding.weight.grad.shape == (VOCAB, 16)


def test_pretrain_model_keys_variant_albert_and_presets():
    albert = model_config(family="bert", variant="albert", hidden_size=64, num_heads=4).architecture()
    assert albert == {"family": "bert", "num_layers": 2, "hidden_size": 64, "num_heads": 4, "dropout": 0.0,
                      "layer_norm_eps": 1e-12, "intermediate_size": 256, "variant": "albert"}
    model = build_model(albert, vocab_size=VOCAB, max_seq_len=16)
    config = model.config
    assert (config.embedding_size, config.share_layers, config.hidden_act) == (128, "all", "gelu_new")
    preset = model_config(preset="albert-base", num_layers=2).architecture()
    assert (preset["variant"], preset["embedding_size"], preset["share_layers"], preset["num_layers"]) == (
        "albert", 128, "all", 2)
    with pytest.raises(ValueError, match="embedding_size, share_layers apply to variant 'albert' only"):
        model_config(family="bert", hidden_size=64, num_heads=4, embedding_size=32, share_layers="all")
    with pytest.raises(ValueError, match="variant='albert' is not a 'gpt' variant"):
        model_config(family="gpt", variant="albert")
    with pytest.raises(ValueError, match="apply to variant 'albert' only"):
        BertConfig(vocab_size=VOCAB, share_layers="ffn")
    with pytest.raises(ValueError, match="num_hidden_groups=2"):
        albert_config_from_hf({**hf_albert_config(SHARED), "num_hidden_groups": 2})


def test_init_from_an_albert_masked_lm_folder_starts_mlm_sop_pretraining(tmp_path):
    from stages.pretrain.init_from import resolve_init_source
    from stages.pretrain.init_weights import build_initial_model, load_initial_weights

    torch.manual_seed(0)
    hf = transformers.AlbertForMaskedLM(transformers.AlbertConfig(**hf_albert_config(SHARED))).eval()
    hf.save_pretrained(tmp_path)
    index = {"vocab_size": VOCAB, "seq_len": 32}
    source = resolve_init_source(str(tmp_path), model_config(family="bert"), index, tmp_path / "index.json")
    assert source.architecture["variant"] == "albert" and source.architecture["embedding_size"] == 16
    model = build_initial_model(source, token_ids={})
    fresh = load_initial_weights(model, source)
    # AlbertForMaskedLM has no pooler and no SOP classifier: those start fresh.
    assert sorted(fresh) == ["albert.pooler.bias", "albert.pooler.weight", "sop_classifier.classifier.bias",
                             "sop_classifier.classifier.weight"]
    ids, mask, token_types = padded_inputs()
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(ids, mask, token_types)[0],
                                   hf(input_ids=ids, attention_mask=mask, token_type_ids=token_types).logits,
                                   rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="pretrain.model.share_layers='none' but .* has share_layers='all'"):
        resolve_init_source(str(tmp_path), model_config(family="bert", variant="albert", share_layers="none"),
                            index, tmp_path / "index.json")


def test_masked_lm_objective_reports_mlm_and_sop_for_albert():
    model = build_preset("albert-debug").train()
    objective = MaskedLM(seq_len=12, sentence_task="sop")
    ids, mask, token_types = padded_inputs()
    batch = {"input_ids": ids % 512, "attention_mask": mask, "token_type_ids": token_types,
             "labels": ids.masked_fill(torch.rand(ids.shape, generator=torch.Generator().manual_seed(0)) > 0.3, -100),
             "next_sentence_label": torch.tensor([0, 1])}
    out = objective(model, batch)
    assert set(out.parts) == {"mlm", "sop"}
    out.loss.backward()
    assert model.nsp.weight.grad.abs().sum() > 0 and model.mlm_transform.weight.grad.abs().sum() > 0


# A real DeepSpeed engine in a subprocess (see tests/support/engine_subprocess.py): ZeRO-2 shards
# the one shared layer's parameters once, and the gathered state dict names every layer.
ENGINE_SCRIPT = r"""
import json, torch
import torch.distributed as dist
from stages.models import BertForPreTraining
from stages.models.config import preset_config
from stages.objectives.mlm.loss import MaskedLM
from stages.training.engine import full_fp32_state_dict
from tests.support.engine_subprocess import train_steps

dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)
model = BertForPreTraining(preset_config("albert-debug", vocab_size=64, max_seq_len=16))
objective = MaskedLM(16, "sop")
generator = torch.Generator().manual_seed(0)
ids = torch.randint(4, 64, (4, 16), generator=generator)
masked = torch.rand(4, 16, generator=generator) < 0.3
batch = {"input_ids": ids.masked_fill(masked, 3), "attention_mask": torch.ones_like(ids),
         "token_type_ids": (torch.arange(16) >= 8).long().expand(4, 16).contiguous(),
         "labels": ids.masked_fill(~masked, -100), "next_sentence_label": torch.tensor([0, 1, 0, 1])}
engine, losses, out = train_steps(model, objective, batch, weight_decay=0.01)
fresh = BertForPreTraining(model.config)
fresh.load_state_dict(full_fp32_state_dict(engine), strict=True)
print("RESULTS" + json.dumps({"losses": losses, "parts": sorted(out.parts),
                              "final_loss": objective(fresh.eval(), batch).loss.item()}))
"""


def test_mlm_sop_steps_through_a_deepspeed_engine_lower_the_loss():
    result = run_engine_script(ENGINE_SCRIPT)
    losses = result["losses"]
    assert result["parts"] == ["mlm", "sop"]
    assert losses[-1] < 0.95 * losses[0], losses
    assert result["final_loss"] < 0.95 * losses[0]
