"""bench/compare.py, bench/tables.py and bench/compare_commits.sh on rows written here (no timing)."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess

import pytest
from helpers import ROOT

from bench import compare, generate, harness, kernel, step, tables


def kernel_row(commit: str, impl: str, D: int, pct: float, direction: str = "forward", date: str = "2026-01-01T00:00Z",
               gpu: str = "GPU X") -> dict:
    return {"date": date, "gpu": gpu, "commit": commit, "torch": "2.11", "triton": "3.6", "implementation": impl,
            "direction": direction, "head_dim": D, "variant": "full", "layout": "half", "rotary_dim": D,
            "positions": "arange", "shape": f"8x2048x16x{D}", "dtype": "bfloat16", "elements": 33554432,
            "time_us": 70.0, "gbps": 40 * pct, "copy_gbps": 4000.0, "pct_copy_bw": pct, "max_err": 0.01,
            "tuning": "", "plan": ""}


def step_row(commit: str, impl: str, pct: float | None, lo: float | None, hi: float | None) -> dict:
    return {"date": "2026-01-01T00:00Z", "gpu": "GPU X", "commit": commit, "torch": "2.11", "triton": "3.6",
            "model": "seed004", "shape": "B24xT512 vocab 100277", "implementation": impl, "mode": "compile",
            "time_us": 15000.0, "min_us": 14000.0, "steps": 24, "rounds": 8, "vs_torch_pct": pct,
            "vs_torch_lo": lo, "vs_torch_hi": hi, "params_m": 49.2}


@pytest.fixture
def results(tmp_path):
    k = harness.ResultsCsv(tmp_path / "kernel.csv", kernel.COLUMNS)
    k.append([kernel_row("aaa1111", "triton_v4", 64, 93.0), kernel_row("aaa1111", "triton_v4", 66, 93.0),
              kernel_row("aaa1111", "triton_v4", 96, 93.0),
              kernel_row("bbb2222-dirty", "triton_v4", 64, 90.5, date="2026-01-02T00:00Z"),  # 2.5 below: flagged
              kernel_row("bbb2222-dirty", "triton_v4", 66, 80.0, date="2026-01-02T00:00Z"),  # no public model's D
              kernel_row("bbb2222-dirty", "triton_v4", 96, 91.5, date="2026-01-02T00:00Z"),  # within 2 points
              kernel_row("bbb2222-dirty", "liger", 64, 89.0, date="2026-01-02T00:00Z"),
              kernel_row("bbb2222-dirty", "liger", 66, 85.0, date="2026-01-02T00:00Z")])  # triton_v4 below it
    s = harness.ResultsCsv(tmp_path / "step.csv", step.COLUMNS)
    s.append([step_row("aaa1111", "torch", None, None, None), step_row("aaa1111", "triton_v4", -0.5, -0.8, -0.2),
              step_row("bbb2222-dirty", "triton_v4", 1.5, 0.9, 2.1)])
    return tmp_path


def test_compare_flags_slower_public_head_sizes_and_below_liger(results, capsys):
    assert compare.main(["--base", "aaa1111", "--kernel-csv", str(results / "kernel.csv"),
                         "--step-csv", str(results / "step.csv")]) == 0
    out = capsys.readouterr().out
    slower = [ln for ln in out.splitlines() if ln.endswith("SLOWER")]
    assert len(slower) == 2 and "   64 " in slower[0] and slower[1].startswith("seed004")  # the step: CIs apart
    assert "3 rows in both; 1 more than 2 points slower" in out
    assert "D=66 full forward 16 heads: triton_v4 80.00 < liger 85.00  BELOW LIGER" in out and "D=64" not in out.split(
        "against Liger-Kernel")[1]


def test_compare_pairs_the_base_row_of_the_heads_run_and_picks_the_newest_commit_by_history(tmp_path, capsys,
                                                                                               monkeypatch):
    """The base timed with the head in one run, then again alone a day later (a later run on another machine):
    each commit's newest row compared rows of two runs; the base's row nearest the head's is taken, and rows timed
    more than an hour apart get a note. Without --head, the newest commit in the history with rows, not the commit
    timed last (a later run can time an older commit again), and a head older than the base is said."""
    k = harness.ResultsCsv(tmp_path / "kernel.csv", kernel.COLUMNS)
    k.append([kernel_row("aaa1111", "triton_v4", 64, 91.0, date="2026-01-01T10:00Z"),  # one run: base, then head
              kernel_row("bbb2222", "triton_v4", 64, 90.5, date="2026-01-01T10:05Z"),
              kernel_row("bbb2222", "liger", 64, 90.0, date="2026-01-01T10:06Z"),
              kernel_row("aaa1111", "triton_v4", 64, 95.0, date="2026-01-02T09:00Z"),  # the base again, elsewhere
              kernel_row("bbb2222", "liger", 64, 92.0, date="2026-01-02T09:01Z")])
    s = harness.ResultsCsv(tmp_path / "step.csv", step.COLUMNS)
    s.append([step_row("aaa1111", "triton_v4", -0.5, -0.8, -0.2)])
    args = ["--base", "aaa1111", "--kernel-csv", str(tmp_path / "kernel.csv"), "--step-csv", str(tmp_path / "step.csv")]
    monkeypatch.setattr(compare, "commit_ages", lambda: {"aaa1111": 0, "bbb2222": 1})
    assert compare.main([*args, "--head", "bbb2222"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("triton_v4   forward     64"))
    assert row.endswith("   91.0   90.5   -0.5"), row  # the base's row of the head's run, not its later 95.0
    assert "note: " not in out.split("against Liger-Kernel")[0]
    assert "triton_v4 at bbb2222 against Liger-Kernel: 1 rows, 1 below it" not in out  # Liger's 90.0 of that run
    # the head's only row is a day older than the base's newest: compared with that, the note says so
    k.append([kernel_row("bbb2222", "triton_v4", 66, 90.0, date="2026-01-01T10:07Z"),
              kernel_row("aaa1111", "triton_v4", 66, 91.0, date="2026-01-02T09:02Z")])
    assert compare.main([*args, "--head", "bbb2222"]) == 0
    assert "note: 1 of 2 compared rows of aaa1111 and bbb2222 were timed more than an hour apart" in \
        capsys.readouterr().out
    # the default head: bbb2222, the newest in the history, though an older commit (ccc3333) was timed last; a head
    # named older than the base is said
    monkeypatch.setattr(compare, "commit_ages", lambda: {"ccc3333": 0, "aaa1111": 1, "bbb2222": 2})
    k.append([kernel_row("ccc3333", "triton_v4", 64, 89.0, date="2026-01-03T09:00Z")])
    assert compare.main(args) == 0
    assert "aaa1111 -> bbb2222" in capsys.readouterr().out
    assert compare.main(["--base", "bbb2222", *args[2:], "--head", "aaa1111"]) == 0
    assert capsys.readouterr().out.startswith("note: --head aaa1111 is older than --base bbb2222 in this checkout's "
                                              "history")


def test_compare_keeps_grouped_query_rows_apart(results, capsys):
    """A 32/8-heads row (as many q elements as a 16-head one) is compared with the base's 32/8 row, never in place
    of the 16-head row of the same head dim."""
    k = harness.ResultsCsv(results / "kernel.csv", kernel.COLUMNS)
    k.append([{**kernel_row(c, "triton_v4", 64, pct, date="2026-01-03T00:00Z"), "shape": "8x2048x32/8x64"}
              for c, pct in (("aaa1111", 80.0), ("bbb2222-dirty", 88.0))])
    assert compare.main(["--base", "aaa1111", "--kernel-csv", str(results / "kernel.csv"),
                         "--step-csv", str(results / "step.csv")]) == 0
    out = capsys.readouterr().out
    rows = [ln.removesuffix("  SLOWER").split()[-4:] for ln in out.splitlines()
            if ln.startswith("triton_v4") and "   64 " in ln]
    assert sorted(rows) == [["16", "93.0", "90.5", "-2.5"], ["32/8", "80.0", "88.0", "+8.0"]]
    assert "4 rows in both; 1 more than 2 points slower" in out


def test_compare_lists_tuned_rows_apart(results, capsys):
    """Rows timed under --tuning (a launch candidate) are listed beside the base's, the default plan's and Liger's,
    and stay out of the two-commit comparison."""
    k = harness.ResultsCsv(results / "kernel.csv", kernel.COLUMNS)
    k.append([{**kernel_row("bbb2222-dirty", "triton_v4", 66, 88.0, date="2026-01-03T00:00Z"),
               "tuning": "tiling=chunks"}])
    assert compare.main(["--base", "aaa1111", "--kernel-csv", str(results / "kernel.csv"),
                         "--step-csv", str(results / "step.csv")]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "tiling=chunks" in ln)
    assert line.split()[-4:] == ["93.0", "80.0", "85.0", "88.0"]  # base, head default, liger, candidate
    assert "3 rows in both" in out


def test_tables_rewrite_only_the_marked_part(results, tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nprose\n\n{tables.BEGIN}\nold\n{tables.END}\n\nmore prose\n")
    assert tables.main(["--results", str(results), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nprose\n\n") and text.endswith(f"{tables.END}\n\nmore prose\n")
    assert "old" not in text and "### GPU X, 32M elements per tensor" in text
    assert "| 64 | full | 90.5 / - | 89.0 / - |" in text  # the newest row of each configuration
    assert "| triton_v4 | full | 3 | 80.0 | 90.5 | 91.5 | 66 |" in text
    assert "| seed004 | B24xT512 vocab 100277 | compile | triton_v4 | 15.00 | +1.5% [+0.9, +2.1] |" in text
    doc.write_text("no markers\n")
    with pytest.raises(SystemExit):
        tables.main(["--results", str(results), "--doc", str(doc)])


def test_tables_show_the_newest_decoding_point_of_each_configuration(tmp_path):
    def point(date: str, mode: str, attention: str, rate: float | None, note: str = "") -> dict:
        return {"date": date, "gpu": "GPU X", "commit": "ccc3333", "torch": "2.11", "triton": "3.6", "model": "small",
                "implementation": "triton_v4", "batch": 1, "prompt_len": 128, "new_tokens": 128, "mode": mode,
                "attention": attention, "first_token_ms": 20.0 if rate else None, "decode_tok_s": rate,
                "step_ms": 1e3 / rate if rate else None, "captured": mode == "captured", "note": note}

    csv_file = harness.ResultsCsv(tmp_path / "generate.csv", generate.HEADER)
    csv_file.append([{"date": "2026-01-01T00:00Z", "gpu": "GPU X", "commit": "old0000", "model": "small",
                      "implementation": "torch", "batch": 1, "shape": "prompt 128 + 128", "time_us": 9000.0,
                      "tok_s_cache": 111.0},  # the earlier benchmark's row: stays in the CSV, not in the tables
                     point("2026-01-02T00:00Z", "captured", "sdpa", 1000.0),
                     point("2026-01-03T00:00Z", "captured", "sdpa", 2000.0),  # newer: it replaces the one above
                     point("2026-01-03T00:00Z", "eager", "fused_rope", None, "out of memory")])
    text = tables.render(tmp_path)
    assert "| small | triton_v4 | captured | sdpa | 1 | 128 | 128 | 20.0 | 2,000 | 0.500 |  |" in text
    assert "| small | triton_v4 | eager | fused_rope | 1 | 128 | 128 |  |  |  | out of memory |" in text
    assert "1,000" not in text and "old0000" not in text and "| torch |" not in text


def test_prepare_archives_the_base_commits_rope_with_both_names(tmp_path):
    repo = tmp_path / "repo"
    (repo / "rope").mkdir(parents=True)
    (repo / "bench").mkdir()
    shutil.copy(ROOT / "bench" / "compare_commits.sh", repo / "bench")

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    (repo / "rope" / "__init__.py").write_text("OLD = 1\n")
    git("add", ".")
    git("commit", "-qm", "old")
    base = git("rev-parse", "--short", "HEAD")
    (repo / "rope" / "__init__.py").write_text("NEW = 1\n")
    git("commit", "-qam", "new")
    head = git("rev-parse", "--short", "HEAD")
    (repo / "rope" / "__init__.py").write_text("NEWER = 1\n")
    subprocess.run(["bash", "bench/compare_commits.sh", "prepare", base], cwd=repo, check=True, capture_output=True)
    assert (repo / ".baseline" / "rope" / "__init__.py").read_text() == "OLD = 1\n"
    assert (repo / ".baseline" / ".commit").read_text().strip() == base
    assert (repo / ".baseline" / "head.commit").read_text().strip() == f"{head}-dirty"
    proc = subprocess.run(["bash", "bench/compare_commits.sh", "sideways"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr and "run [all|kernel|step]" in proc.stderr
    proc = subprocess.run(["bash", "bench/compare_commits.sh", "--help"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("usage") and not proc.stderr
    proc = subprocess.run(["bash", "bench/compare_commits.sh", "prepare", "zzzzzzz"], cwd=repo, capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "'zzzzzzz' is no commit" in proc.stderr and proc.stderr.count("\n") == 1
    assert (repo / ".baseline" / ".commit").read_text().strip() == base  # the prepared folder kept
    # run without a GPU (a python whose torch finds none; never a real run, here or on a GPU machine): one line,
    # before anything starts
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "bin" / "python").chmod(0o755)
    proc = subprocess.run(["bash", "bench/compare_commits.sh", "run"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}, timeout=30)
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (repo / "outputs").exists()
    # with a GPU (a python that says so), an $OUT that is no folder is said before anything starts: the run died
    # at its first copy into it, after the first part's timing, and skipped every other part
    (tmp_path / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")
    missing = tmp_path / "no-such-folder"
    proc = subprocess.run(["bash", "bench/compare_commits.sh", "run"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "OUT": str(missing)},
                          timeout=30)
    assert proc.returncode == 2 and proc.stderr == (f"compare_commits.sh run: $OUT={missing} is not a folder this "
                                                    "user can write (the rows and logs go there)\n"), proc.stderr
    assert not (repo / "outputs").exists() and not missing.exists()


def test_tables_prefer_the_newest_commit_over_a_later_timed_older_one(results, monkeypatch):
    """A two-commit run times the older commit last: its rows are newer by date, yet the tables show the current
    code's (the commit later in the history); without a history the dates decide."""
    k = harness.ResultsCsv(results / "kernel.csv", kernel.COLUMNS)
    k.append([kernel_row("aaa1111", "triton_v4", 64, 95.0, date="2026-01-03T00:00Z")])  # the base, timed last
    monkeypatch.setattr(tables, "commit_ages", lambda: {"aaa1111": 0, "bbb2222": 1})
    assert "| 64 | full | 90.5 / - | 89.0 / - |" in tables.render(results)
    monkeypatch.setattr(tables, "commit_ages", lambda: {})
    assert "| 64 | full | 95.0 / - | 89.0 / - |" in tables.render(results)


