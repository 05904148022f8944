"""Texts as one line each, written beside each other so that the field's command-line
tools score the files to the same number we report:

    write_texts(out_dir, hypotheses, references)   # hyp.txt + ref.txt, or ref0.txt ref1.txt ... for several
    sacrebleu out_dir/ref.txt -i out_dir/hyp.txt   # the BLEU of score_texts(["bleu"], ...)

A generated text may hold newlines (a summary of several sentences); sacreBLEU's reader
takes one line per segment and strips the end of each, so every text is made one line
(newlines become spaces, ends stripped) before it is scored AND before it is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


class TextFileError(ValueError):
    """A reference or hypothesis file that is missing or does not fit the others; the
    message names the file(s)."""


def one_line(text: str) -> str:
    return " ".join(text.replace("\r\n", "\n").replace("\r", "\n").split("\n")).strip()


def reference_file_names(num_references: int) -> list[str]:
    """ref.txt for one reference per example, else ref0.txt, ref1.txt, ... (one file per
    reference stream, the form `sacrebleu ref0.txt ref1.txt -i hyp.txt` takes)."""
    return ["ref.txt"] if num_references == 1 else [f"ref{k}.txt" for k in range(num_references)]


def write_texts(directory: str | Path, hypotheses: Sequence[str], references: Sequence[Sequence[str]],
                sources: Sequence[str] | None = None, baseline: Sequence[str] | None = None) -> dict[str, Path]:
    """Write hyp.txt, the reference file(s), and optionally src.txt and baseline.txt (the
    baseline's hypotheses), one line per example; returns {name: path}."""
    streams = reference_streams(references, len(hypotheses))
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {"hyp.txt": hypotheses}
    files.update(zip(reference_file_names(len(streams)), streams))
    if sources is not None:
        files["src.txt"] = sources
    if baseline is not None:
        files["baseline.txt"] = baseline
    written = {}
    for name, texts in files.items():
        if len(texts) != len(hypotheses):
            raise ValueError(f"{name}: {len(texts)} lines for {len(hypotheses)} hypotheses")
        path = directory / name
        path.write_text("".join(one_line(text) + "\n" for text in texts), encoding="utf-8")
        written[name] = path
    return written


def reference_streams(references: Sequence[Sequence[str]], num_examples: int) -> list[list[str]]:
    """Per-example reference lists -> one list per reference position (sacreBLEU's form).
    Every example needs the same number of references: a stream with a hole would be
    scored differently by the library and by its command line."""
    if len(references) != num_examples:
        raise ValueError(f"{len(references)} reference lists for {num_examples} hypotheses")
    counts = sorted({len(refs) for refs in references})
    if counts != [counts[0]] or counts[0] < 1:
        first = next(i for i, refs in enumerate(references) if len(refs) != len(references[0]) or not refs)
        raise ValueError(f"every example needs the same number (>= 1) of references; example 0 has "
                         f"{len(references[0])}, example {first} has {len(references[first])}")
    return [[one_line(refs[k]) for refs in references] for k in range(counts[0])]


def read_lines(path: str | Path, what: str = "text file") -> list[str]:
    """Lines of a UTF-8 file, as sacreBLEU reads them (split at \\n only, ends stripped)."""
    path = Path(path)
    if not path.is_file():
        raise TextFileError(f"{what} {path} does not exist; give the path of a UTF-8 file with one "
                            "text per line")
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip() for line in f]


def read_references(paths: Sequence[str | Path], num_examples: int | None = None) -> list[list[str]]:
    """Per-example reference lists from one file per reference stream; every file must
    have one line per example."""
    streams = [read_lines(path, "reference file") for path in paths]
    expected = num_examples if num_examples is not None else len(streams[0])
    for path, stream in zip(paths, streams):
        if len(stream) != expected:
            raise TextFileError(f"reference file {path} has {len(stream)} lines, expected {expected} "
                                f"(one per hypothesis{'' if num_examples is not None else ', as ' + str(paths[0])})")
    return [list(refs) for refs in zip(*streams)]
