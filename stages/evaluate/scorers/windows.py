"""Which tokens of a long document each rolling window scores.

    score_chunks(10, first=4, stride=4)  ->  [(0, 4), (4, 8), (8, 10)]
    score_chunks(10, first=4, stride=2)  ->  [(0, 4), (4, 6), (6, 8), (8, 10)]

Every token is scored exactly once. The first chunk is as long as the first window can
be; each later chunk is the next `stride` tokens, scored by a window that ends with the
chunk and reaches back as far as the model's context allows. With stride equal to the
context length these are lm-eval's disjoint windows (`get_rolling_token_windows` with
context_len=1 then `make_disjoint_window`); with a smaller stride each later chunk's
first token still sees context - stride earlier tokens.
"""

from __future__ import annotations


def score_chunks(num_tokens: int, first: int, stride: int) -> list[tuple[int, int]]:
    """[(start, end)) token ranges, in order, covering range(num_tokens) once."""
    assert first >= 1 and stride >= 1, (first, stride)
    if num_tokens == 0:
        return []
    chunks = [(0, min(first, num_tokens))]
    while chunks[-1][1] < num_tokens:
        start = chunks[-1][1]
        chunks.append((start, min(start + stride, num_tokens)))
    return chunks


def check_stride(stride: int | None, max_stride: int, family: str) -> int:
    """stride, or max_stride when None; an error naming the limit otherwise."""
    if stride is None:
        return max_stride
    if not 1 <= stride <= max_stride:
        raise ValueError(f"rolling stride {stride} is out of range for this {family} model: "
                         f"use 1 <= stride <= {max_stride} (or null for {max_stride})")
    return stride
