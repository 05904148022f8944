"""Activation checkpointing and compilation applied from outside the model
(stages/training/parallelize.py): same loss and gradients as the plain model, also inside
a real single-process DeepSpeed engine; the objective's loss compiled the same way, and
pretrain.compile_options checked and passed on. No Ray."""

from __future__ import annotations


import pytest
import torch
from torch._dynamo.utils import counters

from stages.models import GPT, BertConfig, BertForPreTraining, GPTConfig
from stages.objectives.clm.loss import CausalLM
from stages.objectives.mlm.loss import MaskedLM
from stages.pretrain.config import PretrainConfig
from stages.training.parallelize import (
    apply_compile, apply_compile_to_loss, compile_kwargs_for, compile_loss_for, parallelize,
)
from tests.support.engine_subprocess import run_engine_script
from tests.support.pretraining_loss import causal_lm_loss

CONFIG = GPTConfig(vocab_size=64, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4)


def loss_and_grads(model: GPT, ids: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    loss = causal_lm_loss(model(ids), ids)
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
from tests.support.pretraining_loss import causal_lm_loss

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
        loss = causal_lm_loss(engine(ids), ids)
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


def objective_outputs(objective, model, batch):
    """The objective's loss, statistics and the gradient of every parameter."""
    model.zero_grad(set_to_none=True)
    output = objective(model, batch)
    output.loss.backward()
    return output, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def clm_case():
    torch.manual_seed(0)
    model = GPT(CONFIG)
    return CausalLM(seq_len=16), model, {"input_ids": torch.randint(0, 64, (2, 16))}


def mlm_case():
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=64, max_seq_len=16, num_layers=1, hidden_size=32,
                                          num_heads=4)).eval()  # no dropout: both passes see the same network
    labels = torch.full((2, 16), -100)
    labels[0, 3], labels[1, 7], labels[1, 9] = 5, 6, 7
    batch = {"input_ids": torch.randint(5, 64, (2, 16)), "labels": labels,
             "attention_mask": torch.ones(2, 16, dtype=torch.long),
             "token_type_ids": torch.zeros(2, 16, dtype=torch.long), "next_sentence_label": torch.tensor([0, 1])}
    return MaskedLM(seq_len=16, sentence_task="nsp"), model, batch


@pytest.mark.parametrize("case", [clm_case, mlm_case], ids=["clm", "mlm+nsp"])
def test_compiled_loss_gives_the_eager_loss_statistics_and_gradients(case):
    torch._dynamo.reset()
    counters.clear()
    objective, model, batch = case()
    eager, eager_grads = objective_outputs(objective, model, batch)
    assert apply_compile_to_loss(objective, backend="aot_eager")
    assert not apply_compile_to_loss(objective, backend="aot_eager")  # already compiled: no-op
    assert type(objective).loss_fn is not objective.loss_fn  # this instance only; the class keeps eager
    compiled, compiled_grads = objective_outputs(objective, model, batch)
    assert counters["aot_autograd"]["ok"] >= 1  # the loss really went through the compiler
    assert compiled.loss.item() == pytest.approx(eager.loss.item(), rel=1e-6)
    for part, stats in eager.parts.items():
        torch.testing.assert_close(compiled.parts[part], stats, msg=part)
    assert compiled_grads.keys() == eager_grads.keys()
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)
    torch._dynamo.reset()


def test_the_loss_is_compiled_only_with_pretrain_compile():
    plain, compiled = CausalLM(seq_len=16), CausalLM(seq_len=16)
    assert not compile_loss_for(plain, PretrainConfig())
    assert plain.loss_fn is CausalLM.loss_fn
    assert compile_loss_for(compiled, PretrainConfig(compile=True, compile_backend="aot_eager"))
    assert compiled.loss_fn.is_compiled


def test_compile_options_reach_torch_compile_and_are_checked_on_load():
    cfg = PretrainConfig(compile=True, compile_options={"coordinate_descent_tuning": True})
    assert compile_kwargs_for(cfg) == {"backend": "inductor", "options": {"coordinate_descent_tuning": True}}
    assert compile_kwargs_for(PretrainConfig(compile=True)) == {"backend": "inductor"}
    with pytest.raises(ValueError, match="'coordinate_descent_tunning' is not an inductor option; "
                                         "did you mean 'coordinate_descent_tuning'"):
        PretrainConfig(compile=True, compile_options={"coordinate_descent_tunning": True})
    for settings in ({}, {"compile": True, "compile_backend": "aot_eager"}):
        with pytest.raises(ValueError, match="compile_options apply only with compile: true and "
                                             "compile_backend: inductor"):
            PretrainConfig(compile_options={"coordinate_descent_tuning": True}, **settings)
