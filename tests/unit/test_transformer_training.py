"""The original Transformer trains on the pipeline's span-corruption objective through a real
DeepSpeed engine (ZeRO-2, bf16, as the pretrain stage builds it), with the paper's label
smoothing 0.1, and the gathered weights load back into a fresh model; the text-to-text
fine-tuning path builds, trains, saves and reloads its model from a saved transformer
folder (in-process, no Ray); the evaluate stage's scorer loads one and scores it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stages.evaluate.requests import GenerationRequest, LoglikelihoodRequest
from stages.evaluate.scorers import T5Scorer, load_scorer
from stages.finetune.families.registry import family_for
from stages.finetune.glue.text_to_text import MAX_TARGET_LEN
from stages.finetune.model_source import load_backbone, resolve_model_source
from stages.finetune.saved_model import load_finetuned, save_finetuned
from stages.finetune.tasks import get_task
from stages.finetune.text_to_text.model import TextToTextModel
from stages.models import Transformer, build_model, save_pretrained
from stages.models.generation import generate_seq2seq
from tests.support.engine_subprocess import run_engine_script
from tests.support.pretrained_dirs import book_paragraphs, train_tokenizer


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

# A real DeepSpeed engine in a subprocess (see tests/support/engine_subprocess.py).
ENGINE_SCRIPT = r"""
import functools, json, torch
import torch.distributed as dist
from stages.models import Transformer
from stages.models.config import preset_config
from stages.objectives.span.loss import SpanCorruption
from stages.training.engine import full_fp32_state_dict
from tests.support.engine_subprocess import train_steps

dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)
model = Transformer(preset_config("transformer-debug", vocab_size=64))
objective = SpanCorruption(seq_len=16, targets_length=6)
smoothed = functools.partial(objective, label_smoothing=0.1)  # the paper's, as pretrain.label_smoothing passes it
generator = torch.Generator().manual_seed(0)
input_ids = torch.randint(4, 64, (4, 16), generator=generator)
labels = torch.randint(4, 64, (4, 6), generator=generator)
labels[:, -1] = 1  # </s>
batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels,
         "decoder_input_ids": model.shift_right(labels)}
engine, losses, out = train_steps(model, smoothed, batch, weight_decay=0.0)
fresh = Transformer(model.config)
fresh.load_state_dict(full_fp32_state_dict(engine), strict=True)
print("RESULTS" + json.dumps({"losses": losses, "parts": sorted(out.parts),
                              "final_loss": smoothed(fresh.eval(), batch).loss.item(),
                              "tied": fresh.lm_head.weight is fresh.shared.weight}))
