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
``original_max_seq_len`` and is not given one takes the source run's ``model.seq_len`` (its own
``original_max_seq_len`` when the source was itself trained with a scaling), logged, and is written into the
new run's config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from llm.errors import ConfigError, ResumeError, one_line
from llm.model import GPTConfig
from llm.run_files import COMPLETED, CONFIG_FILE, SUMMARY_FILE, read_summary
from llm.training.checkpoint import checkpoint_files, load_newest_checkpoint
from llm.training.outputs import holds_a_run

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
        if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
            raise ConfigError(f"{self.key}={self.run_dir}: {path} holds no model weights (not a checkpoint of a run)")
        saved = state.get("config")
        if isinstance(saved, dict):  # an older checkpoint may hold no config: its weights are then checked as loaded
            # The run's config was checked against this run; a checkpoint of another model (copied in) must be
            # refused here too, before the data and model work, not when its weights fail to load.
            found_key = _first_difference(self.config, saved)
            if found_key is not None:
                k, theirs, ours = found_key
                raise ConfigError(f"{self.key}={self.run_dir}: checkpoint {path} holds another model than the run's "
                                  f"{CONFIG_FILE}: {k}={theirs!r} ({CONFIG_FILE}: {ours!r})")
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
    """The source run's config: its ``config.yaml``, else its newest checkpoint's. A file that does not read as a
    config is refused in one line naming the key: it is the user's source, not a fault of this program."""
    path = run_dir / CONFIG_FILE
    if path.is_file():
        try:
            config = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        except Exception as e:  # YAML's parser, OmegaConf's interpolation: any failure means unreadable
            raise ConfigError(f"{key}={run_dir}: {path} is damaged or unreadable ({one_line(e)})") from None
        if not isinstance(config, dict):
            raise ConfigError(f"{key}={run_dir}: {path} holds no config (a mapping of groups)")
        return config
    try:
        found = load_newest_checkpoint(run_dir / "checkpoints")
    except ResumeError as e:
        raise ConfigError(f"{key}={run_dir}: {e}") from None
    if found is None or not isinstance(found[1], dict) or not isinstance(found[1].get("config"), dict):
        raise ConfigError(f"{key}={run_dir} has no {CONFIG_FILE} and its checkpoint holds no config")
    return dict(found[1]["config"])


def _first_difference(old: dict, new: dict) -> tuple[str, object, object] | None:
    """(key, value in ``new``, value in ``old``) of the first architecture key or tokenizer in which two configs
    differ, None when the weights of one fit the other; keys set before keys derived from them (d_ff: n_embd), so
    the key named is the one the user set."""
    a, b = _architecture(old.get("model") or {}), _architecture(new.get("model") or {})
    for k in sorted(a, key=lambda k: (k in _DERIVED, k)):
        if a[k] != b[k]:
            return f"model.{k}", b[k], a[k]
    old_tok, new_tok = (old.get("tokenizer") or {}).get("name"), (new.get("tokenizer") or {}).get("name")
    if old_tok is not None and new_tok is not None and old_tok != new_tok:
        return "tokenizer.name", new_tok, old_tok
    return None


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
    found = _first_difference(source, {"model": OmegaConf.to_container(cfg.model, resolve=True),
                                       "tokenizer": {"name": cfg.tokenizer.name}})
    if found is not None:
        k, new, old = found
        why = ("its embedding rows are that tokenizer's ids" if k == "tokenizer.name" else
               "its weights fit only its own architecture ("
               + ", ".join(f"model.{f}" for f in FREE_MODEL_KEYS[1:]) + " may change)")
        raise ConfigError(f"{k}={new!r} differs from {old!r} of the run {key}={value} starts from; {why}")
    return InitSource(run_dir, source)


def default_original_length(cfg: DictConfig, source: InitSource) -> str | None:
    """Fill ``rope.scaling.original_max_seq_len`` with the length the source's weights stretch positions from (its
    ``model.seq_len``, or its own ``original_max_seq_len`` if it was trained with a scaling) when the scaling needs
    it and it is unset; returns the note to log (None when nothing was filled)."""
    from rope.scaling import SCALING_PARAMS

    scaling = cfg.rope.get("scaling")
    if not scaling or scaling.get("type") in (None, "none") or scaling.get("original_max_seq_len") is not None:
        return None
    if "original_max_seq_len" not in SCALING_PARAMS.get(scaling.get("type"), {}):
        return None
    length, what = _original_length(source)
    if length is None:
        return None
    OmegaConf.update(cfg, "rope.scaling.original_max_seq_len", length, force_add=True)
    return (f"rope.scaling.original_max_seq_len not given: {length}, the {what} of the run "
            f"train.init_from={source.run_dir} starts from")


def _original_length(source: InitSource) -> tuple[int | None, str]:
    """(length, the key it comes from) the source's weights stretch positions from: its own
    ``rope.scaling.original_max_seq_len`` when it was trained with a scaling, as ``llm.eval_lengths`` takes it (a
    fine-tuned run's ``model.seq_len`` is already the stretched length), else its ``model.seq_len``."""
    scaling = _scaling(source.config.get("rope") or {}) or {}
    if isinstance(scaling.get("original_max_seq_len"), int):
        return scaling["original_max_seq_len"], "rope.scaling.original_max_seq_len"
    length = (source.config.get("model") or {}).get("seq_len")
    return (length, "model.seq_len") if isinstance(length, int) else (None, "model.seq_len")


