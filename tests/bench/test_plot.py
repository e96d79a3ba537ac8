"""bench --plot and --from-json (fastdeconv.bench.plot): the picture from a saved run and from a tiny real
one, the usage errors (exit 2, before anything is timed), matplotlib missing, and the extras."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest

from fastdeconv.__main__ import main
from fastdeconv.bench import plot as bench_plot
from fastdeconv.bench import suites as bench

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    """(width, height) of a PNG file, checking its signature and IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, data[:16]
    assert data[12:16] == b"IHDR"
    assert data.rstrip(b"\0")[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


def _row(name, plan, torch=None, ort=None, op="deconv"):
    row = {"case": name, "gflop": 0.1, "mbytes": 1.0, "description": f"{op} NHWC (1, 8, 8, 8) -> C_out 8, k4 s2 p1",
           "max_rel_err": 1e-7, "fastdeconv_s": plan * 1.1, "plan_max_rel_err": 1e-7, "plan_s": plan,
           "algorithm": "phase"}
    if torch is not None:
        row.update(torch_cl_s=torch, torch_cl_max_rel_err=1e-7)
    if ort is not None:
        row.update(ort_s=ort, ort_max_rel_err=1e-7)
    return row


def _saved_run(tmp_path, rows=None, **extra):
    """A small result as `bench --json` writes it: three transposed cases, two convolutions."""
    rows = rows or [_row("dcgan1", 1e-3, 2e-3, 3e-3), _row("unet1", 2e-3, 1e-3, 8e-3),
                    _row("seed_group", 1e-5, 9e-5, None), _row("unet_enc1", 1e-3, 1.5e-3, 1.2e-3, op="conv"),
                    _row("pointwise", 1e-3, 0.5e-3, 40e-3, op="conv")]
    result = {"fastdeconv": "0.1.0", "threads": 16, "seconds_per_cell": 0.05, "sgemm_peak_gflops": 1000.0,
              "machine": {"cpu": "Test CPU 9000", "logical_cpus": 16, "system": "Linux", "arch": "x86_64"},
              "peers": {"torch": {"version": "torch x", "ran": [], "skipped": None, "failed": {}},
                        "onnxruntime": {"version": "ort x", "ran": [], "skipped": None, "failed": {}}},
              "cases": [{"name": r["case"], "op": r["description"].split()[0]} for r in rows], "rows": rows,
              "summary": [], **extra}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(result))
    return path, result


# ----------------------------------------------------------------------------------- without matplotlib

def test_ratios_and_panels_follow_the_tables():
    rows = [_row("a", 1e-3, 2e-3, 0.5e-3), _row("b", 1e-3, None, None, op="conv"), _row("c", 2e-3, 1e-3, None)]
    result = {"cases": [{"name": "a", "op": "deconv"}, {"name": "b", "op": "conv"}], "rows": rows}
    assert bench_plot.ratios(rows[0]) == {"torch": pytest.approx(2.0), "onnxruntime": pytest.approx(0.5)}
    assert bench_plot.ratios(rows[1]) == {}
    panels = bench_plot.panels(result)
    # "c" is not in "cases": its description's first word (deconv) places it
    assert [(title.split(" (")[0], [r["case"] for r in rows]) for title, rows in panels] == [
        ("transposed convolution", ["a", "c"]), ("convolution", ["b"])]


def test_title_names_threads_and_machine():
    result = {"fastdeconv": "0.1.0", "threads": 1,
              "machine": {"cpu": "Intel(R) Xeon(R) X", "logical_cpus": 32, "system": "Linux", "arch": "x86_64"}}
    title = bench_plot.title_text(result)
    assert "fastdeconv 0.1.0" in title and "1 thread," in title and "Intel(R) Xeon(R) X" in title
    assert "32 logical CPUs" in title
    assert "16-core Xeon" in bench_plot.title_text({"threads": 16}, machine="16-core Xeon")
    assert "16 threads" in bench_plot.title_text({"threads": 16})


@pytest.mark.parametrize("text, words", [
    ("[1, 2]", ["is not a bench result"]),
    ('{"rows": []}', ["holds no cases"]),
    ("{not json", ["is not JSON"]),
])
def test_load_result_refuses_what_is_not_a_run(tmp_path, text, words):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError) as error:
        bench_plot.load_result(str(path))
    for word in words:
        assert word in str(error.value)


