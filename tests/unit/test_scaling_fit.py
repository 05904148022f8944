"""Power-law fits of loss against scale (views/scaling_fit.py): exponents recovered
from synthetic points with and without noise, the saturating form's floor, residuals,
and clear errors for points that cannot be fitted."""

from __future__ import annotations

import math

import numpy as np
import pytest

from views.scaling_fit import POWER_LAW, SATURATING, fit_power_law

SIZES = np.logspace(5, 8, 6)  # 6 model sizes over 3 decades, as a small sweep would have


def test_pure_power_law_is_recovered_exactly():
    fit = fit_power_law(SIZES, 3.2 * SIZES ** -0.076)
    assert fit.form == POWER_LAW
    assert fit.exponent == pytest.approx(0.076, abs=1e-9)
    assert fit.power_law.a == pytest.approx(3.2, rel=1e-9)
    assert fit.r_squared == pytest.approx(1.0, abs=1e-12)
    assert np.allclose(fit.residuals, 0.0, atol=1e-12)
    # Kaplan's form L = (X_c / X)^alpha: X_c = a^(1/alpha)
    assert 10 ** fit.power_law.log10_critical_x() == pytest.approx(3.2 ** (1 / 0.076), rel=1e-6)
    assert "N^-0.0760" in fit.formula("N") and "/ N)^0.0760" in fit.formula("N")
    # E went to 0: without a floor the saturating form is the power law again
    assert "bound 0" in fit.saturating_note


def test_noisy_power_law_exponent_within_four_standard_deviations():
    rng = np.random.default_rng(0)
    noise = 0.01  # 1% multiplicative noise: log(loss) gets N(0, 0.01^2)
    fit = fit_power_law(SIZES, 3.2 * SIZES ** -0.076 * np.exp(rng.normal(0.0, noise, SIZES.size)))
    # The log-log slope's standard deviation is sigma / sqrt(sum (log x - mean)^2) = 0.0017
    # here (2.3% of 0.076); 4 of them leave a chance below 1e-4 of failing for any seed.
    log_x = np.log(SIZES)
    slope_sd = noise / math.sqrt(np.sum((log_x - log_x.mean()) ** 2))
    assert abs(fit.exponent - 0.076) < 4 * slope_sd
    # The reported standard error estimates that figure from 4 degrees of freedom: a factor
    # of 3 either way holds with probability above 0.97 for any seed.
    assert slope_sd / 3 < fit.exponent_se < 3 * slope_sd
    assert 0.99 < fit.r_squared < 1.0


def test_saturating_form_recovers_floor_and_exponent():
    losses = 1.7 + 400 * SIZES ** -0.34
    fit = fit_power_law(SIZES, losses)
    assert fit.form == SATURATING and fit.saturating_note.startswith("saturating form kept")
    assert fit.saturating.floor == pytest.approx(1.7, abs=1e-6)
    assert fit.exponent == pytest.approx(0.34, abs=1e-6)
    assert fit.saturating.a == pytest.approx(400, rel=1e-5)
    assert np.allclose(fit.predicted, losses, rtol=1e-9)
    # The pure power law stays beside it and bends away from the points.
    assert fit.power_law.r_squared < 0.99

    # With 0.2% noise: over 200 seeds the floor's error stayed below 0.042 and the
    # exponent's below 0.0061; 0.05 and 0.008 leave room above the worst seed.
    rng = np.random.default_rng(1)
    noisy = fit_power_law(SIZES, losses * np.exp(rng.normal(0.0, 0.002, SIZES.size)))
    assert noisy.form == SATURATING
    assert abs(noisy.saturating.floor - 1.7) < 0.05
    assert abs(noisy.exponent - 0.34) < 0.008


def test_saturating_fit_works_on_flops_scale():
    # X near 1e18 (training FLOPs): A = 1e18^0.3 makes the power term about 1 there.
    flops = np.logspace(16, 20, 6)
    fit = fit_power_law(flops, 1.69 + 10 ** 5.4 * flops ** -0.3)
    assert fit.form == SATURATING
    assert fit.saturating.floor == pytest.approx(1.69, abs=1e-5)
    assert fit.exponent == pytest.approx(0.3, abs=1e-5)


def test_residuals_are_loss_minus_prediction():
    rng = np.random.default_rng(2)
    losses = 3.2 * SIZES ** -0.076 * np.exp(rng.normal(0.0, 0.02, SIZES.size))
    fit = fit_power_law(SIZES, losses, labels=[f"run{i}" for i in range(6)])
    assert fit.form == POWER_LAW
    predicted = fit.power_law.a * SIZES ** -fit.power_law.alpha
    assert np.allclose(fit.predicted, predicted, rtol=1e-12)
    assert np.array_equal(np.array(fit.residuals), losses - np.array(fit.predicted))
    assert np.allclose(fit.relative_residuals, (losses - predicted) / predicted, rtol=1e-12)
    # Least squares with an intercept on log-log axes: the log residuals sum to 0,
    # while the residuals in loss units need not.
    assert abs(np.sum(np.log(losses / predicted))) < 1e-12
    assert abs(sum(fit.residuals)) > 1e-6
    assert fit.labels == tuple(f"run{i}" for i in range(6))


def test_few_points_fit_the_power_law_only():
    two = fit_power_law([1e5, 1e6], [4.0, 3.5])
    assert two.exponent == pytest.approx(math.log10(4.0 / 3.5), rel=1e-12)
    assert two.exponent_se is None  # a line through 2 points has no error estimate
    assert "needs at least 4 distinct X (got 2)" in two.saturating_note
    # Repeated sizes (seeds) give the line's error even with 2 distinct X.
    repeated = fit_power_law([1e5, 1e6, 1e6], [4.0, 3.5, 3.6])
    assert repeated.exponent_se > 0 and "(got 2)" in repeated.saturating_note
    three = fit_power_law([1e5, 1e6, 1e7, 1e7], [4.0, 3.5, 3.2, 3.3])
    assert three.exponent_se is not None and "(got 3)" in three.saturating_note
    rising = fit_power_law([1e5, 1e6, 1e7, 1e8], [3.0, 3.1, 3.3, 3.4])
    assert rising.exponent < 0 and rising.power_law.log10_critical_x() is None
    assert "does not fall" in rising.saturating_note and ")^" not in rising.formula()


@pytest.mark.parametrize("x, y, message", [
    ([1e5, 1e5, 1e5], [4.0, 3.9, 4.1], r"at least 2 distinct positive X values, got 1 \(a, b, c\)"),
    ([1e5, 0, 1e7], [4.0, 3.9, 3.8], r"b: X = 0 is not a positive number"),
    ([1e5, 1e6, -1e7], [4.0, 3.9, 3.8], r"c: X = -10000000.0 is not a positive number"),
    ([1e5, 1e6, 1e7], [4.0, 0.0, 3.8], r"b: loss = 0.0 is not a positive number.*leave the run out"),
    ([1e5, 1e6, 1e7], [4.0, 3.9, float("nan")], r"c: loss = nan is not a positive number"),
    ([1e5, 1e6], [4.0, 3.9, 3.8], r"2 X values, 3 losses and 2 labels"),
])
def test_bad_points_are_errors_that_name_them(x, y, message):
    labels = ["a", "b", "c"][:len(x)]
    with pytest.raises(ValueError, match=message):
        fit_power_law(x, y, labels)


def test_points_are_named_by_position_without_labels():
    with pytest.raises(ValueError, match="point 2: loss = -1"):
        fit_power_law([1e5, 1e6], [4.0, -1])
