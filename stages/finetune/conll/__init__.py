"""CoNLL-2003 named entities: column files, word labels on subwords, entity-level scores.

    spec.py          ConllSpec and the built-in conll2003 (light)
    reader.py        column file (IOB1 or IOB2) -> sentences of (words, IOB2 tags)
    hub.py           the same from the Hugging Face Hub (finetune.source: hub)
    encode.py        words -> token arrays, the word's label on its first subword (others -100)
    evaluate.py      entity-level P/R/F1 per type (seqeval, conlleval mode), conlleval-format output
    family.py        ConllFamily: prepare, token head, predictions, metrics.json
    text_to_text.py  the T5 format: "ner: ..." -> "EU [ORG] ; German [MISC]" -> IOB2 tags

Light: importing the package imports none of them.
"""
