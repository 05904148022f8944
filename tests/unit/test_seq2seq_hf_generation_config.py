"""A translation task's transformers folder (stages/finetune/hf_export.py) decodes as the
stage does: its generation_config.json carries finetune.decoding's beams, length penalty
and early stopping, so that transformers' `generate` with no arguments of its own gives
the tokens of our beam search on the same weights. No Ray: the task's model/ is written
by save_finetuned from random, perturbed weights (tests/unit/test_finetune_hf_export.py)."""

from __future__ import annotations

import json
import os

import torch

from stages.finetune.config import FinetuneConfig
from stages.finetune.hf_export import HF_DIR, HF_EXPORT_KEY, export_task_hf
from stages.finetune.tasks import get_task
from stages.models.generation import generate_seq2seq
from tests.support.pinned import import_pinned
from tests.unit.test_finetune_hf_export import finetuned_task

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = import_pinned("transformers")

TASK = "multi30k_en_de"
SOURCES = ["A man in an orange hat starring at something.", "Two dogs run.",
           "A group of people stand in front of an igloo while children play in the snow."]


def up_to_eos(ids: torch.Tensor, eos: int) -> list[list[int]]:
    """Rows without the start token, up to and including the first </s> (finished rows are
    padded differently: ours with <pad>, transformers with </s>)."""
    return [row[:row.index(eos) + 1] if eos in row else row for row in ids[:, 1:].tolist()]


def test_beam_settings_reach_generation_config_and_transformers_decodes_as_we_do(tmp_path):
    task_dir, model = finetuned_task(tmp_path, "t5", TASK)
    cfg = FinetuneConfig(decoding={"num_beams": 4, "length_penalty": 0.6})
    assert export_task_hf(task_dir, get_task(TASK), cfg) == {HF_EXPORT_KEY: HF_DIR}
    hf_dir = task_dir / HF_DIR
    generation = json.loads((hf_dir / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["length_penalty"], generation["early_stopping"]) == (4, 0.6, True)
    assert generation["max_new_tokens"] == model.max_target_len

    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    batch = tokenizer([get_task(TASK).prefix + source for source in SOURCES], padding=True, return_tensors="pt")
    t5 = model.backbone.eval()
    eos = t5.config.eos_token_id
    with torch.no_grad():
        theirs = up_to_eos(hf_model.generate(**batch), eos)  # the folder's settings only
    ours = up_to_eos(generate_seq2seq(t5, batch["input_ids"], batch["attention_mask"], model.max_target_len,
                                      num_beams=4, length_penalty=0.6, eos_token_id=eos), eos)
    assert ours == theirs
    greedy = up_to_eos(generate_seq2seq(t5, batch["input_ids"], batch["attention_mask"], model.max_target_len,
                                        eos_token_id=eos), eos)
    assert greedy != ours  # here beam search changes the output: a greedy export would not pass


def test_greedy_decoding_exports_greedy(tmp_path):
    task_dir, _ = finetuned_task(tmp_path, "t5", TASK)
    export_task_hf(task_dir, get_task(TASK), FinetuneConfig(decoding={"num_beams": 1}))
    generation = json.loads((task_dir / HF_DIR / "generation_config.json").read_text())
    assert generation["num_beams"] == 1 and "length_penalty" not in generation
