"""T5 and the original Transformer: a source in, the target the decoder writes out.

A pretrained model learned span corruption: its source has sentinels (<extra_id_0>, ...)
where spans were dropped, and it writes each sentinel followed by the span it guesses.
A prompt with sentinels gets that raw target back; a prompt without gets <extra_id_0>
appended, and the answer is the span the model writes for it: a continuation, as the
evaluate stage's T5 scorer reads one. A model fine-tuned on a task (`--task`) reads its
task's format (task_format.py) and writes at most the task's target length by default.
Relative (T5) and sinusoidal (Transformer) positions have no length limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from stages.evaluate.scorers.special_tokens import sentinel_ids
from stages.generate.errors import GenerateInputError
from stages.generate.model_folder import LoadedModel
from stages.generate.outputs import Generation
from stages.generate.settings import DecodingSettings
from stages.generate.text_stream import TextStream
from stages.models.generation import generate_seq2seq

DEFAULT_MAX_NEW_TOKENS = 50
ECHOES_PROMPT = False  # the printed text is the target alone


@dataclass(frozen=True)
class Seq2SeqPrompt:
    number: int
    prompt: str
    source: str  # as encoded: in the task's format, or with <extra_id_0> appended
    ids: list[int]
    span: bool  # a continuation through the first sentinel's span (no sentinel in the prompt)
    max_new_tokens: int


def prepare(loaded: LoadedModel, prompt: str, number: int, settings: DecodingSettings,
            warn: Callable[[str], None]) -> Seq2SeqPrompt:
    eos = loaded.model.config.eos_token_id
    source, max_new_tokens = prompt, settings.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    if loaded.task is not None:
        from stages.generate.task_format import target_length, task_source

        source = task_source(loaded.task, prompt, number)
        max_new_tokens = settings.max_new_tokens or target_length(loaded.task)
    ids = loaded.tokenizer.encode(source).ids  # the post-processor ends a source with </s>, as in training
    sentinels = sentinel_ids(loaded.tokenizer)
    span = loaded.task is None and not set(ids) & set(sentinels)
    if span:
        if not sentinels:
            raise GenerateInputError(f"{loaded.tokenizer_path} has no <extra_id_0> sentinel: a span corruption "
                                     "model needs one to continue a prompt")
        ids = (ids[:-1] if ids and ids[-1] == eos else ids) + [sentinels[0], eos]
        source = f"{source} <extra_id_0>"
    return Seq2SeqPrompt(number, prompt, source, ids, span, max_new_tokens)


def run(loaded: LoadedModel, prepared: Seq2SeqPrompt, settings: DecodingSettings,
        write: Callable[[str], None] | None = None) -> Generation:
    started = time.perf_counter()
    model, tokenizer, span = loaded.model, loaded.tokenizer, prepared.span
    eos = model.config.eos_token_id
    sentinels = sentinel_ids(tokenizer)
    # What a reader wants: the target's text; with the user's own sentinels, them too.
    skip_special = span or loaded.task is not None
    stream = TextStream(tokenizer, skip_special_tokens=skip_special)
    stops = {eos} | ({sentinels[1]} if span and len(sentinels) > 1 else set())
    kept: list[int] = []
    stopped = None  # what ended the target: "end of text" (</s>), "end of span" (the next sentinel)

    def on_token(token: torch.Tensor) -> None:
        nonlocal stopped
        token_id = token[0].item()
        if stopped is not None or (span and not kept and token_id == sentinels[0]):
            return  # after the end, or the span's own opening sentinel
        if token_id in stops:
            stopped = "end of text" if token_id == eos else "end of span"
            return
        kept.append(token_id)
        if write is not None:
            write(stream.push(token_id))

    generator = torch.Generator(device=loaded.device).manual_seed(settings.seed)
    output = generate_seq2seq(model, torch.tensor([prepared.ids], device=loaded.device), None,
                              prepared.max_new_tokens, eos_token_id=eos, num_beams=settings.num_beams,
                              generator=generator, on_token=on_token if settings.num_beams == 1 else None,
                              **settings.sampling())
    if settings.num_beams > 1:  # the best hypothesis, read as the stream would have
        for token_id in output[0, 1:].tolist():
            on_token(torch.tensor([token_id]))
    if write is not None:
        write(stream.finish())
    text = tokenizer.decode(kept, skip_special_tokens=skip_special)
    return Generation(number=prepared.number, prompt=prepared.prompt, text=text.strip() if loaded.task else text,
                      prompt_tokens=len(prepared.ids), new_tokens=output.size(1) - 1,
                      stopped=stopped or "max new tokens", seconds=time.perf_counter() - started,
                      source=prepared.source if prepared.source != prepared.prompt else None)
