"""The README's claim, end to end: a RoPE implementation is one file with ``@register`` plus its
``conf/rope/<name>.yaml``, with no list to edit anywhere.

A throwaway implementation (the reference function in a few lines of plain torch) is written into a
temporary copy of the ``rope`` package, which subprocesses import first (``PYTHONPATH``, with
``PYTHONSAFEPATH=1`` so that the working directory's own ``rope/`` does not shadow it). It must then
be (a) listed and built by the registry, (b) trained through Hydra with its config in a
``--config-dir``, and (c) picked up and passed by the conformance test file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, run_cli

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="needs PYTHONSAFEPATH (Python 3.11+)")

THROWAWAY = '''"""A throwaway RoPE: the reference function in plain torch, float32 arithmetic."""

import torch

from rope.base import RotaryEmbedding
from rope.reference import gather_cos_sin
from rope.registry import register


@register("throwaway")
class Throwaway(RotaryEmbedding):
    def rotate(self, q, k, positions):
        def one(x):
            cos, sin = (gather_cos_sin(t, positions, x.shape[1]) for t in (self.cos, self.sin))
            x1, x2 = x.float().chunk(2, dim=-1)
            return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1).to(x.dtype)

        return one(q), None if k is None else one(k)
'''
CONFIG = "# @package rope\nname: throwaway\nvariant: partial\nbase: 10000.0\n"
PRIVATE = 'raise RuntimeError("an underscore module must not be imported by discovery")\n'


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> dict:
    """A copy of ``rope/`` holding ``throwaway.py`` (and a ``_private.py`` that must stay unimported),
    a config dir holding ``rope/throwaway.yaml``, and the environment that imports that copy."""
    tmp = tmp_path_factory.mktemp("plugin")
    package = tmp / "pkgs" / "rope"
    shutil.copytree(ROOT / "rope", package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "throwaway.py").write_text(THROWAWAY)
    (package / "_private.py").write_text(PRIVATE)
    conf = tmp / "conf"
    (conf / "rope").mkdir(parents=True)
    (conf / "rope" / "throwaway.yaml").write_text(CONFIG)
    # the throwaway package first, then the project, then whatever path the caller's packages come from (a GPU
    # machine's carried wheels live on PYTHONPATH)
    path = [str(tmp / "pkgs"), str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {"PYTHONPATH": os.pathsep.join(path), "PYTHONSAFEPATH": "1"}
    return {"tmp": tmp, "package": package, "conf": conf, "env": env}


def _run(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=timeout)


def test_listed_and_built(plugin):
    code = (
        "import sys, torch, rope\n"
        f"assert rope.__file__ == {str(plugin['package'] / '__init__.py')!r}, rope.__file__\n"
        "assert 'throwaway' in rope.available(), rope.available()\n"
        "assert 'rope._private' not in sys.modules\n"
        "r = rope.build('throwaway', 16, 8)\n"
        "x = torch.randn(2, 5, 3, 16)\n"
        "torch.testing.assert_close(r(x), rope.build('torch', 16, 8)(x), rtol=0, atol=1e-6)\n"
        "print(type(r).__name__, r.describe())\n"
    )
    out = _run(["-c", code], plugin["env"])
    assert out.returncode == 0, out.stderr
    want = "{'rope': 'throwaway', 'variant': 'partial', 'compute_dtype': 'float32', 'layout': 'half', "
    want += "'rotary_dim': 16, 'scaling': 'none'}"
    assert f"Throwaway {want}" in out.stdout


def test_picked_up_by_the_conformance_tests(plugin):
    conformance = Path(__file__).with_name("test_conformance.py")
    # -o pythonpath=: the checkout's own rope/ (pyproject's pythonpath) must not shadow the copy; -m "not gpu": the
    # GPU tests are left out here rather than skipped, so that any skip left is the entry's own
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "pythonpath=", str(conformance), "-k", "throwaway",
            "-m", "not gpu"]
    out = _run(args, plugin["env"])
    tail = out.stdout[-3000:]
    assert out.returncode == 0, tail + out.stderr[-3000:]
    passed = re.search(r"(\d+) passed", tail)
    assert passed and int(passed.group(1)) >= 50, tail
    assert not re.search(r"failed|error|skipped", tail.splitlines()[-1]), tail


def test_trains_through_hydra(plugin):
    """``python -m llm.train rope=throwaway`` with the config in a ``--config-dir``, from the repo root,
    on the small model of ``helpers.SMALL`` (which ``run_cli`` puts before the overrides)."""
    run_dir = plugin["tmp"] / "run"
    args = [f"--config-dir={plugin['conf']}", "rope=throwaway", "train.max_steps=2", f"hydra.run.dir={run_dir}"]
    out = run_cli(args, extra_env=plugin["env"])
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-4000:])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rope"] == "throwaway", summary


def test_an_output_of_another_dtype_is_refused_and_the_benchmark_says_so(monkeypatch):
    """An implementation of one's own that returns float32 for bf16 inputs is exact in value, yet would change the
    model's arithmetic after it and write twice the bytes a benchmark row counts: its call raises one line naming
    the dtypes, and ``bench.kernel`` (``--impls <name>``) reports it as a failure, keeping the other rows."""
    import argparse

    import pytest
    import torch

    import rope
    from bench import kernel
    from rope.reference import gather_tables, rotate_half_split

    class Float32Out(rope.RotaryEmbedding):
        def rotate(self, q, k, positions):
            cos, sin = gather_tables(positions, q.shape[1], self.cos, self.sin)
            return rotate_half_split(q.float(), cos, sin), rotate_half_split(k.float(), cos, sin)

    monkeypatch.setitem(rope.registry._REGISTRY, "float32_out", Float32Out)
    monkeypatch.setattr(Float32Out, "registry_name", "float32_out")
    q, k = torch.randn(1, 8, 2, 16).bfloat16(), torch.randn(1, 8, 2, 16).bfloat16()
    with pytest.raises(TypeError, match=r"^Float32Out.rotate must return the pair \(q rotated, k rotated\), "
                                        r"bfloat16 tensors .*; got a tuple of 2: \(float32 tensor"):
        rope.build("float32_out", 16, 8)(q, k)
    args = argparse.Namespace(elements=256, seq_len=8, heads=(2, 2), dtype=torch.bfloat16, device=torch.device("cpu"),
                              tuning={}, tuning_text="", compile_backend="aot_eager")
    lines: list[str] = []
    rows = kernel.measure_config(kernel.Config(16, "partial", "plain"), ["torch", "float32_out"], args,
                                 lambda fn: fn() and 1.0, 100.0, {}, lines.append)
    assert {row["implementation"] for row in rows} == {"torch"}
    assert any("float32_out failed: TypeError: Float32Out.rotate must return the pair" in line for line in lines)
