"""The tokenizers and their encoders, behind one interface (``base``): ``Tokenizer`` (token lookup, the EOD
rule, long documents cut into pieces) and ``Encoder`` (a batch of texts or their UTF-8 in; ids, lengths and
the documents left to the library out), the one protocol the tokenize loop talks to. ``choose`` is the one
place an encoder is picked.

- ``sp_tokenizer``: a SentencePiece model and SentencePiece's batched encode;
- ``hf_tokenizer``: a ``tokenizer.json`` or GPT-2 pair and the ``tokenizers`` library's batched encode;
- ``byte_engines``: fastokens and gigatoken over a byte-level tokenizer (checked on a probe, documents with
  unassigned code points left to the library); ``sp_gigatoken``: gigatoken over a SentencePiece BPE model;
- ``unit_memo``: the compiled unit memo, wrapped once; ``sp_memo`` and ``byte_memo``: it as the encoder of a
  SentencePiece model and of a byte-level tokenizer, where its plan says it is exact;
- ``probes``: the texts every engine is checked on, and the code points left unassigned; ``ids``: the
  compiled passes over a batch's ids and the batch helpers the encoders share.
"""
