"""Text cleaning and document splitting, as plain function calls."""

from stages.ingest.clean import clean_paragraph, decode_line, split_documents


def documents(text: str, split: str = "paragraph", normalization: str = "NFC",
              unwrap_lines: bool = True) -> list[tuple[int, str]]:
    lines = [decode_line(raw)[0] for raw in text.encode("utf-8").splitlines(keepends=True)]
    return list(split_documents(lines, split, normalization, unwrap_lines))


def test_decode_strips_crlf_and_counts_invalid_bytes():
    assert decode_line(b"plain line\r\n") == ("plain line", 0)
    assert decode_line(b"caf\xe9 and \xff\xfe\n") == ("caf\ufffd and \ufffd\ufffd", 3)
    # A replacement character that is really in the text is not an invalid byte.
    assert decode_line("already \ufffd here\xe9".encode() + b"\xe9\n") == (
        "already \ufffd here\xe9\ufffd", 1)


def test_nul_control_characters_and_stray_bom_are_removed():
    assert clean_paragraph(["a\x00b\x1b[0mc\x7fd\x85e\ufeff!"], "NFC", True) == "ab[0mcd e!"


def test_whitespace_controls_become_single_spaces():
    assert clean_paragraph(["  tab\there\x0cform  feed\r  "], "NFC", True) == "tab here form feed"


def test_unicode_normalization_nfc_composes_and_nfkc_folds_compatibility_forms():
    decomposed = "Cafe\u0301 \ufb01ne\u00a0day"  # e + combining acute; fi ligature; no-break space
    assert clean_paragraph([decomposed], "NFC", True) == "Caf\u00e9 \ufb01ne day"
    assert clean_paragraph([decomposed], "NFKC", True) == "Caf\u00e9 fine day"


def test_paragraph_lines_are_unwrapped_or_kept():
    lines = ["It was the best of times,  ", "   it was the worst of times."]
    unwrapped = "It was the best of times, it was the worst of times."
    assert clean_paragraph(lines, "NFC", True) == unwrapped
    assert clean_paragraph(lines, "NFC", False) == unwrapped.replace(", it", ",\nit")


def test_paragraph_split_reports_start_lines():
    text = "\ufeffTitle\r\n\r\nFirst paragraph\r\nwraps here.\r\n \t \r\n\r\nSecond one.\r\n"
    assert documents(text) == [(1, "Title"), (3, "First paragraph wraps here."), (7, "Second one.")]


def test_line_of_only_control_characters_separates_paragraphs():
    assert documents("one\n\x00\x1b\ntwo\n") == [(1, "one"), (3, "two")]


def test_line_split_and_file_split():
    text = "alpha\nbeta\n\n\ngamma  delta\n"
    assert documents(text, split="line") == [(1, "alpha"), (2, "beta"), (5, "gamma delta")]
    assert documents("\n\n" + text, split="file") == [(3, "alpha beta\n\ngamma delta")]
    assert documents("\n \n", split="file") == []
