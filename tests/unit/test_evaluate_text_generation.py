"""Generation tasks scored on whole outputs (BLEU, chrF, ROUGE): parallel text read line by
line, scores with their baselines from stages.text_metrics, the texts written so that
sacreBLEU's command line gives the same BLEU, the built-in specs on the real files, and
clear errors for a missing reference file or a misspelt key."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from stages.evaluate.aligned_lines import AlignedFilesError
from stages.evaluate.evaluate_task import evaluate_task, plan_task
from stages.evaluate.requests import GenerationResult
from stages.evaluate.run import summary_table, write_outputs
from stages.evaluate.spec import SpecError, load_task_spec, resolve_task_spec
from stages.report.evaluation import key_scores
from stages.text_metrics import Baseline, score_texts

TRANSLATION = """\
name: tiny_en_de
kind: generation
splits:
  test: {path: mt/test.en, format: lines, field: en, aligned: {de: test.de}}
eval_split: test
doc_to_text: "{{en}} ="
doc_to_target: de
fewshot_delimiter: "\\n"
until: ["\\n"]
max_new_tokens: 16
metrics: [bleu, chrf]
baseline: {output: "{{en}}", name: copy the source}
"""
EN = ["A dog runs on the grass.", "Two men play football.", "A woman reads a book in the park.",
      "The child eats an apple.", "", "A red car stops at the light."]
DE = ["Ein Hund rennt auf dem Gras.", "Zwei Männer spielen Fußball.", "Eine Frau liest ein Buch im Park.",
      "Das Kind isst einen Apfel.", "", "Ein rotes Auto hält an der Ampel."]
OUTPUTS = [" Ein Hund läuft auf dem Gras.", " Zwei Männer spielen Fussball.", " Eine Frau liest im Park.",
           " Das Kind isst einen Apfel.", " ", " Ein Auto hält."]


class FakeGenerator:
    family, max_length = "gpt", 64

    def __init__(self, texts):
        self.texts, self.contexts = texts, {}

    def generate(self, requests):
        self.contexts.update({r.example: r.context for r in requests})
        return [GenerationResult(self.texts[r.example], truncated=False) for r in requests]


def write_task(tmp_path: Path, spec: str, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "task.yaml").write_text(textwrap.dedent(spec), encoding="utf-8")
    return load_task_spec(tmp_path / "task.yaml")


def translation_task(tmp_path):
    return write_task(tmp_path, TRANSLATION, {"mt/test.en": "\n".join(EN) + "\n",
                                              "mt/test.de": "\n".join(DE) + "\n"})


def test_translation_by_prompt_is_scored_by_sacrebleu_with_the_copy_baseline(tmp_path):
    spec = translation_task(tmp_path)
    scorer = FakeGenerator(dict(enumerate(OUTPUTS)))
    report = evaluate_task(spec, tmp_path, scorer, shots=1, seed=0)
    # Blank line 5 stays a pair (the files stay aligned); the prompt is GPT-2's "en = de" form.
    assert report.num_examples == 6 and report.examples[4]["references"] == [""]
    demo = plan_task(spec, tmp_path, shots=1, seed=0).demonstrations[0][0]
    assert scorer.contexts[0] == f"{EN[demo]} = {DE[demo]}\n{EN[0]} ="
    expected = score_texts(["bleu", "chrf"], OUTPUTS, [[d] for d in DE], seed=0,
                           baseline=Baseline(EN, "copy the source"))
    for name in ("bleu", "chrf"):
        assert report.scores[name] == expected[name]
    assert report.scores["bleu"].signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert report.scores["bleu"].baseline_kind == "copy the source"

    # The stage's outputs: results.json keeps the signature beside the score; texts/ holds
    # what was scored, which sacreBLEU's command line scores to the same BLEU.
    out = tmp_path / "out"
    write_outputs(out, [report], SimpleNamespace(log=lambda record: None))
    saved = json.loads((out / "results.json").read_text())["tiny_en_de"]["scores"]["bleu"]
    assert saved["signature"] == report.scores["bleu"].signature and saved["baseline"] == expected["bleu"].baseline
    texts = out / "texts" / "tiny_en_de"
    assert (texts / "ref.txt").read_text(encoding="utf-8").splitlines() == DE
    cli = subprocess.run([str(Path(sys.executable).parent / "sacrebleu"), str(texts / "ref.txt"), "-i",
                          str(texts / "hyp.txt"), "-w", "6", "-b"], check=True, capture_output=True, text=True)
    assert float(cli.stdout) == round(report.scores["bleu"].value, 6)
    assert (texts / "baseline.txt").read_text(encoding="utf-8").splitlines() == EN

    # status and the report's tables: the key scores with interval, baseline and verdict.
    flat = {f"tiny_en_de/{k}": v for k, v in report.metrics().items()}
    shown = key_scores(flat)
    assert set(shown) == {"tiny_en_de/bleu", "tiny_en_de/chrf"}
    assert f"baseline {expected['bleu'].baseline:.4g}"[:12] in shown["tiny_en_de/bleu"]
    assert "bleu" in summary_table([report]) and "chrf" in summary_table([report])


DIALOGUES = [
    {"dialogue": "#Person1#: Can I book a table for two tonight?\n#Person2#: Yes, at eight.",
     "summary1": "#Person1# books a table for two at eight.", "summary2": "A table for two is booked.",
     "summary3": "#Person2# gives #Person1# a table tonight."},
    {"dialogue": "#Person1#: Where is the station?\n#Person2#: Turn left at the bank.",
     "summary1": "#Person2# tells #Person1# the way to the station.",
     "summary2": "#Person1# asks for directions.", "summary3": "The station is left of the bank."},
    {"dialogue": "#Person1#: I lost my keys.\n#Person2#: Check your coat pocket.",
     "summary1": "#Person1# lost the keys.", "summary2": "#Person2# suggests the coat pocket.",
     "summary3": "#Person1# cannot find the keys."},
]


def test_tldr_summaries_are_scored_by_rouge_against_every_reference(tmp_path):
    spec_text = (Path(resolve_task_spec("dialogsum_tldr").file).read_text(encoding="utf-8")
                 .replace("summarization/dialogsum/dialogsum.test.jsonl", "d.jsonl"))
    spec = write_task(tmp_path, spec_text, {"d.jsonl": "".join(json.dumps(d) + "\n" for d in DIALOGUES)})
    outputs = [" #Person1# books a table for two.", " #Person1# asks where the station is.", " Keys are lost."]
    scorer = FakeGenerator(dict(enumerate(outputs)))
    report = evaluate_task(spec, tmp_path, scorer, shots=0, seed=0)
    assert scorer.contexts[0] == DIALOGUES[0]["dialogue"] + "\nTL;DR:"
    refs = [[d[f"summary{k}"] for k in (1, 2, 3)] for d in DIALOGUES]
    first_turns = [d["dialogue"].split("\n")[0] for d in DIALOGUES]
    expected = score_texts(["rouge"], outputs, refs, seed=0, baseline=Baseline(first_turns, "x"))
    assert set(report.scores) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    for name, score in report.scores.items():
        assert (score.value, score.ci95, score.baseline) == (expected[name].value, expected[name].ci95,
                                                             expected[name].baseline)
    assert report.scores["rouge1"].baseline_kind == "the dialogue's first turn"
    assert report.examples[2]["baseline"] == "#Person1#: I lost my keys."
    out = tmp_path / "out"
    write_outputs(out, [report], SimpleNamespace(log=lambda record: None))
    assert sorted(p.name for p in (out / "texts" / "dialogsum_tldr").iterdir()) == [
        "baseline.txt", "hyp.txt", "ref0.txt", "ref1.txt", "ref2.txt"]


@pytest.mark.parametrize("name, rows", [("wmt14_en_de", 3003), ("multi30k_en_de", 1000), ("dialogsum_tldr", 500)])
def test_builtin_generation_tasks_read_the_real_files(name, rows, data_dir):
    spec = resolve_task_spec(name)
    plan = plan_task(spec, data_dir, shots=1, seed=0, max_examples=3)
    assert len(plan.eval_rows) == rows
    requests = plan.requests()
    assert len(requests) == 3 and all(r.until == ("\n",) for r in requests)
    if name == "multi30k_en_de":
        assert plan.eval_rows.rows[0] == {"en": "A man in an orange hat starring at something.",
                                          "de": "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt."}
        assert len(plan.demo_rows) == 29000
    if name == "dialogsum_tldr":
        assert requests[0].context.endswith("\nTL;DR:")


def test_a_missing_or_short_reference_file_is_named(tmp_path):
    spec = write_task(tmp_path, TRANSLATION, {"mt/test.en": "a\nb\n"})
    with pytest.raises(AlignedFilesError, match=r"mt/test\.de: not found \('splits\.test\.aligned\.de'"):
        plan_task(spec, tmp_path)
    (tmp_path / "mt" / "test.de").write_text("x\n", encoding="utf-8")
    with pytest.raises(AlignedFilesError, match=r"mt/test\.en has 2 lines but .*mt/test\.de has 1"):
        plan_task(spec, tmp_path)


@pytest.mark.parametrize("change, message", [
    (("max_new_tokens: 16", "max_new_token: 16"), r"task\.yaml:10: unknown key 'max_new_token'; did you mean "
                                                  r"'max_new_tokens'\?"),
    (('baseline: {output: "{{en}}"', 'baseline: {outptu: "{{en}}"'), r"'baseline\.outptu'; did you mean "
                                                                     r"'baseline\.output'\?"),
    (("  test: {path: mt/test.en, format: lines, field: en,", "  test: {path: mt/test.en, format: lines, feild: en,"),
     r"'splits\.test\.feild'; did you mean 'splits\.test\.field'\?"),
    (("baseline: {output: \"{{en}}\", name: copy the source}\n", ""), r"'metrics' bleu, chrf and rouge need a baseline"),
    (("metrics: [bleu, chrf]", "metrics: [bleu, exact_match]"), r"'metrics' exact_match score short answers"),
])
def test_spec_mistakes_name_the_key(tmp_path, change, message):
    old, new = change
    assert old in TRANSLATION
    (tmp_path / "task.yaml").write_text(TRANSLATION.replace(old, new), encoding="utf-8")
    with pytest.raises(SpecError, match=message):
        load_task_spec(tmp_path / "task.yaml")
