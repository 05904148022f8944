"""The scaling section over hand-written runs (tests/support/synthetic_run.py): a table of each
fit's inputs and residuals that matches a fit done here with numpy, the exponent, a PNG
per varying axis, downstream scores, and nothing at all for runs of one size."""

from __future__ import annotations

import base64
import re

import numpy as np

from tests.support.synthetic_run import write_run
from views.run_source import load_run_source
from views.scaling import scaling_section

VOCAB, SEQ_LEN, LAYERS = 2048, 128, 2
BATCH = {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "num_workers": 2}  # 16 sequences a step


def gpt_run(root, name: str, hidden: int, val_loss: float, steps: int = 40, downstream: bool = True):
    """A finished run of a 2-layer GPT-2 of width `hidden`, with its true parameter count
    shape (embeddings + 12 L C^2) and the given final validation loss; without
    `downstream`, no fine-tuning or evaluation (3 plots fewer: the test runs faster)."""
    directory = write_run(
        root / name, name=name, stop_before=None if downstream else "finetune",
        config_overrides={"pretrain": {**BATCH, "model": {"family": "gpt", "num_layers": LAYERS,
                                                          "hidden_size": hidden}},
                          "dataset": {"objective": "clm", "seq_len": SEQ_LEN}},
        pretrain_metrics={"num_parameters": (VOCAB + SEQ_LEN) * hidden + 12 * LAYERS * hidden ** 2,
                          "val_loss": val_loss, "steps": steps})
    return load_run_source(directory)


def test_three_sizes_give_a_fit_with_its_residuals(tmp_path):
    hidden, losses = [32, 64, 128], [4.1, 3.8, 3.55]
    sources = [gpt_run(tmp_path, f"h{h}", h, loss) for h, loss in zip(hidden, losses)]
    html, md = scaling_section(sources)

    # Kaplan's non-embedding N: 12 * layers * hidden^2, known for every GPT-2 run.
    n = np.array([12 * LAYERS * h ** 2 for h in hidden], dtype=float)
    slope, intercept = np.polyfit(np.log(n), np.log(losses), 1)
    predicted = np.exp(intercept) * n ** slope
    assert "### Validation loss against parameters" in md
    for h, size, loss, guess in zip(hidden, n, losses, predicted):
        residual = loss - guess
        assert (f"| h{h} | {int(size):,} | {loss:.4f} | {guess:.4f} | {residual:+.4f} | "
                f"{residual / guess:+.2%} |") in md
    assert f"exponent alpha = {-slope:.4f} ± " in md
    assert "Kaplan et al. (2020): alpha_N = 0.076" in md and "E = 1.69" in md
    assert "needs at least 4 distinct X (got 3)" in md
    # Tokens do not vary (40 steps x 16 x 128 each): one line, no fit. FLOPs do, through N.
    assert "every point has D = 81,920; nothing to fit." in md
    assert "### Validation loss against training FLOPs" in md and "C changes here through parameters." in md
    assert "| h32 | 94,208 | 24,576 | 81,920 | 1.2080e+10 | 4.1000 |" in md  # C = 6 * 24,576 * 81,920

    # Plots: loss against N and C, and downstream scores (fine-tuning and zero/few-shot)
    # against compute, every one an embedded PNG.
    pngs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(pngs) == 5
    assert all(base64.b64decode(png).startswith(b"\x89PNG\r\n\x1a\n") for png in pngs)
    assert "### Downstream scores against training compute" in md
    assert "| GLUE average | 0.6250 | 0.6250 | 0.6250 |" in md
    assert "<h3>Validation loss against parameters</h3>" in html and "scaling-residuals" in html


def test_tokens_axis_when_runs_train_for_different_steps(tmp_path):
    sources = [gpt_run(tmp_path, f"s{steps}", 64, loss, steps=steps, downstream=False)
               for steps, loss in ((20, 4.3), (40, 4.0), (80, 3.8), (160, 3.65))]
    _, md = scaling_section(sources)
    assert "### Validation loss against training tokens" in md
    assert "| s20 | 40,960 | 4.3000 |" in md  # 20 steps x 16 sequences x 128 tokens
    assert "Kaplan et al. (2020): alpha_D = 0.095" in md
    assert "Parameters: every point has N = 98,304; nothing to fit." in md


def test_runs_of_one_size_give_nothing(tmp_path):
    same = [gpt_run(tmp_path, f"seed{i}", 64, 3.8 + 0.01 * i, downstream=False) for i in range(3)]
    assert scaling_section(same) == ("", "")
    # Runs that do not record their size (older manifests) have nothing to plot either.
    unsized = [load_run_source(write_run(tmp_path / f"old{i}", name=f"old{i}", lr=0.001 * (i + 1)))
               for i in range(2)]
    assert scaling_section(unsized) == ("", "")


def test_unfinished_and_diverged_runs_are_left_out_and_said_so(tmp_path):
    sources = [gpt_run(tmp_path, f"h{h}", h, loss, downstream=False) for h, loss in ((32, 4.1), (64, 3.8))]
    sources.append(gpt_run(tmp_path, "h128", 128, float("nan"), downstream=False))
    sources.append(load_run_source(write_run(tmp_path / "running", name="running", stop_before="pretrain")))
    _, md = scaling_section(sources)
    assert "1 of 4 runs have no finished pretrain stage and are left out." in md
    assert "no positive finite val_loss in the pretrain manifest (diverged or never validated): h128." in md
    assert "no standard error: a line through 2 points" in md
    assert "Downstream" not in md  # no run has scores


def test_run_names_in_the_markdown_are_text_never_html(tmp_path):
    # sweep.md carries this section, and the dashboard serves it.
    hostile = "h64<img src=x onerror=alert(1)>|"
    sources = [gpt_run(tmp_path, name, h, loss, downstream=False)
               for name, h, loss in (("h32", 32, 4.1), (hostile, 64, 3.8), ("h128<b>", 128, float("nan")))]
    _, md = scaling_section(sources)
    assert "<img" not in md and "<b>" not in md
    escaped = "h64&lt;img src=x onerror=alert(1)&gt;\\|"
    assert f"| {escaped} | " in md  # the inputs and residuals tables: one cell
    assert "diverged or never validated): h128&lt;b&gt;." in md  # and the notes
