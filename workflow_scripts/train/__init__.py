"""Stage 7, train: per-pack trainer configs from the plan, the training chain run as resumable Slurm segments,
models in and out, and a reference trainer. Reads ``plan.json`` and ``merged/``; writes the train tree of
``core/train_layout.py``. Rooms and modules:

- ``configs/``: each pack's trainer config (``snakepack train-config``), one module per trainer,
- ``lint``: a config against the trainer's own keys (``trainer_keys/``); ``summary``: the packs' table,
- ``trainer_tokenizers``: each trainer's tokenizer class for the data's tokenizer, and the EOD it takes,
- ``sft``: SFT packs' iterations counted in ``k_bin_packed`` bins,
- ``settings``: the ``train`` section, typed; ``job_request``: what a training job asks Slurm for,
- ``chain``: the training chain as data (packs, segments, evaluations, retention), read by the rules through
  ``rule_inputs`` (what a segment or an export waits for),
- ``segment``: one segment as a Slurm job and its record; ``launch_env``: the job's nodes and tasks, asked of
  Slurm, for a launch the executor left without them; ``checkpoint_dirs``: the run's checkpoint folder;
  ``megatron_checkpoint``: Megatron-LM's ``torch_dist`` folders, written and read without Megatron;
  ``finetune``: a start from a checkpoint; ``megatron_cpu``: Megatron-LM's own pretrain_gpt.py on CPUs
  (device stand-ins, config/train/megatron-cpu.yaml); ``progress_lines``: the trainers' printed losses,
- ``data_cache``: a Megatron-LM pack's index caches built on a CPU before its first segment
  (``snakepack train-data-cache``; ``megatron_cache_build`` runs in Megatron-LM's Python),
- ``checkpoint_eval``, ``retention``, ``finished``, ``curve``: after each segment: evaluate, prune, check the
  pack's end, the loss curve,
- ``detach``: the chain as sbatch jobs; ``slurm``: what Slurm says about jobs; ``status``: where the training
  stands,
- ``hf/``: Hugging Face models in and out (``train.init_from.hf``, ``train.export``),
- ``reference/``: the reference torch + DeepSpeed trainer (``snakepack train-reference``).
"""
