"""The loss curve of a training run as a PNG (matplotlib, headless), so a run directory explains itself
at a glance and the reports can show it: the train loss line, eval losses as markers."""

from __future__ import annotations

import io
from collections.abc import Sequence

from datakit.core.fsio import atomic_write_bytes

TRAIN_COLOR = "#1f77b4"  # matplotlib's tab:blue
EVAL_COLOR = "#d62728"   # tab:red


def render_loss_plot(train: Sequence[tuple[int, float]], evals: Sequence[tuple[int, float]] = (), *,
                     fmt: str = "png") -> bytes:
    """The figure's bytes (``fmt``: png or svg). Metadata that names the date or the library version is
    left out, so the same curve gives the same bytes."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.6, 3.2), dpi=100)
    ax = fig.add_subplot()
    if train:
        ax.plot([s for s, _ in train], [v for _, v in train], color=TRAIN_COLOR, linewidth=2, label="train loss")
    if evals:
        ax.plot([s for s, _ in evals], [v for _, v in evals], linestyle="none", marker="s", markersize=7,
                color=EVAL_COLOR, label="eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.grid(True, color="#e0e0e0")
    if train or evals:
        ax.legend(loc="upper right")
    fig.tight_layout()
    buf = io.BytesIO()
    metadata = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
    fig.savefig(buf, format=fmt, metadata=metadata)
    return buf.getvalue()


def write_loss_plot(path: str, train: Sequence[tuple[int, float]], evals: Sequence[tuple[int, float]] = ()) -> str:
    """Render and write atomically (temp + rename)."""
    atomic_write_bytes(path, render_loss_plot(train, evals))
    return path
