"""A translation task of the user's own (a spec YAML naming aligned files) through the real
CLI: fine-tune, decode with beam search, score with sacreBLEU, write hypothesis and
reference files, report. It re-runs only finetune and report on a copy of the session's
finished gpt-tiny run, so the model is the GPT (decoder only, loss on the target); the
encoder-decoders (T5, the original Transformer) train, decode and score through the same
family in tests/unit/test_seq2seq_training.py, without Ray."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cli import pretrain_cli
from tests.support.seq2seq_models import MULTI30K

pytestmark = [pytest.mark.e2e, pytest.mark.ray]

CONFIG = "configs/gpt-tiny.yaml"


def write_task(folder: Path) -> Path:
    """tiny_en_de: 48 training pairs, 6 dev and 6 test pairs of Multi30k captions."""
    english = (MULTI30K / "val.en").read_text(encoding="utf-8").splitlines()
    german = (MULTI30K / "val.de").read_text(encoding="utf-8").splitlines()
    parts = {"train": slice(0, 48), "dev": slice(48, 54), "test": slice(54, 60)}
    splits = []
    for split, rows in parts.items():
        for lang, lines in (("en", english), ("de", german)):
            (folder / f"{split}.{lang}").write_text("".join(f"{line}\n" for line in lines[rows]), encoding="utf-8")
        splits.append(f"  {split}: {{source: {folder / f'{split}.en'}, target: {folder / f'{split}.de'}}}")
    spec = folder / "tiny_en_de.yaml"
    spec.write_text("name: tiny_en_de\nkind: translation\nsource_lang: en\ntarget_lang: de\n"
                    "max_source_len: 24\nmax_target_len: 24\nsplits:\n" + "\n".join(splits) + "\n", encoding="utf-8")
    return spec


def test_a_translation_spec_fine_tunes_decodes_scores_and_reports(finished_run, tmp_path):
    workdir, args, _ = finished_run
    copy = tmp_path / "gpt-tiny"
    shutil.copytree(workdir, copy, symlinks=True)
    spec = write_task(tmp_path)
    overrides = (f"finetune.task_specs=[{spec}]", "finetune.tasks=[tiny_en_de]", "finetune.num_workers=1",
                 "finetune.max_steps=4", "finetune.micro_batch_size=8", "finetune.label_smoothing=0.1",
                 "finetune.average_last=2", "finetune.average_every=1", "finetune.decoding.num_beams=2")
    result = pretrain_cli("run", CONFIG, "-o", f"workdir={copy}", *args[3:],
                          *(part for key in overrides for part in ("-o", key)), "--only", "finetune", "--only", "report")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "[finetune] tiny_en_de: 48 train, 6 dev, 6 test pairs as decoder-only; decoding beam 2" in result.stdout

    task_dir = copy / "latest" / "finetune" / "tiny_en_de"
    metrics = json.loads((task_dir / "metrics.json").read_text())
    assert metrics["steps"] == 4 and metrics["train_examples"] == 48 and metrics["test_examples"] == 6
    assert len(list((task_dir / "average").glob("step-*.safetensors"))) == 2  # the last 2 of 4 snapshots
    test = task_dir / "test"
    assert len((test / "hyp.txt").read_text(encoding="utf-8").splitlines()) == 6
    assert (test / "ref.txt").read_text(encoding="utf-8").splitlines()[0] == \
        (tmp_path / "test.de").read_text(encoding="utf-8").splitlines()[0]
    # The written files give the number in metrics.json through sacreBLEU's own command line.
    cli = subprocess.run([sys.executable, "-m", "sacrebleu", str(test / "ref.txt"), "-i", str(test / "hyp.txt"),
                          "-m", "bleu", "-b", "-w", "6"], capture_output=True, text=True, check=True)
    assert float(cli.stdout) == pytest.approx(metrics["test_bleu"], abs=1e-6)
    assert metrics["test_bleu_signature"].startswith("nrefs:1|") and "test_bleu_ci95_low" in metrics
    assert metrics["test_bleu_baseline"] > 0  # the copied source

    report = next((copy / "latest" / "report").glob("report.md")).read_text(encoding="utf-8")
    assert "tiny_en_de" in report and "bleu" in report
