"""Samples from the live model during pretraining (pretrain.samples): every `every` steps
(default eval_every), at each snapshot and at the last step, the planned prompts
(stages/pretrain/sample_plan.py) are continued (gpt), filled in (bert) or decoded as
sources (t5), and kept in `samples.jsonl`, one line per prompt and step:

    {"time": ..., "step": 200, "tokens_seen": 409600, "origin": "prompt", "prompt": "The",
     "text": " old man said", "settings": {"max_new_tokens": 32, "temperature": 0.8, ...}}

(t5 validation sources add "reference", bert "candidates": the 5 likeliest tokens at each
[MASK] with their probabilities). The report and the dashboard show them per step
(stages/report/samples.py), wandb as the `samples` table.

In the training loop (collective under ZeRO-3):

    sampler = Sampler(plan, cfg.samples, tokenizer_path, device, output_dir / SAMPLES_FILE)
    sampler.resume(step)                               # rank 0, before training
    if sampler.due(step, cfg):
        seconds = sampler.sample_live(engine, step, tokens_seen, is_main, tracker)

Who samples: under ZeRO 0-2 rank 0 holds the whole model and samples alone; the other
ranks go on to the next collective and wait there. Under ZeRO-3 every forward gathers
the parameters collectively, so every rank runs the same forwards (as the in-loop
evaluation does, stages/pretrain/eval_tasks.py): generation runs exactly max_new_tokens
steps, never stopping early at the end of text (a rank stopping alone would leave the
others waiting), and the text is cut at the end of text afterwards.

Randomness: each prompt draws from a torch.Generator of its own, seeded with samples.seed
and made afresh for every prompt at every sampling step: the training random state
(dropout, data order) is never touched, a resumed run draws what the uninterrupted one
drew, two steps use the same random numbers (they differ by the model only), a prompt's
text does not depend on the prompts before it, and `pretrain generate --seed` with the
same settings writes the last step's sample again from the exported model.

Resume: like metrics.jsonl, the lines of steps after the checkpoint a run resumes from
are dropped (those steps are trained, and sampled, again), so each step is there once.
Samples of a step are written before its checkpoint is committed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from stages.models.generation import generate, generate_seq2seq
from stages.pretrain.config import BERT_SAMPLE_CANDIDATES, PretrainConfig, SamplesConfig
from stages.pretrain.sample_plan import SampleInput, SamplePlan
from stages.tracking import MetricsLog

SAMPLES_FILE = "samples.jsonl"
TABLE_KEY = "samples"  # the wandb table
TABLE_COLUMNS = ["step", "tokens_seen", "prompt", "text", "reference"]


class Sampler:
    """pretrain.samples on one worker."""

    def __init__(self, plan: SamplePlan, settings: SamplesConfig, tokenizer_path: Path, device: torch.device,
                 log_path: Path):
        from tokenizers import Tokenizer

        self.plan, self.settings, self.device = plan, settings, torch.device(device)
        self.tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self.log = MetricsLog(log_path)
        self.draw_one = {"gpt": self._continue, "bert": self._fill_masks, "t5": self._decode_source}[plan.family]

    def due(self, step: int, cfg: PretrainConfig) -> bool:
        every = self.settings.every or cfg.eval_every
        snapshot = bool(cfg.snapshot_every) and step % cfg.snapshot_every == 0
        return step % every == 0 or snapshot or step == cfg.max_steps

    def resume(self, step: int) -> None:
        """Rank 0, before training resumes from the checkpoint of `step`."""
        self.log.drop_records_after(step)

    def sample_live(self, engine, step: int, tokens_seen: int, is_main: bool, tracker=None) -> float:
        """Sample from the engine's module and (rank 0) write the lines and the wandb
        table; the seconds it took. Every rank calls it at the same steps (module doc)."""
        zero3 = engine.zero_optimization_stage() == 3
        if not (is_main or zero3):
            return 0.0
        from stages.pretrain.eval_tasks import gathered_direct_parameters

        started = time.perf_counter()
        engine.eval()  # no dropout
        try:
            with gathered_direct_parameters(zero3, *self._heads(engine.module)):
                rows = self.draw(engine.module, step, tokens_seen)
        finally:
            engine.train()
        if is_main:
            self.write(rows, tracker, step)
        return time.perf_counter() - started

    def _heads(self, module) -> list[torch.nn.Module]:
        """The modules whose own parameters are used outside their forward (ZeRO-3)."""
        if self.plan.family != "bert":
            return [module]
        from stages.evaluate.scorers.bert import masked_language_model

        return [module, masked_language_model(module)]

    @torch.no_grad()
    def draw(self, model, step: int, tokens_seen: int) -> list[dict[str, Any]]:
        """One line per planned input, from `model` as it is (in eval mode)."""
        settings = self.settings.settings(self.plan.family)
        rows = []
        for sample in self.plan.inputs:
            row = {"step": step, "tokens_seen": tokens_seen, "origin": sample.origin, "prompt": sample.prompt,
                   **self.draw_one(model, sample)}
            if sample.reference is not None:
                row["reference"] = sample.reference
            rows.append({**row, "settings": settings})
        return rows

    def write(self, rows: list[dict[str, Any]], tracker=None, step: int | None = None) -> None:
        for row in rows:
            self.log.log(row)
        if tracker is not None:
            # The whole history in one table, so wandb's latest shows every step so far.
            table = [[r.get(column) for column in TABLE_COLUMNS] for r in self.log.read()]
            tracker.log_table(TABLE_KEY, TABLE_COLUMNS, table, step=step)

    def _generator(self) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(self.settings.seed)

    def _text(self, ids: list[int], keep_special: bool = False) -> str:
        """Up to the end of text; ids without text (padding rows of the vocabulary) left out."""
        if self.plan.end_id is not None and self.plan.end_id in ids:
            ids = ids[:ids.index(self.plan.end_id)]
        ids = [i for i in ids if i < self.plan.vocab_size and i != self.plan.pad_id]
        return self.tokenizer.decode(ids, skip_special_tokens=not keep_special)

    def _continue(self, model, sample: SampleInput) -> dict[str, Any]:
        prompt = torch.tensor([sample.ids], device=self.device)  # (1, T)
        output = generate(model, prompt, self.settings.max_new_tokens, generator=self._generator(),
                          **self.settings.sampling())  # no eos_token_id: every rank runs every step
        return {"text": self._text(output[0, prompt.size(1):].tolist())}

    def _decode_source(self, model, sample: SampleInput) -> dict[str, Any]:
        source = torch.tensor([sample.ids], device=self.device)  # (1, S)
        output = generate_seq2seq(model, source, torch.ones_like(source), self.settings.max_new_tokens,
                                  generator=self._generator(), **self.settings.sampling())
        return {"text": self._text(output[0, 1:].tolist(), keep_special=True)}  # sentinels shown

    def _fill_masks(self, model, sample: SampleInput) -> dict[str, Any]:
        from stages.evaluate.scorers.bert import masked_language_model

        masked_lm = masked_language_model(model)  # ELECTRA: its generator
        ids = torch.tensor([sample.ids], device=self.device)  # (1, T)
        positions = [i for i, token in enumerate(sample.ids) if token == self.plan.mask_id]
        hidden = masked_lm.backbone.hidden_states(ids)[0, positions]  # (M, C)
        logits = masked_lm.mlm_logits(hidden)[:, :self.plan.vocab_size]  # (M, V)
        top = logits.float().softmax(dim=-1).topk(min(BERT_SAMPLE_CANDIDATES, logits.size(-1)), dim=-1)
        filled, candidates = list(sample.ids), []
        for position, probabilities, indices in zip(positions, top.values.tolist(), top.indices.tolist()):
            filled[position] = indices[0]
            candidates.append([{"token": self.tokenizer.decode([i]).strip() or self.tokenizer.id_to_token(i),
                                "probability": round(p, 4)} for p, i in zip(probabilities, indices)])
        return {"text": self._text(filled), "candidates": candidates}
