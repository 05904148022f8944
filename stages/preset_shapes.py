"""The named model shapes as plain data: the published GPT-2, BERT, ALBERT, ELECTRA, T5,
Transformer and Llama sizes, plus tiny debug models for tests and CPU smoke runs.

    family, fields = preset_shape("gpt2-small")   # what `pretrain.model.preset` reads

No torch here: the config reads a preset's shape when it validates `pretrain.model.preset`,
and `pretrain plan` / `status` must stay light (they never import torch). Models are
built from these shapes in stages/models/presets.py (preset_config, build_preset); the
parameter counts are asserted in tests/unit/test_model_presets.py.
"""

from __future__ import annotations

from typing import Any

_GPT2 = dict(vocab_size=50257, max_seq_len=1024, dropout=0.1)
_BERT = dict(vocab_size=30522, max_seq_len=512, dropout=0.1)  # uncased WordPiece vocabulary
# ALBERT (Lan et al. 2020, Table 1): E = 128, every layer shared, 30000-token SentencePiece
# vocabulary; no dropout (ALBERT v2's configs, after the paper found that removing it helps).
_ALBERT = dict(variant="albert", vocab_size=30000, max_seq_len=512, embedding_size=128, share_layers="all",
               dropout=0.0)
# ELECTRA (Clark et al. 2020, Table 6 / appendix): BERT's vocabulary, 64-wide heads, a generator
# 1/4 (small) or 1/3 (base) as wide as the discriminator; parameter counts are the discriminator's.
_ELECTRA = dict(variant="electra", vocab_size=30522, max_seq_len=512, dropout=0.1)
_T5 = dict(vocab_size=32128, head_size=64, relative_attention_num_buckets=32, dropout=0.1)
# The original Transformer (Vaswani et al. 2017, Table 3): WMT'14 English-German's shared
# 37000-token BPE vocabulary, P_drop 0.1 (base; 0.3 for big on English-German).
_TRANSFORMER = dict(variant="transformer", vocab_size=37000, dropout=0.1)

# name -> (family, config fields)
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt-debug": ("gpt", dict(vocab_size=512, max_seq_len=64, num_layers=2, hidden_size=64, num_heads=4)),
    "gpt2-small": ("gpt", dict(_GPT2, num_layers=12, hidden_size=768, num_heads=12)),
    "gpt2-medium": ("gpt", dict(_GPT2, num_layers=24, hidden_size=1024, num_heads=16)),
    "gpt2-large": ("gpt", dict(_GPT2, num_layers=36, hidden_size=1280, num_heads=20)),
    "bert-debug": ("bert", dict(vocab_size=512, max_seq_len=64, num_layers=2, hidden_size=64, num_heads=4)),
    # The compact BERTs of Turc et al. 2019 (google/bert_uncased_L-*_H-*_A-*): 64-wide heads.
    "bert-tiny": ("bert", dict(_BERT, num_layers=2, hidden_size=128, num_heads=2)),
    "bert-mini": ("bert", dict(_BERT, num_layers=4, hidden_size=256, num_heads=4)),
    "bert-small": ("bert", dict(_BERT, num_layers=4, hidden_size=512, num_heads=8)),
    "bert-medium": ("bert", dict(_BERT, num_layers=8, hidden_size=512, num_heads=8)),
    "bert-base": ("bert", dict(_BERT, num_layers=12, hidden_size=768, num_heads=12)),
    "bert-large": ("bert", dict(_BERT, num_layers=24, hidden_size=1024, num_heads=16)),
    "albert-debug": ("bert", dict(_ALBERT, vocab_size=512, max_seq_len=64, num_layers=2, hidden_size=64,
                                  embedding_size=32, num_heads=4)),
    "albert-base": ("bert", dict(_ALBERT, num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072)),
    "albert-large": ("bert", dict(_ALBERT, num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096)),
    "albert-xlarge": ("bert", dict(_ALBERT, num_layers=24, hidden_size=2048, num_heads=32,
                                   intermediate_size=8192)),
    "electra-debug": ("bert", dict(_ELECTRA, vocab_size=512, max_seq_len=64, num_layers=2, hidden_size=64,
                                   embedding_size=32, num_heads=4, generator_size=0.25)),
    "electra-small": ("bert", dict(_ELECTRA, num_layers=12, hidden_size=256, embedding_size=128, num_heads=4,
                                   intermediate_size=1024, generator_size=0.25)),
    "electra-base": ("bert", dict(_ELECTRA, num_layers=12, hidden_size=768, embedding_size=768, num_heads=12,
                                  intermediate_size=3072, generator_size=1 / 3)),
    "t5-debug": ("t5", dict(vocab_size=512, hidden_size=64, head_size=16, ff_size=128, num_layers=2, num_heads=4)),
    "t5-small": ("t5", dict(_T5, hidden_size=512, ff_size=2048, num_layers=6, num_heads=8)),
    "t5-base": ("t5", dict(_T5, hidden_size=768, ff_size=3072, num_layers=12, num_heads=12)),
    # T5 v1.1: gated-GELU FFN, untied LM head (google/t5-v1_1-*).
    "t5-v1_1-small": ("t5", dict(_T5, hidden_size=512, ff_size=1024, num_layers=8, num_heads=6,
                                 feed_forward="gated-gelu", tie_word_embeddings=False)),
    "transformer-debug": ("t5", dict(variant="transformer", vocab_size=512, hidden_size=64, ff_size=128,
                                     num_layers=2, num_heads=4)),
    "transformer-base": ("t5", dict(_TRANSFORMER, hidden_size=512, ff_size=2048, num_layers=6, num_heads=8)),
    "transformer-big": ("t5", dict(_TRANSFORMER, hidden_size=1024, ff_size=4096, num_layers=6, num_heads=16,
                                   dropout=0.3)),
    # Llama-style GPTs (variant llama: RMSNorm, rotary, SwiGLU, no biases, untied head), no
    # dropout as Llama trains, Llama's 32000-token SentencePiece vocabulary and 2048 context.
    "llama-debug": ("gpt", dict(variant="llama", vocab_size=512, max_seq_len=64, num_layers=2, hidden_size=64,
                                num_heads=4, num_kv_heads=2, intermediate_size=192)),
    # JackFram/llama-160m: GPT-2 small's shape as a Llama (12 x 768, 12 heads, MHA, FFN 3072).
    "llama-160m": ("gpt", dict(variant="llama", vocab_size=32000, max_seq_len=2048, num_layers=12,
                               hidden_size=768, num_heads=12, intermediate_size=3072, layer_norm_eps=1e-6)),
    # TinyLlama-1.1B: 22 x 2048, 32 query heads sharing 4 key/value heads (GQA), FFN 5632.
    "tinyllama-1.1b": ("gpt", dict(variant="llama", vocab_size=32000, max_seq_len=2048, num_layers=22,
                                   hidden_size=2048, num_heads=32, num_kv_heads=4, intermediate_size=5632)),
}


# Preset fields the pretrain stage takes from the dataset instead (index.json): a preset's
# values there only record the paper's vocabulary and context.
FIELDS_FROM_DATA = ("vocab_size", "max_seq_len")


def preset_shape(name: str) -> tuple[str, dict[str, Any]]:
    """(family, config fields) of preset `name`; ValueError naming the closest preset."""
    family, fields = lookup_preset(name)
    return family, dict(fields)


def lookup_preset(name: str) -> tuple[str, dict[str, Any]]:
    if name not in PRESETS:
        import difflib

        close = difflib.get_close_matches(name, PRESETS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown model preset {name!r}{hint} known: {sorted(PRESETS)}")
    return PRESETS[name]
