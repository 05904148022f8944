"""Filters, Gutenberg stripping, near-dedup and bad input, through the ingest stage."""

from __future__ import annotations

import gzip
import numpy as np
import pytest

from stages.ingest.minhash import permutations, signature
from tests.unit.test_ingest_run import documents, ingest, write

PROSE = "The old farmhouse stood on the hill above the river, and nobody went near it."


def test_each_filter_counts_what_it_removed(tmp_path):
    paragraphs = [
        PROSE,                                        # kept
        "too short",                                  # min_chars
        "word " * 40,                                 # max_chars (200 chars)
        "Three words only.",                          # min_words
        "12345 67890 !!!! #### $$$$ 9999 8888 77",    # max_non_letter_fraction
        "Supercalifragilisticexpialidocious antidisestablishmentarianism floccinaucinihilipil pneumonoultramicroscopic",  # mean word length
    ]
    write(tmp_path / "data/a.txt", "\n\n".join(paragraphs))
    metrics = ingest(tmp_path / "data", tmp_path / "out", [{"path": "a.txt"}], min_chars=12,
                     max_chars=150, min_words=4, max_non_letter_fraction=0.5,
                     max_mean_word_length=12)
    assert [row["text"] for row in documents(tmp_path / "out")] == [PROSE]
    counts = {name: entry["documents"] for name, entry in metrics["filters"].items()}
    assert counts == {"min_chars": 1, "max_chars": 1, "min_words": 1,
                      "max_non_letter_fraction": 1, "max_mean_word_length": 1,
                      "exact_duplicate": 0, "near_duplicate": 0}
    assert metrics["filters"]["min_chars"]["bytes"] == len("too short")
    assert metrics["sources"]["ingest.sources[0]"]["documents_out"] == 1
    assert sum(metrics["length_histogram_bytes"].values()) == 1


def test_duplicated_lines_filter_on_kept_line_breaks(tmp_path):
    write(tmp_path / "data/a.txt", "Chorus line here\nChorus line here\nChorus line here\n"
          "A different line\n\n" + PROSE)
    metrics = ingest(tmp_path / "data", tmp_path / "out", [{"path": "a.txt"}],
                     unwrap_lines=False, max_duplicate_line_fraction=0.3)
    assert [row["text"] for row in documents(tmp_path / "out")] == [PROSE]
    assert metrics["filters"]["max_duplicate_line_fraction"]["documents"] == 1


def test_gutenberg_header_and_footer_are_stripped(tmp_path):
    book = ("The Project Gutenberg EBook of X\n\nLicence text here, long enough.\n\n"
            "*** START OF THIS PROJECT GUTENBERG EBOOK X ***\n\n" + PROSE + "\n\n"
            "*** END OF THE PROJECT GUTENBERG EBOOK X ***\n\nFooter licence, long enough.\n")
    write(tmp_path / "data/book.txt", book)
    metrics = ingest(tmp_path / "data", tmp_path / "out", [{"path": "book.txt"}],
                     strip_gutenberg=True)
    rows = documents(tmp_path / "out")
    assert [(row["text"], row["source_line"]) for row in rows] == [(PROSE, 7)]
    assert metrics["gutenberg_lines_stripped"] == 5 + 3  # header to START; END to the end
    write(tmp_path / "data/plain.txt", PROSE)  # no markers: kept whole
    ingest(tmp_path / "data", tmp_path / "plain", [{"path": "plain.txt"}], strip_gutenberg=True)
    assert len(documents(tmp_path / "plain")) == 1


def test_near_duplicates_are_dropped_across_files_first_wins(tmp_path):
    rng = np.random.default_rng(0)
    vocabulary = [f"w{i}" for i in range(500)]
    original = " ".join(rng.choice(vocabulary, 300))
    words = original.split()
    edited = " ".join(words[:150] + ["changed"] + words[151:])  # one word of 300
    other = " ".join(rng.choice(vocabulary, 300))
    write(tmp_path / "data/a.txt", original + "\n\n" + other)
    write(tmp_path / "data/b.txt", edited)
    exact = ingest(tmp_path / "data", tmp_path / "exact", [{"path": "*.txt"}])
    assert exact["documents_out"] == 3
    near = ingest(tmp_path / "data", tmp_path / "near", [{"path": "*.txt"}], dedup="near")
    assert [row["id"] for row in documents(tmp_path / "near")] == ["a.txt:1", "a.txt:3"]
    assert near["filters"]["near_duplicate"]["documents"] == 1
    again = ingest(tmp_path / "data", tmp_path / "again", [{"path": "*.txt"}], dedup="near")
    assert again == near


