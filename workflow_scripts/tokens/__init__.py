"""Stages 3-4, tokens. Reads the deduplicated (or ingested) shards; writes the tokenizer when none is given
(``train_tokenizer``: a SentencePiece model or a byte-level BPE ``tokenizer.json``), Megatron
``tokenized/{shard}_text_document.bin/.idx`` per shard with stats and quarantine (``encode``: the stage
loop, batches from ``reader``, documents built by ``framing``, SFT control tokens from ``sft``, the
tokenizer and its encoder from ``engines``), and the count-named links ``..._dc=_sc=_tc=`` with the data
signature (``count``).

- ``kinds``: which tokenizer a config or command names (a SentencePiece model, a ``tokenizer.json`` or a
  GPT-2 pair), read without loading it; ``model_proto``: a SentencePiece model's options, read from its
  proto;
- ``engines``: the tokenizers and their encoders behind one interface (``engines.choose`` picks one);
- ``settings``: the stage's settings; ``sources``: configured ``tokenized_sources`` as imported prefixes;
- ``imported``: a ``.bin/.idx`` made elsewhere, verified and linked for the count stage;
- ``ledger``: each tokenized document's raw file, line and content hash (``{prefix}.ledger.npz``), for
  lineage;
- ``inspection``: tokenized documents shown as text, pieces and ids; ``memory``: the stage's reuse of freed
  memory (glibc's ``mallopt``);
- ``_ids``, ``_jsonl``, ``_unitmemo``: the compiled parts (``core.compiled``).
"""
