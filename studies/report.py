"""Markdown reports with figures and tables, shared by the sweep runner and the studies.

A ``Report`` collects Markdown text, tables and matplotlib figures and writes them into one folder:
``<out>/README.md`` plus one PNG per figure, so the report renders on GitHub as it is.
"""
from __future__ import annotations

import csv
import dataclasses
import datetime
import math
import os
import platform
import sys
from typing import Any, Iterable, Optional, Sequence

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout (studies/ is at its root)


def significant(x: float, digits: int) -> str:
    """``x`` with ``digits`` significant digits: a rounded value keeps its trailing zeros ("2.820" for 2.81996), an
    exact one reads as written ("0.003", "40"), and a number of ``digits`` or more integer digits is a grouped integer
    ("1,262", not "1.26e+03")."""
    if abs(x) >= 10 ** digits - 0.5:
        return f"{round(x):,}"
    short = f"{x:.{digits}g}"
    return short if float(short) == x else f"{x:#.{digits}g}".rstrip(".")


def fmt(x: Any, digits: int = 3) -> str:
    """A table cell: floats with ``digits`` significant digits, NaN and None as an em dash."""
    if x is None:
        return "—"
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}" if abs(int(x)) >= 10_000 else str(int(x))
    if isinstance(x, (float, np.floating)):
        if not math.isfinite(float(x)):
            return "—" if math.isnan(float(x)) else str(float(x))
        return significant(float(x), digits)
    return str(x)


def mean_std(values: Sequence[float]) -> str:
    """'mean ± std (n=k)' over the finite values, the sample std (ddof=1) when k > 1."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return "—"
    if v.size == 1:
        return f"{significant(v[0], 4)} (n=1)"
    return f"{significant(v.mean(), 4)} ± {significant(v.std(ddof=1), 2)} (n={v.size})"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 3) -> str:
    """A GitHub Markdown table; cells go through ``fmt``."""
    lines = ["| " + " | ".join(str(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"markdown_table: row has {len(row)} cells; expected {len(headers)} ({list(headers)})")
        lines.append("| " + " | ".join(fmt(c, digits) for c in row) + " |")
    return "\n".join(lines)


def write_csv(path: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Rows as CSV with a header line; floats at full precision."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(headers)
        for row in rows:
            w.writerow(["" if c is None else c for c in row])


def number(text: str) -> Any:
    """A CSV cell as an int or a float when it reads as one (so tables format it), else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_csv(out: str, name: str, script: str) -> list[dict[str, str]]:
    """The rows of ``out/name`` as dicts; a missing file ends the program with one line naming it and the
    ``script`` whose full run writes it."""
    path = os.path.join(out, name)
    if not os.path.isfile(path):
        raise SystemExit(f"{path} not found; expected the CSVs a full run of {script} writes into --out={out}")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def source_commit() -> str:
    """The checkout's commit (short hash, "+ local changes" when the tree differs from it); without git (a copy
    of the tree on a device machine) ``$ATTNLAB_SOURCE_COMMIT``, else "unknown"."""
    import subprocess

    fallback = os.environ.get("ATTNLAB_SOURCE_COMMIT") or "unknown"
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return fallback
    return (head + (" + local changes" if dirty else "")) if head else fallback


PROCESS_COMMIT = source_commit()  # the code this process imported, whatever the checkout becomes while it runs


def environment_line() -> str:
    """Where, when and by which commit numbers were measured: date, the commit this process started from,
    host platform, CPU count, jax."""
    import jax

    devices = jax.devices()
    return (
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC with commit "
        f"{PROCESS_COMMIT} on {platform.platform()}, {os.cpu_count()} CPU cores, jax {jax.__version__} "
        f"({devices[0].platform}, {len(devices)} device(s)), python {sys.version.split()[0]}."
    )


def splice_section(readme: str, title: str, body: str, before: str) -> None:
    """Put ``## <title>`` with ``body`` into the Markdown file ``readme``: in place of an existing section of that
    title, else just before the ``## <before>`` heading (at the end when there is none)."""
    with open(readme) as f:
        text = f.read()
    block = f"## {title}\n\n{body.strip()}\n\n"
    head = f"\n## {title}\n"
    if head in text:
        start = text.index(head) + 1
        nxt = text.find("\n## ", start + len(head) - 1)
        text = text[:start] + block + (text[nxt + 1:] if nxt >= 0 else "")
    elif f"\n## {before}\n" in text:
        at = text.index(f"\n## {before}\n") + 1
        text = text[:at] + block + text[at:]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    with open(readme, "w") as f:
        f.write(text.rstrip("\n") + "\n")


