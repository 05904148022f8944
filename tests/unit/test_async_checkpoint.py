"""pretrain.checkpoint_async's pieces that need no Ray (stages/training/async_checkpoint.py):
one save in flight at most, a background failure raised on the training thread, and the
host-memory copy a background write starts from. Real threads, real torch.save."""

from __future__ import annotations

import threading

import pytest
import torch

from stages.training.async_checkpoint import CheckpointSaveFailed, SaveSlot, host_copy


def test_a_second_save_waits_for_the_one_in_flight():
    slot = SaveSlot()
    release, second_tracked = threading.Event(), threading.Event()
    first = slot.track(lambda: release.wait(), "the checkpoint of step 1")
    background = threading.Thread(target=first, daemon=True)  # the upload thread of the first save
    background.start()
    assert slot.in_flight

    def training_thread():
        slot.track(lambda: None, "the checkpoint of step 2")
        second_tracked.set()

    training = threading.Thread(target=training_thread, daemon=True)
    training.start()
    try:
        # Not a timing assertion: while the first save is held, the second cannot start at all.
        assert not second_tracked.wait(0.3), "a second save started while one was in flight"
    finally:
        release.set()
    assert second_tracked.wait(10)
    training.join()
    background.join()


def test_a_failed_background_save_fails_the_training_thread_loudly():
    slot = SaveSlot()
    errors = []

    def upload():
        raise OSError(28, "No space left on device")

    def upload_thread():  # what Ray Train's upload thread does with our function's error
        try:
            slot.track(upload, "the checkpoint of step 20")()
        except OSError as error:
            errors.append(error)

    thread = threading.Thread(target=upload_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1, "the error must reach the background thread's owner too (Ray fails the worker)"
    with pytest.raises(CheckpointSaveFailed, match="the checkpoint of step 20 failed in the background: .*No space"):
        slot.wait()
    # and every later save or finish, too: the run does not go on after a lost checkpoint
    with pytest.raises(CheckpointSaveFailed):
        slot.track(lambda: None, "the checkpoint of step 30")
    with pytest.raises(CheckpointSaveFailed):
        slot.wait()


def test_host_copy_is_the_state_at_the_step_boundary_with_shared_storages_kept(tmp_path):
    flat = torch.arange(8, dtype=torch.float32)
    master = torch.nn.Parameter(flat.clone())
    state = {"optimizer": {"exp_avg": flat[:4], "exp_avg_sq": flat[4:], "step": 3},
             "groups": [master], "shape": (torch.Size([8]), "fp32")}
    copied = host_copy(state, {})
    # Training goes on: in-place updates of the live tensors after the boundary.
    flat.add_(100.0)
    master.data.mul_(-1.0)
    assert copied["optimizer"]["exp_avg"].tolist() == [0, 1, 2, 3]
    assert copied["optimizer"]["exp_avg_sq"].tolist() == [4, 5, 6, 7]
    assert copied["groups"][0].tolist() == list(range(8)) and isinstance(copied["groups"][0], torch.nn.Parameter)
    assert copied["optimizer"]["step"] == 3 and copied["shape"] == (torch.Size([8]), "fp32")
    # Views of one storage still share one copy, so the file holds one storage as before.
    halves = copied["optimizer"]
    assert halves["exp_avg"].untyped_storage().data_ptr() == halves["exp_avg_sq"].untyped_storage().data_ptr()
    torch.save(copied, tmp_path / "state.pt")
    loaded = torch.load(tmp_path / "state.pt", weights_only=False)
    assert loaded["optimizer"]["exp_avg_sq"].tolist() == [4, 5, 6, 7]
