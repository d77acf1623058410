"""A shared rope key a run's config leaves out compares as the value that run trained with, not as a difference.

A plugin's config file written as docs/usage.md says (``name``, ``variant``, ``base``) lacks ``layout``,
``rotary_dim`` and ``scaling``, which ``conf/rope/torch.yaml`` lists with their defaults: a sweep of
``rope=torch,kw_rope`` trained the same model for both, yet its report was refused as mixed runs. A key left out
must still differ from a value other than its default.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

import rope
from llm.report import MD_FILE, MixedRunsError, compare_runs
from llm.report.mixed import config_differences
from llm.report.runs import load_runs

from .test_compare import NUMBERS, make_run

REPO = Path(__file__).resolve().parents[2]
#: rope=torch as the project ships it: every shared key, at its default.
TORCH = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "rope" / "torch.yaml"))
#: A plugin's config file as the docs tell one to write it, with an option of its own.
PLUGIN = {"name": "kw_rope", "variant": "partial", "base": 10000.0, "block_size": 4}


def _sweep(root: Path, ropes: dict[str, dict]) -> Path:
    """A multirun dir of three seeds per implementation, each run's ``rope`` section exactly as given."""
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    job = 0
    for name, section in ropes.items():
        for seed, numbers in enumerate(NUMBERS[("torch", "float32")]):
            run = make_run(root / f"{job}_{name}_s{seed}", section["name"], seed, numbers)
            for path in (run / "config.yaml", run / ".hydra" / "config.yaml"):
                cfg = yaml.safe_load(path.read_text())
                cfg["rope"] = section
                path.write_text(yaml.safe_dump(cfg))
            job += 1
    return root


def test_a_plugin_config_without_the_shared_keys_compares_with_rope_torch(tmp_path: Path):
    """The report of a doc-style plugin against rope=torch is written: no key differs (kw_rope is not registered
    in this process, so its runs are read with the defaults every implementation inherits)."""
    assert "kw_rope" not in rope.available()
    sweep = _sweep(tmp_path / "sweep", {"torch": TORCH, "kw_rope": PLUGIN})
    assert config_differences(load_runs([sweep])) == {}
    assert (compare_runs([sweep], sweep)).name == MD_FILE


@pytest.mark.parametrize("plugin", [
    {**PLUGIN, "scaling": None},  # null is no scaling, as scaling.type none is
    {**PLUGIN, "scaling": {"type": "none"}},  # a parameter left out is null, its type's default
    {**PLUGIN, "max_seq_len": None},  # null is model.seq_len, as absent is
])
def test_other_spellings_of_the_defaults_are_the_same_run(tmp_path: Path, plugin: dict):
    sweep = _sweep(tmp_path / "sweep", {"torch": TORCH, "kw_rope": plugin})
    assert config_differences(load_runs([sweep])) == {}


@pytest.mark.parametrize("torch_cfg,key,shown", [
    ({**TORCH, "layout": "interleaved"}, "rope.layout", "<missing, default half>"),
    ({**TORCH, "rotary_dim": 16}, "rope.rotary_dim", "<missing, default null>"),
    ({**TORCH, "base": 500.0}, "rope.base", "<missing, default 10000.0>"),  # (the plugin's base left out here)
    ({**TORCH, "scaling": {"type": "yarn", "factor": 4.0, "original_max_seq_len": 64}}, "rope.scaling.type",
     "<missing, default none>"),
    ({**TORCH, "max_seq_len": 256}, "rope.max_seq_len", "<missing, default null>"),
])
def test_a_key_left_out_still_differs_from_a_value_other_than_its_default(tmp_path: Path, torch_cfg: dict,
                                                                           key: str, shown: str):
    plugin = {k: v for k, v in PLUGIN.items() if f"rope.{k}" != key}
    sweep = _sweep(tmp_path / "sweep", {"torch": torch_cfg, "kw_rope": plugin})
    with pytest.raises(MixedRunsError) as exc:
        compare_runs([sweep], sweep)
    assert key in exc.value.differences
    assert exc.value.differences[key][shown] == [f"{i}_kw_rope_s{i - 3}" for i in (3, 4, 5)]
    assert f"{key}: " in str(exc.value) and shown in str(exc.value)


def test_the_defaults_are_the_registered_constructor_s(tmp_path: Path, monkeypatch):
    """A registered implementation whose constructor defaults to another layout trained with that layout: its runs
    that leave ``layout`` out differ from rope=torch's ``half``."""

    class Interleaved(rope.RotaryEmbedding):
        layouts = ("half", "interleaved")

        def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial",
                     layout: str = "interleaved", rotary_dim: int | None = None, scaling: dict | None = None,
                     block_size: int = 4) -> None:
            super().__init__(head_dim, max_seq_len, base, variant, layout, rotary_dim, scaling)

        def rotate(self, q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor | None):
            return q.clone(), None if k is None else k.clone()

    monkeypatch.setitem(rope.registry._REGISTRY, "kw_rope", Interleaved)
    monkeypatch.setattr(Interleaved, "registry_name", "kw_rope")
    sweep = _sweep(tmp_path / "sweep", {"torch": TORCH, "kw_rope": PLUGIN})
    diffs = config_differences(load_runs([sweep]))
    assert list(diffs) == ["rope.layout"]
    assert diffs["rope.layout"] == {"half": ["0_torch_s0", "1_torch_s1", "2_torch_s2"],
                                    "<missing, default interleaved>": ["3_kw_rope_s0", "4_kw_rope_s1", "5_kw_rope_s2"]}
