"""What a generated text must beat: output made without a model.

    copy_source(["Ein Hund läuft."])        # translation: the untranslated source as the output
    first_turn("#Person1#: Hi.\\n#Person2#: ...")   # dialogue summary: the first turn
    lead_sentences(article, 3)              # document summary: LEAD-3

Copying the source scores well above 0 BLEU between related languages (names, numbers,
punctuation survive), and the first turn of a dialogue shares its speakers and topic
with the summary: a model's score means something only above these.
"""

from __future__ import annotations

from typing import Sequence


def copy_source(sources: Sequence[str]) -> list[str]:
    return list(sources)


def first_turn(dialogue: str) -> str:
    """The first non-blank line (DialogSum: turns are lines, each `#PersonN#: ...`)."""
    return next((line.strip() for line in dialogue.splitlines() if line.strip()), "")


def split_sentences(text: str) -> list[str]:
    """Sentences by NLTK's Punkt with its default parameters (no trained model: the
    `punkt_tab` data is not installed, and an untrained Punkt needs none)."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return [s for s in PunktSentenceTokenizer().tokenize(" ".join(text.split())) if s.strip()]


def lead_sentences(text: str, count: int = 3) -> str:
    return " ".join(split_sentences(text)[:count])
