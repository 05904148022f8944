"""A T5 fine-tunes every task kind as text to text (Raffel et al. 2020, sec. 2.4): a task
prefix in, text out, read back into the task's own predictions and written by the same
code as the heads' (`stages.finetune.text_to_text` has each format and its rules).

    GLUE     "sst2 sentence: ..." -> "positive"; STS-B -> "3.8"; with finetune.t5_scoring:
             rank, classes are predicted by ranking the label words instead of generating
    SQuAD    "question: ... context: ..." -> the answer text; predictions.json and
             metrics.json as for spans (v2.0: an empty answer is the no-answer
             prediction, no threshold); no nbest_predictions.json or null_odds.json,
             since greedy generation gives one answer and no null score
             (metrics.json's `files_not_written` says so)
    CoNLL    "ner: EU rejects ..." -> "EU [ORG] ; German [MISC]" -> IOB2 tags; the same
             files, and metrics.json also counts the pieces that could not be read back

The model is a `TextToTextModel` whose outputs are the generated ids, as wide as the
task's targets; its labels are target ids (B, L) for every task kind.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.conll import text_to_text as ner
from stages.finetune.conll.family import ConllFamily, read_conll_sentences
from stages.finetune.conll.spec import ConllSpec
from stages.finetune.encode import load_task_tokenizer
from stages.finetune.glue import text_to_text as glue_text
from stages.finetune.glue.family import GlueFamily, glue_prepared, glue_scores, read_glue_splits
from stages.finetune.glue.outputs import predictions_from_outputs
from stages.finetune.glue.rank import enable_rank_scoring, ranks_labels
from stages.finetune.glue.spec import TaskSpec
from stages.finetune.prepared import PreparedTask
from stages.finetune.squad import text_to_text as squad_text
from stages.finetune.squad.family import SquadFamily, read_squad_questions, squad_metrics, write_json
from stages.finetune.squad.spec import SquadSpec
from stages.finetune.task_family import TaskFamily, TaskRequest
from stages.finetune.tasks import get_task
from stages.finetune.text_to_text.model import TextToTextModel
from stages.finetune.text_to_text.pairs import generated_texts


# Each format reads its rows and writes its files as the head family of its task kind
# does; it only encodes (and for SQuAD reads back) as text. Not families of their own
# (the registry knows only TextToTextFamily), so their inherited names are unused.

class GlueAsText(GlueFamily):
    max_target_len = glue_text.MAX_TARGET_LEN

    def prepare(self, request: TaskRequest) -> PreparedTask:
        spec, tokenizer_path = request.spec, request.source.tokenizer
        tokenizer = load_task_tokenizer(tokenizer_path, request.cfg.max_seq_len)
        splits = read_glue_splits(request)
        encode = partial(glue_text.encode_text_to_text, tokenizer, spec)
        if ranks_labels(spec, request.cfg.t5_scoring):  # outputs are label-word log-likelihoods: scored like logits
            return glue_prepared(request, splits, encode=encode, score=partial(glue_scores, spec),
                                 predictions=partial(predictions_from_outputs, spec),
                                 how=", as text to text, predicted by ranking the label words")
        return glue_prepared(request, splits, encode=encode,
                             score=partial(glue_text.text_to_text_scores, spec, tokenizer_path),
                             predictions=partial(glue_text.file_predictions, spec, tokenizer_path),
                             scored=partial(glue_text.scored_predictions, spec, tokenizer_path),
                             generations=partial(generated_texts, tokenizer_path), how=", as text to text")


class SquadAsText(SquadFamily):
    max_target_len = squad_text.MAX_TARGET_LEN

    def prepare(self, request: TaskRequest) -> PreparedTask:
        """The source cut at max_seq_len (no windows); only the dev split is predicted."""
        tokenizer = load_task_tokenizer(request.source.tokenizer, request.cfg.max_seq_len)
        train, dev, split_note = read_squad_questions(request)
        return squad_text.prepare_squad_text(tokenizer, request.source.tokenizer, train, dev, split_note,
                                             version=request.spec.version)

    def write_outputs(self, request: TaskRequest, prepared: PreparedTask, outputs: dict[str, np.ndarray],
                      task_dir: Path) -> dict[str, Any]:
        answers = self.predict(prepared, outputs)["dev"]
        write_json(task_dir / "predictions.json", answers)
        cut_off = prepared.data["answers_cut_off"]
        facts = {"train_answers_cut_off": cut_off["train"], "dev_answers_cut_off": cut_off["dev"],
                 "files_not_written": "nbest_predictions.json and null_odds.json: a T5 generates one answer "
                                      "greedily, with no n-best list and no null score (an empty answer is the "
                                      "no-answer prediction)"}
        return squad_metrics(request, prepared, prepared.scorers["dev"](outputs["dev"]), facts, {"": answers})


class ConllAsText(ConllFamily):
    max_target_len = ner.MAX_TARGET_LEN

    def prepare(self, request: TaskRequest) -> PreparedTask:
        tokenizer = load_task_tokenizer(request.source.tokenizer, request.cfg.max_seq_len)
        return ner.prepare_ner_text(tokenizer, request.source.tokenizer, read_conll_sentences(request))


FORMATS: dict[type, GlueAsText | SquadAsText | ConllAsText] = {
    TaskSpec: GlueAsText(), SquadSpec: SquadAsText(), ConllSpec: ConllAsText(),
}


def format_of(spec) -> GlueAsText | SquadAsText | ConllAsText:
    """The text format of a task kind that TextToTextFamily takes (the registry has checked)."""
    return next(fmt for kind, fmt in FORMATS.items() if isinstance(spec, kind))


class TextToTextFamily(TaskFamily):
    name = "text_to_text"
    spec_types = tuple(FORMATS)  # every task kind it has a text format for
    model_families = ("t5",)

    def prepare(self, request: TaskRequest) -> PreparedTask:
        return format_of(request.spec).prepare(request)

    def build_model(self, head_config: dict[str, Any], backbone, dropout: float | None = None):
        """No head: the T5 itself, generating at most the task's target length."""
        return TextToTextModel(backbone, format_of(get_task(head_config["task"])).max_target_len)

    def worker_model(self, job, backbone):
        model = self.build_model(job.head_config, backbone, dropout=job.config.classifier_dropout)
        # finetune.t5_scoring: rank predicts by label-word likelihood (the saved model generates).
        enable_rank_scoring(model, get_task(job.task), job.config, job.source.tokenizer)
        return model

    def write_outputs(self, request: TaskRequest, prepared: PreparedTask, outputs: dict[str, np.ndarray],
                      task_dir: Path) -> dict[str, Any]:
        return format_of(request.spec).write_outputs(request, prepared, outputs, task_dir)

    def summary(self, spec, metrics: dict[str, Any]) -> str:
        return format_of(spec).summary(spec, metrics)

    def unsupported(self, spec) -> str:
        return (f"task {spec.name}: a T5 model fine-tunes GLUE, SQuAD and CoNLL-2003 tasks as text to text, and "
                "has no format for this one; remove it from finetune.tasks or fine-tune a GPT or BERT model")
