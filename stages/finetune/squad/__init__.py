"""SQuAD v1.1 / v2.0: reading the official JSON, sliding windows over long contexts,
n-best span decoding, and the official EM / F1.

    reader.py    official JSON -> SquadExample (v2.0 `is_impossible`, plausible answers)
    windows.py   question + context windows as fixed-length token arrays with offsets
    decode.py    start/end logits -> n-best answers, null-answer odds (v2.0)
    evaluate.py  EM / F1 as the official evaluation scripts, null threshold search

The finetune stage's SQuAD task family (preparing, scoring, writing the files) is
`stages.finetune.families.squad`.
"""
