"""Task families: each one way of fine-tuning a kind of task (as stages/objectives/
does for pretraining objectives). The stage's fixed path (`stages.finetune.run`) only
calls the interface in base.py, on the family the registry picks.

    base.py           TaskFamily (prepare, worker model, batch labels, predict, write_outputs)
                      and TaskRequest (spec, cfg, seed, source, data_dir)
    glue.py           GLUE classification / regression on a head
    squad.py          SQuAD v1.1 / v2.0 spans on a head
    conll.py          CoNLL-2003 tags on a token head
    text_to_text.py   a T5 on any of the three, as text to text
    registry.py       the families in order; family_for(spec, model_family), family_named(name)

Adding a task kind: one family file, and its line in registry.FAMILIES.
"""
