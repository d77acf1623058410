"""Statistics of a seed sweep: is an implementation better, worse or equivalent to the reference?

Every distribution comes from :mod:`scipy.stats`; this module only assembles the formulas. With
``n`` paired seeds, ``d_i = impl_i - ref_i`` (same seed), ``d̄`` their mean and ``s_d`` their sample
std (ddof=1):

* 95% CI of the mean Δ: ``d̄ ± t(0.975, n-1) · s_d/√n``, ``stats.ttest_rel(...).confidence_interval(0.95)``;
  p-value: the paired t-test ``stats.ttest_rel(impl, ref)``.
* Equivalence (TOST at margin ε): two one-sided one-sample t-tests on ``d``,
  ``stats.ttest_1samp(d, -ε, alternative="greater")`` and ``stats.ttest_1samp(d, +ε, alternative="less")``;
  ``p_TOST`` is the larger p. ``p_TOST < α`` is the same as the 90% CI lying inside ``(-ε, +ε)``.
* Unpaired (Welch): where too few seeds match to pair on (:func:`pairing_seeds`: pairing needs the matched seeds
  to be all of one side's runs, or at least :data:`MIN_PARTIAL_PAIRS` and most of each side's), all the finite
  runs of both sides are compared by Welch's unequal-variance test, ``stats.ttest_ind(..., equal_var=False)``,
  and TOST with the same two shifted one-sided Welch tests.
* Power: the paired t statistic with true mean δ has a noncentral t distribution with ``n-1`` degrees
  of freedom and noncentrality ``δ√n/σ`` (``stats.nct``); see :func:`tost_power`,
  :func:`minimum_detectable_effect`; Welch's with the Welch–Satterthwaite degrees of freedom and noncentrality
  ``δ/√(s_impl²/n_impl + s_ref²/n_ref)`` (:func:`welch_power`). The MDE a report gives is that of its own
  better/worse verdict, of the test it ran: two-sided at :data:`ALPHA_DIFFERENCE` / k over k implementations
  (:attr:`Comparison.detect_alpha`).

* Verdicts: **better/worse** when the two-sided p, Holm-adjusted over the implementations of the sweep
  (:func:`holm`, ``statsmodels.stats.multitest``), is below :data:`ALPHA_DIFFERENCE` (0.01): a sweep of five
  kernels makes five tests, and a review asks for a difference claim to survive that; **equivalent** when
  TOST rejects at :data:`ALPHA` (0.05), one claim per implementation, as equivalence testing does.
* The tightest margin the data support: the largest ``|end|`` of the 90% CI of Δ, the smallest ε at which
  TOST at α = 0.05 would call the pair equivalent (:func:`tightest_margin`).
* Pairing check: ``corr(impl, ref)`` over the paired seeds and ``var(d) / (var(impl) + var(ref))``;
  pairing helps only when that ratio is below 1 (a positive correlation); otherwise the Welch interval of
  the same runs is as informative, and the report shows it beside the paired one (:func:`pairing_check`).
* The paired std is itself an estimate from few seeds: its one-sided 95% upper confidence bound
  ``s_d · sqrt((n-1) / χ²(0.05, n-1))`` (4.4 × ``s_d`` with 3 seeds) gives the MDE a sweep can promise
  (:func:`sd_upper_bound`).

When all Δ are equal (``s_d = 0``, e.g. deterministic runs of the same kernel) the t statistic is
undefined; the limit as the spread goes to 0 is used instead: CI = [d̄, d̄], p = 1 if d̄ = 0 else 0,
equivalent iff ``|d̄| < ε``.
"""

from __future__ import annotations

import importlib
import inspect
import math
import statistics
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from types import ModuleType

import numpy as np


