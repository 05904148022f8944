"""The shared Ray Train + DeepSpeed harness; pretrain and finetune both run on it.

Driver side (launch.py):
    fit(train_loop_per_worker, loop_config: dict, *, num_workers, storage_path, run_name,
        max_failures=0, use_gpu=False, checkpoints_to_keep=2) -> ray.train.Result
        Same storage_path + run_name again = resume from the last committed checkpoint.

Worker side (inside train_loop_per_worker):
    build_deepspeed_config(*, micro_batch_size, gradient_accumulation_steps=1,
                           zero_stage=0, gradient_clipping=1.0, precision="fp32") -> dict
    build_param_groups(model, weight_decay) -> AdamW groups (no decay on biases/norms)
    WarmupDecaySchedule(warmup_steps, max_steps, decay="cosine", min_lr_ratio=0.1)
        a picklable LambdaLR multiplier: linear warmup, then cosine/linear/constant
    initialize_engine(model, *, ds_config, lr, weight_decay, schedule, betas=(0.9, 0.95))
        -> DeepSpeed engine over torch AdamW + LambdaLR(schedule)
    optimizer_step(engine) -> grad norm (float) at accumulation boundaries, else None
        engine.step() plus the pre-clipping global gradient norm, for every ZeRO stage
    full_fp32_state_dict(engine) -> {name: fp32 CPU tensor}   (collective; any ZeRO stage)
    restore_latest(engine) -> extra_state dict (with "step") | None   (collective)
    report_checkpoint(engine, step, extra_state: dict, metrics: dict)  (collective)

Nothing is imported here, so `import stages.training` stays free of torch and Ray.
"""
