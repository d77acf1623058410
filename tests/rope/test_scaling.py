"""RoPE scaling (``scaling={...}``): linear, ntk, dynamic_ntk, yarn, llama3 (issue #14, point 1).

The methods are transformations of the frequency table the base class builds for every
implementation, so this file checks them once against independent definitions and then checks
that every registered implementation rotates by the scaled table:

* ``test_tables_match_published_formula`` / ``test_frequencies_match_published_formula``: each
  method against its published formula, written below in float64 from the papers / reference code
  (nothing imported from ``rope``): position interpolation (f/s), NTK-aware base change
  ``base * s ** (d / (d - 2))``, dynamic NTK (HF's ``dynamic``), YaRN (HF's formulation: correction
  dims, floor/ceil when ``truncate``, a linear ramp over the pair index, the attention factor folded
  into cos/sin), Llama 3.1 (Meta's ``apply_scaling`` loop). Several head dims, bases and factors, both
  variants and ``rotary_dim`` (the frequencies are those of the rotated width; zero frequencies stay
  zero, so the pass-through quarter of ``variant="partial"`` has cos = the attention factor, sin = 0).
* ``test_*_matches_transformers``: the inverse frequencies and the attention factor against Hugging
  Face's rope-init functions, where ``transformers`` is installed (a test-only dependency; skipped
  otherwise). HF has no static ``ntk``: ours is HF's ``dynamic`` at the length where its factor is ours.
* ``test_every_implementation_agrees``: every registered entry, built with each scaling, rotates like
  the ``torch`` entry computing in float64 and like the independent formula (T beyond the original
  length); ``dynamic_ntk`` follows the current length (``T``, ``positions``, ``rotate_qkv``).
* ``test_bad_scaling_is_refused`` and the rest: arguments refused by ``check_args`` and ``build``
  naming the parameter, None meaning the default, no scaling meaning the unscaled table bit for bit.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from helpers import float32_entries

import rope
from rope.scaling import attention_factor, normalize_scaling, scaled_frequencies

METHODS = ("linear", "ntk", "dynamic_ntk", "yarn", "llama3")
FLOAT32_TABLE_ATOL = 2.0**-23  # a float64 value in [-2, 2] rounded once to float32, with room to spare
FLOAT32_ATOL = 2e-6  # rotated standard-normal float32 inputs (as test_conformance.py)
# HF computes the inverse frequencies in float32: the exponent 2i/d rounded to float32 (2**-24 relative)
# times ln(base) (13.1 for 5e5) is 8e-7 already, plus the roundings of YaRN's blend (8.8e-7 seen)
HF_RTOL = 2e-6


# -- the independent float64 definitions --------------------------------------------------------------
def exponents(R: int, variant: str) -> list[float | None]:
    """e of each of the R/2 frequencies f = base ** -e of a rotated width R (None: a zero frequency).

    full: e = 2i/R (the standard table); partial: R/4 exponents linspace(0, 1), then R/4 zeros.
    """
    if variant == "full":
        return [2.0 * i / R for i in range(R // 2)]
    q = R // 4
    return [(j / (q - 1) if q > 1 else 0.0) for j in range(q)] + [None] * q


def plain(e: list, base: float) -> list[float]:
    return [0.0 if x is None else base**-x for x in e]


def linear64(e, base, R, s):
    """Position interpolation (Chen et al. 2023): positions divided by s, i.e. every frequency."""
    return [f / s for f in plain(e, base)]


def ntk64(e, base, R, s, variant="full"):
    """NTK-aware scaling (bloc97): the base becomes base * s ** (d / (d - 2)) (full variant, d = R).

    Our generalisation to other tables: the base raised so that the lowest nonzero frequency is divided
    by s and the highest kept, i.e. base * s ** (1 / e_max): for the full table e_max = (R - 2) / R.
    """
    nonzero = [x for x in e if x is not None]
    if max(nonzero) == 0:  # the frequency 1 alone (R = 2, or 4 for partial): nothing lower to interpolate
        new_base = base
    elif variant == "full":
        new_base = base * s ** (R / (R - 2))
    else:
        new_base = base * s ** (1.0 / max(nonzero))
    return plain(e, new_base)


def dynamic_factor64(s: float, L: int, L0: int) -> float:
    """HF's dynamic NTK: factor s * L / L0 - (s - 1) for L > L0, 1 (the original table) otherwise."""
    return s * L / L0 - (s - 1) if L > L0 else 1.0


def dynamic64(e, base, R, s, L0, L, variant="full"):
    return ntk64(e, base, R, dynamic_factor64(s, L, L0), variant)


def yarn64(e, base, R, s, L0, beta_fast=32.0, beta_slow=1.0, truncate=True):
    """YaRN (Peng et al. 2023) as Hugging Face computes it: the pair indices where a frequency makes
    beta_fast / beta_slow rotations over the original context L0 (floored / ceiled when ``truncate``),
    a linear ramp over the pair index i between them: interpolation (f / s) above, extrapolation (f)
    below. A frequency base ** -e has the (continuous) pair index e R / 2."""

    def correction_dim(rotations):
        return R * math.log(L0 / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, R - 1)
    if low == high:
        high += 0.001
    out = []
    for x, f in zip(e, plain(e, base), strict=True):
        i = 0.0 if x is None else x * R / 2
        ramp = min(1.0, max(0.0, (i - low) / (high - low)))  # 1: interpolated
        out.append(f / s * ramp + f * (1 - ramp))
    return out