class _OnFirstUse:
    """A module imported at its first attribute access. Why: Hydra instantiates the sweep's report callback
    (``conf/config.yaml``) in every ``python -m llm.train``, single runs and refused commands included, and
    importing ``scipy.stats`` is a noticeable part of that start on a CPU, and only a sweep's end needs it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> object:
        module: ModuleType = importlib.import_module(self._name)
        return getattr(module, attr)


stats = _OnFirstUse("scipy.stats")
optimize = _OnFirstUse("scipy.optimize")

ALPHA = 0.05  # equivalence (TOST), confidence intervals, power
#: "better" / "worse" need the Holm-adjusted two-sided p below this (a claim of a difference, made for several
#: implementations at once, is held to a stricter level than the equivalence each one is tested for).
ALPHA_DIFFERENCE = 0.01
POWER = 0.8
#: Confidence of the upper bound of the paired std that the MDE is also given at.
SD_BOUND_CONFIDENCE = 0.95
#: Seeds beyond which "about N needed" is reported as "more than" this.
MAX_SEEDS = 100_000
#: Fewest matched seeds a paired test runs on when both sides have runs without a counterpart (fewer: Welch on all
#: runs), since Welch then gains degrees of freedom from both sides while a paired t on two pairs has only one.
MIN_PARTIAL_PAIRS = 3

BETTER, WORSE, EQUIVALENT, INCONCLUSIVE, SINGLE = "better", "worse", "equivalent", "inconclusive", "single seed"
PAIRED, WELCH = "paired", "unpaired (Welch)"

multitest = _OnFirstUse("statsmodels.stats.multitest")  # slow to import, and only a sweep's end needs it


def mean_std(values: Iterable[float | None]) -> tuple[float | None, float | None, int]:
    """Mean, sample std (ddof=1; None for fewer than 2 values) and count of the finite values.

    A missing value and a non-finite one (nan or ±inf: an eval that diverged) are left out alike: an inf is no
    sample of a mean, and ``statistics.stdev`` fails on it."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return None, None, 0
    mean = statistics.fmean(vals)
    std = statistics.stdev(vals) if len(vals) > 1 else None
    return mean, std, len(vals)


def _no_spread(values: Sequence[float]) -> bool:
    """True when the values are equal up to rounding: the t statistic is then 0/0."""
    arr = np.asarray(values, dtype=float)
    return float(np.ptp(arr)) <= 1e-12 * max(1.0, float(np.max(np.abs(arr))))


@dataclass(frozen=True)
class PairingCheck:
    """Does pairing by seed help this comparison? (The same runs, paired and unpaired.)"""

    corr: float | None  # Pearson correlation of impl and reference over the paired seeds (None: n < 3 or no spread)
    var_ratio: float | None  # var(impl − ref) / (var(impl) + var(ref)); below 1 pairing helps
    welch_ci: tuple[float, float] | None  # 95% Welch CI of the same runs, taken as unpaired

    @property
    def helps(self) -> bool | None:
        return None if self.var_ratio is None else self.var_ratio < 1.0


