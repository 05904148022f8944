"""ELECTRA (Clark et al. 2020) in plain PyTorch: a discriminator trained by replaced-token
detection and a small generator trained jointly by masked-LM, weight-compatible with
Hugging Face `ElectraForPreTraining` / `ElectraForMaskedLM` / `ElectraModel` (see
`convert_electra.py`).

    config = BertConfig(variant="electra", vocab_size=30522, hidden_size=256, num_heads=4,
                        num_layers=12, embedding_size=128)          # electra-small
    model = ElectraForPreTraining(config)
    generator_logits, discriminator_logits, replaced = model(input_ids, attention_mask,
                                                             token_type_ids, labels=mlm_labels)
    hidden = model.backbone.hidden_states(input_ids, attention_mask)   # the discriminator, (B, T, C)

Both networks are `Bert` encoders of variant "electra" (post-LN, exact GELU, no pooler):

- the discriminator at `.backbone` (what fine-tuning keeps), with a head dense C -> C,
  GELU, dense C -> 1: is this token the original or a replacement?
- the generator at `.generator` (`ElectraGenerator`): the same depth, hidden size, heads
  and feed-forward scaled by `generator_size` (paper: 1/4 small, 1/3 base), and an MLM head
  dense Cg -> E, GELU, LayerNorm, decoder tied to the word embedding plus a bias. It
  shares the word, position and token-type embeddings (and their LayerNorm) with the
  discriminator (section 3.2): one module at both places, so the state dict names it twice
  and stores it once, as ALBERT's shared layers.

The forward pass is the paper's: the generator predicts the masked positions of the
dataset's MLM input; replacements are sampled from its softmax (no gradient flows
through the sampling); the discriminator reads the original tokens with the masked
positions replaced by the samples and labels each token replaced (sample != original; a
correctly guessed token counts as original). The losses are the RTD objective's
(stages/objectives/mlm/rtd.py): generator MLM + rtd_weight (lambda = 50) x the
discriminator's binary cross-entropy over the real tokens.

Shapes: B batch, T sequence length, C hidden size, Cg generator hidden size, E embedding
size, V vocabulary size, N masked positions in the batch.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from stages.data.masking import IGNORE_INDEX
from stages.models.bert.config import BertConfig
from stages.models.bert.model import Bert, BertEmbeddings, BertForPreTraining, init_bert_weights
from stages.models.mlp import ACTIVATIONS


def generator_config(config: BertConfig) -> BertConfig:
    """The generator's config: the discriminator's (same depth, embeddings, vocabulary),
    with hidden size and heads scaled by generator_size and a 4x feed-forward. Its own
    generator_size is 1: it describes no generator of its own (and 1 always divides)."""
    hidden, heads = config.generator_shape()
    return dataclasses.replace(config, hidden_size=hidden, num_heads=heads, intermediate_size=4 * hidden,
                               generator_size=1.0)


def _check_electra(config: BertConfig, what: str) -> None:
    # BertConfig itself refuses span_boundary_objective with variant electra.
    if config.variant != "electra":
        raise ValueError(f"{what} builds variant 'electra' BERTs, got variant {config.variant!r}; "
                         "set variant='electra' (pretrain.model.variant: electra)")


class ElectraGenerator(nn.Module):
    """The generator (Hugging Face `ElectraForMaskedLM`): an encoder and the MLM head.
    `config` is the generator's own shape (`generator_config` of the discriminator's);
    `embeddings`: the discriminator's, to share (None: its own, as a standalone model)."""

    def __init__(self, config: BertConfig, embeddings: BertEmbeddings | None = None):
        super().__init__()
        _check_electra(config, "ElectraGenerator")
        self.config = config
        Cg, E = config.hidden_size, config.embedding_size
        self.backbone = Bert(config)
        if embeddings is not None:
            self.backbone.embeddings = embeddings
        self.mlm_activation = ACTIVATIONS["gelu"]  # Hugging Face's ElectraGeneratorPredictions: always exact GELU
        self.mlm_transform = nn.Linear(Cg, E)
        self.mlm_norm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.mlm_decoder = nn.Linear(E, config.vocab_size, bias=False)
        self.mlm_decoder.weight = self.backbone.embeddings.word_embedding.weight  # tied
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        for module in (self.mlm_transform, self.mlm_norm):
            init_bert_weights(module)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """MLM logits (B, T, V)."""
        hidden = self.backbone.hidden_states(input_ids, attention_mask, token_type_ids)  # (B, T, Cg)
        return self.mlm_logits(hidden)

    # The same head and parameter count as BERT's (the same attribute names): the MLM head
    # on generator hidden states (..., Cg) -> logits (..., V), which the evaluate stage's
    # BERT scorer runs on the masked positions only (ELECTRA is scored with its generator).
    mlm_logits = BertForPreTraining.mlm_logits
    num_parameters = BertForPreTraining.num_parameters


