"""Scores requests with a BERT (masked LM) model by pseudo-log-likelihood (Salazar et al.
2020, "Masked Language Model Scoring"): each continuation token is masked in turn and
predicted from the context and the rest of the continuation; the log-probabilities of
the true tokens are summed.

    [CLS] context  c1 [MASK] c3  [SEP]     one row per continuation token (here c2)

A cloze answer is scored the same way: is_greedy says every masked token's argmax (one
mask at a time) is the true token. A context too long for max_length - 2 tokens is cut
from the left. Rows are batched across requests (a row is one masked position), and the
masked-LM head runs at the masked position only.

Rolling: pseudo-log-likelihood over windows of max_length - 2 tokens, chunked as the GPT
scorer's (windows.py): the first window scores all its tokens, each later window the
next `stride` tokens with the tokens before them as left context; every token is
masked once. The default stride is the window: disjoint windows.

Every BERT variant is scored by its own masked-LM head (`mlm_logits`), which ALBERT's
differs from BERT's (tanh GELU, and it maps C back to the E-wide embedding). ELECTRA is
scored with its generator: the discriminator has no masked-LM head (it tells original
tokens from replacements), while the generator trained jointly with it (Clark et al. 2020)
is a masked LM over the same vocabulary and embeddings, so a pseudo-log-likelihood can be
read from it. Its numbers measure the generator, a quarter of the discriminator's width by
default, not the discriminator that fine-tuning keeps.

Generation is not supported: BERT has no left-to-right decoder.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tokenizers import Tokenizer

from stages.evaluate.requests import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    RollingRequest,
    RollingResult,
)
from stages.evaluate.scorers.batching import length_batches, pad_right
from stages.evaluate.scorers.encoding import encode_pairs, encode_texts, score_fitting
from stages.evaluate.scorers.token_scores import sum_by_request
from stages.evaluate.scorers.windows import check_stride, score_chunks
from stages.models.bert.model import BertForPreTraining
from stages.models.bert.electra import ElectraForPreTraining, ElectraGenerator


class GenerationNotSupported(ValueError):
    """A generation request for a model family that cannot generate (BERT)."""


class BertScorer:
    family = "bert"

    def __init__(self, model: BertForPreTraining | ElectraForPreTraining, tokenizer: Tokenizer, *, cls_id: int,
                 sep_id: int, mask_id: int, pad_id: int, batch_size: int = 32, device: str | torch.device = "cpu",
                 max_length: int | None = None):
        self.model = model.to(device).float().eval()
        self.masked_lm = masked_language_model(self.model)
        self.tokenizer = tokenizer
        self.cls_id, self.sep_id, self.mask_id, self.pad_id = cls_id, sep_id, mask_id, pad_id
        self.batch_size = batch_size
        self.device = device
        self.max_length = max_length or model.config.max_seq_len
        self.window = self.max_length - 2  # [CLS] and [SEP] around the text

    def loglikelihood(self, requests: list[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        pairs = encode_pairs(self.tokenizer, [(r.context, r.continuation) for r in requests], prefix_id=None)
        return score_fitting(requests, pairs, self.window, self._loglikelihood)

    def _loglikelihood(self, requests: list[LoglikelihoodRequest], pairs: list[tuple[list[int], list[int]]]
                       ) -> list[LoglikelihoodResult]:
        sequences, masked = [], []
        for context, continuation in pairs:
            kept = context[max(0, len(context) - (self.window - len(continuation))):]
            sequences.append([self.cls_id, *kept, *continuation, self.sep_id])
            masked.append(range(1 + len(kept), 1 + len(kept) + len(continuation)))
        logprobs, greedy = self._pseudo_log_likelihood(sequences, masked)
        return [LoglikelihoodResult(logprob, is_greedy, len(continuation),
                                    truncated=len(context) + len(continuation) > self.window)
                for logprob, is_greedy, (context, continuation) in zip(logprobs, greedy, pairs, strict=True)]

    def loglikelihood_rolling(self, requests: list[RollingRequest], stride: int | None = None
                              ) -> list[RollingResult]:
        stride = check_stride(stride, self.window, self.family)
        documents = encode_texts(self.tokenizer, [r.text for r in requests])
        sequences, masked, owners = [], [], []
        for index, tokens in enumerate(documents):
            for start, end in score_chunks(len(tokens), self.window, stride):
                window_start = max(0, end - self.window)
                sequences.append([self.cls_id, *tokens[window_start:end], self.sep_id])
                masked.append(range(1 + start - window_start, 1 + end - window_start))
                owners.append(index)
        logprobs, _ = self._pseudo_log_likelihood(sequences, masked)
        totals = [0.0] * len(requests)
        for owner, logprob in zip(owners, logprobs, strict=True):
            totals[owner] += logprob
        return [RollingResult(total, len(tokens)) for total, tokens in zip(totals, documents, strict=True)]

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        raise GenerationNotSupported(
            f"the bert scorer cannot generate text ({len(requests)} generation requests): a masked LM "
            "has no left-to-right decoder; evaluate generation tasks with a gpt or t5 model, or leave "
            "them out of this model's evaluate.tasks")

    @torch.inference_mode()
    def _pseudo_log_likelihood(self, sequences: list[list[int]], masked: list[Sequence[int]]
                               ) -> tuple[list[float], list[bool]]:
        """Per sequence: sum over its `masked` positions p of log P(sequence[p] | the
        sequence with p masked), and whether every one of them is the argmax."""
        rows = [(index, position) for index, positions in enumerate(masked) for position in positions]
        logprobs, greedy = [0.0] * len(sequences), [True] * len(sequences)
        for batch in length_batches([len(sequences[index]) for index, _ in rows], self.batch_size):
            ids, attention = pad_right([sequences[rows[r][0]] for r in batch], self.pad_id, self.device)  # (B, T)
            positions = torch.tensor([rows[r][1] for r in batch], device=self.device)  # (B,)
            arange = torch.arange(len(batch), device=self.device)
            targets = ids[arange, positions].clone()  # (B,)
            ids[arange, positions] = self.mask_id
            hidden = self.masked_lm.backbone.hidden_states(ids, attention)[arange, positions]  # (B, C)
            owners = sorted({rows[r][0] for r in batch})
            segment_of = {owner: s for s, owner in enumerate(owners)}
            sums, all_greedy = sum_by_request(
                self.masked_lm.mlm_logits(hidden), targets,  # the head on the masked positions only
                torch.tensor([segment_of[rows[r][0]] for r in batch], device=self.device), len(owners))
            for owner, logprob, is_greedy in zip(owners, sums, all_greedy, strict=True):
                logprobs[owner] += logprob
                greedy[owner] = greedy[owner] and is_greedy
        return logprobs, greedy


def masked_language_model(model: BertForPreTraining | ElectraForPreTraining
                          ) -> BertForPreTraining | ElectraGenerator:
    """The network that predicts masked tokens, with an encoder at `.backbone` and its head
    `.mlm_logits(hidden)` (hidden states (N, C) of chosen positions -> logits (N, V);
    projecting every position would cost T times more): the model itself for BERT, ALBERT
    and SpanBERT, ELECTRA's generator for variant electra (module docstring). Read from the
    config, not the class: the pretrain stage's in-loop evaluation passes a wrapper
    (`stages.pretrain.eval_tasks.LiveModule`)."""
    return model.generator if model.config.variant == "electra" else model
