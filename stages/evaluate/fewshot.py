"""Which demonstrations each evaluated example gets: lm-eval's samplers, replayed exactly.

lm-eval 0.4.13 (`lm_eval/api/samplers.py`, `ConfigurableTask.fewshot_context`) keeps ONE
`random.Random(fewshot_random_seed)` per task (default seed 1234) and walks the evaluated
docs in order; for each it draws `rnd.sample(pool, k + 1)`, drops every drawn doc equal to
the evaluated one, and keeps the first k (if duplicates left fewer than k, it redraws k
from the pool without the evaluated doc). `first_n` takes the first k pool docs that are
not the evaluated one. We do the same on row indices (`random.sample` picks positions
from the population's length alone, so sampling indices draws the same rows), which makes
the draws cheap enough to replay for every example before taking a worker's slice.

lm-eval passes the evaluated doc (and so draws k + 1) when the few-shot split is the test
split, or when neither is set (its GLUE and SuperGLUE tasks). We always do: the evaluated
example, or an identical copy of it, is never its own demonstration. A parity run with
lm-eval on our files must therefore declare the evaluated file as `test_split` with
`fewshot_split` the same split, or use training_split + validation_split (no test_split).
"""

from __future__ import annotations

import random
from typing import Any, Literal

DEFAULT_SEED = 1234  # lm-eval's fewshot_random_seed default


def draw_demonstrations(eval_rows: list[dict[str, Any]], pool: list[dict[str, Any]],
                        selection: list[int], shots: int, seed: int,
                        sampler: Literal["default", "first_n"] = "default") -> list[list[int]]:
    """For each evaluated row index in `selection` (in that order, as lm-eval walks its
    docs), the indices into `pool` of its `shots` demonstrations, in prompt order."""
    if shots < 0:
        raise ValueError(f"shots must be >= 0, got {shots}")
    if shots == 0:
        return [[] for _ in selection]
    if sampler == "first_n":
        return [_first_n(pool, eval_rows[i], shots) for i in selection]
    if shots + 1 > len(pool):
        raise ValueError(f"{shots} shots need at least {shots + 1} rows in the demonstration split "
                         f"(one may be the evaluated row), it has {len(pool)}; use fewer shots")
    rnd = random.Random(seed)
    return [_sample_excluding(rnd, pool, eval_rows[i], shots) for i in selection]


def _sample_excluding(rnd: random.Random, pool: list[dict], eval_row: dict, shots: int) -> list[int]:
    drawn = rnd.sample(range(len(pool)), shots + 1)
    kept = [j for j in drawn if pool[j] != eval_row][:shots]
    if len(kept) < shots:  # the pool holds copies of the evaluated row: redraw without them
        eligible = [j for j in range(len(pool)) if pool[j] != eval_row]
        if len(eligible) < shots:
            raise ValueError(f"only {len(eligible)} demonstration rows differ from the evaluated row; "
                             f"{shots} shots asked")
        kept = [eligible[j] for j in rnd.sample(range(len(eligible)), shots)]
    return kept


def _first_n(pool: list[dict], eval_row: dict, shots: int) -> list[int]:
    kept = []
    for j, row in enumerate(pool):
        if row != eval_row:
            kept.append(j)
            if len(kept) == shots:
                return kept
    raise ValueError(f"{shots} shots asked but only {len(kept)} demonstration rows differ from the "
                     "evaluated row")


def select_examples(num_rows: int, max_examples: int | None, seed: int) -> list[int]:
    """Row indices evaluated, ascending: all, or `max_examples` drawn without replacement
    with `random.Random(seed)`. The same seed gives the same subset on every machine, and
    a subset of n is lm-eval's `--samples` with these indices (demonstrations follow)."""
    if max_examples is None or max_examples >= num_rows:
        return list(range(num_rows))
    if max_examples < 1:
        raise ValueError(f"max_examples must be >= 1 (or unset for all), got {max_examples}")
    return sorted(random.Random(seed).sample(range(num_rows), max_examples))
