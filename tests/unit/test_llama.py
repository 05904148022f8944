"""The llama variant of the GPT family (RMSNorm, rotary positions, grouped-query attention,
SwiGLU, no biases, untied head) against Hugging Face `LlamaForCausalLM`: logits within
1e-4 both ways of the conversion (GQA and plain multi-head), KV-cached decoding equal to
recomputation and to transformers' greedy generate, the exported hf/ folder loading in
transformers; then the pipeline's uses: clm steps through a real DeepSpeed engine, a
fine-tuning head, and the evaluate GPT scorer (whose shared-prefix rows restart rotary
positions per branch)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from stages.models import GPT, GPTConfig
from stages.models.gpt.convert_llama import gpt_to_hf_llama, hf_llama_config, hf_llama_to_gpt, llama_config_from_hf
from stages.models.generation import generate
from stages.models.hf_export import export_hf, import_hf
from tests.support.engine_subprocess import run_engine_script
from tests.support.perturb import perturb_
from tests.support.pinned import import_pinned
from tests.support.pretraining_loss import causal_lm_loss

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; never reach for the hub
transformers = import_pinned("transformers")

# GQA: 4 query heads share 2 key/value heads; a rotary base other than the default so that
# a converter dropping it would show; RMSNorm epsilon other than either side's default.
GQA = GPTConfig(variant="llama", vocab_size=99, max_seq_len=32, num_layers=2, hidden_size=32, num_heads=4,
                num_kv_heads=2, intermediate_size=48, rope_theta=500.0, layer_norm_eps=1e-6)
MHA = GPTConfig(**{**GQA.__dict__, "num_kv_heads": 4, "rope_theta": 10000.0, "tie_word_embeddings": True})



def hf_llama(config: GPTConfig):
    return perturb_(transformers.LlamaForCausalLM(transformers.LlamaConfig(**hf_llama_config(config))))


def padded_inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 99, (2, 12), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[0, 8:] = 0  # right padding in row 0
    return ids, mask


@pytest.mark.parametrize("config", [GQA, MHA], ids=["gqa", "mha-tied"])
def test_logits_and_loss_match_llama_for_causal_lm_both_ways(config):
    ids, mask = padded_inputs()
    real = mask.bool()
    labels = ids.masked_fill(~real, -100)
    # Hugging Face -> ours
    hf = hf_llama(config)
    ours = GPT(config).eval()
    ours.load_state_dict(hf_llama_to_gpt(hf.state_dict(), config), strict=True)
    with torch.no_grad():
        logits = ours(ids, attention_mask=mask)
        loss = causal_lm_loss(logits, labels)
        theirs = hf(input_ids=ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(logits[real], theirs.logits[real], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, theirs.loss, rtol=1e-4, atol=1e-4)
    assert logits.std() > 0.1  # not a degenerate model that anything would match
    # ours -> Hugging Face
    ours = perturb_(GPT(config), seed=5)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**hf_llama_config(config))).eval()
    missing, unexpected = hf.load_state_dict(gpt_to_hf_llama(ours.state_dict(), config), strict=False)
    assert not missing and not unexpected
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=ids, attention_mask=mask).logits[real],
                                   ours(ids, attention_mask=mask)[real], rtol=1e-4, atol=1e-4)


def test_rotary_base_and_key_value_grouping_change_the_outputs():
    # Guards the parity test: a wrong rope_theta or a head-to-group mapping other than
    # Hugging Face's would give different logits, not the same ones by accident.
    hf = hf_llama(GQA)
    ids, _ = padded_inputs()
    reference = hf(input_ids=ids).logits
    other_base = GPT(GPTConfig(**{**GQA.__dict__, "rope_theta": 10000.0})).eval()
    other_base.load_state_dict(hf_llama_to_gpt(hf.state_dict(), GQA))
    state = hf_llama_to_gpt(hf.state_dict(), GQA)
    for i in range(GQA.num_layers):  # swap the two key heads: q would meet the wrong group
        q, k, v = state[f"blocks.{i}.attn.qkv_proj.weight"].split([32, 16, 16])
        state[f"blocks.{i}.attn.qkv_proj.weight"] = torch.cat([q, k.roll(8, dims=0), v])
    other_groups = GPT(GQA).eval()
    other_groups.load_state_dict(state)
    with torch.no_grad():
        for model in (other_base, other_groups):
            assert (model(ids) - reference).abs().max() > 1e-3


@pytest.mark.parametrize("config", [GQA, MHA], ids=["gqa", "mha-tied"])
def test_kv_cache_decoding_equals_recomputation_and_hugging_face_greedy(config):
    # Seeded: greedy decoding of random weights can meet near-tied logits, where float
    # rounding picks either token; an unseeded init made the comparison pass or fail by chance.
    torch.manual_seed(0)
    hf = hf_llama(config)
    ours = GPT(config).eval()
    ours.load_state_dict(hf_llama_to_gpt(hf.state_dict(), config))
    prompt = torch.randint(0, 99, (2, 5), generator=torch.Generator().manual_seed(3))
    cached = generate(ours, prompt, 12)
    assert torch.equal(cached, generate(ours, prompt, 12, use_cache=False))
    assert torch.equal(cached, hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0))
    # The cache holds only the key/value heads: grouped-query attention's memory saving.
    cache = ours.new_kv_cache()
    ours(prompt, kv_cache=cache)
    assert cache[0].keys.shape == (2, config.num_kv_heads, 5, config.head_size)


@pytest.mark.parametrize("config", [GQA, MHA], ids=["gqa", "mha-tied"])
def test_exported_folder_loads_as_llama_for_causal_lm_and_imports_back(tmp_path, config):
    ours = perturb_(GPT(config))
    export_hf(ours, tmp_path / "hf")
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["model_type"] == "llama" and llama_config_from_hf(hf_config) == config
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert (hf.lm_head.weight is hf.model.embed_tokens.weight) == config.tie_word_embeddings
    back = import_hf(tmp_path / "hf").eval()
    assert back.config == config
    ids, mask = padded_inputs()
    real = mask.bool()
    with torch.no_grad():
        expected = ours(ids, attention_mask=mask)
        torch.testing.assert_close(hf(input_ids=ids, attention_mask=mask).logits[real], expected[real],
                                   rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(back(ids, attention_mask=mask), expected, rtol=0, atol=0)


def test_unsupported_llama_checkpoints_and_options_are_refused():
    hf_config = {**hf_llama_config(GQA), "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}}
    with pytest.raises(ValueError, match="rope type 'llama3'"):
        llama_config_from_hf(hf_config)
    with pytest.raises(ValueError, match="num_kv_heads apply to variant 'llama' only"):
        GPTConfig(vocab_size=99, max_seq_len=8, num_heads=4, num_kv_heads=2)
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        GPTConfig(variant="llama", vocab_size=99, max_seq_len=8, num_heads=4, num_kv_heads=3)
    from stages.pretrain.model_config import model_config

    with pytest.raises(ValueError, match="rope_theta apply to variant 'llama' only"):
        model_config(rope_theta=5e5)
    llama = model_config(variant="llama", hidden_size=64, num_heads=4, num_kv_heads=1).architecture()
    assert llama == {"family": "gpt", "num_layers": 2, "hidden_size": 64, "num_heads": 4, "dropout": 0.0,
                     "layer_norm_eps": 1e-5, "variant": "llama", "num_kv_heads": 1}


def test_a_pretrained_llama_fine_tunes_and_is_scored_by_the_evaluate_stage(tmp_path):
    from stages.evaluate.requests import LoglikelihoodRequest
    from stages.evaluate.scorers import load_scorer
    from stages.finetune.model_source import build_task_model, load_backbone, resolve_model_source
    from tests.support.pretrained_dirs import book_paragraphs, write_pretrained

    architecture = {"variant": "llama", "num_layers": 2, "hidden_size": 32, "num_heads": 4, "num_kv_heads": 2}
    root = write_pretrained(tmp_path, "gpt", architecture, vocab_size=512, max_seq_len=32,
                            texts=book_paragraphs(8000), weight_scale=4.0)
    # fine-tuning: the pretrain stage's model/ folder -> a classification head on the last real token
    backbone = load_backbone(resolve_model_source(None, root / "model"))
    assert backbone.config.variant == "llama" and not backbone.config.tie_word_embeddings
    classifier = build_task_model({"head": "sequence_classification", "num_labels": 3}, backbone).eval()
    ids = torch.randint(3, 512, (2, 10), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    logits, loss = classifier(ids, mask, torch.tensor([0, 2]))
    loss.backward()
    assert backbone.blocks[0].attn.qkv_proj.weight.grad.abs().sum() > 0
    with torch.no_grad():  # right padding changes nothing: the row alone scores the same
        alone, _ = classifier(ids[1:, :6])
    torch.testing.assert_close(logits[1:].detach(), alone, rtol=1e-5, atol=1e-5)
    # evaluation: three choices share one context row (each branch restarts its positions)
    scorer = load_scorer(root / "model", batch_size=4)
    context, choices = "Which way did they go?", [" Up the hill.", " Down to the river.", " North"]
    results = scorer.loglikelihood([LoglikelihoodRequest(0, i, context, c) for i, c in enumerate(choices)])
    encode = scorer.tokenizer.encode
    context_ids = encode(context, add_special_tokens=False).ids
    for choice, result in zip(choices, results, strict=True):
        continuation = encode(context + choice, add_special_tokens=False).ids[len(context_ids):]
        inputs = torch.tensor([context_ids + continuation[:-1]])
        with torch.no_grad():
            log_probs = scorer.model(inputs)[0, -len(continuation):].log_softmax(-1)
        expected = log_probs.gather(1, torch.tensor(continuation)[:, None]).sum().item()
        assert result.logprob == pytest.approx(expected, abs=1e-4), choice
    # and the hf/ folder next to it is a LlamaForCausalLM with the tokenizer
    hf = transformers.AutoModelForCausalLM.from_pretrained(root / "hf")
    assert type(hf).__name__ == "LlamaForCausalLM"


# A real DeepSpeed engine in a subprocess: initialising torch.distributed and DeepSpeed's
# global communicator inside the pytest process would leak into other tests.
ENGINE_SCRIPT = r"""
import json, torch
import torch.distributed as dist
from stages.models import GPT
from stages.models.config import preset_config
from stages.objectives.clm.loss import CausalLM
from stages.training.engine import full_fp32_state_dict
from tests.support.engine_subprocess import train_steps

dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)
model = GPT(preset_config("llama-debug", vocab_size=64, max_seq_len=16))
objective = CausalLM(16)
batch = {"input_ids": torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))}
engine, losses, _ = train_steps(model, objective, batch, weight_decay=0.1)
fresh = GPT(model.config)
fresh.load_state_dict(full_fp32_state_dict(engine), strict=True)
print("RESULTS" + json.dumps({"losses": losses, "steps": engine.global_steps,
                              "flops_per_sample": objective.flops_per_sample(model),
                              "final_loss": objective(fresh, batch).loss.item()}))
"""



def test_clm_steps_through_a_deepspeed_engine_lower_the_loss():
    result = run_engine_script(ENGINE_SCRIPT)
    losses = result["losses"]
    assert result["steps"] == 4 and losses[-1] < 0.95 * losses[0], losses
    # The exported fp32 master weights hold the trained model (the last step included).
    assert result["final_loss"] < 0.95 * losses[0]
    # (6N + 12 L C T) per token, N without the untied embedding (a lookup, not a matmul).
    n = GPT(GPTConfig(variant="llama", vocab_size=64, max_seq_len=16, num_layers=2, hidden_size=64, num_heads=4,
                      num_kv_heads=2, intermediate_size=192)).num_parameters() - 64 * 64
    assert result["flops_per_sample"] == (6 * n + 12 * 2 * 64 * 16) * 16
