"""GLUE sentence and sentence-pair tasks: classification, and regression for STS-B.

    spec.py          TaskSpec, TsvFile: a task's files, columns, labels and metrics (light)
    tasks.py         the built-in GLUE tasks
    reader.py        the official TSV files -> TaskExamples, every file mistake an error naming it
    examples.py      TaskExamples: texts, labels and ids of one split
    hub.py           the same from the Hugging Face Hub (finetune.source: hub)
    metrics.py       accuracy, F1, Matthews, Pearson, Spearman (as the GLUE server)
    family.py        GlueFamily: prepare, head, predictions, metrics.json with baselines
    outputs.py       dev_predictions.tsv and the submission file <Name>.tsv
    text_to_text.py  the T5 format: label words or scores like "3.8", read back
    rank.py          finetune.t5_scoring: rank: classes by label-word likelihood

Light: importing the package imports none of them.
"""
