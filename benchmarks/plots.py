"""Draw docs/benchmarks.md's plots from the numbers recorded there.

    pip install matplotlib        # not a dependency of wal3-spark
    ./dev python benchmarks/plots.py

The numbers below are copied from the runs docs/benchmarks.md reports (each table there names
the command that produced it); this script only draws them, so that a reader can see the shape
(a latency tail, which read paths are near the baseline) without reading the tables. When a new
run replaces a table, change its numbers here and run the script again.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"

#: `benchmarks/latency.py`, 10,000 appends/s of 100 B, 100 ms per store request (ms):
#: variant -> (p50, p90, p99, max)
LATENCY: dict[str, tuple[float, float, float, float]] = {
    "10,000/s, one manifest write at a time (default)": (298, 342, 363, 394),
    "10,000/s, 8 in flight + gc.freeze(), earlier runs": (218, 227, 241, 261),
    "10,000/s, 8 in flight + gc.freeze(), latest run": (222, 341, 560, 632),
}
#: the same at 2,000 appends/s with 1% of reads and creates taking 1 s
LATENCY_TAIL: dict[str, tuple[float, float, float, float]] = {
    "2,000/s, 1% of reads and creates 10x slower, hedged": (219, 303, 430, 481),
    "2,000/s, 1% of reads and creates 10x slower, not hedged": (224, 970, 1113, 1130),
}
LATENCY_TARGET = {"p50": 250, "p99": 300, "max": 400}

#: `jobs/benchmark.py --rows 3000000 --repeat 3`: wal3's median time / the Parquet baseline's,
#: and the target ratio (None: no target, shown for comparison)
SPARK_RATIOS: list[tuple[str, float, float | None]] = [
    ("write: df.write.format('wal3')", 1.13, 1.15),
    ("read: full rows, verified", 1.82, 1.5),
    ("read: full rows, verifyOnRead=false", 1.37, None),
    ("read: transport floor (batches from memory)", 1.19, None),
    ("read: sum(id), count(name)", 3.95, None),
    ("read: count()", 7.64, None),
    ("stream: AvailableNow, 1 micro-batch", 2.35, 1.6),
    ("stream: AvailableNow, 2 micro-batches", 2.54, 1.6),
    ("native scan: full rows", 1.25, 1.2),
    ("native scan: sum(id), count(name)", 0.97, 1.2),
    ("native scan: count()", 0.94, 1.5),
]

#: `benchmarks/herd.py`: one trigger of a log-set stream over 10,000 logs of which 10 changed:
#: variant -> (milliseconds, requests)
HERD_TRIGGER: dict[str, tuple[float, int]] = {
    "dirty log: find the 10 changed logs": (15.2, 2),
    "dirty log: find them + read their manifests": (47.4, 12),
    "no dirty log: read all 10,000 manifests": (22_200, 10_002),
}


def save(fig: matplotlib.figure.Figure, name: str) -> Path:
    """Write one figure under docs/img/ and free it."""
    fig.tight_layout()
    path = OUT / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_plot() -> Path:
    """Each variant's latency percentiles as a line, the target as marks."""
    fig, ax = plt.subplots(figsize=(11, 4.5))
    points = ["p50", "p90", "p99", "max"]
    for name, values in {**LATENCY, **LATENCY_TAIL}.items():
        style = "--" if name in LATENCY_TAIL else "-"
        ax.plot(points, values, style, marker="o", label=name)
    ax.scatter(list(LATENCY_TARGET), list(LATENCY_TARGET.values()), marker="_", s=900,
               color="black", zorder=5, label="target (10,000/s)")
    ax.set_yscale("log")
    ax.set_yticks([200, 300, 400, 600, 1000])
    ax.get_yaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_ylabel("append latency, ms (log scale)")
    ax.set_title("LogWriter.submit under 100 ms per store request")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save(fig, "latency.png")


def spark_ratio_plot() -> Path:
    """wal3 / Parquet time per Spark variant, with each target."""
    names = [n for n, _, _ in SPARK_RATIOS][::-1]
    ratios = [r for _, r, _ in SPARK_RATIOS][::-1]
    targets = [t for _, _, t in SPARK_RATIOS][::-1]
    colors = ["tab:green" if t is not None and r <= t else "tab:red" if t is not None else "tab:gray"
              for r, t in zip(ratios, targets)]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.barh(names, ratios, color=colors)
    for i, (r, t) in enumerate(zip(ratios, targets)):
        ax.text(r + 0.05, i, f"{r:.2f}x", va="center", fontsize=8)
        if t is not None:
            ax.plot([t, t], [i - 0.4, i + 0.4], color="black", linewidth=2)
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel("time relative to Spark's own Parquet source or sink (1.0 = as fast)")
    ax.set_title("Spark, 3M rows x 6 columns: green met its target (|), red missed")
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlim(0, max(ratios) + 0.8)
    return save(fig, "spark_ratios.png")


def herd_plot() -> Path:
    """A log-set trigger's time and requests with and without the dirty log (log scales)."""
    names = list(HERD_TRIGGER)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3), sharey=True)
    for ax, values, label in ((left, [v[0] for v in HERD_TRIGGER.values()], "milliseconds"),
                              (right, [v[1] for v in HERD_TRIGGER.values()], "store requests")):
        ax.barh(names, values, color=["tab:green", "tab:green", "tab:gray"])
        ax.set_xscale("log")
        ax.set_xlabel(f"{label} (log scale)")
        for i, v in enumerate(values):
            ax.text(v * 1.1, i, f"{v:,g}", va="center", fontsize=8)
        ax.set_xlim(1, max(values) * 20)
    left.invert_yaxis()
    left.tick_params(axis="y", labelsize=8)
    fig.suptitle("One trigger over 10,000 logs, 10 of them changed (SeaweedFS, loaded machine)")
    return save(fig, "herd.png")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for path in (latency_plot(), spark_ratio_plot(), herd_plot()):
        print(path)


if __name__ == "__main__":
    main()
