"""The train section as the run reads it (workflow_scripts.train.settings): what is unset, what is refused."""

from __future__ import annotations

import pytest

from workflow_scripts.train.settings import TrainConfigError, TrainSettings, resolved

NEOX = "srun singularity exec IMAGE python /opt/gpt-neox/deepy.py /opt/gpt-neox/train.py {config}"


def test_an_empty_finetune_from_is_unset() -> None:
    """`finetune_from: ""` (or `--config train.finetune_from=`) starts from scratch, as if it were not set."""
    assert resolved({"finetune_from": ""})["finetune_from"] is None
    assert TrainSettings.from_config({"finetune_from": ""}).finetune_from is None
    assert TrainSettings.from_config({"finetune_from": "/c/global_step5"}).finetune_from == "/c/global_step5"
    assert "finetune_from" not in resolved({})  # a key left out stays out (the plan's parameters)


def test_the_reference_evaluation_goes_with_the_reference_trainer_only() -> None:
    """eval_launch's default is the reference trainer's evaluation: with another trainer's launch it is
    refused before any job, naming the key and the way out (its own evaluation, or null)."""
    with pytest.raises(TrainConfigError, match=r"train\.eval_launch .*reference trainer.* null"):
        resolved({"launch": NEOX})
    with pytest.raises(TrainConfigError, match=r"train\.eval_launch"):
        TrainSettings.from_config({"launch": NEOX})
    assert resolved({"launch": NEOX, "eval_launch": None})["eval_launch"] is None
    own = "python /opt/gpt-neox/tools/pp_tester_single.py {config} --tag {tag}"
    assert TrainSettings.from_config({"launch": NEOX, "eval_launch": own}).eval_launch == own
    # the reference trainer's launch (the default, or through srun) keeps its evaluation
    reference = TrainSettings.from_config({})
    assert "train-reference" in reference.launch and "train-reference" in (reference.eval_launch or "")
    srun = "srun python -m workflow_scripts train-reference --config {config}"
    assert TrainSettings.from_config({"launch": srun}).eval_launch == reference.eval_launch
