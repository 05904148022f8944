"""BERT-style models: the most likely tokens at each [MASK] of a prompt, all masks at once
from one forward pass (as transformers' fill-mask pipeline), by each model's own masked-LM
head; ELECTRA by its generator, the masked LM trained beside the discriminator."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from stages.evaluate.scorers.special_tokens import special_token_id
from stages.generate.errors import GenerateInputError
from stages.generate.model_folder import LoadedModel
from stages.generate.outputs import MaskFill
from stages.generate.settings import DecodingSettings
from stages.models.bert.electra import ElectraForPreTraining

DEFAULT_TOP_K = 5


@dataclass(frozen=True)
class MaskPrompt:
    number: int
    prompt: str
    ids: list[int]  # [CLS] prompt [SEP], as the model was trained
    type_ids: list[int]
    positions: list[int]  # of the masks


def prepare(loaded: LoadedModel, prompt: str, number: int, settings: DecodingSettings,
            warn: Callable[[str], None]) -> MaskPrompt:
    mask_id = special_token_id(loaded.tokenizer, "mask_token", loaded.tokenizer_path, "bert")
    mask = loaded.tokenizer.id_to_token(mask_id)
    encoding = loaded.tokenizer.encode(prompt)
    positions = [i for i, token_id in enumerate(encoding.ids) if token_id == mask_id]
    if not positions:
        raise GenerateInputError(f"prompt {number} has no {mask}: a masked language model fills in each {mask}, "
                                 f"e.g. --prompt \"The weather was {mask} today.\"")
    context, length = loaded.model.config.max_seq_len, len(encoding.ids)
    if length > context:
        raise GenerateInputError(f"prompt {number} is {length} tokens with its special tokens, {length - context} "
                                 f"more than the model's context of {context} tokens; it was not cut (a cut could "
                                 f"drop a {mask}): shorten it")
    return MaskPrompt(number, prompt, encoding.ids, encoding.type_ids, positions)


@torch.no_grad()
def run(loaded: LoadedModel, prepared: MaskPrompt, settings: DecodingSettings,
        write: Callable[[str], None] | None = None) -> MaskFill:
    started = time.perf_counter()
    model, tokenizer, positions = loaded.model, loaded.tokenizer, prepared.positions
    input_ids = torch.tensor([prepared.ids], device=loaded.device)
    token_types = torch.tensor([prepared.type_ids], device=loaded.device)
    if isinstance(model, ElectraForPreTraining):
        logits = model.generator(input_ids, None, token_types)[0, positions]  # (M, V)
    else:
        hidden, _ = model.backbone(input_ids, None, token_types)  # (1, T, C)
        logits = model.mlm_logits(hidden[0, positions])  # (M, V)
    probabilities = logits.float().softmax(dim=-1)
    top = probabilities.topk(min(settings.top_k or DEFAULT_TOP_K, probabilities.size(-1)), dim=-1)
    masks, best = [], list(prepared.ids)
    for position, values, indices in zip(positions, top.values.tolist(), top.indices.tolist()):
        masks.append([{"token": tokenizer.decode([i]).strip() or tokenizer.id_to_token(i), "id": i,
                       "probability": round(p, 6)} for p, i in zip(values, indices)])
        best[position] = indices[0]
    fill = MaskFill(number=prepared.number, prompt=prepared.prompt,
                    filled=tokenizer.decode(best, skip_special_tokens=True), masks=masks,
                    seconds=time.perf_counter() - started)
    if write is not None:
        write(format_mask_fill(fill))
    return fill


def format_mask_fill(fill: MaskFill) -> str:
    lines = [fill.filled]
    for number, candidates in enumerate(fill.masks, start=1):
        shown = "  ".join(f"{c['token']} {c['probability']:.3f}" for c in candidates)
        lines.append(f"  mask {number}: {shown}")
    return "\n".join(lines) + "\n"
