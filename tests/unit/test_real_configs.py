"""The configs for real cluster runs (configs/gpt2-small.yaml, bert-base.yaml, t5-small.yaml)
and pretrain.model.preset: each config loads and plans, has its paper's shape, context,
vocabulary and global batch, and trains 2 steps at full width (full hidden size and
vocabulary, one layer, 32 tokens) through a real DeepSpeed engine on the CPU with its own
ZeRO stage and optimizer. In fp32: this CPU has no bf16 matrix units, and a bf16 step of
the gpt2-small width took 16 s instead of 1 s (bf16 training is covered at a tiny size by
test_deepspeed_config.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_config
from pipeline.planner import plan
from stages.models.build import padded_vocab_size
from stages.models.config import preset_shape
from stages.pretrain.config import PretrainConfig
from stages.pretrain.model_config import model_config
from tests.support.engine_subprocess import run_engine_script

REPO_ROOT = Path(__file__).resolve().parents[2]
REAL_CONFIGS = ["gpt2-small", "bert-base", "t5-small"]
# name -> (preset, dataset.seq_len, global batch in sequences, max_steps, tokenizer
# vocabulary, embedding rows after pretrain.model.pad_vocab_to_multiple_of): the papers'
PAPER = {
    "gpt2-small": ("gpt2-small", 1024, 512, 19073, 50257, 50304),
    "bert-base": ("bert-base", 128, 256, 900_000, 30522, 30522),
    "t5-small": ("t5-small", 512, 128, 2**19, 32100, 32128),  # T5's 32,128 rows, 32,100 used
}
MINIMAL = "name: t\ningest:\n  sources:\n    - path: corpus/*.txt\n"


def load_real(name: str, *overrides: str):
    return load_config(REPO_ROOT / "configs" / f"{name}.yaml", list(overrides))


@pytest.mark.parametrize("name", REAL_CONFIGS)
def test_real_config_loads_and_plans_with_the_papers_shape(name, tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data"))
    cfg = load_real(name, f"workdir={tmp_path / 'work'}")
    decisions = plan(cfg)
    assert [d.action for d in decisions] == ["run"] * len(decisions)
    assert all(d.reason == "not run yet" for d in decisions)

    preset, seq_len, global_batch, max_steps, vocab, rows = PAPER[name]
    pretrain = cfg.pretrain
    family, fields = preset_shape(preset)
    architecture = pretrain.model.architecture()
    assert pretrain.model.preset == preset and architecture["family"] == family
    for key in ("num_layers", "hidden_size", "num_heads", "dropout", "ff_size", "head_size"):
        if key in fields:
            assert architecture[key] == fields[key], key
    assert cfg.dataset.seq_len == seq_len
    assert pretrain.micro_batch_size * pretrain.gradient_accumulation_steps * pretrain.num_workers == global_batch
    assert pretrain.max_steps == max_steps
    assert (pretrain.precision, pretrain.gpus_per_worker) == ("bf16", 1) and pretrain.zero_stage >= 1
    # The model's vocabulary comes from the tokenizer: the paper's size.
    assert cfg.tokenizer.vocab_size == vocab
    assert padded_vocab_size(vocab, pretrain.model.pad_vocab_to_multiple_of) == rows


def test_keys_next_to_a_preset_override_it_and_the_rest_come_from_it(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL + "pretrain:\n  model:\n    preset: t5-small\n    num_layers: 2\n")
    model = load_config(path, ["pretrain.model.dropout=0.0"]).pretrain.model
    assert (model.family, model.num_layers, model.dropout) == ("t5", 2, 0.0)  # given keys win
    assert (model.hidden_size, model.num_heads, model.ff_size, model.head_size) == (512, 8, 2048, 64)
    architecture = model.architecture()
    assert architecture["relative_attention_num_buckets"] == 32  # a preset field with no config key
    assert "vocab_size" not in architecture and "max_seq_len" not in architecture  # from the data
    # What the training workers get back (a dump, every key present) resolves the same.
    assert model_config(**model.model_dump()).architecture() == architecture
    assert PretrainConfig.model_validate({"model": {"preset": "bert-base", "family": "bert"}}).model.hidden_size == 768


def test_a_misspelled_preset_names_the_key_line_and_closest_preset(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL + "pretrain:\n  model:\n    preset: gpt2-smal\n")
    with pytest.raises(ConfigError, match=r"c.yaml:7: 'pretrain.model.preset': unknown model preset "
                                          r"'gpt2-smal'; did you mean 'gpt2-small'\?"):
        load_config(path)


def test_a_family_other_than_the_presets_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL + "pretrain:\n  model:\n    preset: bert-base\n    family: gpt\n")
    with pytest.raises(ConfigError, match="preset 'bert-base' is a 'bert' model but family is 'gpt'; "
                                          "remove pretrain.model.family"):
        load_config(path)


# Each real width through create_engine as the training loop calls it, in a subprocess:
# torch.distributed and DeepSpeed's communicator would leak into other tests.
SMOKE_SCRIPT = r"""
import json, sys, torch
import torch.distributed as dist
from pipeline.config import load_config
from stages.models import build_model
from stages.models.build import padded_vocab_size
from stages.objectives.clm.loss import CausalLM
from stages.objectives.mlm.loss import MaskedLM
from stages.objectives.span.loss import SpanCorruption
from stages.training.engine import create_engine, full_fp32_state_dict, optimizer_step
from stages.training.engine_settings import EngineSettings
from stages.training.parallelize import parallelize_for

