"""Static attention heatmaps (PNG): a layers x heads grid per attention group, tokens on both axes, a colour bar."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_LABELLED_TOKENS = 60  # beyond this many tokens on an axis, tick labels are unreadable and are left out


def plot_attention_grid(maps: np.ndarray, q_labels: Sequence[str], k_labels: Sequence[str], title: str,
                        path: str) -> None:
    """maps: [L, H, Tq, Tk] attention weights -> one PNG at ``path``: a grid of layers x heads heatmaps with query
    tokens down the side and key tokens along the bottom of every panel, and one colour bar (weight 0 to 1)."""
    maps = np.asarray(maps)
    if maps.ndim != 4:
        raise ValueError(f"plot_attention_grid: maps has shape {maps.shape}; expected [layers, heads, Tq, Tk]")
    L, H, Tq, Tk = maps.shape
    if len(q_labels) != Tq or len(k_labels) != Tk:
        raise ValueError(f"plot_attention_grid: {len(q_labels)} query and {len(k_labels)} key labels for maps of "
                         f"Tq={Tq}, Tk={Tk}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labelled = max(Tq, Tk) <= MAX_LABELLED_TOKENS
    font = 7 if max(Tq, Tk) <= 20 else 5 if max(Tq, Tk) <= 40 else 4
    cell = max(2.0, 0.11 * max(Tq, Tk)) + (0.6 if labelled else 0.0)
    fig, axes = plt.subplots(L, H, figsize=(cell * H + 1.2, cell * L + 0.9), squeeze=False, layout="constrained")
    image = None
    for layer in range(L):
        for head in range(H):
            ax = axes[layer, head]
            image = ax.imshow(maps[layer, head], vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto",
                              interpolation="nearest")
            ax.set_title(f"layer {layer} head {head}", fontsize=7)
            if labelled:
                ax.set_yticks(range(Tq), [str(t) for t in q_labels], fontsize=font)
                ax.set_xticks(range(Tk), [str(t) for t in k_labels], fontsize=font, rotation=90)
            else:
                ax.set_xticks([])
                ax.set_yticks([])
            ax.tick_params(length=0, pad=1)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=min(0.8, 3.0 / L + 0.2), label="attention weight")
    fig.suptitle(f"{title}\nrows: queries, columns: keys", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)
