"""split_csv follows csv.reader's state from line to line: checked against the reader
itself on thousands of random small CSV texts (quotes, doubled quotes, delimiters, stray
CR, blank lines), from a record start and from inside a quoted cell."""

from __future__ import annotations

import csv
import random

import pytest

from stages.ingest.split_csv import ERROR, QUOTED, RECORD, scan_lines, splittable_delimiter


def reader_state(lines: list[str], delimiter: str) -> str:
    """Where csv.reader (as records.py configures it) is after reading `lines` whole."""
    reader = csv.reader((line.rstrip("\r\n") + "\n" for line in lines), delimiter=delimiter,
                        strict=True)
    try:
        for _ in reader:
            pass
    except csv.Error as error:
        return QUOTED if "unexpected end of data" in str(error) else ERROR
    return RECORD


@pytest.mark.parametrize("delimiter", [",", "\t"])
def test_line_states_match_the_csv_reader(delimiter):
    rng = random.Random(0)
    alphabet = ['"', '""', delimiter, "a", " ", "\r", "\n", "\n", "é"]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        lines = text.split("\n")
        for entry, prefix in ((RECORD, []), (QUOTED, ['"'])):  # '"' alone opens a cell
            states = [reader_state(prefix + lines[:k], delimiter) for k in range(len(lines) + 1)]
            exit_state, first_record = scan_lines([line.encode() for line in lines], delimiter,
                                                  starts_file=False)[entry]
            assert exit_state == states[-1], (text, entry)
            # states[k]: before line k (ERROR stays ERROR, so no RECORD follows one).
            assert first_record == next(
                (k for k, state in enumerate(states[:-1]) if state == RECORD), None), text


def test_a_bom_before_a_quoted_header_cell_is_dropped_as_the_reader_drops_it():
    # decoded_lines drops the file's BOM, so the reader sees a quote opening a cell.
    assert reader_state(['"text'], ",") == QUOTED
    assert scan_lines([b'\xef\xbb\xbf"text'], ",", starts_file=True)[RECORD] == (QUOTED, 0)
    # Elsewhere the same bytes are a character, then a quote inside an unquoted cell.
    assert scan_lines([b'\xef\xbb\xbf"text'], ",", starts_file=False)[RECORD] == (RECORD, 0)


def test_only_one_byte_delimiters_other_than_quote_and_line_breaks_are_split():
    assert all(splittable_delimiter(d) for d in (",", "\t", ";", "|"))
    assert not any(splittable_delimiter(d) for d in ('"', "\r", "\n", "§"))
