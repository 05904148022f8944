"""What every text-to-text task shares (Raffel et al. 2020, sec. 2.4): a T5 (or a
sequence-to-sequence model) takes a task prefix in and gives text out, decoded greedily
(`stages.models.generation.generate_seq2seq`), and each task reads the text back into its
own predictions, then scores them as its heads' predictions are scored.

    pairs.py     (source, target) texts -> token arrays; generated ids -> texts
    model.py     TextToTextModel: teacher forcing with labels, greedy generation without

Each task's own format lives in its folder (`glue/text_to_text.py` with `glue/rank.py`,
`squad/text_to_text.py`, `conll/text_to_text.py`), each module's docstring stating its
format and what happens to generations that do not fit it (counted in the task's metrics,
never silently). The T5's family (`stages.finetune.families.text_to_text`) picks the format
by task kind.

Light: importing the package imports neither of them.
"""
