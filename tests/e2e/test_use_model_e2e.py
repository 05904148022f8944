"""Using the model of the finished tiny GPT run (tests/e2e/conftest.py), as a user would:
the run's last lines say where its outputs are, `latest/` points at its folders,
`pretrain generate` writes what transformers' own pipeline writes from the exported hf/
(whose ids stop generation at <|endoftext|>), and README's "Use your model" section runs
as written (its commands and its transformers snippet, on this run)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cli import REPO_ROOT, cli_env, pretrain_cli

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
README_RUN = "runs/demo"  # the run README's examples name
PROMPT = "It was a dark and stormy night"


def stage_dir(workdir: Path, stage: str) -> Path:
    return workdir / stage / json.loads((workdir / "pipeline.json").read_text())["stages"][stage]


def test_the_run_ends_with_where_its_outputs_are(finished_run):
    workdir, _, result = finished_run
    lines = result.stdout.splitlines()
    listed = dict(re.match(r"  (.+?)  +(\S+)", line).groups() for line in lines[lines.index("outputs:") + 1:]
                  if line.startswith("  "))
    assert Path(listed["model"]).resolve() == (stage_dir(workdir, "pretrain") / "model").resolve()
    assert Path(listed["transformers model"]).resolve() == (stage_dir(workdir, "pretrain") / "hf").resolve()
    assert Path(listed["report"]).resolve() == (stage_dir(workdir, "report") / "report.html").resolve()
    for task in ("sst2",):  # the fine-tuned export, where the finetune stage wrote one
        if (stage_dir(workdir, "finetune") / task / "hf").is_dir():
            assert Path(listed[f"{task} fine-tuned (transformers)"]).is_dir()
    assert lines[-1] == f'try it: pretrain generate {workdir} --prompt "{PROMPT}"'
    for stage in ("ingest", "pretrain", "report"):
        assert (workdir / "latest" / stage).resolve() == stage_dir(workdir, stage).resolve()


def test_generate_writes_what_transformers_writes_from_the_export(finished_run):
    workdir, _, _ = finished_run
    result = pretrain_cli("generate", str(workdir), "--prompt", PROMPT, "--max-new-tokens", "20", "--json")
    assert result.returncode == 0, result.stderr
    (record,) = [json.loads(line) for line in result.stdout.splitlines()]
    hf_dir = stage_dir(workdir, "pretrain") / "hf"
    config = json.loads((hf_dir / "config.json").read_text())
    from tokenizers import Tokenizer

    eos = Tokenizer.from_file(str(hf_dir / "tokenizer.json")).token_to_id("<|endoftext|>")
    assert config["eos_token_id"] == config["bos_token_id"] == eos
    assert json.loads((hf_dir / "generation_config.json").read_text())["eos_token_id"] == eos
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import pipeline

    generator = pipeline("text-generation", model=str(hf_dir))
    theirs = generator(PROMPT, max_new_tokens=20, do_sample=False)[0]["generated_text"]
    assert theirs == PROMPT + record["text"]


def readme_section() -> list[tuple[str, str]]:
    """(language, code) of each code block of README's "Use your model" section."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Use your model\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w*)\n(.*?)```", section, flags=re.S)


def test_readme_use_your_model_runs_as_written(finished_run):
    workdir, _, _ = finished_run
    blocks = readme_section()
    commands = [shlex.split(line) for lang, code in blocks if lang == "sh" for line in code.splitlines()
                if line.startswith("pretrain generate")]
    assert len(commands) >= 2
    for command in commands:
        args = [str(workdir) if arg == README_RUN else arg for arg in command[1:]]
        result = pretrain_cli(*args)
        assert result.returncode == 0, (command, result.stderr)
        assert result.stdout.strip(), command
    (snippet,) = [code for lang, code in blocks if lang == "python"]
    result = subprocess.run([sys.executable, "-c", snippet.replace(README_RUN, str(workdir))], cwd=REPO_ROOT,
                            env={**cli_env(), "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(PROMPT)
