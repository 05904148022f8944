"""Task specs: mistakes in a spec or in a data row name the file, the line and the key."""

from __future__ import annotations

import json
import textwrap

import pytest

from stages.evaluate.evaluate_task import plan_task
from stages.evaluate.readers import TaskDataError
from stages.evaluate.spec import SpecError, load_task_spec, resolve_task_spec
from stages.evaluate.templates import TemplateRowError

GOOD = """\
name: tiny
kind: multiple_choice
splits:
  test: {path: rows.jsonl, format: jsonl}
eval_split: test
doc_to_text: "Q: {{q}}\\nA:"
doc_to_target: label
doc_to_choice: "{{[a, b]}}"
metrics: [acc, acc_norm]
"""

ROWS = [{"q": "one", "a": "x", "b": "y", "label": 0}, {"q": "two", "a": "x", "b": "yy", "label": 1},
        {"q": "three", "a": "xx", "b": "y", "label": 1}]


def write_task(tmp_path, spec_text: str = GOOD, rows=ROWS):
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    path = tmp_path / "tiny.yaml"
    path.write_text(textwrap.dedent(spec_text), encoding="utf-8")
    return path


def test_a_good_spec_loads_and_builds_prompts(tmp_path):
    spec = load_task_spec(write_task(tmp_path))
    assert spec.demonstration_split == "test" and not spec.has_classes
    plan = plan_task(spec, tmp_path, shots=1, seed=0)
    requests = plan.requests()
    assert [r.continuation for r in requests[:2]] == [" x", " y"]
    assert requests[0].context.endswith("\n\nQ: one\nA:")


def test_unknown_key_names_line_and_closest_key(tmp_path):
    path = write_task(tmp_path, GOOD.replace("metrics:", "metric:"))
    with pytest.raises(SpecError, match=rf"{path}:9: unknown key 'metric'; did you mean 'metrics'\?"):
        load_task_spec(path)
    path = write_task(tmp_path, GOOD.replace("format: jsonl}", "format: jsonl, label: x}"))
    with pytest.raises(SpecError, match=r"tiny.yaml:4: unknown key 'splits.test.label'; did you mean "
                                        r"'splits.test.labels'\?"):
        load_task_spec(path)


def test_missing_and_misplaced_keys(tmp_path):
    with pytest.raises(SpecError, match="required key 'doc_to_target' is missing"):
        load_task_spec(write_task(tmp_path, GOOD.replace("doc_to_target: label\n", "")))
    with pytest.raises(SpecError, match=r"tiny.yaml:2: 'kind' multiple_choice needs doc_to_choice"):
        load_task_spec(write_task(tmp_path, GOOD.replace('doc_to_choice: "{{[a, b]}}"\n', "")))
    with pytest.raises(SpecError, match=r"tiny.yaml:10: 'stride' is for kind: perplexity only"):
        load_task_spec(write_task(tmp_path, GOOD + "stride: 512\n"))
    with pytest.raises(SpecError, match=r"tiny.yaml:9: 'metrics' 'bits_per_byte' is not a metric of kind"):
        load_task_spec(write_task(tmp_path, GOOD.replace("[acc, acc_norm]", "[acc, bits_per_byte]")))
    with pytest.raises(SpecError, match=r"tiny.yaml:5: 'eval_split' 'dev' is not one of the splits \(test\)"):
        load_task_spec(write_task(tmp_path, GOOD.replace("eval_split: test", "eval_split: dev")))
    with pytest.raises(SpecError, match=r"tiny.yaml:4: 'splits.test': 'columns' is for format: tsv only"):
        load_task_spec(write_task(tmp_path, GOOD.replace("format: jsonl}", "format: jsonl, columns: [a]}")))


def test_bad_template_names_its_line(tmp_path):
    path = write_task(tmp_path, GOOD.replace('"Q: {{q}}\\nA:"', '"Q: {{q}\\nA:"'))
    with pytest.raises(SpecError, match=rf"{path}:6: 'doc_to_text' is not a valid Jinja2 template"):
        load_task_spec(path)