dist.init_process_group("gloo", rank=0, world_size=1)
SEQ, BATCH, TARGETS = 32, 2, 8
results = {}
for name in sys.argv[1:]:
    layers = ["pretrain.model.num_layers=1"] + (["pretrain.model.num_decoder_layers=1"] if name.startswith("t5") else [])
    cfg = load_config(f"configs/{name}.yaml", layers + [
        "pretrain.micro_batch_size=2", "pretrain.gradient_accumulation_steps=1", "pretrain.max_steps=2",
        "pretrain.warmup_steps=1", "pretrain.precision=fp32",
        # compile is tested with a fast backend in test_memory_features.py; inductor on a CPU
        # would spend most of this test compiling
        "pretrain.compile=false"]).pretrain
    vocab = load_config(f"configs/{name}.yaml").tokenizer.vocab_size
    torch.manual_seed(0)
    # As the training loop builds it: the tokenizer's vocabulary, padded.
    model = build_model(cfg.model.architecture(), vocab_size=padded_vocab_size(vocab, cfg.model.pad_vocab_to_multiple_of),
                        max_seq_len=SEQ)
    names = list(model.state_dict())
    generator = torch.Generator().manual_seed(0)
    ids = lambda *shape: torch.randint(5, vocab, shape, generator=generator)
    if cfg.model.family == "gpt":
        objective, batch = CausalLM(SEQ), {"input_ids": ids(BATCH, SEQ)}
    elif cfg.model.family == "bert":
        labels = torch.full((BATCH, SEQ), -100)
        labels[:, 3:8] = ids(BATCH, 5)
        objective = MaskedLM(SEQ, "nsp")
        batch = {"input_ids": ids(BATCH, SEQ), "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long),
                 "token_type_ids": torch.zeros(BATCH, SEQ, dtype=torch.long), "labels": labels,
                 "next_sentence_label": torch.tensor([0, 1])}
    else:
        objective = SpanCorruption(SEQ, TARGETS)
        batch = {"input_ids": ids(BATCH, SEQ), "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long),
                 "decoder_input_ids": ids(BATCH, TARGETS), "labels": ids(BATCH, TARGETS)}
    parallelize_for(model, cfg)
    engine = create_engine(model, EngineSettings.from_pretrain(cfg))
    losses = []
    for step in range(cfg.max_steps):
        output = objective(engine, batch)
        engine.backward(output.loss)
        optimizer_step(engine)
        losses.append(output.loss.float().item())
    state = full_fp32_state_dict(engine)
    embedding = state[{"gpt": "token_embedding.weight", "bert": "backbone.embeddings.word_embedding.weight",
                       "t5": "shared.weight"}[cfg.model.family]]
    results[name] = {"losses": losses, "global_steps": engine.global_steps, "names": list(state) == names,
                     "embedding": list(embedding.shape),
                     "zero_stage": engine.zero_optimization_stage()}
print("RESULTS" + json.dumps(results))
"""



@pytest.fixture(scope="module")
def smoke_results():
    return run_engine_script(SMOKE_SCRIPT, *REAL_CONFIGS, omp_threads=2, extra_env={"DATA_DIR": "/data"})


@pytest.mark.parametrize("name", REAL_CONFIGS)
def test_real_width_trains_two_steps_through_deepspeed_on_cpu(name, smoke_results):
    result = smoke_results[name]
    preset, *_, rows = PAPER[name]
    _, fields = preset_shape(preset)
    assert result["global_steps"] == 2
    assert all(0 < loss < 20 for loss in result["losses"]), result["losses"]
    assert result["names"]  # exported weights carry the plain model's names
    # Full width and full (padded) vocabulary.
    assert result["embedding"] == [rows, fields["hidden_size"]]
    assert result["zero_stage"] == 1  # the config's


@pytest.mark.parametrize("name", REAL_CONFIGS)
def test_planning_a_preset_config_imports_no_torch(name, tmp_path):
    # `pretrain plan` must start fast: the preset table is plain data (stages/models/<family>/config.py).
    code = (
        "import sys\nfrom cluster.cli import main\n"
        f"assert main(['plan', {str(REPO_ROOT / 'configs' / f'{name}.yaml')!r}, "
        f"'-o', 'workdir={tmp_path / 'work'}']) == 0\n"
        "heavy = {'torch', 'ray', 'deepspeed'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    env = {**os.environ, "DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
