"""Our ``torch_dist`` folders in the pinned Megatron-LM's own code, on CPU ranks
(tests/train/hf/megatron_model: ``training.get_model`` with pretrain_gpt.py's model provider, the local
transformer spec, gloo; the stand-ins for CUDA calls are listed there):

- ``checkpointing.load_checkpoint`` reads ``hf-import --trainer megatron``'s folder at tensor parallel 1 and 2
  and pipeline parallel 1 and 2 (one folder for all four), with and without ``--finetune``, and every rank's
  tensors are the slices of our Megatron names that Megatron-core's own sharding names;
- ``GPTModel``'s logits on it are ``transformers``' on the Hugging Face folder (1e-4), at TP 1 and 2, and on
  a GPT-2-shaped model of the reference trainer (LayerNorm with biases, learned positions, GELU, tied) the
  reference model's;
- ``load_weights`` reads what ``checkpointing.save_checkpoint`` wrote: a model of Megatron's own random
  initialisation at PP 2, and our import saved again by Megatron at TP 2 x PP 2, tensor for tensor;
- with Transformer Engine importable (its stand-ins, tests/train/hf/te_stand_ins: TE needs CUDA), the TE
  layer spec's model and the local spec's (whose final norm is then ``TENorm``) ask for every key of theirs
  in our import, ``_extra_state`` entries included, and load it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader

from tests.train.hf import megatron_model
from tests.utils import hf_folder
from workflow_scripts.cli import main as snakepack
from workflow_scripts.train import megatron_checkpoint
from workflow_scripts.train.hf import megatron_layout
from workflow_scripts.train.hf.logit_check import check_tokens, hf_logits
from workflow_scripts.train.reference.model import GPT
from workflow_scripts.train.reference.run_config import ModelConfig

pytestmark = pytest.mark.trainer

# tests/utils.tiny_llama's shape (GQA: 4 heads in 2 groups, untied) as Megatron-LM's arguments; the data
# tokenizer's 300 ids padded to 512 at TP 1 and 2 alike (--make-vocab-size-divisible-by 256)
LLAMA_ARGV = [
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
    "--max-position-embeddings", "64", "--vocab-size", "300", "--make-vocab-size-divisible-by", "256",
    "--normalization", "RMSNorm", "--norm-epsilon", "1e-6", "--swiglu", "--ffn-hidden-size", "96",
    "--position-embedding-type", "rope", "--rotary-base", "10000", "--group-query-attention",
    "--num-query-groups", "2", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
]  # fmt: skip
GPT2_ARGV = [
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
    "--max-position-embeddings", "32", "--vocab-size", "300", "--make-vocab-size-divisible-by", "256",
    "--norm-epsilon", "1e-5",
]  # fmt: skip
GPT2 = ModelConfig(vocab_size=512, num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32,
                   max_position_embeddings=32, attention_dropout=0.0, hidden_dropout=0.0)  # fmt: skip
TOKENS = check_tokens(300, 16).tolist()


@pytest.fixture(scope="module")
def imported(tmp_path_factory, model) -> tuple[Path, Path]:
    """(the Hugging Face folder, the load folder holding hf-import --trainer megatron's iter_0000000)."""
    root = tmp_path_factory.mktemp("megatron-import")
    hf = hf_folder(root / "hf", model)
    load = root / "load"
    args = [
        "--trainer",
        "megatron",
        "--hf",
        str(hf),
        "--tokenizer-model",
        str(model),
        "--divisible-by",
        "256",
    ]
    args += ["--out", str(load / "iter_0000000"), "--check", str(root / "import.json")]
    assert snakepack(["hf-import", *args]) == 0
    (load / "latest_checkpointed_iteration.txt").write_text("0")  # train/finetune's tracker
    return hf, load


@pytest.mark.parametrize(
    ("tp", "pp", "finetune"), [(1, 1, False), (2, 1, True), (1, 2, True), (2, 2, True)], ids=str
)
def test_megatrons_load_checkpoint_reads_our_import_at_any_tp_and_pp(
    trainers, imported, tmp_path, tp, pp, finetune
):
    hf, load = imported
    ours = megatron_checkpoint.load_weights(str(load / "iter_0000000"))
    spec = {"argv": LLAMA_ARGV + ["--finetune"] * finetune, "load": str(load)}
    spec |= {"save": str(tmp_path / "saved"), "iteration": 3} if (tp, pp) == (2, 2) else {}
    spec |= {"tokens": TOKENS} if pp == 1 else {}
    ranks = megatron_model.run(trainers, spec, tmp_path / "ranks", tp, pp)
    assert sorted((r["tp_rank"], r["pp_rank"]) for r in ranks) == sorted(
        (t, p) for t in range(tp) for p in range(pp)
    )
    assert all(r["iteration"] == 0 and r["padded_vocab_size"] == 512 for r in ranks)
    assert [megatron_model.expected_shards(r, ours) for r in ranks] == [[]] * (tp * pp)
    assert set(megatron_model.assembled(ranks)) == set(ours)  # every tensor of ours is some rank's
    if pp == 1:  # Megatron-core's GPTModel on our import against transformers on the model
        expected = hf_logits(str(hf), torch.tensor(TOKENS))
        got = ranks[0]["logits"][..., :300]
        assert float((got - expected).abs().max()) < 1e-4
    if (tp, pp) == (2, 2):  # and what Megatron-LM saves of it again is ours, read by ours
        saved = megatron_checkpoint.load_weights(str(tmp_path / "saved" / "iter_0000003"))
        assert saved.keys() == ours.keys() and all(torch.equal(saved[k], ours[k]) for k in ours)
        assert megatron_checkpoint.load_common(str(tmp_path / "saved" / "iter_0000003"))["iteration"] == 3


def test_load_weights_reads_a_checkpoint_megatrons_save_checkpoint_wrote(trainers, tmp_path):
    """Megatron's own random initialisation at PP 2 (layers on two ranks), saved by Megatron-LM."""
    spec = {"argv": LLAMA_ARGV, "save": str(tmp_path / "saved"), "iteration": 7, "seed": 5}
    ranks = megatron_model.run(trainers, spec, tmp_path / "ranks", 1, 2)
    theirs = megatron_model.assembled(ranks)
    folder = str(tmp_path / "saved" / "iter_0000007")
    ours = megatron_checkpoint.load_weights(folder)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in theirs)
    common = megatron_checkpoint.load_common(folder)
    assert common["iteration"] == 7 and common["checkpoint_version"] == 3.0 and common["args"].num_layers == 2
    cfg = ModelConfig(**{**GPT2.__dict__, "norm": "rmsnorm", "pos_emb": "rotary", "activation": "swiglu",
                         "intermediate_size": 288, "num_kv_heads": 2, "attn_bias": False, "mlp_bias": False,
                         "tied": False, "max_position_embeddings": 64})  # fmt: skip
    GPT(cfg).load_state_dict(megatron_layout.from_megatron(ours, cfg), strict=True)  # the reference's shape