def test_tables_show_the_fused_attention_beside_the_separate_path(tmp_path, monkeypatch):
    """One line per shape: both paths eager and captured with the fused call's speed-up; the newest commit's rows;
    candidate launch settings (``fused[...]``) left out; the roof only where its run timed a launch."""
    from bench import attention

    monkeypatch.setattr(tables, "commit_ages", lambda: {"aaa1111": 0, "bbb2222": 1})
    csv = harness.ResultsCsv(tmp_path / "attention.csv", attention.COLUMNS)

    def row(commit, impl, mode, us, speedup="", floor="", cached=4096):
        return {"date": "2026-01-02T00:00Z", "gpu": "NVIDIA H200", "commit": commit, "torch": "2.11", "triton": "3.6",
                "shape": f"D64 H32/8 B1 cached{cached} +1", "implementation": impl, "mode": mode, "time_us": us,
                "pct_copy_bw": 40.0, "speedup": speedup, "head_dim": 64, "heads": "32/8", "batch": 1,
                "cached": cached, "queries": 1, "dtype": "bfloat16", "bound": "latency", "roof_speedup": 2.5,
                "launch_floor_us": floor}

    csv.append([row("bbb2222", "separate", "eager", 70.0), row("bbb2222", "fused", "eager", 35.0, 2.0),
                row("bbb2222", "separate", "captured", 20.0), row("bbb2222", "fused", "captured", 16.0, 1.25, 4.1),
                row("aaa1111", "fused", "captured", 99.0, 0.2, 4.1),  # an older commit, timed later
                row("bbb2222", "fused[splits=16]", "captured", 15.0, 1.33, 4.1),
                row("bbb2222", "separate", "captured", 30.0, cached=16384),
                row("bbb2222", "fused", "captured", 25.0, 1.2, cached=16384)])  # a run before the launch floor
    text = "\n".join(tables.attention_section(harness.read_rows(tmp_path / "attention.csv")))
    assert "| 64 | 32/8 | 1 | 4096 | +1 | bfloat16 | 70.0 | 35.0 | 2.00 | 20.0 | 16.0 | 1.25 | 40 | latency | 2.50 |" \
        in text
    assert "| 64 | 32/8 | 1 | 16384 | +1 | bfloat16 |  |  |  | 30.0 | 25.0 | 1.20 | 40 | latency |  |" in text
    assert "99.0" not in text and "15.0" not in text


