"""An environment variable the config reads as a default is named when its value is refused: the user typed no
key, so a line telling them to leave the key out points at nothing they can change."""

from __future__ import annotations

import pytest
from helpers import compose_cfg

from llm.config_check import validate_config
from llm.errors import ConfigError


def test_an_empty_ropelab_cache_is_named_as_the_source_of_cache_dir(monkeypatch):
    monkeypatch.setenv("ROPELAB_CACHE", "")
    with pytest.raises(ConfigError, match=r"^cache_dir='' \(from \$ROPELAB_CACHE, its default\) must be a directory "
                                          r"path; set ROPELAB_CACHE to a directory, or unset it"):
        validate_config(compose_cfg([]))


def test_an_empty_cache_dir_typed_is_still_told_to_leave_it_out(monkeypatch, tmp_path):
    monkeypatch.setenv("ROPELAB_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match=r"^cache_dir='' must be a directory path; leave cache_dir out"):
        validate_config(compose_cfg(["cache_dir=''"]))
