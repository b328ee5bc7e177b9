"""A small, real reference trainer (torch + DeepSpeed) for the per-pack GPT-NeoX and Megatron-LM configs.

``snakepack train-reference --config results/train/{pack}/{pack}.yml`` trains a decoder-only GPT of the
config's size on the config's merged pack exactly as its trainer reads it (GPT-NeoX's packed sample index,
cached beside the pack under GPT-NeoX's file names; the LUMI fork's ``k_bin_packed`` for SFT; Megatron-LM's
``GPTDataset`` order for a Megatron-LM arguments file), with the
config's batch, ``train_iters``, ``iteration_offset``, LR schedule, checkpoint cadence and exits, and the
checkpoints of the config's trainer (GPT-NeoX's DeepSpeed ``global_stepN`` + ``latest``, or Megatron-LM's
``torch_dist`` ``iter_NNNNNNN`` + ``latest_checkpointed_iteration.txt``). It is as strict as the trainers:
duplicate and unknown keys are refused. It refuses a ``train_iters`` that would read a pretraining pack twice.
Modules:

- ``config``: ``load_config``: either trainer's config read (by the next two) and checked alike, the keys
  implemented and the ones not,
- ``neox_config``: GPT-NeoX's YAML files, merged as ``NeoXArgs.from_ymls`` merges them,
- ``megatron_config``: a Megatron-LM arguments file, mapped onto GPT-NeoX's keys,
- ``megatron_model``: its model flags, read as Megatron-LM builds the model (what it does not build refused),
- ``run_config``: what a run reads (``RunConfig``, ``ModelConfig``) and ``ConfigError``,
- ``data``: GPT-NeoX's and Megatron-LM's index mappings (doc, sample, shuffle) and the datasets over the
  ``.bin`` memmap,
- ``masks``: SFT loss masking outside assistant spans and per-document attention (the LUMI fork's switches),
- ``model``: the GPT in plain torch,
- ``lr``: GPT-NeoX's ``AnnealingLR`` schedule,
- ``engine``: DeepSpeed import, distributed start-up and the DeepSpeed config,
- ``checkpoints``: save, load (GPT-NeoX's DeepSpeed files, Megatron-LM's ``torch_dist``), ``latest``, data
  position and RNG state,
- ``metrics``: loss curve (CSV, PNG), evaluation JSON lines, the segment summary,
- ``train``: the command (training, resume, signals, ``--eval-only``).

Nothing here is imported when the Snakefile is parsed; torch and DeepSpeed are imported only when training.
"""
