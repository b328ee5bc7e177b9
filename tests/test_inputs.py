"""The run's inputs from the config (workflow_scripts.inputs): the stages' settings as command options."""

from __future__ import annotations

import shlex

from workflow_scripts import inputs


def test_each_stage_s_settings_are_its_command_s_options() -> None:
    config = {
        "seed": 7,
        "dedup": {"threshold": 0.9},
        "tokenizer": {"vocab_size": 500},
        "tokenize": {"threads": 4},
    }
    dedup, tokenizer, tokenize = map(shlex.split, inputs.stage_args(config))
    assert dedup[:2] == ["--threshold", "0.9"] and dedup[dedup.index("--seed") + 1] == "7"
    assert tokenizer[:2] == ["--vocab-size", "500"] and tokenizer[-2:] == ["--seed", "7"]
    assert "--threads" not in tokenize  # a job's threads come from its rule: a change reruns nothing
    assert tokenize[:2] == ["--mode", "pretrain"]
