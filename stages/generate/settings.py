"""How to decode, as `pretrain generate` takes it from its flags, checked once.

Greedy unless asked to sample: `temperature` > 0, `top_k` or `top_p` sample (temperature
1.0 unless given); `num_beams` > 1 is beam search, which does not sample. `seed` makes a
sample repeatable: each prompt draws from its own generator seeded with it, so a prompt
gives the same text whatever other prompts come with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.generate.errors import GenerateInputError


@dataclass(frozen=True)
class DecodingSettings:
    max_new_tokens: int | None = None  # None: the model's default (a task's target length, else 50)
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    num_beams: int = 1
    cut_left: bool = False  # a prompt too long for the context keeps its last tokens

    def __post_init__(self) -> None:
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise GenerateInputError(f"--max-new-tokens {self.max_new_tokens}: give 1 or more")
        if self.temperature is not None and self.temperature < 0:
            raise GenerateInputError(f"--temperature {self.temperature}: give 0 (greedy) or more")
        if self.top_k is not None and self.top_k < 1:
            raise GenerateInputError(f"--top-k {self.top_k}: give 1 or more")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise GenerateInputError(f"--top-p {self.top_p}: give a probability in (0, 1]")
        if self.num_beams < 1:
            raise GenerateInputError(f"--num-beams {self.num_beams}: give 1 (no beam search) or more")
        if self.temperature == 0 and (self.top_k is not None or self.top_p is not None):
            raise GenerateInputError("--temperature 0 is greedy decoding, which --top-k / --top-p would not "
                                     "change; leave out --temperature to sample at 1.0, or give one above 0")
        if self.num_beams > 1 and self.do_sample:
            raise GenerateInputError(f"--num-beams {self.num_beams} is beam search, which does not sample: leave "
                                     "out --temperature, --top-k and --top-p, or --num-beams")

    @property
    def do_sample(self) -> bool:
        return bool(self.temperature) or self.top_k is not None or self.top_p is not None

    def sampling(self) -> dict:
        """Keyword arguments of stages.models.generation's decoders (no generator)."""
        return {"do_sample": self.do_sample, "temperature": self.temperature or 1.0,
                "top_k": self.top_k, "top_p": self.top_p}

    def describe(self) -> str:
        if self.num_beams > 1:
            return f"beam search ({self.num_beams} beams)"
        if not self.do_sample:
            return "greedy"
        parts = [f"temperature {self.temperature or 1.0:g}"]
        parts += [f"top-k {self.top_k}"] if self.top_k is not None else []
        parts += [f"top-p {self.top_p:g}"] if self.top_p is not None else []
        return f"sampling ({', '.join(parts)}, seed {self.seed})"
