"""The pretrain stage (driver side): train a model on the dataset stage's shards with Ray
Train + DeepSpeed ZeRO, and export it. The dataset's objective picks what is trained:
clm -> GPT, mlm (+ nsp / sop) -> BERT with its pretraining heads, span -> T5; it must
match pretrain.model.family.

Reads   ctx.inputs["dataset"]/index.json + Arrow shards (train and validation splits)
        ctx.inputs["tokenizer"]/tokenizer.json
        pretrain.init_from (optional): a checkpoint folder to start from (stages/pretrain/init_from.py)
Writes  ctx.output_dir/metrics.jsonl   one record per log_every / eval_every steps
        ctx.output_dir/ray/pretrain/   Ray Train run state and checkpoints (to resume)
        ctx.output_dir/deepspeed_config.json   the DeepSpeed config we generated, the user's
                                       pretrain.deepspeed_config file, the merge, overrides
        ctx.output_dir/model/          model.safetensors, model_config.json, tokenizer.json
        ctx.output_dir/samples.jsonl   with pretrain.samples: the live model's text at its
                                       steps (stages/pretrain/samples.py)
        ctx.output_dir/snapshots/      with pretrain.snapshot_every: step-<NNNNNNN>/ folders
                                       holding what model/ holds, and index.json (step,
                                       training tokens, path of each); stages/pretrain/snapshots.py
        ctx.output_dir/hf/             the same weights as a Hugging Face folder (config.json,
                                       model.safetensors, tokenizer files): GPT2LMHeadModel,
                                       BertForPreTraining or T5ForConditionalGeneration (ELECTRA:
                                       ElectraForPreTraining, its generator in hf/generator/);
                                       none for the original Transformer (t5 variant
                                       transformer), which transformers has no class for

With pretrain.eval_tasks, the tasks' files are read here (from data_dir) and planned
once; every eval_every the workers score them on the live model and log
eval/<task>/<metric> beside the validation loss (stages/pretrain/eval_tasks.py).

Everything the Ray Train workers need travels as one PretrainJob (stages/pretrain/job.py),
built and checked here before Ray starts.

Calling `run` again with the same output_dir (after the driver was killed, say) resumes
from the last committed checkpoint and still ends at max_steps.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.data.packed import read_index
from stages.pretrain.config import PretrainConfig
from stages.pretrain.eval_tasks import plan_eval_tasks, scorer_token_ids
from stages.pretrain.init_from import resolve_init_source
from stages.pretrain.job import PretrainJob
from stages.pretrain.sample_plan import plan_samples
from stages.pretrain.train_loop import train_loop_per_worker
from stages.ray_tasks import map_where_files_are
from stages.training.deepspeed_config import resolve_deepspeed_config
from stages.training.engine_settings import EngineSettings
from stages.training.launch import fit

RUN_NAME = "pretrain"
SUMMARY_KEYS = (
    "steps", "final_loss", "val_loss", "val_perplexity", "tokens_per_second",
    "num_parameters", "resumed_from_step", "mfu",
)


def run(ctx) -> dict[str, Any]:
    """Train, export, and return the stage metrics: steps, final_loss, val_loss,
    val_perplexity, tokens_per_second, num_parameters, resumed_from_step, mfu,
    wall_seconds, the last validation's per-objective val_<part>_loss / _accuracy, the
    last eval/<task>/<metric> scores of pretrain.eval_tasks, and with pretrain.samples
    sampling_seconds and sampling_share (of wall_seconds)."""
    started = time.time()
    cfg: PretrainConfig = ctx.config
    dataset_dir = Path(ctx.inputs["dataset"]).resolve()
    tokenizer_path = Path(ctx.inputs["tokenizer"]).resolve() / "tokenizer.json"
    index = read_dataset_index(dataset_dir, cfg.model.family, cfg.model.variant)
    # Resolved and checked against the data here, before Ray starts; the workers load it.
    init_source = (resolve_init_source(cfg.init_from, cfg.model, index, dataset_dir / "index.json")
                   if cfg.init_from else None)
    if not tokenizer_path.is_file():
        raise FileNotFoundError(f"{tokenizer_path} not found: the tokenizer stage's output is incomplete")

    output_dir = Path(ctx.output_dir).resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    # Read and merged here, so a broken file fails before Ray starts; logged and written
    # to output_dir/deepspeed_config.json.
    user_deepspeed_config, deepspeed_overrides = resolve_deepspeed_config(
        EngineSettings.from_pretrain(cfg), cfg.deepspeed_config, output_dir)
    # Planned here, once: a missing task file or an unusable tokenizer fails before Ray starts.
    eval_plans, eval_token_ids = [], {}
    if cfg.eval_tasks:
        eval_plans = plan_eval_tasks(cfg, Path(ctx.experiment.resolved_data_dir))
        eval_token_ids = scorer_token_ids(cfg.model.family, tokenizer_path, index["vocab_size"])
    # Tokenized and checked against the context here: a prompt too long fails before Ray starts.
    sample_plan = (plan_samples(cfg, tokenizer_path, dataset_dir, index, ctx.experiment.seed, ctx.node_transfer)
                   if cfg.samples.enabled else None)
    # Checked here (job.py), before Ray starts; every worker gets this one record.
    job = PretrainJob(
        config=cfg,
        seed=ctx.experiment.seed,
        dataset_dir=dataset_dir,
        tokenizer_path=tokenizer_path,
        output_dir=output_dir,
        seq_len=index["seq_len"],
        vocab_size=index["vocab_size"],
        token_ids=model_token_ids(index),
        metrics_log=ctx.metrics_log,
        experiment=ctx.experiment,
        fingerprint=ctx.fingerprint,
        init_source=init_source,
        user_deepspeed_config=user_deepspeed_config,
        eval_plans=eval_plans,
        eval_token_ids=eval_token_ids,
        sample_plan=sample_plan,
    )
    result = fit(
        train_loop_per_worker,
        job.as_loop_config(),
        num_workers=cfg.num_workers,
        # On an object store, checkpoints go straight to the bucket: a driver killed
        # mid-run (or its machine lost) resumes from there.
        storage_path=f"{ctx.output_url}/ray" if getattr(ctx, "output_url", None) else output_dir / "ray",
        run_name=RUN_NAME,
        max_failures=cfg.max_failures,
        use_gpu=cfg.gpus_per_worker > 0,
        transfer=ctx.node_transfer,
    )
    # Where model/ is: in an object-store run, a task on a node that fetches it (the
    # driver holds no weights); here otherwise.
    map_where_files_are(export_hugging_face_job, [HuggingFaceExport(
        output_dir / "model", output_dir / "hf", tokenizer_path, tokenizer_path.parent / "special_tokens_map.json")],
        desc="pretrain: export hf/", transfer=ctx.node_transfer)
    reported = result.metrics or {}
    metrics = {key: reported.get(key) for key in SUMMARY_KEYS}
    # the last validation's per-objective metrics, and the last in-loop task scores
    metrics.update({key: value for key, value in reported.items() if key.startswith(("val_", "eval/"))})
    if cfg.deepspeed_config:
        metrics["deepspeed_overrides"] = "; ".join(map(str, deepspeed_overrides)) or "none"
    metrics["wall_seconds"] = time.time() - started
    if sample_plan is not None:
        # This attempt's seconds spent sampling (rank 0), and their share of the stage's time.
        metrics["sampling_seconds"] = reported.get("sampling_seconds")
        metrics["sampling_share"] = (reported["sampling_seconds"] / metrics["wall_seconds"]
                                     if reported.get("sampling_seconds") is not None else None)
    return metrics


@dataclass(frozen=True)
class HuggingFaceExport:
    """The paths by name (not the stage's folder), so that a task on another node
    fetches model/ and the tokenizer's files, and no snapshot."""
    model_dir: Path
    hf_dir: Path
    tokenizer_path: Path
    special_tokens_path: Path


def export_hugging_face_job(job: HuggingFaceExport) -> Path | None:
    return _export_hf(job.model_dir, job.hf_dir, job.tokenizer_path, job.special_tokens_path)


def export_hugging_face(output_dir: Path, tokenizer_path: Path) -> Path | None:
    """Write `output_dir/hf/` from the exported `model/`, with the tokenizer and its
    special tokens, so the run can be loaded by transformers or fine-tuned elsewhere.
    None, and no hf/, for a model transformers has no class for (model/ is then the only
    copy, which every later stage reads)."""
    return _export_hf(output_dir / "model", output_dir / "hf", tokenizer_path,
                      tokenizer_path.parent / "special_tokens_map.json")


def _export_hf(model_dir: Path, hf_dir: Path, tokenizer_path: Path, special_tokens_path: Path) -> Path | None:
    from stages.models import load_pretrained
    from stages.models.hf_export import export_hf, has_hf_class

    special_tokens = json.loads(special_tokens_path.read_text()) if special_tokens_path.is_file() else {}
    model = load_pretrained(model_dir)
    if not has_hf_class(model):
        return None
    return export_hf(model, hf_dir, tokenizer_path, special_tokens)


def read_dataset_index(dataset_dir: Path, family: str, variant: str | None = None) -> dict[str, Any]:
    """The dataset's index.json, checked for what pretraining `family` needs: its
    objective (a clear error naming dataset.objective and pretrain.model.family; variant
    electra: dataset.mlm.sentence_task) and non-empty train and validation splits."""
    from stages.objectives.registry import build_objective

    index = read_index(dataset_dir)  # a clear error if the dataset stage did not finish
    index_path = dataset_dir / "index.json"
    build_objective(index, family, index_path, variant=variant)
    for split in ("train", "validation"):
        if not index.get("splits", {}).get(split, {}).get("rows"):
            raise ValueError(
                f"{index_path}: split {split!r} is missing or empty; the dataset stage must "
                "write both train and validation rows (check dataset.validation_fraction)"
            )
    return index


def model_token_ids(index: dict[str, Any]) -> dict[str, int]:
    """Special token ids the model config takes from the data (each family uses those it
    has: BERT pads with pad_id; T5 also ends targets with eos_id and starts decoding from
    pad_id, as the span loader's decoder_input_ids do)."""
    ids = {"pad_token_id": index.get("pad_id"), "eos_token_id": index.get("eos_id"),
           "decoder_start_token_id": index.get("pad_id")}
    return {name: value for name, value in ids.items() if value is not None}
