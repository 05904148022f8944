"""CoNLL-2003 named entities: column files, word labels on subwords, entity-level scores.

    reader.py    column file (IOB1 or IOB2) -> sentences of (words, IOB2 tags)
    encode.py    words -> token arrays, the word's label on its first subword (others -100)
    evaluate.py  entity-level P/R/F1 per type (seqeval, conlleval mode), conlleval-format output

The finetune stage's CoNLL task family is `stages.finetune.families.conll`.
"""
