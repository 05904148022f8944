"""A pretrain run whose worker gets SIGTERM, and later whose node is drained, checkpoints
at the next step boundary each time, restarts from there and ends bit for bit as the
uninterrupted run (stages/training/preemption.py). The Ray cluster (a head and three
one-CPU nodes) runs in a subprocess, tests/support/preemption_pretrain.py, which checks the runs
and exits non-zero on any failure; it prints the seconds from each signal to the first
new step."""

from __future__ import annotations

import pytest

from tests.support.cluster_script import run_cluster_script


@pytest.mark.ray
def test_a_preempted_run_loses_at_most_a_step_and_ends_as_the_uninterrupted_one(tmp_path):
    output = run_cluster_script("preemption_pretrain.py", tmp_path, "PREEMPTION OK", timeout=400)
    # The measurements (no timing assertions: this machine is shared), for the log.
    print("\n".join(line for line in output.splitlines()
                    if line.startswith(("uninterrupted run:", "preempted run:", "sigterm:", "drain:"))))
