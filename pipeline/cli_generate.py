"""`pretrain generate RUN_DIR`: text from a finished run's model, with no Ray.

    pretrain generate runs/demo --prompt "The old house"                    # GPT: greedy, streamed
    pretrain generate runs/demo --prompt "It was" --temperature 0.8 --top-p 0.95 --seed 1
    pretrain generate runs/demo --file prompts.txt --json                  # one prompt a line
    pretrain generate runs/demo --snapshot 100 --prompt "The old house"    # a pretraining snapshot
    pretrain generate runs/t5-tiny --prompt "The <extra_id_0> walks in <extra_id_1> park"
    pretrain generate runs/t5-tiny --task sst2 --prompt "a gripping film"  # a fine-tuned T5
    pretrain generate runs/bert-tiny --prompt "The weather was [MASK] today."   # top tokens per mask

It reads the consolidated weights (pretrain/<fp>/model/, a snapshot, or a task's model/),
never a DeepSpeed checkpoint. This module imports no torch: the model side
(stages.generate) is imported once the run and the flags are checked, so a mistake is
reported at once. Exit codes: 0 done, 2 a usage mistake (one `error:` line: a folder that
is not a run, a stage not finished, an unknown snapshot or task, a prompt too long for the
context), 1 a model folder that cannot be read, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import time

COMMANDS = ("generate",)


def add_commands(subparsers) -> None:
    gen = subparsers.add_parser(
        "generate", help="generate with a run's model: GPT continues prompts, T5 writes a target for a "
                         "source, BERT fills each [MASK] (no Ray; reads the consolidated model/)")
    gen.add_argument("run_dir", metavar="RUN_DIR", help="the experiment's workdir, e.g. runs/demo")
    prompts = gen.add_argument_group("prompts")
    prompts.add_argument("--prompt", action="append", default=[], metavar="TEXT",
                         help="a prompt (repeatable); \"\" starts a GPT from the start of a document")
    prompts.add_argument("--file", metavar="PATH", help="prompts, one a line ('-': standard input)")
    which = gen.add_argument_group("which model")
    which.add_argument("--stage", default="pretrain", choices=("pretrain", "finetune"),
                       help="the stage whose model to load (default pretrain; finetune needs --task)")
    which.add_argument("--snapshot", type=int, metavar="STEP",
                       help="a pretraining snapshot (pretrain.snapshot_every) instead of the final model")
    which.add_argument("--task", metavar="TASK",
                       help="a fine-tuned T5 (text to text): the prompt in the task's format, decoded "
                            "as the task was (at most its target length)")
    decoding = gen.add_argument_group("decoding (greedy unless --temperature, --top-k or --top-p)")
    decoding.add_argument("--max-new-tokens", type=int, metavar="N",
                          help="at most N new tokens (default 50, or the task's target length; GPT: "
                               "fewer when the context ends first)")
    decoding.add_argument("--temperature", type=float, metavar="T", help="sample at temperature T (0: greedy)")
    decoding.add_argument("--top-k", type=int, metavar="K",
                          help="sample among the K most likely tokens; BERT: the K tokens shown per mask")
    decoding.add_argument("--top-p", type=float, metavar="P", help="sample from the smallest set of tokens "
                                                                   "whose probability reaches P (nucleus)")
    decoding.add_argument("--seed", type=int, default=0, help="seed of the sampling (default 0)")
    decoding.add_argument("--num-beams", type=int, default=1, metavar="K", help="beam search with K beams")
    decoding.add_argument("--cut-left", action="store_true",
                          help="cut a prompt too long for the context from the left (said on stderr) "
                               "instead of stopping with an error")
    device = gen.add_argument_group("device")
    device.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda if there is one)")
    device.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                        help="weights and compute (default float32; float16 needs cuda)")
    gen.add_argument("--json", action="store_true",
                     help="one JSON object per prompt (text, tokens, why it stopped) instead of streamed text")


def dispatch(args: argparse.Namespace) -> int | None:
    if getattr(args, "command", None) not in COMMANDS:
        return None
    started = time.perf_counter()
    from pipeline.config import ConfigError
    from pipeline.run_models import locate_model
    from stages.generate.errors import GenerateInputError
    from stages.generate.settings import DecodingSettings

    try:
        folder = locate_model(args.run_dir, stage=args.stage, snapshot=args.snapshot, task=args.task)
        prompts = read_prompts(args.prompt, args.file)
        settings = DecodingSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                    top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                                    num_beams=args.num_beams, cut_left=args.cut_left)
    except (ConfigError, GenerateInputError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        from stages.generate.model_folder import load_model_folder
        from stages.generate.run import describe_settings, run_prompts

        loaded = load_model_folder(folder, device=args.device, dtype=args.dtype)
        print(f"[generate] {loaded.describe()}; {describe_settings(loaded.family, settings)} (loaded in "
              f"{time.perf_counter() - started:.1f}s)", file=sys.stderr, flush=True)
        run_prompts(loaded, prompts, settings, out=sys.stdout, err=sys.stderr, as_json=args.json)
    except GenerateInputError as error:
        sys.stdout.flush()
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as error:  # a missing or damaged file of the model folder
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
    return 0


def read_prompts(prompts: list[str], file: str | None) -> list[str]:
    """--prompt values, then the lines of --file (blank lines skipped)."""
    from pipeline.config import ConfigError

    found = list(prompts)
    if file is not None:
        try:
            text = sys.stdin.read() if file == "-" else open(file, encoding="utf-8").read()
        except OSError as error:
            raise ConfigError(f"--file {file}: cannot read it ({error.strerror or error})") from error
        except UnicodeDecodeError as error:
            raise ConfigError(f"--file {file}: not UTF-8 text ({error})") from error
        found += [line for line in text.splitlines() if line.strip()]
    if not found:
        raise ConfigError("no prompt: give --prompt TEXT (repeatable) or --file PATH (one prompt a line)")
    return found
