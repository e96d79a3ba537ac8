"""``fastdeconv bench --plot FILE.png``: the speed ratio to each peer per case, drawn with matplotlib.

The picture has one panel per table the bench prints (transposed convolution, convolution). Each case
is a row; each peer that ran on it is a marker at x = peer time / fastdeconv's plan time, on a log axis
with a line at 1: right of it fastdeconv is faster. The title names the fastdeconv version, the thread
count and the machine (when the run recorded it); each panel's title gives the geometric mean per peer.

It draws from the dictionary ``run_bench`` builds, the same one ``--json FILE`` writes, so a saved run
is drawn again without running anything (``bench --from-json RUN.json --plot FILE.png``).

matplotlib is the ``plot`` extra's one package; it is imported only here, and only when a plot is asked
for (with the Agg backend: no display is needed or used).
"""

from __future__ import annotations

import json
import math
import os

#: What the missing-matplotlib message tells users to run (the package is not on PyPI).
INSTALL_HINT = ('install the plot extra: pip install -e ".[plot]" in a clone of fastdeconv, or '
                'pip install "fastdeconv-<version>-<tags>.whl[plot]" from a wheel, or just pip install matplotlib')

#: The tables the bench prints, in its order: (op, panel title).
TABLES = (("deconv", "transposed convolution (conv_transpose2d)"), ("conv", "convolution (conv2d)"))

#: Marker and colour per peer (by the row key of fastdeconv.bench.suites.PEERS).
_STYLE = {"torch_cl": dict(marker="o", color="#1f77b4"), "ort": dict(marker="s", color="#d95f02")}
_FALLBACK_STYLES = [dict(marker="^", color="#7570b3"), dict(marker="D", color="#1b9e77")]

ORDERS = ("ratio", "suite")


class PlotUnavailable(ImportError):
    """matplotlib cannot be imported: the message says why and how to install it."""


def require_matplotlib():
    """Import matplotlib with the Agg backend and return its pyplot, or raise :class:`PlotUnavailable`."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except Exception as error:  # noqa: BLE001 - missing, or installed but broken: either way say how to fix it
        if isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] == "matplotlib":
            reason = "matplotlib is not installed"
        else:
            reason = f"matplotlib cannot be imported ({type(error).__name__}: {error})"
        raise PlotUnavailable(f"{reason}; {INSTALL_HINT}") from None
    return plt


def check_output_path(path):
    """Raise ValueError with the reason when a plot cannot be written to ``path`` (its extension is not
    an image format matplotlib writes, its folder is missing, or the file cannot be created). Call it
    before a run, so that a wrong path fails at once rather than after minutes of timing. A file it
    creates to check is removed again."""
    require_matplotlib()
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    extension = os.path.splitext(path)[1].lower().lstrip(".")
    if extension not in formats:
        raise ValueError(f"the file name must end in an image format matplotlib writes "
                         f"({', '.join('.' + f for f in sorted(formats))}); got {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"cannot write {path!r}: the folder {folder!r} does not exist")
    existed = os.path.exists(path)
    try:
        with open(path, "ab"):
            pass
    except OSError as error:
        raise ValueError(f"cannot write {path!r}: {error.strerror or error}") from None
    if not existed:
        os.remove(path)


def load_result(path):
    """The result dictionary of a saved run (``bench --json FILE``); ValueError with the reason when the
    file cannot be read or is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    except OSError as error:
        raise ValueError(f"cannot read {path!r}: {error.strerror or error}") from None
    except ValueError as error:
        raise ValueError(f"{path!r} is not JSON ({error})") from None
    rows = result.get("rows") if isinstance(result, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "case" in r and "plan_s" in r for r in rows):
        raise ValueError(f"{path!r} is not a bench result: no \"rows\" of cases with \"plan_s\" "
                         "(write one with: bench --json FILE)")
    if not rows:
        raise ValueError(f"{path!r} holds no cases")
    return result


def _peers():
    from .suites import PEERS

    return [(spec.key, spec.name) for spec in PEERS]


def ratios(row):
    """{peer name: peer time / our plan time} for the peers that ran on this row's case (> 1: we win)."""
    return {name: row[f"{key}_s"] / row["plan_s"] for key, name in _peers()
            if row.get(f"{key}_s") and row.get("plan_s")}