def test_row_missing_a_field_names_file_line_and_key(tmp_path):
    rows = [ROWS[0], {"q": "two", "b": "y", "label": 1}, ROWS[2]]
    spec = load_task_spec(write_task(tmp_path, rows=rows))
    with pytest.raises(TemplateRowError, match=r"rows.jsonl:2: spec key 'doc_to_choice' .*field 'a' is missing. The row has fields \['b', 'label', 'q'\]"):
        plan_task(spec, tmp_path).requests()


def test_a_field_name_the_row_lacks(tmp_path):
    rows = [ROWS[0], {"q": "two", "a": "x", "b": "y"}]
    spec = load_task_spec(write_task(tmp_path, rows=rows))
    with pytest.raises(TemplateRowError, match=r"rows.jsonl:2: spec key 'doc_to_target' names field 'label', "
                                               r"which this row lacks"):
        plan_task(spec, tmp_path).requests()
    rows = [{**ROWS[0], "label": True}]
    spec = load_task_spec(write_task(tmp_path, rows=rows))
    with pytest.raises(TemplateRowError, match=r"rows.jsonl:1: 'doc_to_target' gave True; .*\{\{ field\|int \}\}"):
        plan_task(spec, tmp_path).requests()


def test_bad_label_index_names_file_line_and_key(tmp_path):
    rows = [ROWS[0], ROWS[1], {**ROWS[2], "label": 2}]
    spec = load_task_spec(write_task(tmp_path, rows=rows))
    with pytest.raises(TemplateRowError, match=r"rows.jsonl:3: 'doc_to_target' gave label index 2, but the row "
                                               r"has 2 choices"):
        plan_task(spec, tmp_path).requests()


def test_template_that_fails_on_a_row(tmp_path):
    spec = load_task_spec(write_task(tmp_path, GOOD.replace("doc_to_target: label",
                                                            "doc_to_target: \"{{ [a, b].index('zz') }}\"")))
    with pytest.raises(TemplateRowError, match=r"rows.jsonl:1: spec key 'doc_to_target' .*ValueError"):
        plan_task(spec, tmp_path).requests()


def test_bad_data_files(tmp_path):
    spec = load_task_spec(write_task(tmp_path))
    (tmp_path / "rows.jsonl").write_text('{"q": "one"}\n{"q": \n', encoding="utf-8")
    with pytest.raises(TaskDataError, match=r"rows.jsonl:2: not valid JSON"):
        plan_task(spec, tmp_path)
    labelled = GOOD.replace("format: jsonl}", "format: jsonl, labels: labels.lst}")
    spec = load_task_spec(write_task(tmp_path, labelled))
    (tmp_path / "labels.lst").write_text("0\n1\n", encoding="utf-8")
    with pytest.raises(TaskDataError, match=r"labels.lst: 2 labels for the 3 rows .*'splits.test.labels'"):
        plan_task(spec, tmp_path)
    (tmp_path / "labels.lst").write_text("1\n1\n0\n", encoding="utf-8")
    assert [r["label"] for r in plan_task(spec, tmp_path).eval_rows.rows] == [1, 1, 0]
    with pytest.raises(FileNotFoundError, match=r"nowhere/rows.jsonl: not found .*'splits.test.path'"):
        plan_task(spec, tmp_path / "nowhere")


def test_tsv_rows_with_a_wrong_column_count(tmp_path):
    spec_text = GOOD.replace("{path: rows.jsonl, format: jsonl}", "{path: rows.tsv, format: tsv}")
    path = write_task(tmp_path, spec_text)
    (tmp_path / "rows.tsv").write_text("q\ta\tb\tlabel\none\tx\ty\t0\ntwo\tx\ty\n", encoding="utf-8")
    with pytest.raises(TaskDataError, match=r"rows.tsv:3: 3 tab-separated columns, the header has 4"):
        plan_task(load_task_spec(path), tmp_path)


def test_unknown_builtin_task_suggests_the_closest():
    with pytest.raises(SpecError, match="no built-in evaluation task 'piqaa'; did you mean 'piqa'"):
        resolve_task_spec("piqaa")
