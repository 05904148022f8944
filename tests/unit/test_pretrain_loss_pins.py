"""Fixed-seed pretraining losses for every family, variant and objective the shipped
configs train, pinned: a real dataset written by the dataset stage (each objective's
writer), batches from its batch builder, the model built from the shipped config's
pretrain.model section, the objective's loss, three optimizer steps. A refactor of the
models, objectives or data layer must leave every number where it was.

The pins were taken on x86 CPU; they compare to 1e-6 because other CPUs' kernels move
float32 sums by about 1e-8 (tests/support/finetune_pins.py does the same). Rewrite them on
purpose only: `python -m tests.unit.test_pretrain_loss_pins --write`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.config import load_config
from stages.models.build import build_model
from stages.objectives.registry import build_batch_builder, build_objective
from stages.pretrain.run import model_token_ids
from tests.support.tiny_datasets import build, make_corpus, make_fixed_tokenizer, read_split

ROOT = Path(__file__).resolve().parents[2]
PINS = ROOT / "tests" / "pretrain_loss_pins.json"
STEPS, BATCH = 3, 4

# case -> (shipped config whose pretrain.model is built, tokenizer, dataset options, model overrides)
CASES = {
    "gpt": ("gpt-tiny", "unigram", {"objective": "clm", "seq_len": 32}, {}),
    "gpt-llama": ("gpt-tiny", "unigram", {"objective": "clm", "seq_len": 32}, {"variant": "llama"}),
    "bert-nsp-dynamic": ("bert-tiny", "wordpiece",
                         {"objective": "mlm", "seq_len": 32, "mlm": {"sentence_task": "nsp", "masking": "dynamic"}}, {}),
    "albert-sop-static": ("albert-tiny", "wordpiece",
                          {"objective": "mlm", "seq_len": 32, "mlm": {"sentence_task": "sop", "masking": "static"}}, {}),
    "electra-rtd": ("electra-tiny", "wordpiece",
                    {"objective": "mlm", "seq_len": 32, "mlm": {"sentence_task": "none", "masking": "dynamic"}}, {}),
    "spanbert-sbo": ("spanbert-tiny", "wordpiece",
                     {"objective": "mlm", "seq_len": 32,
                      "mlm": {"sentence_task": "none", "masking": "dynamic", "mask_unit": "span"}}, {}),
    "t5-span": ("t5-tiny", "unigram", {"objective": "span", "seq_len": 32}, {}),
    "transformer-span": ("transformer-tiny", "unigram", {"objective": "span", "seq_len": 32}, {}),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    return tiny_corpus(tmp_path_factory.mktemp("loss-pins"))


def tiny_corpus(root: Path) -> dict[str, Path]:
    ingest = make_corpus(root, num_shards=1, docs_per_shard=60)
    return {"root": root, "ingest": ingest, "wordpiece": make_fixed_tokenizer(root, "wordpiece"),
            "unigram": make_fixed_tokenizer(root, "unigram")}


def losses(case: str, corpus: dict[str, Path]) -> list[float]:
    config_name, tokenizer, dataset_options, overrides = CASES[case]
    out = corpus["root"] / f"dataset-{case}"
    if not out.exists():
        build(corpus["ingest"], corpus[tokenizer], out, seed=0, **dataset_options)
    index = json.loads((out / "index.json").read_text())
    section = load_config(ROOT / "configs" / f"{config_name}.yaml").pretrain.model
    section = section.model_copy(update=overrides) if overrides else section
    objective = build_objective(index, section.family, span_boundary=bool(getattr(section, "span_boundary_objective", False)),
                                variant=section.variant)
    rows = read_split(out)
    batch_builder = build_batch_builder(index, seed=0)
    torch.manual_seed(0)
    model = build_model(section.architecture(), vocab_size=index["vocab_size"], max_seq_len=index["seq_len"],
                        **model_token_ids(index))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    seen = []
    for step in range(STEPS):
        ids = np.arange(step * BATCH, (step + 1) * BATCH)
        batch = batch_builder({name: column[ids] for name, column in rows.items()}, ids, epoch=0)
        out_ = objective(model, batch, label_smoothing=0.0)
        optimizer.zero_grad()
        out_.loss.backward()
        optimizer.step()
        seen.append(out_.loss.item())
    return seen


def test_every_case_is_pinned():
    assert sorted(json.loads(PINS.read_text())) == sorted(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_fixed_seed_losses_are_unchanged(case, corpus):
    pinned = [float.fromhex(value) for value in json.loads(PINS.read_text())[case]]
    assert losses(case, corpus) == pytest.approx(pinned, rel=0, abs=1e-6)


if __name__ == "__main__" and sys.argv[1] in ("--write", "--print"):
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        data = tiny_corpus(Path(scratch))
        found = {case: [value.hex() for value in losses(case, data)] for case in CASES}
    text = json.dumps(found, indent=1) + "\n"
    PINS.write_text(text) if sys.argv[1] == "--write" else print(text)
