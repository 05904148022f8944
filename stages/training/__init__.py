"""The shared Ray Train + DeepSpeed harness; pretrain and finetune both run on it.

Driver side (launch.py):
    fit(train_loop_per_worker, loop_config: dict, *, num_workers, storage_path, run_name,
        max_failures=0, use_gpu=False, checkpoints_to_keep=2) -> ray.train.Result
        Same storage_path + run_name again = resume from the last committed checkpoint.
        Ray Train wants a dict: a stage passes its one frozen job record in it
        (pretrain: {"job": PretrainJob}, stages/pretrain/job.py).

Both sides (model_source.py): the model folder a run starts from, one frozen record
    ModelSource(format="pretrained" | "hf", path, family, config_file, weights_file, tokenizer,
                max_seq_len, model_type=None, architecture=None)
        built by pretrain.init_from's resolver and by fine-tuning's

Both sides (engine_settings.py): what an engine is built from, one frozen record
    EngineSettings(micro_batch_size, gradient_accumulation_steps, zero_stage, grad_clip,
                   precision, lr, weight_decay, adam_betas, warmup_steps, max_steps,
                   lr_decay, min_lr_ratio, optimizer_impl="auto", offload_optimizer=False,
                   offload_param=False, loss_scaling=LossScaling())
    EngineSettings.from_pretrain(pretrain_cfg)
    EngineSettings.for_finetuning(finetune_cfg, total_steps)   warmup_fraction, linear decay to 0
    settings.schedule() -> WarmupDecaySchedule
    LossScaling(initial_scale_power=16, loss_scale_window=1000, hysteresis=2, min_loss_scale=1.0)
        fp16's dynamic loss scaling

Driver side, before fit (deepspeed_config.py):
    resolve_deepspeed_config(settings, user_file, output_dir, config_key="pretrain.deepspeed_config")
        -> (user's DeepSpeed dict | None, overrides)
        reads user_file (a JSON file; errors name file and line), logs each value of
        ours it overrides, writes output_dir/deepspeed_config.json

Worker side (inside train_loop_per_worker):
    create_engine(model, settings: EngineSettings, *, user_deepspeed_config=None)
        -> DeepSpeed engine; the one call pretraining and fine-tuning make: config from
        the settings (+ the user's dict merged over it), AdamW, schedule; a clear error
        for fp16 where the accelerator has none
    build_deepspeed_config(*, micro_batch_size, gradient_accumulation_steps=1,
                           zero_stage=0, gradient_clipping=1.0, precision="fp32",
                           offload_optimizer=False, offload_param=False,
                           loss_scaling=LossScaling()) -> dict
    deepspeed_config_for(settings, user_config=None) -> (dict, [Override])
    merge_deepspeed_config(ours, theirs) -> (merged, [Override])   (deepspeed_overrides.py)
    build_param_groups(model, weight_decay) -> AdamW groups (no decay on biases/norms)
    WarmupDecaySchedule(warmup_steps, max_steps, decay="cosine", min_lr_ratio=0.1)
        a picklable LambdaLR multiplier: linear warmup, then cosine/linear/constant/
        inverse_sqrt
    initialize_engine(model, *, ds_config, lr, weight_decay, schedule, betas=(0.9, 0.95),
                      optimizer_impl="auto")
        -> DeepSpeed engine over torch AdamW + LambdaLR(schedule); create_engine's core
    optimizer_step(engine) -> grad norm (float) at accumulation boundaries, else None
        engine.step() plus the pre-clipping global gradient norm, for every ZeRO stage
    full_fp32_state_dict(engine) -> {name: fp32 CPU tensor}   (collective; any ZeRO stage)
    restore_latest(engine) -> extra_state dict (with "step") | None   (collective)
        on any number of workers: a checkpoint written by another world size is
        converted to DeepSpeed's universal checkpoint and loaded from that
    report_checkpoint(engine, step, extra_state: dict, metrics: dict)  (collective)
        -> seconds training waited, by phase ("write", "report")
    open_checkpointer(engine, asynchronous) -> .save(step, extra_state, metrics), .finish()
        (async_checkpoint.py) report_checkpoint, or pretrain.checkpoint_async: the state
        copied to host memory at the step boundary, written and uploaded by Ray Train's
        upload thread, one save in flight, a failed one raised on the training thread

Nothing is imported here, so `import stages.training` stays free of torch and Ray.
"""
