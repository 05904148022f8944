"""Each fine-tuned task as a Hugging Face transformers folder, `<task>/hf/`, written by the
driver from the task's `model/` after training (so before the stage's manifest):

    facts = export_task_hf(task_dir, spec, cfg)   # {"hf_export": "hf"}, or "not written: <why>"

    config.json, model.safetensors   the task model as its transformers class
                                     (`stages.models.convert_heads`): AutoModelFor-
                                     SequenceClassification (GLUE; STS-B: problem_type
                                     regression, one output), ...QuestionAnswering (SQuAD),
                                     ...TokenClassification (CoNLL-2003), ...Seq2SeqLM (a T5's
                                     text-to-text tasks); id2label / label2id, the tokenizer's
                                     pad (GPT: bos / eos too) ids, finetuning_task
    tokenizer.json                   the tokenizer as the stage encoded the task: its
                                     post-processor adds [CLS] / [SEP], <|endoftext|> or </s>
                                     exactly where the stage's inputs had them
    tokenizer_config.json            special tokens by role; model_max_length =
                                     finetune.max_seq_len (pass truncation=True to cut inputs
                                     where the stage did); model_input_names: token_type_ids
                                     for BERT only (GPT-2 would add them as embeddings)
    generation_config.json           T5: greedy decoding of at most the task's target length,
                                     how the stage predicted (finetune.t5_scoring: rank ranked
                                     the label words instead; the export still generates);
                                     a seq2seq task's finetune.decoding beams, length penalty
                                     and early stopping (`seq2seq_decoding`)

A task without `model/` (finetune.save_model: false) or whose model has no transformers
class (the original Transformer) gets no hf/; metrics.json's `hf_export` says why.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from stages.finetune.encode import BERT_SPECIALS, END_OF_TEXT, PAD, T5_SPECIALS, is_bert_tokenizer, load_task_tokenizer

HF_DIR = "hf"
HF_EXPORT_KEY = "hf_export"  # in metrics.json: HF_DIR, or "not written: <why>"
MODEL_DIR = "model"  # the worker's (stages.finetune.worker), which writes it


def export_task_hf(task_dir: Path, spec, cfg) -> dict[str, str]:
    """Write `task_dir/hf/` from `task_dir/model/` (replacing an older one, never leaving
    a half-written one); the fact for metrics.json."""
    from stages.finetune.saved_model import HEAD_CONFIG_NAME, TOKENIZER_NAME, load_finetuned
    from stages.finetune.text_to_text.model import TextToTextModel
    from stages.models.convert_heads import HfExportRefused, task_model_to_hf

    task_dir = Path(task_dir)
    model_dir = task_dir / MODEL_DIR
    shutil.rmtree(task_dir / HF_DIR, ignore_errors=True)  # never an export of other weights
    if not (model_dir / HEAD_CONFIG_NAME).is_file():
        return _not_written(spec.name, "finetune.save_model is false, so there is no model/ to export")
    model, head_config = load_finetuned(model_dir)
    seq2seq = isinstance(model, TextToTextModel)
    try:
        config, state = task_model_to_hf(model.backbone if seq2seq else model, labels=head_config.get("labels"))
    except HfExportRefused as refused:
        return _not_written(spec.name, str(refused))
    tokenizer = load_task_tokenizer(model_dir / TOKENIZER_NAME, cfg.max_seq_len)
    tokenizer.no_padding()  # transformers pads and truncates per call (truncation=True: at model_max_length)
    tokenizer.no_truncation()
    roles, input_names = special_token_roles(tokenizer)
    config.update(token_ids(tokenizer, roles), finetuning_task=spec.name)
    generation = None
    if seq2seq:
        t5 = model.backbone.config
        generation = {"decoder_start_token_id": t5.decoder_start_token_id, "eos_token_id": t5.eos_token_id,
                      "pad_token_id": t5.pad_token_id, "max_new_tokens": model.max_target_len,
                      "do_sample": False, "num_beams": 1, **seq2seq_decoding(model, cfg)}
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", **roles, "model_max_length": cfg.max_seq_len,
                        "model_input_names": input_names, "padding_side": "right", "truncation_side": "right",
                        "clean_up_tokenization_spaces": False}
    _write_folder(task_dir / HF_DIR, config, state, tokenizer, tokenizer_config, generation)
    print(f"[finetune] {spec.name}: transformers folder {task_dir / HF_DIR} ({config['architectures'][0]})",
          flush=True)
    return {HF_EXPORT_KEY: HF_DIR}


def seq2seq_decoding(model, cfg) -> dict[str, Any]:
    """A translation or summarization task (`stages.finetune.seq2seq`) decodes as
    finetune.decoding says: the same beams, length penalty and early stopping in
    generation_config.json make transformers' `generate` give the stage's tokens
    (tests/unit/test_seq2seq_beam_parity.py). Its cap, max_new_tokens, stays the output
    width (max_source_len + extra_length): the stage's "longest source + extra_length" has
    no transformers form. Other text-to-text tasks generate greedily."""
    from stages.finetune.seq2seq.model import EncoderDecoderSeq2Seq

    decoding = getattr(cfg, "decoding", None)
    if not isinstance(model, EncoderDecoderSeq2Seq) or decoding is None or decoding.num_beams == 1:
        return {}
    return {"num_beams": decoding.num_beams, "length_penalty": decoding.length_penalty, "early_stopping": True}


def special_token_roles(tokenizer: Tokenizer) -> tuple[dict[str, str], list[str]]:
    """(special tokens by Hugging Face role, model_input_names) for the layouts
    `stages.finetune.encode` knows: BERT's, T5's and the GPT recipe's."""
    def present(token: str) -> bool:
        return tokenizer.token_to_id(token) is not None

    if is_bert_tokenizer(tokenizer):
        cls, sep, pad = BERT_SPECIALS
        roles = {"cls_token": cls, "sep_token": sep, "pad_token": pad}
        roles.update({role: token for role, token in (("unk_token", "[UNK]"), ("mask_token", "[MASK]"))
                      if present(token)})
        return roles, ["input_ids", "token_type_ids", "attention_mask"]
    if all(present(token) for token in T5_SPECIALS):
        pad, eos = T5_SPECIALS
        unknown = {"unk_token": "<unk>"} if present("<unk>") else {}
        return {"pad_token": pad, "eos_token": eos, **unknown}, ["input_ids", "attention_mask"]
    # As the tokenizer recipe's special_tokens_map.json: one token starts, ends and stands for unknowns.
    return ({"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT, "unk_token": END_OF_TEXT, "pad_token": PAD},
            ["input_ids", "attention_mask"])


def token_ids(tokenizer: Tokenizer, roles: dict[str, str]) -> dict[str, int]:
    """config.json's pad / bos / eos ids from the tokenizer: a GPT classifier finds each
    row's last real token by pad_token_id (batches of several rows need it)."""
    return {f"{role.removesuffix('_token')}_token_id": tokenizer.token_to_id(token)
            for role, token in roles.items() if role in ("pad_token", "bos_token", "eos_token")}


def _write_folder(directory: Path, config: dict[str, Any], state: dict, tokenizer: Tokenizer,
                  tokenizer_config: dict[str, Any], generation: dict[str, Any] | None) -> None:
    from safetensors.torch import save_file

    from stages.models.hf_export import HF_CONFIG_NAME, HF_WEIGHTS_NAME

    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_file({name: tensor.detach().contiguous().cpu() for name, tensor in state.items()},
              str(staging / HF_WEIGHTS_NAME), metadata={"format": "pt"})
    files = {HF_CONFIG_NAME: config, "tokenizer_config.json": tokenizer_config}
    if generation is not None:
        files["generation_config.json"] = generation
    for name, content in files.items():
        (staging / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
    tokenizer.save(str(staging / "tokenizer.json"))
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(staging, directory)


def _not_written(task: str, reason: str) -> dict[str, str]:
    print(f"[finetune] {task}: no transformers folder: {reason}", flush=True)
    return {HF_EXPORT_KEY: f"not written: {reason}"}