def test_tables_keep_grouped_query_rows_apart(results):
    """Rows of 32/8 heads (``bench.kernel --heads 32/8``) get their own table: they neither replace nor hide the
    16-head rows of the same head dim."""
    gqa = {**kernel_row("ccc3333", "triton_v4", 64, 70.0, date="2026-01-04T00:00Z"), "shape": "8x2048x32/8x64"}
    harness.ResultsCsv(results / "kernel.csv", kernel.COLUMNS).append([gqa])
    text = tables.render(results)
    assert "| 64 | full | 90.5 / - | 89.0 / - |" in text
    section = text.split("elements per tensor, 32/8 heads")[1]
    assert "| 64 | full | 70.0 / - |" in section


def test_tables_leave_smoke_rows_out(results):
    """A --smoke row appended to the results (the CPU, tiny shapes) is no measurement: no table shows it."""
    harness.ResultsCsv(results / "kernel.csv", kernel.COLUMNS).append(
        [kernel_row("ccc3333", "triton_v4", 16, 0.1, date="2026-01-09T00:00Z", gpu="cpu (smoke)")])
    text = tables.render(results)
    assert "### GPU X" in text and "cpu (smoke)" not in text and "ccc3333" not in text


def test_tables_leave_wrong_kernels_out(results):
    """A row whose outputs were far from the reference's (the log's WRONG) is no speed of that kernel: the tables
    show the configuration's last right row."""
    wrong = {**kernel_row("ccc3333", "triton_v4", 96, 99.0, date="2026-01-09T00:00Z"), "max_err": "inf"}
    far = {**kernel_row("ccc3333", "liger", 64, 99.0, date="2026-01-09T00:00Z"), "max_err": 2 * kernel.MAX_ERR}
    harness.ResultsCsv(results / "kernel.csv", kernel.COLUMNS).append([wrong, far])
    text = tables.render(results)
    assert "99.0" not in text and "ccc3333" not in text
    assert "| 96 | full | 91.5 / - |" in text


