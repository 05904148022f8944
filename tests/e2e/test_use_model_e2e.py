"""Using the model of the finished tiny GPT run (tests/e2e/conftest.py), as a user would:
the run's last lines say where its outputs are, `latest/` points at its folders, the
exported hf/ carries the end-of-text id, and README's "Use your model" section runs as
written on this run: its commands, and its transformers snippet, which writes what
`pretrain generate` writes."""

from __future__ import annotations

import json
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
    # transformers' pipeline on hf/ (through latest/) writes what `pretrain generate` writes
    assert f'generator("{PROMPT}", max_new_tokens=30, do_sample=False)' in snippet
    ours = pretrain_cli("generate", str(workdir), "--prompt", PROMPT, "--max-new-tokens", "30", "--json")
    assert ours.returncode == 0, ours.stderr
    assert result.stdout == PROMPT + json.loads(ours.stdout)["text"] + "\n"


def test_the_export_carries_the_end_of_text_id(finished_run):
    workdir, _, _ = finished_run
    hf_dir = stage_dir(workdir, "pretrain") / "hf"
    eos = json.loads((hf_dir / "tokenizer.json").read_text())["added_tokens"][0]
    assert eos["content"] == "<|endoftext|>"
    config = json.loads((hf_dir / "config.json").read_text())
    assert config["eos_token_id"] == config["bos_token_id"] == eos["id"]
    generation = json.loads((hf_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == eos["id"] and generation["max_length"] == config["n_positions"]
