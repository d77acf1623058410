"""Which RoPE scaling an evaluation at other lengths uses, per length, and what its outputs are called.

A request comes from the ``rope.scaling.*`` keys of ``python -m llm.eval_lengths`` (or from the
length-generalization sweep's callback). Unset keys mean "as the run was trained": a run trained
without scaling is evaluated without it, a run fine-tuned with YaRN keeps its YaRN. Asking for a
``type`` replaces the run's scaling with the request; its parameters not given take the method's
defaults (:data:`rope.scaling.SCALING_PARAMS`), except ``original_max_seq_len``, which defaults to
the length the weights were trained for (the run's own ``original_max_seq_len`` when it was trained
with scaling, else its ``model.seq_len``), and the output says so.

``factor=auto`` is the scaling each length needs: ``max(1, L / original_max_seq_len)`` at length L,
as a user who extends a model to L would set it (Hugging Face's practice: factor = target length /
original length). ``dynamic_ntk`` takes that ratio from the length itself (its effective factor at L is
``factor L / original - (factor - 1)``), so under ``auto`` its factor is 1: an effective factor of L / original,
where L / original given as its factor would count the length twice. A fixed factor is one table for every length.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field

from llm.checks import positive_int
from llm.errors import ConfigError
from rope.scaling import SCALING_PARAMS, SCALING_TYPES, ScalingError, normalize_scaling

#: ``rope.scaling.factor=auto``: the factor each length needs.
AUTO = "auto"


def _fmt(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@dataclass(frozen=True)
class ScalingPlan:
    """A checked scaling request, ready to give the scaling dict of each evaluation length."""

    type: str
    params: dict = field(default_factory=dict)  # the method's parameters; factor may be AUTO
    reference_len: int = 0  # the original context: what factor=auto divides by
    from_run: bool = False  # True: nothing asked, the run's own scaling
    original_given: bool = False  # original_max_seq_len given on the command line
    notes: tuple[str, ...] = ()

    @property
    def auto(self) -> bool:
        return self.params.get("factor") == AUTO

    def for_length(self, length: int) -> dict:
        """The normalized scaling (every parameter filled in) used at ``length``."""
        params = dict(self.params)
        if self.auto:  # dynamic_ntk scales by the length itself (module docstring)
            params["factor"] = 1.0 if self.type == "dynamic_ntk" else max(1.0, length / self.reference_len)
        return normalize_scaling({"type": self.type, **params})

    @property
    def tag(self) -> str:
        """A file-name part naming the scaling: ``none``, ``yarn_x4``, ``linear_auto``, ``yarn_x4_beta_fast16``."""
        if self.type == "none":
            return "none"
        parts = [self.type, "auto" if self.auto else f"x{_fmt(self.params['factor'])}"]
        defaults = SCALING_PARAMS[self.type]
        for key in sorted(self.params):
            if key not in ("factor", "original_max_seq_len") and self.params[key] != defaults.get(key):
                parts.append(f"{key}{_fmt(self.params[key])}")
        if self.original_given:
            parts.append(f"orig{self.reference_len}")
        return "_".join(parts)

    @property
    def description(self) -> str:
        """How tables and plots name the scaling: ``none``, ``yarn x4``, ``yarn (factor L/512)``."""
        if self.type == "none":
            return "none"
        factor = f"(factor L/{self.reference_len})" if self.auto else f"x{_fmt(self.params['factor'])}"
        extra = [f"{k}={_fmt(v)}" for k, v in sorted(self.params.items())
                 if k not in ("factor", "original_max_seq_len") and v != SCALING_PARAMS[self.type].get(k)]
        return " ".join([self.type, factor, *(["(" + ", ".join(extra) + ")"] if extra else [])])

    def record(self) -> dict:
        """What the output file says about the scaling (before it is resolved per length)."""
        return {"type": self.type, **self.params, "reference_len": self.reference_len, "from_run": self.from_run,
                "description": self.description}


def _config_error(err: ScalingError, request: Mapping) -> ConfigError:
    key = err.argument.split(".", 1)[1] if "." in err.argument else "type"
    if key not in request:
        return ConfigError(f"rope.{err.argument}: {err}")
    return ConfigError(f"rope.{err.argument}={request[key]!r}: {err}")


def resolve_scaling(request: Mapping | None, run_rope: Mapping, train_len: int) -> ScalingPlan:
    """Check ``request`` (the ``rope.scaling`` keys; None values are unset) against the run's rope group.

    Raises :class:`ConfigError` naming the key: an unknown type, a parameter the type does not take,
    a bad value, parameters without a type.
    """
    asked = {k: v for k, v in dict(request or {}).items() if v is not None}
    run_scaling = normalize_scaling(dict(run_rope.get("scaling") or {}) or None)
    kind = asked.pop("type", None)
    if kind is None:
        if asked:
            key = sorted(asked)[0]
            raise ConfigError(f"rope.scaling.{key}={asked[key]!r} needs rope.scaling.type (one of "
                              f"{', '.join(SCALING_TYPES)})")
        params = {k: v for k, v in run_scaling.items() if k != "type"}
        return ScalingPlan(run_scaling["type"], params, params.get("original_max_seq_len", train_len), from_run=True)
    if kind not in SCALING_PARAMS:
        raise ConfigError(f"rope.scaling.type={kind!r}; allowed: {', '.join(SCALING_TYPES)}")
    takes = SCALING_PARAMS[kind]
    notes: list[str] = []
    given = positive_int(asked.pop("original_max_seq_len", None), "rope.scaling.original_max_seq_len",
                         allow_none=True, must_be="a positive integer")
    if given is not None:
        reference = given
    elif run_scaling.get("original_max_seq_len"):
        reference = run_scaling["original_max_seq_len"]
        if "original_max_seq_len" in takes or asked.get("factor") == AUTO:
            notes.append(f"rope.scaling.original_max_seq_len not given: {reference}, the run's own "
                         "rope.scaling.original_max_seq_len")
    else:
        reference = train_len
        if "original_max_seq_len" in takes or asked.get("factor") == AUTO:
            notes.append(f"rope.scaling.original_max_seq_len not given: {reference}, the run's training length "
                         "(model.seq_len)")
    factor = asked.get("factor")
    if factor == AUTO and "factor" not in takes:
        raise ConfigError(f"rope.scaling.factor=auto: scaling.type={kind} takes no factor")
    if factor is not None and factor != AUTO and (isinstance(factor, bool) or not isinstance(factor, numbers.Real)):
        raise ConfigError(f"rope.scaling.factor={factor!r} must be a number >= 1 or 'auto' (L / original length)")
    params = dict(asked)
    if "original_max_seq_len" in takes:
        params["original_max_seq_len"] = reference
    elif given is not None and factor != AUTO:  # the method has no such parameter: let its check name it
        params["original_max_seq_len"] = given
    plan = ScalingPlan(kind, params, reference, original_given=given is not None, notes=tuple(notes))
    try:
        plan.for_length(2 * reference)  # every parameter checked (an auto factor of 2 stands in)
    except ScalingError as e:
        raise _config_error(e, {"type": kind, **params}) from None
    return plan
