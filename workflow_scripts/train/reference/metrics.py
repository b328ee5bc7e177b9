"""What a run leaves beside its checkpoints: the loss curve, the evaluations and one summary per segment.

All under the output folder (``--out``, by default ``reference/{config name}/`` beside the ``save``
folder, e.g. ``results/train/reference/main_1/`` for ``results/train/checkpoints``):

- ``loss.csv``: ``iteration,loss,lr,tokens_per_s`` per global iteration (``repr`` floats, exact),
- ``loss.png``: the curve, with the validation losses (matplotlib, imported only to draw it),
- ``eval.jsonl``: one JSON line per evaluation (``iteration``, ``valid_loss``, ``valid_ppl``, ``samples``),
- ``eval-only.jsonl``: the standalone evaluations (``--eval-only``),
- ``global_step{A}-{B}.json`` in its segments folder (core/train_layout.py): a segment's iterations,
  tokens/s, peak memory and exit reason.

A run resumed from global step G first drops the rows after G that a killed run had written, so the files
always describe the run that the checkpoints continue.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from workflow_scripts.core import train_layout
from workflow_scripts.core.fsio import atomic_path, write_json

CSV_COLUMNS = ("iteration", "loss", "lr", "tokens_per_s")


class Metrics:
    """The output folder of one pack's runs (written by rank 0 only)."""

    def __init__(self, out_dir: str, enabled: bool = True) -> None:
        self.out = Path(out_dir)
        self.enabled = enabled
        self.loss_csv = self.out / train_layout.LOSS_CSV
        self.eval_jsonl = self.out / train_layout.EVAL_JSONL
        self.eval_only_jsonl = self.out / "eval-only.jsonl"
        self.plot_png = self.out / "loss.png"
        if enabled:
            self.out.mkdir(parents=True, exist_ok=True)

    def resume(self, step: int) -> None:
        """Forget what was logged after global step ``step``."""
        if not self.enabled:
            return
        if self.loss_csv.exists():
            rows = [r for r in read_loss_csv(self.loss_csv) if int(r["iteration"]) <= step]
            with atomic_path(self.loss_csv) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                writer.writerow(CSV_COLUMNS)
                writer.writerows([r[c] for c in CSV_COLUMNS] for r in rows)
        if self.eval_jsonl.exists():
            lines = [
                line
                for line in self.eval_jsonl.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line)["iteration"] <= step
            ]
            with atomic_path(self.eval_jsonl) as tmp:
                tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")

    def step(self, iteration: int, loss: float, lr: float, tokens_per_s: float) -> None:
        if not self.enabled:
            return
        new = not self.loss_csv.exists()
        with open(self.loss_csv, "a", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(CSV_COLUMNS)
            writer.writerow([iteration, repr(loss), repr(lr), f"{tokens_per_s:.1f}"])

    def evaluation(self, record: dict[str, Any], standalone: bool = False) -> None:
        if not self.enabled:
            return
        with open(self.eval_only_jsonl if standalone else self.eval_jsonl, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")

    def segment(self, summary: dict[str, Any]) -> Path | None:
        if not self.enabled:
            return None
        segments = Path(train_layout.reference_segments(str(self.out)))
        path = segments / f"global_step{summary['first_step']}-{summary['last_step']}.json"
        write_json(path, summary)
        return path

    def plot(self, title: str) -> Path | None:
        """Draw ``loss.png`` from the CSV and the evaluations (None when matplotlib is missing)."""
        if not self.enabled or not self.loss_csv.exists():
            return None
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("note: matplotlib is not installed: no loss.png (pip install matplotlib)", flush=True)
            return None
        rows = read_loss_csv(self.loss_csv)
        fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
        ax.plot([int(r["iteration"]) for r in rows], [float(r["loss"]) for r in rows], lw=1, label="train")
        if self.eval_jsonl.exists():
            evals = [json.loads(x) for x in self.eval_jsonl.read_text(encoding="utf-8").splitlines() if x]
            if evals:
                ax.plot(
                    [e["iteration"] for e in evals],
                    [e["valid_loss"] for e in evals],
                    "o-",
                    label="validation",
                )
        ax.set_xlabel("global iteration")
        ax.set_ylabel("loss")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        with atomic_path(self.plot_png) as tmp:
            fig.savefig(tmp, format="png")
        plt.close(fig)
        return self.plot_png


def read_loss_csv(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The rows of a ``loss.csv``."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))
