"""One scaling point per finished run (views/scaling_points.py): parameters with
and without embeddings, training tokens as the pretrain stage counts them, 6ND, and the
downstream scores the report collects."""

from __future__ import annotations

import json

from stages.models.gpt.config import GPTConfig
from stages.models.gpt.model import GPT
from views.scaling_points import non_embedding_parameters, scaling_points, tokens_trained
from stages.report.sources import RunSource, StageRecord

BATCH = {"micro_batch_size": 4, "gradient_accumulation_steps": 2, "num_workers": 2}  # 16 sequences a step


def pretrain_record(tmp_path, config: dict, metrics: dict, records: list[dict] | None = None) -> StageRecord:
    directory = tmp_path / "pretrain"
    directory.mkdir(exist_ok=True)
    if records is not None:
        (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return StageRecord("pretrain", "done", "fp", {"config": config, "metrics": metrics}, directory)


def test_tokens_per_sequence_come_from_the_stage_own_rates(tmp_path):
    # T5 span: encoder 128 + decoder 26 tokens per sequence; dataset.seq_len alone would say 128.
    records = [{"step": 10, "tokens_per_s": 154.0 * 37.5, "samples_per_s": 37.5},
               {"step": 11, "loss": 3.0}]  # the last record with both rates counts, not the last line
    record = pretrain_record(tmp_path, BATCH, {"steps": 100}, records)
    tokens, counted = tokens_trained(record, {"dataset": {"objective": "span", "seq_len": 128}})
    assert tokens == 100 * 16 * 154
    assert counted == "100 steps x 16 sequences x 154 tokens (tokens_per_s / samples_per_s in metrics.jsonl)"


def test_tokens_fall_back_to_seq_len_for_clm_and_mlm_only(tmp_path):
    record = pretrain_record(tmp_path, BATCH, {"steps": 10}, [{"step": 10, "loss": 3.0}])
    assert tokens_trained(record, {"dataset": {"objective": "clm", "seq_len": 64}})[0] == 10 * 16 * 64
    tokens, why = tokens_trained(record, {"dataset": {"objective": "span", "seq_len": 64}})
    assert tokens is None and "only for objectives clm and mlm" in why
    no_batch = pretrain_record(tmp_path, {"micro_batch_size": 4}, {"steps": 10})
    tokens, why = tokens_trained(no_batch, {"dataset": {"objective": "clm", "seq_len": 64}})
    assert tokens is None and "lacks micro_batch_size, gradient_accumulation_steps or num_workers" in why


def test_non_embedding_estimate_counts_the_blocks_weight_matrices():
    # Kaplan's N = 2 d_model n_layer (2 d_attn + d_ff): the blocks' matrices, not their biases and norms.
    model = GPT(GPTConfig(vocab_size=256, max_seq_len=32, num_layers=3, hidden_size=48, num_heads=4))
    matrices = sum(p.numel() for p in model.blocks.parameters() if p.dim() == 2)
    estimate = non_embedding_parameters({"family": "gpt", "variant": None, "num_layers": 3, "hidden_size": 48})
    assert estimate == matrices == 12 * 3 * 48 ** 2
    assert non_embedding_parameters({"family": "gpt", "num_layers": 3, "hidden_size": 48,
                                     "intermediate_size": 96}) == 2 * 48 * 3 * (2 * 48 + 96)
    # Other blocks (SwiGLU, shared layers, encoder-decoder) are not this formula's.
    assert non_embedding_parameters({"family": "gpt", "variant": "llama", "num_layers": 3, "hidden_size": 48}) is None
    assert non_embedding_parameters({"family": "bert", "num_layers": 3, "hidden_size": 48}) is None


def test_points_of_finished_runs_with_flops_and_scores(tmp_path):
    config = {**BATCH, "model": {"family": "gpt", "num_layers": 2, "hidden_size": 64}}
    finished = RunSource("a", {"dataset": {"objective": "clm", "seq_len": 128}}, [
        pretrain_record(tmp_path, config, {"steps": 40, "num_parameters": 250_000, "val_loss": 3.9}),
        StageRecord("finetune", "done", "ft", {"metrics": {"sst2/accuracy": 0.6, "sst2/train_examples": 64}}),
    ])
    unfinished = RunSource("b", {}, [StageRecord("pretrain", "incomplete", "fp2")])
    [point] = scaling_points([finished, unfinished])
    assert (point.label, point.num_parameters, point.non_embedding_parameters, point.tokens, point.val_loss) == \
        ("a", 250_000, 98_304, 40 * 16 * 128, 3.9)
    assert point.flops() == 6 * 250_000 * 81_920 and point.flops(non_embedding=True) == 6 * 98_304 * 81_920
    assert [(s.name, s.value, s.axis) for s in point.scores] == [
        ("sst2/accuracy (fine-tuned)", 0.6, "scores"), ("GLUE average", 0.6, "scores")]
    # A run started from a checkpoint trained the checkpoint's architecture, not the config's.
    init_from = RunSource("c", {}, [pretrain_record(tmp_path, {**config, "init_from": "ckpt"},
                                                    {"steps": 40, "num_parameters": 250_000})])
    assert scaling_points([init_from])[0].non_embedding_parameters is None
