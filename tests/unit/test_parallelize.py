"""Activation checkpointing and compilation applied from outside the model
(stages/training/parallelize.py): same loss and gradients as the plain model, also inside
a real single-process DeepSpeed engine. No Ray."""

from __future__ import annotations


import pytest
import torch
from torch._dynamo.utils import counters

from stages.models import GPT, GPTConfig
from stages.training.parallelize import apply_compile, parallelize
from tests.engine_subprocess import run_engine_script

CONFIG = GPTConfig(vocab_size=64, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4)


def loss_and_grads(model: GPT, ids: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    _, loss = model(ids, labels=ids)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("checkpointing", [False, True])
def test_compiled_blocks_match_eager(checkpointing):
    # backend="aot_eager": Dynamo + AOTAutograd (the graph capture and the joint
    # forward/backward that inductor would get) without inductor's C++ codegen, which
    # takes tens of seconds per graph on this 2-core box.
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    eager = GPT(CONFIG)
    compiled = GPT(CONFIG)
    compiled.load_state_dict(eager.state_dict())
    parallelize(compiled, activation_checkpointing=checkpointing, compile=True,
                compile_kwargs={"backend": "aot_eager"})
    assert apply_compile(compiled, backend="aot_eager") == 0  # already compiled: no-op
    assert list(compiled.state_dict()) == list(eager.state_dict())  # names unchanged
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    eager_loss, eager_grads = loss_and_grads(eager, ids)
    compiled_loss, compiled_grads = loss_and_grads(compiled, ids)
    # One graph for both blocks (same code, same shapes), captured whole: under
    # checkpointing too (the checkpoint becomes a recompute region inside the graph).
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    assert counters["aot_autograd"]["ok"] == 1
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-5)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    torch._dynamo.reset()


# A real DeepSpeed engine in a subprocess: initialising torch.distributed and DeepSpeed's
# global communicator inside the pytest process would leak into other tests.
ENGINE_SCRIPT = r"""
import json, torch
import torch.distributed as dist
from torch._dynamo.utils import counters
from stages.models import GPT, GPTConfig
from stages.training.deepspeed_config import build_deepspeed_config
from stages.training.engine import initialize_engine, optimizer_step
from stages.training.parallelize import parallelize
from stages.training.schedule import WarmupDecaySchedule

dist.init_process_group("gloo", rank=0, world_size=1)
config = GPTConfig(vocab_size=64, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4, dropout=0.1)
ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
results = {}
for name, options in [("plain", {}), ("checkpointed", {"activation_checkpointing": True}),
                      ("compiled", {"compile": True, "compile_kwargs": {"backend": "aot_eager"}})]:
    torch.manual_seed(0)
    model = parallelize(GPT(config), **options)
    engine = initialize_engine(
        model, lr=1e-2, weight_decay=0.1,
        schedule=WarmupDecaySchedule(warmup_steps=0, max_steps=2, decay="constant"),
        ds_config=build_deepspeed_config(micro_batch_size=4, zero_stage=2, precision="fp32"))
    losses = []
    for step in range(2):
        torch.manual_seed(100 + step)  # same dropout masks in every variant
        _, loss = engine(ids, labels=ids)
        engine.backward(loss)
        optimizer_step(engine)
        losses.append(loss.item())
    results[name] = {"losses": losses, "global_steps": engine.global_steps,
                     "graphs": counters["stats"]["unique_graphs"]}
print("RESULTS" + json.dumps(results))
"""



@pytest.fixture(scope="module")
def engine_results():
    return run_engine_script(ENGINE_SCRIPT)


def test_activation_checkpointing_trains_the_same_under_deepspeed_zero2(engine_results):
    plain, checkpointed = engine_results["plain"], engine_results["checkpointed"]
    assert checkpointed["global_steps"] == plain["global_steps"] == 2
    assert plain["losses"][1] < plain["losses"][0]  # the optimizer stepped
    # Same dropout masks in the recompute, same gradients, so the same second loss.
    assert checkpointed["losses"] == pytest.approx(plain["losses"], rel=1e-5)


def test_compiled_blocks_train_the_same_under_deepspeed_zero2(engine_results):
    compiled = engine_results["compiled"]
    assert compiled["global_steps"] == 2 and compiled["graphs"] >= 1
    assert engine_results["plain"]["graphs"] == 0
    assert compiled["losses"] == pytest.approx(engine_results["plain"]["losses"], rel=1e-4)
