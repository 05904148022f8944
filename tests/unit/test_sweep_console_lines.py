"""What a sweep's console shows of each point's stage lines (sweep/children.py):
results and errors, not deselected stages or every point's progress lines, which would
interleave into noise (they stay in the point's sweep.log)."""

import pytest

from sweep.children import HIDDEN_STAGE_LINE, STAGE_LINE


@pytest.mark.parametrize("line", [
    "[ingest] not selected (07cc2219a0eec9d1, not run yet)",
    "[pretrain] step 20/40 (50%)  loss 7.060  21.8k tokens/s  0:02 elapsed, ~0:02 left",
    "[finetune] sst2: batch 10/63 (16%)  loss 0.690  41.0 examples/s  0:03 elapsed, ~0:15 left",
])
def test_deselected_stages_and_progress_lines_stay_off_the_sweep_console(line):
    assert STAGE_LINE.match(line) and HIDDEN_STAGE_LINE.match(line)


@pytest.mark.parametrize("line", [
    "[pretrain] done in 22.0s steps=40 final_loss=6.772 val_loss=6.829",
    "[ingest] cached (449866d3, done 2026-11-29 06:30)",
    "[finetune] sst2: dev accuracy=0.5940 [0.5611, 0.6261] baseline 0.5092 above baseline in 18.3s",
    "[pretrain] failed after 3.1s: the step 12 loss is nan",
])
def test_results_and_failures_still_reach_it(line):
    assert STAGE_LINE.match(line) and not HIDDEN_STAGE_LINE.match(line)
