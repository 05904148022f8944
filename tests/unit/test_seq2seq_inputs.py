"""Sequence-to-sequence task files and specs: every mistake is one clear error naming the
file(s) and the fix, and nothing is dropped or cut silently (stages/finetune/seq2seq/).
The multi30k built-ins read the real files; the mistakes are made in small copies."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_config
from stages.finetune.seq2seq.encode import encode_rows
from stages.finetune.seq2seq.reader import Seq2SeqDataError, read_split
from stages.finetune.seq2seq.spec import Seq2SeqSpec, SplitFiles
from stages.finetune.tasks import get_task
from tests.conftest import DATA_DIR
from tests.support.seq2seq_models import MULTI30K, write_seq2seq_model

ENGLISH = (MULTI30K / "val.en").read_text(encoding="utf-8").splitlines()[:12]
GERMAN = (MULTI30K / "val.de").read_text(encoding="utf-8").splitlines()[:12]


def write_pairs(folder: Path, english: list[str], german: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "x.en").write_text("".join(line + "\n" for line in english), encoding="utf-8")
    (folder / "x.de").write_text("".join(line + "\n" for line in german), encoding="utf-8")


def spec_for(folder: Path, **fields) -> Seq2SeqSpec:
    files = SplitFiles(source=str(folder / "x.en"), target=str(folder / "x.de"))
    return Seq2SeqSpec(name="tiny", kind="translation", splits={"dev": files, "test": files}, **fields)


def test_the_built_in_tasks_read_the_real_files():
    en_de, de_en = get_task("multi30k_en_de"), get_task("multi30k_de_en")
    test = read_split(en_de, "test", DATA_DIR)
    assert len(test) == 1000 and test.empty_skipped == 0
    assert read_split(de_en, "test", DATA_DIR).references[0] == [test.sources[0]]  # the other direction
    dialogs = read_split(get_task("dialogsum"), "test", DATA_DIR)
    assert len(dialogs) == 500 and all(len(refs) == 3 for refs in dialogs.references)


def test_parallel_files_of_different_lengths_name_both_files_and_counts(tmp_path):
    write_pairs(tmp_path, ENGLISH, GERMAN[:-1])
    with pytest.raises(Seq2SeqDataError) as error:
        read_split(spec_for(tmp_path), "dev", tmp_path)
    message = str(error.value)
    assert f"{tmp_path / 'x.en'} has 12 lines but {tmp_path / 'x.de'} has 11" in message
    assert "fix one of the files" in message


def test_empty_lines_are_skipped_and_counted_or_refused_naming_the_line(tmp_path):
    write_pairs(tmp_path, ENGLISH[:3] + [""] + ENGLISH[4:], GERMAN[:6] + ["  "] + GERMAN[7:])
    rows = read_split(spec_for(tmp_path), "dev", tmp_path)
    assert len(rows) == 10 and rows.empty_skipped == 2
    assert rows.line_numbers[:4] == [1, 2, 3, 5] and rows.sources[3] == ENGLISH[4]
    with pytest.raises(Seq2SeqDataError) as error:
        read_split(spec_for(tmp_path, empty_lines="error"), "dev", tmp_path)
    assert str(error.value).startswith(f"{tmp_path / 'x.en'}:4: empty source")
    assert "2 pairs have an empty source or target" in str(error.value)
    assert "empty_lines: skip" in str(error.value)


def test_a_missing_reference_file_is_named_with_the_fix(tmp_path):
    write_pairs(tmp_path, ENGLISH, GERMAN)
    (tmp_path / "x.de").unlink()
    with pytest.raises(Seq2SeqDataError) as error:
        read_split(spec_for(tmp_path), "test", tmp_path)
    assert str(error.value).startswith(f"{tmp_path / 'x.de'}: not found (task 'tiny', split 'test')")
    assert "put the file there, or fix the path" in str(error.value)


def experiment(tmp_path: Path, spec_text: str, model: str = "{family: t5}") -> Path:
    (tmp_path / "task.yaml").write_text(spec_text, encoding="utf-8")
    config = tmp_path / "experiment.yaml"
    config.write_text(f"name: x\ningest: {{sources: [{{path: a.txt}}]}}\npretrain:\n  model: {model}\n"
                      f"finetune:\n  task_specs: [{tmp_path / 'task.yaml'}]\n  tasks: [my_task]\n", encoding="utf-8")
    return config


SPEC = ("name: my_task\nkind: translation\nprefix: 'translate English to German: '\n"
        "splits:\n  dev: {source: a.en, target: a.de}\n  test: {source: b.en, target: b.de}\n")


def test_a_user_spec_loads_and_a_misspelt_key_names_the_closest_one(tmp_path):
    config = load_config(experiment(tmp_path, SPEC))
    assert get_task("my_task").prefix == "translate English to German: "
    assert get_task("my_task").metrics == ("bleu", "chrf")
    assert config.finetune.tasks == ["my_task"]
    with pytest.raises(ConfigError) as error:
        load_config(experiment(tmp_path, SPEC + "max_target_length: 80\n"))
    assert f"{tmp_path / 'task.yaml'}:7: unknown key 'max_target_length'; did you mean 'max_target_len'?" in \
        str(error.value)


def test_bert_is_refused_at_config_validation_with_the_reason(tmp_path):
    with pytest.raises(ConfigError) as error:
        load_config(experiment(tmp_path, SPEC, model="{family: bert}"))
    assert "my_task" in str(error.value) and "a BERT model is an encoder only" in str(error.value)
    assert "pretrain a T5" in str(error.value)


@pytest.fixture(scope="module")
def t5_tokenizer(tmp_path_factory) -> str:
    return str(write_seq2seq_model(tmp_path_factory.mktemp("t5"), "t5") / "tokenizer.json")


def test_long_targets_are_counted_and_cut_or_refused_never_cut_silently(tmp_path, t5_tokenizer):
    write_pairs(tmp_path, ENGLISH, GERMAN)
    spec = spec_for(tmp_path, max_target_len=12)
    rows = read_split(spec, "dev", tmp_path)
    encoded, facts = encode_rows(t5_tokenizer, spec, rows, layout="encoder_decoder", train=True)
    whole, _ = encode_rows(t5_tokenizer, spec_for(tmp_path, max_target_len=200), rows, layout="encoder_decoder",
                           train=True)
    lengths = [int((row != -100).sum()) for row in whole.labels]
    too_long = sum(n > 12 for n in lengths)
    assert too_long > 0 and facts["targets_cut"] == too_long and facts["longest_target"] == max(lengths)
    assert (encoded.labels[:, -1] == 1).sum() == too_long  # a cut target keeps its </s>
    with pytest.raises(Seq2SeqDataError) as error:
        encode_rows(t5_tokenizer, spec_for(tmp_path, max_target_len=12, long_targets="error"), rows,
                    layout="encoder_decoder", train=True, where=str(tmp_path / "x.de"))
    assert f"{tmp_path / 'x.de'}: {too_long} training targets are longer than max_target_len=12" in str(error.value)
    assert f"Raise max_target_len to {max(lengths)}" in str(error.value)
