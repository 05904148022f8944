"""Prompts through a loaded model, printed as they are decoded.

    GPT       the prompt, then its continuation streamed; a blank line between prompts
    T5        the target (with --task: the task's answer), streamed
    BERT      the prompt with each mask filled, then each mask's top tokens
    --json    one JSON object per prompt instead (nothing streamed)

Every prompt is prepared (tokenized, checked against the context) before the first is
decoded, so a prompt that does not fit stops the command before any output. Notes (a
prompt cut with --cut-left) go to `err`, one `warning:` line each.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import ModuleType
from typing import TextIO

from stages.generate.model_folder import LoadedModel
from stages.generate.outputs import Generation, MaskFill
from stages.generate.settings import DecodingSettings


def family_module(family: str) -> ModuleType:
    """The module with `prepare` and `run` for a model family."""
    if family == "gpt":
        from stages.generate import causal as module
    elif family == "t5":
        from stages.generate import seq2seq as module
    else:
        from stages.generate import fill_mask as module
    return module


def describe_settings(family: str, settings: DecodingSettings) -> str:
    if family == "bert":
        from stages.generate.fill_mask import DEFAULT_TOP_K

        return f"top {settings.top_k or DEFAULT_TOP_K} tokens per mask"
    return settings.describe()


def run_prompts(loaded: LoadedModel, prompts: Sequence[str], settings: DecodingSettings, *,
                out: TextIO, err: TextIO, as_json: bool = False) -> list[Generation | MaskFill]:
    def write(text: str) -> None:
        out.write(text)
        out.flush()

    def warn(message: str) -> None:
        err.write(f"warning: {message}\n")
        err.flush()

    module = family_module(loaded.family)
    prepared = [module.prepare(loaded, prompt, number, settings, warn)
                for number, prompt in enumerate(prompts, start=1)]
    results = []
    for item in prepared:
        if as_json:
            result = module.run(loaded, item, settings)
            write(json.dumps(result.record(), ensure_ascii=False) + "\n")
        elif loaded.family == "bert":
            result = module.run(loaded, item, settings, write)
        else:
            if item.number > 1:
                write("\n")
            if module.ECHOES_PROMPT:
                write(item.prompt)
            result = module.run(loaded, item, settings, write)
            write("\n")
        results.append(result)
    return results
