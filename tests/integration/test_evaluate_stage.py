"""The evaluate stage on a real (tiny, random) GPT through Ray tasks: every task kind is
scored, outputs are written, and 1 and 2 workers give the same numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.config import ExperimentConfig
from pipeline.context import StageContext
from stages.evaluate.config import EvaluateConfig
from stages.evaluate.run import run
from stages.models.build import build_model, save_pretrained
from stages.ray_tasks import run_in_process
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer

pytestmark = pytest.mark.ray
TASKS = ["lambada_openai", "copa", "wikitext2", "sst2"]


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory, data_dir) -> Path:
    """A pretrain stage's output folder with `model/` holding a tiny random GPT."""
    recipe = build_recipe(TokenizerConfig(kind="bpe", vocab_size=600))
    tokenizer = build_tokenizer(recipe)
    text = (data_dir / "corpus" / "gutenberg" / "pg851.txt").read_text(encoding="utf-8")[:200_000]
    tokenizer.train_from_iterator(text.split("\n\n"), trainer=recipe.trainer)
    tokenizer = finish_tokenizer(tokenizer, recipe)
    stage = tmp_path_factory.mktemp("pretrain")
    model = build_model({"family": "gpt", "num_layers": 2, "hidden_size": 32, "num_heads": 2},
                        vocab_size=tokenizer.get_vocab_size(), max_seq_len=64)
    save_pretrained(model, stage / "model")
    tokenizer.save(str(stage / "model" / "tokenizer.json"))
    return stage


def evaluate(pretrain_dir: Path, data_dir: Path, out: Path, **overrides) -> dict:
    config = EvaluateConfig(tasks=TASKS, shots={"copa": 2}, max_examples=10, batch_size=8, **overrides)
    experiment = ExperimentConfig.model_validate(
        {"name": "t", "data_dir": str(data_dir), "ingest": {"sources": [{"path": "x"}]},
         "evaluate": config.model_dump()})
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    ctx = StageContext(name="evaluate", config=config, experiment=experiment, output_dir=out,
                       inputs={"pretrain": pretrain_dir}, fingerprint="test")
    return run(ctx)


def test_two_workers_on_ray_equal_one_in_process(pretrain_dir, data_dir, tmp_path, ray_session, capsys):
    two = evaluate(pretrain_dir, data_dir, tmp_path / "two", num_workers=2)
    with run_in_process():
        one = evaluate(pretrain_dir, data_dir, tmp_path / "one", num_workers=1)
    two.pop("seconds_scoring"), one.pop("seconds_scoring")
    assert two.keys() == one.keys()
    for key, value in one.items():
        assert two[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    out = capsys.readouterr().out
    assert "[evaluate] copa" in out and "95% interval" in out

    # Every kind scored, with baselines, intervals and written records.
    assert 0.0 <= one["copa/acc"] <= 1.0 and one["copa/acc_baseline"] == 0.5
    assert one["copa/acc_ci95_low"] <= one["copa/acc"] <= one["copa/acc_ci95_high"]
    assert 0.0 <= one["lambada_openai/acc"] <= 1.0 and one["lambada_openai/perplexity"] > 1
    # A random model of ~600 tokens: token perplexity near the vocabulary size.
    assert 100 < one["wikitext2/token_perplexity"] < 5000
    assert one["sst2/num_examples"] == 10
    results = json.loads((tmp_path / "one" / "results.json").read_text())
    assert set(results) == set(TASKS) and results["copa"]["shots"] == 2
    records = (tmp_path / "one" / "examples" / "copa.jsonl").read_text().splitlines()
    assert len(records) == 10 and {"gold", "pred", "acc"} <= set(json.loads(records[0]))
    # seq_len 64 cannot hold 2-shot COPA prompts: cut from the left, and counted.
    assert one["copa/num_truncated"] > 0


def test_generation_tasks_are_refused_for_bert_before_any_work(tmp_path, data_dir):
    from stages.evaluate.run import _check_family_supports
    from stages.evaluate.spec import resolve_task_spec

    with pytest.raises(ValueError, match="squad generate text, which a BERT model cannot do"):
        _check_family_supports("bert", {"squad": resolve_task_spec("squad")})


@pytest.mark.parametrize("family", ["bert", "t5"])
def test_bert_and_t5_models_run_the_stage_end_to_end(family, tmp_path, data_dir, ray_session):
    """Pseudo-log-likelihood (BERT) and sentinel-span (T5) scores through the stage on Ray."""
    from tests.support.pretrained_dirs import write_pretrained

    root = write_pretrained(tmp_path / family, family, {"num_layers": 1, "hidden_size": 32, "num_heads": 2},
                            vocab_size=600, max_seq_len=64 if family == "bert" else None)
    ptb_lines = tmp_path / "ptb_lines.yaml"  # three PTB sentences: BERT scores one row per token
    ptb_lines.write_text("name: ptb_lines\nkind: perplexity\nsplits:\n  test: {path: eval/ptb/ptb.test.txt, "
                         "format: text, documents: line, rows: [0, 3]}\neval_split: test\n"
                         "doc_to_target: text\nmetrics: [token_perplexity, word_perplexity]\n")
    config = EvaluateConfig(tasks=["lambada_openai", "copa", str(ptb_lines)], max_examples=4, batch_size=8,
                            num_workers=2, max_length=64)
    experiment = ExperimentConfig.model_validate(
        {"name": "t", "data_dir": str(data_dir), "ingest": {"sources": [{"path": "x"}]},
         "evaluate": config.model_dump()})
    out = tmp_path / "out"
    out.mkdir()
    ctx = StageContext(name="evaluate", config=config, experiment=experiment, output_dir=out,
                       inputs={"pretrain": root}, fingerprint="test")
    metrics = run(ctx)
    assert 0.0 <= metrics["copa/acc"] <= 1.0 and metrics["copa/acc_baseline"] == 0.5
    assert 0.0 <= metrics["lambada_openai/acc"] <= 1.0
    assert metrics["ptb_lines/token_perplexity"] > 1 and metrics["ptb_lines/num_examples"] == 3
    assert (out / "examples" / "copa.jsonl").read_text().count("\n") == 4
