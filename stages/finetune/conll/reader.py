"""Read a CoNLL-2003 column file: one `word POS chunk NER` line per token, a blank line
between sentences, `-DOCSTART-` lines between documents (dropped: they are not text).

Tags may be IOB1 (the original release: I-X starts an entity unless it follows another
X) or IOB2 (every entity starts with B-X); they are returned as IOB2. Converting IOB2 is
the identity, so either scheme can be read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ENTITY_TYPES = ("PER", "ORG", "LOC", "MISC")
CONLL_LABELS = ("O", *(f"{prefix}-{kind}" for kind in ENTITY_TYPES for prefix in ("B", "I")))


class ConllDataError(ValueError):
    """A line of a column file is malformed; the message names file and line."""


@dataclass
class ConllSentences:
    words: list[list[str]]
    tags: list[list[str]]  # IOB2
    lines: list[int]  # 1-based line number of each sentence's first token

    def __len__(self) -> int:
        return len(self.words)

    def subset(self, positions) -> "ConllSentences":
        return ConllSentences([self.words[i] for i in positions], [self.tags[i] for i in positions],
                              [self.lines[i] for i in positions])


def read_conll(path: str | Path, *, num_columns: int = 4, labels: tuple[str, ...] = CONLL_LABELS) -> ConllSentences:
    """The tag is the last of `num_columns` whitespace-separated columns."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; put the CoNLL-2003 files (train.txt, valid.txt, "
                                "test.txt) under <data_dir>/conll2003/")
    sentences = ConllSentences([], [], [])
    words: list[str] = []
    tags: list[str] = []
    first_line = 0

    def close() -> None:
        if words:
            sentences.words.append(list(words))
            sentences.tags.append(to_iob2(tags))
            sentences.lines.append(first_line)
            words.clear()
            tags.clear()

    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            columns = line.split()
            if not columns:
                close()
                continue
            if columns[0] == "-DOCSTART-":
                close()
                continue
            if len(columns) != num_columns:
                raise ConllDataError(
                    f"{path}:{number}: expected {num_columns} space-separated columns (word POS chunk NER), "
                    f"found {len(columns)}: {line.rstrip()!r}. Fix the line, or pass num_columns for "
                    "another layout")
            if columns[-1] not in labels:
                raise ConllDataError(
                    f"{path}:{number}: tag {columns[-1]!r} is not one of {', '.join(labels)}; "
                    "fix the tag (IOB1 or IOB2 with types PER, ORG, LOC, MISC)")
            if not words:
                first_line = number
            words.append(columns[0])
            tags.append(columns[-1])
    close()
    return sentences


def to_iob2(tags: list[str]) -> list[str]:
    """IOB1 -> IOB2: an I-X that does not continue an X entity begins one (B-X)."""
    converted = []
    previous = "O"
    for tag in tags:
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        converted.append(tag)
        previous = tag
    return converted