"""


def test_span_steps_through_a_deepspeed_engine_lower_the_loss():
    result = run_engine_script(ENGINE_SCRIPT)
    losses = result["losses"]
    assert result["parts"] == ["span"] and result["tied"]
    assert losses[-1] < 0.9 * losses[0], losses
    assert result["final_loss"] < 0.9 * losses[0]


def test_text_to_text_fine_tuning_builds_trains_and_reloads_from_a_saved_transformer(tmp_path):
    torch.manual_seed(0)
    folder = tmp_path / "pretrain" / "model"
    save_pretrained(build_model({"family": "t5", "variant": "transformer", "num_layers": 1, "hidden_size": 32,
                                 "num_heads": 2, "ff_size": 64, "dropout": 0.0}, vocab_size=100), folder)
    (folder / "tokenizer.json").write_text("{}")  # only copied along here, never parsed
    # what the finetune stage does, minus Ray: source -> backbone -> the task family's model
    source = resolve_model_source(None, folder)
    assert (source.family, source.max_seq_len) == ("t5", None)  # sinusoids: no length limit
    backbone = load_backbone(source)
    assert type(backbone) is Transformer
    family = family_for(get_task("sst2"), source.family)
    head_config = {"head": "sequence_classification", "task": "sst2"}
    model = family.build_model(head_config, backbone)
    assert isinstance(model, TextToTextModel) and model.backbone is backbone
    input_ids = torch.randint(3, 100, (4, 10))
    labels = torch.tensor([[5, 1, -100, -100]] * 2 + [[7, 8, 1, -100]] * 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        _, loss = model(input_ids, torch.ones_like(input_ids), labels=labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 4, losses
    model.eval()
    with torch.no_grad():
        generated, _ = model(input_ids, torch.ones_like(input_ids))
    assert generated.shape == (4, MAX_TARGET_LEN)
    assert generated[0, :2].tolist() == [5, 1] and generated[2, :3].tolist() == [7, 8, 1]
    # the worker's export and the report's reload
    save_finetuned(model, tmp_path / "sst2", head_config=head_config, tokenizer_path=folder / "tokenizer.json")
    reloaded, saved_head = load_finetuned(tmp_path / "sst2")
    assert saved_head == head_config and type(reloaded.backbone) is Transformer
    with torch.no_grad():
        again, _ = reloaded(input_ids, torch.ones_like(input_ids))
    assert np.array_equal(again.numpy(), generated.numpy())


def test_the_evaluate_scorer_scores_a_transformer_as_a_t5(tmp_path):
    # The pretrain stage's model/ folder, as for a T5 (tests/support/pretrained_dirs.py also
    # exports hf/, which this model has not).
    tokenizer, _ = train_tokenizer("t5", 512, book_paragraphs(8000))
    pad, eos = tokenizer.token_to_id("<pad>"), tokenizer.token_to_id("</s>")
    torch.manual_seed(0)
    model = build_model({"family": "t5", "variant": "transformer", "num_layers": 1, "hidden_size": 32,
                         "num_heads": 2, "ff_size": 64, "dropout": 0.0}, vocab_size=tokenizer.get_vocab_size(),
                        pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=pad)
    with torch.no_grad():  # a fresh tied post-LN model repeats its input token; stronger blocks vary it
        for name, parameter in model.named_parameters():
            if ".blocks." in name and parameter.dim() == 2:
                parameter.mul_(3.0)
    save_pretrained(model, tmp_path / "model")
    tokenizer.save(str(tmp_path / "model" / "tokenizer.json"))
    scorer = load_scorer(tmp_path / "model", batch_size=2, max_length=16)
    assert isinstance(scorer, T5Scorer) and type(scorer.model) is Transformer
    sentinel = tokenizer.token_to_id("<extra_id_0>")
    context = tokenizer.encode("The dog barked at the", add_special_tokens=False).ids
    span = tokenizer.encode("The dog barked at the moon", add_special_tokens=False).ids[len(context):]
    [result] = scorer.loglikelihood([LoglikelihoodRequest(0, 0, "The dog barked at the", " moon")])
    # by hand: encoder = context <extra_id_0> </s>, decoder = <pad> <extra_id_0> span, span scored
    with torch.no_grad():
        logits, _ = model.eval()(torch.tensor([context + [sentinel, eos]]), labels=torch.tensor([[sentinel, *span]]))
    expected = logits[0, 1:].log_softmax(-1).gather(1, torch.tensor(span)[:, None]).sum().item()
    assert abs(result.logprob - expected) < 1e-4
    [generated] = scorer.generate([GenerationRequest(0, "The dog barked at the", until=(), max_new_tokens=4)])
    # by hand: greedy decoding, a leading <extra_id_0> dropped, cut at the next sentinel or </s>
    decoded = generate_seq2seq(model, torch.tensor([context + [sentinel, eos]]), None, 5, eos_token_id=eos)[0, 1:]
    decoded = decoded.tolist()[1:] if decoded[0] == sentinel else decoded.tolist()
    stops = {tokenizer.token_to_id(f"<extra_id_{i}>") for i in range(100)} | {eos}
    span = next((decoded[:i] for i, t in enumerate(decoded) if t in stops), decoded)[:4]
    assert generated.text == tokenizer.decode(span) and len(set(decoded)) > 1
