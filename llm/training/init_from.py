"""Start a new run from another run's weights: ``train.init_from=<run dir>``.

Why: extending a model's context is fine-tuning, at a longer ``model.seq_len`` and usually with a RoPE
scaling (``rope.scaling.type=yarn rope.scaling.factor=4 rope.scaling.original_max_seq_len=512``),
from weights trained at the short length. Only the weights of the source run's newest checkpoint
are taken: not its optimizer state, step, RNG or totals, so the run is a new one (step 0, its own
schedule, its own run dir). Resume is a different thing (:mod:`llm.training.resume`): a resumed
run already holds its weights, so ``init_from`` is then ignored.

The weights must fit: the model must be the source run's in every architecture key; ``model.seq_len``
(what fine-tuning changes) and ``model.dropout`` (a training setting with no weights) may differ.
The tokenizer must be the source's (its ids index the embedding). A RoPE scaling that needs
``original_max_seq_len`` and is not given one takes the source run's ``model.seq_len``, logged, and
is written into the new run's config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from llm.errors import ConfigError, ResumeError
from llm.model import GPTConfig
from llm.training.checkpoint import checkpoint_files, load_newest_checkpoint
from llm.training.outputs import CONFIG_FILE, holds_a_run

#: Model keys that may differ from the source run's: they carry no weights.
FREE_MODEL_KEYS = ("name", "seq_len", "dropout")
_UNSET = ("", "none", "null")


@dataclass
class InitSource:
    """The run ``train.init_from`` names, checked; :meth:`load` reads its weights."""

    run_dir: Path
    config: dict
    key: str = "train.init_from"

    def load(self) -> tuple[Path, int, dict]:
        """(checkpoint path, its step, the model's state dict) of the source's newest loadable checkpoint."""
        try:
            found = load_newest_checkpoint(self.run_dir / "checkpoints")
        except ResumeError as e:
            raise ConfigError(f"{self.key}={self.run_dir}: {e}") from None
        if found is None:  # removed since the check
            raise ConfigError(f"{self.key}={self.run_dir} has no checkpoint in {self.run_dir / 'checkpoints'}")
        path, state = found
        return path, int(state.get("step", 0)), state["model"]


#: Architecture keys filled in from others where the config leaves them out (:func:`_architecture`).
_DERIVED = ("n_kv_head", "d_ff")


def _architecture(model_cfg: dict) -> dict:
    """The model keys that shape the weights, with the defaults an older config may leave out filled in
    (``n_kv_head`` null means ``n_head``, ``d_ff`` null means ``4 * n_embd``)."""
    fields = GPTConfig.__dataclass_fields__
    out = {k: model_cfg.get(k, f.default) for k, f in fields.items() if k not in FREE_MODEL_KEYS and k != "vocab_size"}
    out["n_kv_head"] = out.get("n_kv_head") or out.get("n_head")
    out["d_ff"] = out.get("d_ff") or 4 * int(out.get("n_embd") or 0)
    return out


def _source_config(run_dir: Path, key: str) -> dict:
    if (run_dir / CONFIG_FILE).is_file():
        return OmegaConf.to_container(OmegaConf.load(run_dir / CONFIG_FILE), resolve=True)
    found = load_newest_checkpoint(run_dir / "checkpoints")
    if found is None or "config" not in found[1]:
        raise ConfigError(f"{key}={run_dir} has no {CONFIG_FILE} and its checkpoint holds no config")
    return dict(found[1]["config"])


def check_init_from(cfg: DictConfig) -> InitSource | None:
    """The source run of ``train.init_from`` (None when unset), checked before any work.

    Raises :class:`ConfigError` naming the key: not a run dir, no checkpoint, a model that differs in
    an architecture key, another tokenizer.
    """
    value = cfg.train.get("init_from")
    if value is None or str(value).strip().lower() in _UNSET:
        return None
    key = "train.init_from"
    run_dir = Path(str(value))
    if not run_dir.is_dir() or not holds_a_run(run_dir):
        raise ConfigError(f"{key}={value} is not a run dir (a directory holding {CONFIG_FILE} and checkpoints/)")
    if not checkpoint_files(run_dir / "checkpoints"):
        raise ConfigError(f"{key}={value} has no checkpoint: {run_dir / 'checkpoints'} holds no last.pt or step_*.pt")
    source = _source_config(run_dir, key)
    new_model = OmegaConf.to_container(cfg.model, resolve=True)
    old, new = _architecture(source.get("model") or {}), _architecture(new_model)
    free = ", ".join(f"model.{k}" for k in FREE_MODEL_KEYS[1:])
    for k in sorted(old, key=lambda k: (k in _DERIVED, k)):  # a key set before one derived from it (d_ff: n_embd)
        if old[k] != new[k]:
            raise ConfigError(f"model.{k}={new[k]!r} differs from {old[k]!r} of the run {key}={value} starts from; "
                              f"its weights fit only its own architecture ({free} may change)")
    old_tok, new_tok = (source.get("tokenizer") or {}).get("name"), cfg.tokenizer.name
    if old_tok is not None and old_tok != new_tok:
        raise ConfigError(f"tokenizer.name={new_tok!r} differs from {old_tok!r} of the run {key}={value} starts "
                          "from; its embedding rows are that tokenizer's ids")
    return InitSource(run_dir, source)


def default_original_length(cfg: DictConfig, source: InitSource) -> str | None:
    """Fill ``rope.scaling.original_max_seq_len`` with the source's ``model.seq_len`` when the scaling needs it
    and it is unset; returns the note to log (None when nothing was filled)."""
    from rope.scaling import SCALING_PARAMS

    scaling = cfg.rope.get("scaling")
    if not scaling or scaling.get("type") in (None, "none") or scaling.get("original_max_seq_len") is not None:
        return None
    if "original_max_seq_len" not in SCALING_PARAMS.get(scaling.get("type"), {}):
        return None
    length = (source.config.get("model") or {}).get("seq_len")
    if not isinstance(length, int):
        return None
    OmegaConf.update(cfg, "rope.scaling.original_max_seq_len", length, force_add=True)
    return (f"rope.scaling.original_max_seq_len not given: {length}, the model.seq_len of the run "
            f"train.init_from={source.run_dir} starts from")


#: RoPE keys whose change under ``train.init_from`` is allowed (a study may switch the rotation when it fine-tunes)
#: but said: generate and eval_lengths refuse them, as they evaluate the weights as trained.
ROTATION_KEYS = ("variant", "layout", "rotary_dim", "base")


def init_from_notes(cfg: DictConfig, source: InitSource) -> list[str]:
    """Lines to log where the new run's RoPE rotates otherwise than the source's (the weights were trained with the
    source's), and where ``rope.scaling.original_max_seq_len`` is not the source's training length (the scalings
    stretch positions from that length): allowed, as a study may want either, but never silent."""
    old_rope = source.config.get("rope") or {}
    new_rope = OmegaConf.to_container(cfg.rope, resolve=True)
    notes = [f"rope.{k}={new_rope.get(k)!r} differs from {old_rope.get(k)!r}, the rotation the weights of "
             f"train.init_from={source.run_dir} were trained with" for k in ROTATION_KEYS
             if k in old_rope and old_rope.get(k) != new_rope.get(k)]
    length = (source.config.get("model") or {}).get("seq_len")
    original = (new_rope.get("scaling") or {}).get("original_max_seq_len")
    if isinstance(length, int) and original is not None and original != length:
        notes.append(f"rope.scaling.original_max_seq_len={original} is not {length}, the model.seq_len the run "
                     f"train.init_from={source.run_dir} was trained at")
    return notes


def apply_init_from(model: torch.nn.Module, path: Path, step: int, state: dict) -> None:
    """Copy the source's weights into ``model`` (parameters in place: optimizers built on them stay valid)."""
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"train.init_from: checkpoint {path} does not fit this model ({first})") from None