class ElectraForPreTraining(nn.Module):
    """The discriminator (`.backbone` and its RTD head) and the generator trained with it."""

    def __init__(self, config: BertConfig):
        super().__init__()
        _check_electra(config, "ElectraForPreTraining")
        self.config = config
        C = config.hidden_size
        self.backbone = Bert(config)
        # Hugging Face's ElectraDiscriminatorPredictions: dense, hidden_act, dense to one logit
        self.discriminator_transform = nn.Linear(C, C)
        self.discriminator_activation = ACTIVATIONS[config.hidden_act]
        self.discriminator_prediction = nn.Linear(C, 1)
        for module in (self.discriminator_transform, self.discriminator_prediction):
            init_bert_weights(module)
        self.generator = ElectraGenerator(generator_config(config), embeddings=self.backbone.embeddings)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                sampler: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns (generator MLM logits (B, T, V), discriminator logits (B, T), replaced (B, T) bool).

        input_ids (B, T): the masked input (what the generator reads). labels (B, T): the
        original token at masked positions, -100 elsewhere; the positions to replace.
        sampler: the random generator the replacements are drawn with (None: torch's global
        one, whose state the pretrain stage seeds per rank and checkpoints)."""
        if labels is None:
            raise ValueError("ElectraForPreTraining needs labels (the masked positions and their original "
                             "tokens): the generator's samples replace those positions")
        generator_logits = self.generator(input_ids, attention_mask, token_type_ids)  # (B, T, V)
        masked = labels != IGNORE_INDEX  # (B, T)
        original = torch.where(masked, labels, input_ids)  # (B, T)
        corrupted = original.clone()
        corrupted[masked] = sample_tokens(generator_logits.detach()[masked], sampler)  # (N,)
        replaced = corrupted != original  # (B, T); a correct guess is no replacement
        discriminator_logits = self.discriminator_logits(corrupted, attention_mask, token_type_ids)  # (B, T)
        return generator_logits, discriminator_logits, replaced

    def discriminator_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                             token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Replaced-token logits (B, T) of the discriminator on input_ids (> 0: replaced)."""
        hidden = self.backbone.hidden_states(input_ids, attention_mask, token_type_ids)  # (B, T, C)
        x = self.discriminator_activation(self.discriminator_transform(hidden))  # (B, T, C)
        return self.discriminator_prediction(x).squeeze(-1)  # (B, T)

    # Unique parameters of both networks (the shared embeddings counted once), as BERT
    # counts; the paper's counts are the discriminator's: `backbone.num_parameters()`.
    num_parameters = BertForPreTraining.num_parameters

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs per token of both networks, 6 * N + 12 * L * (C + Cg) * T (see
        `BertForPreTraining.flops_per_token`): N is every parameter but the position and
        token-type tables, with the word embedding counted once (for the generator's MLM
        decoder; both networks only look it up). The generator's head is counted at every
        position; sampling is not counted."""
        seq_len = self.config.max_seq_len if seq_len is None else seq_len
        n = self.num_parameters(exclude_position_embedding=True)
        widths = self.config.hidden_size + self.generator.config.hidden_size
        return 6 * n + 12 * self.config.num_layers * widths * seq_len


@torch.no_grad()
def sample_tokens(logits: torch.Tensor, sampler: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of logits (N, V), drawn from softmax(logits) (temperature 1, as
    the paper), in fp32; no gradient: the generator learns from its MLM loss only."""
    if logits.size(0) == 0:
        return torch.empty(0, dtype=torch.long, device=logits.device)
    probs = torch.softmax(logits.float(), dim=-1)  # (N, V)
    return torch.multinomial(probs, 1, generator=sampler).squeeze(-1)  # (N,)
