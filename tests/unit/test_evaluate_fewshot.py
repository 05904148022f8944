"""Demonstrations: seeded as lm-eval draws them, never the evaluated example, and the same
for a worker's slice as for the whole task."""

from __future__ import annotations

import random

import pytest

from stages.evaluate.evaluate_task import plan_task
from stages.evaluate.fewshot import draw_demonstrations
from stages.evaluate.spec import resolve_task_spec


def rows(n: int) -> list[dict]:
    return [{"text": f"row {i}", "label": i % 2} for i in range(n)]


def test_draws_are_lm_evals_sequence_over_documents():
    # lm-eval: one Random(seed) for the task; per evaluated doc, sample k + 1 docs, drop the
    # evaluated one, keep k. Written here over the documents themselves, not indices.
    pool, shots, seed = rows(40), 3, 1234
    rnd = random.Random(seed)
    expected = []
    for doc in pool:
        drawn = [d for d in rnd.sample(pool, shots + 1) if d != doc][:shots]
        expected.append([pool.index(d) for d in drawn])
    assert draw_demonstrations(pool, pool, list(range(40)), shots, seed) == expected


def test_the_evaluated_example_and_its_copies_are_never_demonstrations():
    pool = rows(6)
    pool += [dict(pool[0]) for _ in range(3)]  # three copies of row 0 in the pool
    for seed in range(200):
        demos = draw_demonstrations(pool, pool, list(range(len(pool))), 4, seed)
        for i, chosen in enumerate(demos):
            assert len(chosen) == len(set(chosen)) == 4
            assert all(pool[j] != pool[i] for j in chosen)


def test_first_n_sampler_skips_the_evaluated_row():
    pool = rows(5)
    assert draw_demonstrations(pool, pool, [0, 2], 2, 0, "first_n") == [[1, 2], [0, 1]]


def test_other_split_and_errors():
    eval_rows, pool = rows(3), [{"text": f"train {i}", "label": 0} for i in range(10)]
    demos = draw_demonstrations(eval_rows, pool, [0, 1, 2], 2, 7)
    assert all(len(d) == 2 for d in demos)
    assert draw_demonstrations(eval_rows, pool, [0, 1], 0, 7) == [[], []]
    with pytest.raises(ValueError, match="9 shots need at least 10 rows"):
        draw_demonstrations(eval_rows, rows(9), [0], 9, 0)


def test_demonstrations_depend_on_the_seed(data_dir):
    spec = resolve_task_spec("piqa")
    a = plan_task(spec, data_dir, shots=3, seed=1).demonstrations
    assert a == plan_task(spec, data_dir, shots=3, seed=1).demonstrations
    assert a != plan_task(spec, data_dir, shots=3, seed=2).demonstrations


@pytest.mark.parametrize("count", [1, 3, 7])
def test_shards_rebuild_the_whole_task(data_dir, count):
    plan = plan_task(resolve_task_spec("copa"), data_dir, shots=2, seed=5, max_examples=40)
    parts = [plan.shard(i, count) for i in range(count)]
    assert [p for part in parts for p in part] == list(range(40))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    # A worker builds its own plan from the same inputs and asks only for its slice.
    rebuilt = []
    for i in range(count):
        worker_plan = plan_task(resolve_task_spec("copa"), data_dir, shots=2, seed=5, max_examples=40,
                                data=plan.data if i else None)
        rebuilt += worker_plan.requests(worker_plan.shard(i, count))
    assert rebuilt == plan.requests()
    with pytest.raises(ValueError, match="shard index 3 is not in"):
        plan.shard(3, 3)
