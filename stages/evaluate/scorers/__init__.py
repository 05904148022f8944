"""Scorers: a pretrained model that answers the requests of stages/evaluate/requests.py.

    scorer = load_scorer("runs/gpt-tiny/pretrain/<fingerprint>/model", batch_size=32)
    scorer.family, scorer.max_length
    scorer.loglikelihood(requests); scorer.loglikelihood_rolling(requests, stride=None)
    scorer.generate(requests)

The family (model_config.json's "family") picks the scorer:
    gpt   GPTScorer   causal LM, as lm-evaluation-harness's HFLM (gpt.py)
    t5    T5Scorer    the continuation is the span of the first sentinel (t5.py)
    bert  BertScorer  pseudo-log-likelihood, one masked token per row (bert.py); no generation;
                      every variant by its own MLM head, ELECTRA by its generator
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer

from stages.evaluate.requests import Scorer
from stages.evaluate.scorers.bert import BertScorer, GenerationNotSupported
from stages.evaluate.scorers.gpt import GPTScorer
from stages.evaluate.scorers.special_tokens import sentinel_ids, special_token_id
from stages.evaluate.scorers.t5 import T5Scorer
from stages.models.build import CONFIG_NAME, load_pretrained

TOKENIZER_NAME = "tokenizer.json"

__all__ = ["BertScorer", "GPTScorer", "GenerationNotSupported", "T5Scorer", "load_scorer"]


def load_scorer(model_dir: str | Path, batch_size: int = 32, device: str | torch.device = "cpu",
                max_length: int | None = None) -> Scorer:
    """The scorer for the model saved in `model_dir`: the pretrain stage's `model/` folder
    (model.safetensors, model_config.json, tokenizer.json) or the stage's output folder
    that holds it. Weights in fp32, eval mode, on `device`.

    batch_size: rows per forward pass (a row is one request, one rolling window, or for
    BERT one masked token). max_length: the context in tokens; GPT and BERT default to their
    max_seq_len (and refuse a larger one), T5 to 512 for its encoder (it has relative
    positions and no length of its own)."""
    model_dir = Path(model_dir)
    if not (model_dir / CONFIG_NAME).is_file() and (model_dir / "model" / CONFIG_NAME).is_file():
        model_dir = model_dir / "model"
    tokenizer_path = model_dir / TOKENIZER_NAME
    if not tokenizer_path.is_file():
        raise FileNotFoundError(
            f"{tokenizer_path} not found: load_scorer reads a pretrain stage's `model/` folder, which "
            "holds model.safetensors, model_config.json and tokenizer.json (re-run the pretrain stage "
            "if it is incomplete)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    model = load_pretrained(model_dir, device=str(device))  # errors name the missing or damaged file
    family = json.loads((model_dir / CONFIG_NAME).read_text()).get("family", "gpt")
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    if tokenizer.get_vocab_size() > model.config.vocab_size:
        raise ValueError(
            f"{tokenizer_path} has {tokenizer.get_vocab_size()} tokens but the model in {model_dir} "
            f"embeds only {model.config.vocab_size}: the tokenizer does not belong to these weights")
    common = {"batch_size": batch_size, "device": device}
    if family == "gpt":
        _check_max_length(max_length, model.config.max_seq_len, model_dir)
        return GPTScorer(model, tokenizer, eot_id=special_token_id(tokenizer, "eos_token", tokenizer_path, family),
                         max_length=max_length, **common)
    if family == "bert":
        _check_max_length(max_length, model.config.max_seq_len, model_dir)
        ids = {role: special_token_id(tokenizer, f"{role}_token", tokenizer_path, family)
               for role in ("cls", "sep", "mask", "pad")}
        return BertScorer(model, tokenizer, **{f"{role}_id": i for role, i in ids.items()},
                          max_length=max_length, **common)
    if family == "t5":
        sentinels = sentinel_ids(tokenizer)
        if len(sentinels) < 2:
            raise ValueError(f"{tokenizer_path} has no <extra_id_0> / <extra_id_1> sentinels; the t5 scorer "
                             "frames every continuation as a sentinel span (use the unigram tokenizer recipe)")
        return T5Scorer(model, tokenizer, sentinel_ids=sentinels, max_length=max_length or 512, **common)
    raise ValueError(f"{model_dir / CONFIG_NAME}: no scorer for model family {family!r}; known: gpt, bert, t5")


def _check_max_length(max_length: int | None, model_max: int, model_dir: Path) -> None:
    if max_length is not None and max_length > model_max:
        raise ValueError(f"max_length={max_length} exceeds the model's max_seq_len={model_max} "
                         f"({model_dir / CONFIG_NAME}); its position table has no more rows")