@dataclass(frozen=True)
class Comparison:
    """One metric of one implementation against the reference (Δ = impl − reference)."""

    method: str  # PAIRED or WELCH: the test every number below comes from
    n: int  # paired seeds (PAIRED) or the implementation's runs (WELCH)
    n_ref: int  # paired seeds (PAIRED) or the reference's runs (WELCH)
    delta: float  # mean paired Δ, or difference of the means
    sd: float | None  # std of the paired Δ (PAIRED); sqrt(s_impl² + s_ref²) (WELCH); None with one seed
    ci: tuple[float, float] | None  # 95% CI of Δ; None with one seed
    p: float | None  # two-sided t-test p-value (paired or Welch)
    p_tost: float | None  # TOST p-value at ±margin
    margin: float
    verdict: str  # BETTER, WORSE, EQUIVALENT, INCONCLUSIVE or SINGLE
    seeds_needed: int | None  # for INCONCLUSIVE: paired seeds for TOST at 80% power (None: more than MAX_SEEDS)
    lower_is_better: bool = True
    p_holm: float | None = None  # p adjusted by Holm over the sweep's implementations (set by :func:`holm`)
    n_tests: int = 1  # the size of the family the Holm adjustment ran over
    tightest_margin: float | None = None  # the largest |end| of the 90% CI: "equivalent within ±this"
    sd_upper: float | None = None  # one-sided 95% upper confidence bound of ``sd`` (PAIRED)
    pairing: PairingCheck | None = None  # PAIRED with >= 2 seeds
    se: float | None = None  # standard error of Δ in the t-test: sd/√n (PAIRED), √(s_impl²/n + s_ref²/n_ref) (WELCH)
    df: float | None = None  # the t-test's degrees of freedom: n − 1 (PAIRED), Welch–Satterthwaite (WELCH)

    @property
    def detect_alpha(self) -> float:
        """The two-sided level below which a p is called better/worse whatever the other implementations' p:
        :data:`ALPHA_DIFFERENCE` over the ``n_tests`` of the Holm family (Holm's first step; a p below it is
        rejected at every step). The MDE is given at this level, not at :data:`ALPHA`: an effect the t-test finds
        at α = 0.05 with 80% power, the verdict would call with far less."""
        return ALPHA_DIFFERENCE / max(1, self.n_tests)

    # The MDEs are computed when first read, at this comparison's own detect_alpha: a comparison is decided alone and
    # then again in its Holm family (a new object each time), so only the level that is reported is ever solved for.
    @cached_property
    def mde(self) -> float | None:
        """Minimum detectable |Δ| of this comparison's own better/worse test at 80% power and :attr:`detect_alpha`:
        the paired t-test with these seeds (PAIRED), or Welch's test with these runs (WELCH); None with one seed."""
        if self.p is None or self.sd is None:
            return None
        if self.method == PAIRED:
            return minimum_detectable_effect(self.sd, self.n, alpha=self.detect_alpha)
        return welch_minimum_detectable_effect(self.se, self.df, alpha=self.detect_alpha)

    @cached_property
    def mde_upper(self) -> float | None:
        """The paired MDE at ``sd_upper`` (what the sweep can promise); None unpaired, where no bound is computed."""
        if self.p is None or self.method != PAIRED:
            return None
        return minimum_detectable_effect(self.sd_upper, self.n, alpha=self.detect_alpha)


def _verdict(delta: float, p: float, p_tost: float, lower_is_better: bool) -> str:
    """worse/better when ``p`` (Holm-adjusted where a sweep compares several) is below ALPHA_DIFFERENCE (the
    sign decides); else equivalent when TOST rejects at ALPHA; else inconclusive."""
    if p < ALPHA_DIFFERENCE:
        return BETTER if (delta < 0) == lower_is_better else WORSE
    return EQUIVALENT if p_tost < ALPHA else INCONCLUSIVE


def pairing_seeds(mine: Iterable, theirs: Iterable, runs: tuple[int, int] | None = None) -> list | None:
    """The seeds two groups are compared on, paired, or None to compare all their runs unpaired (Welch).

    ``mine`` and ``theirs``: each group's seeds with a finite value; ``runs``: each group's count of finite runs,
    runs without a seed included (default: its seeds). Paired on the seeds both have when they are all the runs of
    one group (or of both); else, where both groups have runs without a counterpart, when at least
    :data:`MIN_PARTIAL_PAIRS` seeds match and they are most (more than half) of each group's runs; else Welch on
    all the runs of both. A pairing leaves the runs without a counterpart out of the test (reported as unmatched),
    so it is chosen only where Welch on all the runs could not gain much from them.
    """
    mine, theirs = {s for s in mine if s is not None}, {s for s in theirs if s is not None}
    n_mine, n_theirs = runs if runs is not None else (len(mine), len(theirs))
    common = sorted(mine & theirs)
    k = len(common)
    # where all of one group's runs pair, Welch's standard error and degrees of freedom are bounded by that group, so
    # the other group's extra runs cannot make up for the pairing given up (a group of one run cannot run Welch at all)
    if common and k == min(n_mine, n_theirs):
        return common
    if k >= MIN_PARTIAL_PAIRS and 2 * k > max(n_mine, n_theirs):
        return common
    return None


