"""The registry: discovery of the implementation modules, names, config files, and the validation
API a config checker calls (``rope.check_args``, ``RopeArgumentError``, ``unavailable_reason``)."""

from __future__ import annotations

import ast
import importlib.metadata
import pickle
import pkgutil
import sys
from pathlib import Path

import pytest
import torch

import rope
from rope._numerics import ulp
from rope.base import UnknownRopeError, UnknownRopeOptionError

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


def _plugin_package(root: Path, body: str, module: str = "ropeplug", entry: str = "plug_rope",
                    group: str = "ropelab.rope") -> None:
    """An installed distribution named ``module`` on ``root`` (a sys.path entry): its module and a dist-info whose
    entry point ``entry`` of ``group`` names it, as ``pip install`` of a package declaring it in pyproject.toml
    leaves them."""
    (root / f"{module}.py").write_text(body)
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry} = {module}\n")


PLUGIN = """
from rope.reference import TorchRotary
from rope.registry import register

@register("plug_rope")
class PlugRope(TorchRotary):
    pass
"""

#: A plugin that registers a name, then clashes with a built-in (its import fails there).
CLASH = PLUGIN.replace('"plug_rope"', '"plug_first"') + '\n@register("torch")\nclass Clash(TorchRotary):\n    pass\n'


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