def test_tables_say_when_no_history_orders_the_commits(results, capsys, monkeypatch):
    """On a copy of the checkout without git (a GPU machine's), the rows are chosen by date alone, and the page
    differs by it: said on stderr, not silently."""
    monkeypatch.setattr(tables, "commit_ages", lambda: {})
    assert tables.main(["--results", str(results), "--print"]) == 0
    assert capsys.readouterr().err.startswith("bench.tables: no git history here: each configuration's row is its "
                                              "newest by date")
    monkeypatch.setattr(tables, "commit_ages", lambda: {"aaa1111": 0, "bbb2222": 1})
    assert tables.main(["--results", str(results), "--print"]) == 0
    assert capsys.readouterr().err == ""


def test_tables_refuse_a_results_folder_without_csvs(tmp_path, capsys):
    """A mistyped --results must not rewrite the page with no tables at all."""
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"{tables.BEGIN}\nkept\n{tables.END}\n")
    with pytest.raises(SystemExit) as exc:
        tables.main(["--results", str(tmp_path / "typo"), "--doc", str(doc)])
    assert exc.value.code == 2 and "--results" in capsys.readouterr().err
    assert "kept" in doc.read_text()


def damage(results):
    """Beside the results, the files a crash or an edit leaves: an empty one, a last row cut short, a word where a
    number goes."""
    (results / "empty.csv").write_text("")
    (results / "cut.csv").write_text((results / "kernel.csv").read_text()[:-60])
    lines = (results / "step.csv").read_text().splitlines(keepends=True)
    (results / "word.csv").write_text("".join([*lines[:-1], lines[-1].replace(",15000,", ",abc,", 1)]))


