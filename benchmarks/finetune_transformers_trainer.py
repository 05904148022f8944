"""The reference side of benchmarks/finetune_vs_transformers.py: fine-tune a Hugging Face
BERT folder with transformers' own model classes and Trainer, on the rows our stage
prepared (`stages.finetune.prepared.PreparedTask`), with our stage's hyperparameters,
and score its predictions with our stage's scorers.

Same data (identical token ids, labels and seeded subsets), same optimizer settings
(AdamW with the stage's betas, lr, weight decay off for biases and LayerNorm, linear
warmup then linear decay to 0 over the same number of steps, gradient clipping), same
batch and epochs, same scoring code: what is left to differ is the model code, the
training loop, and the random draws (head init, shuffling, dropout).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stages.finetune.encode import EncodedSplit

HF_CLASSES = {  # our head kind -> transformers class
    "sequence_classification": "BertForSequenceClassification",
    "token_classification": "BertForTokenClassification",
    "span_extraction": "BertForQuestionAnswering",
}


class EncodedDataset(torch.utils.data.Dataset):
    """Rows of an EncodedSplit as the dicts transformers' models take; head None:
    inputs only (prediction)."""

    def __init__(self, split: EncodedSplit, head: str | None):
        self.split, self.head = split, head

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        split = self.split
        item = {"input_ids": torch.as_tensor(split.input_ids[i], dtype=torch.long),
                "attention_mask": torch.as_tensor(split.attention_mask[i], dtype=torch.long)}
        if split.token_type_ids is not None:
            item["token_type_ids"] = torch.as_tensor(split.token_type_ids[i], dtype=torch.long)
        if self.head == "span_extraction":
            item["start_positions"] = torch.as_tensor(split.labels[i, 0], dtype=torch.long)
            item["end_positions"] = torch.as_tensor(split.labels[i, 1], dtype=torch.long)
        elif self.head is not None:
            item["labels"] = torch.as_tensor(split.labels[i], dtype=torch.long)
        return item


def train_with_transformers(spec, cfg, prepared, *, model_path: str, seed: int, output_dir: Path,
                            threads: int) -> dict[str, Any]:
    """Train, predict dev, score: {"scores": {...}, "seconds", "train_seconds", "steps",
    "train_rows"} (rows: SQuAD windows, else examples). `cfg` is the FinetuneConfig our stage ran with (num_workers 1)."""
    import transformers

    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()  # the load report lists the new head's weights
    started = time.perf_counter()
    cls = getattr(transformers, HF_CLASSES[spec.head])
    kwargs: dict[str, Any] = {}
    if spec.head != "span_extraction":
        kwargs["num_labels"] = spec.num_labels
    if cfg.classifier_dropout is not None:
        kwargs["classifier_dropout"] = cfg.classifier_dropout
    transformers.set_seed(seed)
    model = cls.from_pretrained(model_path, **kwargs)
    train = prepared.encoded["train"]
    steps_per_epoch = math.ceil(len(train) / cfg.micro_batch_size) // cfg.gradient_accumulation_steps
    total_steps = max(1, steps_per_epoch * cfg.epochs)
    args = transformers.TrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=cfg.micro_batch_size,
        per_device_eval_batch_size=cfg.eval_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps, learning_rate=cfg.lr,
        weight_decay=cfg.weight_decay, adam_beta1=cfg.adam_betas[0], adam_beta2=cfg.adam_betas[1],
        num_train_epochs=cfg.epochs, lr_scheduler_type="linear",
        warmup_steps=round(cfg.warmup_fraction * total_steps),  # our stage's rounding
        max_grad_norm=cfg.grad_clip if cfg.grad_clip > 0 else 1e9, seed=seed, data_seed=seed,
        save_strategy="no", eval_strategy="no", report_to="none", use_cpu=True,
        logging_steps=max(1, total_steps // 10), disable_tqdm=True, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=EncodedDataset(train, spec.head))
    trainer.remove_callback(transformers.PrinterCallback)  # a dict per logging step
    train_started = time.perf_counter()
    result = trainer.train()
    train_seconds = time.perf_counter() - train_started
    predictions = trainer.predict(EncodedDataset(prepared.encoded["dev"], None)).predictions
    scores = prepared.scorers["dev"](_flat(predictions))
    return {"scores": scores, "seconds": time.perf_counter() - started, "train_seconds": train_seconds,
            "steps": result.global_step, "train_rows": len(train)}


def _flat(predictions) -> np.ndarray:
    """transformers' outputs in our flat layout: (N, k), (N, T * labels), or start then
    end logits (N, 2T) (`stages.finetune.model_source.flat_outputs`)."""
    parts = predictions if isinstance(predictions, tuple) else (predictions,)
    return np.concatenate([np.asarray(p, dtype=np.float32).reshape(len(p), -1) for p in parts], axis=1)
