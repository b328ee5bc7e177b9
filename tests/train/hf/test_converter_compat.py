"""Our Hugging Face LLaMA <-> GPT-NeoX mapping (train/hf/layout) against GPT-NeoX's own converters, run on CPU
from ``../shared/trainers``' pinned sources (the ``trainers`` fixture, tests/trainers.py):

- ``tools/ckpts/convert_hf_llama_to_neox.py`` of upstream GPT-NeoX and of the LUMI fork, at tensor parallel
  sizes 1 and 2. With grouped-query attention they write exactly our tensors under exactly our names. Without
  it (every head its own key and value) they write the same tensors except ``query_key_value``, which they
  fuse block-wise ``[q_r; k_r; v_r]`` per rank as for GQA, where GPT-NeoX's attention reads per-head
  ``[q; k; v]`` (``megatron/model/transformer.py``, ``ParallelSelfAttention.forward``'s MHA branch: the
  rank's output is viewed as ``[heads, 3 x head_dim]`` and split in three; upstream lines 794-809, the
  fork's 897-913). That is a bug of theirs: such a checkpoint trains with scrambled heads. We keep the
  layout the model reads.
- the fork's ``tools/ckpts/convert_neox_to_hf.py`` (``--architecture llama``) on our GPT-NeoX tensors, with
  and without GQA at tensor parallel sizes 1 and 2, gives back the Hugging Face tensors exactly. It reads
  ``intermediate_size`` as ours writes it (3 x Hugging Face's, ``mlp_multiple_of: 1``; its exporter turns
  it into ``int(I * 2 / 3) // 2``). Upstream's exporter is not run: it writes ``intermediate_size`` verbatim
  (the other encoding, ``mlp_multiple_of`` = Hugging Face's size) and so cannot load these weights.

The model is a tiny random LLaMA with a vocabulary of 128 (the HF -> GPT-NeoX scripts do not pad, and
GPT-NeoX's padded size with ``make-vocab-size-divisible-by: 1`` is then 128 as well), untied embeddings. The
scripts need a tokenizer: the HF -> GPT-NeoX one copies the model folder's tokenizer to
``<model_path>/tokenizer``, the exporter builds GPT-NeoX's ``HFTokenizer`` from ``vocab-file`` for the
vocabulary size; both get the same 128-word ``tokenizers`` word-level tokenizer built here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.trainers import Trainers
from tests.utils import tail, tiny_llama
from workflow_scripts.train.hf import config as hf_config
from workflow_scripts.train.hf import layout as hf_layout

VOCAB = 128
KV_HEADS = {"gqa": 2, "mha": 4}  # of 4 attention heads
Tensors = dict[str, torch.Tensor]

# The fork's exporter does ``from accelerate import init_empty_weights`` (never using it) and accelerate is
# in neither tree's requirements, so not in the trainers' Python: a stub package (a do-nothing context
# manager) on a temporary path stands in for it, put first on sys.path by this wrapper before the script
# runs as __main__.
EXPORT = r"""
import runpy, sys
sys.path.insert(0, sys.argv[1])
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
ACCELERATE_STUB = "import contextlib\n\ninit_empty_weights = contextlib.nullcontext\n"


