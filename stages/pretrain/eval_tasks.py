"""Zero/few-shot tasks scored on the live model during pretraining (pretrain.eval_tasks),
as OLMo's and LLM Foundry's in-loop evaluations do: the evaluate stage's task specs,
prompts, scorers and metrics, run on the DeepSpeed engine's own module at every
eval_every, logged as eval/<task>/<metric>.

Driver (run.py), once before training: read the task files, draw the evaluated subset and
every row's demonstrations, and find the special tokens the family's scorer needs, so a
missing data file or an unusable tokenizer stops the stage before any training.

    plans = plan_eval_tasks(cfg, data_dir)
    token_ids = scorer_token_ids(family, tokenizer_path, vocab_size)

Every worker (train_loop.py), at each evaluation (collective):

    evaluator = TaskEvaluator(plans, family, tokenizer_path, token_ids, batch_size=8,
                              engine=engine, rank=rank, world_size=world_size)
    record = evaluator.evaluate(engine)   # rank 0: {"eval/lambada_openai/acc": 0.21, ...}; others {}

Who answers what: under ZeRO-3 the parameters are sharded and every forward gathers them
collectively, so each rank must run the same forwards: every rank answers every request
in the same batches and rank 0 scores. Under ZeRO 0-2 each rank holds the whole model:
the examples are split into contiguous slices (TaskPlan.shard), answered in parallel and
gathered (all_gather_object). The scores do not depend on the split (the evaluate stage
merges answers the same way).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from stages.evaluate.evaluate_task import TaskPlan, merge_answered, plan_task, run_requests, score_task
from stages.evaluate.fewshot import DEFAULT_SEED
from stages.evaluate.spec import resolve_task_spec

# The T5 scorer's encoder context when none is given (as stages.evaluate.scorers.load_scorer):
# T5 has relative positions, so no length of its own.
T5_MAX_LENGTH = 512


def plan_eval_tasks(cfg, data_dir: Path) -> list[TaskPlan]:
    """One plan per pretrain.eval_tasks entry: eval_tasks_max_examples rows drawn with the
    evaluate stage's default seed, eval_tasks_shots demonstrations (none for perplexity)."""
    plans = []
    for task in cfg.eval_tasks:
        spec = resolve_task_spec(task)
        shots = 0 if spec.kind == "perplexity" else cfg.eval_tasks_shots
        plans.append(plan_task(spec, data_dir, shots=shots, seed=DEFAULT_SEED,
                               max_examples=cfg.eval_tasks_max_examples))
    return plans


def scorer_token_ids(family: str, tokenizer_path: Path, vocab_size: int) -> dict[str, Any]:
    """The special token ids the family's scorer takes (GPT: end of text; BERT: [CLS],
    [SEP], [MASK], [PAD]; T5: the sentinels), found as load_scorer finds them."""
    from tokenizers import Tokenizer

    from stages.evaluate.scorers.special_tokens import sentinel_ids, special_token_id

    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
    except Exception as error:  # noqa: BLE001 - the tokenizers library raises bare Exceptions
        raise ValueError(f"pretrain.eval_tasks: cannot load the tokenizer {tokenizer_path} ({error}); "
                         "in-loop evaluation tokenizes the task prompts with it") from None
    if tokenizer.get_vocab_size() > vocab_size:
        raise ValueError(f"{tokenizer_path} has {tokenizer.get_vocab_size()} tokens but the dataset's "
                         f"vocab_size is {vocab_size}: the tokenizer does not belong to this dataset")
    if family == "gpt":
        return {"eot_id": special_token_id(tokenizer, "eos_token", tokenizer_path, family)}
    if family == "bert":
        return {f"{role}_id": special_token_id(tokenizer, f"{role}_token", tokenizer_path, family)
                for role in ("cls", "sep", "mask", "pad")}
    sentinels = sentinel_ids(tokenizer)
    if len(sentinels) < 2:
        raise ValueError(f"{tokenizer_path} has no <extra_id_0> / <extra_id_1> sentinels; the t5 scorer "
                         "frames every continuation as a sentinel span (use the unigram tokenizer recipe)")
    return {"sentinel_ids": sentinels}


