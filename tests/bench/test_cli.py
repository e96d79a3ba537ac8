"""The command line: --version, program names, usage errors, the bench with broken peers, and the error
for a source tree without a built extension."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fastdeconv
from fastdeconv.bench import suites as bench
from fastdeconv.__main__ import main

# Small and fast: seed_group is a 5x5 image; at least 5 calls per cell are made whatever --seconds says.
FAST = ["bench", "--cases", "seed_group", "--seconds", "0.01"]


def _run(args, tmp_path, stubs=None, timeout=180):
    """Run the package's command line in a fresh process from tmp_path (the installed fastdeconv, never a
    source tree), with the stub modules in `stubs` ahead of everything else on the import path."""
    env = dict(os.environ)
    if stubs is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(stubs), env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=timeout)


def _console_script():
    folder = Path(sys.executable).parent
    for name in ("fastdeconv", "fastdeconv.exe"):
        if (folder / name).exists():
            return str(folder / name)
    return shutil.which("fastdeconv")


# ------------------------------------------------------------------------------------------- --version

def test_version_in_one_place():
    from importlib.metadata import version

    assert fastdeconv.__version__ == version("fastdeconv")


def test_dash_m_version(tmp_path):
    result = _run(["-m", "fastdeconv", "--version"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"fastdeconv {fastdeconv.__version__}"


def test_console_script_version_and_prog(tmp_path):
    script = _console_script()
    if script is None:
        pytest.skip("the fastdeconv console script is not installed next to this Python")
    result = subprocess.run([script, "--version"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"fastdeconv {fastdeconv.__version__}"
    result = subprocess.run([script, "bench", "--threads", "-1"], capture_output=True, text=True, cwd=tmp_path,
                            timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("fastdeconv bench: error:"), result.stderr


def test_dash_m_prog_name(tmp_path):
    result = _run(["-m", "fastdeconv", "bench", "--seconds", "0"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("python -m fastdeconv bench: error:"), result.stderr


# ------------------------------------------------------------------------------------------ usage errors

@pytest.mark.parametrize("args, words", [
    (["--threads", "-1"], ["--threads", "-1"]),
    (["--threads", "0"], ["--threads", "'0'"]),
    (["--threads", "two"], ["--threads", "two"]),
    (["--threads", "999"], ["--threads", "at most", "'999'"]),
    (["--seconds", "0"], ["--seconds"]),
    (["--seconds", "nan"], ["--seconds"]),
    (["--repeat", "-1"], ["--repeat"]),
    (["--cases", "seed_group,nope"], ["unknown case 'nope'", "dcgan1"]),
    (["--case", "nope"], ["unknown case 'nope'"]),
    (["--format", "yaml"], ["--format"]),
])
def test_bad_bench_arguments_are_one_line_usage_errors(args, words, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fastdeconv bench: error:"), err
    for word in words:
        assert word in err


def test_convert_help_states_the_one_form_the_default_model_outputs_and_exit_codes(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: fastdeconv convert [-h] [--force] [--strict] [--verify-model | --no-verify-model] "
                           "[--input-shape NAME:N,C,H,W ...] [--max-verify-elements N] [--traceback] [MODEL.onnx] "
                           "OUTDIR\n")
    assert "[[MODEL.onnx] OUTDIR ...]" not in text
    assert "default_decoder.onnx" in text and "output" in text.split("positional arguments:")[1]
    for word in ("NAME_weight.dat", "NAME_mpscnn_weight.dat", "manifest.json", "--strict", "--input-shape", "exit codes:",
                 "\n  0  ", "\n  1  ", "\n  2  "):
        assert word in text, word


@pytest.mark.parametrize("args, code, words", [
    ([], 2, ["the following arguments are required: [MODEL.onnx] OUTDIR"]),
    (["--verify-model=yes", "out"], 2, ["--verify-model"]),
    (["a.onnx", "b", "c"], 2, ["takes [MODEL.onnx] OUTDIR (one or two paths), got 3 paths"]),
])
def test_convert_usage_errors(args, code, words, capsys):
    pytest.importorskip("onnx")
    try:
        result = main(["convert", *args])
    except SystemExit as exit_info:
        result = exit_info.code
    assert result == code
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err


def test_list_cases(capsys):
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == [case.name for case in bench.SUITE + bench.CONV_SUITE]
    assert main(["bench", "--list", "--suite", "conv"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[:2] for line in out.splitlines()] == [[case.name, "conv"] for case in bench.CONV_SUITE]


def test_help_explains_every_column(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    for column in ("function ms", "plan ms", "torch ms", "ORT ms", "GFLOP/s", "% peak", "GB/s", "× torch",
                   "max rel err", "--seconds", "--format"):
        assert column in out


# ------------------------------------------------------------------------------ bench: output and peers

@pytest.fixture
def steady_peak(monkeypatch):
    """A fixed sgemm speed: the 2048² peak measurements take seconds on a loaded machine. (BLAS threads
    are taken as settable: the bench then imports threadpoolctl, which the test extra installs.)"""
    pytest.importorskip("threadpoolctl")   # an optional package: the tests that need it skip without it
    monkeypatch.setattr(bench, "_blas_unavailable", lambda: "")
    monkeypatch.setattr(bench, "sgemm_gflops", lambda threads, seconds=0.5, size=2048: 1e6)


def test_bench_in_process_formats(tmp_path, capsys, steady_peak):
    path = tmp_path / "out.json"
    assert main([*FAST, "--no-peers", "--threads", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("case"))
    assert "plan ms" in header and "function ms" in header and "torch ms" not in header
    assert "peers: torch skipped (--no-peers); onnxruntime skipped (--no-peers)" in out
    data = json.loads(path.read_text())
    assert data["threads"] == 1 and [r["case"] for r in data["rows"]] == ["seed_group"]
    assert data["sgemm_measurements_gflops"] == [1e6] * 3 and not data["sgemm_peak_noisy"]
    assert set(data["peers"]) == {"torch", "onnxruntime"}
    assert main([*FAST, "--no-peers", "--format", "markdown"]) == 0
    assert "| case | algorithm |" in capsys.readouterr().out
    assert main([*FAST, "--no-peers", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["case"] == "seed_group"


def test_repeat_is_a_deprecated_alias_of_seconds(capsys, steady_peak):
    assert main(["bench", "--cases", "seed_group", "--repeat", "0.01", "--no-peers", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["seconds_per_cell"] == 0.01
    assert "--repeat is deprecated; use --seconds" in captured.err


def _stub(tmp_path, files):
    stubs = tmp_path / "stubs"
    for name, text in files.items():
        (stubs / name).parent.mkdir(parents=True, exist_ok=True)
        (stubs / name).write_text(textwrap.dedent(text))
    return stubs


# numpy's BLAS threads "cannot be set" in these runs: the % peak column is "-" with a note, and the
# 2048² sgemm peak measurements (seconds on a loaded 2-core machine) are not made.
_NO_THREADPOOLCTL = {"threadpoolctl.py": "raise ImportError('stub: threadpoolctl hidden by the test')\n"}


def test_bench_survives_an_onnxruntime_whose_session_fails(tmp_path):
    stubs = _stub(tmp_path, {**_NO_THREADPOOLCTL, "onnxruntime/__init__.py": """
        __version__ = "0.0.stub"

        class SessionOptions:
            pass

        class InferenceSession:
            def __init__(self, *args, **kwargs):
                raise RuntimeError("stub onnxruntime: no session today")
        """})
    result = _run(["-m", "fastdeconv", *FAST], tmp_path, stubs)
    assert result.returncode == 0, result.stderr
    skipped = [line for line in result.stderr.splitlines() if line.startswith("bench: skipping onnxruntime")]
    assert len(skipped) == 1, result.stderr
    try:
        import onnx  # noqa: F401 - with onnx the stub session is reached, without it the missing onnx is named
        assert "RuntimeError: stub onnxruntime: no session today" in skipped[0]
    except ImportError:
        assert "onnx" in skipped[0].split(":", 1)[1]
    assert "Traceback" not in result.stderr
    header = next(line for line in result.stdout.splitlines() if line.startswith("case"))
    assert "ORT ms" not in header and "plan ms" in header
    assert "onnxruntime" in result.stdout.splitlines()[-1]          # the peers line
    assert "threadpoolctl" in result.stdout                          # the note on "% peak"


def test_bench_survives_an_unimportable_torch(tmp_path):
    stubs = _stub(tmp_path, {**_NO_THREADPOOLCTL,
                             "torch/__init__.py": "raise ImportError('stub torch: broken install')\n"})
    result = _run(["-m", "fastdeconv", *FAST, "--format", "json"], tmp_path, stubs)
    assert result.returncode == 0, result.stderr
    assert "bench: skipping torch: ImportError: stub torch: broken install" in result.stderr.splitlines()
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    assert data["peers"]["torch"] == {"ran": [], "skipped": "ImportError: stub torch: broken install"}
    assert "torch_cl_s" not in data["rows"][0]
    assert data["sgemm_peak_gflops"] is None and "threadpoolctl" in data["note"]


def _stub_torch_peer(monkeypatch, runner, settle_seconds=0.0):
    """Peers whose only peer is a "torch" made by ``runner`` (PeerSpec.runner's signature)."""
    peers = bench.Peers(enabled=False)
    peers.loaded["torch_cl"] = object()
    peers.status["torch"] = {"version": "torch stub", "ran": [], "skipped": None, "failed": {}}
    monkeypatch.setattr(bench, "PEERS", [bench.PeerSpec("torch_cl", "torch", "torch ms", None, runner,
                                                        settle_seconds)])
    return peers


def _zeros_like_result(case):
    return np.zeros((1,) + bench._output_hw(case) + (case.out_channels,), np.float32)


def test_bench_peer_failing_at_run_time_leaves_its_cell_empty(monkeypatch):
    def runner(modules, case, x, w, b, threads):
        def run():
            raise OSError("stub: the peer's library vanished")
        return run, run

    peers = _stub_torch_peer(monkeypatch, runner)
    row = bench.measure_case(bench.CASES["seed_group"], 1, 0.0, peers)
    assert "torch_cl_s" not in row and "plan_s" in row
    assert peers.status["torch"]["failed"] == {"seed_group": "OSError: stub: the peer's library vanished"}
    assert "failed on seed_group" in peers.summary()


def test_bench_peer_failing_while_timed_leaves_its_cell_empty(monkeypatch):
    """A peer whose result checks out but whose timed run raises: the rounds go on without it."""
    def runner(modules, case, x, w, b, threads):
        def run():
            raise OSError("stub: failed on a later call")
        return run, lambda: _zeros_like_result(case)

    peers = _stub_torch_peer(monkeypatch, runner)
    row = bench.measure_case(bench.CASES["seed_group"], 1, 0.0, peers)
    assert "torch_cl_s" not in row and "torch_cl_max_rel_err" in row and row["plan_s"] > 0
    assert peers.status["torch"]["failed"] == {"seed_group": "OSError: stub: failed on a later call"}
    assert peers.status["torch"]["ran"] == []


def test_implementations_take_turns_and_keep_their_best_round(monkeypatch):
    """measure_case times each implementation once per round, in turn, and keeps its least round: a
    slow spell in one round (here the first) does not decide a cell. After a peer whose threads spin
    on when idle (onnxruntime's), its settle_seconds pass before the next implementation is timed."""
    calls = []
    slow_rounds = iter([0.5, 0.5, 0.5, 0.1, 0.1, 0.1])   # fastdeconv, plan, torch per round

    def fake_median(run, seconds, **kwargs):
        calls.append(run.__name__)
        return next(slow_rounds)

    def runner(modules, case, x, w, b, threads):
        def peer_run():
            return None
        return peer_run, lambda: _zeros_like_result(case)

    peers = _stub_torch_peer(monkeypatch, runner, settle_seconds=0.25)
    monkeypatch.setattr(bench, "median_seconds", fake_median)
    monkeypatch.setattr(bench, "ROUNDS", 2)
    monkeypatch.setattr(bench.time, "sleep", lambda seconds: calls.append(f"sleep {seconds}"))
    row = bench.measure_case(bench.CASES["seed_group"], 1, 0.0, peers)
    assert calls == ["<lambda>", "<lambda>", "peer_run", "sleep 0.25"] * 2   # the peer's threads settle
    assert row["fastdeconv_s"] == row["plan_s"] == row["torch_cl_s"] == 0.1
    assert row["rounds"] == 2   # no more: the plan is as fast as the peer and the function
    assert peers.status["torch"]["ran"] == ["seed_group"]


@pytest.mark.parametrize("first_rounds, name", [
    ((0.1, 0.5, 0.3), "a peer looks faster"),
    ((0.1, 0.5, 0.9), "the plan looks slower than the function, which runs it and does more"),
])
def test_a_case_that_looks_lost_gets_more_rounds_and_keeps_its_least(monkeypatch, first_rounds, name):
    """A slow spell that hits the plan's turn in both rounds would report a loss that one more look
    does not find (asv_benches/NOTES.md, 2026-12-07): such a case gets ROUNDS more rounds, every cell
    keeping its least, and a case that holds its loss keeps it."""
    later = (0.1, 0.1, 0.3)   # fastdeconv, plan, torch per round
    medians = iter(first_rounds * 2 + later * 2)

    def runner(modules, case, x, w, b, threads):
        return (lambda: None), lambda: _zeros_like_result(case)

    peers = _stub_torch_peer(monkeypatch, runner)
    monkeypatch.setattr(bench, "median_seconds", lambda run, seconds, **kwargs: next(medians))
    monkeypatch.setattr(bench, "ROUNDS", 2)
    row = bench.measure_case(bench.CASES["seed_group"], 1, 0.0, peers)
    assert (row["plan_s"], row["rounds"]) == (0.1, 4), name
    assert next(medians, None) is None   # every round was taken, and no more

    medians = iter((0.1, 0.5, 0.3) * 4)   # a loss in every round stays a loss
    row = bench.measure_case(bench.CASES["seed_group"], 1, 0.0, peers)
    assert (row["plan_s"], row["torch_cl_s"], row["rounds"]) == (0.5, 0.3, 4)


def test_onnx_model_has_an_ir_version_onnxruntime_reads():
    onnx = pytest.importorskip("onnx")
    case = bench.CASES["seed_group"]
    x, w, b = case.arrays()
    model = bench._onnx_model(onnx, case, w, b)
    assert model.opset_import[0].version == bench.ORT_OPSET
    assert model.ir_version <= 8          # opset 13's IR version (7), not onnx's newest
    onnx.checker.check_model(model)


# -------------------------------------------------------------------------------------------- % peak

def _rows(gflops_per_s):
    return [{"case": f"c{i}", "algorithm": "phase", "gflop": g, "mbytes": 1.0, "fastdeconv_s": 1.0, "plan_s": 1.0,
             "max_rel_err": 0.0} for i, g in enumerate(gflops_per_s)]


def test_peak_flags_noise_and_results_over_100_percent():
    rows = _rows([50, 150])
    peak = bench._finish_peak(bench.Peak(None, [100.0, 70.0, 98.0]), rows, "plan_s")
    assert peak.gflops == 100.0 and peak.noisy
    text = bench.format_table(rows, 2, peak)
    assert "(NOISY)" in text and "noisy:" in text and "over 100 % of the sgemm peak (c1)" in text
    assert " 150! " in text and " 50 " in text
    steady = bench._finish_peak(bench.Peak(None, [100.0, 95.0, 99.0]), _rows([50]), "plan_s")
    assert not steady.noisy and steady.note == ""


def test_over_peak_note_per_table_and_percent_peak_explained_in_the_footer():
    peak = bench._finish_peak(bench.Peak(None, [100.0, 100.0]), _rows([50, 150]), "plan_s")
    fast, slow = bench.format_table(_rows([50, 150]), 2, peak), bench.format_table(_rows([50, 60]), 2, peak)
    assert "over 100 % of the sgemm peak (c1)" in fast and "over 100 %" not in slow
    for text in (fast, slow):
        assert "% peak: GFLOP/s over the sgemm peak above, which is numpy's BLAS float32 matmul measured here" in text


def test_over_peak_note_under_each_table_names_only_its_cases(capsys, monkeypatch, steady_peak):
    monkeypatch.setattr(bench, "sgemm_gflops", lambda threads, seconds=0.5, size=2048: 1e-9)   # all over it
    assert main(["bench", "--cases", "seed_group,unet_tiny", "--seconds", "0.01", "--no-peers"]) == 0
    out = capsys.readouterr().out
    deconv, conv = out.split("convolution: conv2d / Conv2d")
    assert "over 100 % of the sgemm peak (seed_group)" in deconv and "unet_tiny)" not in deconv
    assert "over 100 % of the sgemm peak (unet_tiny)" in conv and "seed_group" not in conv


def test_progress_goes_to_stderr_and_json_stdout_stays_machine_readable(tmp_path):
    result = _run(["-m", "fastdeconv", *FAST, "--cases", "unet_tiny", "--no-peers", "--format", "json"], tmp_path,
                  _stub(tmp_path, _NO_THREADPOOLCTL))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)   # nothing but the JSON on stdout
    assert [row["case"] for row in data["rows"]] == ["seed_group", "unet_tiny"]
    progress = [line for line in result.stderr.splitlines() if line.startswith("bench: [")]
    assert progress == ["bench: [1/2] seed_group", "bench: [2/2] unet_tiny"], result.stderr


