"""Translation and summarization (`stages.finetune.seq2seq`) on every model that can
generate: a T5 or the original Transformer as an encoder-decoder, a GPT on
`source + separator + target` with the loss on the target only. A BERT cannot (no
decoder): the registry refuses it before anything trains (`tasks.seq2seq_spec.BERT_REFUSAL`).

Writes into `<output_dir>/<task>/`:
    dev/, test/     hyp.txt, ref.txt (several references: ref0.txt, ref1.txt, ...), src.txt,
                    baseline.txt: one line per example, so `sacrebleu test/ref.txt -i
                    test/hyp.txt` prints the BLEU in metrics.json
    metrics.json    the spec's scores on dev (bleu, chrf / rouge1 ...) and test (test_bleu ...),
                    each with its baseline, 95% interval and signature; examples, empty
                    pairs skipped, sources and training targets cut, and the decoding used

Training from scratch: finetune.init: random (fresh weights of the pretrained model's
shape, its tokenizer), label_smoothing, dropout, lr_decay: inverse_sqrt with warmup_steps,
average_last (`seq2seq.average`, applied by the worker).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.prepared import PreparedTask
from stages.finetune.seq2seq.reader import Seq2SeqRows, read_split
from stages.finetune.seq2seq.spec import Seq2SeqSpec
from stages.finetune.task_family import TaskFamily, TaskRequest
from stages.training.model_source import ModelSource

SCORED_SPLITS = ("dev", "test")
DEFAULT_EXTRA_LENGTH = 50  # Seq2SeqSpec.num_labels = max_source_len + this


def layout_of(model_family: str) -> str:
    return "decoder_only" if model_family == "gpt" else "encoder_decoder"


def output_width(head_config: dict[str, Any], extra_length: int) -> int:
    """Generated ids per row: the task's max_source_len + decoding.extra_length (head_config's
    num_labels holds max_source_len + the default 50)."""
    return head_config["num_labels"] - DEFAULT_EXTRA_LENGTH + extra_length


class Seq2SeqFamily(TaskFamily):
    name = "seq2seq"
    spec_types = (Seq2SeqSpec,)

    def prepare(self, request: TaskRequest) -> PreparedTask:
        from stages.finetune.seq2seq.encode import encode_rows
        from stages.finetune.seq2seq.scores import split_scores

        spec, cfg, source = request.spec, request.cfg, request.source
        if cfg.decoding.num_beams > 1 and cfg.zero_stage == 3:
            raise ValueError(f"task {spec.name}: beam search decodes each rank's rows on its own, but ZeRO-3 needs "
                             "every rank in every forward pass: set finetune.decoding.num_beams: 1 (greedy keeps "
                             "the ranks in step) or zero_stage <= 2")
        layout = layout_of(source.family)
        if layout == "decoder_only" and cfg.zero_stage == 3:
            raise ValueError(f"task {spec.name}: a GPT decodes each rank's rows on its own, but ZeRO-3 needs every "
                             "rank in every forward pass: use zero_stage <= 2 for sequence-to-sequence tasks on a GPT")
        rows = read_rows(request)
        encoded, facts = {}, {}
        for split, split_rows in rows.items():
            where = ", ".join(str(spec.data_path(request.data_dir, f)) for f in spec.splits.get(
                split, spec.splits["dev"]).files())
            encoded[split], split_facts = encode_rows(source.tokenizer, spec, split_rows, layout=layout,
                                                      train=split == "train", where=where)
            facts.update({f"{split}_{key}": value for key, value in split_facts.items()})
            facts[f"{split}_empty_pairs_skipped"] = split_rows.empty_skipped
        _check_lengths(spec, source, layout, cfg)
        for warning in cut_warnings(spec, facts):
            print(f"[finetune] {spec.name}: {warning}", flush=True)
        tokenizer = source.tokenizer
        return PreparedTask(
            encoded=encoded,
            scorers={split: partial(split_scores, spec, tokenizer, rows[split]) for split in SCORED_SPLITS},
            predictors={split: partial(_texts, tokenizer) for split in SCORED_SPLITS},
            predict_splits=SCORED_SPLITS,
            data={"rows": rows, "facts": facts},
            description=f"{len(rows['train'])} train, {len(rows['dev'])} dev, {len(rows['test'])} test pairs as "
                        f"{layout.replace('_', '-')}; decoding "
                        f"{'greedy' if cfg.decoding.num_beams == 1 else f'beam {cfg.decoding.num_beams}'}")

    def build_model(self, head_config: dict[str, Any], backbone, dropout: float | None = None,
                    decoding=None, label_smoothing: float = 0.0, end_id: int = 0):
        """The backbone as an encoder-decoder or decoder-only generator (no head of its own)."""
        from stages.finetune.seq2seq.model import Decoding, DecoderOnlySeq2Seq, EncoderDecoderSeq2Seq
        from stages.models import GPT

        decoding = decoding or Decoding()
        width = output_width(head_config, decoding.extra_length)
        if isinstance(backbone, GPT):
            return DecoderOnlySeq2Seq(backbone, width, decoding, label_smoothing, end_id=end_id)
        return EncoderDecoderSeq2Seq(backbone, width, decoding, label_smoothing)

    def worker_model(self, job, backbone):
        from stages.finetune.seq2seq.encode import plain_tokenizer, special_ids
        from stages.finetune.seq2seq.model import Decoding, set_dropout

        cfg = job.config
        if cfg.init == "random":  # the same shape, fresh weights (the worker has seeded torch)
            backbone = type(backbone)(backbone.config)
        if cfg.dropout is not None:
            set_dropout(backbone, cfg.dropout)
        end_id, _ = special_ids(plain_tokenizer(job.source.tokenizer), layout_of(job.source.family))
        model = self.build_model(job.head_config, backbone, decoding=Decoding.from_config(cfg.decoding),
                                 label_smoothing=cfg.label_smoothing, end_id=end_id)
        model.synced_ranks = cfg.zero_stage == 3  # greedy decoding keeps the ranks in step (model.py)
        return model

    def write_outputs(self, request: TaskRequest, prepared: PreparedTask, outputs: dict[str, np.ndarray],
                      task_dir: Path) -> dict[str, Any]:
        from stages.finetune.seq2seq.scores import as_metrics, baseline_of, scored_split, write_split

        spec, cfg = request.spec, request.cfg
        rows, texts = prepared.data["rows"], self.predict(prepared, outputs)
        metrics: dict[str, Any] = {"score_notes": {}}
        for split in SCORED_SPLITS:
            write_split(task_dir / split, rows[split], texts[split], baseline_of(spec, rows[split]))
            scores = as_metrics("" if split == "dev" else "test_",
                                scored_split(spec, rows[split], texts[split], seed=request.seed))
            metrics["score_notes"].update(scores.pop("score_notes"))
            metrics.update(scores)
        decoding = cfg.decoding
        facts = prepared.data["facts"]
        warnings = cut_warnings(spec, facts)
        return {**metrics, **facts, "train_examples": len(rows["train"]), "dev_examples": len(rows["dev"]),
                "test_examples": len(rows["test"]), "references_per_example": len(rows["test"].references[0]),
                "decoding": f"greedy, at most source length + {decoding.extra_length}" if decoding.num_beams == 1
                else (f"beam {decoding.num_beams}, length penalty {decoding.length_penalty}, at most source length "
                      f"+ {decoding.extra_length}"),
                "hypothesis_files": {split: f"{split}/hyp.txt" for split in SCORED_SPLITS},
                **({"warnings": warnings} if warnings else {})}

    def summary(self, spec, metrics: dict[str, Any]) -> str:
        primary = spec.metrics[0]
        return f"dev {primary}={metrics[primary]:.2f} test {primary}={metrics['test_' + primary]:.2f}"


def _texts(tokenizer_path: str, outputs: np.ndarray) -> list[str]:
    from stages.finetune.seq2seq.scores import hypotheses

    return hypotheses(tokenizer_path, outputs)


def read_rows(request: TaskRequest) -> dict[str, Seq2SeqRows]:
    """Seeded subsets of the splits: finetune.max_train_examples for train,
    max_eval_examples for dev and for test (decoding every test row is slow on CPU).
    Without a train split, a seeded spec.dev_fraction of dev is scored and the rest trained on."""
    spec, cfg, seed = request.spec, request.cfg, request.seed
    rows = {split: read_split(spec, split, request.data_dir) for split in spec.splits}
    if "train" not in rows:
        dev = rows["dev"]
        order = np.random.default_rng(seed).permutation(len(dev))
        held = max(1, math.ceil(spec.dev_fraction * len(dev)))
        rows["dev"], rows["train"] = dev.subset(np.sort(order[:held])), dev.subset(np.sort(order[held:]))
    return {"train": rows["train"].sample(cfg.max_train_examples, seed),
            **{split: rows[split].sample(cfg.max_eval_examples, seed) for split in SCORED_SPLITS}}


def cut_warnings(spec: Seq2SeqSpec, facts: dict[str, int]) -> list[str]:
    """What was cut or skipped, said out loud (stage output and metrics.json `warnings`)."""
    warnings = []
    if facts.get("train_targets_cut"):
        warnings.append(f"{facts['train_targets_cut']} training targets are longer than max_target_len="
                        f"{spec.max_target_len} tokens (the longest has {facts['train_longest_target']}) and were "
                        "cut to it; raise max_target_len in the spec, or set long_targets: error to refuse them")
    for split in ("train", *SCORED_SPLITS):
        if facts.get(f"{split}_sources_cut"):
            warnings.append(f"{facts[f'{split}_sources_cut']} {split} sources are longer than max_source_len="
                            f"{spec.max_source_len} tokens and were cut to it")
        if facts.get(f"{split}_empty_pairs_skipped"):
            warnings.append(f"{facts[f'{split}_empty_pairs_skipped']} {split} pairs with an empty source or target "
                            "were skipped (empty_lines: skip)")
    return warnings


def _check_lengths(spec: Seq2SeqSpec, source: ModelSource, layout: str, cfg) -> None:
    """A GPT must hold source + separator + target in its context."""
    limit = source.max_seq_len
    if layout == "decoder_only" and limit is not None and spec.max_source_len + spec.max_target_len + 8 > limit:
        raise ValueError(f"task {spec.name}: max_source_len {spec.max_source_len} + max_target_len "
                         f"{spec.max_target_len} (+ the separator) exceed the GPT's max_seq_len={limit}; lower them "
                         "in the task's spec or pretrain a longer context")