def test_a_gpt2_shaped_reference_model_is_megatrons_model(trainers, tmp_path):
    """LayerNorm with biases, learned positions, GELU, biases on every linear, tied embeddings: the
    reference trainer's GPT-2 shape, written by ours and loaded by Megatron-LM at TP 2."""
    torch.manual_seed(0)
    gpt = GPT(GPT2).eval()
    with torch.no_grad():
        for p in gpt.parameters():
            if p.dim() == 1:
                p.uniform_(-0.5, 1.5)
    weights = megatron_layout.to_megatron(gpt.state_dict(), GPT2)
    megatron_checkpoint.save(
        str(tmp_path / "load" / "iter_0000000"), weights, megatron_checkpoint.import_common(GPT2)
    )
    (tmp_path / "load" / "latest_checkpointed_iteration.txt").write_text("0")
    spec = {"argv": GPT2_ARGV, "load": str(tmp_path / "load"), "tokens": TOKENS}
    ranks = megatron_model.run(trainers, spec, tmp_path / "ranks", 2, 1)
    assert [megatron_model.expected_shards(r, weights) for r in ranks] == [[], []]
    with torch.no_grad():
        expected = gpt(torch.tensor(TOKENS))
    assert float((ranks[0]["logits"] - expected).abs().max()) < 1e-4


# The TE modules of the LLaMA model's spec, each with an _extra_state: the layers' fused linears and the final
# norm (TEDotProductAttention's sharded_state_dict saves nothing; GPTModel drops output_layer's)
TE_LINEARS = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")


@pytest.mark.parametrize(("impl", "tp"), [("transformer_engine", 2), ("local", 1)])
def test_a_transformer_engine_model_loads_our_import(trainers, imported, tmp_path, impl, tp):
    """Issue 65 item 3: with TE, the final norm is TENorm (even under --transformer-impl local) and TE's
    modules carry an _extra_state; a key the import lacks stops DCP ("Missing key in checkpoint state_dict").
    Every key the model's sharded_state_dict asks for is in our import at its global shape, the load passes,
    its tensors are ours, and each TE module is given TE 2.x's "no fp8" extra state (an empty uint8 tensor,
    what TE saves with fp8 off)."""
    _, load = imported
    folder = load / "iter_0000000"
    stored = FileSystemReader(str(folder)).read_metadata().state_dict_metadata
    spec = {"argv": [*LLAMA_ARGV, "--finetune"], "load": str(load)}
    ranks = megatron_model.run(trainers, spec, tmp_path / "ranks", tp, 1, te=impl)
    asked = {o for r in ranks for o in r["objects"]}
    te_modules = {f"decoder.layers.{i}.{m}" for i in range(2) for m in TE_LINEARS} | {
        "decoder.final_layernorm"
    }
    if impl == "transformer_engine":
        assert asked == {
            f"decoder.layers.{m}._extra_state/shard_{i}_2" for i in range(2) for m in TE_LINEARS
        } | {"decoder.final_layernorm._extra_state/shard_0_1"}
    else:  # the local spec's linears are Megatron's own (their _extra_state is None); the final norm is TE's
        assert "decoder.final_layernorm._extra_state/shard_0_1" in asked
        te_modules = {"decoder.final_layernorm"}
    assert asked <= set(stored), sorted(asked - set(stored))
    shapes = {(s["key"], tuple(s["global_shape"])) for r in ranks for s in r["sharded"]}
    assert {key for key, shape in shapes if key not in stored or tuple(stored[key].size) != shape} == set()
    ours = megatron_checkpoint.load_weights(str(folder))
    assert [megatron_model.expected_shards(r, ours) for r in ranks] == [[]] * tp
    for r in ranks:
        given = r["extra_state_given"]
        assert set(given) == te_modules
        assert all(
            isinstance(v, torch.Tensor) and v.dtype == torch.uint8 and v.numel() == 0 for v in given.values()
        )
