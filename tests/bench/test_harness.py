"""bench/harness.py: what every benchmark's rows rely on (append-only CSVs, the commit of the code that ran)."""

from __future__ import annotations

import subprocess

import pytest
from helpers import ctrl_c_while_importing

from bench import harness


def test_results_are_appended_under_one_header(tmp_path, capsys):
    path = tmp_path / "sub" / "x.csv"
    results = harness.ResultsCsv(path, ("a", "b"))
    results.append([{"a": 1, "b": 0.5}])
    harness.ResultsCsv(path, ("a", "b")).append([{"a": 2, "b": float("nan")}, {"a": 3}])
    assert harness.read_rows(path) == [{"a": "1", "b": "0.5"}, {"a": "2", "b": ""}, {"a": "3", "b": ""}]
    refusals = {path: "its columns are not the ones this benchmark writes", tmp_path: "not a file; name the CSV",
                path / "y.csv": "x.csv is a file, not a folder"}
    for bad, says in refusals.items():  # before any row: one line, exit 2
        with pytest.raises(SystemExit) as exit_:
            harness.ResultsCsv(bad, ("a", "c"))
        assert exit_.value.code == 2 and says in capsys.readouterr().err
    with pytest.raises(ValueError):  # a key the file has no column for is a bug, not a silent drop
        results.append([{"a": 4, "z": 1}])


def test_a_file_whose_last_row_has_no_line_end_is_refused_before_any_work(tmp_path, capsys):
    """A row cut short (or an edit without a final newline): the next append joined the first new row to it, so
    both were unreadable and the tables later refused the whole file. Refused at the start, the file unchanged."""
    path = tmp_path / "x.csv"
    path.write_bytes(b"a,b\r\n1,0.5\r\n2,0.")
    with pytest.raises(SystemExit) as exit_:
        harness.ResultsCsv(path, ("a", "b"))
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err == (f"{path}: its last line has no line end (a row cut short, or an edit): "
                                             "mend or remove it, or append to another file with --out\n")
    assert path.read_bytes() == b"a,b\r\n1,0.5\r\n2,0."


def test_a_file_that_cannot_be_made_is_refused_before_any_work_and_the_check_leaves_nothing(tmp_path, capsys):
    """A path no file can be opened at (``/proc`` refuses new files, even to root, whom permission bits let through)
    is one line and exit 2 at construction: it failed with a traceback at the first row, after that row's
    measurement. Trying to open a new file leaves no file or folder behind."""
    with pytest.raises(SystemExit) as exit_:
        harness.ResultsCsv("/proc/ropelab-results.csv", ("a", "b"))
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("--out /proc/ropelab-results.csv: cannot be written (")
    assert err.count("\n") == 1
    path = tmp_path / "new" / "folder" / "x.csv"
    results = harness.ResultsCsv(path, ("a", "b"))
    assert not (tmp_path / "new").exists(), "the check made nothing a run that measures nothing would leave"
    results.append([{"a": 1, "b": 2}])
    assert harness.read_rows(path) == [{"a": "1", "b": "2"}]


def test_rows_that_cannot_be_appended_mid_run_go_to_stdout_with_one_line(tmp_path, capsys):
    """A folder gone (or a disk full) after the check: the rows just measured are printed, not lost in a
    traceback, and the run ends with exit 1 and one line saying where they are."""
    path = tmp_path / "gone" / "x.csv"
    results = harness.ResultsCsv(path, ("a", "b"))
    (tmp_path / "gone").write_text("a file where the folder was\n")
    with pytest.raises(SystemExit) as exit_:
        results.append([{"a": 1, "b": 0.5}, {"a": 2}])
    out, err = capsys.readouterr()
    assert exit_.value.code == 1 and out.splitlines() == ["a,b", "1,0.5", "2,"]
    assert err.count("\n") == 1 and "2 row(s) could not be appended" in err


