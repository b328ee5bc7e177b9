"""What the train rules look up, from plain values (rules/common.smk passes the paths its checkpoints give
and the wildcards' values): each pack's place in the chain, read from its keys file, the chain itself, what
a segment and a Hugging Face export wait for, and where an export's checkpoint is. Cheap: the Snakefile
imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.train_layout import FINETUNE_START, TrainLayout
from workflow_scripts.core.versioned import per_version
from workflow_scripts.train import checkpoint_dirs
from workflow_scripts.train.chain import Chain, Pack
from workflow_scripts.train.hf.start import export_steps
from workflow_scripts.train.settings import TrainSettings, runs_reference


@dataclass(frozen=True)
class TrainInputs:
    """The train rules' lookups for one run: ``merged`` is the merged packs' folder, ``config_ext`` the
    trainer configs' extension and ``checkpoints`` the run's checkpoint folder."""

    layout: TrainLayout
    train: TrainSettings
    sft: bool
    merged: str
    config_ext: str
    checkpoints: str
    _chains: dict[tuple[Pack, ...], Chain] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(
        cls, config: dict[str, Any], layout: TrainLayout, merged: str, config_ext: str, checkpoints: str
    ) -> TrainInputs:
        """From the run's config: its ``train`` section, and ``tokenize.mode`` (an SFT run or not)."""
        sft = config["tokenize"]["mode"] == "sft"
        return cls(layout, TrainSettings.from_config(config["train"]), sft, merged, config_ext, checkpoints)

    def pack(self, keys: str) -> Pack:
        """A pack's place in the chain (iterations, offset, cadence, segments), from its keys file (read once
        per version of it)."""
        return Pack.from_summary(keys, per_version(keys, read_json, keys)["summary"])

    def chain(self, packs: tuple[Pack, ...]) -> Chain:
        """The training chain of ``packs`` (built once for them: every segment's inputs ask for it)."""
        if packs not in self._chains:
            self._chains[packs] = Chain.build(packs, self.train, self.sft, self.layout)
        return self._chains[packs]

    def config_plan(self, plan: str, pack: str, keep: Callable[[str], Any] = str) -> Any:
        """The plan ``pack``'s trainer config reads, through ``keep`` (``ancient()``) once the pack has
        started training: a re-plan keeps such a pack (datapacks/started.py), so its config and segments
        stay."""
        return keep(plan) if self.layout.started(pack) else plan

    def segment(
        self, chain: Chain, pack: str, k: int, validation: Sequence[str], keep: Callable[[str], Any] = str
    ) -> dict[str, Any]:
        """Segment ``k`` of ``pack``'s inputs: the pack's keys, what it waits for in the chain, its data (the
        merged pack and the ``validation`` packs), the run's start (``train.finetune_from``) and, for a
        Megatron-LM pack's first segment that Megatron-LM itself trains (not the reference trainer, which
        builds its own index), its index caches (``train_data_cache``), the last three through
        ``keep`` (the rules' ``ancient()``: the same data remade does not retrain)."""
        data = [keep(f"{self.merged}/{p}/{p}.{ext}") for p in [pack, *validation] for ext in ("bin", "idx")]
        start = [keep(self.layout.file(FINETUNE_START))] if self.train.finetune_from else []
        previous = chain.waits_for(pack, k)
        megatron = self.train.trainer == "megatron" and not runs_reference(self.train.launch)
        cache = [keep(self.layout.data_cache(pack))] if megatron and k == 0 else []
        inputs = {"pack_keys": self.layout.keys(pack), "previous": previous, "data": data, "start": start}
        return inputs | ({"data_cache": cache} if cache else {})

    def exports(self, chain: Chain) -> dict[str, int]:
        """Each Hugging Face export's name and global step (``train.export``)."""
        ends = {p.name: p.end for p in chain.packs}
        return export_steps(
            ends, self.train.export_packs, self.train.export_milestones, self.train.milestones
        )

    def export_inputs(self, chain: Chain, step: int) -> dict[str, str]:
        """What the export of global step ``step`` waits for: the pack that reaches it, done, and its config
        (retention keeps pack ends and milestones)."""
        pack = next(p for p in chain.packs if p.end >= step)
        return {"done": self.layout.done(pack.name), "config": self.layout.config(pack.name, self.config_ext)}

    def checkpoint(self, step: int) -> str:
        """The run's checkpoint folder of global step ``step``."""
        return checkpoint_dirs.of(self.train.trainer).path(self.checkpoints, step)