def paired_test(d: Sequence[float], margin: float) -> tuple[tuple[float, float], float, float]:
    """(95% CI of the mean, two-sided p, TOST p at ±margin) of paired differences ``d`` (n >= 2)."""
    mean = float(np.mean(d))
    if _no_spread(d):
        return (mean, mean), (1.0 if mean == 0.0 else 0.0), (0.0 if abs(mean) < margin else 1.0)
    res = stats.ttest_1samp(d, 0.0)
    ci = res.confidence_interval(1 - ALPHA)
    p_low = stats.ttest_1samp(d, -margin, alternative="greater").pvalue
    p_high = stats.ttest_1samp(d, margin, alternative="less").pvalue
    return (float(ci.low), float(ci.high)), float(res.pvalue), float(max(p_low, p_high))


def welch_test(a: Sequence[float], b: Sequence[float], margin: float) -> tuple[tuple[float, float], float, float]:
    """(95% CI of mean(a) − mean(b), Welch two-sided p, Welch TOST p at ±margin); both samples n >= 2."""
    diff = float(np.mean(a) - np.mean(b))
    if _no_spread(a) and _no_spread(b):
        # equal values average to means that may differ in the last bit (three 0.4s against five): no difference
        diff = 0.0 if _no_spread([float(np.mean(a)), float(np.mean(b))]) else diff
        return (diff, diff), (1.0 if diff == 0.0 else 0.0), (0.0 if abs(diff) < margin else 1.0)
    a_, b_ = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    res = stats.ttest_ind(a_, b_, equal_var=False)
    ci = res.confidence_interval(1 - ALPHA)
    # mean(a) - mean(b) > -ε  <=>  mean(a) - mean(b - ε) > 0, and likewise for +ε
    p_low = stats.ttest_ind(a_, b_ - margin, equal_var=False, alternative="greater").pvalue
    p_high = stats.ttest_ind(a_, b_ + margin, equal_var=False, alternative="less").pvalue
    return (float(ci.low), float(ci.high)), float(res.pvalue), float(max(p_low, p_high))


def tightest_margin(d: Sequence[float] | None = None, a: Sequence[float] | None = None,
                    b: Sequence[float] | None = None) -> float:
    """The largest ``|end|`` of the 90% CI of Δ: paired (``d``) or Welch (``a`` − ``b``).

    TOST at α = 0.05 and margin ε rejects exactly when the 90% CI lies inside (−ε, +ε), so this is the
    tightest margin the data support ("equivalent within ±m" for any m above it).
    """
    if d is not None:
        mean = float(np.mean(d))
        if _no_spread(d):
            return abs(mean)
        ci = stats.ttest_1samp(d, 0.0).confidence_interval(1 - 2 * ALPHA)
    else:
        assert a is not None and b is not None
        mean = float(np.mean(a) - np.mean(b))
        if _no_spread(a) and _no_spread(b):
            return abs(mean)
        ci = stats.ttest_ind(np.asarray(a, float), np.asarray(b, float), equal_var=False).confidence_interval(
            1 - 2 * ALPHA)
    return float(max(abs(ci.low), abs(ci.high)))


def sd_upper_bound(sd: float, n: int, confidence: float = SD_BOUND_CONFIDENCE) -> float | None:
    """One-sided upper confidence bound of a standard deviation estimated from ``n`` values (chi-square):
    ``sd · sqrt((n − 1) / χ²(1 − confidence, n − 1))``. With n = 3 at 95%: 4.41 × ``sd``. None for n < 2."""
    if n < 2 or sd is None or math.isnan(sd):
        return None
    return float(sd * math.sqrt((n - 1) / stats.chi2.ppf(1 - confidence, n - 1)))


def pairing_check(impl: Sequence[float], ref: Sequence[float], margin: float) -> PairingCheck:
    """Correlation of the paired values, var(paired Δ)/var(unpaired Δ), and the Welch CI of the same runs.

    The unpaired variance of one difference is ``var(impl) + var(ref)``; the paired one is
    ``var(impl − ref)`` = that minus ``2 cov``. A ratio at or above 1 means pairing by seed gained nothing
    (the seed does not steer both runs alike, as when training is chaotic).
    """
    a, b = np.asarray(impl, dtype=float), np.asarray(ref, dtype=float)
    corr = None
    if len(a) >= 3 and not _no_spread(a) and not _no_spread(b):
        corr = float(stats.pearsonr(a, b).statistic)
    unpaired = float(np.var(a, ddof=1) + np.var(b, ddof=1))
    ratio = float(np.var(a - b, ddof=1)) / unpaired if unpaired > 0 else None
    welch_ci = welch_test(a, b, margin)[0] if len(a) >= 2 else None
    return PairingCheck(corr, ratio, welch_ci)


