"""GPT: a prompt in, its continuation out, streamed as it is decoded.

The prompt is tokenized as the model was trained (no special tokens added); an empty
prompt starts from <|endoftext|>, the start of a document. Decoding stops at
<|endoftext|> (not printed), after max_new_tokens, or at the end of the context.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from stages.evaluate.scorers.special_tokens import special_token_id
from stages.generate.model_folder import LoadedModel
from stages.generate.outputs import Generation
from stages.generate.prompt_fit import fit_prompt
from stages.generate.settings import DecodingSettings
from stages.generate.text_stream import TextStream
from stages.models.generation import generate

DEFAULT_MAX_NEW_TOKENS = 50
ECHOES_PROMPT = True  # the printed text starts with the prompt, then the continuation


@dataclass(frozen=True)
class CausalPrompt:
    number: int
    prompt: str
    ids: list[int]  # what is fed: the prompt's tokens, cut from the left when asked
    cut: int  # tokens cut
    max_new_tokens: int
    eos: int


def prepare(loaded: LoadedModel, prompt: str, number: int, settings: DecodingSettings,
            warn: Callable[[str], None]) -> CausalPrompt:
    """Tokenized and fitted to the context; a GenerateInputError if it does not fit."""
    context = loaded.model.config.max_seq_len
    eos = special_token_id(loaded.tokenizer, "eos_token", loaded.tokenizer_path, "gpt")
    ids = loaded.tokenizer.encode(prompt, add_special_tokens=False).ids or [eos]
    ids, cut, max_new_tokens = fit_prompt(
        ids, number=number, context=context, max_new_tokens=settings.max_new_tokens or DEFAULT_MAX_NEW_TOKENS,
        asked=settings.max_new_tokens is not None, cut_left=settings.cut_left)
    if cut:
        warn(f"prompt {number} was cut from the left: {cut} tokens dropped, its last {len(ids)} kept "
             f"(context {context} tokens, {max_new_tokens} new)")
    return CausalPrompt(number, prompt, ids, cut, max_new_tokens, eos)


def run(loaded: LoadedModel, prepared: CausalPrompt, settings: DecodingSettings,
        write: Callable[[str], None] | None = None) -> Generation:
    """Generate; with `write`, each piece of text as soon as it is known (greedy and
    sampling: beam search picks its words only at the end)."""
    started = time.perf_counter()
    model, tokenizer, eos, ids = loaded.model, loaded.tokenizer, prepared.eos, prepared.ids
    stream = TextStream(tokenizer)
    on_token = None
    if write is not None and settings.num_beams == 1:
        def on_token(token: torch.Tensor) -> None:
            if token[0].item() != eos:
                write(stream.push(token[0].item()))
    generator = torch.Generator(device=loaded.device).manual_seed(settings.seed)
    output = generate(model, torch.tensor([ids], device=loaded.device), prepared.max_new_tokens,
                      eos_token_id=eos, num_beams=settings.num_beams, generator=generator, on_token=on_token,
                      **settings.sampling())
    new = output[0, len(ids):].tolist()
    ended = eos in new
    new = new[:new.index(eos)] if ended else new
    text = tokenizer.decode(new, skip_special_tokens=True)
    if on_token is not None:
        write(stream.finish())
    elif write is not None:
        write(text)
    stopped = "end of text" if ended else (
        "end of context" if len(ids) + len(new) >= model.config.max_seq_len else "max new tokens")
    return Generation(number=prepared.number, prompt=prepared.prompt, text=text,
                      prompt_tokens=len(ids) + prepared.cut, new_tokens=len(new) + ended, stopped=stopped,
                      seconds=time.perf_counter() - started, cut_tokens=prepared.cut)
