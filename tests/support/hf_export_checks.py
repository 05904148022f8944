"""Checks that a finished task's `hf/` folder, loaded by transformers alone (AutoTokenizer,
AutoModelFor*, `pipeline`), predicts what the finetune stage wrote: its logits equal the
stage's raw outputs (model_outputs.npz, within 1e-5) and its predictions are those of the
stage's prediction files. Shared by the GPT, BERT and T5 integration tests.

    assert_classifier_matches(task_dir, dev.texts, rows=64)      # GLUE: text-classification pipeline
    assert_tagger_matches(task_dir, rows=24)                     # CoNLL: token-classification pipeline
    assert_reader_matches(task_dir, questions, cfg)              # SQuAD: AutoModelForQuestionAnswering
    assert_generator_matches(task_dir, sources, rows=16)         # T5: AutoModelForSeq2SeqLM.generate

transformers 5 removed the question-answering and text2text-generation pipelines
(`transformers.pipelines.REMOVED_TASKS`): SQuAD and T5 exports are run through their
Auto classes instead, with the stage's own windows and decoding for SQuAD.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the folders are local; never reach for the hub

ATOL = 1e-5


def _transformers():
    import transformers

    return transformers


def _dev_outputs(task_dir: Path) -> np.ndarray:
    with np.load(Path(task_dir) / "model_outputs.npz") as outputs:
        return outputs["dev"]


def _dev_rows(task_dir: Path) -> list[dict[str, str]]:
    with open(Path(task_dir) / "dev_predictions.tsv", encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def assert_classifier_matches(task_dir: Path, texts: list[tuple[str, ...]], rows: int) -> None:
    """The first `rows` dev rows (texts in the stage's order): logits of a padded batch,
    and the text-classification pipeline's labels (STS-B: scores) against dev_predictions.tsv."""
    transformers = _transformers()
    hf_dir = Path(task_dir) / "hf"
    texts = texts[:rows]
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(hf_dir).eval()
    columns = [list(column) for column in zip(*texts)]
    batch = tokenizer(*columns, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits.numpy()
    np.testing.assert_allclose(logits, _dev_outputs(task_dir)[:rows], rtol=0, atol=ATOL)

    classifier = transformers.pipeline("text-classification", model=str(hf_dir))
    inputs = [text[0] if len(text) == 1 else {"text": text[0], "text_pair": text[1]} for text in texts]
    predicted = classifier(inputs, truncation=True, batch_size=8)
    written = [row["prediction"] for row in _dev_rows(task_dir)[:rows]]
    if model.config.problem_type == "regression":  # the file: clipped to the task's range, 3 decimals
        np.testing.assert_allclose(np.clip([p["score"] for p in predicted], 0.0, 5.0), np.asarray(written, float),
                                   rtol=0, atol=5e-4 + ATOL)
    else:
        assert [p["label"] for p in predicted] == written


def conll_predictions(task_dir: Path) -> list[tuple[list[str], list[str]]]:
    """(words, predicted tags) per sentence of dev_predictions.txt (`word gold predicted` lines)."""
    blocks = (Path(task_dir) / "dev_predictions.txt").read_text(encoding="utf-8").split("\n\n")
    sentences = []
    for block in blocks:
        lines = [line.split(" ") for line in block.splitlines() if line]
        if lines:
            sentences.append(([line[0] for line in lines], [line[2] for line in lines]))
    return sentences


def assert_tagger_matches(task_dir: Path, rows: int) -> None:
    """The token-classification pipeline on the first `rows` dev sentences, given as words
    (is_split_into_words, as the stage encodes them): the tag of each word's first
    token is the stage's (a word cut off by truncation: O), and the logits equal the
    stage's outputs."""
    transformers = _transformers()
    hf_dir = Path(task_dir) / "hf"
    tagger = transformers.pipeline("token-classification", model=str(hf_dir))
    tokenizer, model = tagger.tokenizer, tagger.model.eval()
    outputs = _dev_outputs(task_dir)
    num_labels = model.config.num_labels
    for row, (words, expected) in enumerate(conll_predictions(task_dir)[:rows]):
        encoding = tokenizer(words, is_split_into_words=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            logits = model(**encoding).logits[0].numpy()  # (T, num_labels)
        stage = outputs[row].reshape(-1, num_labels)[:len(logits)]
        np.testing.assert_allclose(logits, stage, rtol=0, atol=ATOL)
        first_token: dict[int, int] = {}
        for position, word in enumerate(encoding.word_ids()):
            if word is not None:
                first_token.setdefault(word, position)
        [entities] = tagger(words, is_split_into_words=True, ignore_labels=[])  # one sentence in, one list out
        tags = {entity["index"]: entity["entity"] for entity in entities}
        assert [tags.get(first_token.get(w), "O") for w in range(len(words))] == expected, words


def assert_reader_matches(task_dir: Path, questions: list, cfg) -> None:
    """AutoModelForQuestionAnswering on the stage's windows of `questions` (built with the
    exported tokenizer): start/end logits equal the stage's, and decoding them as the stage
    does gives predictions.json. cfg: the finetune section (window and decoding settings)."""
    from stages.finetune.encode import pair_layout, raw_tokenizer
    from stages.finetune.squad.decode import decode
    from stages.finetune.squad.windows import build_windows

    transformers = _transformers()
    hf_dir = Path(task_dir) / "hf"
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir).backend_tokenizer
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(hf_dir).eval()
    windows = build_windows(raw_tokenizer(tokenizer), pair_layout(tokenizer), questions, max_seq_len=cfg.max_seq_len,
                            doc_stride=cfg.doc_stride, max_query_len=cfg.max_query_len)
    inputs = {"input_ids": windows.input_ids, "attention_mask": windows.attention_mask}
    if windows.token_type_ids is not None:
        inputs["token_type_ids"] = windows.token_type_ids
    with torch.no_grad():
        out = model(**{name: torch.from_numpy(array.astype(np.int64)) for name, array in inputs.items()})
    start, end = out.start_logits.numpy(), out.end_logits.numpy()
    stage_start, stage_end = np.split(_dev_outputs(task_dir), 2, axis=1)
    real = windows.attention_mask.astype(bool)  # padding is never decoded
    np.testing.assert_allclose(start[real], stage_start[real], rtol=0, atol=ATOL)
    np.testing.assert_allclose(end[real], stage_end[real], rtol=0, atol=ATOL)
    decoded = decode(questions, windows, start, end, n_best_size=cfg.n_best_size, max_answer_len=cfg.max_answer_len)
    written = json.loads((Path(task_dir) / "predictions.json").read_text(encoding="utf-8"))
    assert decoded.answers(None) == written


def assert_generator_matches(task_dir: Path, sources: list[str], rows: int) -> None:
    """AutoModelForSeq2SeqLM.generate, with the folder's generation_config.json, on the
    first `rows` dev sources: the texts of dev_predictions.tsv's generation column."""
    transformers = _transformers()
    hf_dir = Path(task_dir) / "hf"
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    batch = tokenizer(sources[:rows], padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**batch)
    texts = [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]
    assert texts == [row["generation"] for row in _dev_rows(task_dir)[:rows]]
