"""Stages 5-6, datapacks. Reads the data signature and the tokenized indexes; writes named mixtures
(``mixture``), the plan of phases and packs with exact document ranges and single-epoch ``train_iters``
(``planner``, ``iterations``; ``limits`` refuses a plan that breaks its limits; ``plan_files`` writes
``plan.json`` with its table (``plan_table``: a row per slice and per source) and ``plan.csv/.md``, ``plan``
reads it as a typed ``Plan``, ``pack_index`` is what the DAG reads of it; ``started`` the packs whose training
started, which a new plan keeps; ``exclude`` the documents ``datapacks.exclude`` takes out, found in the
ledgers), each pack's spec (``specs``), and
each pack's ``.bin/.idx`` written at once from its sources with its cursor state (``packer``, over
``core.dataset_merge``); ``audit`` accounts for every document of every source over the packs
(``snakepack audit-packs``, run by the plan). ``settings`` types the config's ``training``, ``datapacks``
and ``mixtures``.
"""
