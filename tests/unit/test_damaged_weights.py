"""A weights file that does not parse (truncated, overwritten) raises an error naming it,
in every reader of model folders: ours (load_pretrained), Hugging Face folders
(import_hf) and fine-tuned task heads (load_finetuned)."""

from __future__ import annotations

import json

import pytest

from stages.finetune.saved_model import HEAD_WEIGHTS_NAME, load_finetuned, save_finetuned
from stages.finetune.model_source import build_task_model
from stages.models import GPT, GPTConfig, load_pretrained, save_pretrained
from stages.models.hf_export import export_hf, import_hf
from stages.models.weights_file import DamagedWeightsError

CONFIG = GPTConfig(vocab_size=99, max_seq_len=32, num_layers=1, hidden_size=16, num_heads=2)


def truncate(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_a_truncated_pretrained_model_names_the_file(tmp_path):
    save_pretrained(GPT(CONFIG), tmp_path / "model")
    weights = tmp_path / "model" / "model.safetensors"
    truncate(weights)
    with pytest.raises(DamagedWeightsError, match=rf"{weights}: not a readable safetensors file "
                       r"\(SafetensorError: .*--force STAGE.*pretrain verify"):
        load_pretrained(tmp_path / "model")


def test_weights_of_another_model_name_the_file(tmp_path):
    save_pretrained(GPT(CONFIG), tmp_path / "model")
    config_path = tmp_path / "model" / "model_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "num_layers": 2}))
    with pytest.raises(DamagedWeightsError, match=r"model\.safetensors: the weights do not fit"):
        load_pretrained(tmp_path / "model")


def test_a_truncated_hugging_face_folder_names_the_file(tmp_path):
    export_hf(GPT(CONFIG), tmp_path / "hf")
    weights = tmp_path / "hf" / "model.safetensors"
    weights.write_bytes(b"\xff" * 8 + weights.read_bytes()[8:])  # a garbled header length
    with pytest.raises(DamagedWeightsError, match=rf"{weights}: not a readable safetensors file"):
        import_hf(tmp_path / "hf")


def test_a_truncated_task_head_names_the_file(tmp_path):
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    head_config = {"head": "sequence_classification", "num_labels": 2}
    model = build_task_model(head_config, GPT(CONFIG))
    save_finetuned(model, tmp_path / "task", head_config=head_config, tokenizer_path=tokenizer)
    truncate(tmp_path / "task" / HEAD_WEIGHTS_NAME)
    with pytest.raises(DamagedWeightsError, match=rf"{HEAD_WEIGHTS_NAME}: not a readable"):
        load_finetuned(tmp_path / "task")
