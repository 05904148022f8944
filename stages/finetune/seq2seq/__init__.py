"""Sequence to sequence: translation and summarization.

    spec.py      Seq2SeqSpec: files, prefix, lengths, metrics; the built-in tasks and a
                 user's spec YAML (light: the config validator loads it)
    reader.py    aligned plain text or JSONL -> Seq2SeqRows, every file mistake an error naming it
    encode.py    rows -> token arrays for an encoder-decoder (T5, Transformer) or a decoder only (GPT)
    model.py     label-smoothed teacher forcing; greedy or beam-search decoding with a KV cache
    scores.py    hypotheses and references written one per line, scored by stages.text_metrics
    average.py   the average of the last N weight snapshots (finetune.average_last)
    family.py    Seq2SeqFamily: T5, the original Transformer and GPT alike

Light: importing the package imports none of them.
"""