@pytest.mark.parametrize("args, words", [
    (["--threads", "999"], ["--threads", "at most"]),
    (["--cases", "nope"], ["unknown case 'nope'"]),
])
def test_usage_errors_exit_2_with_one_line_and_no_traceback(args, words, tmp_path):
    result = _run(["-m", "fastdeconv", "bench", *args], tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr


def test_peak_missing_is_a_dash_with_a_note():
    text = bench.format_table(_rows([50]), 2, bench.Peak(None, [], "threadpoolctl is not installed"))
    line = next(line for line in text.splitlines() if line.startswith("c0"))
    # case, algorithm, function ms, plan ms, fn/plan, GFLOP/s, % peak
    assert line.split()[4:7] == ["1.00", "50", "-"] and "note: threadpoolctl is not installed" in text


def test_sgemm_at_the_requested_threads():
    pytest.importorskip("threadpoolctl")
    if bench._blas_unavailable():
        pytest.skip(bench._blas_unavailable())
    assert bench.sgemm_gflops(1, seconds=0.0, size=128) > 0


# ----------------------------------------------------------------------------- no compiled extension

def test_source_tree_without_the_extension_says_how_to_fix_it(tmp_path):
    """`pip install .` then `python -m fastdeconv` from the repository root imports the fastdeconv/ folder
    there, which has no compiled extension: the error names it, the folder and the fix."""
    package = Path(fastdeconv.__file__).parent
    shutil.copytree(package, tmp_path / "fastdeconv",
                    ignore=shutil.ignore_patterns("_cpu.*.so", "_cpu.*.pyd", "_cpu.so", "_cpu.pyd", "__pycache__"))
    # An editable install maps fastdeconv.* to its own folder even below another fastdeconv/: drop its
    # finder so that this behaves as a plain install does.
    code = ("import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()];"
            " sys.path.insert(0, ''); sys.argv = ['fastdeconv', 'info']; runpy.run_module('fastdeconv', "
            "run_name='__main__', alter_sys=True)")
    result = _run(["-c", code], tmp_path)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: the compiled extension fastdeconv._cpu is missing from "), last
    assert str(tmp_path / "fastdeconv") in last and "pip install -e ." in last
    assert "partially initialized" not in result.stderr


def test_bench_runs_a_convolution_case_beside_a_transposed_one(capsys):
    """One table per operation; conv cases run conv2d / Conv2d and the peers' Conv, checked against
    the reference (exit status 1 if a result were wrong)."""
    assert main(["bench", "--cases", "seed_group,unet_tiny", "--seconds", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "transposed convolution: conv_transpose2d / ConvTranspose2d" in out
    assert "convolution: conv2d / Conv2d" in out
    conv_table = out.split("convolution: conv2d / Conv2d")[1]
    assert "unet_tiny" in conv_table and "seed_group" not in conv_table
