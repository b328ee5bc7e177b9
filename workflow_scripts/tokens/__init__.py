"""Stages 3-4, tokens. Reads the deduplicated (or ingested) shards; writes the SentencePiece model when none
is given (``train_tokenizer``), Megatron ``tokenized/{shard}_text_document.bin/.idx`` per shard with stats
and quarantine (``encode``: the model in ``tokenizer``, batches from ``reader``, documents built by
``framing``, SFT control tokens from ``sft``), and the count-named links ``..._dc=_sc=_tc=`` with the data
signature (``count``). ``inspection`` shows tokenized documents.
"""
