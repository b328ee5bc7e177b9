"""Benchmark a training segment: the reference trainer alone against the same training run as a segment.

    .venv/bin/python bench/bench_train.py [--pack main_1] [--repeats 3]

Needs the sample's trainer configs (run the sample first: `snakemake --profile profiles/local`). Work dir
bench/_work/train (git-ignored): the pack's config is copied with `save`/`load` there, so results/ is not
touched. Alternating, ``--repeats`` times, from an empty checkpoint folder each time:

1. baseline: ``snakepack train-reference --config C`` (what a hand-written Slurm script runs),
2. ours: ``snakepack train-segment`` around the same command (reads ``latest`` before and after, watches
   the time limit, passes signals on, parses the progress lines and writes the segment record).

Best wall time of each; ratio = baseline / ours (1.0: the segment costs nothing on top of training). The
trainer's own tokens/s and peak memory come from its summary line. Results: bench/results/train.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
from pathlib import Path

import harness
import yaml

from workflow_scripts.core.train_layout import TrainLayout

SUMMARY = re.compile(r"= ([\d,]+) tokens/s; peak memory RSS (\d+) MiB")


def prepare(pack: str, work: Path) -> tuple[Path, Path, Path]:
    """The pack's config and keys file, pointed at a checkpoint folder under ``work``."""
    source, copy = TrainLayout(str(harness.ROOT / "results" / "train")), TrainLayout(str(work))
    if not os.path.exists(source.config(pack, ".yml")):
        raise SystemExit(
            f"no {source.config(pack, '.yml')}: run the sample first"
            " (snakemake --profile profiles/local --configfile config/sample.yaml)"
        )
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "checkpoints"
    config = yaml.safe_load(Path(source.config(pack, ".yml")).read_text())
    config.update(save=str(ckpt), load=str(ckpt), iteration_offset=0, exit_interval=config["train_iters"])
    config_path = work / f"{pack}.yml"
    config_path.write_text(yaml.safe_dump(config))
    keys = json.loads(Path(source.keys(pack)).read_text())
    keys["config"] = str(config_path)
    for key in ("save", "iteration_offset", "exit_interval"):
        keys["set"][key]["value"] = config[key]
    keys_path = Path(copy.keys(pack))
    keys_path.parent.mkdir(parents=True, exist_ok=True)
    keys_path.write_text(json.dumps(keys))
    return config_path, keys_path, ckpt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pack", default="main_1")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = harness.WORK / "train"
    config, keys, ckpt = prepare(args.pack, work)
    trainer = harness.cli("train-reference", "--config", config)
    launch = shlex.join(trainer[:-1]) + " {config}"
    segment = harness.cli(
        "train-segment", "--keys", keys, "--segment", 0, "--segments", 1, "--record", work / "record.json",
        "--launch", launch,
    )  # fmt: skip
    runs: dict[str, list[harness.Measured]] = {"trainer": [], "segment": []}
    for r, name in harness.rounds(list(runs), args.repeats, rotate=True):
        shutil.rmtree(ckpt, ignore_errors=True)
        ckpt.mkdir()
        measured = harness.run_isolated(trainer if name == "trainer" else segment)
        runs[name].append(measured)
        tokens_s, rss = SUMMARY.search(measured.output).groups()
        print(f"run {r + 1} {name:8s} {measured.wall:7.2f} s  trainer {tokens_s} tokens/s, RSS {rss} MiB")
    best = harness.best(runs, key=lambda m: m.wall)
    iters = yaml.safe_load(config.read_text())["train_iters"]
    seg, alone = iters / best["segment"].wall, iters / best["trainer"].wall
    ratio = harness.compare("segment (train-segment)", seg, "trainer alone", alone, "it/s")
    record = json.loads((work / "record.json").read_text())
    tokens_s, rss = SUMMARY.search(best["segment"].output).groups()
    harness.write_results(
        "train",
        {
            "pack": args.pack,
            "train_iters": iters,
            "wall_s": {k: round(v.wall, 3) for k, v in best.items()},
            "ratio_trainer_over_segment": round(ratio, 3),
            "trainer_tokens_per_s": int(tokens_s.replace(",", "")),
            "trainer_peak_rss_mib": int(rss),
            "segment_record_s_per_iter": record["s_per_iter"],
        },
    )


if __name__ == "__main__":
    main()
