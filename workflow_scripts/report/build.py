"""``snakepack report SECTION``: one section of the HTML report (plan or data) as charts (PNG), their tables
(CSV) and a self-contained page (``index.html``) in ``--out-dir``; the training section is ``snakepack
report-training`` (``training``: it reads the trainer configs, in the train stage's environment).

Usage::

    snakepack report plan --plan plan.json --mixtures mixtures/*.json [--configs train/configs.csv] \\
        [--excluded] --captions report/plan/*.rst --out-dir results/report/plan
    snakepack report data --ingest shards/stats.json [--dedup dedup/stats.json --dedup-report R] \\
        --tokenize tokenized/stats.json --signature tokenized/signature.json --plan plan.json ...
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from workflow_scripts.core.fsio import read_json
from workflow_scripts.datapacks.plan import Plan

TITLES = {"plan": "Plan", "data": "Data"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="One section of the HTML report: charts, tables, a page.")
    sections = parser.add_subparsers(dest="section", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out-dir", required=True, help="where the charts, tables and index.html go")
    common.add_argument("--captions", nargs="*", default=[], help="one-line caption files, {chart}.rst")
    plan = sections.add_parser("plan", parents=[common], help="tokens, epochs, mixture shares, schedule")
    plan.add_argument("--plan", required=True)
    plan.add_argument("--mixtures", nargs="*", default=[], help="mixtures/{name}.json")
    plan.add_argument("--configs", help="train/configs.csv (the checkpoint chart)")
    plan.add_argument("--excluded", action="store_true", help="the excluded chart (datapacks.exclude is set)")
    data = sections.add_parser("data", parents=[common], help="funnel, dedup, document lengths, quarantine")
    for stage in ("ingest", "dedup", "dedup-report", "tokenize", "signature", "plan"):
        data.add_argument(f"--{stage}", help=f"the {stage} JSON (left out: its charts are left out)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from workflow_scripts.report import charts

    if args.section == "plan":
        import pandas as pd

        from workflow_scripts.report import plan

        mixtures = {os.path.basename(m).removesuffix(".json"): read_json(m) for m in args.mixtures}
        configs = pd.read_csv(args.configs) if args.configs else None
        made = plan.charts(Plan.read(args.plan), mixtures, configs, args.excluded)
    else:
        from workflow_scripts.report import data

        made = data.charts(
            args.ingest, args.dedup, args.dedup_report, args.tokenize, args.signature, args.plan
        )
    charts.write_section(args.out_dir, TITLES[args.section], made, charts.read_captions(args.captions))
    if args.section == "plan" and not args.excluded:  # no output any more: an earlier run's chart goes
        for ext in (".png", ".csv"):
            Path(args.out_dir, f"excluded{ext}").unlink(missing_ok=True)
    print(f"{TITLES[args.section]}: {', '.join(c.name for c in made)} -> {args.out_dir}")
    return 0
