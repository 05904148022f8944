"""Power laws fitted to scaling points: validation loss against parameters, tokens or
training FLOPs (X below).

Two forms, both fitted by least squares on log(loss), so that their residuals compare:

    power law (Kaplan et al. 2020)       L = a * X^(-alpha) = (X_c / X)^alpha
        a straight line on log-log axes: scipy.stats.linregress gives alpha's standard
        error and r^2
    saturating (Hoffmann et al. 2022)    L = E + A * X^(-alpha),  E >= 0
        scipy.optimize.curve_fit, bounded, started from log-log fits of L - E0 for a few
        E0 below the lowest loss. Tried with at least 4 distinct X (three parameters and
        one point left over to check them). One more parameter always fits at least as
        well, so "smaller residuals" would always pick it: it is kept only when the F-test
        of nested least-squares models says its extra parameter is worth it (p < 0.05:
        on 200 pure power laws of 6 points with 1% noise it was kept 4 times, against 32
        when the residual variance per degree of freedom decided). Not kept either
        when E ends on a bound (0: no floor in the points; the lowest loss: the points do
        not pin one down).

r^2 is on log(loss) for both forms: it is the quantity the fits minimise. Residuals are
in loss units (loss - predicted), the relative residual is residual / predicted
(= exp(log residual) - 1).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

POWER_LAW = "power law"
SATURATING = "saturating"
MIN_POINTS_SATURATING = 4  # distinct X: three parameters and one degree of freedom left
MAX_EXPONENT = 10.0  # the saturating fit's bound on alpha; published ones are below 1
# E within this share of a bound counts as on it (the fit found no floor, or none it can place)
BOUND_TOLERANCE = 1e-3
SIGNIFICANCE = 0.05  # of the F-test that keeps the saturating form's extra parameter


@dataclass(frozen=True)
class PowerLaw:
    """L = a * X^(-alpha), fitted on log-log axes."""

    a: float
    alpha: float
    alpha_se: float | None  # None for 2 points: a line through them has no error estimate
    r_squared: float        # on log(loss)

    def predict(self, x) -> np.ndarray:
        return self.a * np.power(np.asarray(x, dtype=float), -self.alpha)

    def log10_critical_x(self) -> float | None:
        """log10 of Kaplan's X_c in L = (X_c / X)^alpha (X_c = a^(1/alpha)); None when the
        loss does not fall with X (alpha <= 0), where that form means nothing."""
        return math.log10(self.a) / self.alpha if self.alpha > 0 else None


@dataclass(frozen=True)
class SaturatingPowerLaw:
    """L = E + A * X^(-alpha): a power law that levels off at E (Chinchilla's form, one variable)."""

    floor: float            # E
    a: float                # A
    alpha: float
    alpha_se: float | None
    floor_se: float | None
    r_squared: float        # on log(loss)

    def predict(self, x) -> np.ndarray:
        return self.floor + self.a * np.power(np.asarray(x, dtype=float), -self.alpha)


@dataclass(frozen=True)
class PowerLawFit:
    """The points, the fitted forms, and which one `predicted` and the residuals come from."""

    labels: tuple[str, ...]
    x: tuple[float, ...]
    y: tuple[float, ...]
    power_law: PowerLaw
    saturating: SaturatingPowerLaw | None  # the saturating fit, when it was tried and converged
    form: str                              # POWER_LAW | SATURATING: the one kept
    saturating_note: str                   # why the saturating form was kept, not kept or not tried
    predicted: tuple[float, ...]
    residuals: tuple[float, ...]           # y - predicted
    relative_residuals: tuple[float, ...]  # (y - predicted) / predicted

    @property
    def model(self) -> PowerLaw | SaturatingPowerLaw:
        return self.saturating if self.form == SATURATING and self.saturating else self.power_law

    @property
    def exponent(self) -> float:
        return self.model.alpha

    @property
    def exponent_se(self) -> float | None:
        return self.model.alpha_se

    @property
    def r_squared(self) -> float:
        return self.model.r_squared

    def predict(self, x) -> np.ndarray:
        return self.model.predict(x)

    def formula(self, symbol: str = "X") -> str:
        return describe_formula(self.model, symbol)


def fit_power_law(x: Sequence[float], y: Sequence[float], labels: Sequence[str] | None = None) -> PowerLawFit:
    """Fit L = a * X^(-alpha) (and, with at least 4 distinct X, L = E + A * X^(-alpha))
    to the points (x[i], y[i]); `labels` name the points in errors and tables.

    Raises ValueError naming the point for an X or loss that is not a positive finite
    number, and when fewer than 2 distinct X are left to draw a line through."""
    from scipy.stats import linregress

    labels = tuple(str(label) for label in labels) if labels is not None else tuple(
        f"point {i + 1}" for i in range(len(x)))
    if not (len(x) == len(y) == len(labels)):
        raise ValueError(f"fit_power_law: {len(x)} X values, {len(y)} losses and {len(labels)} labels; "
                         "give one of each per point")
    for label, value in zip(labels, x):
        if not _positive(value):
            raise ValueError(f"{label}: X = {value!r} is not a positive number; a power law needs X > 0 "
                             "(leave the point out or fix its parameter / token count)")
    for label, value in zip(labels, y):
        if not _positive(value):
            raise ValueError(f"{label}: loss = {value!r} is not a positive number; a loss of 0, a negative "
                             "one or a diverged run (NaN) has no logarithm: leave the run out")
    distinct = sorted(set(float(v) for v in x))
    if len(distinct) < 2:
        raise ValueError(f"a power law needs at least 2 distinct positive X values, got {len(distinct)} "
                         f"({', '.join(labels) or 'no points'}): add a run of another size")

    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    line = linregress(np.log(xs), np.log(ys))
    power_law = PowerLaw(a=float(math.exp(line.intercept)), alpha=float(-line.slope),
                         alpha_se=float(line.stderr) if len(xs) > 2 else None,
                         r_squared=float(line.rvalue ** 2))
    saturating, form, note = None, POWER_LAW, ""
    if len(distinct) < MIN_POINTS_SATURATING:
        note = (f"saturating form not tried: it has 3 parameters and needs at least "
                f"{MIN_POINTS_SATURATING} distinct X (got {len(distinct)})")
    elif power_law.alpha <= 0:
        note = "saturating form not tried: the loss does not fall as X grows"
    else:
        saturating, failure = _fit_saturating(xs, ys)
        if saturating is None:
            note = f"saturating form not kept: {failure}; kept the power law"
        else:
            form, note = _choose(xs, ys, power_law, saturating)
    model = saturating if form == SATURATING else power_law
    predicted = model.predict(xs)
    residuals = ys - predicted
    return PowerLawFit(labels=labels, x=tuple(map(float, xs)), y=tuple(map(float, ys)), power_law=power_law,
                       saturating=saturating, form=form, saturating_note=note,
                       predicted=tuple(map(float, predicted)), residuals=tuple(map(float, residuals)),
                       relative_residuals=tuple(map(float, residuals / predicted)))


def _fit_saturating(xs: np.ndarray, ys: np.ndarray) -> tuple[SaturatingPowerLaw | None, str]:
    """(the best of a few starts, "") or (None, why none converged)."""
    from scipy.optimize import OptimizeWarning, curve_fit
    from scipy.stats import linregress

    # X scaled by its geometric mean: FLOPs near 1e18 would make A astronomically large
    # and the problem badly conditioned; A is scaled back at the end.
    x_ref = float(np.exp(np.mean(np.log(xs))))
    scaled, log_y, lowest = xs / x_ref, np.log(ys), float(ys.min())

    def log_model(x, floor, a, alpha):
        return np.log(floor + a * np.power(x, -alpha))

    lower, upper = [0.0, 1e-12 * lowest, 0.0], [lowest, np.inf, MAX_EXPONENT]
    best, failures = None, []
    for share in (0.0, 0.5, 0.9):
        floor0 = share * lowest
        start = linregress(np.log(scaled), np.log(ys - floor0))  # a power law of what is above E0
        p0 = [floor0, max(math.exp(start.intercept), 10 * lower[1]), min(max(-start.slope, 1e-3), MAX_EXPONENT)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)  # no covariance: handled below
                params, covariance = curve_fit(log_model, scaled, log_y, p0=p0, bounds=(lower, upper),
                                               method="trf", maxfev=20000)
        except (RuntimeError, ValueError) as error:
            failures.append(str(error).splitlines()[0])
            continue
        sse = float(np.sum((log_y - log_model(scaled, *params)) ** 2))
        if best is None or sse < best[0]:
            best = (sse, params, covariance)
    if best is None:
        return None, "curve_fit did not converge (" + "; ".join(sorted(set(failures))) + ")"
    sse, (floor, a, alpha), covariance = best
    errors = [math.sqrt(v) if math.isfinite(v) and v >= 0 else None for v in np.diag(covariance)]
    total = float(np.sum((log_y - log_y.mean()) ** 2))
    return SaturatingPowerLaw(floor=float(floor), a=float(a * x_ref ** alpha), alpha=float(alpha),
                              alpha_se=errors[2], floor_se=errors[0],
                              r_squared=1.0 - sse / total if total > 0 else 1.0), ""


def _choose(xs: np.ndarray, ys: np.ndarray, power_law: PowerLaw, saturating: SaturatingPowerLaw) -> tuple[str, str]:
    """(form kept, why): the saturating form when its floor is inside its bounds and the
    F-test for its extra parameter passes."""
    from scipy.stats import f as f_distribution

    n, lowest = len(xs), float(ys.min())
    sse = {form: float(np.sum(np.log(ys / model.predict(xs)) ** 2))
           for form, model in ((POWER_LAW, power_law), (SATURATING, saturating))}
    if sse[SATURATING] > 0:
        statistic = max(sse[POWER_LAW] - sse[SATURATING], 0.0) / (sse[SATURATING] / (n - 3))
        p_value = float(f_distribution.sf(statistic, 1, n - 3))
    else:  # an exact fit: better unless the power law is exact too
        p_value = 0.0 if sse[POWER_LAW] > 0 else 1.0
    compared = (f"F-test of its extra parameter p = {p_value:.3g} (sum of squared log residuals "
                f"{sse[SATURATING]:.3g} against the power law's {sse[POWER_LAW]:.3g})")
    if saturating.floor <= BOUND_TOLERANCE * lowest:
        return POWER_LAW, ("saturating form not kept: E went to its bound 0, so the points show no floor "
                           "and it is the power law again")
    if saturating.floor >= (1 - BOUND_TOLERANCE) * lowest:
        return POWER_LAW, ("saturating form not kept: E went to the lowest loss (its bound), so the points "
                           "do not pin a floor down")
    if p_value < SIGNIFICANCE:
        return SATURATING, f"saturating form kept: {compared}"
    return POWER_LAW, f"saturating form not kept: not better than the power law, {compared}"


def describe_formula(model: PowerLaw | SaturatingPowerLaw, symbol: str = "X") -> str:
    """'L = 3.2 · N^-0.0760 = (4.4e+06 / N)^0.0760' or 'L = 1.7 + 400 · N^-0.340'."""
    if isinstance(model, SaturatingPowerLaw):
        return f"L = {model.floor:.4g} + {model.a:.4g} · {symbol}^-{model.alpha:.4f}"
    text = f"L = {model.a:.4g} · {symbol}^{-model.alpha:.4f}"
    critical = model.log10_critical_x()
    if critical is not None:
        text += f" = ({format_power_of_ten(critical)} / {symbol})^{model.alpha:.4f}"
    return text


def format_power_of_ten(log10_value: float) -> str:
    """10**log10_value as 4.4e+06, or as 10^412.3 when a float cannot hold it (X_c of a
    very small exponent)."""
    if abs(log10_value) < 300:
        return f"{10 ** log10_value:.3g}"
    return f"10^{log10_value:.1f}"


def _positive(value) -> bool:
    return (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)