#: The entry-point group of the plugins the tests below load in this process: not ``ropelab.rope``, so that the
#: plugins installed here (checked by test_installed_plugins_imported_and_registered) are no part of them.
TEST_GROUP = "ropelab.rope.test"


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A sys.path entry for plugin packages of ``TEST_GROUP``, and a registry and a record of plugin failures of the
    test's own, so that what a test's plugins register or fail at is gone after it (and so are the modules they
    imported)."""
    from rope import registry

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_PLUGIN_FAILURES", {})
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("ropeplug"):
            del sys.modules[name]


def _load_plugins_warnings() -> tuple[list[str], list[str]]:
    """What ``load_plugins`` returns, and the messages of the RopePluginWarnings it gave (any other warning fails)."""
    import warnings

    from rope import registry

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = registry.load_plugins(TEST_GROUP)
    assert all(issubclass(w.category, rope.RopePluginWarning) for w in caught), [str(w.message) for w in caught]
    return loaded, [str(w.message) for w in caught]


def test_a_plugin_that_fails_to_import_is_left_out_with_one_warning(plugins):
    """A broken plugin no longer stops ``load_plugins`` (hence ``import rope`` and every command): it warns once,
    naming it, its module, its package and the error, is listed by ``plugin_failures``, and asking for its name says
    why it is missing."""
    from rope import registry

    _plugin_package(plugins, "raise RuntimeError('no GPU library here')\n", group=TEST_GROUP)
    reason = ("RoPE plugin 'plug_rope' = 'ropeplug' (package ropeplug) failed to import: RuntimeError: no GPU library "
              "here")
    assert _load_plugins_warnings() == ([], [f"{reason}; left out; fix or uninstall the package"])
    assert registry.plugin_failures() == {"plug_rope": reason}
    for call in (rope.get, lambda name: rope.build(name, 16, 8), lambda name: rope.check_args(name, 16, 8)):
        with pytest.raises(UnknownRopeError) as e:
            call("plug_rope")
        assert str(e.value) == (f"unknown RoPE implementation 'plug_rope': the {reason}; "
                                f"available: {', '.join(rope.available())}")
        assert e.value.argument == "name"
    assert "failed to import" not in str(pytest.raises(UnknownRopeError, rope.get, "other_rope").value)


def test_a_plugin_clashing_with_a_builtin_is_left_out_whole(plugins):
    """``@register("torch")`` in a plugin fails its import; what it registered before that is removed too, so
    nothing half-imported stays buildable, and the built-in keeps its name."""
    from rope import registry

    _plugin_package(plugins, CLASH, module="ropeplug_clash", entry="plug_clash", group=TEST_GROUP)
    loaded, warned = _load_plugins_warnings()
    assert loaded == [] and warned == [
        "RoPE plugin 'plug_clash' = 'ropeplug_clash' (package ropeplug_clash) failed to import: ValueError: RoPE "
        "implementation 'torch' is already registered by TorchRotary; left out; fix or uninstall the package"]
    assert "plug_first" not in rope.available() and rope.get("torch").__name__ == "TorchRotary"
    assert list(registry.plugin_failures()) == ["plug_clash"]


def test_a_plugin_that_registers_nothing_warns(plugins):
    """A plugin module that imports but registers nothing (a forgotten ``@register``) warns in one line, and its
    name, asked for, says so."""
    from rope import registry

    _plugin_package(plugins, "from rope.base import RotaryEmbedding\n", module="ropeplug_empty", entry="plug_empty",
                    group=TEST_GROUP)
    reason = "RoPE plugin 'plug_empty' = 'ropeplug_empty' (package ropeplug_empty) registered no RoPE implementation"
    loaded, warned = _load_plugins_warnings()
    assert loaded == ["plug_empty"]
    assert warned == [f"{reason} (no @register in its module); left out; fix or uninstall the package"]
    assert registry.plugin_failures()["plug_empty"].startswith(reason)
    with pytest.raises(UnknownRopeError) as e:
        rope.build("plug_empty", 16, 8)
    assert str(e.value).startswith(f"unknown RoPE implementation 'plug_empty': the {reason} (no @register")


def test_a_working_plugin_warns_nothing_even_loaded_twice(plugins):
    """A plugin whose module registered its class on a first load (already imported on the second) is no plugin that
    registers nothing."""
    from rope import registry

    _plugin_package(plugins, PLUGIN, group=TEST_GROUP)
    for _ in range(2):
        assert _load_plugins_warnings() == (["plug_rope"], [])
    assert rope.get("plug_rope").__name__ == "PlugRope" and registry.plugin_failures() == {}


def test_import_rope_survives_broken_plugins_with_one_line_each(tmp_path):
    """The kernel writer's case, in a fresh process: a plugin clashing with a built-in and one missing a dependency
    used to stop ``import rope`` (so every command, even ``rope=torch``) with a long traceback. Now each gives one
    line on stderr, the other plugins and the built-ins work, and asking for a broken one says why it is missing."""
    import os
    import subprocess

    _plugin_package(tmp_path, PLUGIN)
    _plugin_package(tmp_path, CLASH, module="ropeplug_clash", entry="plug_clash")
    _plugin_package(tmp_path, "import ropeplug_missing_dependency\n", module="ropeplug_dep", entry="plug_dep")
    code = ("import rope\n"
            "print(sorted(n for n in rope.registry.plugin_failures() if n.startswith('plug_')),\n"
            "      'plug_rope' in rope.available())\n"
            "print(type(rope.build('torch', 16, 8)).__name__)\n"
            "try:\n    rope.build('plug_clash', 16, 8)\nexcept rope.RopeArgumentError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
    assert out.returncode == 0, out.stderr[-2000:]
    clash = ("RoPE plugin 'plug_clash' = 'ropeplug_clash' (package ropeplug_clash) failed to import: ValueError: RoPE "
             "implementation 'torch' is already registered by TorchRotary")
    dep = ("RoPE plugin 'plug_dep' = 'ropeplug_dep' (package ropeplug_dep) failed to import: ModuleNotFoundError: No "
           "module named 'ropeplug_missing_dependency'")
    assert [line for line in out.stderr.splitlines() if "'ropeplug" in line] == [
        f"<ropelab.rope plugin {name}>:0: RopePluginWarning: {reason}; left out; fix or uninstall the package"
        for name, reason in (("plug_clash", clash), ("plug_dep", dep))], out.stderr
    failed, torch_built, refused = out.stdout.splitlines()[-3:]
    assert failed == "['plug_clash', 'plug_dep'] True" and torch_built == "TorchRotary"
    assert refused.startswith(f"unknown RoPE implementation 'plug_clash': the {clash}; available: ")


#: The plugins installed here: each is a test of its own, so ``-k my_rope`` selects the check of the plugin
#: ``my_rope`` beside its conformance tests.
_INSTALLED = sorted({ep.name for ep in importlib.metadata.entry_points(group=rope.registry.PLUGIN_GROUP)})


@pytest.mark.parametrize("plugin", _INSTALLED or [None], ids=lambda p: p or "no-plugin-installed")
def test_installed_plugins_imported_and_registered(plugin):
    """A plugin that failed to import (or registered nothing) only warns at ``import rope``, and its name is then
    missing from ``rope.available()``: its conformance tests are deselected, not failed. This fails instead."""
    failures = rope.registry.plugin_failures()
    if plugin is None:
        assert failures == {}
        return
    assert plugin not in failures, failures[plugin]