def test_commit_comes_from_the_marker_else_from_the_folders_own_git(tmp_path):
    (tmp_path / "rope").mkdir()
    assert harness.code_commit(tmp_path) == "unknown"  # no git here at all
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "rope" / "x.py").write_text("x = 1\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   check=True)
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert harness.code_commit(tmp_path) == head
    (tmp_path / "rope" / "x.py").write_text("x = 2\n")
    assert harness.code_commit(tmp_path) == f"{head}-dirty"
    inner = tmp_path / "copy"  # an archive inside a checkout is not that checkout's commit
    (inner / "rope").mkdir(parents=True)
    assert harness.code_commit(inner) == "unknown"
    (inner / ".commit").write_text("d8fcb20\n")
    assert harness.code_commit(inner) == "d8fcb20"


def test_tuning_fields_are_parsed_with_their_types():
    assert harness.parse_tuning("tiling=rows, tile=2048,num_warps=8") == {"tiling": "rows", "tile": 2048,
                                                                          "num_warps": 8}
    assert harness.parse_tuning(None) == {}
    with pytest.raises(ValueError, match="FIELD=VALUE"):
        harness.parse_tuning("rows")


def test_an_older_rope_without_the_triton_package_gets_no_hook(tmp_path, monkeypatch, capsys):
    """A --rope-path tree without rope/triton/ must not reach this checkout's (an editable install's import hook
    would find it there): no plan, and --tuning refused."""
    import rope

    assert harness.triton_package() is not None  # this checkout's rope has it
    (tmp_path / "rope").mkdir()
    monkeypatch.setattr(rope, "__file__", str(tmp_path / "rope" / "__init__.py"))
    assert harness.triton_package() is None
    assert harness.plan_label(rope.build("torch", 16, 8), None, None, None) == ""
    with pytest.raises(SystemExit) as exc:  # a user error: one line, exit 2
        harness.tuning({"tiling": "rows"})
    assert exc.value.code == 2 and "no rope.triton.tuning hook" in capsys.readouterr().err


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_appends_keep_the_files_own_line_endings(tmp_path, ending):
    """attention.csv ends its lines with LF, kernel.csv with CRLF: a row appended to either must match the file."""
    path = tmp_path / "x.csv"
    path.write_bytes(f"a,b{ending}1,2{ending}".encode())
    harness.ResultsCsv(path, ("a", "b")).append([{"a": 3, "b": 4}, {"a": 5}])
    assert path.read_bytes() == f"a,b{ending}1,2{ending}3,4{ending}5,{ending}".encode()


def test_an_interrupt_mid_append_writes_none_of_its_rows(tmp_path, monkeypatch):
    """Ctrl-C while one measurement's rows are written leaves the file as it was, never a part of them."""
    path = tmp_path / "x.csv"
    results = harness.ResultsCsv(path, ("a", "b"))
    results.append([{"a": 1, "b": 2}])
    before = path.read_bytes()
    cells = iter(range(100))

    def interrupted(value):
        if next(cells) == 3:  # the second row's second cell
            raise KeyboardInterrupt
        return value

    monkeypatch.setattr(harness, "_cell", interrupted)
    with pytest.raises(KeyboardInterrupt):
        results.append([{"a": 3, "b": 4}, {"a": 5, "b": 6}])
    assert path.read_bytes() == before


def test_a_rope_path_that_cannot_be_imported_exits_2_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        harness.import_rope(tmp_path)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--rope-path" in err and "no rope/__init__.py there" in err
    assert err.count("\n") == 1


def test_the_log_names_the_package_and_version_of_a_plugins_kernel(monkeypatch):
    """The commit column names this checkout's code only: an implementation an installed package registers is
    named with that package's version, so two versions of one's own kernel can be told apart in the logs."""
    import importlib.metadata

    import rope

    plugin = type("PluginRope", (rope.get("torch"),), {"__module__": "_pytest.my_rope"})
    monkeypatch.setitem(rope.registry._REGISTRY, "plugin_rope", plugin)
    version = importlib.metadata.version("pytest")
    text = harness.plugin_versions(["torch", "plugin_rope", "torch_compiled"])
    assert text.startswith("; plugin_rope: package pytest") and text.endswith(f" {version}") and "torch" not in text
    assert harness.plugin_versions(["torch", "triton_v4"]) == ""


def test_a_ctrl_c_is_one_line_naming_the_rows_kept(tmp_path, capsys, monkeypatch):
    """A benchmark stopped by Ctrl-C ends with exit 130 and one line saying which rows it wrote before, not a
    traceback from wherever the interpreter was (a Triton kernel, a compile)."""
    path = tmp_path / "rows.csv"
    monkeypatch.setattr(harness.ResultsCsv, "appended", {})  # this process's earlier tests appended rows too

    def main() -> int:
        harness.ResultsCsv(path, ("a",)).append([{"a": 1}, {"a": 2}])
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_:
        harness.run_main(main, "bench.test")
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 130 and err == f"bench.test: interrupted; 2 row(s) in {path}"
    with pytest.raises(SystemExit) as exit_:
        harness.run_main(lambda: 3, "bench.test")
    assert exit_.value.code == 3


@pytest.mark.parametrize(("text", "says"), [("a,b\n1,2\n3\n", "line 3: 1 cells where the header has 2: a row cut "
                                                             "short or edited"),
                                            ("a,b\n1,2,9\n", "line 2: 3 cells where the header has 2: a row cut "
                                                              "short or edited"),
                                            ("a,b\n1,x\n", "line 2: b is 'x', not a finite number")])
def test_a_damaged_results_file_is_refused_naming_its_line(tmp_path, capsys, text, says):
    """A row cut short, with a cell too many, or with text where a number belongs would be dropped or misread by a
    table or a comparison without a word: one line naming the file and line, exit 2."""
    path = tmp_path / "kernel.csv"
    path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        harness.read_rows(path, numeric=("b",))
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.strip() == f"{path}, {says}; mend or remove that line"
    path.write_text("a,b\n1,\n2,3.5\n")
    assert harness.read_rows(path, numeric=("b",)) == [{"a": "1", "b": ""}, {"a": "2", "b": "3.5"}]


def test_an_option_given_an_empty_list_is_refused_not_read_as_its_default(capsys):
    assert harness.split_list(None, "--impls") == [] and harness.split_list("a, b,", "--impls") == ["a", "b"]
    with pytest.raises(SystemExit) as exit_:
        harness.split_list(",", "--impls")
    assert exit_.value.code == 2 and "--impls takes a comma-separated list" in capsys.readouterr().err


def test_a_ctrl_c_while_the_script_loads_is_one_line():
    """A Ctrl-C in the seconds torch and triton take to import was an import's traceback: one line, exit 130."""
    child = ctrl_c_while_importing("bench.kernel", "torch", ["-m", "--smoke"])
    assert (child.returncode, child.stderr, child.stdout) == (
        130, "Interrupted before the benchmark began: nothing was measured\n", "")


@pytest.mark.parametrize("spelling", ["bf16", "bfloat16"])
def test_every_script_takes_both_spellings_of_a_dtype(spelling):
    """bench.kernel took only ``bf16`` and bench.attention only ``bfloat16``: each refused the other's spelling."""
    import torch

    from bench import attention, kernel

    assert kernel.parse_args(["--smoke", "--dtype", spelling]).dtype is torch.bfloat16
    assert attention.parse_args(["--smoke", "--dtype", spelling]).dtype is torch.bfloat16
