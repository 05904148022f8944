"""Document filters: each is a named predicate on clean text that says why a document
goes, so that the stats can count documents and bytes removed per filter.

Filters run in config order (the order of FILTERS below) and the first that rejects a
document is the one counted. Heuristics follow Gopher (Rae et al. 2021, appendix A).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from stages.ingest.config import IngestConfig

_LETTER = re.compile(r"[^\W\d_]")  # a Unicode letter
_SPACE = re.compile(r"\s")
# Lone surrogates stand for invalid UTF-8 bytes when invalid_utf8 is 'skip'.
_INVALID_BYTE = re.compile("[\udc80-\udcff]")


@dataclass(frozen=True)
class DocumentFilter:
    name: str
    rejects: Callable[[str], bool]


def build_filters(config: IngestConfig) -> list[DocumentFilter]:
    """The filters the config turns on, in the order they run."""
    filters = [DocumentFilter("invalid_utf8", lambda text: _INVALID_BYTE.search(text) is not None)
               ] if config.invalid_utf8 == "skip" else []
    if config.min_chars:
        filters.append(DocumentFilter("min_chars", lambda text: len(text) < config.min_chars))
    if config.max_chars is not None:
        filters.append(DocumentFilter("max_chars", lambda text: len(text) > config.max_chars))
    if config.min_words:
        filters.append(DocumentFilter("min_words",
                                      lambda text: len(text.split()) < config.min_words))
    if config.max_non_letter_fraction is not None:
        filters.append(DocumentFilter(
            "max_non_letter_fraction",
            lambda text: non_letter_fraction(text) > config.max_non_letter_fraction))
    if config.max_duplicate_line_fraction is not None:
        filters.append(DocumentFilter(
            "max_duplicate_line_fraction",
            lambda text: duplicate_line_fraction(text) > config.max_duplicate_line_fraction))
    if config.max_mean_word_length is not None:
        filters.append(DocumentFilter(
            "max_mean_word_length",
            lambda text: mean_word_length(text) > config.max_mean_word_length))
    return filters


def non_letter_fraction(text: str) -> float:
    """Fraction of the non-whitespace characters that are not letters (digits, symbols)."""
    visible = len(text) - len(_SPACE.findall(text))
    return 1 - len(_LETTER.findall(text)) / visible if visible else 0.0


def duplicate_line_fraction(text: str) -> float:
    """Fraction of the non-empty lines that repeat an earlier line of the document."""
    lines = [line for line in text.split("\n") if line.strip()]
    return 1 - len(set(lines)) / len(lines) if lines else 0.0


def mean_word_length(text: str) -> float:
    words = text.split()
    return sum(map(len, words)) / len(words) if words else 0.0
