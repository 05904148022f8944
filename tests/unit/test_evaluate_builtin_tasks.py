"""Every built-in evaluation task loads and reads its real files, with the sizes the data
README states (../shared/data/eval/README.md) and lm-eval's document split of WikiText-2."""

from __future__ import annotations

import pytest

from stages.evaluate.fewshot import select_examples
from stages.evaluate.prompts import Request
from stages.evaluate.evaluate_task import plan_task
from stages.evaluate.readers import read_task_data
from stages.evaluate.spec import builtin_task_names, resolve_task_spec

EXPECTED_ROWS = {
    # task: (evaluated rows, demonstration rows)
    "lambada_openai": (5153, 5153),
    "wikitext2": (62, 62),        # EleutherAI/wikitext_document_level's test articles
    "ptb": (1, 1),                # the whole file, one document
    "piqa": (1838, 1838),
    "arc_easy": (2376, 2376),
    "arc_challenge": (1172, 1172),
    "copa": (100, 400),           # SuperGLUE val; demonstrations: SuperGLUE train = COPA dev 1-400
    "boolq": (3270, 3270),
    "sst2": (872, 67349),
    "rte": (277, 2490),
    "mrpc": (408, 3668),
    "cola": (1043, 8551),
    "wnli": (71, 635),
    "qnli": (5463, 5463),
    "squad": (10570, 10570),
    "wmt14_en_de": (3003, 3003),  # newstest2014 full; demonstrations: other test pairs
    "multi30k_en_de": (1000, 29000),  # test 2016 Flickr; demonstrations: the training pairs
    "dialogsum_tldr": (500, 500),
}


def test_every_builtin_task_is_listed_here():
    assert builtin_task_names() == sorted(EXPECTED_ROWS)


@pytest.mark.parametrize("name", sorted(EXPECTED_ROWS))
def test_builtin_task_reads_its_real_files(name, data_dir):
    spec = resolve_task_spec(name)
    data = read_task_data(spec, data_dir)
    assert (len(data[spec.eval_split]), len(data[spec.demonstration_split])) == EXPECTED_ROWS[name]
    # Every prompt of a sample of rows renders (the whole files are rendered by the parity test).
    plan = plan_task(spec, data_dir, shots=0, seed=0, max_examples=50)
    requests: list[Request] = plan.requests()
    assert {r.example for r in requests} == set(plan.selection)


def test_label_files_pair_line_by_line(data_dir):
    piqa = read_task_data(resolve_task_spec("piqa"), data_dir)["validation"].rows
    assert sum(r["label"] == 1 for r in piqa) == 928 and sum(r["label"] == 0 for r in piqa) == 910
    copa = read_task_data(resolve_task_spec("copa"), data_dir)
    train = copa["train"].rows
    assert train[0] == {"premise": "My body cast a shadow over the grass.", "choice1": "The sun was rising.",
                        "choice2": "The grass was cut.", "question": "cause", "label": 0, "idx": 0}
    assert train[-1]["idx"] == 399 and copa["train"].where[0].endswith("copa-dev.xml:5")


def test_wikitext_articles_cover_the_file(data_dir):
    rows = read_task_data(resolve_task_spec("wikitext2"), data_dir)["test"].rows
    raw = (data_dir / "eval/wikitext-2/wiki.test.raw").read_text(encoding="utf-8")
    # The articles, rejoined, are the file minus its first (blank) line.
    assert "\n".join(r["text"] for r in rows) == raw.split("\n", 1)[1]
    assert all(r["text"].startswith(" = ") and not r["text"].startswith(" = = ") for r in rows)


def test_max_examples_is_a_seeded_subset():
    assert select_examples(10, None, 0) == list(range(10))
    picked = select_examples(5153, 100, 1234)
    assert picked == sorted(picked) and len(set(picked)) == 100
    assert picked == select_examples(5153, 100, 1234) != select_examples(5153, 100, 1235)
