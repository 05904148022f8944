"""The shape of a BERT: BertConfig, variant "bert", "albert" or "electra" (see model.py),
and its rules. Torch-free: the pretrain config validates `pretrain.model` through it, and
`pretrain plan` never imports torch.

    config = BertConfig(vocab_size=30000, variant="albert", hidden_size=768, num_heads=12)
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.models.config_checks import check_heads_divide, check_sizes, check_variant, refuse_outside_variant

VARIANTS = ("bert", "albert", "electra")
SHARE_LAYERS = ("none", "all", "attention", "ffn")
# The names of stages.models.mlp.ACTIVATIONS (torch functions; a test checks they agree)
HIDDEN_ACTS = ("gelu", "gelu_new", "relu", "silu")
ALBERT_EMBEDDING_SIZE = 128  # E in every ALBERT of the paper
ELECTRA_GENERATOR_SIZE = 0.25  # the generator's width / the discriminator's (the paper's small and large)
ELECTRA_RTD_WEIGHT = 50.0  # lambda: the replaced-token-detection loss's weight against the generator's MLM


@dataclass(kw_only=True)
class BertConfig:
    vocab_size: int
    max_seq_len: int = 512
    num_layers: int = 2
    hidden_size: int = 128
    num_heads: int = 2
    intermediate_size: int = 0  # 0 means 4 * hidden_size
    type_vocab_size: int = 2
    dropout: float = 0.1  # hidden and attention-probability dropout (BERT uses 0.1 for both)
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    variant: str = "bert"  # "bert" | "albert" | "electra" (see model.py's docstring)
    # The fields below are resolved in __post_init__ when unset (None), by variant:
    embedding_size: int | None = None  # E; bert: hidden_size, albert: 128
    share_layers: str | None = None  # one of SHARE_LAYERS; bert: "none", albert: "all"
    hidden_act: str | None = None  # FFN and MLM-head activation; bert: "gelu", albert: "gelu_new"
    generator_size: float | None = None  # electra only: generator width / hidden_size; 0.25
    rtd_weight: float | None = None  # electra only: loss = generator MLM + rtd_weight * RTD; 50
    span_boundary_objective: bool = False  # SpanBERT's SBO head (see model.py's docstring)

    def __post_init__(self) -> None:
        check_variant("bert", self.variant, VARIANTS)
        albert, electra = self.variant == "albert", self.variant == "electra"
        if not albert:
            # Hugging Face's BertModel has neither: refuse rather than build a model no BERT reads.
            refuse_outside_variant("albert", {
                "embedding_size": electra or self.embedding_size in (None, self.hidden_size),
                "share_layers": self.share_layers in (None, "none")},
                why="BERT's embeddings are hidden_size wide and every layer has its own weights")
        if not electra:
            refuse_outside_variant("electra", {
                "generator_size": self.generator_size is None, "rtd_weight": self.rtd_weight is None},
                why="the generator and the replaced-token-detection loss are ELECTRA's")
        elif self.span_boundary_objective:
            raise ValueError("span_boundary_objective is a head of the BERT pretraining model; variant "
                             "'electra' trains replaced-token detection without it: remove it")
        if self.intermediate_size == 0:
            self.intermediate_size = 4 * self.hidden_size
        if electra:
            self.generator_size = ELECTRA_GENERATOR_SIZE if self.generator_size is None else self.generator_size
            self.rtd_weight = ELECTRA_RTD_WEIGHT if self.rtd_weight is None else self.rtd_weight
        if self.embedding_size is None:
            self.embedding_size = ALBERT_EMBEDDING_SIZE if albert else self.hidden_size
        if self.share_layers is None:
            self.share_layers = "all" if albert else "none"
        if self.hidden_act is None:
            self.hidden_act = "gelu_new" if albert else "gelu"
        if self.share_layers not in SHARE_LAYERS:
            raise ValueError(f"BertConfig: share_layers must be one of {SHARE_LAYERS}, got {self.share_layers!r}")
        if not isinstance(self.span_boundary_objective, bool):
            raise ValueError("BertConfig: span_boundary_objective must be True or False, got "
                             f"{self.span_boundary_objective!r}")
        if self.hidden_act not in HIDDEN_ACTS:
            raise ValueError(f"BertConfig: hidden_act must be one of {sorted(HIDDEN_ACTS)}, got {self.hidden_act!r}")
        check_sizes(self, ("vocab_size", "max_seq_len", "num_layers", "hidden_size", "num_heads",
                           "intermediate_size", "type_vocab_size", "embedding_size"))
        check_heads_divide(self.hidden_size, self.num_heads)
        if electra:
            self._check_generator()

    def _check_generator(self) -> None:
        if not 0.0 < self.generator_size <= 1.0:
            raise ValueError(f"BertConfig: generator_size must be in (0, 1], got {self.generator_size}")
        if not self.rtd_weight > 0:
            raise ValueError(f"BertConfig: rtd_weight must be > 0, got {self.rtd_weight}")
        hidden, heads = self.generator_shape()
        if hidden < 1 or hidden % heads:
            raise ValueError(
                f"generator_size={self.generator_size} gives ELECTRA's generator hidden size {hidden} and "
                f"{heads} heads (hidden_size {self.hidden_size} and num_heads {self.num_heads} scaled), "
                "which do not divide; pick a generator_size that does")

    def generator_shape(self) -> tuple[int, int]:
        """ELECTRA's generator: (hidden size, heads), the discriminator's scaled by
        generator_size (at least one head); its feed-forward is 4 x its hidden size."""
        return (round(self.hidden_size * self.generator_size),
                max(1, round(self.num_heads * self.generator_size)))


# The named BERT shapes (pretrain.model.preset; stages/models/config.py gathers every
# family's): BERT's, the compact BERTs, ALBERT's and ELECTRA's published sizes and tiny debug
# models. Parameter counts are asserted in tests/unit/test_model_presets.py.
_BERT = dict(vocab_size=30522, max_seq_len=512, dropout=0.1)  # uncased WordPiece vocabulary
# ALBERT (Lan et al. 2020, Table 1): E = 128, every layer shared, 30000-token SentencePiece
# vocabulary; no dropout (ALBERT v2's configs, after the paper found that removing it helps).
_ALBERT = dict(variant="albert", vocab_size=30000, max_seq_len=512, embedding_size=128, share_layers="all",
               dropout=0.0)
# ELECTRA (Clark et al. 2020, Table 6 / appendix): BERT's vocabulary, 64-wide heads, a generator
# 1/4 (small) or 1/3 (base) as wide as the discriminator; parameter counts are the discriminator's.
_ELECTRA = dict(variant="electra", vocab_size=30522, max_seq_len=512, dropout=0.1)
PRESETS: dict[str, dict] = {
    "bert-debug": dict(vocab_size=512, max_seq_len=64, num_layers=2, hidden_size=64, num_heads=4),
    # The compact BERTs of Turc et al. 2019 (google/bert_uncased_L-*_H-*_A-*): 64-wide heads.
    "bert-tiny": dict(_BERT, num_layers=2, hidden_size=128, num_heads=2),
    "bert-mini": dict(_BERT, num_layers=4, hidden_size=256, num_heads=4),
    "bert-small": dict(_BERT, num_layers=4, hidden_size=512, num_heads=8),
    "bert-medium": dict(_BERT, num_layers=8, hidden_size=512, num_heads=8),
    "bert-base": dict(_BERT, num_layers=12, hidden_size=768, num_heads=12),
    "bert-large": dict(_BERT, num_layers=24, hidden_size=1024, num_heads=16),
    "albert-debug": dict(_ALBERT, vocab_size=512, max_seq_len=64, num_layers=2, hidden_size=64,
                         embedding_size=32, num_heads=4),
    "albert-base": dict(_ALBERT, num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072),
    "albert-large": dict(_ALBERT, num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096),
    "albert-xlarge": dict(_ALBERT, num_layers=24, hidden_size=2048, num_heads=32, intermediate_size=8192),
    "electra-debug": dict(_ELECTRA, vocab_size=512, max_seq_len=64, num_layers=2, hidden_size=64,
                          embedding_size=32, num_heads=4, generator_size=0.25),
    "electra-small": dict(_ELECTRA, num_layers=12, hidden_size=256, embedding_size=128, num_heads=4,
                          intermediate_size=1024, generator_size=0.25),
    "electra-base": dict(_ELECTRA, num_layers=12, hidden_size=768, embedding_size=768, num_heads=12,
                         intermediate_size=3072, generator_size=1 / 3),
}
