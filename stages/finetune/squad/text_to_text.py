"""SQuAD (v1.1 and v2.0) as text to text, in the T5 paper's format:

    "question: Who won? context: The Broncos beat the Panthers ..."   -> "The Broncos"
    v2.0, a question without an answer                                  -> ""  (just </s>)

The target is the first gold answer's text; generations are decoded to text and scored
with the official EM / F1 (`stages.finetune.squad.evaluate`), an empty generation being
the no-answer prediction (what v2.0 scores against unanswerable questions).

Long contexts: the source is cut at finetune.max_seq_len tokens (T5 does the same at
512), so an answer past the cut cannot be read, only guessed; `answers_cut_off` counts
such questions per split. No sliding windows: greedy decoding gives one answer per
source and no comparable score across windows. Set finetune.max_seq_len to cover
your contexts (SQuAD's are ~150 words; 384-512 tokens holds nearly all);
doc_stride, max_query_len, max_answer_len and n_best_size are not used.

Greedy decoding has one answer and no null score: there is no n-best list and no
null-odds file (v2.0) to write; `stages.finetune.families.text_to_text` says so in
metrics.json.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from tokenizers import Tokenizer

from stages.finetune.encode import EncodedSplit
from stages.finetune.prepared import PreparedTask
from stages.finetune.squad.evaluate import squad_scores
from stages.finetune.squad.reader import SquadExample
from stages.finetune.text_to_text.pairs import encode_pairs, generated_texts

MAX_TARGET_LEN = 32  # answer tokens, </s> included: 99% of SQuAD answers are under 20 words
SOURCE_PREFIX = "question: "
CONTEXT_PREFIX = " context: "


def squad_source(example: SquadExample) -> str:
    return f"{SOURCE_PREFIX}{example.question}{CONTEXT_PREFIX}{example.context}"


def squad_target(example: SquadExample) -> str:
    """The first gold answer; "" for a v2.0 question without one."""
    return example.answers[0].text if example.answers else ""


def encode_squad(tokenizer: Tokenizer, examples: list[SquadExample], with_targets: bool = True) -> EncodedSplit:
    targets = [squad_target(e) for e in examples] if with_targets else None
    return encode_pairs(tokenizer, [squad_source(e) for e in examples], targets, MAX_TARGET_LEN)


def answers_cut_off(tokenizer: Tokenizer, examples: list[SquadExample]) -> int:
    """Questions whose first answer ends past the truncated source (tokenizer: the task
    tokenizer, truncating at max_seq_len): the model cannot read those answers."""
    cut = 0
    for example, encoding in zip(examples, tokenizer.encode_batch([squad_source(e) for e in examples])):
        if not example.answers:
            continue
        answer = example.answers[0]
        answer_end = len(SOURCE_PREFIX) + len(example.question) + len(CONTEXT_PREFIX) + answer.start + len(answer.text)
        kept_end = max((end for (_, end), mask in zip(encoding.offsets, encoding.attention_mask) if mask), default=0)
        cut += answer_end > kept_end
    return cut


def generated_answers(examples: list[SquadExample], tokenizer_path: str, outputs: np.ndarray) -> dict[str, str]:
    """{question id: generated answer text} (what predictions.json holds; "" = no answer)."""
    return {e.id: text for e, text in zip(examples, generated_texts(tokenizer_path, outputs))}


def squad_text_scores(examples: list[SquadExample], tokenizer_path: str, outputs: np.ndarray, *,
                      version: str) -> dict[str, float]:
    """Official EM / F1 of the generations (by `version`'s script), and how many were
    empty (no-answer)."""
    answers = generated_answers(examples, tokenizer_path, outputs)
    gold = {e.id: [a.text for a in e.answers] for e in examples}
    return {**squad_scores(answers, gold, version=version),
            "empty_predictions": sum(not text for text in answers.values())}


def prepare_squad_text(tokenizer: Tokenizer, tokenizer_path: str, train: list[SquadExample],
                       dev: list[SquadExample], split_note: str, *, version: str) -> PreparedTask:
    """tokenizer: the task tokenizer (`load_task_tokenizer`, truncating at max_seq_len).
    predictors: "dev" -> (outputs -> {question id: text}). data: {"train", "dev",
    "split_note", "answers_cut_off": {split: count}}."""
    cut_off = {"train": answers_cut_off(tokenizer, train), "dev": answers_cut_off(tokenizer, dev)}
    return PreparedTask(
        encoded={"train": encode_squad(tokenizer, train), "dev": encode_squad(tokenizer, dev)},
        scorers={"dev": partial(squad_text_scores, dev, tokenizer_path, version=version)},
        predictors={"dev": partial(generated_answers, dev, tokenizer_path)},
        predict_splits=("dev",),
        data={"train": train, "dev": dev, "split_note": split_note, "answers_cut_off": cut_off},
        description=f"{len(train)} train questions, {len(dev)} scored, as text to text (answers past "
                    f"max_seq_len: {cut_off['train']} train, {cut_off['dev']} scored); {split_note}")
