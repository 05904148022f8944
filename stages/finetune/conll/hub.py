"""CoNLL-2003 from the Hugging Face Hub (`finetune.source: hub`), as `conll.reader` reads the files.

    sentences = read_conll_splits(get_task("conll2003"))     # ConllSentences per split
"""

from __future__ import annotations

from stages.finetune.conll.reader import ConllDataError, ConllSentences, to_iob2
from stages.finetune.conll.spec import ConllSpec
from stages.finetune.hub import check_columns, load_split

# The canonical CoNLL-2003 dataset is a loading script, which datasets >= 4 does not run;
# the Hub's own parquet conversion of it has the same columns and ClassLabel tags.
CONLL_HUB, CONLL_HUB_REVISION = "eriktks/conll2003", "refs/convert/parquet"


def read_conll_splits(spec: ConllSpec) -> dict[str, ConllSentences]:
    hub_splits = {"train": "train", "dev": "validation", "test": "test"}
    return {split: conll_from_dataset(spec, load_split(CONLL_HUB, None, hub_split, CONLL_HUB_REVISION),
                                      where=f"{CONLL_HUB} {hub_split}")
            for split, hub_split in hub_splits.items()}


def conll_from_dataset(spec: ConllSpec, dataset, *, where: str) -> ConllSentences:
    """Rows {tokens: [...], ner_tags: [class numbers]} -> IOB2 ConllSentences; `lines`
    holds the 1-based row number (there are no file lines)."""
    check_columns(dataset, ["tokens", "ner_tags"], where, ConllDataError)
    names = dataset.features["ner_tags"].feature.names
    unknown = sorted(set(names) - set(spec.labels))
    if unknown:
        raise ConllDataError(f"{where}: ner_tags classes {unknown} are not among {', '.join(spec.labels)}")
    sentences = ConllSentences([], [], [])
    for number, (tokens, tags) in enumerate(zip(dataset["tokens"], dataset["ner_tags"]), start=1):
        if len(tokens) != len(tags):
            raise ConllDataError(f"{where}: row {number} has {len(tokens)} tokens but {len(tags)} ner_tags")
        if tokens and tokens[0] != "-DOCSTART-":  # document separators are not text (as in read_conll)
            sentences.words.append(list(tokens))
            sentences.tags.append(to_iob2([names[t] for t in tags]))
            sentences.lines.append(number)
    return sentences
