"""The shape of a T5: T5Config, variant "t5" (v1.0 / v1.1) or "transformer" (the original
Transformer; see model.py and transformer.py), and its rules. Torch-free: the pretrain
config validates `pretrain.model` through it, and `pretrain plan` never imports torch.

    config = T5Config(vocab_size=32128, feed_forward="gated-gelu", tie_word_embeddings=False)
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.models.config_checks import check_heads_divide, check_sizes, check_variant, refuse_outside_variant

FEED_FORWARD_KINDS = ("relu", "gated-gelu")
VARIANTS = ("t5", "transformer")  # transformer: Vaswani et al. 2017 (transformer.py)


@dataclass(kw_only=True)
class T5Config:
    vocab_size: int
    hidden_size: int = 64  # d_model
    # d_kv; num_heads * head_size need not equal hidden_size (t5). Unset: 16 for t5,
    # hidden_size / num_heads for transformer (which allows no other value).
    head_size: int | None = None
    ff_size: int = 128  # d_ff
    num_layers: int = 2  # encoder blocks
    num_decoder_layers: int = 0  # 0 means num_layers
    num_heads: int = 4
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    feed_forward: str = "relu"  # "relu" (T5 v1.0) or "gated-gelu" (T5 v1.1)
    tie_word_embeddings: bool = True  # v1.0 True, v1.1 False
    dropout: float = 0.1
    layer_norm_eps: float | None = None  # unset: 1e-6 (t5's RMSNorm), 1e-5 (transformer's LayerNorm)
    pad_token_id: int = 0
    eos_token_id: int = 1
    decoder_start_token_id: int = 0  # T5 starts decoding from the pad token
    variant: str = "t5"  # "t5" | "transformer" (see the module docstring)

    def __post_init__(self) -> None:
        check_variant("t5", self.variant, VARIANTS)
        transformer = self.variant == "transformer"
        if transformer:
            self._check_transformer_fields()
        if self.head_size is None:
            self.head_size = self.hidden_size // self.num_heads if transformer else 16
        if self.layer_norm_eps is None:
            self.layer_norm_eps = 1e-5 if transformer else 1e-6
        if self.num_decoder_layers == 0:
            self.num_decoder_layers = self.num_layers
        if self.feed_forward not in FEED_FORWARD_KINDS:
            raise ValueError(f"T5Config: feed_forward must be one of {FEED_FORWARD_KINDS}, got {self.feed_forward!r}")
        check_sizes(self, ("vocab_size", "hidden_size", "head_size", "ff_size", "num_layers",
                           "num_decoder_layers", "num_heads", "relative_attention_num_buckets"))

    def _check_transformer_fields(self) -> None:
        """The original Transformer has none of T5's choices: refuse them rather than ignore them."""
        check_sizes(self, ("hidden_size", "num_heads"), dropout=False)
        check_heads_divide(self.hidden_size, self.num_heads)  # d_k = d_model / h
        refuse_outside_variant("t5", {
            "relative_attention_num_buckets": self.relative_attention_num_buckets == 32,
            "relative_attention_max_distance": self.relative_attention_max_distance == 128,
            "feed_forward": self.feed_forward == "relu",
            "tie_word_embeddings": self.tie_word_embeddings,
            "head_size": self.head_size in (None, self.hidden_size // self.num_heads)},
            why="the original Transformer has sinusoidal positions, a ReLU feed-forward, one embedding "
                "matrix shared by source, target and output, and heads of hidden_size / num_heads "
                f"({self.hidden_size // self.num_heads})")


# The named T5 and Transformer shapes (pretrain.model.preset; stages/models/config.py gathers
# every family's) and tiny debug models. Parameter counts are asserted in
# tests/unit/test_model_presets.py and tests/unit/test_transformer_config.py.
_T5 = dict(vocab_size=32128, head_size=64, relative_attention_num_buckets=32, dropout=0.1)
# The original Transformer (Vaswani et al. 2017, Table 3): WMT'14 English-German's shared
# 37000-token BPE vocabulary, P_drop 0.1 (base; 0.3 for big on English-German).
_TRANSFORMER = dict(variant="transformer", vocab_size=37000, dropout=0.1)
PRESETS: dict[str, dict] = {
    "t5-debug": dict(vocab_size=512, hidden_size=64, head_size=16, ff_size=128, num_layers=2, num_heads=4),
    "t5-small": dict(_T5, hidden_size=512, ff_size=2048, num_layers=6, num_heads=8),
    "t5-base": dict(_T5, hidden_size=768, ff_size=3072, num_layers=12, num_heads=12),
    # T5 v1.1: gated-GELU FFN, untied LM head (google/t5-v1_1-*).
    "t5-v1_1-small": dict(_T5, hidden_size=512, ff_size=1024, num_layers=8, num_heads=6,
                          feed_forward="gated-gelu", tie_word_embeddings=False),
    "transformer-debug": dict(variant="transformer", vocab_size=512, hidden_size=64, ff_size=128,
                              num_layers=2, num_heads=4),
    "transformer-base": dict(_TRANSFORMER, hidden_size=512, ff_size=2048, num_layers=6, num_heads=8),
    "transformer-big": dict(_TRANSFORMER, hidden_size=1024, ff_size=4096, num_layers=6, num_heads=16,
                            dropout=0.3),
}
