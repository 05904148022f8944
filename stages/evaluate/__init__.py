"""The evaluate stage: zero- and few-shot scoring of a pretrained model, as the GPT-2 and
GPT-3 papers do and in agreement with lm-evaluation-harness 0.4.13.

    run.py            the stage: plan every task, answer on Ray workers, score, write results
    config.py         the stage's config section
    requests.py       the interface between tasks and model scorers
    scorers/          GPT / BERT / T5 models answering requests
    spec.py           task specs (YAML): files, splits, Jinja2 prompts, metrics
    tasks/*.yaml      the built-in specs
    readers.py        split files -> rows (jsonl, SQuAD json, text, tsv, COPA xml)
    templates.py      Jinja2 rendering with lm-eval's rules
    fewshot.py        evaluated rows and their demonstrations (lm-eval's sampler)
    prompts.py        rows -> contexts and requests
    metrics.py        results -> scores with baselines and 95% intervals
    evaluate_task.py  one task end to end; plan / shard / merge for several workers
    snapshots.py      the same tasks on every snapshot pretraining kept (scores across training)
"""
