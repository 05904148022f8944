"""SQuAD v1.1 / v2.0: extractive question answering.

    spec.py          SquadSpec and the two built-in tasks (light)
    reader.py        official JSON -> SquadExample (v2.0 `is_impossible`, plausible answers)
    hub.py           the same from the Hugging Face Hub (finetune.source: hub)
    windows.py       question + context windows as fixed-length token arrays with offsets
    decode.py        start/end logits -> n-best answers, null-answer odds (v2.0)
    evaluate.py      EM / F1 as the official evaluation scripts, null threshold search
    family.py        SquadFamily: prepare, span head, predictions, metrics.json
    text_to_text.py  the T5 format: "question: ... context: ..." -> the answer text

Light: importing the package imports none of them.
"""
