"""Ctrl-C during `fit`: the trainer's SIGINT handler kills the run's controller without
waiting and raises KeyboardInterrupt; the handler from before `fit` comes back after.
(tests/e2e/test_pipeline_e2e.py sends one real SIGINT to the CLI mid-pretrain.)"""

from __future__ import annotations

import signal

import pytest
import ray

from stages.training.ctrl_c import killed_at_once_on_ctrl_c, sigint_handler_restored


class RecordingTrainer:
    def _register_sigint_handler(self, controller) -> None:
        raise AssertionError("Ray Train's own handler must not be installed")


def test_ctrl_c_kills_the_controller_at_once_and_raises_keyboard_interrupt(monkeypatch):
    killed = []
    monkeypatch.setattr(ray, "kill", lambda actor, no_restart: killed.append((actor, no_restart)))
    before = signal.getsignal(signal.SIGINT)
    trainer = killed_at_once_on_ctrl_c(RecordingTrainer)()
    with pytest.raises(KeyboardInterrupt):
        with sigint_handler_restored():
            trainer._register_sigint_handler("the controller")
            assert signal.getsignal(signal.SIGINT) is not before
            signal.raise_signal(signal.SIGINT)
    assert killed == [("the controller", True)]
    assert signal.getsignal(signal.SIGINT) is before


def test_the_pinned_ray_train_still_has_the_hook_we_override():
    from ray.train.torch import TorchTrainer

    trainer_class = killed_at_once_on_ctrl_c(TorchTrainer)
    assert issubclass(trainer_class, TorchTrainer) and trainer_class.__name__ == "TorchTrainer"
    assert "_register_sigint_handler" in vars(trainer_class)
