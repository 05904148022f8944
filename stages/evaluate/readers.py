"""Read a task's split files into rows (plain dicts), each with where it came from.

Rows keep the files' own field names and values (no stripping, no type changes beyond
JSON's), so that templates see what lm-eval's Hugging Face copies of the same sets hold.
`Rows.where[i]` ("path:line") is what errors about row i print.

    data = read_task_data(spec, data_dir)
    data["validation"].rows[0], data["validation"].where[0]
"""

from __future__ import annotations

import csv
import json
import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.evaluate.aligned_lines import read_aligned_lines
from stages.evaluate.spec import DataFile, TaskSpec


class TaskDataError(ValueError):
    """A data file does not fit its spec; the message names the file, line and spec key."""


@dataclass(frozen=True)
class Rows:
    path: Path
    rows: list[dict[str, Any]]
    where: list[str]  # "path:line" (or "path: item id=N") of each row

    def __len__(self) -> int:
        return len(self.rows)


def read_task_data(spec: TaskSpec, data_dir: str | Path) -> dict[str, Rows]:
    """Every split the task uses (the evaluated one and the demonstrations' one)."""
    needed = dict.fromkeys([spec.eval_split, spec.demonstration_split])
    return {split: read_split(spec, split, data_dir) for split in needed}


def read_split(spec: TaskSpec, split: str, data_dir: str | Path) -> Rows:
    file = spec.splits[split]
    key = f"splits.{split}"
    path = Path(data_dir) / file.path  # an absolute path stays as it is
    if not (path.is_file() or (file.format == "parquet" and path.is_dir())):
        raise FileNotFoundError(
            f"{path}: not found (task {spec.name!r}, '{key}.path'). Data paths are relative to "
            f"the data directory ({data_dir}); see ../shared/data/eval/README.md for the files")
    rows, where = _READERS[file.format](path, file, key)
    if file.labels is not None:
        _attach_labels(Path(data_dir) / file.labels, file, key, path, rows)
    for old, new in file.rename.items():
        for row, at in zip(rows, where):
            if old not in row:
                raise TaskDataError(f"{at}: field {old!r} named in '{key}.rename' is missing; the row "
                                    f"has {sorted(row)}")
            row[new] = row.pop(old)
    if file.rows is not None:
        start, stop = file.rows
        if stop > len(rows):
            raise TaskDataError(f"{path}: '{key}.rows' asks for rows [{start}, {stop}) but the file has "
                                f"{len(rows)}")
        rows, where = rows[start:stop], where[start:stop]
    if not rows:
        raise TaskDataError(f"{path}: no rows ('{key}'); the file is empty or the wrong one")
    return Rows(path=path, rows=rows, where=where)


def _read_jsonl(path: Path, file: DataFile, key: str) -> tuple[list[dict], list[str]]:
    rows, where = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise TaskDataError(f"{path}:{number}: not valid JSON ({error.msg}); '{key}' says "
                                    "format: jsonl, one JSON object per line") from None
            if not isinstance(row, dict):
                raise TaskDataError(f"{path}:{number}: a JSON {type(row).__name__}, not an object")
            rows.append(row)
            where.append(f"{path}:{number}")
    return rows, where


def _read_squad_json(path: Path, file: DataFile, key: str) -> tuple[list[dict], list[str]]:
    """One row per question, shaped as Hugging Face's `squad` rows (answers.text,
    answers.answer_start); JSON has no useful line numbers, so rows are named by id."""
    from stages.finetune.squad.reader import SquadDataError, read_squad

    try:
        examples = read_squad(path)
    except SquadDataError as error:
        raise TaskDataError(f"{error} ('{key}' says format: json, the official SQuAD layout)") from None
    rows = [{"id": ex.id, "title": ex.title, "context": ex.context, "question": ex.question,
             "answers": {"text": [a.text for a in ex.answers],
                         "answer_start": [a.start for a in ex.answers]}} for ex in examples]
    return rows, [f"{path}: question id {ex.id}" for ex in examples]


def _read_text(path: Path, file: DataFile, key: str) -> tuple[list[dict], list[str]]:
    text = path.read_text(encoding="utf-8")
    documents = _SPLITTERS[file.documents](text)  # [(1-based first line, document)]
    return [{"text": doc} for _, doc in documents], [f"{path}:{line}" for line, _ in documents]


def _whole_file(text: str) -> list[tuple[int, str]]:
    return [(1, text)]


def _lines(text: str) -> list[tuple[int, str]]:
    return [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]


def _paragraphs(text: str) -> list[tuple[int, str]]:
    out, block, start = [], [], 0
    for n, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            start = start or n
            block.append(line)
        elif block:
            out.append((start, "\n".join(block)))
            block, start = [], 0
    if block:
        out.append((start, "\n".join(block)))
    return out