def _op(row, ops):
    if row["case"] in ops:
        return ops[row["case"]]
    first = str(row.get("description", "")).split()[:1]
    return first[0] if first and first[0] in ("conv", "deconv") else "deconv"


def panels(result):
    """[(title, rows)] per table the bench printed for this result: transposed convolutions, convolutions."""
    ops = {c.get("name"): c.get("op", "deconv") for c in result.get("cases", []) if isinstance(c, dict)}
    out = []
    for op, title in TABLES:
        rows = [r for r in result["rows"] if _op(r, ops) == op]
        if rows:
            out.append((title, rows))
    return out


def _geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def machine_text(result):
    """The machine a run recorded (``run_bench``'s "machine"), in a few words, or ""."""
    machine = result.get("machine") or {}
    if not isinstance(machine, dict):
        return str(machine)
    parts = [machine.get("cpu") or ""]
    if machine.get("logical_cpus"):
        parts.append(f"{machine['logical_cpus']} logical CPUs")
    if machine.get("system"):
        parts.append(f"{machine['system']} {machine.get('arch', '')}".strip())
    return ", ".join(p for p in parts if p)


def title_text(result, machine=None):
    threads = result.get("threads")
    thread_text = f"{threads} thread{'s' if threads != 1 else ''}" if threads else "default threads"
    where = machine if machine is not None else machine_text(result)
    head = f"fastdeconv {result.get('fastdeconv', '')}".strip() + f" against its peers: {thread_text}"
    if where:
        head += f", {where}"
    return (head + "\npeer time / fastdeconv time per case (the plan: a layer built once); "
            "right of 1 fastdeconv is faster")


def _peer_status(result):
    """One line: the peers that did not run, and why."""
    parts = []
    for name, status in (result.get("peers") or {}).items():
        if isinstance(status, dict) and status.get("skipped"):
            parts.append(f"{name} skipped ({status['skipped']})")
    return "; ".join(parts)


def _legend_text(name, version):
    """"× torch 2.11.0" from the peer's name and the version the run recorded ("torch 2.11.0")."""
    if not version or version == name:
        return f"× {name}"
    return f"× {version}" if version.startswith(name) else f"× {name} ({version})"


def _ticks(low, high):
    """Ticks at 1/8, 1/4, ..., 1, 2, 4, ... covering [low, high]."""
    lo = math.floor(math.log2(low))
    hi = math.ceil(math.log2(high))
    return [2.0 ** e for e in range(lo, hi + 1)]


def _tick_text(value):
    return f"{value:g}×" if value >= 1 else f"1/{round(1 / value):d}×"


