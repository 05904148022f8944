"""pretrain.samples without Ray: the config section, the driver's plan (prompts tokenized
and checked against the context), the sampler on tiny GPT, BERT and T5 models (its own
random numbers, text cut at the end of text, a resumed run's lines dropped), the wandb
table, and the report's and the dashboard's per-step tables (escaped). The sampler inside
a real training run: tests/integration/test_pretrain.py (ZeRO-2, resumed),
tests/integration/test_pretrain_objectives.py (BERT; T5 under ZeRO-3) and the e2e run of
configs/gpt-tiny.yaml (tests/e2e/test_pipeline_e2e.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError

from stages.models import load_pretrained
from stages.models.generation import generate
from stages.pretrain.config import PretrainConfig
from stages.pretrain.sample_plan import plan_samples
from stages.pretrain.samples import SAMPLES_FILE, Sampler
from stages.report.samples import MAX_STEPS_SHOWN, read_samples, samples_html, samples_markdown
from stages.tracking import open_tracker
from tests.support.dashboard_server import get, serve  # noqa: F401 - serve is a fixture
from tests.support.pretrained_dirs import write_pretrained
from tests.support.synthetic_run import write_run
from tests.support.wandb_offline import offline_log

SMALL = {"num_layers": 1, "hidden_size": 32, "num_heads": 2}
CONTEXT = 48


@pytest.fixture(scope="module")
def gpt_dir(tmp_path_factory) -> Path:
    return write_pretrained(tmp_path_factory.mktemp("gpt"), "gpt", SMALL, vocab_size=512, max_seq_len=CONTEXT)


def gpt_sampler(gpt_dir: Path, log_dir: Path, **samples) -> Sampler:
    cfg = PretrainConfig(model={"family": "gpt"}, samples={"max_new_tokens": 10, **samples})
    tokenizer_path = gpt_dir / "model" / "tokenizer.json"
    plan = plan_samples(cfg, tokenizer_path, log_dir, {"seq_len": CONTEXT, "eos_id": None}, seed=0)
    return Sampler(plan, cfg.samples, tokenizer_path, torch.device("cpu"), log_dir / SAMPLES_FILE)


def test_the_section_is_off_by_default_and_then_stays_out_of_the_fingerprint():
    assert "samples" not in PretrainConfig().model_dump(mode="json")  # fingerprints as before the section
    on = PretrainConfig(samples={"prompts": ["Once"], "every": 5}).model_dump(mode="json")
    assert on["samples"]["prompts"] == ["Once"] and on["samples"]["every"] == 5
    with pytest.raises(ValidationError, match="promts"):
        PretrainConfig(samples={"promts": ["Once"]})
    with pytest.raises(ValidationError, match="num_dev_sources applies to family t5 only"):
        PretrainConfig(samples={"num_dev_sources": 2})
    with pytest.raises(ValidationError, match="top_p"):
        PretrainConfig(samples={"prompts": ["Once"], "top_p": 0})


def test_a_prompt_too_long_for_the_context_is_refused_naming_it(gpt_dir, tmp_path):
    with pytest.raises(ValueError, match=r"pretrain.samples.prompts\[1\] is \d+ tokens \+ max_new_tokens 40"):
        gpt_sampler(gpt_dir, tmp_path, prompts=["Once", "The old man said " * 3], max_new_tokens=40)


def test_samples_are_steps_own_draws_and_leave_the_training_random_state_alone(gpt_dir, tmp_path):
    sampler = gpt_sampler(gpt_dir, tmp_path, prompts=["The old man", ""])
    model = load_pretrained(gpt_dir / "model").eval()
    cpu_state = torch.get_rng_state()
    first = sampler.draw(model, step=10, tokens_seen=640)
    assert torch.equal(torch.get_rng_state(), cpu_state)  # dropout and data order draw as without samples
    assert [(r["step"], r["tokens_seen"], r["prompt"], r["origin"]) for r in first] == [
        (10, 640, "The old man", "prompt"), (10, 640, "", "prompt")]
    assert first[0]["settings"] == {"max_new_tokens": 10, "temperature": 0.8, "top_k": 50, "top_p": 1.0,
                                    "seed": 1234}
    assert all(r["text"] for r in first)
    # The same random numbers at every step: the same model writes the same text.
    again = sampler.draw(model, step=20, tokens_seen=1280)
    assert [r["text"] for r in again] == [r["text"] for r in first]
    other_seed = gpt_sampler(gpt_dir, tmp_path, prompts=["The old man", ""], seed=7).draw(model, 10, 640)
    assert [r["text"] for r in other_seed] != [r["text"] for r in first]
    # A prompt's own draws: its text does not depend on the prompts before it.
    alone = gpt_sampler(gpt_dir, tmp_path, prompts=[""]).draw(model, 10, 640)
    assert alone[0]["text"] == first[1]["text"]



def test_the_text_ends_at_the_end_of_text(gpt_dir, tmp_path):
    """Greedy, so the tokens are known; then the third new token is taken as the end of
    text: the sample holds the two before it."""
    sampler = gpt_sampler(gpt_dir, tmp_path, prompts=["The old man"], temperature=0)
    model = load_pretrained(gpt_dir / "model").eval()
    prompt = torch.tensor([sampler.plan.inputs[0].ids])
    new = generate(model, prompt, 10)[0, prompt.size(1):].tolist()
    assert sampler.draw(model, 1, 0)[0]["text"] == sampler.tokenizer.decode(new)
    end = new[2]
    sampler.plan = dataclasses.replace(sampler.plan, end_id=end)
    assert sampler.draw(model, 1, 0)[0]["text"] == sampler.tokenizer.decode(new[:new.index(end)])

def test_a_resumed_run_drops_the_lines_after_its_checkpoint(gpt_dir, tmp_path):
    sampler = gpt_sampler(gpt_dir, tmp_path, prompts=["The old man", ""])
    model = load_pretrained(gpt_dir / "model").eval()
    for step in (10, 20, 30):
        sampler.write(sampler.draw(model, step, step * 64))
    sampler.resume(20)  # the checkpoint of step 20: step 30 is trained and sampled again
    lines = [json.loads(line) for line in (tmp_path / SAMPLES_FILE).read_text().splitlines()]
    assert [line["step"] for line in lines] == [10, 10, 20, 20]


def test_the_steps_sampled_are_every_snapshot_and_the_last():
    sampler = SimpleNamespace(settings=PretrainConfig(samples={"prompts": ["x"], "every": 4}).samples)
    cfg = PretrainConfig(max_steps=13, snapshot_every=6, eval_every=5)
    assert [s for s in range(1, 14) if Sampler.due(sampler, s, cfg)] == [4, 6, 8, 12, 13]
    sampler.settings = PretrainConfig(samples={"prompts": ["x"]}).samples  # every: unset = eval_every
    assert [s for s in range(1, 14) if Sampler.due(sampler, s, cfg)] == [5, 6, 10, 12, 13]


def test_bert_fills_in_each_mask_with_its_likeliest_tokens(tmp_path):
    root = write_pretrained(tmp_path, "bert", SMALL, vocab_size=512, max_seq_len=CONTEXT, weight_scale=3.0)
    tokenizer_path = root / "model" / "tokenizer.json"
    cfg = PretrainConfig(model={"family": "bert"}, samples={"prompts": ["The old [MASK] said [MASK]."]})
    with pytest.raises(ValueError, match=r"prompts\[0\] 'No mask' has no \[MASK\]"):
        plan_samples(PretrainConfig(model={"family": "bert"}, samples={"prompts": ["No mask"]}),
                     tokenizer_path, tmp_path, {"seq_len": CONTEXT}, seed=0)
    plan = plan_samples(cfg, tokenizer_path, tmp_path, {"seq_len": CONTEXT}, seed=0)
    sampler = Sampler(plan, cfg.samples, tokenizer_path, torch.device("cpu"), tmp_path / SAMPLES_FILE)
    model = load_pretrained(root / "model").eval()
    (row,) = sampler.draw(model, 5, 320)
    ids = list(plan.inputs[0].ids)
    positions = [i for i, token in enumerate(ids) if token == plan.mask_id]
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0][0]  # (T, V): the MLM head at every position
    best = logits[positions].argmax(dim=-1).tolist()
    assert [[c["token"] for c in mask][0] for mask in row["candidates"]] == [
        sampler.tokenizer.decode([i]).strip() for i in best]
    assert all(len(mask) == 5 for mask in row["candidates"])
    filled = ids[:]
    for position, token in zip(positions, best):
        filled[position] = token
    assert row["text"] == sampler.tokenizer.decode(filled, skip_special_tokens=True)
    assert row["settings"] == {"candidates": 5}


def test_t5_decodes_a_prompt_as_a_source(tmp_path):
    root = write_pretrained(tmp_path, "t5", SMALL, vocab_size=512, max_seq_len=CONTEXT, weight_scale=3.0)
    tokenizer_path = root / "model" / "tokenizer.json"
    cfg = PretrainConfig(model={"family": "t5"}, samples={"prompts": ["The old <extra_id_0> said."],
                                                          "temperature": 0, "max_new_tokens": 8})
    model = load_pretrained(root / "model").eval()
    index = {"seq_len": CONTEXT, "pad_id": model.config.pad_token_id, "eos_id": model.config.eos_token_id}
    plan = plan_samples(cfg, tokenizer_path, tmp_path, index, seed=0)
    assert plan.inputs[0].ids[-1] == model.config.eos_token_id  # a source as the dataset writes it
    sampler = Sampler(plan, cfg.samples, tokenizer_path, torch.device("cpu"), tmp_path / SAMPLES_FILE)
    (row,) = sampler.draw(model, 5, 320)
    from stages.models.generation import generate_seq2seq

    output = generate_seq2seq(model, torch.tensor([plan.inputs[0].ids]), None, 8,
                              eos_token_id=model.config.eos_token_id)[0, 1:].tolist()
    output = [i for i in output if i not in (model.config.eos_token_id, model.config.pad_token_id)]
    assert row["text"] == sampler.tokenizer.decode(output, skip_special_tokens=False)
    assert "<extra_id_" in row["text"]  # sentinels stay: they say which span the text fills


def test_the_samples_reach_wandb_as_a_table(gpt_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    wandb = SimpleNamespace(mode="offline", project="pp-tests", entity=None)
    experiment = SimpleNamespace(name="samples", tracking=SimpleNamespace(wandb=wandb))
    tracker = open_tracker(experiment=experiment, stage="pretrain", fingerprint="samples0123", output_dir=tmp_path)
    sampler = gpt_sampler(gpt_dir, tmp_path, prompts=["The old man"])
    model = load_pretrained(gpt_dir / "model").eval()
    tracker.log({"loss": 1.0}, step=10)
    sampler.write(sampler.draw(model, 10, 640), tracker, step=10)
    tracker.finish()
    assert b"samples" in offline_log(tmp_path, [b"samples", b"table-file"])
    (table_file,) = (tmp_path / "wandb").glob("offline-run-*/files/media/table/samples_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["step", "tokens_seen", "prompt", "text", "reference"]
    assert table["data"][0][:3] == [10, 640, "The old man"]


def write_lines(directory: Path, lines: list[dict]) -> None:
    with open(directory / SAMPLES_FILE, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
        f.write('{"step": 99, "text": "torn')  # a run killed mid-write


def test_the_report_shows_a_few_steps_and_escapes_what_the_model_wrote(tmp_path):
    steps = list(range(10, 10 * (MAX_STEPS_SHOWN + 3), 10))
    write_lines(tmp_path, [{"step": s, "tokens_seen": s * 1000, "prompt": "Once | upon",
                            "text": f"<script>alert({s})</script>\nnext line", "settings": {"seed": 1}}
                           for s in steps])
    samples = read_samples(tmp_path)
    shown = [s["step"] for s in samples["steps"]]
    assert samples["num_steps"] == len(steps) and len(shown) == MAX_STEPS_SHOWN
    assert shown[0] == steps[0] and shown[-1] == steps[-1] and shown == sorted(shown)
    html = samples_html({"samples": samples})
    assert "<script>" not in html and "&lt;script&gt;alert(10)&lt;/script&gt;" in html
    assert "Step 10 (10,000 tokens)" in html and "table class=\"samples\"" in html
    markdown = "\n".join(samples_markdown({"samples": samples}))
    assert "<script>" not in markdown and "| Once \\| upon | &lt;script&gt;alert(10)&lt;/script&gt; next line |" \
        in markdown
    assert read_samples(tmp_path / "nothing") is None
    assert "No samples" in samples_html({"samples": None})


def test_the_report_lists_bert_candidates_and_t5_references(tmp_path):
    write_lines(tmp_path, [
        {"step": 4, "tokens_seen": 64, "prompt": "a [MASK]", "text": "a cat",
         "candidates": [[{"token": "cat", "probability": 0.5}, {"token": "dog", "probability": 0.25}]]},
        {"step": 4, "tokens_seen": 64, "prompt": "<extra_id_0> sat", "text": "<extra_id_0> he",
         "reference": "<extra_id_0> she", "origin": "validation"}])
    html = samples_html({"samples": read_samples(tmp_path)})
    assert "<th>reference</th>" in html and "<th>candidates</th>" in html
    assert "cat 0.50, dog 0.25" in html and "&lt;extra_id_0&gt; she" in html


def test_the_dashboard_shows_the_samples_of_a_run_in_progress(tmp_path, serve):
    workdir = write_run(tmp_path / "live", stop_before="finetune")
    (manifest,) = workdir.glob("pretrain/*/manifest.json")
    manifest.unlink()  # pretrain is still training
    line = {"tokens_seen": 1000, "prompt": "The old man", "settings": {"seed": 1}}
    write_lines(manifest.parent, [{**line, "step": 20, "text": "said <nothing>"}])
    url = serve(workdir)
    html = get(url + "/")[2]
    assert "Step 20 (1,000 tokens)" in html and "said &lt;nothing&gt;" in html and "Step 40" not in html
    with open(manifest.parent / SAMPLES_FILE, "a", encoding="utf-8") as f:  # the next sampled step
        f.write("\n" + json.dumps({**line, "step": 40, "text": "said hello"}) + "\n")
    html, markdown = get(url + "/")[2], get(url + "/report.md")[2]
    assert "Step 20" in html and "Step 40" in html and "said hello" in html
    assert "| The old man | said hello |" in markdown
