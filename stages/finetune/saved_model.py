"""A fine-tuned model on disk, self-contained: what `<task>/model/` holds and how to load it.

    model.safetensors, model_config.json   the backbone, in the pretrained format
                                           (`stages.models.load_pretrained` reads it);
                                           BERT backbones as a Hugging Face folder
                                           (config.json + model.safetensors)
    head.safetensors                       the task head's own weights
    head_config.json                       task, num_labels, labels (what outputs mean)
    tokenizer.json                         the tokenizer the model was trained with

    model, head_config = load_finetuned("runs/demo/finetune/<fp>/sst2/model")
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch.nn as nn
from safetensors.torch import save_file

from stages.finetune.families.registry import family_for
from stages.finetune.model_source import build_task_model
from stages.finetune.tasks import get_task
from stages.models import Bert, load_pretrained, save_pretrained
from stages.models.build import CONFIG_NAME
from stages.models.hf_export import export_hf, import_hf
from stages.models.weights_file import read_weights

HEAD_WEIGHTS_NAME = "head.safetensors"
HEAD_CONFIG_NAME = "head_config.json"
TOKENIZER_NAME = "tokenizer.json"


def save_finetuned(model: nn.Module, directory: str | Path, *,
                   head_config: dict[str, Any], tokenizer_path: str | Path) -> Path:
    """`model` must own its weights: not a DeepSpeed engine's module, whose weights are
    views into flat buffers that safetensors refuses (the worker copies them out first)."""
    directory = Path(directory)
    if isinstance(model.backbone, Bert):
        export_hf(model.backbone, directory)
    else:
        save_pretrained(model.backbone, directory)
    head = {name: p.detach().float().clone() for name, p in model.named_parameters()
            if not name.startswith("backbone.")}
    save_file(head, str(directory / HEAD_WEIGHTS_NAME))
    (directory / HEAD_CONFIG_NAME).write_text(json.dumps(head_config, indent=2) + "\n", encoding="utf-8")
    shutil.copy(tokenizer_path, directory / TOKENIZER_NAME)
    return directory


def load_finetuned(directory: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """(model in eval mode, head_config) from a directory written by `save_finetuned`."""
    directory = Path(directory)
    config_path = directory / HEAD_CONFIG_NAME
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} not found: expected a <task>/model/ directory "
                                "written by the finetune stage")
    head_config = json.loads(config_path.read_text(encoding="utf-8"))
    is_hf = (directory / "config.json").is_file()  # BERT backbones are saved as Hugging Face folders
    backbone = import_hf(directory) if is_hf else load_pretrained(directory)
    if "task" in head_config:
        model_family = "bert" if is_hf else json.loads((directory / CONFIG_NAME).read_text()).get("family", "gpt")
        model = family_for(get_task(head_config["task"]), model_family).build_model(head_config, backbone)
    else:  # a head saved without its task (not by the stage): the head alone says what it is
        model = build_task_model(head_config, backbone)
    missing, unexpected = model.load_state_dict(read_weights(directory / HEAD_WEIGHTS_NAME), strict=False)
    assert not unexpected and all(name.startswith("backbone.") for name in missing), (missing, unexpected)
    return model.eval(), head_config