def test_matplotlib_is_imported_only_for_a_plot(tmp_path):
    # (threadpoolctl hidden: no 2048² sgemm peak, which takes seconds on a loaded machine)
    code = ("import sys, contextlib, io; sys.modules['threadpoolctl'] = None; from fastdeconv.__main__ import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['bench', '--list', '--suite', 'field']) == 0\n"
            "    assert main(['bench', '--cases', 'seed_group', '--seconds', '0.01', '--no-peers']) == 0\n"
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported without --plot'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr


def test_matplotlib_missing_is_a_usage_error_before_any_timing(tmp_path):
    """With matplotlib unimportable (None in sys.modules), --plot exits 2 at once: one line naming the plot
    extra, and no progress line (nothing was timed)."""
    code = ("import sys; sys.modules['matplotlib'] = None; from fastdeconv.__main__ import main; "
            f"sys.exit(main(sys.argv[1:], prog='python -m fastdeconv'))")
    result = subprocess.run([sys.executable, "-c", code, "bench", "--cases", "seed_group", "--seconds", "0.01",
                             "--plot", "out.png"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    err = result.stderr
    assert err.startswith("python -m fastdeconv bench: error: argument --plot: matplotlib is not installed"), err
    assert 'pip install -e ".[plot]"' in err and "pip install matplotlib" in err and "'out.png'" in err
    assert "bench: [" not in err and "sgemm" not in err and "Traceback" not in err
    assert not (tmp_path / "out.png").exists()


def test_matplotlib_broken_says_so(tmp_path):
    stubs = tmp_path / "stubs" / "matplotlib"
    stubs.mkdir(parents=True)
    (stubs / "__init__.py").write_text("raise RuntimeError('stub: a broken matplotlib')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(stubs.parent), os.environ.get("PYTHONPATH"))
                                                      if p))
    saved, _ = _saved_run(tmp_path)
    result = subprocess.run([sys.executable, "-m", "fastdeconv", "bench", "--from-json", str(saved), "--plot",
                             "out.png"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert result.returncode == 2
    assert "matplotlib cannot be imported (RuntimeError: stub: a broken matplotlib)" in result.stderr
    assert ".[plot]" in result.stderr


@pytest.mark.parametrize("args, words", [
    (["--from-json", "{saved}"], ["--from-json", "needs --plot"]),
    (["--from-json", "{tmp}/missing.json", "--plot", "{tmp}/x.png"], ["--from-json", "missing.json"]),
    (["--plot-order", "suite"], ["--plot-order", "--plot FILE.png"]),
    (["--plot-machine", "box"], ["--plot-machine"]),
])
def test_plot_usage_errors_without_matplotlib(args, words, tmp_path, capsys):
    """The errors that need no matplotlib (--plot comes after them or not at all)."""
    saved, _ = _saved_run(tmp_path)
    args = [a.format(saved=saved, tmp=tmp_path) for a in args]
    try:
        code = main(["bench", *args])
    except SystemExit as exit_info:
        code = exit_info.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fastdeconv bench: error:"), err
    for word in words:
        assert word in err, err


def test_all_extra_is_the_union_of_the_user_extras():
    """pyproject.toml's `all` lists the packages of dask, convert, bench, plot and metal (not test or docs)."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        lines = requires("fastdeconv") or []
    except PackageNotFoundError:
        pytest.skip("fastdeconv is not installed (metadata)")
    extras = {}
    for line in lines:
        if "extra ==" not in line:
            continue
        requirement, marker = line.split(";", 1)
        extra = marker.split("extra ==")[1].strip().strip("'\"").split("'")[0].split('"')[0]
        other = marker.split("extra ==")[0].strip()   # the rest of the marker: 'sys_platform == "darwin" and'
        other = other[:-len("and")].strip() if other.endswith(" and") else other
        extras.setdefault(extra, set()).add((requirement.strip().replace(" ", ""), other.replace(" ", "")))
    if "all" not in extras:
        pytest.skip("the installed fastdeconv predates the all extra")
    union = set().union(*(extras[name] for name in ("dask", "convert", "bench", "plot", "metal")))
    assert extras["all"] == union
    assert extras["plot"] == {("matplotlib>=3.5", "")}
    assert not extras["all"] & (extras["test"] - union) and not extras["all"] & extras["docs"]


# -------------------------------------------------------------------------------------- with matplotlib

@pytest.fixture
def plt():
    return pytest.importorskip("matplotlib.pyplot")


def test_plot_from_a_saved_json(tmp_path, plt, capsys):
    saved, _ = _saved_run(tmp_path)
    out = tmp_path / "ratios.png"
    assert main(["bench", "--from-json", str(saved), "--plot", str(out)]) == 0
    width, height = _png_size(out)
    assert 600 <= width <= 4000 and 300 <= height <= 4000, (width, height)
    assert 5_000 < out.stat().st_size < 400_000
    captured = capsys.readouterr()
    assert captured.out == "" and f"bench: wrote the plot {out}" in captured.err
    # the suite's order, an SVG, and the machine named: the title's text is in the SVG
    svg = tmp_path / "ratios.svg"
    assert main(["bench", "--from-json", str(saved), "--plot", str(svg), "--plot-order", "suite",
                 "--plot-machine", "a 16-core test box"]) == 0
    text = svg.read_text()   # matplotlib writes each text of an SVG as a comment beside its glyphs
    assert "<!-- fastdeconv 0.1.0 against its peers: 16 threads, a 16-core test box -->" in text
    labels = [line.strip()[5:-4] for line in text.splitlines() if line.strip().startswith("<!-- ")]
    names = [label for label in labels if label in ("dcgan1", "unet1", "seed_group", "unet_enc1", "pointwise")]
    assert names == ["dcgan1", "unet1", "seed_group", "unet_enc1", "pointwise"]   # the suite's order
    # the default order: per panel by the ratio to the faster peer, the worst first
    assert main(["bench", "--from-json", str(saved), "--plot", str(svg)]) == 0
    labels = [line.strip()[5:-4] for line in svg.read_text().splitlines() if line.strip().startswith("<!-- ")]
    assert [label for label in labels if label in names] == ["unet1", "dcgan1", "seed_group", "pointwise", "unet_enc1"]
    assert "geometric mean: × torch 0.87, × onnxruntime 6.93" in labels   # the conv panel: √(1.5·0.5), √(1.2·40)


def test_plot_of_a_field_sized_run_stays_readable_and_small(tmp_path, plt):
    """164 cases, as the field suite has: a tall figure, rows far enough apart, a file under 400 KB."""
    rows = [_row(f"case{i:03d}", 1e-3, 1e-3 * (0.5 + i / 40), 1e-3 * (2 - i / 200), op="deconv" if i % 2 else "conv")
            for i in range(164)]
    saved, result = _saved_run(tmp_path, rows)
    out = tmp_path / "field.png"
    bench_plot.plot_result(result, str(out))
    width, height = _png_size(out)
    assert height >= 82 * 12, height     # at least 12 pixels per case row
    assert out.stat().st_size < 400_000


def test_a_run_without_any_peer_says_so_before_timing(tmp_path, plt, capsys, monkeypatch):
    def missing():
        raise ModuleNotFoundError("stub: not installed", name="torch")

    monkeypatch.setattr(bench, "PEERS", [bench.PeerSpec("torch_cl", "torch", "torch ms", missing, None)])
    monkeypatch.setattr(bench, "_blas_unavailable", lambda: "stub: no BLAS threads (no 2048² sgemm runs)")
    out = tmp_path / "none.png"
    assert main(["bench", "--cases", "seed_group", "--seconds", "0.01", "--plot", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    note = err.index("bench: no peer can run here, so the plot will show no ratios (install torch or onnxruntime "
                     "and onnx)")
    assert note < err.index("bench: [1/1] seed_group")
    assert "bench: no peer ran (torch skipped (torch is not installed)), so " in err[-2]
    _png_size(out)


def test_plot_without_any_peer_writes_a_note(tmp_path, plt, capsys):
    rows = [_row("seed_group", 1e-5)]
    saved, result = _saved_run(tmp_path, rows)
    result["peers"] = {"torch": {"ran": [], "skipped": "torch is not installed"}}
    saved.write_text(json.dumps(result))
    out = tmp_path / "none.png"
    assert main(["bench", "--from-json", str(saved), "--plot", str(out)]) == 0
    _png_size(out)
    assert "no peer ran (torch skipped (torch is not installed))" in capsys.readouterr().err


@pytest.fixture
def stub_peer(monkeypatch):
    """One peer that always loads: fastdeconv's own function under another name (the real peers, torch and
    onnxruntime, are optional)."""
    def load():
        return None, "stub peer 1.0"

    def runner(modules, case, x, w, b, threads):
        function = case.functions()[0]

        def run():
            return function(x, w, b, **case.kwargs)
        return run, run

    monkeypatch.setattr(bench, "PEERS", [bench.PeerSpec("torch_cl", "torch", "torch ms", load, runner)])
    monkeypatch.setattr(bench, "_blas_unavailable", lambda: "stub: no BLAS threads (no 2048² sgemm runs)")


def test_plot_after_a_tiny_real_run(tmp_path, plt, stub_peer, capsys):
    out = tmp_path / "run.png"
    saved = tmp_path / "run.json"
    assert main(["bench", "--cases", "seed_group,unet_tiny", "--seconds", "0.01", "--threads", "1",
                 "--json", str(saved), "--plot", str(out)]) == 0
    captured = capsys.readouterr()
    assert "transposed convolution" in captured.out and f"bench: wrote the plot {out}" in captured.err
    width, height = _png_size(out)
    assert width > 600 and height > 200   # one case per panel: a short picture
    data = json.loads(saved.read_text())
    assert data["machine"]["logical_cpus"] == os.cpu_count() and "system" in data["machine"]
    assert [t for t, _ in bench_plot.panels(data)] == [title for _, title in bench_plot.TABLES]
    # the saved run draws again, without running
    again = tmp_path / "again.png"
    assert main(["bench", "--from-json", str(saved), "--plot", str(again)]) == 0
    assert _png_size(again) == (width, height)
    assert "bench: [" not in capsys.readouterr().err


def test_a_failing_plot_after_the_run_exits_3_with_the_tables_out(tmp_path, plt, stub_peer, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("stub: disk full")

    monkeypatch.setattr(bench_plot, "plot_result", broken)
    saved = tmp_path / "run.json"
    code = main(["bench", "--cases", "seed_group", "--seconds", "0.01", "--json", str(saved),
                 "--plot", str(tmp_path / "x.png")])
    captured = capsys.readouterr()
    assert code == 3 and "seed_group" in captured.out and saved.exists()
    assert "bench: could not draw the plot: OSError: stub: disk full" in captured.err


@pytest.mark.parametrize("args, words", [
    (["--plot", "{tmp}/no/such/folder/x.png"], ["argument --plot", "no/such/folder/x.png", "does not exist"]),
    (["--plot", "{tmp}/a_file/x.png"], ["argument --plot", "a_file/x.png"]),
    (["--plot", "{tmp}"], ["argument --plot", "image format"]),
    (["--plot", "{tmp}/x.txt"], ["argument --plot", "x.txt", "image format"]),
    (["--plot", "{tmp}/x.png", "--no-peers"], ["--plot", "--no-peers"]),
    (["--plot", "{tmp}/x.png", "--list"], ["--plot", "--list"]),
    (["--plot", "{tmp}/x.png", "--contention"], ["--plot", "--contention"]),
    (["--plot", "{tmp}/x.png", "--from-json", "{saved}", "--threads", "2"], ["--from-json", "--threads"]),
    (["--plot", "{tmp}/x.png", "--from-json", "{saved}", "--suite", "field"], ["--from-json", "--suite"]),
    (["--plot", "{tmp}/x.png", "--plot-order", "best"], ["--plot-order", "best"]),
])
def test_plot_usage_errors_exit_2_before_timing(args, words, tmp_path, plt):
    (tmp_path / "a_file").write_text("not a folder")
    saved, _ = _saved_run(tmp_path)
    args = [a.format(tmp=tmp_path, saved=saved) for a in args]
    run = [] if "--from-json" in args else ["--cases", "seed_group"]   # what would be timed, were it a run
    result = subprocess.run([sys.executable, "-m", "fastdeconv", "bench", *run, *args],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "bench: [" not in result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    assert not (tmp_path / "x.png").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_plot_into_a_read_only_folder_is_a_usage_error(tmp_path, plt, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(["bench", "--plot", str(folder / "x.png")])
    finally:
        folder.chmod(0o755)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --plot" in err and "x.png" in err and "cannot write" in err


def test_plot_into_an_unwritable_folder_is_a_usage_error_even_as_root(tmp_path, plt, capsys, monkeypatch):
    """The same, with the folder's refusal simulated (root may write into any folder): open() in
    fastdeconv.bench.plot raises what a read-only folder makes it raise."""
    def refuse(path, mode="r", *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(bench_plot, "open", refuse, raising=False)
    target = str(tmp_path / "x.png")
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--cases", "seed_group", "--plot", target])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == (f"fastdeconv bench: error: argument --plot: cannot write {target!r}: Permission denied "
                   "(see fastdeconv bench --help)\n")


def test_an_existing_file_is_left_as_it_was_by_the_check(tmp_path, plt):
    path = tmp_path / "keep.png"
    path.write_bytes(b"old")
    bench_plot.check_output_path(str(path))
    assert path.read_bytes() == b"old"
    bench_plot.check_output_path(str(tmp_path / "new.png"))
    assert not (tmp_path / "new.png").exists()


def test_help_describes_plot_and_from_json(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    for word in ("--plot FILE.png", "--from-json RUN.json", "--plot-order", "--plot-machine", ".[plot]",
                 "exit status:", "3 the run finished"):
        assert word in out, word
