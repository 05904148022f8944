"""Which task family fine-tunes a task, and the one family that spans task kinds.

Each task kind's family lives in its folder (`glue/family.py`, `squad/family.py`,
`conll/family.py`, `seq2seq/family.py`), on the interface of `stages.finetune.task_family`
(as stages/objectives/ does for pretraining objectives). The stage's fixed path
(`stages.finetune.run`) only calls that interface, on the family the registry picks.

    registry.py       the families in order; family_for(spec, model_family), family_named(name)
    text_to_text.py   a T5 on GLUE, SQuAD or CoNLL, in each task's text format

Adding a task kind: one folder (spec, reader, encoding, family, metrics), its specs in
`stages.finetune.tasks`, and its family's line in registry.FAMILIES.
"""