def damage_results(results, how: str) -> None:
    kernel_csv, step_csv = results / "kernel.csv", results / "step.csv"
    if how == "missing":  # a column gone (an edit, another tool's file)
        rows = list(csv.reader(kernel_csv.open(newline="")))
        at = rows[0].index("pct_copy_bw")
        with kernel_csv.open("w", newline="") as f:
            csv.writer(f).writerows([r[:at] + r[at + 1:] for r in rows])
    elif how == "cut":  # the last row cut short by a crash
        kernel_csv.write_text(kernel_csv.read_text()[:-60])
    elif how == "word":
        lines = step_csv.read_text().splitlines(keepends=True)
        step_csv.write_text("".join([*lines[:-1], lines[-1].replace(",15000,", ",abc,", 1)]))
    elif how in ("head_dim", "rounds", "nan", "shape"):  # a cell of another form (an edit): a traceback, or a "nan"
        column, value = {"head_dim": ("head_dim", "80.0"), "rounds": ("rounds", "8.5"), "nan": ("pct_copy_bw", "nan"),
                         "shape": ("shape", "foo")}[how]
        path = step_csv if column == "rounds" else kernel_csv
        rows = list(csv.DictReader(path.open(newline="")))
        rows[-1][column] = value
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif how == "empty":
        step_csv.write_text("")
    elif how == "smoke":  # --smoke rows alone: none a table shows
        kernel_csv.unlink()
        harness.ResultsCsv(kernel_csv, kernel.COLUMNS).append([kernel_row("ccc3333", "torch", 16, 1.0,
                                                                          gpu=harness.SMOKE_GPU)])
    elif how == "absent":
        step_csv.unlink()


