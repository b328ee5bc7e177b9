"""``snakepack train-reference``: train one pack's GPT-NeoX config as a GPT-NeoX job would, on CPUs or GPUs.

Usage::

    snakepack train-reference --config results/train/main_1/main_1.yml [--out DIR] [--threads N]
    snakepack train-reference --config C --eval-only          # evaluate the latest checkpoint
    snakepack train-reference --build-ops                     # build DeepSpeed's CPU op into the cache
    torchrun --nproc_per_node 2 -m workflow_scripts.train.reference --config C   # data parallel

The pack's samples are GPT-NeoX's (``data``): local iteration ``i`` reads samples ``[i x B, (i + 1) x B)`` of
the shuffled index, each rank its slice of each micro batch. Iterations are global (``iteration_offset`` +
local). A run resumes from ``latest`` in ``load`` with local iteration = its step - ``iteration_offset`` (the
LUMI fork's rule; it must be >= 0) and restores the data position, optimizer and RNG, so its losses are an
uninterrupted run's; ``finetune: true`` loads the weights only (fresh optimizer, local iteration 0) and is
refused once ``latest`` is the run's own checkpoint (seed 003). It saves ``global_stepN`` (Megatron-LM:
``iter_NNNNNNN``, ``torch_dist``; ``checkpoints``) every ``checkpoint_factor`` global iterations, at
``extra_save_iters``, when it exits at ``exit_interval`` (counted in local iterations, as the fork's loop) and
at the pack's end; on SIGTERM or SIGUSR1 it finishes the iteration, saves and exits 0. A pack whose ``latest``
is already at its end trains nothing, checks the checkpoint and exits 0. Keys the trainer does not implement
are listed once at start. Outputs beside the checkpoints are described in ``metrics``; the last line printed
is the segment's summary (tokens/s, peak memory, why it stopped). ``SNAKEPACK_REFERENCE_PAUSE_AT=N`` makes it
stop itself after global iteration N (tests preempt a segment there).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workflow_scripts.core import train_layout
from workflow_scripts.train import checkpoint_dirs
from workflow_scripts.train.reference import data
from workflow_scripts.train.reference import engine as dist_engine
from workflow_scripts.train.reference.config import load_config, tokenizer_ids
from workflow_scripts.train.reference.metrics import Metrics
from workflow_scripts.train.reference.run_config import RunConfig


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", nargs="+", help="GPT-NeoX YAML config(s); later files override")
    parser.add_argument("--out", help="output folder (default: reference/{config name} beside `save`)")
    parser.add_argument("--eval-only", action="store_true", help="evaluate the latest checkpoint and exit")
    parser.add_argument(
        "--tag", help="--eval-only: the checkpoint to evaluate (global_stepN; default latest)"
    )
    parser.add_argument("--eval-out", help="--eval-only: also write the evaluation to this JSON file")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument(
        "--deterministic", action="store_true", help="torch.use_deterministic_algorithms (bitwise reruns)"
    )
    parser.add_argument("--build-ops", action="store_true", help="build DeepSpeed's CPU op once and exit")
    args = parser.parse_args(argv)
    if not args.build_ops and not args.config:
        parser.error("--config is required")
    return args


class Stop:
    """The signals that finish the iteration, save and exit 0 (GPT-NeoX: SIGTERM and SIGUSR1; Megatron-LM:
    its ``--exit-signal`` with ``--exit-signal-handler``, none without); any other stops the run unsaved."""

    def __init__(self, signals: Sequence[int]) -> None:
        self.signals = tuple(signals)
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Stop:
        for s in self.signals:
            self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum


def default_out(cfg: RunConfig) -> str:
    """``reference/{config name}`` beside the ``save`` folder (beside the config without one)."""
    anchor = cfg.save or cfg.load
    base = os.path.dirname(os.path.abspath(anchor.rstrip("/"))) if anchor else os.path.dirname(cfg.path)
    return train_layout.reference_run(base, cfg.name)


def say(dist: Any, text: str) -> None:
    if dist is None or dist.main:
        print(text, flush=True)


@dataclass
class Trainer:
    """A set-up run: config, process group, DeepSpeed engine, data and outputs."""

    cfg: RunConfig
    dist: Any  # engine.Dist
    engine: Any  # deepspeed.DeepSpeedEngine
    optimizer: Any
    train: data.Blend | None
    valid: data.Blend | None
    switches: Any  # masks.Switches
    assistant_id: int | None
    metrics: Metrics
    valid_position: int = 0  # Megatron-LM's consumed_valid_samples: where the next evaluation reads

    @property
    def megatron(self) -> bool:
        return self.cfg.trainer == "megatron"

    def micro_batch(self, dataset: data.Blend, base: int, j: int) -> Any:
        from workflow_scripts.train.reference.masks import make_batch

        cfg, d = self.cfg, self.dist
        start = base + j * cfg.micro * d.world_size + d.rank * cfg.micro
        samples, lengths = dataset.batch(range(start, start + cfg.micro))
        return make_batch(samples, lengths, cfg.eod_id, self.switches, self.assistant_id).to(d.device)

    def loss(self, batch: Any) -> tuple[Any, float, float]:
        """The micro batch's mean loss (the tensor to back-propagate) and its loss sum and token count."""
        from workflow_scripts.train.reference.model import masked_mean, token_losses

        logits = self.engine(batch.tokens, batch.attention_mask)
        losses = token_losses(logits, batch.labels)
        total = float((losses.detach() * batch.loss_mask).sum().item())
        return masked_mean(losses, batch.loss_mask), total, float(batch.loss_mask.sum().item())

    def reported(self, parts: list[tuple[float, float, float]]) -> float:
        """The loss of micro batches' (mean, sum, tokens) over every rank: GPT-NeoX's mean of the means;
        Megatron-LM's sum over the tokens (``loss_func``'s ``lm loss`` pairs reduced in ``train_step`` and
        ``evaluate``)."""
        device = self.dist.device
        if not self.megatron:
            return dist_engine.mean_over_ranks(sum(p[0] for p in parts) / len(parts), device)
        total = dist_engine.mean_over_ranks(sum(p[1] for p in parts), device)
        tokens = dist_engine.mean_over_ranks(sum(p[2] for p in parts), device)
        return total / max(tokens, 1e-30)

    def train_step(self, local: int, lr: float, wd: float | None) -> float:
        """One iteration (all micro batches) at ``lr`` and weight decay ``wd`` (None: the groups' own); the
        loss averaged over them and the ranks."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
            if wd is not None:
                group["weight_decay"] = wd * group["wd_mult"]
        parts = []
        for j in range(self.cfg.accumulation):
            loss, total, tokens = self.loss(self.micro_batch(self.train, local * self.cfg.batch, j))
            self.engine.backward(loss)
            self.engine.step()
            parts.append((float(loss.detach().item()), total, tokens))
        return self.reported(parts)

    def evaluate(self) -> dict[str, Any]:
        """Validation loss and perplexity over ``eval_iters`` batches of the validation blend: GPT-NeoX's
        first ones (the same samples at every evaluation, so that the curve compares like with like), the
        mean of the micro batches' means; Megatron-LM's from ``consumed_valid_samples`` on (each evaluation
        reads the next ones), over the tokens."""
        import torch

        start = self.valid_position if self.megatron else 0
        iters = self.cfg.eval_iters
        if self.megatron and start + iters * self.cfg.batch > len(self.valid):
            raise ValueError(
                f"the validation blend holds {len(self.valid)} samples, but this evaluation reads "
                f"{iters} x {self.cfg.batch} from consumed_valid_samples {start}: Megatron-LM's would run "
                "out too (StopIteration; give --valid-data-path weights: W1 P1 W2 P2 ...)"
            )
        # GPT-NeoX's dataset length (one sample short of its index) can leave a tiny validation blend
        # fewer samples than eval_iters x batch asks: evaluate the whole batches it has
        iters = min(iters, len(self.valid) // self.cfg.batch)
        if not iters:
            raise ValueError(
                f"the validation data holds {len(self.valid)} samples, fewer than one batch "
                f"({self.cfg.batch}): hold out more (datapacks.validation_tokens)"
            )
        module = self.engine.module
        module.eval()
        parts = []
        with torch.no_grad():
            for it in range(iters):
                for j in range(self.cfg.accumulation):
                    batch = self.micro_batch(self.valid, start + it * self.cfg.batch, j)
                    loss, total, tokens = self.loss(batch)
                    parts.append((float(loss.item()), total, tokens))
        module.train()
        loss = self.reported(parts)
        if self.megatron:
            self.valid_position = start + iters * self.cfg.batch
        return {
            "valid_loss": loss,
            "valid_ppl": math.exp(min(20.0, loss)),
            "samples": iters * self.cfg.batch,
        }


def _announce(cfg: RunConfig, dist: Any, specs: list[data.IndexSpec], built: list[bool], model: Any) -> None:
    params = sum(p.numel() for p in model.parameters())
    m = cfg.model
    say(
        dist,
        f"train-reference: pack {cfg.name}: global iterations {cfg.offset} -> {cfg.end} (train_iters "
        f"{cfg.train_iters}, iteration_offset {cfg.offset}); batch {cfg.batch} = micro {cfg.micro} x "
        f"accumulation {cfg.accumulation} x data parallel {dist.world_size}; seq_length {cfg.seq_length}; "
        f"GPT {m.num_layers} layers x {m.hidden_size} ({params:,} parameters); {dist.device} {cfg.precision} "
        f"{dist.backend} ZeRO {cfg.zero_stage}",
    )
    for spec, new in zip(specs, built, strict=True):
        epochs = "" if spec.pack_impl != "packed" else f", {spec.epochs()} epoch(s)"
        say(
            dist,
            f"  {spec.name} {spec.prefix}: {spec.tokens:,} tokens, {spec.num_samples:,} samples asked"
            f"{epochs}; index {'built' if new else 'reused'}: {os.path.basename(spec.stem)}_*_idx.npy",
        )
    if cfg.not_implemented:
        say(dist, "  not implemented: " + "; ".join(cfg.not_implemented))


def setup(args: argparse.Namespace, cfg: RunConfig) -> Trainer:
    """The process group, the index mappings (built by rank 0), the model and the DeepSpeed engine."""
    import numpy as np
    import torch

    from workflow_scripts.train.reference.masks import Switches
    from workflow_scripts.train.reference.model import GPT

    switches = Switches.from_env()
    train_specs = [] if args.eval_only else data.run_train_specs(cfg)
    valid_specs = data.run_valid_specs(cfg)
    assistant = None
    if switches.sft:
        assistant = tokenizer_ids(cfg.vocab_file, True, *cfg.tokenizer, megatron=cfg.trainer == "megatron")[2]
    dist = dist_engine.init_distributed(cfg.backend)
    specs = train_specs + valid_specs
    built = [spec.ensure() if dist.main else False for spec in specs]
    dist_engine.barrier()
    train = valid = None
    if train_specs:
        datasets = [data.GPTDataset(s) for s in train_specs]
        train = data.Blend(datasets, cfg.train_weights, cfg.train_iters * cfg.batch)
    if valid_specs:
        valid = data.run_valid(cfg, [data.GPTDataset(s) for s in valid_specs])
    random.seed(cfg.seed)  # saved in each checkpoint with the others: the same seed, the same bytes
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    model = GPT(cfg.model).to(dist.device)
    _announce(cfg, dist, specs, built, model)
    if switches.sft or switches.document_attention:
        say(dist, f"  SFT_ENABLED={int(switches.sft)} CURSE_ATTENTION={int(switches.document_attention)}")
    optimizer = torch.optim.AdamW(
        model.parameter_groups(cfg.weight_decay), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps
    )
    deepspeed = dist_engine.import_deepspeed()
    ds_config = dist_engine.deepspeed_config(
        cfg.batch,
        cfg.micro,
        cfg.accumulation,
        cfg.clipping,
        cfg.zero_stage,
        cfg.precision,
        sum(p.numel() for p in model.parameters()),
    )
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config)
    metrics = Metrics(args.out or default_out(cfg), enabled=dist.main)
    return Trainer(cfg, dist, engine, optimizer, train, valid, switches, assistant, metrics)


def resume(trainer: Trainer) -> tuple[int, Any]:
    """Load ``latest`` from ``load`` as the config says; return (local iteration, LR schedule: Megatron-LM's
    over the whole run for its arguments, GPT-NeoX's for the pack otherwise)."""
    from workflow_scripts.train.reference import checkpoints
    from workflow_scripts.train.reference.lr import Schedule

    cfg = trainer.cfg
    layout = checkpoint_dirs.of(cfg.trainer)
    schedule = cfg.megatron_schedule or Schedule.of(
        cfg.lr, cfg.min_lr, cfg.warmup, cfg.train_iters, cfg.decay_style
    )
    step = checkpoints.latest_step(layout, cfg.load)
    where = f"load {cfg.load}"
    if step is None:
        if cfg.finetune:
            raise checkpoints.CheckpointError(
                f"finetune: true, but {where} has no latest checkpoint to start from"
            )
        if cfg.offset:
            raise checkpoints.CheckpointError(
                f"iteration_offset {cfg.offset}, but {where} has no latest checkpoint: this pack continues "
                "one that ends there (train it first, or check `load`)"
            )
        return 0, schedule
    if cfg.finetune:
        # GPT-NeoX keeps the start's iteration (the offset); Megatron-LM restarts at 0, so there the start
        # is told from the run's own checkpoints by being the link finetune-start made
        own = step != cfg.offset if cfg.trainer == "neox" else not os.path.islink(layout.path(cfg.load, step))
        if own:
            raise checkpoints.CheckpointError(
                f"finetune: true, but latest in {cfg.load} is {layout.tag(step)}, a checkpoint the run saved "
                "itself, not the starting checkpoint: finetune must be false now (seed 003: "
                "`finetune_flag`), or the optimizer is reset again"
                + ("" if cfg.trainer == "neox" else " and Megatron-LM's iteration restarts at 0")
            )
        checkpoints.load(cfg, trainer.engine, cfg.load, step, weights_only=True)
        say(trainer.dist, f"  finetune: weights of {layout.tag(step)}, fresh optimizer, local iteration 0")
        return 0, schedule
    local = step - cfg.offset
    if local < 0:
        raise checkpoints.CheckpointError(
            f"latest in {cfg.load} is {layout.tag(step)}, before this pack's iteration_offset {cfg.offset}: "
            "the previous pack has not reached its end"
        )
    if local > cfg.train_iters:
        raise checkpoints.CheckpointError(
            f"latest in {cfg.load} is {layout.tag(step)}, past this pack's end {cfg.end} "
            f"(iteration_offset {cfg.offset} + train_iters {cfg.train_iters}): a later pack's checkpoint?"
        )
    state = checkpoints.load(cfg, trainer.engine, cfg.load, step, weights_only=False)
    if state is None and cfg.trainer == "megatron":
        say(trainer.dist, f"  {layout.tag(step)} has no {checkpoints.SIDE}/: its weights, a fresh optimizer")
        trainer.valid_position = checkpoints.megatron_consumed_valid(layout.path(cfg.load, step))
    if state is not None:
        if state["iteration"] != step:
            raise checkpoints.CheckpointError(f"{layout.tag(step)} says it is iteration {state['iteration']}")
        same_pack = state["train_data_paths"] == cfg.train_paths
        if same_pack and state["local_iteration"] != local:
            raise checkpoints.CheckpointError(
                f"{layout.tag(step)} is local iteration {state['local_iteration']} of this pack (offset "
                f"{state['iteration_offset']}), but iteration_offset {cfg.offset} makes it {local}"
            )
        if not same_pack and local != 0:
            raise checkpoints.CheckpointError(
                f"{layout.tag(step)} was saved by pack {state['pack']}, but this pack starts at {cfg.offset}"
            )
        checkpoints.set_rng_state(state["rng"])
        trainer.valid_position = int(state.get("consumed_valid_samples", 0))
        if cfg.megatron_schedule:  # load_checkpoint loads the scheduler: its samples, its values checked
            schedule = cfg.megatron_schedule.resumed(state["lr_schedule"], local, cfg.scheduler_from)
        elif not cfg.override_lr_scheduler and state.get("lr_schedule"):
            schedule = Schedule.from_state(state["lr_schedule"])
    v = cfg.megatron_validation
    if v is not None and v.by_iterations and step and not trainer.valid_position and cfg.eval_interval:
        # Megatron-LM's data loaders: a run of --train-iters whose checkpoint counted no validation samples
        trainer.valid_position = step // cfg.eval_interval * cfg.eval_iters * cfg.batch
    say(trainer.dist, f"  resumed from {layout.tag(step)}: local iteration {local} of {cfg.train_iters}")
    return local, schedule


def trainer_state(cfg: RunConfig, local: int, schedule: Any, valid_position: int = 0) -> dict[str, Any]:
    from workflow_scripts.train.reference import checkpoints

    return {
        "iteration": cfg.offset + local,
        "local_iteration": local,
        "iteration_offset": cfg.offset,
        "train_iters": cfg.train_iters,
        "consumed_samples": local * cfg.batch,
        "consumed_valid_samples": valid_position,
        "pack": cfg.name,
        "train_data_paths": cfg.train_paths,
        "lr_schedule": schedule.state(local),
        "rng": checkpoints.rng_state(),
    }


PAUSE_AT = "SNAKEPACK_REFERENCE_PAUSE_AT"
"""A test's hook: the trainer stops itself (SIGSTOP) once it has trained (and saved, if due) this global
iteration, so a test can preempt a segment mid-way however fast the machine trains."""


def save_due(cfg: RunConfig, local: int) -> bool:
    """Checkpoint iterations: global multiples of ``checkpoint_factor``, ``extra_save_iters``, the end."""
    step = cfg.offset + local
    return (
        local == cfg.train_iters
        or (cfg.checkpoint_factor is not None and step % cfg.checkpoint_factor == 0)
        or step in cfg.extra_save_iters
    )


def exit_due(cfg: RunConfig, local: int) -> bool:
    """Where a segment exits before the pack's end: GPT-NeoX (the LUMI fork) counts ``exit_interval`` in
    local iterations; Megatron-LM in global ones, and exits at every phase transition too."""
    if local >= cfg.train_iters:
        return False
    if cfg.trainer == "neox":
        return cfg.exit_interval is not None and local % cfg.exit_interval == 0
    step = cfg.offset + local
    return (cfg.exit_interval is not None and step % cfg.exit_interval == 0) or step in cfg.phase_transitions


def run_training(trainer: Trainer, stop: Stop) -> int:
    from workflow_scripts.train.reference import checkpoints

    cfg, dist, metrics = trainer.cfg, trainer.dist, trainer.metrics
    layout = checkpoint_dirs.of(cfg.trainer)
    local, schedule = resume(trainer)
    first = cfg.offset + local
    metrics.resume(first)
    tokens_per_iter = cfg.batch * cfg.seq_length
    start, train_seconds, done, reason = time.perf_counter(), 0.0, 0, "complete"
    evaluated = None
    pause_at = int(os.environ.get(PAUSE_AT, "-1"))
    if local == cfg.train_iters:
        reason = "nothing to train"
        say(
            dist,
            f"  pack {cfg.name} is complete at {layout.tag(first)} (checkpoint verified): nothing to train",
        )
    while local < cfg.train_iters:
        lr = schedule.lr(local)
        t0 = time.perf_counter()
        loss = trainer.train_step(local, lr, schedule.wd(local))
        seconds = time.perf_counter() - t0
        train_seconds += seconds
        local, done = local + 1, done + 1
        step = cfg.offset + local
        metrics.step(step, loss, lr, tokens_per_iter / seconds)
        if local % cfg.log_interval == 0 or local == cfg.train_iters:
            say(
                dist,
                f"iteration {step:>8d}/{cfg.end} | loss {loss:.6f} | lr {lr:.4e} | "
                f"{tokens_per_iter / seconds:.0f} tokens/s",
            )
        stopping = dist_engine.any_rank(stop.signum is not None, dist.device)
        exiting = exit_due(cfg, local)
        eval_due = trainer.valid is not None and cfg.eval_interval and step % cfg.eval_interval == 0
        if eval_due and trainer.megatron:  # Megatron-LM evaluates before it saves or exits: the checkpoint's
            evaluated = step  # consumed_valid_samples counts this evaluation
            evaluate(trainer, step)
        if cfg.save and (save_due(cfg, local) or exiting or stopping):
            state = trainer_state(cfg, local, schedule, trainer.valid_position)
            path = checkpoints.save(cfg, trainer.engine, step, state, dist.main)
            say(dist, f"  saved {path}")
            if cfg.keep_last and dist.main:
                for old in checkpoints.delete_oldest(layout, cfg.save, cfg.keep_last):
                    say(dist, f"  keep_last_n_checkpoints {cfg.keep_last}: deleted {old}")
        if step == pause_at:
            say(dist, f"  {PAUSE_AT} {pause_at}: stopped (SIGSTOP) until SIGCONT")
            os.kill(os.getpid(), signal.SIGSTOP)
        if stopping:
            reason = f"signal {signal.Signals(stop.signum).name}" if stop.signum else "signal on another rank"
            break
        if eval_due and not trainer.megatron:
            evaluated = step
            evaluate(trainer, step)
        if exiting:
            reason = (
                f"exit_interval {cfg.exit_interval}"
                if step not in cfg.phase_transitions
                else "phase transition"
            )
            break
    last = cfg.offset + local
    if local == cfg.train_iters and done and trainer.valid is not None and evaluated != last:
        evaluate(trainer, last)
    summarize(trainer, first, last, done, train_seconds, time.perf_counter() - start, reason)
    return 0


def evaluate(trainer: Trainer, step: int) -> None:
    record = {"iteration": step, **trainer.evaluate()}
    trainer.metrics.evaluation(record)
    loss, ppl = record["valid_loss"], record["valid_ppl"]
    say(trainer.dist, f"  validation at {step}: loss {loss:.6f} ppl {ppl:.3f}")


def summarize(
    trainer: Trainer, first: int, last: int, done: int, train_s: float, wall_s: float, reason: str
) -> None:
    """The segment's summary: printed as one line (rank 0) and written as JSON; the loss plot redrawn."""
    from workflow_scripts.train.reference import checkpoints

    cfg, dist = trainer.cfg, trainer.dist
    tokens = done * cfg.batch * cfg.seq_length
    layout = checkpoint_dirs.of(cfg.trainer)
    saved = checkpoints.latest_step(layout, cfg.save)
    memory = dist_engine.peak_memory(dist.device)
    tps = tokens / train_s if train_s else 0.0
    summary = {
        "pack": cfg.name,
        "config": os.path.abspath(cfg.path),
        "first_step": first,
        "last_step": last,
        "iterations": done,
        "tokens": tokens,
        "train_seconds": round(train_s, 3),
        "wall_seconds": round(wall_s, 3),
        "tokens_per_s": round(tps, 1),
        "exit": reason,
        "world_size": dist.world_size,
        "device": str(dist.device),
        "precision": cfg.precision,
        "latest": None if saved is None else layout.tag(saved),
        **memory,
    }
    trainer.metrics.segment(summary)
    if done:
        trainer.metrics.plot(f"{cfg.name}: global iterations {cfg.offset}-{cfg.end}")
    gpu = f", GPU {memory['gpu_peak_bytes'] / 2**20:.0f} MiB" if "gpu_peak_bytes" in memory else ""
    say(
        dist,
        f"segment {cfg.name} {layout.tag(first)} -> {layout.tag(last)}: {done} iterations, {tokens:,} tokens "
        f"in {train_s:.2f} s = {tps:,.0f} tokens/s; peak memory RSS "
        f"{memory['rss_peak_bytes'] / 2**20:.0f} MiB{gpu}; exit: {reason}",
    )


def run_eval_only(trainer: Trainer, tag: str | None, out: str | None) -> int:
    from workflow_scripts.core.fsio import write_json
    from workflow_scripts.train.reference import checkpoints

    cfg = trainer.cfg
    layout = checkpoint_dirs.of(cfg.trainer)
    step = checkpoints.step_of(layout, tag) if tag else checkpoints.latest_step(layout, cfg.load)
    if step is None:
        raise checkpoints.CheckpointError(f"--eval-only: no latest checkpoint in `load` ({cfg.load})")
    if trainer.valid is None:
        raise checkpoints.CheckpointError("--eval-only: the config has no valid_data_paths (or eval_iters 0)")
    checkpoints.load(cfg, trainer.engine, cfg.load, step, weights_only=True)
    record = {"iteration": step, **trainer.evaluate()}
    trainer.metrics.evaluation(record, standalone=True)
    if out and trainer.dist.main:
        write_json(out, {"pack": cfg.name, "checkpoint": layout.tag(step), **record})
    say(trainer.dist, json.dumps(record, sort_keys=True))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.build_ops:
        print(f"DeepSpeed's CPU op is built in {dist_engine.build_ops()}", flush=True)
        return 0
    torch = dist_engine.import_torch()
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    if args.threads:
        torch.set_num_threads(args.threads)
    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    cfg = load_config(args.config, dist_engine.world_size(), bf16=bf16, evaluation=args.eval_only)
    with Stop(cfg.save_signals) as stop:
        trainer = setup(args, cfg)
        try:
            return (
                run_eval_only(trainer, args.tag, args.eval_out)
                if args.eval_only
                else run_training(trainer, stop)
            )
        finally:
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
