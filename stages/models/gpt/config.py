"""The shape of a GPT: GPTConfig, variant "gpt2" or "llama" (see model.py), and its
rules. Torch-free: the pretrain config validates `pretrain.model` through it, and
`pretrain plan` never imports torch.

    config = GPTConfig(vocab_size=8192, max_seq_len=128, variant="llama", num_kv_heads=2)
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.models.config_checks import check_heads_divide, check_sizes, check_variant, refuse_outside_variant

VARIANTS = ("gpt2", "llama")


@dataclass(kw_only=True)
class GPTConfig:
    vocab_size: int
    max_seq_len: int
    num_layers: int = 2
    hidden_size: int = 128
    num_heads: int = 4
    dropout: float = 0.0
    layer_norm_eps: float = 1e-5  # LayerNorm's (gpt2) or RMSNorm's (llama) epsilon
    variant: str = "gpt2"  # "gpt2" | "llama" (see model.py's docstring)
    # The fields below are resolved in __post_init__ when unset (None):
    num_kv_heads: int | None = None  # llama: key/value heads (grouped-query attention); = num_heads
    intermediate_size: int | None = None  # MLP inner width; gpt2: 4C, llama: llama_intermediate_size(C)
    rope_theta: float | None = None  # llama: rotary base; 10000
    tie_word_embeddings: bool | None = None  # LM head = token embedding; gpt2: always, llama: no

    def __post_init__(self) -> None:
        check_variant("gpt", self.variant, VARIANTS)
        check_sizes(self, ("vocab_size", "max_seq_len", "num_layers", "hidden_size", "num_heads"))
        check_heads_divide(self.hidden_size, self.num_heads)
        llama = self.variant == "llama"
        if not llama:
            # GPT-2 (and Hugging Face's GPT2LMHeadModel) has none of these: refuse rather than ignore.
            refuse_outside_variant("llama", {
                "num_kv_heads": self.num_kv_heads in (None, self.num_heads),
                "rope_theta": self.rope_theta is None,
                "tie_word_embeddings": self.tie_word_embeddings in (None, True)},
                why="GPT-2 has one key/value head per query head, learned positions and a tied head")
        if self.num_kv_heads is None:
            self.num_kv_heads = self.num_heads
        if self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            options = [h for h in range(1, self.num_heads + 1) if self.num_heads % h == 0]
            raise ValueError(f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads} "
                             f"(each key/value head serves a whole group of query heads); use one of {options}")
        if self.intermediate_size is None:
            self.intermediate_size = llama_intermediate_size(self.hidden_size) if llama else 4 * self.hidden_size
        check_sizes(self, ("intermediate_size",), dropout=False)
        if llama:
            self.rope_theta = 10000.0 if self.rope_theta is None else self.rope_theta
            if self.rope_theta <= 0:
                raise ValueError(f"GPTConfig: rope_theta must be > 0, got {self.rope_theta}")
            if self.head_size % 2:
                raise ValueError(f"variant 'llama' needs an even head size for rotary positions, but hidden_size "
                                 f"{self.hidden_size} / num_heads {self.num_heads} = {self.head_size}; "
                                 "change num_heads or hidden_size")
        if self.tie_word_embeddings is None:
            self.tie_word_embeddings = not llama

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads


def llama_intermediate_size(hidden_size: int, multiple_of: int = 256) -> int:
    """Meta's Llama rule: 2/3 of 4C (SwiGLU has three matrices where GELU has two, so the
    parameter count stays that of a 4C MLP), rounded up to a multiple of 256
    (4096 -> 11008 for Llama-7B, 2048 -> 5632 for TinyLlama)."""
    width = int(2 * 4 * hidden_size / 3)
    return multiple_of * -(-width // multiple_of)


# The named GPT shapes (pretrain.model.preset; stages/models/config.py gathers every
# family's): GPT-2's published sizes, Llama-style ones, and tiny debug models for tests and
# CPU smoke runs. Parameter counts are asserted in tests/unit/test_model_presets.py.
_GPT2 = dict(vocab_size=50257, max_seq_len=1024, dropout=0.1)
PRESETS: dict[str, dict] = {
    "gpt-debug": dict(vocab_size=512, max_seq_len=64, num_layers=2, hidden_size=64, num_heads=4),
    "gpt2-small": dict(_GPT2, num_layers=12, hidden_size=768, num_heads=12),
    "gpt2-medium": dict(_GPT2, num_layers=24, hidden_size=1024, num_heads=16),
    "gpt2-large": dict(_GPT2, num_layers=36, hidden_size=1280, num_heads=20),
    # Llama-style GPTs (variant llama: RMSNorm, rotary, SwiGLU, no biases, untied head), no
    # dropout as Llama trains, Llama's 32000-token SentencePiece vocabulary and 2048 context.
    "llama-debug": dict(variant="llama", vocab_size=512, max_seq_len=64, num_layers=2, hidden_size=64,
                        num_heads=4, num_kv_heads=2, intermediate_size=192),
    # JackFram/llama-160m: GPT-2 small's shape as a Llama (12 x 768, 12 heads, MHA, FFN 3072).
    "llama-160m": dict(variant="llama", vocab_size=32000, max_seq_len=2048, num_layers=12,
                       hidden_size=768, num_heads=12, intermediate_size=3072, layer_norm_eps=1e-6),
    # TinyLlama-1.1B: 22 x 2048, 32 query heads sharing 4 key/value heads (GQA), FFN 5632.
    "tinyllama-1.1b": dict(variant="llama", vocab_size=32000, max_seq_len=2048, num_layers=22,
                           hidden_size=2048, num_heads=32, num_kv_heads=4, intermediate_size=5632),
}
