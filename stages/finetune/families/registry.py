"""Every task family, in the order that decides which one fine-tunes a task.

    family = family_for(get_task("squad"), "bert")    # SquadFamily
    family = family_for(get_task("squad"), "t5")      # TextToTextFamily
    family = family_named("glue")                      # a Ray Train worker, from its FinetuneJob

The only place that decides a task's family: the first family in FAMILIES that is for
the model family (its `model_families`, or any) and takes the task's kind (its
`spec_types`). A family for named model families claims all their tasks and refuses
one it has no format for: a T5 fine-tunes every task as text to text, or not at all.
"""

from __future__ import annotations

from stages.finetune.conll.family import ConllFamily
from stages.finetune.families.text_to_text import TextToTextFamily
from stages.finetune.glue.family import GlueFamily
from stages.finetune.seq2seq.family import Seq2SeqFamily
from stages.finetune.seq2seq.spec import BERT_REFUSAL, Seq2SeqSpec
from stages.finetune.squad.family import SquadFamily
from stages.finetune.task_family import TaskFamily

# Seq2SeqFamily first: it takes translation and summarization on T5 and GPT alike, before
# TextToTextFamily claims every other task of a T5.
FAMILIES: tuple[TaskFamily, ...] = (Seq2SeqFamily(), TextToTextFamily(), SquadFamily(), ConllFamily(), GlueFamily())
FAMILY_NAMES: tuple[str, ...] = tuple(family.name for family in FAMILIES)


def family_for(spec, model_family: str) -> TaskFamily:
    """The family that fine-tunes task `spec` on a model of `model_family` ("gpt",
    "bert", "t5"); a ValueError that says what to do when there is none."""
    if isinstance(spec, Seq2SeqSpec) and model_family == "bert":
        raise ValueError(f"task {spec.name}: {BERT_REFUSAL}")
    for family in FAMILIES:
        if family.model_families is not None and model_family not in family.model_families:
            continue
        if isinstance(spec, family.spec_types):
            return family
        if family.model_families is not None:
            raise ValueError(family.unsupported(spec))
    raise ValueError(f"task {spec.name}: no task family fine-tunes a {type(spec).__name__} on a {model_family} "
                     f"model (families: {', '.join(FAMILY_NAMES)}); remove it from finetune.tasks")


def family_named(name: str) -> TaskFamily:
    for family in FAMILIES:
        if family.name == name:
            return family
    raise ValueError(f"unknown task family {name!r}; known: {', '.join(FAMILY_NAMES)}")
