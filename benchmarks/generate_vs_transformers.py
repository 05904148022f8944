"""Generation tokens/s of our KV-cached decoding (stages.models.generation.generate, what
`pretrain generate` runs) against transformers' `generate` on the same exported weights:
our model from `model/`, transformers' GPT2LMHeadModel from the `hf/` folder the pretrain
stage exports beside it. Greedy and sampled, batch 1 and 8.

    .venv/bin/python benchmarks/generate_vs_transformers.py [--run RUN_DIR] [--new-tokens 64] [--repeats 5]

Without --run, a GPT of one mid-sized shape (4 layers, width 256, 4 heads, vocabulary
8192, 256 positions: the shape of benchmarks/models_forward_backward.py) is initialised,
saved and exported as the pretrain stage does. Prompts are random token ids, 16 per row;
every row generates exactly --new-tokens tokens on both sides (no end-of-text stop), so
both do the same work. Calls alternate ours / transformers so that background load hits
both alike; the table has medians and ratio = ours / transformers in tokens/s (above 1: we
are faster). Greedy outputs are compared token for token (`same tokens`); sampled ones
draw from different random streams and are not.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from stages.models import load_pretrained, save_pretrained  # noqa: E402
from stages.models.generation import generate  # noqa: E402
from stages.models.hf_export import export_hf  # noqa: E402
from stages.models.build import build_preset  # noqa: E402

SHAPE = dict(num_layers=4, hidden_size=256, num_heads=4, dropout=0.0)
VOCAB, CONTEXT, PROMPT_TOKENS = 8192, 256, 16
SAMPLING = dict(temperature=0.8, top_k=50, top_p=0.95)


def model_folders(run: str | None, workdir: Path) -> tuple[Path, Path, str]:
    """(model/, hf/, what) of a finished run's pretrain stage, or of a fresh random GPT."""
    if run is not None:
        index = json.loads((Path(run) / "pipeline.json").read_text())
        store = Path(run) / index.get("store", ".")
        pretrain = store / "pretrain" / index["stages"]["pretrain"]
        return pretrain / "model", pretrain / "hf", f"{run} (pretrain {index['stages']['pretrain']})"
    torch.manual_seed(0)
    model = build_preset("gpt-debug", vocab_size=VOCAB, max_seq_len=CONTEXT, **SHAPE)
    save_pretrained(model, workdir / "model")
    export_hf(model, workdir / "hf")
    return workdir / "model", workdir / "hf", "random GPT, 4 layers x 256, vocabulary 8192"


def ours_call(model, ids, new_tokens, sample: bool, seed: int):
    extra = dict(do_sample=True, generator=torch.Generator(device=ids.device).manual_seed(seed), **SAMPLING) \
        if sample else {}
    return generate(model, ids, new_tokens, **extra)


def theirs_call(model, configs, ids, sample: bool, seed: int):
    torch.manual_seed(seed)
    return model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=configs[sample])


def generation_configs(model, new_tokens: int) -> dict[bool, object]:
    """transformers' settings for greedy (False) and sampled (True) decoding of exactly
    new_tokens tokens: no end-of-text stop, as ours runs without eos_token_id."""
    configs = {}
    for sample in (False, True):
        config = copy.deepcopy(model.generation_config)
        config.eos_token_id = None
        config.pad_token_id = config.pad_token_id if config.pad_token_id is not None else 0
        config.max_length = None
        config.max_new_tokens = new_tokens
        config.do_sample = sample
        if sample:
            config.temperature, config.top_k, config.top_p = (SAMPLING[k] for k in ("temperature", "top_k", "top_p"))
        configs[sample] = config
    return configs


def timed(call, device: str) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    with torch.no_grad():
        out = call()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="a finished run directory (its pretrain model/ and hf/)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = parser.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()  # the load reports and notices of every call
    dtype = getattr(torch, args.dtype)
    with tempfile.TemporaryDirectory() as workdir:
        model_dir, hf_dir, what = model_folders(args.run, Path(workdir))
        ours = load_pretrained(model_dir).to(args.device, dtype).eval()
        theirs = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype).to(args.device).eval()
    context = ours.config.max_seq_len
    new_tokens = min(args.new_tokens, context - PROMPT_TOKENS)
    configs = generation_configs(theirs, new_tokens)
    print(f"{what}; {sum(p.numel() for p in ours.parameters()) / 1e6:.1f}M parameters; prompt {PROMPT_TOKENS} "
          f"tokens, {new_tokens} new; {args.device} {args.dtype}, {torch.get_num_threads()} threads; "
          f"transformers {transformers.__version__}, torch {torch.__version__}")
    print()
    print("| decoding | batch | ours (tokens/s) | transformers (tokens/s) | ratio | same tokens |")
    print("|---|---|---|---|---|---|")
    for sample in (False, True):
        for batch in (int(b) for b in args.batches.split(",")):
            ids = torch.randint(2, ours.config.vocab_size, (batch, PROMPT_TOKENS),
                                generator=torch.Generator().manual_seed(batch)).to(args.device)
            times = {"ours": [], "theirs": []}
            outputs = {}
            for repeat in range(args.repeats + 1):  # the first call of each warms up
                for side in ("ours", "theirs"):
                    call = (lambda: ours_call(ours, ids, new_tokens, sample, repeat)) if side == "ours" else \
                        (lambda: theirs_call(theirs, configs, ids, sample, repeat))
                    seconds, outputs[side] = timed(call, args.device)
                    if repeat:
                        times[side].append(seconds)
            assert outputs["ours"].shape == outputs["theirs"].shape == (batch, PROMPT_TOKENS + new_tokens)
            rate = {side: batch * new_tokens / statistics.median(t) for side, t in times.items()}
            same = "n/a" if sample else ("yes" if torch.equal(outputs["ours"], outputs["theirs"]) else "no")
            print(f"| {'sampled' if sample else 'greedy'} | {batch} | {rate['ours']:.0f} | {rate['theirs']:.0f} | "
                  f"{rate['ours'] / rate['theirs']:.2f} | {same} |", flush=True)


if __name__ == "__main__":
    main()
