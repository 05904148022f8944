"""PretrainJob (stages/pretrain/job.py), what the pretrain driver hands its Ray Train
workers: checked when built, each mistake named by its key; it survives pickling (Ray
ships it) and round-trips through Ray Train's train_loop_config dict. No Ray."""

from __future__ import annotations

import json
import pickle
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from stages.pretrain.config import PretrainConfig
from stages.pretrain.job import PretrainJob
from stages.tracking import MetricsLog
from tests.support.model_sources import folder_source

TINY_GPT = {"family": "gpt", "num_layers": 1, "hidden_size": 32, "num_heads": 2}


def make_job(tmp_path: Path, config: dict | None = None, **fields) -> PretrainJob:
    """A valid job over real (tiny) files under tmp_path; `fields` replace its values."""
    dataset_dir, tokenizer_dir, output_dir = tmp_path / "dataset", tmp_path / "tokenizer", tmp_path / "pretrain"
    for folder in (dataset_dir, tokenizer_dir, output_dir):
        folder.mkdir(exist_ok=True)
    (dataset_dir / "index.json").write_text(json.dumps({"seq_len": 16, "vocab_size": 1000}))
    (tokenizer_dir / "tokenizer.json").write_text("{}")
    values = dict(
        config=PretrainConfig.model_validate({"model": TINY_GPT, **(config or {})}), seed=0,
        dataset_dir=dataset_dir, tokenizer_path=tokenizer_dir / "tokenizer.json", output_dir=output_dir,
        seq_len=16, vocab_size=1000, token_ids={}, metrics_log=MetricsLog(output_dir / "metrics.jsonl"),
        experiment=None, fingerprint="0123abcd")
    return PretrainJob(**{**values, **fields})


def test_a_valid_job_is_frozen_pickles_and_round_trips_through_the_loop_config(tmp_path):
    job = make_job(tmp_path)
    with pytest.raises(FrozenInstanceError):
        job.seed = 1
    loop_config = job.as_loop_config()
    assert list(loop_config) == ["job"]  # Ray Train's train_loop_config must be a dict
    shipped = pickle.loads(pickle.dumps(loop_config))
    received = PretrainJob.from_loop_config(shipped)
    assert received.metrics_log.path == job.metrics_log.path  # MetricsLog has no __eq__
    assert replace(received, metrics_log=job.metrics_log) == job
    assert received.config.model_dump() == job.config.model_dump()


@pytest.mark.parametrize("key, value, error, message", [
    ("seq_len", 0, ValueError, r"PretrainJob.seq_len must be a positive integer, got 0; .*index.json"),
    ("vocab_size", -3, ValueError, r"PretrainJob.vocab_size must be a positive integer"),
    ("seq_len", True, ValueError, r"PretrainJob.seq_len must be a positive integer, got True"),
    ("dataset_dir", Path("relative/dataset"), ValueError, r"PretrainJob.dataset_dir must be an absolute Path"),
    ("output_dir", "/tmp/a-string", ValueError, r"PretrainJob.output_dir must be an absolute Path"),
    ("token_ids", {"pad_token_id": 1000}, ValueError,
     r"PretrainJob.token_ids\['pad_token_id'\] = 1000 is not a token id .*\(0 to 999\)"),
    ("token_ids", {"bos_token_id": 1}, ValueError, r"PretrainJob.token_ids: unknown 'bos_token_id'"),
    ("metrics_log", "metrics.jsonl", TypeError, r"PretrainJob.metrics_log must be a MetricsLog"),
    ("user_deepspeed_config", {"bf16": {"enabled": True}}, ValueError,
     r"PretrainJob.user_deepspeed_config is set but pretrain.deepspeed_config is not"),
    ("init_source", folder_source("/x"), ValueError,
     r"PretrainJob.init_source must be resolved from pretrain.init_from exactly when it is set"),
    ("eval_token_ids", {}, None, None),  # no eval_tasks: nothing to check
])
def test_each_bad_field_is_refused_naming_its_key(tmp_path, key, value, error, message):
    if error is None:
        make_job(tmp_path, **{key: value})
        return
    with pytest.raises(error, match=message):
        make_job(tmp_path, **{key: value})


def test_missing_files_are_refused_with_what_to_do(tmp_path):
    job = make_job(tmp_path)
    (job.dataset_dir / "index.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"PretrainJob.dataset_dir: .*index.json does not exist; run the "
                                                 "dataset stage first"):
        PretrainJob(**job.__dict__)  # the same fields, now without index.json
    with pytest.raises(FileNotFoundError, match=r"PretrainJob.tokenizer_path: .*missing.json does not exist"):
        make_job(tmp_path, tokenizer_path=tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError, match=r"PretrainJob.output_dir: .*nowhere does not exist"):
        make_job(tmp_path, output_dir=tmp_path / "nowhere")


@pytest.mark.parametrize("model, token_ids, missing", [
    ({"family": "bert", "num_layers": 1, "hidden_size": 32, "num_heads": 2}, {}, "pad_token_id"),
    ({"family": "t5", "num_layers": 1, "hidden_size": 32, "num_heads": 2}, {"pad_token_id": 0},
     "eos_token_id, decoder_start_token_id"),
])
def test_the_special_token_ids_a_family_needs_must_all_be_there(tmp_path, model, token_ids, missing):
    with pytest.raises(ValueError, match=rf"PretrainJob.token_ids lacks {missing}, which a {model['family']} "
                                         "model needs"):
        make_job(tmp_path, config={"model": model}, token_ids=token_ids)
    complete = {"pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0}
    make_job(tmp_path, config={"model": model}, token_ids=complete)


def test_planned_eval_tasks_must_match_the_configured_ones(tmp_path):
    config = {"eval_tasks": ["lambada_openai"]}
    with pytest.raises(ValueError, match=r"PretrainJob.eval_plans has 0 plan\(s\) for 1 pretrain.eval_tasks"):
        make_job(tmp_path, config=config)
    with pytest.raises(ValueError, match=r"PretrainJob.eval_token_ids is empty"):
        make_job(tmp_path, config=config, eval_plans=["a plan"])
    make_job(tmp_path, config=config, eval_plans=["a plan"], eval_token_ids={"eot_id": 0})


def test_a_resolved_init_source_must_be_of_the_configured_family(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    config = {"init_from": str(checkpoint)}
    with pytest.raises(ValueError, match=r"PretrainJob.init_source must be resolved from pretrain.init_from"):
        make_job(tmp_path, config=config)
    with pytest.raises(ValueError, match=r"PretrainJob.init_source is a 'bert' checkpoint but "
                                         "pretrain.model.family is 'gpt'"):
        make_job(tmp_path, config=config, init_source=folder_source(checkpoint, "bert"))
    make_job(tmp_path, config=config, init_source=folder_source(checkpoint, "gpt"))