#: RoPE keys whose change under ``train.init_from`` is allowed (a study may switch the rotation when it fine-tunes)
#: but said: generate and eval_lengths refuse them, as they evaluate the weights as trained.
ROTATION_KEYS = ("variant", "layout", "rotary_dim", "base")


def init_from_notes(cfg: DictConfig, source: InitSource) -> list[str]:
    """Lines to log where the new run's RoPE rotates otherwise than the source's (the weights were trained with the
    source's: a rotation added or removed, another rotation key, the source's own scaling dropped or changed), where
    ``rope.scaling.original_max_seq_len`` is not the source's training length (the scalings stretch positions from
    that length), and where the source run did not complete: allowed, as a study may want any, but never silent."""
    old_rope = source.config.get("rope") or {}
    new_rope = OmegaConf.to_container(cfg.rope, resolve=True)
    notes = _unfinished_note(source)
    rotates_old, rotates_new = old_rope.get("name") != "none", new_rope.get("name") != "none"
    if "name" in old_rope and rotates_old != rotates_new:
        # rope=none and a rotating rope share every rotation key, so only the names tell a rotation added or removed
        notes.append(f"rope.name={new_rope.get('name')!r} {'rotates' if rotates_new else 'rotates nothing'}, while "
                     f"the weights of train.init_from={source.run_dir} were trained with rope.name="
                     f"{old_rope.get('name')!r}, which {'rotates' if rotates_old else 'rotates nothing'}")
    elif rotates_new:
        notes += [f"rope.{k}={new_rope.get(k)!r} differs from {old_rope.get(k)!r}, the rotation the weights of "
                  f"train.init_from={source.run_dir} were trained with" for k in ROTATION_KEYS
                  if k in old_rope and old_rope.get(k) != new_rope.get(k)]
        old_scaling, new_scaling = _scaling(old_rope), _scaling(new_rope)
        if old_scaling is not None and old_scaling != new_scaling:
            notes.append(f"rope.scaling={new_scaling or 'none'} differs from {old_scaling}, the scaling the weights "
                         f"of train.init_from={source.run_dir} were trained with")
    length, what = _original_length(source)
    original = (new_rope.get("scaling") or {}).get("original_max_seq_len")
    if length is not None and original is not None and original != length:
        notes.append(f"rope.scaling.original_max_seq_len={original} is not {length}, the {what} the run "
                     f"train.init_from={source.run_dir} was trained at")
    return notes


def _scaling(rope_cfg: dict) -> dict | None:
    """A RoPE config's scaling as its set keys (None for no scaling): what the rotation of trained weights included."""
    scaling = rope_cfg.get("scaling") or {}
    if scaling.get("type") in (None, "none"):
        return None
    return {k: v for k, v in scaling.items() if v is not None}


def init_record(source: InitSource, path: Path, step: int) -> dict:
    """What a run started from another's weights records of its source (in its summary, and in its checkpoints for
    a resume): the source's run dir and checkpoint as absolute paths (``train.init_from`` as typed depends on the
    working directory), the checkpoint's step, and the source's data id and code version where its summary says."""
    summary = read_summary(source.run_dir) or {}
    data = summary.get("data_fingerprint")
    return {"run": str(source.run_dir.resolve()), "checkpoint": str(Path(path).resolve()), "step": step,
            "data_id": data.get("id") if isinstance(data, dict) else None, "git_commit": summary.get("git_commit"),
            "code_fingerprint": summary.get("code_fingerprint")}


def _unfinished_note(source: InitSource) -> list[str]:
    """A line when the source run did not complete (its ``summary.json``'s status): its newest checkpoint is then
    a model part-way through its schedule, or one a run still training may replace, which a start must not hide."""
    summary = read_summary(source.run_dir)
    if summary is None:
        return [f"train.init_from={source.run_dir} has no readable {SUMMARY_FILE}: whether that run completed is "
                "unknown; its newest checkpoint is taken"]
    status = summary.get("status")
    if status == COMPLETED:
        return []
    step, total = summary.get("step"), summary.get("max_steps")
    at = f", step {step} of {total}" if step is not None and total is not None else ""
    return [f"train.init_from={source.run_dir} did not complete (status {status!r}{at}): its newest checkpoint is "
            "taken as it is"]


def apply_init_from(model: torch.nn.Module, path: Path, step: int, state: dict) -> None:
    """Copy the source's weights into ``model`` (parameters in place: optimizers built on them stay valid)."""
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        # torch's first line only says that loading failed; the next names the tensor that does not fit
        lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
        first = next((line for line in lines if not line.startswith("Error(s) in loading")), type(e).__name__)
        raise ConfigError(f"train.init_from: checkpoint {path} does not fit this model ({first})") from None