def save_hf(root: Path, kv_heads: int) -> Path:
    """A tiny LLaMA saved as Hugging Face saves it, with a tokenizer the scripts can load."""
    from tokenizers import Tokenizer, models

    root.mkdir(parents=True)
    tiny_llama(vocab_size=VOCAB, num_key_value_heads=kv_heads).save_pretrained(root)
    words = ["<|endoftext|>", "[UNK]", *(f"w{i}" for i in range(VOCAB - 2))]
    Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]")).save(
        str(root / "tokenizer.json")
    )
    (root / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return root


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {name: save_hf(root / name, kv) for name, kv in KV_HEADS.items()}


def hf_tensors(model: Path) -> Tensors:
    return load_file(model / "model.safetensors")


def model_config(model: Path) -> dict:
    return json.loads((model / "config.json").read_text())


def ours(model: Path, tp: int) -> list[Tensors]:
    hf = hf_tensors(model)
    shape = hf_layout.shape_of(model_config(model), VOCAB, tp)
    return [dict(hf_layout.to_neox(hf.__getitem__, shape, r)) for r in range(tp)]


def theirs(trainers: Trainers, tree: str, model: Path, out: Path, tp: int) -> list[Tensors]:
    """The ranks ``tree``'s convert_hf_llama_to_neox.py writes for ``model``."""
    cmd = ["tools/ckpts/convert_hf_llama_to_neox.py", "--tp", str(tp), "--model", str(model)]
    run = trainers.run(tree, [*cmd, "--model_path", str(out)])
    assert run.returncode == 0, tail(run.stdout + run.stderr)
    assert (out / "latest").read_text() == "0"
    files = sorted((out / "0").glob("mp_rank_*_model_states.pt"))
    assert [f.name for f in files] == [f"mp_rank_{r:02d}_model_states.pt" for r in range(tp)]
    return [torch.load(f, map_location="cpu", weights_only=True)["module"] for f in files]


def assert_same(a: torch.Tensor, b: torch.Tensor, what: object) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), what


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("tree", ["neox", "fork"])  # neox: upstream GPT-NeoX; fork: the LUMI fork
def test_gpt_neox_hf_import_writes_our_tensors_with_gqa(
    tree: str, tp: int, hf_models: dict[str, Path], trainers: Trainers, tmp_path: Path
) -> None:
    mine = ours(hf_models["gqa"], tp)
    got = theirs(trainers, tree, hf_models["gqa"], tmp_path / "neox", tp)
    for r in range(tp):
        assert got[r].keys() == mine[r].keys(), r
        for name, tensor in mine[r].items():
            assert_same(got[r][name], tensor, (r, name))


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("tree", ["neox", "fork"])
def test_gpt_neox_hf_import_fuses_mha_qkv_block_wise_unlike_its_attention(
    tree: str, tp: int, hf_models: dict[str, Path], trainers: Trainers, tmp_path: Path
) -> None:
    """Without GQA GPT-NeoX's attention reads a rank's fused ``query_key_value`` per head ``[q; k; v]``
    (megatron/model/transformer.py, the MHA branch of ParallelSelfAttention.forward: ``view(..., np,
    3 * hn)`` then a three-way split of the last dim), which is what we write; both trees' HF import script
    writes the rank's ``[q heads; k heads; v heads]`` instead (their converter bug). Every other tensor
    agrees."""
    model = hf_models["mha"]
    hf = hf_tensors(model)
    mine = ours(model, tp)
    got = theirs(trainers, tree, model, tmp_path / "neox", tp)
    layers = model_config(model)["num_hidden_layers"]
    for r in range(tp):
        assert got[r].keys() == mine[r].keys(), r
        for name, tensor in mine[r].items():
            if not name.endswith("attention.query_key_value.weight"):
                assert_same(got[r][name], tensor, (r, name))
        for i in range(layers):
            name = f"{hf_layout.layer_prefix(i)}attention.query_key_value.weight"
            q, k, v = (hf[f"model.layers.{i}.self_attn.{p}_proj.weight"].chunk(tp)[r] for p in "qkv")
            assert_same(got[r][name], torch.cat([q, k, v]), (r, name))  # block-wise
            assert got[r][name].shape == mine[r][name].shape
            assert not torch.equal(got[r][name], mine[r][name]), (r, name)


def write_ours(model: Path, tp: int, out: Path) -> Path:
    """Our ranks as GPT-NeoX's sequential checkpoint (``pipe_parallel_size: 0``) and the one YAML config the
    exporter reads: the model keys of hf_config.neox_model_keys and what it needs besides."""
    out.mkdir(parents=True)
    for r, tensors in enumerate(ours(model, tp)):
        torch.save({"module": tensors}, out / f"mp_rank_{r:02d}_model_states.pt")
    config = hf_config.neox_model_keys(model_config(model)) | {
        "pipe-parallel-size": 0,
        "model-parallel-size": tp,
        "tokenizer-type": "HFTokenizer",
        "vocab-file": str(model / "tokenizer.json"),
        "make-vocab-size-divisible-by": 1,
    }
    (out / "neox.yml").write_text(yaml.safe_dump(config))
    return out


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("heads", ["gqa", "mha"])
def test_the_forks_hf_export_gives_back_the_hf_tensors_from_ours(
    heads: str, tp: int, hf_models: dict[str, Path], trainers: Trainers, tmp_path: Path
) -> None:
    model = hf_models[heads]
    checkpoint = write_ours(model, tp, tmp_path / "neox")
    stub = tmp_path / "stub" / "accelerate"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(ACCELERATE_STUB)
    out = tmp_path / "hf"
    script = "tools/ckpts/convert_neox_to_hf.py"
    args = ["--input_dir", str(checkpoint), "--config_file", str(checkpoint / "neox.yml")]
    args += ["--output_dir", str(out), "--architecture", "llama", "--no_save_tokenizer"]
    run = trainers.run("fork", ["-c", EXPORT, str(stub.parent), script, *args])
    assert run.returncode == 0, tail(run.stdout + run.stderr)
    exported, config = hf_tensors(out), model_config(out)
    for key in ("intermediate_size", "num_key_value_heads", "num_attention_heads", "vocab_size"):
        assert config[key] == model_config(model)[key], key
    assert config["tie_word_embeddings"] is False
    expected = hf_tensors(model)
    assert exported.keys() == expected.keys()
    for name, tensor in expected.items():
        assert_same(exported[name], tensor, name)