def _wikitext_articles(text: str) -> list[tuple[int, str]]:
    """EleutherAI/wikitext_document_level's `_generate_examples`, which lm-eval's
    `wikitext` task reads: a new page starts at each ' = Title = ' line (level-1
    heading); lines are joined with '\\n'; the text before the first heading is
    dropped when blank; the last page keeps the file's final newline."""
    out, page, start = [], [], 1
    lines = text.split("\n")
    for n, line in enumerate(lines, start=1):
        heading = line.replace("= = =", "===").replace("= =", "==").strip()
        if heading.startswith("= ") and heading.endswith(" ="):
            joined = "\n".join(page)
            if joined.strip():
                out.append((start, joined))
            page, start = [], n
        page.append(line)
    out.append((start, "\n".join(page)))
    return out


_SPLITTERS = {"file": _whole_file, "line": _lines, "paragraph": _paragraphs,
              "wikitext_articles": _wikitext_articles}


def _read_tsv(path: Path, file: DataFile, key: str) -> tuple[list[dict], list[str]]:
    """GLUE TSVs: tab-separated, no quoting (fields hold unbalanced quotes), values kept
    exactly (SST-2's trailing spaces included, as in Hugging Face's `glue`)."""
    rows, where = [], []
    # utf-8-sig: MRPC's files start with a byte-order mark.
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = list(file.columns) if file.columns is not None else next(reader, [])
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise TaskDataError(
                    f"{path}:{reader.line_num}: {len(row)} tab-separated columns, the header "
                    f"{'(' + key + '.columns) ' if file.columns else ''}has {len(header)} ({', '.join(header)})")
            rows.append(dict(zip(header, row)))
            where.append(f"{path}:{reader.line_num}")
    return rows, where


def _read_copa_xml(path: Path, file: DataFile, key: str) -> tuple[list[dict], list[str]]:
    """The original COPA release, as SuperGLUE's COPA rows: label 0/1 for a1/a2, idx = id - 1."""
    text = path.read_text(encoding="utf-8")
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise TaskDataError(f"{path}:{error.position[0]}: not valid XML ({error}); '{key}' says "
                            "format: copa_xml") from None
    # ElementTree keeps no line numbers; find each item's opening tag in the text instead.
    line_of_id = {m.group(1): text.count("\n", 0, m.start()) + 1
                  for m in re.finditer(r'<item\s+id="([^"]*)"', text)}
    rows, where = [], []
    for item in root.iter("item"):
        item_id = item.get("id", "?")
        at = f"{path}:{line_of_id.get(item_id, '?')}"
        try:
            rows.append({"premise": item.find("p").text, "choice1": item.find("a1").text,
                         "choice2": item.find("a2").text, "question": item.attrib["asks-for"],
                         "label": int(item.attrib["most-plausible-alternative"]) - 1,
                         "idx": int(item_id) - 1})
        except (AttributeError, KeyError, ValueError) as error:
            raise TaskDataError(f"{at}: COPA item id={item_id} lacks <p>, <a1>, <a2>, asks-for or "
                                f"most-plausible-alternative ({type(error).__name__}: {error})") from None
        where.append(at)
    return rows, where


def _read_parquet(path: Path, file: DataFile, key: str) -> tuple[list[dict], list[str]]:
    """A Parquet file, or a folder of them read in name order (the ingest stage's shards:
    `id, text, sentences, source, ...`), one row per record."""
    import pyarrow.parquet as pq

    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not files:
        raise TaskDataError(f"{path}: no *.parquet files in this folder ('{key}' says format: parquet)")
    rows, where = [], []
    for shard in files:
        try:
            table = pq.read_table(shard)
        except Exception as error:  # pyarrow's errors do not name the file
            raise TaskDataError(f"{shard}: not a readable Parquet file ({error}); '{key}' says "
                                "format: parquet") from None
        for index, row in enumerate(table.to_pylist()):
            rows.append(row)
            where.append(f"{shard}: row {index}")
    return rows, where


_READERS = {"jsonl": _read_jsonl, "json": _read_squad_json, "text": _read_text, "tsv": _read_tsv,
            "copa_xml": _read_copa_xml, "parquet": _read_parquet, "lines": read_aligned_lines}


def _attach_labels(labels_path: Path, file: DataFile, key: str, data_path: Path, rows: list[dict]) -> None:
    if not labels_path.is_file():
        raise FileNotFoundError(f"{labels_path}: not found ('{key}.labels')")
    labels = [line.strip() for line in labels_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(labels) != len(rows):
        raise TaskDataError(f"{labels_path}: {len(labels)} labels for the {len(rows)} rows of {data_path} "
                            f"('{key}.labels'); they must pair line by line")
    for row, label in zip(rows, labels):
        row[file.label_field] = int(label) if label.lstrip("-").isdigit() else label