class LiveModule:
    """The engine's module as a scorer takes a model. Scorers prepare a loaded model with
    `.to(device).float().eval()`; on a module DeepSpeed trains, `.float()` would replace
    the bf16 parameters the optimizer holds (and under ZeRO-3 their data are
    placeholders), so those three are no-ops here: the module stays on its device, in its
    training precision, and the evaluator switches it to eval mode and back. Everything
    else is the module's."""

    def __init__(self, module: torch.nn.Module):
        self._module = module

    def to(self, *args, **kwargs) -> "LiveModule":
        return self

    def float(self) -> "LiveModule":
        return self

    def eval(self) -> "LiveModule":
        return self

    def __call__(self, *args, **kwargs):
        return self._module(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._module, name)


def build_live_scorer(module: torch.nn.Module, family: str, tokenizer_path: Path, token_ids: dict[str, Any],
                      batch_size: int, device: torch.device):
    """The family's scorer over the live `module` (load_scorer's choice of class)."""
    from tokenizers import Tokenizer

    from stages.evaluate.scorers import BertScorer, GPTScorer, T5Scorer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    model = LiveModule(module)
    common = {"batch_size": batch_size, "device": device}
    if family == "gpt":
        return GPTScorer(model, tokenizer, **token_ids, **common)
    if family == "bert":
        return BertScorer(model, tokenizer, **token_ids, **common)
    return T5Scorer(model, tokenizer, **token_ids, max_length=T5_MAX_LENGTH, **common)


class TaskEvaluator:
    """Scores the planned tasks on the live model of one worker (module doc)."""

    def __init__(self, plans: list[TaskPlan], family: str, tokenizer_path: Path, token_ids: dict[str, Any], *,
                 batch_size: int, engine, rank: int, world_size: int):
        self.plans = plans
        self.rank, self.world_size = rank, world_size
        self.zero3 = engine.zero_optimization_stage() == 3
        self.num_slices = 1 if self.zero3 else world_size
        self.scorer = build_live_scorer(engine.module, family, tokenizer_path, token_ids, batch_size,
                                        engine.device)
        # This rank's requests, built once: prompts are fixed for the whole run.
        self.requests = [plan.requests(plan.shard(rank % self.num_slices, self.num_slices)) for plan in plans]
        self.baselines_logged = False

    def evaluate(self, engine) -> dict[str, float]:
        """eval/<task>/<metric> for every task (and eval/<task>/<metric>_baseline the
        first time), plus eval_tasks_seconds, on rank 0; {} on the other ranks. Every
        rank must call it at the same step."""
        started = time.perf_counter()
        engine.eval()
        try:
            with torch.no_grad(), gathered_direct_parameters(self.zero3, engine.module):
                answered = [run_requests(self.scorer, plan.spec, requests)
                            for plan, requests in zip(self.plans, self.requests, strict=True)]
        finally:
            engine.train()
        if self.num_slices > 1:
            everyone: list[Any] = [None] * self.world_size
            dist.all_gather_object(everyone, answered)
            answered = [merge_answered([part[i] for part in everyone]) for i in range(len(self.plans))]
        if self.rank != 0:
            return {}
        record: dict[str, float] = {}
        for plan, task_answers in zip(self.plans, answered, strict=True):
            report = score_task(plan, task_answers)
            for metric, score in report.scores.items():
                record[f"eval/{report.task}/{metric}"] = score.value
                if not self.baselines_logged and score.baseline is not None:
                    record[f"eval/{report.task}/{metric}_baseline"] = score.baseline
        self.baselines_logged = True
        record["eval_tasks_seconds"] = time.perf_counter() - started
        return record


def gathered_direct_parameters(zero3: bool, *modules: torch.nn.Module):
    """Under ZeRO-3, a parameter is gathered by its own module's forward. Scorers (and
    pretrain.samples) also use parameters held directly by a module whose forward they do
    not call (BERT's mlm_bias, ELECTRA's generator's), so those of `modules` are gathered
    for the whole evaluation (collective; small)."""
    import contextlib

    if not zero3:
        return contextlib.nullcontext()
    import deepspeed

    unique = {id(p): p for module in modules for p in module.parameters(recurse=False)}  # a module given twice
    return deepspeed.zero.GatheredParameters(list(unique.values()), modifier_rank=None)
