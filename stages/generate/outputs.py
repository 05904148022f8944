"""What generating from one prompt gives, for printing as text or as a JSON line."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Generation:
    number: int  # the prompt's place among the prompts, from 1
    prompt: str  # as the user gave it
    text: str  # what the model wrote (GPT: the continuation; T5: the target)
    prompt_tokens: int
    new_tokens: int
    stopped: str  # "end of text", "max new tokens", "end of span"
    seconds: float
    cut_tokens: int = 0  # tokens cut from the prompt's left (--cut-left)
    source: str | None = None  # T5: the source as encoded, when it differs from the prompt

    def record(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


@dataclass
class MaskFill:
    number: int
    prompt: str
    filled: str  # the prompt with each mask replaced by its most likely token
    masks: list[list[dict[str, Any]]] = field(default_factory=list)  # per mask: [{token, id, probability}]
    seconds: float = 0.0

    def record(self) -> dict[str, Any]:
        return asdict(self)
