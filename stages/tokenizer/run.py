"""Tokenizer: a seeded sample of the ingested documents -> a trained subword tokenizer.

Output (read by the dataset and fine-tuning stages, and by `transformers`):

    output_dir/tokenizer.json           Hugging Face `tokenizers` format, every part included
                                        (Tokenizer.from_file). bpe: <|endoftext|> = 0,
                                        <|pad|> = 1; wordpiece: [PAD] [UNK] [CLS] [SEP] [MASK]
                                        = 0-4; unigram: <pad> </s> <unk> = 0-2, sentinels
                                        <extra_id_99> ... <extra_id_0> = the top 100 ids
    output_dir/special_tokens_map.json  role -> token: {"eos_token": "<|endoftext|>", ...}
    output_dir/tokenizer_config.json    so that transformers.AutoTokenizer.from_pretrained
                                        (output_dir) loads it as a PreTrainedTokenizerFast

With tokenizer.from, the tokenizer of that model folder is written instead of a trained
one (stages/tokenizer/from_folder.py), with the same three files.

Training runs as one Ray task when the driver has started Ray (tokenizers then uses the
task's node's cores), in this process otherwise. Same documents, config and seed -> the
same tokenizer.json bytes.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from stages.ingest.sharding import document_shards
from stages.ray_tasks import bring_to_driver, map_tasks
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.from_folder import read_folder_tokenizer
from stages.tokenizer.output import SPECIAL_TOKENS_FILE, TOKENIZER_FILE, resolve_token_ids
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer
from stages.tokenizer.sample import TrainingSample

if TYPE_CHECKING:
    from stages.context import StageContext

# Below this fraction of the requested vocabulary size, the stage warns (vocabulary_shortfall).
SHORTFALL_RATIO = 0.9


@dataclass(frozen=True)
class TrainJob:
    config: TokenizerConfig
    shards: list[Path]
    seed: int
    output_dir: Path


def run(ctx: StageContext) -> dict:
    shards = document_shards(ctx.inputs["ingest"], ctx.input_manifests.get("ingest"))
    if not shards:
        raise FileNotFoundError(
            f"no document shards in {ctx.inputs['ingest']}/documents; re-run the ingest stage "
            f"(pretrain run <config> --only ingest --force)")
    if ctx.config.from_ is not None:
        bring_to_driver(shards[0], ctx.node_transfer)  # its first texts measure the fertility, read here
        metrics = copy_folder_tokenizer(Path(ctx.config.from_).expanduser().resolve(), shards, ctx.output_dir,
                                        ctx.experiment.dataset.objective)
        ctx.metrics_log.log({"stage": "tokenizer", **metrics})
        return metrics
    job = TrainJob(ctx.config, shards, ctx.experiment.seed, ctx.output_dir)
    [metrics] = map_tasks(train_tokenizer, [job], desc="tokenizer: train", transfer=ctx.node_transfer)
    if (warning := vocabulary_shortfall(metrics, ctx.config)) is not None:
        print(f"[tokenizer] warning: {warning}", flush=True)
    ctx.metrics_log.log({"stage": "tokenizer", **metrics})
    return metrics


def vocabulary_shortfall(metrics: dict, config: TokenizerConfig) -> str | None:
    """Why the trained vocabulary is well below tokenizer.vocab_size, or None. The
    trainers stop quietly when the sample has nothing more to merge (bpe, wordpiece: no
    pair left that occurs min_frequency times; unigram: no more frequent substrings), so
    a small corpus, or a small sample of a big one, gives a small vocabulary."""
    trained, requested = metrics["vocab_size"], metrics["vocab_size_requested"]
    if trained >= SHORTFALL_RATIO * requested:
        return None
    used, corpus = metrics["sample_bytes_used"], metrics["corpus_bytes"]
    frequency = (f" that occur tokenizer.min_frequency = {config.min_frequency} times"
                 if config.kind != "unigram" else "")
    # The held-out 1% is never sampled: a sample of 90% of the corpus or more is all of it.
    if used < 0.9 * corpus:
        sample = (f"its sample, {used:,} bytes of a {corpus:,}-byte corpus "
                  f"(tokenizer.sample_bytes {config.sample_bytes:,}"
                  f"{f', sample_documents {config.sample_documents:,}' if config.sample_documents else ''})")
        fixes = "raise tokenizer.sample_bytes"
    else:
        sample = f"its sample, the whole corpus ({corpus:,} bytes)"
        fixes = "ingest more text"
    if config.kind != "unigram":
        fixes += " or lower tokenizer.min_frequency"
    return (f"the trained vocabulary has {trained:,} tokens, {trained / requested:.0%} of the "
            f"{requested:,} requested (tokenizer.vocab_size): the trainer ran out of merges"
            f"{frequency} in {sample}. For a bigger vocabulary, {fixes}; otherwise set "
            f"tokenizer.vocab_size to about {trained:,}")


def train_tokenizer(job: TrainJob) -> dict:
    recipe = build_recipe(job.config)
    tokenizer = build_tokenizer(recipe)
    sample = TrainingSample(job.shards, job.config.sample_bytes, job.seed,
                            job.config.sample_documents)
    start = time.perf_counter()
    tokenizer.train_from_iterator(sample, trainer=recipe.trainer)
    tokenizer = finish_tokenizer(tokenizer, recipe)
    train_seconds = time.perf_counter() - start
    if sample.bytes_used == 0:
        raise ValueError(
            f"the ingested corpus has no text to train on ({len(job.shards)} empty shards); "
            f"check the ingest sources and ingest.min_chars")

    job.output_dir.mkdir(parents=True, exist_ok=True)
    _write_atomic(job.output_dir / TOKENIZER_FILE, tokenizer.to_str(pretty=True))
    _write_atomic(job.output_dir / SPECIAL_TOKENS_FILE, json.dumps(recipe.special_tokens, indent=2))
    _write_atomic(job.output_dir / "tokenizer_config.json", json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast",
         "model_input_names": list(recipe.model_input_names), **recipe.special_tokens},
        indent=2))

    # Held-out documents were never trained on; fall back to the training sample only for
    # a corpus too small to have any.
    probe = sample.heldout or _first_texts(job.shards, 200)
    # Without templates: fertility counts the text's tokens, not [CLS]/[SEP]/</s>.
    encodings = tokenizer.encode_batch_fast(probe, add_special_tokens=False)
    words = sum(len(text.split()) for text in probe)
    num_tokens = sum(len(e.ids) for e in encodings)
    unknown_id = tokenizer.token_to_id(recipe.unknown_token) if recipe.unknown_token else None
    num_unknown = sum(e.ids.count(unknown_id) for e in encodings) if unknown_id is not None else 0
    return {
        "kind": job.config.kind,
        "vocab_size": tokenizer.get_vocab_size(),
        "vocab_size_requested": job.config.vocab_size,
        "train_seconds": round(train_seconds, 3),
        "fertility": round(num_tokens / max(words, 1), 4),
        "unknown_rate": round(num_unknown / max(num_tokens, 1), 6),
        "fertility_sample": "heldout" if sample.heldout else "train",
        "sample_bytes_used": sample.bytes_used,
        "sample_documents_used": sample.documents_used,
        "corpus_bytes": sample.corpus_bytes,
    }


def copy_folder_tokenizer(folder: Path, shards: list[Path], output_dir: Path, objective: str) -> dict:
    """tokenizer.from: the folder's tokenizer, in this stage's output files; fails here,
    naming the folder, if it lacks a special token `objective` needs."""
    tokenizer, special_tokens = read_folder_tokenizer(folder)
    output_dir.mkdir(parents=True, exist_ok=True)
    _write_atomic(output_dir / TOKENIZER_FILE, tokenizer.to_str(pretty=True))
    _write_atomic(output_dir / SPECIAL_TOKENS_FILE, json.dumps(special_tokens, indent=2))
    _write_atomic(output_dir / "tokenizer_config.json", json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", **special_tokens}, indent=2))
    try:
        resolve_token_ids(output_dir, objective)
    except ValueError as error:
        raise ValueError(f"tokenizer.from={folder}: its tokenizer cannot serve dataset.objective {objective!r} "
                         f"({error}); use the tokenizer of a model trained on that objective") from error
    probe = _first_texts(shards, 200)
    encodings = tokenizer.encode_batch_fast(probe, add_special_tokens=False)
    num_tokens = sum(len(e.ids) for e in encodings)
    unknown_id = tokenizer.token_to_id(special_tokens["unk_token"]) if "unk_token" in special_tokens else None
    state = json.loads(tokenizer.to_str())
    return {
        "kind": f"from:{(state.get('model') or {}).get('type', 'unknown').lower()}",
        "vocab_size": tokenizer.get_vocab_size(),
        "fertility": round(num_tokens / max(sum(len(text.split()) for text in probe), 1), 4),
        "unknown_rate": round(sum(e.ids.count(unknown_id) for e in encodings) / max(num_tokens, 1), 6)
        if unknown_id is not None else 0.0,
        "fertility_sample": "train",
    }


def _first_texts(shards: list[Path], count: int) -> list[str]:
    for shard in shards:
        for batch in pq.ParquetFile(shard).iter_batches(count, columns=["text"]):
            return batch.column("text").to_pylist()
    return []


def _write_atomic(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)