def yarn_attention64(s, mscale=None, mscale_all_dim=None, attention_factor=None):
    """YaRN's attention temperature: sqrt(1/t) = 0.1 ln(s) + 1, or (HF, DeepSeek) the ratio
    mscale(s, mscale) / mscale(s, mscale_all_dim) when both are given and nonzero."""
    if attention_factor is not None:
        return attention_factor

    def m(scale, k=1.0):
        return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0

    if mscale and mscale_all_dim:
        return m(s, mscale) / m(s, mscale_all_dim)
    return m(s)


def llama3_64(e, base, R, s, L0, low_freq_factor=1.0, high_freq_factor=4.0):
    """Meta's ``apply_scaling`` (Llama 3.1 reference code), frequency by frequency."""
    low_wavelen, high_wavelen = L0 / low_freq_factor, L0 / high_freq_factor
    out = []
    for f in plain(e, base):
        if f == 0.0:
            out.append(0.0)
            continue
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(f)
        elif wavelen > low_wavelen:
            out.append(f / s)
        else:
            smooth = (L0 / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append((1 - smooth) * f / s + smooth * f)
    return out


def expected(scaling: dict, R: int, base: float, variant: str, length: int | None = None) -> tuple[list, float]:
    """(frequencies, attention factor) of ``scaling`` by the definitions above."""
    e = exponents(R, variant)
    kind, s = scaling.get("type", "none"), scaling.get("factor")
    L0 = scaling.get("original_max_seq_len")
    if kind == "none":
        return plain(e, base), 1.0
    if kind == "linear":
        return linear64(e, base, R, s), 1.0
    if kind == "ntk":
        return ntk64(e, base, R, s, variant), 1.0
    if kind == "dynamic_ntk":
        return dynamic64(e, base, R, s, L0, L0 if length is None else length, variant), 1.0
    if kind == "yarn":
        opts = {k: scaling[k] for k in ("beta_fast", "beta_slow", "truncate") if scaling.get(k) is not None}
        att = yarn_attention64(s, scaling.get("mscale"), scaling.get("mscale_all_dim"),
                               scaling.get("attention_factor"))
        return yarn64(e, base, R, s, L0, **opts), att
    assert kind == "llama3"
    opts = {k: scaling[k] for k in ("low_freq_factor", "high_freq_factor") if k in scaling}
    return llama3_64(e, base, R, s, L0, **opts), 1.0


def tables64(freqs: list, att: float, max_seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    theta = torch.arange(max_seq_len, dtype=torch.float64)[:, None] * torch.tensor(freqs, dtype=torch.float64)
    return theta.cos() * att, theta.sin() * att


def rotate64(x: torch.Tensor, positions: torch.Tensor, freqs: list, att: float) -> torch.Tensor:
    """The half-split rotation of the whole head by these frequencies, in float64."""
    f = torch.tensor(freqs, dtype=torch.float64, device=x.device)
    theta = positions.double()[..., None] * f
    cos, sin = theta.cos() * att, theta.sin() * att
    cos, sin = (cos[None, :, None], sin[None, :, None]) if cos.dim() == 2 else (cos[:, :, None], sin[:, :, None])
    x1, x2 = x.double().chunk(2, dim=-1)
    return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1)


def sc(kind: str, **params) -> dict:
    return {"type": kind, **params}


# -- 1. the published formulas ------------------------------------------------------------------------
# (scaling, head_dim, base): each method at several factors, head dims 64 / 128 / 48, bases 1e4 / 5e5;
# the original length puts YaRN's ramp and Llama 3's blend inside the table.
FORMULA_CASES = [
    (sc("linear", factor=2.0), 64, 10000.0),
    (sc("linear", factor=8.0), 128, 500000.0),
    (sc("linear", factor=1.0), 48, 10000.0),
    (sc("ntk", factor=2.0), 64, 10000.0),
    (sc("ntk", factor=4.0), 128, 500000.0),
    (sc("ntk", factor=3.5), 48, 10000.0),
    (sc("dynamic_ntk", factor=4.0, original_max_seq_len=512), 64, 10000.0),
    (sc("dynamic_ntk", factor=2.0, original_max_seq_len=1024), 128, 500000.0),
    (sc("yarn", factor=4.0, original_max_seq_len=512), 64, 10000.0),
    (sc("yarn", factor=16.0, original_max_seq_len=4096), 128, 500000.0),
    (sc("yarn", factor=2.5, original_max_seq_len=256, truncate=False), 48, 10000.0),
    (sc("yarn", factor=8.0, original_max_seq_len=2048, beta_fast=16.0, beta_slow=2.0, mscale=0.707,
        mscale_all_dim=1.0), 128, 10000.0),
    (sc("yarn", factor=4.0, original_max_seq_len=1024, attention_factor=1.25), 64, 500000.0),
    (sc("llama3", factor=8.0, original_max_seq_len=8192), 128, 500000.0),
    (sc("llama3", factor=4.0, original_max_seq_len=256, low_freq_factor=2.0, high_freq_factor=8.0), 64, 10000.0),
    (sc("llama3", factor=2.0, original_max_seq_len=512), 48, 10000.0),
]
TABLE_LEN = 2048  # positions up to 2047: a low frequency off by 1e-4 moves its angle visibly


def _formula_id(case) -> str:
    s, D, base = case
    extra = "-".join(f"{k}={v}" for k, v in s.items() if k not in ("type", "factor", "original_max_seq_len"))
    return f"{s['type']}-x{s['factor']:g}-D{D}-base{base:g}" + (f"-{extra}" if extra else "")


def _shapes(D: int) -> list[tuple[str, int | None]]:
    """(variant, rotary_dim): the full head, the partial variant, and half the head rotated."""
    return [("full", None), ("partial", None), ("full", D // 2), ("partial", D // 2)]


@pytest.mark.parametrize("case", FORMULA_CASES, ids=[_formula_id(c) for c in FORMULA_CASES])
def test_tables_match_published_formula(case):
    """r.cos / r.sin (float32, rounded once from float64) against cos/sin of the formula's
    frequencies times the attention factor; the zero-frequency quarter of variant=partial exactly
    (cos = the attention factor in float32, sin = 0); the scaling visibly changes the table."""
    scaling, D, base = case
    for variant, R in _shapes(D):
        r = rope.build("torch", D, TABLE_LEN, base=base, variant=variant, rotary_dim=R,
                       compute_dtype="float64", scaling=scaling)
        width = D if R is None else R
        plain_r = rope.build("torch", D, TABLE_LEN, base=base, variant=variant, rotary_dim=R)
        lengths = [None]  # dynamic_ntk: fresh (the original table), then after calls of these lengths
        if scaling["type"] == "dynamic_ntk":
            lengths += [TABLE_LEN, scaling["original_max_seq_len"] + 300, 100]
        for length in lengths:
            if length is not None:
                r(torch.randn(1, length, 1, D, dtype=torch.float64))
            freqs, att = expected(scaling, width, base, variant, length)
            cos, sin = tables64(freqs, att, TABLE_LEN)
            what = f"{variant} rotary_dim={R} length={length}"
            assert r.cos.dtype == torch.float32 and r.cos.shape == (TABLE_LEN, width // 2), what
            torch.testing.assert_close(r.cos.double(), cos, rtol=0, atol=FLOAT32_TABLE_ATOL,
                                       msg=lambda m, w=what: f"{w}: {m}")
            torch.testing.assert_close(r.sin.double(), sin, rtol=0, atol=FLOAT32_TABLE_ATOL,
                                       msg=lambda m, w=what: f"{w}: {m}")
            if variant == "partial":
                q = width // 4
                att32 = torch.tensor(att, dtype=torch.float64).float()
                assert torch.equal(r.cos[:, q:], att32.expand(TABLE_LEN, q)), f"{what}: zero frequencies' cos"
                assert torch.equal(r.sin[:, q:], torch.zeros(TABLE_LEN, q)), f"{what}: zero frequencies' sin"
            scaled = scaling["factor"] > 1 and (
                scaling["type"] != "dynamic_ntk" or (length or 0) > scaling["original_max_seq_len"])
            if scaled:
                assert not torch.allclose(r.cos, plain_r.cos, atol=1e-3), f"{what}: scaling left the table as it was"
            else:
                assert torch.allclose(r.cos, plain_r.cos, rtol=0, atol=FLOAT32_TABLE_ATOL), what


@pytest.mark.parametrize("case", FORMULA_CASES, ids=[_formula_id(c) for c in FORMULA_CASES])
def test_frequencies_match_published_formula(case):
    """The float64 frequencies themselves (what the tables are made of) to 1e-12 relative, and the
    attention factor, for both variants and rotary_dim; dynamic_ntk at lengths around the original."""
    scaling, D, base = case
    norm = normalize_scaling(scaling)
    for variant, R in _shapes(D):
        width = D if R is None else R
        lengths = [None]
        if scaling["type"] == "dynamic_ntk":
            L0 = scaling["original_max_seq_len"]
            lengths = [1, L0 - 1, L0, L0 + 1, 2 * L0, 7 * L0 + 3]
        for length in lengths:
            freqs, att = expected(scaling, width, base, variant, length)
            ours = scaled_frequencies(rope.rope_frequencies(width, base, variant), base, width, norm, length)
            torch.testing.assert_close(ours, torch.tensor(freqs, dtype=torch.float64), rtol=1e-12, atol=0,
                                       msg=lambda m, w=f"{variant} rotary_dim={R} length={length}": f"{w}: {m}")
            assert attention_factor(norm) == pytest.approx(att, rel=1e-15)


def test_published_ntk_formula_is_the_lowest_frequency_rule():
    """The NTK base change base * s ** (d / (d - 2)) keeps the highest frequency and divides the
    lowest by s: what our generalisation to partial tables (base * s ** (1 / e_max)) is built on."""
    for d, base, s in ((64, 10000.0, 4.0), (128, 500000.0, 8.0), (48, 10000.0, 2.5)):
        f, g = plain(exponents(d, "full"), base), ntk64(exponents(d, "full"), base, d, s)
        assert g[0] == f[0] and g[-1] == pytest.approx(f[-1] / s, rel=1e-13)
        p, pg = plain(exponents(d, "partial"), base), ntk64(exponents(d, "partial"), base, d, s, "partial")
        assert pg[0] == p[0] and pg[d // 4 - 1] == pytest.approx(p[d // 4 - 1] / s, rel=1e-13)


@pytest.mark.parametrize("variant,D,R", [("partial", 4, None), ("full", 2, None), ("full", 16, 2),
                                         ("partial", 16, 4)])
@pytest.mark.parametrize("kind", METHODS)
def test_a_single_frequency_stays_finite(kind, variant, D, R):
    """A rotated width with one nonzero frequency (1, of exponent 0: rotary_dim 2, or 4 for partial):
    no method may make the table NaN; ntk has nothing lower to interpolate and keeps it."""
    scaling = sc(kind, factor=4.0, **({} if kind in ("linear", "ntk") else {"original_max_seq_len": 8}))
    r = rope.build("torch", D, 32, variant=variant, rotary_dim=R, scaling=scaling)
    assert r.cos.isfinite().all() and r.sin.isfinite().all()
    freqs, att = expected(scaling, D if R is None else R, 10000.0, variant, length=20)
    r(torch.randn(1, 20, 1, D))  # dynamic_ntk: at length 20
    cos, sin = tables64(freqs, att, 32)
    torch.testing.assert_close(r.cos.double(), cos, rtol=0, atol=FLOAT32_TABLE_ATOL)
    torch.testing.assert_close(r.sin.double(), sin, rtol=0, atol=FLOAT32_TABLE_ATOL)


# -- 2. Hugging Face transformers -------------------------------------------------------------------------
def hf_rope(rope_type: str, head_dim: int, base: float, params: dict, max_position_embeddings: int,
            partial_rotary_factor: float = 1.0, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """HF's (inv_freq float32, attention factor) from its rope-init function, through a LlamaConfig:
    ``rope_parameters`` (5.x) or ``rope_theta`` + ``rope_scaling`` (4.x)."""
    utils = pytest.importorskip("transformers.modeling_rope_utils")
    from transformers import LlamaConfig

    if rope_type not in utils.ROPE_INIT_FUNCTIONS:
        pytest.skip(f"this transformers has no rope type {rope_type!r}")
    common = {"hidden_size": 2 * head_dim, "num_attention_heads": 2, "head_dim": head_dim,
              "max_position_embeddings": max_position_embeddings}
    scaling = {"rope_type": rope_type, **params}
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        config = LlamaConfig(**common, rope_parameters={**scaling, "rope_theta": base,
                                                        "partial_rotary_factor": partial_rotary_factor})
    else:
        config = LlamaConfig(**common, rope_theta=base, rope_scaling=scaling,
                             partial_rotary_factor=partial_rotary_factor)
    inv_freq, att = utils.ROPE_INIT_FUNCTIONS[rope_type](config, torch.device("cpu"), seq_len=seq_len)
    return inv_freq, float(att)


def hf_supports(rope_type: str, word: str) -> bool:
    utils = pytest.importorskip("transformers.modeling_rope_utils")
    return word in inspect.getsource(utils.ROPE_INIT_FUNCTIONS[rope_type])


def ours(scaling: dict, head_dim: int, base: float, rotary_dim: int | None = None,
         length: int | None = None) -> tuple[torch.Tensor, float]:
    R = head_dim if rotary_dim is None else rotary_dim
    norm = normalize_scaling(scaling)
    freqs = scaled_frequencies(rope.rope_frequencies(R, base, "full"), base, R, norm, length)
    return freqs, attention_factor(norm)


def assert_matches_hf(mine: tuple[torch.Tensor, float], theirs: tuple[torch.Tensor, float], what: str) -> None:
    (f, att), (g, hf_att) = mine, theirs
    assert g.shape == f.shape, f"{what}: HF has {g.shape[0]} frequencies, we {f.shape[0]}"
    torch.testing.assert_close(f, g.double(), rtol=HF_RTOL, atol=0, msg=lambda m, w=what: f"{w}: {m}")
    assert att == pytest.approx(hf_att, rel=1e-12), f"{what}: attention factor"


# (head_dim, base, rotary_dim) the HF cases run over: rotary_dim is HF's partial_rotary_factor * head_dim
HF_SHAPES = [(64, 10000.0, None), (128, 500000.0, None), (48, 10000.0, None), (128, 10000.0, 64)]


def _hf_kwargs(D: int, R: int | None) -> dict:
    return {"partial_rotary_factor": 1.0 if R is None else R / D}


@pytest.mark.parametrize("D,base,R", HF_SHAPES)
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
def test_linear_matches_transformers(D, base, R, factor):
    mine = ours(sc("linear", factor=factor), D, base, R)
    assert_matches_hf(mine, hf_rope("linear", D, base, {"factor": factor}, 4096, **_hf_kwargs(D, R)), "linear")


@pytest.mark.parametrize("D,base,R", HF_SHAPES)
@pytest.mark.parametrize("factor", [2.0, 4.0, 8.0])
def test_ntk_matches_transformers_dynamic_at_its_factor(D, base, R, factor):
    """HF's ``dynamic`` at L = L0 (2s - 1) / s has factor s L / L0 - (s - 1) = s: our static ntk."""
    L0 = 1024
    L = L0 * (2 * factor - 1) / factor
    assert L == int(L) and factor * L / L0 - (factor - 1) == factor
    mine = ours(sc("ntk", factor=factor), D, base, R)
    theirs = hf_rope("dynamic", D, base, {"factor": factor}, L0, seq_len=int(L), **_hf_kwargs(D, R))
    assert_matches_hf(mine, theirs, f"ntk x{factor:g} vs dynamic at {int(L)}")


@pytest.mark.parametrize("D,base,R", HF_SHAPES)
@pytest.mark.parametrize("factor", [2.0, 4.0])
def test_dynamic_ntk_matches_transformers(D, base, R, factor):
    """HF's ``dynamic`` (its max_position_embeddings is our original_max_seq_len) at lengths below, at
    and beyond the original; and our module's tables at the same lengths."""
    L0 = 256
    scaling = sc("dynamic_ntk", factor=factor, original_max_seq_len=L0)
    for L in (1, L0 - 1, L0, L0 + 1, 3 * L0, 10 * L0 + 7):
        theirs = hf_rope("dynamic", D, base, {"factor": factor}, L0, seq_len=L, **_hf_kwargs(D, R))
        assert_matches_hf(ours(scaling, D, base, R, length=L), theirs, f"dynamic_ntk at length {L}")


YARN_PARAMS = [
    {"factor": 4.0, "original_max_seq_len": 4096},
    {"factor": 16.0, "original_max_seq_len": 2048},
    {"factor": 2.5, "original_max_seq_len": 512},
    {"factor": 8.0, "original_max_seq_len": 4096, "beta_fast": 16.0, "beta_slow": 2.0},
    {"factor": 40.0, "original_max_seq_len": 4096, "mscale": 1.0, "mscale_all_dim": 1.0},  # DeepSeek-V3-like
    {"factor": 8.0, "original_max_seq_len": 4096, "mscale": 0.707, "mscale_all_dim": 1.0},
    {"factor": 8.0, "original_max_seq_len": 4096, "mscale": 0.707},  # HF: mscale alone is ignored
    {"factor": 8.0, "original_max_seq_len": 4096, "mscale_all_dim": 1.0},  # and mscale_all_dim alone too
    {"factor": 4.0, "original_max_seq_len": 4096, "attention_factor": 1.5},
    {"factor": 4.0, "original_max_seq_len": 4096, "truncate": False},
    {"factor": 32.0, "original_max_seq_len": 1024, "beta_fast": 64.0, "beta_slow": 0.5, "truncate": False},
    {"factor": 4.0, "original_max_seq_len": 16},  # tiny: the whole ramp clamps at 0
    {"factor": 1.0, "original_max_seq_len": 4096},
]


@pytest.mark.parametrize("D,base,R", HF_SHAPES)
@pytest.mark.parametrize("params", YARN_PARAMS, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_yarn_matches_transformers(D, base, R, params):
    if "truncate" in params and not hf_supports("yarn", "truncate"):
        pytest.skip("this transformers' yarn has no truncate parameter")
    if "mscale" in params and not hf_supports("yarn", "mscale_all_dim"):
        pytest.skip("this transformers' yarn has no mscale / mscale_all_dim")
    theirs_params = {("original_max_position_embeddings" if k == "original_max_seq_len" else k): v
                     for k, v in params.items()}
    # max_position_embeddings = factor * original, as HF expects (it warns otherwise; unused when factor is given)
    max_pos = int(params["factor"] * params["original_max_seq_len"])
    theirs = hf_rope("yarn", D, base, theirs_params, max_pos, **_hf_kwargs(D, R))
    assert_matches_hf(ours(sc("yarn", **params), D, base, R), theirs, "yarn")
    # and the independent definition agrees with both (full table: HF has no partial variant)
    freqs, att = expected(sc("yarn", **params), D if R is None else R, base, "full")
    torch.testing.assert_close(theirs[0].double(), torch.tensor(freqs, dtype=torch.float64), rtol=HF_RTOL, atol=0)
    assert theirs[1] == pytest.approx(att, rel=1e-12)


LLAMA3_PARAMS = [
    {"factor": 8.0, "original_max_seq_len": 8192, "low_freq_factor": 1.0, "high_freq_factor": 4.0},  # Llama 3.1
    {"factor": 32.0, "original_max_seq_len": 8192, "low_freq_factor": 1.0, "high_freq_factor": 4.0},  # Llama 3.2
    {"factor": 4.0, "original_max_seq_len": 256, "low_freq_factor": 1.0, "high_freq_factor": 4.0},  # small context
    {"factor": 2.0, "original_max_seq_len": 64, "low_freq_factor": 2.0, "high_freq_factor": 8.0},
]


@pytest.mark.parametrize("D,base,R", HF_SHAPES)
@pytest.mark.parametrize("params", LLAMA3_PARAMS, ids=lambda p: "-".join(f"{k}={v:g}" for k, v in p.items()))
def test_llama3_matches_transformers(D, base, R, params):
    theirs_params = {("original_max_position_embeddings" if k == "original_max_seq_len" else k): v
                     for k, v in params.items()}
    theirs = hf_rope("llama3", D, base, theirs_params, 4 * params["original_max_seq_len"], **_hf_kwargs(D, R))
    mine = ours(sc("llama3", **params), D, base, R)
    assert_matches_hf(mine, theirs, "llama3")
    f = rope.rope_frequencies(D if R is None else R, base, "full")
    changed = ~torch.isclose(mine[0], f, rtol=1e-12, atol=0)
    if params["original_max_seq_len"] <= 256:  # wavelengths on both sides of the thresholds
        assert 0 < int(changed.sum()) < f.numel()


# -- 3. every registered implementation ---------------------------------------------------------------------
AGREE_D, AGREE_LEN, AGREE_T, L0 = 32, 64, 40, 16
AGREE_SCALINGS = {
    "linear": sc("linear", factor=4.0),
    "ntk": sc("ntk", factor=4.0),
    "dynamic_ntk": sc("dynamic_ntk", factor=4.0, original_max_seq_len=L0),
    "yarn": sc("yarn", factor=4.0, original_max_seq_len=L0, beta_fast=4.0, beta_slow=0.25),
    "llama3": sc("llama3", factor=4.0, original_max_seq_len=L0),
}


def _entry(name: str, device: torch.device, scaling: dict, variant: str = "full") -> rope.RotaryEmbedding:
    reason = rope.get(name).unavailable_reason(device)
    if reason is not None:
        pytest.skip(reason)
    r = rope.build(name, AGREE_D, AGREE_LEN, variant=variant, scaling=scaling).to(device)
    r.poison_outputs = True
    return r


def _reference(device: torch.device, scaling: dict, variant: str = "full") -> rope.RotaryEmbedding:
    return rope.build("torch", AGREE_D, AGREE_LEN, variant=variant, scaling=scaling,
                      compute_dtype="float64").to(device)


def _is_identity(r: rope.RotaryEmbedding) -> bool:
    return r.describe()["compute_dtype"] == "none"


def _close(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert out.dtype == torch.float32 and out.shape == ref.shape, what
    assert not out.isnan().any(), f"{what}: NaN (an element not written)"
    err = (out.double() - ref.double()).abs().max().item()
    assert err <= FLOAT32_ATOL, f"{what}: max abs error {err:.3g} > {FLOAT32_ATOL}"


#: Every entry, each float32 code once (the inputs here are float32; helpers.FLOAT32_SAME_AS: triton_v2 runs
#: triton_v4's code there).
FLOAT32_ENTRIES = float32_entries(rope.available())


@pytest.mark.parametrize("variant", ["full", "partial"])
@pytest.mark.parametrize("kind", list(AGREE_SCALINGS))
@pytest.mark.parametrize("name", FLOAT32_ENTRIES)
def test_every_implementation_agrees(name, kind, variant, device):
    """q, k at T=40 > original_max_seq_len=16, and q alone: every entry like the torch entry in
    float64 and like the independent formula, which differs from the unscaled rotation."""
    scaling = AGREE_SCALINGS[kind]
    r = _entry(name, device, scaling, variant)
    q = torch.randn(1, AGREE_T, 2, AGREE_D, device=device)
    k = torch.randn(1, AGREE_T, 1, AGREE_D, device=device)
    if _is_identity(r):
        yq, yk = r(q, k)
        assert yq is q and yk is k
        return
    yq, yk = r(q, k)
    ref = _reference(device, scaling, variant)
    rq, rk = ref(q, k)
    freqs, att = expected(scaling, AGREE_D, r.base, variant, length=AGREE_T)
    pos = torch.arange(AGREE_T, device=device)
    fq, fk = rotate64(q, pos, freqs, att), rotate64(k, pos, freqs, att)
    _close(yq, fq, f"{name} {kind} q vs formula")
    _close(yk, fk, f"{name} {kind} k vs formula")
    _close(yq, rq, f"{name} {kind} q vs torch float64")
    _close(yk, rk, f"{name} {kind} k vs torch float64")
    _close(r(q), fq, f"{name} {kind} q alone")
    unscaled = rotate64(q, pos, *expected({"type": "none"}, AGREE_D, r.base, variant))
    assert (unscaled - fq).abs().max() > 1e-2, "the scaling must change the rotation (else this tests nothing)"


@pytest.mark.parametrize("name", FLOAT32_ENTRIES)
def test_dynamic_ntk_follows_the_length(name, device):
    """dynamic_ntk: a call of T <= original_max_seq_len rotates by the original frequencies, T=40 by
    the factor for 40, and back; with positions, the length is the largest position + 1."""
    scaling = AGREE_SCALINGS["dynamic_ntk"]
    r = _entry(name, device, scaling)
    if _is_identity(r):
        return
    x = torch.randn(2, AGREE_T, 2, AGREE_D, device=device)
    calls = [  # (T, positions, the length the frequencies must be for)
        (10, None, L0), (AGREE_T, None, AGREE_T), (L0, None, L0), (AGREE_T, None, AGREE_T), (12, None, L0),
        (5, torch.tensor([0, 39, 3, 7, 2]), AGREE_T), (5, torch.tensor([15, 0, 3, 7, 2]), L0),
        (4, torch.tensor([[30, 1, 2, 3], [4, 5, 6, 7]]), 31), (6, torch.tensor([60, 1, 2, 3, 4, 5]), 61),
    ]
    for T, pos, length in calls:
        xs = x[:, :T]
        rows = torch.arange(T) if pos is None else pos
        freqs, att = expected(scaling, AGREE_D, r.base, "full", length=length)
        pos_d = None if pos is None else pos.to(device)
        _close(r(xs, positions=pos_d), rotate64(xs, rows.to(device), freqs, att),
               f"{name} T={T} positions={None if pos is None else pos.tolist()} (length {length})")


@pytest.mark.parametrize("name", FLOAT32_ENTRIES)
def test_dynamic_ntk_rotate_qkv_follows_the_length(name, device):
    """The fused projection's path (the model's) follows the length too: a fresh module at T=40."""
    scaling = AGREE_SCALINGS["dynamic_ntk"]
    r = _entry(name, device, scaling)
    if _is_identity(r):
        return
    HQ, HK = 2, 1
    qkv = torch.randn(1, AGREE_T, (HQ + 2 * HK) * AGREE_D, device=device)
    yq, yk, _ = r.rotate_qkv(qkv, HQ, HK)
    q, k, _ = qkv.split([HQ * AGREE_D, HK * AGREE_D, HK * AGREE_D], dim=-1)
    freqs, att = expected(scaling, AGREE_D, r.base, "full", length=AGREE_T)
    pos = torch.arange(AGREE_T, device=device)
    _close(yq, rotate64(q.reshape(1, AGREE_T, HQ, AGREE_D), pos, freqs, att), f"{name} rotate_qkv q at T=40")
    _close(yk, rotate64(k.reshape(1, AGREE_T, HK, AGREE_D), pos, freqs, att), f"{name} rotate_qkv k at T=40")


# -- 4. arguments ------------------------------------------------------------------------------------------
YARN = {"type": "yarn", "factor": 4.0, "original_max_seq_len": 16}
BAD_SCALINGS = [  # (scaling, the argument named, message pattern)
    ("yarn", "scaling", "mapping"),
    ({"type": "rope2"}, "scaling.type", "scaling.type must be one of"),
    ({"type": "linear"}, "scaling.factor", "needs scaling.factor"),
    ({"type": "ntk", "factor": None}, "scaling.factor", "needs scaling.factor"),
    ({"type": "linear", "factor": 0.5}, "scaling.factor", ">= 1"),
    ({"type": "ntk", "factor": -2.0}, "scaling.factor", ">= 1"),
    ({"type": "linear", "factor": math.nan}, "scaling.factor", "finite"),
    ({"type": "linear", "factor": "4"}, "scaling.factor", "number"),
    ({"type": "linear", "factor": True}, "scaling.factor", "number"),
    ({"type": "yarn", "factor": 4.0}, "scaling.original_max_seq_len", "needs scaling.original_max_seq_len"),
    ({"type": "llama3", "factor": 8.0}, "scaling.original_max_seq_len", "needs scaling.original_max_seq_len"),
    ({"type": "dynamic_ntk", "factor": 2.0}, "scaling.original_max_seq_len", "needs scaling.original_max_seq_len"),
    ({"type": "dynamic_ntk", "factor": 2.0, "original_max_seq_len": 0}, "scaling.original_max_seq_len",
     "positive int"),
    ({"type": "yarn", "factor": 2.0, "original_max_seq_len": 16.0}, "scaling.original_max_seq_len", "positive int"),
    ({**YARN, "beta": 3.0}, "scaling.beta", "no parameter 'beta'"),
    ({"type": "linear", "factor": 2.0, "original_max_seq_len": 16}, "scaling.original_max_seq_len",
     "no parameter"),
    ({"type": "none", "factor": 2.0}, "scaling.factor", "no parameter"),
    ({**YARN, "beta_fast": 1.0}, "scaling.beta_fast", "must exceed"),
    ({**YARN, "beta_fast": 2.0, "beta_slow": 2.0}, "scaling.beta_fast", "must exceed"),
    ({**YARN, "beta_slow": 0.0}, "scaling.beta_slow", "> 0"),
    ({**YARN, "mscale": -1.0}, "scaling.mscale", ">= 0"),
    ({**YARN, "attention_factor": 0.0}, "scaling.attention_factor", "> 0"),
    ({**YARN, "truncate": "yes"}, "scaling.truncate", "true or false"),
    ({"type": "llama3", "factor": 8.0, "original_max_seq_len": 64, "high_freq_factor": 1.0},
     "scaling.high_freq_factor", "must exceed"),
    ({"type": "llama3", "factor": 8.0, "original_max_seq_len": 64, "low_freq_factor": 4.0, "high_freq_factor": 2.0},
     "scaling.high_freq_factor", "must exceed"),
]


@pytest.mark.parametrize("scaling,argument,match", BAD_SCALINGS,
                         ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD_SCALINGS)])
def test_bad_scaling_is_refused(scaling, argument, match):
    """check_args and build refuse it with the same RopeArgumentError, naming the parameter."""
    with pytest.raises(rope.RopeArgumentError, match=match) as checked:
        rope.check_args("torch", 32, 64, scaling=scaling)
    with pytest.raises(rope.RopeArgumentError, match=match) as built:
        rope.build("torch", 32, 64, scaling=scaling)
    assert checked.value.argument == built.value.argument == argument
    assert str(checked.value) == str(built.value)


@pytest.mark.parametrize("scaling", [None, {}, {"type": "none"}, {"type": None}, {"type": "none", "factor": None}],
                         ids=["None", "empty", "none", "type_None", "none_factor_None"])
@pytest.mark.parametrize("variant", ["partial", "full"])
def test_no_scaling_is_the_unscaled_table(scaling, variant):
    plain_r = rope.build("torch", 48, 128, variant=variant)
    r = rope.build("torch", 48, 128, variant=variant, scaling=scaling)
    assert r.scaling == {"type": "none"} and r.describe()["scaling"] == "none"
    assert torch.equal(r.cos, plain_r.cos) and torch.equal(r.sin, plain_r.sin)


def test_factor_one_changes_nothing():
    """factor 1: every frequency kept, YaRN's attention factor 1. Not dynamic_ntk: its factor at
    length L is s L / L0 - (s - 1), L / L0 for s = 1 (as HF's ``dynamic``): the original table up to
    L0 only."""
    plain_r = rope.build("torch", 64, 256, variant="full")
    for kind in ("linear", "ntk", "yarn", "llama3", "dynamic_ntk"):
        scaling = sc(kind, factor=1.0, **({} if kind in ("linear", "ntk") else {"original_max_seq_len": 32}))
        r = rope.build("torch", 64, 256, variant="full", scaling=scaling)
        r(torch.randn(1, 32, 1, 64))  # dynamic_ntk: at the original length
        torch.testing.assert_close(r.cos, plain_r.cos, rtol=0, atol=FLOAT32_TABLE_ATOL, msg=kind)
        torch.testing.assert_close(r.sin, plain_r.sin, rtol=0, atol=FLOAT32_TABLE_ATOL, msg=kind)
    assert normalize_scaling(sc("linear", factor=1)) == {"type": "linear", "factor": 1}
    r = rope.build("torch", 64, 256, variant="full", scaling=sc("dynamic_ntk", factor=1.0, original_max_seq_len=32))
    r(torch.randn(1, 200, 1, 64))
    freqs, _ = expected(sc("dynamic_ntk", factor=1.0, original_max_seq_len=32), 64, 10000.0, "full", length=200)
    torch.testing.assert_close(r.cos.double(), tables64(freqs, 1.0, 256)[0], rtol=0, atol=FLOAT32_TABLE_ATOL)


def test_none_values_take_the_defaults():
    """A config listing every parameter with None (Hydra's null) builds the defaults' table."""
    for kind, given in (
        ("yarn", {"factor": 4.0, "original_max_seq_len": 64}),
        ("llama3", {"factor": 8.0, "original_max_seq_len": 64}),
    ):
        defaults = rope.build("torch", 64, 256, variant="full", scaling={"type": kind, **given})
        nulls = {k: None for k in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor",
                                   "truncate")} if kind == "yarn" else {"low_freq_factor": None,
                                                                         "high_freq_factor": None}
        r = rope.build("torch", 64, 256, variant="full", scaling={"type": kind, **given, **nulls})
        assert r.scaling == defaults.scaling
        assert torch.equal(r.cos, defaults.cos) and torch.equal(r.sin, defaults.sin)
    assert normalize_scaling(YARN) == {**YARN, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": None,
                                       "mscale_all_dim": None, "attention_factor": None, "truncate": True}
    assert normalize_scaling({"type": "llama3", "factor": 8, "original_max_seq_len": 8192}) == {
        "type": "llama3", "factor": 8, "original_max_seq_len": 8192, "low_freq_factor": 1.0, "high_freq_factor": 4.0}


def test_describe_names_the_scaling():
    """summary.json's label: the factor, then each parameter that sets the tables and is not its default, so runs
    whose tables differ never read alike."""
    r = rope.build("torch", 32, 64, scaling=YARN)
    assert r.describe()["scaling"] == "yarn x4 (original_max_seq_len=16)"
    other = rope.build("torch", 32, 64, scaling={**YARN, "beta_fast": 16, "truncate": False})
    assert other.describe()["scaling"] == "yarn x4 (original_max_seq_len=16, beta_fast=16, truncate=False)"
    assert rope.build("torch", 32, 64, scaling={"type": "linear", "factor": 2}).describe()["scaling"] == "linear x2"
    assert "scaling=" in repr(r)
    assert rope.build("torch", 32, 64).describe()["scaling"] == "none"
