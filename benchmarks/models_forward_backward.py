"""Forward + backward time per batch of our GPT, BERT and T5 against the same-config
Hugging Face transformers models (weights converted, identical inputs), in fp32 and
under bf16 autocast, plus training FLOPs per token of each family.

    .venv/bin/python benchmarks/models_forward_backward.py [--repeats 5] [--batch 8] [--seq-len 128]

Prints a Markdown table; ratio = ours / transformers (below 1 means we are faster).
Needs transformers (the test/interop dependency); runs on CPU unless --device says otherwise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from stages.models.gpt.convert import gpt_to_hf_gpt2, hf_gpt2_config  # noqa: E402
from stages.models.bert.convert import bert_to_hf_bert, hf_bert_config  # noqa: E402
from stages.models.t5.convert import hf_t5_config, t5_to_hf_t5  # noqa: E402
from stages.models.build import build_preset  # noqa: E402
from stages.objectives.clm.loss import next_token_loss  # noqa: E402
from stages.objectives.output import prediction_loss  # noqa: E402

# One mid-sized shape for every family (bert-mini's): 4 layers, 256 wide, 4 heads.
SHAPE = dict(num_layers=4, hidden_size=256, num_heads=4, dropout=0.0)
VOCAB = 8192


def build_pair(family: str, seq_len: int):
    import transformers

    torch.manual_seed(0)
    if family == "gpt":
        ours = build_preset("gpt-debug", vocab_size=VOCAB, max_seq_len=seq_len, **SHAPE)
        hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**hf_gpt2_config(ours.config)))
        hf.load_state_dict(gpt_to_hf_gpt2(ours.state_dict(), ours.config.num_layers), strict=False)
    elif family == "bert":
        ours = build_preset("bert-debug", vocab_size=VOCAB, max_seq_len=seq_len, **SHAPE)
        hf = transformers.BertForPreTraining(transformers.BertConfig(**hf_bert_config(ours.config)))
        hf.load_state_dict(bert_to_hf_bert(ours.state_dict(), ours.config.num_layers), strict=False)
    else:
        ours = build_preset("t5-debug", vocab_size=VOCAB, head_size=64, ff_size=1024, **SHAPE)
        hf = transformers.T5ForConditionalGeneration(transformers.T5Config(**hf_t5_config(ours.config)))
        hf.load_state_dict(t5_to_hf_t5(ours.state_dict(), ours.config))
    return ours.train(), hf.train()


def step(model, family: str, ids: torch.Tensor, hugging_face: bool) -> None:
    kwargs = {"labels": ids}
    pair_labels = torch.zeros(ids.size(0), dtype=torch.long, device=ids.device)
    if family == "bert":  # Hugging Face only returns a loss with both pre-training labels
        kwargs["next_sentence_label"] = pair_labels
    if hugging_face:
        loss = model(input_ids=ids, **kwargs).loss
    elif family == "gpt":  # ours: the pretraining losses are the objectives' (stages/objectives/)
        loss, _ = next_token_loss(model(ids), ids)
    elif family == "bert":
        mlm_logits, pair_logits = model(ids)
        loss = (prediction_loss(mlm_logits.flatten(0, 1), ids.flatten())[0]
                + prediction_loss(pair_logits, pair_labels)[0])
    else:  # T5's forward(labels=) is its seq2seq loss
        loss = model(ids, **kwargs)[-1]
    loss.backward()
    model.zero_grad(set_to_none=True)


def time_pair(ours, hf, family, ids, dtype, repeats, device) -> tuple[float, float]:
    """Median seconds per step of each model; steps alternate ours / transformers so that
    load from other processes hits both alike."""
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=dtype == "bf16")
    times: dict[bool, list[float]] = {False: [], True: []}
    with autocast:
        step(ours, family, ids, False)  # warm-up
        step(hf, family, ids, True)
        for _ in range(repeats):
            for hugging_face, model in ((False, ours), (True, hf)):
                start = time.perf_counter()
                step(model, family, ids, hugging_face)
                if device == "cuda":
                    torch.cuda.synchronize()
                times[hugging_face].append(time.perf_counter() - start)
    return statistics.median(times[False]), statistics.median(times[True])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"batch {args.batch} x {args.seq_len} tokens, {SHAPE['num_layers']} layers, width "
          f"{SHAPE['hidden_size']}, vocab {VOCAB}; median of {args.repeats}; device {args.device}, "
          f"{torch.get_num_threads()} threads; torch {torch.__version__}\n")
    print("| family | precision | ours (ms) | transformers (ms) | ratio | FLOPs/token (ours) |")
    print("|---|---|---|---|---|---|")
    ids = torch.randint(0, VOCAB, (args.batch, args.seq_len), generator=torch.Generator().manual_seed(0))
    ids = ids.to(args.device)
    for family in ("gpt", "bert", "t5"):
        ours, hf = build_pair(family, args.seq_len)
        ours.to(args.device), hf.to(args.device)
        flops = ours.flops_per_token(args.seq_len)
        for dtype in ("fp32", "bf16"):
            a, b = time_pair(ours, hf, family, ids, dtype, args.repeats, args.device)
            print(f"| {family} | {dtype} | {a * 1e3:.1f} | {b * 1e3:.1f} | {a / b:.2f} | {flops / 1e6:.1f}M |")


if __name__ == "__main__":
    main()
