"""Generate from a trained model (`pretrain generate RUN_DIR`), with no Ray and no
DeepSpeed: the consolidated weights of a model folder, on one device.

    from stages.generate.model_folder import load_model_folder
    from stages.generate.run import run_prompts
    from stages.generate.settings import DecodingSettings

    loaded = load_model_folder("runs/demo/pretrain/<fp>/model", device="cpu", dtype="float32")
    run_prompts(loaded, ["The old house"], DecodingSettings(max_new_tokens=30), out=sys.stdout, err=sys.stderr)

By family: GPT continues the prompt (causal.py), T5 and the original Transformer write a
target for the prompt as source (seq2seq.py; with a fine-tuned task, in its format,
task_format.py), BERT-style models fill each mask (fill_mask.py); each has `prepare`
(tokenize, check against the context) and `run`. User mistakes raise GenerateInputError
(errors.py).

This package's own import is empty: the engine's CLI checks flags with settings.py and
errors.py, which import no torch, and loads the rest once the run is found.
"""
