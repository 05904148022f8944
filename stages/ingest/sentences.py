"""Rule-based sentence splitting for the `sentences` column (NSP/SOP and span objectives).

A boundary is a run of terminators (. ! ? or an ellipsis), then any closing quotes or
brackets, then whitespace, then a word that does not start in lower case. A period does
not end a sentence after a known abbreviation ("Mr.", "e.g.", "etc." before a capital is
the rare exception we accept), an initial ("J. R. R. Tolkien"), a dotted acronym
("U.S."), or "No."/"p."/"vol." before a number. Decimals ("3.14") and dotted names never
match, since a boundary needs whitespace after the terminator. Blank lines ("\\n\\n")
always separate sentences.

The sentences are slices of the text with the whitespace between them removed, so
" ".join(split_sentences(text)) == text for a text whose gaps are single spaces (the
default, unwrapped ingest output); otherwise it differs only in that whitespace.
"""

from __future__ import annotations

import re

# Lower-case, without the final period. Titles, Latin, calendar and common prose forms.
ABBREVIATIONS = frozenset("""
mr mrs ms messrs mme mlle dr prof rev hon st sr jr gen col capt cpt lt maj sgt cmdr adm
gov pres supt insp esq fr br mt ft ave rd blvd co corp inc ltd bros dept univ assn
etc vs viz cf al ibid ed eds trans approx ca circ est
jan feb mar apr jun jul aug sep sept oct nov dec mon tue tues wed thu thur thurs fri sat sun
a.m p.m e.g i.e
""".split())
# Abbreviations that only hold before a number: "No. 5", "p. 12", but "I said no. Then".
NUMBER_ABBREVIATIONS = frozenset("no nos p pp vol vols ch chap fig figs art sec sect op".split())

_OPENING = "\"'“‘«([{"
_CLOSING = "\"'”’»)]}"
_BOUNDARY = re.compile(
    r"(?:[.!?]+|…)[" + re.escape(_CLOSING) + r"]*(\s+)(?=[" + re.escape(_OPENING) + r"]*(\S))")
_ACRONYM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, in order, each stripped; [] for blank text."""
    sentences: list[str] = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        start = 0
        for match in _BOUNDARY.finditer(paragraph):
            if _is_boundary(paragraph, match):
                if sentence := paragraph[start:match.start(1)].strip():
                    sentences.append(sentence)
                start = match.end(1)
        if sentence := paragraph[start:].strip():
            sentences.append(sentence)
    return sentences


def _is_boundary(text: str, match: re.Match) -> bool:
    following = match.group(2)
    if following.islower():
        return False  # '"Stop!" he said.' / 'etc. and so on'
    terminator_end = match.start(1)
    if text[terminator_end - 1] in _CLOSING or text[match.start()] != ".":
        return True  # '!' / '?' / '...' / a quote closed after the period
    if match.group(0).startswith(".."):
        return True  # an ellipsis written as periods
    word_start = max(text.rfind(" ", 0, match.start()), text.rfind("\n", 0, match.start())) + 1
    word = text[word_start:match.start()].lstrip(_OPENING)
    lowered = word.lower()
    if lowered in ABBREVIATIONS:
        return False
    if len(word) == 1 and word.isupper() and word != "I":
        return False  # an initial
    if _ACRONYM.fullmatch(word):
        return False  # U.S. / Ph.D / e.g
    return not (lowered in NUMBER_ABBREVIATIONS and following.isdigit())
