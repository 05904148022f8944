"""Masked language modelling (bert): a window of documents as sentences -> BERT pairs
[CLS] A [SEP] B [SEP] padded to seq_len, with nsp / sop labels, static masks stored
(writer.py, sentence_pairs.py); the loader draws dynamic masks (batch.py), both by the
policy masking.py builds from the index; the loss scores mlm + nsp | sop, + SpanBERT's
sbo (loss.py), or ELECTRA's replaced-token detection on the same dataset (rtd.py)."""

from __future__ import annotations

from stages.objectives.base import PretrainingObjective, special_entries
from stages.objectives.mlm.writer import MlmWriter


class MlmObjective(PretrainingObjective):
    name = "mlm"
    model_family = "bert"
    by_sentence = True

    def index_entries(self, config, ids):
        mlm = config.mlm.model_dump(mode="json")
        if config.mlm.unit != "token":
            mlm["continuation_ids"] = list(ids.continuation)
        return {"special": special_entries(ids), "mlm": mlm}

    def writer(self, spec, path, max_rows, rng):
        return MlmWriter(spec, path, max_rows, rng)

    def split_stats(self, batches, seq_len, pad_id, sentinels):
        """Padding, masked fraction (static masking) and pair-label balance."""
        examples = real_tokens = masked = maskable = label_1 = labelled = 0
        for columns in batches:
            num_tokens = columns["num_tokens"]
            examples += len(num_tokens)
            real_tokens += int(num_tokens.sum())
            if "labels" in columns:
                masked += int((columns["labels"] != pad_id).sum())
                # [CLS] and every [SEP] are never maskable: 3 per pair, 2 for one segment
                specials = 3 if "next_sentence_label" in columns else 2
                maskable += int(num_tokens.sum()) - specials * len(num_tokens)
            if "next_sentence_label" in columns:
                label_1 += int(columns["next_sentence_label"].sum())
                labelled += len(num_tokens)
        out = {"padding_fraction": round(1 - real_tokens / (max(examples, 1) * seq_len), 4)}
        if maskable:
            out["masked_fraction"] = round(masked / maskable, 4)
        if labelled:
            out["pair_label_1_fraction"] = round(label_1 / labelled, 4)
        return out

    def batch_builder(self, index, seed):
        from stages.objectives.mlm.batch import MlmBatch
        return MlmBatch(index, seed)

    def loss(self, index, index_path, span_boundary=False, variant=None):
        from stages.objectives.mlm.loss import MaskedLM
        from stages.objectives.mlm.rtd import ReplacedTokenDetection
        sentence_task = index["mlm"]["sentence_task"]
        if variant == "electra":
            if sentence_task != "none":
                raise ValueError(
                    f"{index_path}: dataset.mlm.sentence_task is {sentence_task!r}, but "
                    "pretrain.model.variant electra trains replaced-token detection, which has no sentence-pair "
                    "head; set dataset.mlm.sentence_task: none")
            return ReplacedTokenDetection(index["seq_len"])
        return MaskedLM(index["seq_len"], sentence_task, span_boundary)
