"""pretrain.activation_checkpointing (none | full | every_n), pretrain.compile and
pretrain.optimizer_impl, applied from outside the model as the training loop applies them
(parallelize_for, then create_engine): through a real single-process DeepSpeed engine,
checkpointing trains exactly like the plain model, compilation and every AdamW
implementation within float rounding, and the exported weights keep their names."""

from __future__ import annotations


import pytest

from stages.models.checkpointing import apply_activation_checkpointing
from stages.models.build import build_preset
from stages.pretrain.config import PretrainConfig
from stages.training.engine import adamw_implementation
from stages.training.parallelize import parallelize_for
from tests.support.engine_subprocess import run_engine_script



def checkpointed_blocks(model) -> list[str]:
    return [name for name, module in model.named_modules() if getattr(module, "is_checkpointed", False)]


def test_every_n_checkpoints_the_nth_block_counted_over_the_whole_model():
    t5 = build_preset("t5-debug")  # 2 encoder + 2 decoder blocks
    assert apply_activation_checkpointing(t5, every=2) == 2
    assert checkpointed_blocks(t5) == ["encoder.blocks.1", "decoder.blocks.1"]
    assert apply_activation_checkpointing(t5, every=2) == 0  # idempotent
    with pytest.raises(ValueError, match="every must be >= 1"):
        apply_activation_checkpointing(build_preset("gpt-debug"), every=0)


@pytest.mark.parametrize(("settings", "expected"), [
    ({}, []),
    ({"activation_checkpointing": "full"}, ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]),
    ({"activation_checkpointing": "every_n", "activation_checkpointing_every": 2}, ["blocks.1", "blocks.3"]),
    ({"activation_checkpointing": "every_n", "activation_checkpointing_every": 3}, ["blocks.2"]),
])
def test_parallelize_for_reads_the_pretrain_section(settings, expected):
    model = build_preset("gpt-debug", num_layers=4)
    parallelize_for(model, PretrainConfig(**settings))
    assert checkpointed_blocks(model) == expected
    assert not any(getattr(module, "is_compiled", False) for module in model.modules())


def test_settings_for_another_mode_are_refused():
    with pytest.raises(ValueError, match="activation_checkpointing_every applies to activation_checkpointing: "
                                         "every_n only"):
        PretrainConfig(activation_checkpointing="full", activation_checkpointing_every=3)
    with pytest.raises(ValueError, match="compile_backend applies only with compile: true"):
        PretrainConfig(compile_backend="aot_eager")
    # A dumped config (what the training workers validate again) passes.
    dumped = PretrainConfig(activation_checkpointing="every_n", activation_checkpointing_every=3).model_dump()
    assert PretrainConfig.model_validate(dumped).activation_checkpointing_every == 3


def test_adamw_implementation_by_device():
    assert adamw_implementation("auto", "cpu") == {"fused": True}  # torch >= 2.4 has a CPU kernel
    assert adamw_implementation("auto", "cuda") == {"fused": True}
    assert adamw_implementation("auto", "no-such-device") == {"foreach": True}
    assert adamw_implementation("foreach", "cuda") == {"foreach": True}
    assert adamw_implementation("for_loop", "cuda") == {"foreach": False}
    with pytest.raises(ValueError, match="pretrain.optimizer_impl fused: .* no fused AdamW for 'no-such-device'"):
        adamw_implementation("fused", "no-such-device")