def tost_power(n: int, sd: float, margin: float, delta: float = 0.0, alpha: float = ALPHA) -> float:
    """Power of the paired TOST with ``n`` seeds, paired std ``sd``, true mean Δ ``delta``.

    Each one-sided test rejects when its t statistic exceeds ``t(1-α, n-1)``; its statistic is
    noncentral t with noncentrality ``(ε ± δ)√n/σ``, so it rejects with probability
    ``stats.nct.sf(t_crit, n-1, (ε ± δ)√n/σ)``. Power of both rejecting is taken as
    ``P1 + P2 − 1`` (the Bonferroni lower bound; slightly conservative for small n).
    """
    if sd <= 0.0:
        return 1.0 if abs(delta) < margin else 0.0
    df, crit = n - 1, stats.t.ppf(1 - alpha, n - 1)
    p_low = stats.nct.sf(crit, df, (margin + delta) * math.sqrt(n) / sd)
    p_high = stats.nct.sf(crit, df, (margin - delta) * math.sqrt(n) / sd)
    return float(max(0.0, p_low + p_high - 1.0))


def t_test_power(n: int, sd: float, effect: float, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test with ``n`` seeds to detect a true mean Δ of ``effect``.

    ``P(|T| > t(1-α/2, n-1))`` for ``T ~ stats.nct(n-1, effect·√n/σ)``. The lower tail is taken as
    ``nct.sf(crit, df, -nc)`` (``-T`` is noncentral t with ``-nc``): scipy's ``nct.cdf`` far in the tail
    returns NaN for large ``nc`` (scipy 1.17), its ``sf`` does not.
    """
    if sd <= 0.0:
        return 1.0 if effect != 0.0 else 0.0
    df, crit = n - 1, stats.t.ppf(1 - alpha / 2, n - 1)
    nc = effect * math.sqrt(n) / sd
    return float(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc))


def _smallest_n(enough: Callable[[int], bool], start: int = 2) -> int | None:
    """Smallest n >= start with ``enough(n)`` (monotone in n): doubling, then bisection; None past MAX_SEEDS."""
    if enough(start):
        return start
    lo, hi = start, start * 2
    while not enough(hi):
        if hi >= MAX_SEEDS:
            return None
        lo, hi = hi, min(hi * 2, MAX_SEEDS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def seeds_for_equivalence(sd: float, margin: float, power: float = POWER) -> int | None:
    """Paired seeds needed for TOST at ±margin to reach ``power`` if the true Δ were 0 and σ = ``sd``.

    The smallest n >= 2 with :func:`tost_power` ``(n, sd, margin, delta=0) >= power``: "if the two
    implementations really are the same, how many seeds to show it with the spread observed so far".
    None when more than :data:`MAX_SEEDS` would be needed.
    """
    return _smallest_n(lambda n: tost_power(n, sd, margin) >= power)


def seeds_for_effect(sd: float, effect: float, power: float = POWER, alpha: float = ALPHA) -> int | None:
    """Paired seeds for the two-sided paired t-test at ``alpha`` to detect ``effect`` with ``power`` (σ = ``sd``)."""
    return _smallest_n(lambda n: t_test_power(n, sd, effect, alpha) >= power)


def welch_power(se: float, df: float, effect: float, alpha: float = ALPHA) -> float:
    """Power of the two-sided Welch test to detect a true Δ of ``effect`` where Δ's standard error is ``se`` with
    ``df`` (Welch–Satterthwaite) degrees of freedom: ``P(|T| > t(1-α/2, df))`` for ``T ~ stats.nct(df, effect/se)``,
    the two variances taken as known (the usual approximation; with equal runs and stds on both sides it is
    ``statsmodels``' ``TTestIndPower``)."""
    if se <= 0.0:
        return 1.0 if effect != 0.0 else 0.0
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = effect / se
    return float(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc))


def _smallest_effect(power_at: Callable[[float], float], scale: float, power: float) -> float:
    """The δ > 0 with ``power_at(δ) = power`` (increasing in δ), by ``scipy.optimize.brentq`` from ``[0, scale]``
    widened by doubling."""
    hi = scale
    while power_at(hi) < power:
        hi *= 2
    return float(optimize.brentq(lambda e: power_at(e) - power, 0.0, hi, xtol=scale * 1e-9))


def minimum_detectable_effect(sd: float | None, n: int, power: float = POWER, alpha: float = ALPHA) -> float | None:
    """Smallest true |Δ| the two-sided paired t-test at ``alpha`` detects with ``power`` using ``n`` seeds.

    Solves :func:`t_test_power` ``(n, sd, δ, alpha) = power`` for δ with ``scipy.optimize.brentq``; None for n < 2.
    """
    if n < 2 or sd is None or math.isnan(sd):
        return None
    if sd <= 0.0:
        return 0.0
    return _smallest_effect(lambda e: t_test_power(n, sd, e, alpha), sd, power)


def welch_minimum_detectable_effect(se: float | None, df: float | None, power: float = POWER,
                                    alpha: float = ALPHA) -> float | None:
    """Smallest true |Δ| the two-sided Welch test at ``alpha`` detects with ``power`` (:func:`welch_power`)."""
    if se is None or df is None or math.isnan(se) or not df > 0:
        return None
    if se <= 0.0:
        return 0.0
    return _smallest_effect(lambda e: welch_power(se, df, e, alpha), se, power)


def decide(c: Comparison, p_holm: float | None = None, n_tests: int = 1) -> Comparison:
    """``c`` with its verdict taken at ``p_holm`` (default: its own p, a family of one) among ``n_tests``, and the
    TOST seeds needed when that verdict is inconclusive (its MDE follows from ``n_tests``: :attr:`Comparison.mde`)."""
    if c.p is None or c.p_tost is None:
        return c
    p = c.p if p_holm is None else p_holm
    verdict = _verdict(c.delta, p, c.p_tost, c.lower_is_better)
    needed = seeds_for_equivalence(c.sd, c.margin) if verdict == INCONCLUSIVE and c.sd is not None else None
    return replace(c, p_holm=p, n_tests=n_tests, verdict=verdict, seeds_needed=needed)


def holm(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """Each comparison decided at its p adjusted by Holm's step-down method over all of them
    (``statsmodels.stats.multitest.multipletests(method="holm")``): the family-wise error of calling any
    implementation better or worse stays at :data:`ALPHA_DIFFERENCE`. Comparisons without a p (one seed)
    are returned unchanged and do not count in the family."""
    tested = [i for i, c in enumerate(comparisons) if c.p is not None and c.p_tost is not None]
    out = list(comparisons)
    if not tested:
        return out
    if len(tested) == 1:
        adjusted = [comparisons[tested[0]].p]
    else:
        adjusted = multitest.multipletests([comparisons[i].p for i in tested], alpha=ALPHA_DIFFERENCE,
                                           method="holm")[1]
    for i, p in zip(tested, adjusted, strict=True):
        out[i] = decide(comparisons[i], float(p), len(tested))
    return out


def compare_paired(impl: Sequence[float], ref: Sequence[float], margin: float, lower_is_better: bool) -> Comparison:
    """Paired comparison of per-seed values (``impl[i]`` and ``ref[i]`` share a seed), decided alone
    (:func:`holm` decides a sweep's comparisons together)."""
    d = [a - b for a, b in zip(impl, ref, strict=True)]
    n, mean = len(d), float(np.mean(d))
    if n < 2:
        return Comparison(PAIRED, n, n, mean, None, None, None, None, margin, SINGLE, None, lower_is_better)
    sd = 0.0 if _no_spread(d) else float(np.std(d, ddof=1))  # rounding's spread is none: the tests' own rule
    ci, p, p_tost = paired_test(d, margin)
    sd_upper = sd_upper_bound(sd, n)
    c = Comparison(PAIRED, n, n, mean, sd, ci, p, p_tost, margin, INCONCLUSIVE, None, lower_is_better,
                   tightest_margin=tightest_margin(d), sd_upper=sd_upper, pairing=pairing_check(impl, ref, margin),
                   se=sd / math.sqrt(n), df=n - 1)
    return decide(c)


def compare_unpaired(impl: Sequence[float], ref: Sequence[float], margin: float,
                     lower_is_better: bool) -> Comparison:
    """Welch comparison when the seeds do not match; ``sd`` = std of one impl − ref difference.

    With independent runs a difference's variance is ``s_impl² + s_ref²``, so ``seeds_needed`` is the
    paired-seed count at that σ (what re-running with the reference's seeds would need, with no gain
    from pairing assumed).
    """
    delta = float(np.mean(impl) - np.mean(ref))
    n1, n2 = len(impl), len(ref)
    if n1 < 2 or n2 < 2:
        return Comparison(WELCH, n1, n2, delta, None, None, None, None, margin, SINGLE, None, lower_is_better)
    s1, s2 = (0.0 if _no_spread(x) else float(np.std(x, ddof=1)) for x in (impl, ref))
    sd = math.hypot(s1, s2)
    ci, p, p_tost = welch_test(impl, ref, margin)
    v1, v2 = s1**2 / n1, s2**2 / n2
    # Welch–Satterthwaite; where neither side has spread it is undefined and unused (the MDE is then 0)
    df = (v1 + v2) ** 2 / (v1**2 / (n1 - 1) + v2**2 / (n2 - 1)) if v1 + v2 > 0 else float(n1 + n2 - 2)
    c = Comparison(WELCH, n1, n2, delta, sd, ci, p, p_tost, margin, INCONCLUSIVE, None, lower_is_better,
                   tightest_margin=tightest_margin(a=impl, b=ref), se=math.sqrt(v1 + v2), df=df)
    return decide(c)


def t_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """Mean and 95% Student-t CI (``stats.t.interval``) of ``values``; no CI for fewer than 2."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, None, None
    if _no_spread(values):
        return mean, mean, mean
    se = float(np.std(values, ddof=1)) / math.sqrt(len(values))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = stats.t.interval(1 - ALPHA, len(values) - 1, loc=mean, scale=se)
    return mean, float(lo), float(hi)


def median_ratio_interval(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], resamples: int = 2000,
                          seed: int = 0) -> tuple[float, float | None, float | None]:
    """``100 (median(a) / median(b) - 1)`` over all values, and its 95% percentile-bootstrap CI resampling the
    groups (``a[i]`` and ``b[i]`` together: a round of a benchmark that times both); no CI for fewer than 2 groups.

    Why: step times have a heavy tail (a host hiccup makes one step several times the median), so a mean of
    per-round ratios, whose t interval assumes near-normal rounds, is pulled about by a few outliers where the
    medians are not; and resampling whole rounds keeps what the rounds pair (a drift shared by both within a
    round). ``scipy.stats.bootstrap`` resamples round indices; groups may differ in length.
    """
    if len(a) != len(b):
        raise ValueError(f"median_ratio_interval: {len(a)} groups of a against {len(b)} of b")
    groups_a = [np.asarray(g, dtype=float) for g in a]  # converted once, not at every resample
    groups_b = [np.asarray(g, dtype=float) for g in b]

    def ratio(index: np.ndarray) -> float:
        pick_a = np.concatenate([groups_a[i] for i in index])
        pick_b = np.concatenate([groups_b[i] for i in index])
        return 100.0 * (float(np.median(pick_a)) / float(np.median(pick_b)) - 1.0)

    est = ratio(np.arange(len(a)))
    if len(a) < 2:
        return est, None, None
    # the generator's keyword: ``rng`` from scipy 1.15, ``random_state`` before (the GPU image may be older)
    key = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"
    res = stats.bootstrap((np.arange(len(a)),), ratio, vectorized=False, n_resamples=resamples,
                          confidence_level=1 - ALPHA, method="percentile", **{key: np.random.default_rng(seed)})
    return est, float(res.confidence_interval.low), float(res.confidence_interval.high)