class Report:
    """A Markdown report written to ``<out_dir>/README.md`` with its figures beside it."""

    def __init__(self, out_dir: str, title: str):
        self.out_dir = out_dir
        self.parts: list[str] = [f"# {title}"]
        self.figures: list[str] = []
        self.files: list[str] = []  # every file written (names in out_dir): tables' CSVs, figures, README.md
        os.makedirs(out_dir, exist_ok=True)

    def text(self, markdown: str) -> None:
        self.parts.append(markdown.strip())

    def section(self, title: str) -> None:
        self.parts.append(f"## {title}")

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[Any]], *, csv_name: Optional[str] = None,
              digits: int = 3) -> None:
        """A Markdown table in the report; with ``csv_name`` also a CSV file beside it, linked."""
        rows = [list(r) for r in rows]
        self.parts.append(markdown_table(headers, rows, digits))
        if csv_name:
            write_csv(os.path.join(self.out_dir, csv_name), headers, rows)
            self.files.append(csv_name)
            self.parts.append(f"(CSV: [{csv_name}]({csv_name}))")

    def csv(self, name: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """A CSV file beside the report, linked, without a table in the text."""
        write_csv(os.path.join(self.out_dir, name), headers, rows)
        self.files.append(name)
        self.parts.append(f"(CSV: [{name}]({name}))")

    def figure(self, fig: "plt.Figure", name: str, caption: str = "") -> str:
        """Save ``fig`` as ``<name>.png`` beside the report and embed it; returns the file path."""
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"Report.figure: name {name!r} must be letters, digits, '_' or '-'")
        path = os.path.join(self.out_dir, f"{name}.png")
        fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        self.figures.append(path)
        self.files.append(f"{name}.png")
        self.parts.append(f"![{caption or name}]({name}.png)" + (f"\n\n*{caption}*" if caption else ""))
        return path

    def write(self) -> str:
        """Write ``README.md`` and return its path; an existing one that differs only in its "Measured ..." line
        is left as it is, so a rebuild from the same records does not churn the report."""
        path = os.path.join(self.out_dir, "README.md")
        self.files.append("README.md")
        text = "\n\n".join(self.parts) + "\n"
        if os.path.isfile(path):
            with open(path) as f:
                if _without_measured_line(f.read()) == _without_measured_line(text):
                    return path
        with open(path, "w") as f:
            f.write(text)
        return path


def _without_measured_line(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("Measured ")]


def heatmap_grid(
    panels: Sequence[tuple[str, np.ndarray]], *, ncols: Optional[int] = None, xlabel: str = "head",
    ylabel: str = "layer", cbar_label: str = "mean entropy (nats)", vmin: Optional[float] = None,
    vmax: Optional[float] = None,
) -> "plt.Figure":
    """Heatmaps side by side, one per (title, [rows, cols] array), ``ncols`` per row, on one colour scale."""
    if not panels:
        raise ValueError("heatmap_grid: no panels to draw")
    finite = [a[np.isfinite(a)] for _, a in panels if np.isfinite(a).any()]
    lo = vmin if vmin is not None else (min(float(f.min()) for f in finite) if finite else 0.0)
    hi = vmax if vmax is not None else (max(float(f.max()) for f in finite) if finite else 1.0)
    ncols = min(ncols or len(panels), len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(1.0 + 2.4 * ncols, 0.4 + 2.4 * nrows), squeeze=False)
    im = None
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (title, arr) in zip(axes.flat, panels):
        arr = np.atleast_2d(np.asarray(arr, dtype=np.float64))
        im = ax.imshow(arr, aspect="auto", cmap="viridis", vmin=lo, vmax=hi, interpolation="nearest")
        ax.set_title(title, fontsize=7)
        ax.set_xlabel(xlabel, fontsize=7)
        ax.set_ylabel(ylabel, fontsize=7)
        ax.set_yticks(range(arr.shape[0]))
        step = max(1, arr.shape[1] // 8)
        ax.set_xticks(range(0, arr.shape[1], step))
        ax.tick_params(labelsize=6)
    fig.tight_layout()
    fig.colorbar(im, ax=list(axes.flat), label=cbar_label, shrink=0.9)
    return fig


@dataclasses.dataclass
class Panel:
    """One axes of ``line_panels``: ``lines`` (label, xs, ys, matplotlib style) on the left axis, ``right`` on a
    twin axis from 0 to 1 (labelled ``right_label``), vertical lines at ``vlines`` and grey bands over ``spans``."""

    title: str
    xlabel: str
    ylabel: str = ""
    lines: list = dataclasses.field(default_factory=list)
    right: list = dataclasses.field(default_factory=list)
    right_label: str = ""
    vlines: Sequence[float] = ()
    spans: Sequence[tuple[float, float]] = ()


def line_panels(panels: Sequence[Panel], ncols: int, legend: str = "each") -> "plt.Figure":
    """Panels of lines, ``ncols`` a row; ``legend``: "each" (one per panel) or "below" (the last panel's labels
    once, under the figure)."""
    if not panels or ncols < 1 or legend not in ("each", "below"):
        raise ValueError(f"line_panels: {len(panels)} panels, ncols={ncols}, legend={legend!r}; expected panels, "
                         "ncols >= 1 and legend 'each' or 'below'")
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.2 * nrows), squeeze=False)
    handles = []
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, p in zip(axes.flat, panels):
        for lo, hi in p.spans:
            ax.axvspan(lo, hi, color="0.9")
        for x in p.vlines:
            ax.axvline(x, color="0.6", lw=0.8)
        for label, xs, ys, style in p.lines:
            ax.plot(xs, ys, label=label, **style)
        handles = ax.get_legend_handles_labels()[0]
        if p.right:
            twin = ax.twinx()
            for label, xs, ys, style in p.right:
                twin.plot(xs, ys, label=label, **style)
            twin.set_ylim(0, 1)
            twin.set_ylabel(p.right_label, fontsize=8)
            handles += twin.get_legend_handles_labels()[0]
        ax.set_title(p.title, fontsize=9)
        ax.set_xlabel(p.xlabel, fontsize=8)
        ax.set_ylabel(p.ylabel, fontsize=8)
        if legend == "each" and p.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    if legend == "below" and handles:
        fig.legend(handles, [h.get_label() for h in handles], loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=len(handles), fontsize=7, frameon=False)
    return fig
