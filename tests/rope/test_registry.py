"""The registry: discovery of the implementation modules, names, config files, and the validation
API a config checker calls (``rope.check_args``, ``RopeArgumentError``, ``unavailable_reason``)."""

from __future__ import annotations

import ast
import pickle
import pkgutil
import sys
from pathlib import Path

import pytest
import torch

import rope
from rope.base import UnknownRopeError, UnknownRopeOptionError
from rope.numerics import ulp

ROOT = Path(__file__).resolve().parents[2]


def test_registry_lists_and_refuses_unknown():
    names = rope.available()
    assert {"torch", "none"} <= set(names)
    with pytest.raises(KeyError, match="available: .*torch"):
        rope.build("no_such_rope", 64, 128)
    for call in (rope.build, rope.check_args):
        with pytest.raises(rope.RopeArgumentError, match="unknown RoPE implementation 'no_such_rope'") as e:
            call("no_such_rope", 64, 128)
        assert e.value.argument == "name" and ", ".join(rope.available()) in str(e.value)
    with pytest.raises(rope.RopeArgumentError, match="string") as e:
        rope.check_args(None, 64, 128)
    assert e.value.argument == "name"


def test_every_registered_name_has_a_config_file():
    conf = ROOT / "conf" / "rope"
    for name in rope.available():
        assert (conf / f"{name}.yaml").is_file(), f"conf/rope/{name}.yaml missing"


def test_register_refuses_non_rotary_class():
    with pytest.raises(TypeError, match="RotaryEmbedding"):
        rope.register("bogus")(object)


def test_discovery_imports_every_public_module_and_init_lists_none():
    """Every non-underscore module of the package is imported by ``import rope``, and
    ``rope/__init__.py`` imports from nothing but ``rope.base`` and ``rope.registry``."""
    public = [m.name for m in pkgutil.iter_modules(rope.__path__) if not m.name.startswith("_")]
    assert {"reference", "triton"} <= set(public)
    for name in public:
        assert f"rope.{name}" in sys.modules, f"rope.{name} was not imported by `import rope`"
    tree = ast.parse((ROOT / "rope" / "__init__.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert imported <= {"rope.base", "rope.registry"}, imported


def test_argument_errors_name_the_argument_and_keep_the_old_types():
    """RopeArgumentError is a ValueError; an unknown name is also a KeyError, an unknown option also a
    TypeError (what the registry and Python raised before). All of them pickle (torchrun workers)."""
    with pytest.raises(UnknownRopeOptionError) as e:
        rope.build("torch", 32, 16, no_such_option=1)
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError) and e.value.argument == "no_such_option"
    assert "options: variant, layout, rotary_dim, scaling, compute_dtype" in str(e.value)
    with pytest.raises(UnknownRopeError) as e2:
        rope.get("nope")
    for err in (e.value, e2.value, rope.RopeArgumentError("base", "base must be > 0")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and back.argument == err.argument and str(back) == str(err)
    assert str(e2.value).startswith("unknown RoPE")  # not quoted, as KeyError would


@pytest.mark.parametrize("name", ["torch", "none"])
def test_portable_entries_are_available_anywhere(name):
    for device in ("cpu", "cuda", "meta"):
        assert rope.get(name).unavailable_reason(torch.device(device)) is None


def test_check_args_passes_what_build_accepts():
    for name in rope.available():
        rope.check_args(name, 64, 128)
        rope.check_args(name, 64, 128, 500.0, variant="full")
    rope.check_args("torch", 48, 16, base=10000, variant="partial", compute_dtype="bfloat16")


@pytest.mark.parametrize(
    "dtype,values,spacing",
    [(torch.bfloat16, [1.0, 1.5, -2.0, 0.0], [2.0**-7, 2.0**-7, 2.0**-6, 2.0**-133]),
     (torch.float16, [1.0, 1000.0, 2.0**-20, 0.0], [2.0**-10, 0.5, 2.0**-24, 2.0**-24]),
     (torch.float32, [1.0, 3.0, 0.0], [2.0**-23, 2.0**-22, 2.0**-149])],
)
def test_ulp(dtype, values, spacing):
    x = torch.tensor(values).to(dtype)
    assert ulp(x, dtype).tolist() == spacing
    assert ulp(x.double(), dtype).tolist() == spacing  # the grid is the dtype's, not the tensor's
    with pytest.raises(ValueError, match="no number grid"):
        ulp(x, torch.int32)


def _plugin_package(root: Path, body: str) -> None:
    """An installed distribution ``ropeplug`` on ``root`` (a sys.path entry): its module and a dist-info whose entry
    point ``ropelab.rope`` names it, as ``pip install`` of a package declaring it in pyproject.toml leaves them."""
    (root / "ropeplug.py").write_text(body)
    info = root / "ropeplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ropeplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ropelab.rope]\nplug_rope = ropeplug\n")


PLUGIN = """
from rope.reference import TorchRotary
from rope.registry import register

@register("plug_rope")
class PlugRope(TorchRotary):
    pass
"""


def test_an_installed_package_adds_an_implementation_through_its_entry_point(tmp_path):
    """A package of its own, not a file in this checkout: ``import rope`` imports what it declares under the
    ``ropelab.rope`` entry points, so its name is listed and builds (here in a fresh process)."""
    import subprocess

    _plugin_package(tmp_path, PLUGIN)
    code = "import rope; print(rope.available()); print(type(rope.build('plug_rope', 16, 8)).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
    assert out.returncode == 0, out.stderr[-2000:]
    listed, built = out.stdout.splitlines()[-2:]
    assert "'plug_rope'" in listed and built == "PlugRope"


def test_a_plugin_that_fails_to_import_is_named(tmp_path, monkeypatch):
    from rope import registry

    _plugin_package(tmp_path, "raise RuntimeError('no GPU library here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match=r"^RoPE plugin 'plug_rope' = 'ropeplug' \(package ropeplug\) failed to "
                                          r"import: RuntimeError: no GPU library here$"):
        registry.load_plugins()
