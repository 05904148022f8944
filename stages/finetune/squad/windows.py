"""Question + context as fixed-length windows, the context cut into overlapping pieces.

    [CLS] question [SEP] context[start:start+room] [SEP] [PAD]...     (BERT, type ids 0.. 1..)
    question <eos> context[start:start+room] <eos> <pad>...            (GPT, no segments)

`room` is what is left of max_seq_len after the question (at most max_query_len tokens)
and the special tokens. Windows start doc_stride context tokens apart (Google BERT's
--doc_stride) until one reaches the end of the context. `offsets` map every context
token back to its characters in the context, (-1, -1) elsewhere, so that a predicted
span becomes `context[offsets[s][0]:offsets[e][1]]`. An answer outside a window (or a
v2.0 question without one) points at position 0 in that window: the null answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from stages.finetune.encode import PairLayout
from stages.finetune.squad.reader import SquadExample


@dataclass
class SquadWindows:
    input_ids: np.ndarray  # (N, T) int32
    attention_mask: np.ndarray  # (N, T) int8
    token_type_ids: np.ndarray | None  # (N, T) int8; None for a tokenizer without segments
    offsets: np.ndarray  # (N, T, 2) int32 character span in the context, -1 outside it
    example_index: np.ndarray  # (N,) int32: which example each window belongs to
    labels: np.ndarray  # (N, 2) int64: start and end token of the answer, 0 = none here

    def __len__(self) -> int:
        return len(self.input_ids)


def build_windows(tokenizer: Tokenizer, layout: PairLayout, examples: list[SquadExample], *,
                  max_seq_len: int, doc_stride: int, max_query_len: int) -> SquadWindows:
    rows: dict[str, list] = {k: [] for k in ("ids", "types", "offsets", "example", "labels", "length")}
    questions = tokenizer.encode_batch([e.question for e in examples], add_special_tokens=False)
    contexts = tokenizer.encode_batch([e.context for e in examples], add_special_tokens=False)
    for index, (example, question, context) in enumerate(zip(examples, questions, contexts)):
        query = question.ids[:max_query_len]
        head = [*layout.prefix_ids, *query, layout.sep_id]
        room = max_seq_len - len(head) - 1
        if room < 1:
            raise ValueError(f"max_seq_len={max_seq_len} leaves no room for context after a "
                             f"{len(query)}-token question; raise max_seq_len or lower max_query_len")
        answer = _answer_tokens(example, context.offsets)
        for start in window_starts(len(context.ids), room, doc_stride):
            piece = slice(start, min(start + room, len(context.ids)))
            ids = [*head, *context.ids[piece], layout.sep_id]
            offsets = np.full((max_seq_len, 2), -1, dtype=np.int32)
            offsets[len(head):len(head) + piece.stop - start] = context.offsets[piece]
            label = (0, 0)
            if answer is not None and start <= answer[0] and answer[1] < piece.stop:
                label = (answer[0] - start + len(head), answer[1] - start + len(head))
            rows["ids"].append(ids + [layout.pad_id] * (max_seq_len - len(ids)))
            rows["types"].append([0] * len(head) + [1] * (len(ids) - len(head)) + [0] * (max_seq_len - len(ids)))
            rows["offsets"].append(offsets)
            rows["example"].append(index)
            rows["length"].append(len(ids))
            rows["labels"].append(label)
    ids = np.asarray(rows["ids"], dtype=np.int32)
    return SquadWindows(
        input_ids=ids,
        attention_mask=(np.arange(max_seq_len)[None, :] < np.asarray(rows["length"])[:, None]).astype(np.int8),
        token_type_ids=np.asarray(rows["types"], dtype=np.int8) if layout.uses_segments else None,
        offsets=np.stack(rows["offsets"]), example_index=np.asarray(rows["example"], dtype=np.int32),
        labels=np.asarray(rows["labels"], dtype=np.int64))


def window_starts(num_tokens: int, room: int, doc_stride: int) -> list[int]:
    """First context token of each window; the last window reaches the end."""
    starts, start = [0], 0
    while start + room < num_tokens:
        start += min(room, doc_stride)
        starts.append(start)
    return starts


def _answer_tokens(example: SquadExample, offsets: list[tuple[int, int]]) -> tuple[int, int] | None:
    """(first, last) context token covering the first gold answer; None without one."""
    if not example.answers:
        return None
    begin = example.answers[0].start
    end = begin + len(example.answers[0].text)
    covering = [i for i, (s, e) in enumerate(offsets) if s < end and e > begin]
    return (covering[0], covering[-1]) if covering else None