def plot_result(result, path, order="ratio", machine=None, dpi=110):
    """Draw ``result`` (``run_bench``'s dictionary, or :func:`load_result`'s) into ``path`` (its extension
    picks the format) and return the path. ``order``: "ratio" sorts each panel's cases by the ratio to
    the faster peer, fastdeconv's worst case at the top; "suite" keeps the suite's order. ``machine``: the
    machine named in the title, in place of what the run recorded."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    plt = require_matplotlib()
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    tables = panels(result)
    peer_names = [name for _, name in _peers()]
    keys = dict((name, key) for key, name in _peers())
    styles = {}
    for i, name in enumerate(peer_names):
        styles[name] = _STYLE.get(keys[name], _FALLBACK_STYLES[i % len(_FALLBACK_STYLES)])

    all_ratios = [x for _, rows in tables for r in rows for x in ratios(r).values()]
    low = min(all_ratios + [1.0]) / 1.25
    high = max(all_ratios + [1.0]) * 1.25
    longest = max((len(r["case"]) for _, rows in tables for r in rows), default=8)
    most = max((len(rows) for _, rows in tables), default=1)
    dense = most > 40
    fontsize = 7 if dense else 9
    # The layout in inches, so that a row is as tall in every picture whatever the number of cases: the
    # title, a legend shared by the panels (outside them: it hides no marker), each panel's heading and
    # top tick labels, the rows, the bottom tick labels and the axis label.
    row_inch = 0.18 if dense else 0.26
    label_inch = fontsize / 72 * 0.62 * longest + 0.2   # a monospace character is about 0.6 em wide
    plot_inch, gap_inch, side_inch = 4.5, 0.45, 0.2
    title_inch, legend_inch, head_inch, foot_inch = 0.62, 0.42, 0.66, 0.55
    width = side_inch * 2 + len(tables) * (label_inch + plot_inch) + (len(tables) - 1) * gap_inch
    height = title_inch + legend_inch + head_inch + most * row_inch + foot_inch
    fig = plt.figure(figsize=(width, height))
    handles = {}
    versions = {name: (status.get("version") or name) for name, status in (result.get("peers") or {}).items()
                if isinstance(status, dict)}
    for k, (title, rows) in enumerate(tables):
        if order == "ratio":   # worst first (top), cases no peer ran on last
            rows = sorted(rows, key=lambda r: min(ratios(r).values()) if ratios(r) else math.inf)
        left = side_inch + k * (label_inch + plot_inch + gap_inch) + label_inch
        top = title_inch + legend_inch + head_inch
        ax = fig.add_axes((left / width, 1 - (top + len(rows) * row_inch) / height, plot_inch / width,
                           len(rows) * row_inch / height))
        y = list(range(len(rows)))
        ax.axvline(1.0, color="black", linewidth=1.0, zorder=1)
        ax.axvspan(low, 1.0, color="#f0f0f0", zorder=0)
        for i in y:
            if i % 2 == 0:
                ax.axhspan(i - 0.5, i + 0.5, color="#f7f7f7", zorder=0, linewidth=0)
        means = []
        for name in peer_names:
            points = [(i, ratios(r)[name]) for i, r in zip(y, rows) if name in ratios(r)]
            if not points:
                continue
            means.append(f"× {name} {_geomean([x for _, x in points]):.2f}")
            handles[name] = ax.scatter([x for _, x in points], [i for i, _ in points], s=15 if dense else 30,
                                       zorder=3, alpha=0.9, linewidths=0, **styles[name])
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        ax.xaxis.set_major_locator(FixedLocator(_ticks(low, high)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _tick_text(v)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_ticks_position("both")
        ax.tick_params(axis="x", labelsize=8.5, labeltop=True)
        ax.grid(axis="x", color="#d8d8d8", linewidth=0.6, zorder=0)
        ax.set_yticks(y)
        ax.set_yticklabels([r["case"] for r in rows], fontsize=fontsize, family="monospace")
        ax.set_ylim(len(rows) - 0.5, -0.5)   # the first row at the top
        ax.tick_params(axis="y", length=0)
        ax.set_xlabel("peer time / fastdeconv time  (< 1: the peer is faster; > 1: fastdeconv is faster)",
                      fontsize=8)
        heading = f"{title}: {len(rows)} case{'s' if len(rows) != 1 else ''}"
        heading += "\ngeometric mean: " + (", ".join(means) if means else "no peer ran")
        ax.set_title(heading, fontsize=9.5, loc="left", pad=18)
        for side in ("right",):
            ax.spines[side].set_visible(False)
    fig.suptitle(title_text(result, machine), fontsize=10.5, y=1 - 0.12 / height, va="top")
    if handles:
        fig.legend(list(handles.values()), [_legend_text(name, versions.get(name, "")) for name in handles],
                   loc="center", bbox_to_anchor=(0.5, 1 - (title_inch + legend_inch / 2) / height),
                   ncol=len(handles), fontsize=8.5, frameon=False, markerscale=1.4)
    else:   # in the legend's place, why there is nothing to compare with
        fig.text(0.5, 1 - (title_inch + legend_inch / 2) / height,
                 "no peer ran: " + (_peer_status(result) or "no peer timed these cases"), ha="center",
                 va="center", fontsize=8.5, color="#b00000")
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def main_plot(result, path, order="ratio", machine=None, log=None):
    """Draw, and say on ``log`` (stderr) what was written or why there is nothing to compare."""
    import sys

    log = log or sys.stderr
    plot_result(result, path, order=order, machine=machine)
    if not any(ratios(r) for r in result["rows"]):
        print(f"bench: no peer ran ({_peer_status(result) or 'no peer timings'}), so {path} shows no ratios",
              file=log)
    print(f"bench: wrote the plot {path}", file=log, flush=True)
