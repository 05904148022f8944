"""A model folder, loaded for generation: the pretrain stage's `model/`, one of its
`snapshots/step-NNNNNNN/`, or a fine-tuned task's `<task>/model/` (T5 text to text).
Never a DeepSpeed checkpoint: these folders hold the consolidated weights.

    loaded = load_model_folder("runs/demo/pretrain/<fp>/model", device="cpu", dtype="float32")
    loaded.model, loaded.family, loaded.tokenizer, loaded.task
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from tokenizers import Tokenizer

from stages.generate.errors import GenerateInputError
from stages.models.build import CONFIG_NAME, load_pretrained

TOKENIZER_NAME = "tokenizer.json"
HEAD_CONFIG_NAME = "head_config.json"  # stages.finetune.saved_model writes it beside a task's weights
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


@dataclass
class LoadedModel:
    model: nn.Module  # GPT, BertForPreTraining, ElectraForPreTraining, T5 or Transformer; eval mode
    family: str  # gpt | bert | t5 (the original Transformer is a t5 variant)
    tokenizer: Tokenizer
    tokenizer_path: Path
    folder: Path
    device: torch.device
    dtype: torch.dtype
    task: str | None = None  # a fine-tuned task's name, from head_config.json
    head_config: dict[str, Any] | None = None

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def describe(self) -> str:
        what = type(self.model).__name__ + (f" fine-tuned on {self.task}" if self.task else "")
        return (f"{self.folder}: {what}, {self.num_parameters / 1e6:.2f}M parameters, "
                f"{self.device.type} {str(self.dtype).removeprefix('torch.')}")


def resolve_device(device: str) -> torch.device:
    """auto: cuda when this torch sees a GPU, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise GenerateInputError(
            f"--device {device}: this torch ({torch.__version__}) sees no CUDA GPU; use --device cpu")
    try:
        return torch.device(device)
    except RuntimeError as error:
        raise GenerateInputError(f"--device {device}: {error}; use cpu, cuda or cuda:N") from error


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype not in DTYPES:
        raise GenerateInputError(f"--dtype {dtype}: unknown; use one of {', '.join(DTYPES)}")
    if DTYPES[dtype] is torch.float16 and device.type == "cpu":
        raise GenerateInputError(f"--dtype {dtype}: half precision is for GPUs (--device cuda); "
                                 "on cpu use bfloat16 or float32")
    return DTYPES[dtype]


def load_model_folder(folder: str | Path, *, device: str = "auto", dtype: str = "float32") -> LoadedModel:
    """The model and tokenizer of `folder`, in eval mode on `device` in `dtype`. A task
    folder (head_config.json) must hold a T5 fine-tuned as text to text: a classifier or
    tagger head does not generate."""
    folder = Path(folder)
    target_device = resolve_device(device)
    target_dtype = resolve_dtype(dtype, target_device)
    for name in (CONFIG_NAME, TOKENIZER_NAME):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name} not found: the model folder is incomplete; "
                                    "`pretrain verify RUN_DIR` checks a run's files")
    head_config = None
    if (folder / HEAD_CONFIG_NAME).is_file():
        head_config = json.loads((folder / HEAD_CONFIG_NAME).read_text(encoding="utf-8"))
    family = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8")).get("family", "gpt")
    if head_config is not None and family != "t5":
        task = head_config.get("task", folder.parent.name)
        raise GenerateInputError(
            f"task {task} was fine-tuned with a {head_config.get('head', 'task')} head on a {family} model: it "
            f"labels its input rather than writing text; load its transformers folder "
            f"({folder.parent / 'hf'}) with transformers' pipeline(), or generate with the pretrained model "
            f"(leave out --task)")
    # The weights are read onto the CPU and moved once: safetensors maps the file, so this
    # costs no second copy, and works for any device torch knows.
    model = load_pretrained(folder).to(device=target_device, dtype=target_dtype).eval()
    tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_NAME))
    tokenizer.no_padding()
    tokenizer.no_truncation()  # a prompt that does not fit is reported, never cut silently
    return LoadedModel(model=model, family=family, tokenizer=tokenizer, tokenizer_path=folder / TOKENIZER_NAME,
                       folder=folder, device=target_device, dtype=target_dtype,
                       task=None if head_config is None else head_config.get("task"), head_config=head_config)
