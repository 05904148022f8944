"""pretrain.samples, planned by the driver before Ray starts: each prompt tokenized and
checked against the context, and for t5 the validation sources picked, so that a prompt
that cannot be sampled fails the stage before any training (naming the key), and every
worker gets the same token ids (stages/pretrain/samples.py draws from them).

    plan = plan_samples(cfg, tokenizer_path, dataset_dir, index, seed=0)   # run.py
    plan.inputs[0].prompt, plan.inputs[0].ids

How each family is prompted (as `pretrain generate` does, stages/generate):
gpt   the prompt's tokens without special tokens ("" = <|endoftext|>, a document's start);
bert  [CLS] prompt [SEP] (the tokenizer's post-processor), which must hold a [MASK];
t5    the prompt as a source (the tokenizer's post-processor: </s> last), and the first
      num_dev_sources span-corrupted sources of the validation split with their targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.pretrain.config import PretrainConfig


@dataclass(frozen=True)
class SampleInput:
    prompt: str  # as shown: the prompt, or a validation source decoded
    ids: tuple[int, ...]  # what the model reads
    reference: str | None = None  # a validation source's target (t5)
    origin: str = "prompt"  # "prompt" | "validation"


@dataclass(frozen=True)
class SamplePlan:
    family: str
    inputs: tuple[SampleInput, ...]
    vocab_size: int  # the tokenizer's: ids past it (padding rows of the embedding) have no text
    end_id: int | None = None  # gpt, t5: end of text; the sample is cut there
    mask_id: int | None = None  # bert
    pad_id: int | None = None  # t5: never shown


def plan_samples(cfg: PretrainConfig, tokenizer_path: Path, dataset_dir: Path, index: dict[str, Any],
                 seed: int, transfer=None) -> SamplePlan:
    """The plan of pretrain.samples (cfg.samples.enabled); ValueError naming the prompt
    and the fix when one does not fit the model's context (the dataset's seq_len).
    `transfer`: the stage's StageContext.node_transfer (validation rows read here)."""
    from tokenizers import Tokenizer

    from stages.evaluate.scorers.special_tokens import special_token_id

    samples, family, context = cfg.samples, cfg.model.family, index["seq_len"]
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    vocab_size = tokenizer.get_vocab_size()
    if family == "gpt":
        eos = index.get("eos_id")
        eos = special_token_id(tokenizer, "eos_token", tokenizer_path, family) if eos is None else eos
        inputs = [SampleInput(prompt, tuple(tokenizer.encode(prompt, add_special_tokens=False).ids or [eos]))
                  for prompt in samples.prompts]
        _check_fit(inputs, samples.max_new_tokens, context)
        return SamplePlan(family, tuple(inputs), vocab_size, end_id=eos)
    if family == "bert":
        mask = special_token_id(tokenizer, "mask_token", tokenizer_path, family)
        inputs = [SampleInput(prompt, tuple(tokenizer.encode(prompt).ids)) for prompt in samples.prompts]
        for number, sample in enumerate(inputs):
            if mask not in sample.ids:
                raise ValueError(
                    f"pretrain.samples.prompts[{number}] {sample.prompt!r} has no {tokenizer.id_to_token(mask)}: "
                    f"a bert model's samples fill in each {tokenizer.id_to_token(mask)}; add one, e.g. "
                    f"\"The weather was {tokenizer.id_to_token(mask)} today.\"")
        _check_fit(inputs, 0, context)
        return SamplePlan(family, tuple(inputs), vocab_size, mask_id=mask)
    # t5: relative positions (the Transformer variant: sinusoidal ones), no context to fit
    pad, eos = index["pad_id"], index["eos_id"]
    inputs = [SampleInput(prompt, tuple(tokenizer.encode(prompt).ids)) for prompt in samples.prompts]
    inputs += validation_sources(tokenizer, dataset_dir, samples.num_dev_sources, seed, pad, eos, transfer)
    return SamplePlan(family, tuple(inputs), vocab_size, end_id=eos, pad_id=pad)


def _check_fit(inputs: list[SampleInput], max_new_tokens: int, context: int) -> None:
    for number, sample in enumerate(inputs):
        needed = len(sample.ids) + max_new_tokens
        if needed > context:
            with_new = f" + max_new_tokens {max_new_tokens}" if max_new_tokens else ""
            raise ValueError(
                f"pretrain.samples.prompts[{number}] is {len(sample.ids)} tokens{with_new} = {needed}, "
                f"{needed - context} more than the model's context (dataset.seq_len {context}); shorten it"
                + (" or lower pretrain.samples.max_new_tokens" if max_new_tokens else ""))


def validation_sources(tokenizer, dataset_dir: Path, count: int, seed: int, pad_id: int,
                       eos_id: int, transfer=None) -> list[SampleInput]:
    """The first `count` rows of the span dataset's validation split (its first source's,
    for a mixture), in storage order: the same sources every run, with their targets.
    Sentinels stay in the text (skip_special_tokens=False); padding and </s> do not."""
    if count == 0:
        return []
    from stages.data.loader import ExampleLoader
    from stages.data.mixing import mixture_parts, part_dir
    from stages.data.packed import read_index
    from stages.objectives.registry import build_batch_builder

    from stages.ray_tasks import bring_to_driver

    parts = mixture_parts(read_index(dataset_dir))
    split_dir = part_dir(dataset_dir, parts[0]) if parts else dataset_dir
    bring_to_driver(split_dir / "validation", transfer)  # read here, in the driver: a few rows of it
    loader = ExampleLoader(split_dir, "validation", batch_size=min(count, 1024), seed=seed, shuffle=False,
                           drop_last=False, batch_builder=build_batch_builder)
    batch = next(loader)

    def text(ids: list[int]) -> str:
        return tokenizer.decode([i for i in ids if i not in (pad_id, eos_id) and i >= 0],
                                skip_special_tokens=False)

    inputs = []
    for row in range(min(count, batch["input_ids"].size(0))):
        source = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
        inputs.append(SampleInput(text(source), tuple(source), reference=text(batch["labels"][row].tolist()),
                                  origin="validation"))
    return inputs
