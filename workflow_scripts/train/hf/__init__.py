"""Hugging Face models in and out of the run (LLaMA-shaped; GPT-NeoX's and Megatron-LM's checkpoints).
Modules:

- ``start``: ``train.init_from.hf`` and ``train.export`` as the plan sees them (cheap: the rules import it),
- ``config``: a model's ``config.json`` as GPT-NeoX's model keys (no torch),
- ``model_tokenizer``: the model's tokenizer must be the data's,
- ``layout``: Hugging Face tensors <-> GPT-NeoX's, split for tensor parallelism,
- ``megatron_layout``: the reference model's tensors <-> Megatron-core's names (Megatron-LM's checkpoints),
- ``logit_check``: the same tokens through the source and the converted model,
- ``import_``: ``snakepack hf-import``, a Hugging Face folder as a GPT-NeoX or Megatron-LM checkpoint to
  start from,
- ``export``: ``snakepack hf-export``, a GPT-NeoX or Megatron-LM checkpoint as a Hugging Face folder.

``start``, ``config`` and ``model_tokenizer`` import no torch; the others do (``transformers`` only
when they run).
"""
