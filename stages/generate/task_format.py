"""A T5 fine-tuned as text to text reads its sources in its task's format; a prompt is put
in that format when it is plain text of a one-text task, and checked otherwise.

    sst2, cola         "a gripping film"            -> "sst2 sentence: a gripping film"
    conll2003          "EU rejects German call"     -> "ner: EU rejects German call"
    pairs, SQuAD       written in full: "rte sentence1: ... sentence2: ...",
                       "question: ... context: ..."
"""

from __future__ import annotations

from stages.finetune.conll import text_to_text as ner
from stages.finetune.conll.spec import ConllSpec
from stages.finetune.glue import text_to_text as glue
from stages.finetune.squad import text_to_text as squad
from stages.finetune.squad.spec import SquadSpec
from stages.finetune.tasks import get_task
from stages.generate.errors import GenerateInputError


def target_length(task: str) -> int:
    """The most tokens the task's targets have (</s> included): its decoding default."""
    spec = get_task(task)
    if isinstance(spec, SquadSpec):
        return squad.MAX_TARGET_LEN
    if isinstance(spec, ConllSpec):
        return ner.MAX_TARGET_LEN
    return glue.MAX_TARGET_LEN


def task_source(task: str, prompt: str, number: int) -> str:
    spec = get_task(task)
    if isinstance(spec, ConllSpec):
        return prompt if prompt.startswith(ner.SOURCE_PREFIX) else ner.SOURCE_PREFIX + prompt
    if isinstance(spec, SquadSpec):
        if not prompt.startswith(squad.SOURCE_PREFIX) or squad.CONTEXT_PREFIX not in prompt:
            raise GenerateInputError(
                f"prompt {number}: task {task} reads \"{squad.SOURCE_PREFIX}QUESTION{squad.CONTEXT_PREFIX}"
                f"PASSAGE\"; write the prompt in that form")
        return prompt
    if prompt.startswith(f"{spec.name} "):
        return prompt
    if len(spec.text_columns) == 1:
        return glue.source_texts(spec, [(prompt,)])[0]
    example = glue.source_texts(spec, [tuple(c.upper() for c in ("first", "second"))])[0]
    raise GenerateInputError(
        f"prompt {number}: task {task} reads two texts, as \"{example}\"; write the prompt in that form")
