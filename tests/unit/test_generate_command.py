"""`pretrain generate RUN_DIR` on runs written by hand (tests/support/synthetic_run.py) holding real
model folders (tests/support/pretrained_dirs.py, random weights scaled up so that predictions are
peaked): each family's output is what the model code gives for the same input, a sample
is repeatable per prompt, and every mistake is one `error:` line with exit code 2 before
any output. No Ray."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from cluster.cli import main
from stages.models import load_pretrained, save_pretrained
from stages.models.generation import generate, generate_seq2seq
from tests.support.pretrained_dirs import write_pretrained
from tests.support.synthetic_run import write_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

ARCHITECTURES = {"gpt": {"num_layers": 1, "hidden_size": 32, "num_heads": 2},
                 "bert": {"num_layers": 1, "hidden_size": 32, "num_heads": 2},
                 "t5": {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "ff_size": 64}}
CONTEXT = 32


def model_run(root: Path, family: str, **run_options) -> Path:
    """A finished synthetic run whose pretrain stage holds a real `family` model/."""
    run = write_run(root / family, name=family, **run_options)
    models = write_pretrained(root / f"{family}-weights", family, ARCHITECTURES[family], vocab_size=512,
                              max_seq_len=None if family == "t5" else CONTEXT, weight_scale=3.0)
    pretrain = run / "pretrain" / fingerprint(run, "pretrain")
    pretrain.mkdir(parents=True, exist_ok=True)
    shutil.copytree(models / "model", pretrain / "model")
    return run


def fingerprint(run: Path, stage: str) -> str:
    return json.loads((run / "pipeline.json").read_text())["stages"][stage]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("generate")
    return {family: model_run(root, family) for family in ARCHITECTURES}


def generate_cli(capsys, run: Path, *args: str) -> tuple[int, str, str]:
    code = main(["generate", str(run), *args, "--device", "cpu"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def loaded(run: Path, folder: str = "model"):
    directory = run / "pretrain" / fingerprint(run, "pretrain") / folder
    return load_pretrained(directory).eval(), Tokenizer.from_file(str(directory / "tokenizer.json"))


def test_gpt_greedy_streams_what_the_model_generates(runs, capsys):
    model, tokenizer = loaded(runs["gpt"])
    eos = tokenizer.token_to_id("<|endoftext|>")
    prompt = "The old house"
    ids = tokenizer.encode(prompt).ids
    expected = generate(model, torch.tensor([ids]), 12, eos_token_id=eos)[0, len(ids):].tolist()
    expected = expected[:expected.index(eos)] if eos in expected else expected
    code, out, err = generate_cli(capsys, runs["gpt"], "--prompt", prompt, "--max-new-tokens", "12", "--json")
    assert code == 0, err
    (record,) = records(out)
    assert record["text"] == tokenizer.decode(expected) and record["prompt_tokens"] == len(ids)
    assert record["new_tokens"] in (len(expected), len(expected) + 1)
    # Streamed, the same text follows the prompt.
    code, streamed, err = generate_cli(capsys, runs["gpt"], "--prompt", prompt, "--max-new-tokens", "12")
    assert code == 0 and streamed == prompt + record["text"] + "\n"
    assert err.startswith("[generate] ") and "GPT" in err and "greedy" in err


def test_gpt_sampling_is_repeatable_per_prompt_and_seed(runs, capsys):
    sample = ("--temperature", "1.0", "--top-p", "0.95", "--max-new-tokens", "10", "--json")
    _, alone, _ = generate_cli(capsys, runs["gpt"], "--prompt", "It was", "--seed", "7", *sample)
    _, together, _ = generate_cli(capsys, runs["gpt"], "--prompt", "Another one", "--prompt", "It was",
                                  "--seed", "7", *sample)
    _, other_seed, _ = generate_cli(capsys, runs["gpt"], "--prompt", "It was", "--seed", "8", *sample)
    assert records(alone)[0]["text"] == records(together)[1]["text"]
    assert records(alone)[0]["text"] != records(other_seed)[0]["text"]
    code, out, _ = generate_cli(capsys, runs["gpt"], "--prompt", "It was", "--num-beams", "3",
                                "--max-new-tokens", "5", "--json")
    assert code == 0 and records(out)[0]["new_tokens"] <= 5


def test_prompts_come_from_a_file_and_an_empty_prompt_starts_a_document(runs, capsys, tmp_path):
    (tmp_path / "prompts.txt").write_text("The old house\n\n\nIt was\n", encoding="utf-8")
    code, out, _ = generate_cli(capsys, runs["gpt"], "--prompt", "", "--file", str(tmp_path / "prompts.txt"),
                                "--max-new-tokens", "4", "--json")
    assert code == 0
    assert [r["prompt"] for r in records(out)] == ["", "The old house", "It was"]  # blank lines skipped
    assert records(out)[0]["prompt_tokens"] == 1  # <|endoftext|>


def test_a_prompt_longer_than_the_context_is_refused_or_cut_from_the_left(runs, capsys):
    long_prompt = " ".join(["the old house on the hill"] * 8)
    code, out, err = generate_cli(capsys, runs["gpt"], "--prompt", "fine", "--prompt", long_prompt)
    assert code == 2 and out == ""  # refused before any prompt was decoded
    (line,) = err.strip().splitlines()[1:]  # after the [generate] line
    assert line.startswith("error: prompt 2 is ") and f"more than the model's context of {CONTEXT} tokens" in line
    assert "it was not cut" in line and "--cut-left" in line
    code, out, err = generate_cli(capsys, runs["gpt"], "--prompt", long_prompt, "--cut-left",
                                  "--max-new-tokens", "6", "--json")
    assert code == 0, err
    (record,) = records(out)
    assert "warning: prompt 1 was cut from the left" in err
    assert record["prompt_tokens"] - record["cut_tokens"] == CONTEXT - 6 and record["cut_tokens"] > 0
    model, tokenizer = loaded(runs["gpt"])  # what is left is the prompt's end
    kept = tokenizer.encode(long_prompt).ids[-(CONTEXT - 6):]
    expected = generate(model, torch.tensor([kept]), 6)[0, len(kept):].tolist()
    eos = tokenizer.token_to_id("<|endoftext|>")
    assert record["text"] == tokenizer.decode(expected[:expected.index(eos)] if eos in expected else expected)
    code, _, err = generate_cli(capsys, runs["gpt"], "--prompt", "x", "--max-new-tokens", str(CONTEXT))
    assert code == 2 and f"give --max-new-tokens {CONTEXT - 1} or fewer" in err


def test_t5_continues_a_prompt_through_the_first_sentinel_span(runs, capsys):
    model, tokenizer = loaded(runs["t5"])
    sentinel, eos = tokenizer.token_to_id("<extra_id_0>"), model.config.eos_token_id
    prompt = "It was a dark and"
    ids = tokenizer.encode(prompt).ids
    ids = ids[:-1] + [sentinel, eos]
    target = generate_seq2seq(model, torch.tensor([ids]), None, 10, eos_token_id=eos)[0, 1:].tolist()
    stops = {eos, tokenizer.token_to_id("<extra_id_1>")}
    if target and target[0] == sentinel:
        target = target[1:]
    cut = next((i for i, t in enumerate(target) if t in stops), len(target))
    code, out, err = generate_cli(capsys, runs["t5"], "--prompt", prompt, "--max-new-tokens", "10", "--json")
    assert code == 0, err
    (record,) = records(out)
    assert record["source"] == prompt + " <extra_id_0>"
    assert record["text"] == tokenizer.decode(target[:cut])
    # A prompt with its own sentinels gets the raw target, sentinels included.
    code, out, _ = generate_cli(capsys, runs["t5"], "--prompt", "It was a <extra_id_0> night", "--json",
                                "--max-new-tokens", "6")
    assert code == 0 and "source" not in records(out)[0]
    code, out, _ = generate_cli(capsys, runs["t5"], "--prompt", prompt, "--num-beams", "3", "--json",
                                "--max-new-tokens", "6", "--dtype", "bfloat16")
    assert code == 0 and records(out)[0]["new_tokens"] <= 6


def test_bert_fills_each_mask_with_its_most_likely_tokens(runs, capsys):
    model, tokenizer = loaded(runs["bert"])
    prompt = "It was a dark and [MASK] night."
    encoding = tokenizer.encode(prompt)
    position = encoding.ids.index(tokenizer.token_to_id("[MASK]"))
    with torch.no_grad():
        hidden, _ = model.backbone(torch.tensor([encoding.ids]), None, torch.tensor([encoding.type_ids]))
        probabilities = model.mlm_logits(hidden[0, position]).softmax(-1)
    top = probabilities.topk(3)
    code, out, err = generate_cli(capsys, runs["bert"], "--prompt", prompt, "--top-k", "3", "--json")
    assert code == 0, err
    (record,) = records(out)
    (candidates,) = record["masks"]
    assert [c["id"] for c in candidates] == top.indices.tolist()
    assert [c["probability"] for c in candidates] == pytest.approx(top.values.tolist(), abs=1e-6)
    assert "top 3 tokens per mask" in err
    code, out, _ = generate_cli(capsys, runs["bert"], "--prompt", prompt)
    assert code == 0 and out.splitlines()[1].startswith("  mask 1: ")
    code, out, err = generate_cli(capsys, runs["bert"], "--prompt", "no mask here")
    assert code == 2 and out == "" and "error: prompt 1 has no [MASK]" in err


def test_a_snapshot_by_step_and_an_unknown_one(runs, capsys):
    run = runs["gpt"]
    pretrain = run / "pretrain" / fingerprint(run, "pretrain")
    for step in (10, 20):
        shutil.copytree(pretrain / "model", pretrain / "snapshots" / f"step-{step:07d}", dirs_exist_ok=True)
    (pretrain / "snapshots" / "index.json").write_text(json.dumps(
        [{"step": s, "tokens": s * 100, "path": f"snapshots/step-{s:07d}"} for s in (10, 20)]))
    code, out, err = generate_cli(capsys, run, "--snapshot", "20", "--prompt", "It", "--max-new-tokens", "3")
    assert code == 0 and "snapshots/step-0000020" in err
    code, out, err = generate_cli(capsys, run, "--snapshot", "15", "--prompt", "It")
    assert (code, out) == (2, "")
    assert err.strip() == (f"error: --snapshot 15: no snapshot at that step in {pretrain / 'snapshots'}; "
                           "available steps: 10, 20")


@pytest.mark.parametrize("problem, expected", [
    ({"stop_before": "pretrain"}, "not finished (not run: no manifest.json in"),
    ({"fail": "pretrain"}, "not finished (failed: RuntimeError"),
])
def test_a_stage_that_is_not_finished_is_one_error_line(tmp_path, capsys, problem, expected):
    run = write_run(tmp_path / "run", **problem)
    code, out, err = generate_cli(capsys, run, "--prompt", "x")
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith("error: stage pretrain of ") and expected in line and "pretrain status" in line


@pytest.mark.parametrize("flags, expected", [
    (("--temperature", "0", "--top-k", "5"), "--temperature 0 is greedy decoding"),
    (("--num-beams", "2", "--temperature", "0.8"), "--num-beams 2 is beam search"),
    (("--top-p", "1.5"), "--top-p 1.5: give a probability in (0, 1]"),
    (("--dtype", "float16"), "--dtype float16: half precision is for GPUs"),
    (("--task", "sst2", "--snapshot", "5"), "--snapshot STEP picks a pretraining snapshot"),
    (("--stage", "finetune"), "--stage finetune holds one model per task: add --task TASK (no task has finished)"),
])
def test_contradicting_flags_are_usage_errors(runs, capsys, flags, expected):
    code, out, err = generate_cli(capsys, runs["gpt"], "--prompt", "x", *flags)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1].startswith("error: ") and expected in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_a_usage_error(runs, capsys):
    code = main(["generate", str(runs["gpt"]), "--prompt", "x", "--device", "cuda"])
    assert code == 2
    assert capsys.readouterr().err.strip().endswith("sees no CUDA GPU; use --device cpu")


def test_no_prompt_or_no_run_is_a_usage_error(runs, capsys, tmp_path):
    code, _, err = generate_cli(capsys, runs["gpt"])
    assert code == 2 and err.strip() == ("error: no prompt: give --prompt TEXT (repeatable) or --file PATH "
                                         "(one prompt a line)")
    code, _, err = generate_cli(capsys, tmp_path, "--prompt", "x")
    assert code == 2 and err.startswith(f"error: {tmp_path} is not a run directory")


def task_run(root: Path, family: str, task: str) -> Path:
    """A run whose finetune stage finished `task` on the pretrained model, saved as the
    stage saves it (backbone + head_config.json + tokenizer)."""
    run = model_run(root, family)
    model_dir = run / "pretrain" / fingerprint(run, "pretrain") / "model"
    task_dir = run / "finetune" / fingerprint(run, "finetune") / task
    save_pretrained(load_pretrained(model_dir), task_dir / "model")
    shutil.copy(model_dir / "tokenizer.json", task_dir / "model" / "tokenizer.json")
    (task_dir / "model" / "head_config.json").write_text(json.dumps(
        {"head": "sequence_classification", "task": task, "num_labels": 2, "labels": None}))
    (task_dir / "metrics.json").write_text("{}")
    return run


def test_a_t5_fine_tuned_task_reads_its_format_and_decodes_its_target_length(tmp_path, capsys):
    run = task_run(tmp_path, "t5", "sst2")
    code, out, err = generate_cli(capsys, run, "--task", "sst2", "--prompt", "a gripping film", "--json")
    assert code == 0, err
    (record,) = records(out)
    assert record["source"] == "sst2 sentence: a gripping film"
    assert record["new_tokens"] <= 8  # GLUE's target length (label words)
    assert "fine-tuned on sst2" in err
    code, _, err = generate_cli(capsys, run, "--task", "rte", "--prompt", "x")
    assert code == 2 and "error: --task rte: no finished fine-tuning task of that name" in err
    assert err.rstrip().endswith("finished tasks: sst2")


def test_a_classifier_task_does_not_generate(tmp_path, capsys):
    run = task_run(tmp_path, "gpt", "sst2")
    code, out, err = generate_cli(capsys, run, "--task", "sst2", "--prompt", "a gripping film")
    assert (code, out) == (2, "")
    assert "labels its input rather than writing text" in err and "sst2/hf" in err


def test_the_command_checks_the_run_before_importing_torch(tmp_path):
    code = ("import sys\nfrom cluster.cli import main\n"
            f"assert main(['generate', {str(tmp_path)!r}, '--prompt', 'x']) == 2\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert "is not a run directory" in result.stderr


def test_version_names_the_package_and_the_commit(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    from importlib.metadata import version

    assert out.startswith(f"pretrain {version('pretrain-pipeline')}")
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2]).stdout.strip()
    if head:  # a checkout
        assert f"(git {head}" in out


def test_streamed_text_never_shows_half_a_character(runs):
    """Byte-level BPE splits a character the vocabulary lacks into byte tokens: the stream
    holds the first bytes back until the character is whole."""
    from stages.generate.text_stream import TextStream

    _, tokenizer = loaded(runs["gpt"])
    text = "déjà vu, naïve café ☕"
    ids = tokenizer.encode(text).ids
    assert len(ids) > len(text.split())  # some characters take several tokens
    stream = TextStream(tokenizer)
    pieces = [stream.push(token_id) for token_id in ids] + [stream.finish()]
    assert "".join(pieces) == tokenizer.decode(ids) == text
    assert not any("\ufffd" in piece for piece in pieces)
