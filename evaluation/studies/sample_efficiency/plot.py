"""The sample-efficiency study's figure (``success_vs_real.png``)."""

from __future__ import annotations

from pathlib import Path


def write_png(
    agg: dict[str, list[dict]], path: Path, title: str, labels: dict | None = None
) -> None:
    """``success_vs_real.png``: success against every real step spent (demonstrations and a
    DynaWeb arm's world-model corpus included), 95% intervals over seeds."""
    labels = labels or {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    colors = {
        "imitation": "tab:gray",
        "imitation_matched": "tab:green",
        "real_only": "tab:blue",
        "dynaweb": "tab:red",
        "dynaweb_dream_only": "tab:purple",
    }
    for arm, curve in agg.items():
        if arm in ("imitation", "imitation_matched"):
            # no interaction beyond the demonstrations: a level at the final point, not a curve
            curve = curve[-1:]
            ax.axhline(
                curve[-1]["success"],
                color=colors[arm],
                ls="--" if arm == "imitation" else ":",
                lw=1,
            )
        xs = [p["real_steps"] for p in curve]
        ys = [p["success"] for p in curve]
        lo = [p["success"] - p["ci_low"] if p["ci_low"] is not None else 0 for p in curve]
        hi = [p["ci_high"] - p["success"] if p["ci_high"] is not None else 0 for p in curve]
        ax.errorbar(
            xs,
            ys,
            yerr=[lo, hi],
            marker="o",
            capsize=3,
            color=colors.get(arm),
            label=labels.get(arm, arm),
        )
    ax.set_xlabel("real environment steps (demonstrations and world-model corpus included)")
    ax.set_ylabel("success on evaluation seeds")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
