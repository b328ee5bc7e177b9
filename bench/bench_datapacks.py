"""Benchmark: writing a datapack straight from its sources, against ``cat`` of the same bytes.

Writes synthetic tokenized sources, plans one pack of about ``--pack-mb`` MB over them (the real planner,
index lengths only), then alternates ``--repeats`` times: ``cat`` of the sources' ``.bin`` into one file,
the same followed by an ``fsync`` of its output, and the pack writer (``packer.write_pack``: each source's
share copied in the kernel into the pack's one ``.bin``, its ``.idx`` from the lengths, both fsync'd and
renamed), in a rotating order, each after reading its inputs once (warm page cache; dirty pages flushed
before each run, untimed). Best time of each; MB = 10^6 bytes of ``.bin``. Goal: the pack at >= 0.8 x cat
with fsync of the same bytes, the same durability (the flush costs more than the copy itself); plain cat's
ratio is printed too. The pack's bytes are copied once (sources -> merged pack: no slice files between).
Figures also go to bench/results/datapacks.json. With ``--shuffle`` the plan reads each source in its
seeded order and the writer gathers those documents instead of copying ranges (figures in
datapacks_shuffled.json).

    .venv/bin/python bench/bench_datapacks.py                 # 6 sources, 1.2 GB, a 1 GB pack
    .venv/bin/python bench/bench_datapacks.py --pack-mb 200   # quicker
    .venv/bin/python bench/bench_datapacks.py --shuffle       # a shuffled pack
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import harness
import numpy as np

from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.indexed_dataset import IndexedDataset, bin_path
from workflow_scripts.datapacks.packer import write_pack
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import make_plan
from workflow_scripts.datapacks.settings import PlanSettings
from workflow_scripts.datapacks.specs import pack_spec

LANGS = ["en", "de", "fr", "ru", "zh", "ja"]
GOAL_RATIO = 0.8


def warm(paths: list[str]) -> None:
    """Read the inputs once so every timed copy starts from the page cache (this VM evicts cold pages)."""
    subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path(__file__).resolve().parent / "_work")
    parser.add_argument("--pack-mb", type=int, default=1000, help="size of the planned pack (MB of .bin)")
    parser.add_argument("--sources", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--shuffle", action="store_true", help="plan and slice a shuffled pack")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_datapacks_", dir=args.workdir))
    rng = np.random.default_rng(0)
    dtype = np.dtype(np.uint16)
    try:
        per_source = int(args.pack_mb * 1.2 * harness.MB) // args.sources
        signature = []
        for i in range(args.sources):
            name = f"{LANGS[i % len(LANGS)]}_web_s{i}_split_0000_text_document"
            harness.make_input(work / name, per_source, dtype, rng)
            ds = IndexedDataset(work / name)
            signature.append(
                {
                    "prefix": str(work / name),
                    "name": name,
                    "lang": name[:2],
                    "domain": "web",
                    "tokens": ds.num_tokens,
                }
            )
        src_bytes = sum(os.path.getsize(bin_path(e["prefix"])) for e in signature)
        config = {
            "seed": 1,
            "training": {"seq_length": 4096, "global_batch_size": 64, "epoch_rule": "neox"},
            "datapacks": {
                "max_tokens_per_pack": 10**12,
                "shuffle": args.shuffle,
                "phases": [{"name": "main", "tokens": args.pack_mb * harness.MB // 2, "mixture": "m"}],
            },
            "mixtures": {"m": {}},
        }
        t = time.perf_counter()
        raw = make_plan(PlanSettings.from_config(config), signature, lambda p: IndexedDataset(p).lengths)
        plan_s = time.perf_counter() - t
        plan = Plan.from_dict(raw)
        pack, spec = plan.packs[0], pack_spec(plan, 0, {})
        pack_bytes = pack.tokens * dtype.itemsize
        print(
            f"sources: {args.sources} x {per_source / 1e6:.0f} MB; pack {pack.name}: "
            f"{pack_bytes / 1e6:.0f} MB, {pack.documents} documents, {len(spec['slices'])} sources; "
            f"planned in {plan_s:.2f} s"
        )

        cat_out, merged = work / "cat.bin", work / "merged" / pack.name

        def run_cat() -> None:
            with open(cat_out, "wb") as f:
                subprocess.run(["cat", *(bin_path(e["prefix"]) for e in signature)], stdout=f, check=True)

        def run_pack() -> None:
            write_pack(spec, merged)

        def clear(name: str) -> None:
            """Remove a step's previous output outside the timing (freeing 1 GB of blocks takes a while)."""
            for path in (
                [cat_out] if name.startswith("cat") else [Path(f"{merged}{e}") for e in (".bin", ".idx")]
            ):
                path.unlink(missing_ok=True)

        sources = [bin_path(e["prefix"]) for e in signature]
        nbytes = {"cat": src_bytes, "cat_fsync": src_bytes, "pack": pack_bytes}
        steps = {"cat": run_cat, "cat_fsync": run_cat, "pack": run_pack}
        times: dict[str, list[float]] = {name: [] for name in steps}
        for r, name in harness.rounds(list(steps), args.repeats, rotate=True):
            clear(name)
            warm(sources)
            seconds = harness.timed(steps[name], cat_out if name == "cat_fsync" else None)
            times[name].append(seconds)
            harness.run_line(r, name, seconds, nbytes[name])
        verify(merged)
        best = harness.best(times)
        rates = {name: nbytes[name] / s / harness.MB for name, s in best.items()}
        plain = harness.compare("pack", rates["pack"], "cat", rates["cat"])
        ratio = harness.compare("pack", rates["pack"], "cat with fsync", rates["cat_fsync"])
        met = ratio >= GOAL_RATIO
        peak_mib = harness.peak_rss_mib()
        print(
            f"goal pack >= {GOAL_RATIO}x cat with fsync: {'met' if met else 'NOT met'}; "
            f"peak RSS {peak_mib:.0f} MB (indexes{' and orders' if args.shuffle else ''} only: "
            f"{pack.documents} documents)"
        )
        harness.write_results(
            "datapacks_shuffled" if args.shuffle else "datapacks",
            {
                "args": vars(args),
                "sources_mb": round(src_bytes / harness.MB, 1),
                "pack": {
                    "name": pack.name,
                    "mb": round(pack_bytes / harness.MB, 1),
                    "documents": pack.documents,
                    "sources": len(spec["slices"]),
                },
                "plan_s": round(plan_s, 3),
                "runs_s": {name: [round(t, 4) for t in ts] for name, ts in times.items()},
                "best_mb_s": {name: round(rate, 1) for name, rate in rates.items()},
                "ratios_vs_cat_fsync": {"pack": round(ratio, 3)},
                "ratios_vs_cat": {"pack": round(plain, 3)},
                "goal_ratio": GOAL_RATIO,
                "goal_met": met,
                "peak_rss_mib": round(peak_mib, 1),
            },
        )
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