def test_minhash_estimates_jaccard():
    a, b = permutations(256)
    words = [f"w{i}" for i in range(200)]
    half = words[:100] + [f"x{i}" for i in range(100)]
    same = np.mean(signature(" ".join(words), 1, a, b) == signature(" ".join(words), 1, a, b))
    estimate = np.mean(signature(" ".join(words), 1, a, b) == signature(" ".join(half), 1, a, b))
    assert same == 1.0 and abs(estimate - 100 / 300) < 0.1


# --- bad input -------------------------------------------------------------------------

def test_invalid_utf8_policies(tmp_path):
    write(tmp_path / "data/mixed.txt", PROSE.encode() + b"\n\nbad \xff\xfe bytes in this one\n")
    replaced = ingest(tmp_path / "data", tmp_path / "r", [{"path": "mixed.txt"}])
    assert replaced["invalid_utf8_replaced"] == 2 and replaced["documents_out"] == 2
    skipped = ingest(tmp_path / "data", tmp_path / "s", [{"path": "mixed.txt"}],
                     invalid_utf8="skip")
    assert [row["text"] for row in documents(tmp_path / "s")] == [PROSE]
    assert skipped["filters"]["invalid_utf8"]["documents"] == 1
    with pytest.raises(ValueError, match=r"mixed\.txt:3: 2 byte\(s\) that are not valid UTF-8"):
        ingest(tmp_path / "data", tmp_path / "f", [{"path": "mixed.txt"}], invalid_utf8="fail")
    assert not list((tmp_path / "f").glob("documents/*.parquet"))


def test_nul_bytes_and_an_empty_file(tmp_path):
    write(tmp_path / "data/nul.txt", b"The\x00 old farm\x00house stood there quietly.\x00\n")
    write(tmp_path / "data/empty.txt", b"")
    metrics = ingest(tmp_path / "data", tmp_path / "out", [{"path": "*.txt"}])
    assert [row["text"] for row in documents(tmp_path / "out")] == [
        "The old farmhouse stood there quietly."]
    assert metrics["sources"]["ingest.sources[0]"]["documents_in"] == 1


def test_a_50_mb_single_line_streams_and_is_filtered(tmp_path):
    path = tmp_path / "data/huge.txt"
    path.parent.mkdir(parents=True)
    with open(path, "wb") as stream:
        chunk = b"abcdefghi " * 100_000  # 1 MB
        for _ in range(50):
            stream.write(chunk)
        stream.write(b"\n\n" + PROSE.encode() + b"\n")
    metrics = ingest(tmp_path / "data", tmp_path / "out", [{"path": "huge.txt"}],
                     max_chars=1_000_000)
    assert [row["text"] for row in documents(tmp_path / "out")] == [PROSE]
    assert metrics["filters"]["max_chars"] == {"documents": 1, "bytes": 50_000_000 - 1}


def test_bad_jsonl_records_fail_or_are_skipped_and_counted(tmp_path):
    write(tmp_path / "data/docs.jsonl",
          f'{{"text": "{PROSE}"}}\n{{"text": oops}}\n{{"body": "no text field"}}\n')
    with pytest.raises(ValueError, match=r"docs\.jsonl:2: not valid JSON"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "docs.jsonl", "format": "jsonl"}])
    assert not (tmp_path / "out/documents").exists() or not list(
        (tmp_path / "out/documents").glob("*.parquet"))
    metrics = ingest(tmp_path / "data", tmp_path / "skip",
                     [{"path": "docs.jsonl", "format": "jsonl"}], on_error="skip")
    assert metrics["skipped_records"] == 2 and metrics["documents_out"] == 1


def test_truncated_gzip_names_the_file_or_is_skipped(tmp_path):
    payload = gzip.compress(("\n\n".join(f"{PROSE} {i}" for i in range(2000))).encode())
    write(tmp_path / "data/cut.txt.gz", payload[:len(payload) // 2])
    write(tmp_path / "data/good.txt", PROSE)
    with pytest.raises(ValueError, match=r"cut\.txt\.gz: cannot be read after line \d+"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "*"}])
    metrics = ingest(tmp_path / "data", tmp_path / "skip", [{"path": "*"}], on_error="skip")
    assert metrics["skipped_files"] == 1
    assert [row["source"] for row in documents(tmp_path / "skip")] == ["good.txt"]


@pytest.mark.parametrize("path", ["missing.txt", "nothing/*.txt"])
def test_a_missing_path_or_empty_glob_names_the_config_key(tmp_path, path):
    (tmp_path / "data").mkdir()
    with pytest.raises(FileNotFoundError, match=r"ingest\.sources\[0\]\.path = .* matched no files"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": path}])
