"""Which text-to-text format each task family uses, and how long its targets may be."""

from __future__ import annotations


def max_target_len(task_name: str | None) -> int:
    """Target tokens (</s> included) a task's model is trained on and generates: the
    width of its outputs. No task name (a bare model): GLUE's."""
    from stages.finetune.tasks import ConllSpec, SquadSpec, get_task
    from stages.finetune.text_to_text import glue, ner, squad

    spec = None if task_name is None else get_task(task_name)
    if isinstance(spec, SquadSpec):
        return squad.MAX_TARGET_LEN
    if isinstance(spec, ConllSpec):
        return ner.MAX_TARGET_LEN
    return glue.MAX_TARGET_LEN


def check_supported(spec) -> None:
    """Raise before any training when a T5 cannot fine-tune `spec` as text to text."""
    from stages.finetune.tasks import ConllSpec, SquadSpec, TaskSpec

    if not isinstance(spec, (TaskSpec, SquadSpec, ConllSpec)):
        raise ValueError(f"task {spec.name}: a T5 model fine-tunes GLUE, SQuAD and CoNLL-2003 tasks as text to "
                         "text, and has no format for this one; remove it from finetune.tasks or fine-tune a "
                         "GPT or BERT model")
