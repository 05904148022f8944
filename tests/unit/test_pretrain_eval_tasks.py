"""In-loop task evaluation (stages/pretrain/eval_tasks.py) in one process: the scorer over
the live module leaves it as training holds it (precision, mode, parameters), and the
evaluator logs what the evaluate stage would score for the same model and rows. The
DeepSpeed side (ZeRO-2 slices gathered, ZeRO-3 replicated forwards) runs in
tests/integration/test_pretrain_objectives.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from stages.evaluate.evaluate_task import evaluate_task, plan_task
from stages.evaluate.fewshot import DEFAULT_SEED
from stages.evaluate.requests import LoglikelihoodRequest
from stages.evaluate.scorers import load_scorer
from stages.evaluate.spec import resolve_task_spec
from stages.models import load_pretrained
from stages.pretrain.config import PretrainConfig
from stages.pretrain.eval_tasks import TaskEvaluator, build_live_scorer, plan_eval_tasks, scorer_token_ids
from tests.support.pretrained_dirs import write_pretrained

GPT = {"num_layers": 2, "hidden_size": 32, "num_heads": 2}
MAX_EXAMPLES = 8


class SingleProcessEngine:
    """What TaskEvaluator uses of a DeepSpeed engine (ZeRO-0, one rank), without DeepSpeed."""

    def __init__(self, module: torch.nn.Module):
        self.module, self.device = module, torch.device("cpu")

    def zero_optimization_stage(self) -> int:
        return 0

    def eval(self) -> None:
        self.module.eval()

    def train(self) -> None:
        self.module.train()


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    return write_pretrained(tmp_path_factory.mktemp("gpt"), "gpt", GPT, vocab_size=600, max_seq_len=64,
                            weight_scale=3.0)


def test_plans_use_the_evaluate_defaults_and_no_demonstrations_for_perplexity(data_dir):
    cfg = PretrainConfig(eval_tasks=["copa", "wikitext2"], eval_tasks_max_examples=5, eval_tasks_shots=2)
    copa, wikitext = plan_eval_tasks(cfg, data_dir)
    assert (copa.shots, wikitext.shots) == (2, 0)
    expected = plan_task(resolve_task_spec("copa"), data_dir, shots=2, seed=DEFAULT_SEED, max_examples=5)
    assert copa.selection == expected.selection and copa.demonstrations == expected.demonstrations


def test_tokenizer_problems_stop_the_stage_before_training(pretrained, tmp_path):
    tokenizer_path = pretrained / "model" / "tokenizer.json"
    assert scorer_token_ids("gpt", tokenizer_path, 600)["eot_id"] >= 0
    with pytest.raises(ValueError, match="has 600 tokens but the dataset's vocab_size is 100"):
        scorer_token_ids("gpt", tokenizer_path, 100)
    placeholder = tmp_path / "tokenizer.json"
    placeholder.write_text('{"version": "1.0"}')
    with pytest.raises(ValueError, match="pretrain.eval_tasks: cannot load the tokenizer"):
        scorer_token_ids("gpt", placeholder, 600)
    with pytest.raises(ValueError, match="no <extra_id_0> / <extra_id_1> sentinels"):
        scorer_token_ids("t5", tokenizer_path, 600)


def test_the_live_scorer_leaves_a_bf16_training_module_as_it_was(pretrained):
    module = load_pretrained(pretrained / "model").to(torch.bfloat16).train()
    before = {name: (p, p.data_ptr(), p.dtype) for name, p in module.named_parameters()}
    tokenizer_path = pretrained / "model" / "tokenizer.json"
    scorer = build_live_scorer(module, "gpt", tokenizer_path, scorer_token_ids("gpt", tokenizer_path, 600),
                               batch_size=4, device=torch.device("cpu"))
    assert module.training  # the evaluator, not the scorer, switches modes
    assert {name: (p, p.data_ptr(), p.dtype) for name, p in module.named_parameters()} == before
    # It scores through the module itself, in bf16.
    result, = scorer.loglikelihood([LoglikelihoodRequest(0, 0, "The cat sat on the", " mat")])
    assert result.logprob < 0 and result.num_tokens >= 1
    assert {p.dtype for p in module.parameters()} == {torch.bfloat16}


def test_the_evaluator_logs_what_the_evaluate_stage_scores(pretrained, data_dir):
    cfg = PretrainConfig(eval_tasks=["lambada_openai", "copa"], eval_tasks_max_examples=MAX_EXAMPLES,
                         eval_tasks_shots=1)
    tokenizer_path = pretrained / "model" / "tokenizer.json"
    module = load_pretrained(pretrained / "model").train()
    engine = SingleProcessEngine(module)
    evaluator = TaskEvaluator(plan_eval_tasks(cfg, data_dir), "gpt", tokenizer_path,
                              scorer_token_ids("gpt", tokenizer_path, 600), batch_size=4, engine=engine,
                              rank=0, world_size=1)
    first = evaluator.evaluate(engine)
    assert module.training  # back in training mode

    scorer = load_scorer(pretrained / "model", batch_size=8)
    expected = {}
    for task in cfg.eval_tasks:
        report = evaluate_task(resolve_task_spec(task), data_dir, scorer, shots=1, seed=DEFAULT_SEED,
                               max_examples=MAX_EXAMPLES)
        expected.update({f"eval/{task}/{metric}": score.value for metric, score in report.scores.items()})
    assert set(expected) == {"eval/lambada_openai/acc", "eval/lambada_openai/perplexity",
                             "eval/copa/acc"}
    for key, value in expected.items():
        assert first[key] == pytest.approx(value, rel=1e-5), key
    # Baselines once (cloze acc: 0; COPA: chance), seconds every time.
    assert first["eval/lambada_openai/acc_baseline"] == 0.0 and first["eval/copa/acc_baseline"] == 0.5
    assert "eval/lambada_openai/perplexity_baseline" not in first  # none: it depends on the vocabulary
    assert first["eval_tasks_seconds"] > 0
    second = evaluator.evaluate(engine)
    assert {k for k in second if k.endswith("_baseline")} == set()
    assert {k: second[k] for k in expected} == {k: first[k] for k in expected}  # same rows, same weights