@pytest.mark.parametrize("how,message", [
    ("missing", "kernel.csv: no column pct_copy_bw: not the columns bench.kernel writes"),
    ("cut", "kernel.csv, line 9: "),
    ("word", "step.csv, line 4: time_us is 'abc'"),
    ("head_dim", "kernel.csv, line 9: head_dim is '80.0', not a whole number"),
    ("rounds", "step.csv, line 4: rounds is '8.5', not a whole number"),
    ("nan", "kernel.csv, line 9: pct_copy_bw is 'nan', not a finite number"),
    ("shape", "kernel.csv, line 9: shape is 'foo', not of the form this benchmark writes"),
    ("empty", "step.csv: no row measured on a GPU (no rows)"),
    ("smoke", "kernel.csv: no row measured on a GPU (1 --smoke row(s)"),
    ("absent", "no step.csv there, yet"),
])
def test_tables_refuse_rows_they_would_drop_or_misread(results, capsys, how, message):
    """A CSV the tables cannot read whole, or that would leave a section of the page out, is one line and exit 2,
    the page untouched: not a traceback, nor a page without that section."""
    doc = results / "benchmarks.md"
    page = f"{tables.BEGIN}\n## Training steps (`python -m bench.step`)\nkept\n{tables.END}\n"
    doc.write_text(page)
    damage_results(results, how)
    with pytest.raises(SystemExit) as exc:
        tables.main(["--results", str(results), "--doc", str(doc)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and err.count("\n") == 1, err
    assert doc.read_text() == page


@pytest.mark.parametrize("doc,message", [("nosuch.md", "--doc {}: no such file"), (".", "--doc {}: a folder"),
                                         ("kernel.csv", "--doc {}: has no <!-- bench.tables: begin -->")])
def test_tables_say_what_is_wrong_with_the_doc(results, capsys, doc, message):
    with pytest.raises(SystemExit) as exc:
        tables.main(["--results", str(results), "--doc", str(results / doc)])
    assert exc.value.code == 2 and message.format(results / doc) in capsys.readouterr().err


def test_tables_name_the_folder_they_read(results):
    assert f"from {results}/*.csv: edit those" in tables.render(results)
    assert tables.shown(harness.RESULTS) == "bench/results"


@pytest.mark.parametrize("extra,message", [
    (["--head", "zzz9999"], "--head zzz9999: GPU X has no rows of that commit"),
    (["--kernel-csv", "step.csv"], "--kernel-csv"),  # another benchmark's file: not a KeyError
    (["--kernel-csv", "absent.csv"], "no such file"),
    (["--kernel-csv", "DIR"], "a folder"),
    (["--kernel-csv", "empty.csv"], "empty.csv: an empty file"),  # not "0 rows in both", a head from step.csv
    (["--kernel-csv", "cut.csv"], "cut.csv, line 10: "),  # not left out, an older row standing in
    (["--step-csv", "word.csv"], "word.csv, line 4: time_us is 'abc'"),
    (["--base", ""], "--base takes a commit"),
    (["--base", "aa"], "--base aa is the start of 2 commits of GPU X: aaa1111, aab3333"),  # not both as one base
    (["--head", "aaa"], "--head aaa is --base's commit aaa1111"),
    (["--points", "-5"], "--points takes"),
])
def test_compare_refuses_what_it_cannot_compare(results, capsys, extra, message):
    harness.ResultsCsv(results / "kernel.csv", kernel.COLUMNS).append([kernel_row("aab3333", "liger", 96, 90.0)])
    damage(results)
    argv = ["--base", "aaa1111", "--kernel-csv", str(results / "kernel.csv"), "--step-csv", str(results / "step.csv")]
    argv += [str(results / x) if x.endswith(".csv") else str(results) if x == "DIR" else x for x in extra]
    with pytest.raises(SystemExit) as exc:
        compare.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and err.count("\n") == 1, err


def test_compare_says_when_no_step_is_in_both(results, capsys):
    """Without the two commits' steps the steps' part is one line saying so, not a heading with nothing under it."""
    (results / "step.csv").write_text((results / "step.csv").read_text().splitlines(keepends=True)[0])
    assert compare.main(["--base", "aaa1111", "--kernel-csv", str(results / "kernel.csv"),
                         "--step-csv", str(results / "step.csv")]) == 0
    out = capsys.readouterr().out
    assert "training steps on GPU X: no triton_v4 step of both aaa1111 and bbb2222" in out and "95% CI" not in out


def test_summary_without_prepare_says_so_in_one_line(tmp_path):
    (tmp_path / "bench").mkdir()
    shutil.copy(ROOT / "bench" / "compare_commits.sh", tmp_path / "bench")
    proc = subprocess.run(["bash", "bench/compare_commits.sh", "summary"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2 and "prepare" in proc.stderr and proc.stderr.count("\n") == 1