# The training loop's path (parallelize_for, create_engine from a PretrainConfig) in a
# subprocess: torch.distributed and DeepSpeed's communicator would leak into other tests.
ENGINE_SCRIPT = r"""
import json, torch
import torch.distributed as dist
from stages.models.build import build_preset
from stages.objectives.clm.loss import CausalLM
from stages.pretrain.config import PretrainConfig
from stages.training.engine import create_engine, full_fp32_state_dict, optimizer_step
from stages.training.engine_settings import EngineSettings
from stages.training.parallelize import compile_loss_for, parallelize_for

dist.init_process_group("gloo", rank=0, world_size=1)
ids = torch.randint(0, 512, (4, 32), generator=torch.Generator().manual_seed(0))
VARIANTS = {
    "plain": {},
    "full": {"activation_checkpointing": "full"},
    "every_2": {"activation_checkpointing": "every_n", "activation_checkpointing_every": 2},
    # aot_eager: the graph capture and joint forward/backward inductor would get, without
    # inductor's C++ build (tens of seconds per graph on 2 cores).
    "compiled": {"compile": True, "compile_backend": "aot_eager"},
    "compiled_full": {"compile": True, "compile_backend": "aot_eager", "activation_checkpointing": "full"},
    "fused": {"optimizer_impl": "fused"},
    "foreach": {"optimizer_impl": "foreach"},
    "for_loop": {"optimizer_impl": "for_loop"},
}
results = {}
for name, settings in VARIANTS.items():
    torch._dynamo.reset()
    cfg = PretrainConfig(micro_batch_size=4, zero_stage=2, lr=1e-2, warmup_steps=0, lr_decay="constant",
                         max_steps=3, **settings)
    torch.manual_seed(0)
    model = build_preset("gpt-debug", num_layers=4, dropout=0.1)
    names = list(model.state_dict())
    parallelize_for(model, cfg)
    objective = CausalLM(seq_len=32)
    loss_compiled = compile_loss_for(objective, cfg)
    engine = create_engine(model, EngineSettings.from_pretrain(cfg))
    losses = []
    for step in range(cfg.max_steps):
        torch.manual_seed(100 + step)  # the same dropout masks in every variant
        loss = objective(engine, {"input_ids": ids}).loss  # the training loop's step
        engine.backward(loss)
        optimizer_step(engine)
        losses.append(loss.item())
    state = full_fp32_state_dict(engine)
    results[name] = {"losses": losses, "names": list(state) == names, "global_steps": engine.global_steps,
                     "loss_compiled": loss_compiled, "fused": engine.optimizer.optimizer.defaults.get("fused"),
                     "weights": {n: t.double().sum().item() for n, t in state.items()}}
print("RESULTS" + json.dumps(results))
"""



@pytest.fixture(scope="module")
def engine_results():
    return run_engine_script(ENGINE_SCRIPT)


def test_checkpointing_trains_exactly_like_the_plain_model(engine_results):
    plain = engine_results["plain"]
    assert plain["global_steps"] == 3 and plain["losses"][-1] < plain["losses"][0]
    for name in ("full", "every_2"):
        # Same dropout masks in the recompute, the same gradients bit for bit.
        assert engine_results[name]["losses"] == plain["losses"], name
        assert engine_results[name]["weights"] == plain["weights"], name


def test_compiled_blocks_and_loss_train_like_the_plain_model(engine_results):
    plain = engine_results["plain"]
    assert not plain["loss_compiled"]
    for name in ("compiled", "compiled_full"):
        assert engine_results[name]["loss_compiled"], name
        assert engine_results[name]["losses"] == pytest.approx(plain["losses"], rel=1e-4), name
        assert engine_results[name]["weights"] == pytest.approx(plain["weights"], rel=1e-3, abs=1e-3), name


def test_every_adamw_implementation_gives_the_same_update(engine_results):
    reference = engine_results["for_loop"]
    assert reference["fused"] is None and engine_results["fused"]["fused"] is True
    assert engine_results["plain"]["fused"] is True  # auto on CPU, torch 2.13
    for name in ("fused", "foreach", "plain"):
        assert engine_results[name]["losses"] == pytest.approx(reference["losses"], rel=1e-5), name
        assert engine_results[name]["weights"] == pytest.approx(reference["weights"], rel=1e-4, abs=1e-4), name


def test_exported_weights_keep_the_plain_models_names(engine_results):
    assert all(result["names"] for result in engine_results.values())
