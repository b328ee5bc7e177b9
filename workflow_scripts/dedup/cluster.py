"""Dedup step 3, one job: union-find over all exact and verified near pairs; which document each cluster
keeps.

Each cluster (connected component) keeps its earliest document, the smallest (shard name, row); every other
member is removed as a duplicate of it: reason ``exact`` if it repeats the normalized text of an earlier
document (exact pass), else ``near``. Cluster ids number the clusters by their kept document, in that same
order. Memory is proportional to the number of documents in pairs (plus a bounded chunk of pairs), never to
the corpus nor to the number of pairs.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from workflow_scripts.core.fsio import atomic_path, write_if_changed, write_json
from workflow_scripts.dedup.pairs import read_pairs
from workflow_scripts.dedup.shards import ROW_BITS, stem
from workflow_scripts.dedup.sigset import SignatureSet, split_keys

REASONS = ("keep", "exact", "near")
EXAMPLES = 8
EXAMPLE_MEMBERS = 10
CHUNK_PAIRS = 1 << 22


def union(parent: np.ndarray, u: np.ndarray, v: np.ndarray) -> None:
    """Union-find step, vectorized: join the components of nodes ``u[k]`` and ``v[k]``, in place.

    ``parent`` must map every node to its root (as ``np.arange`` does), and does so again afterwards, the root
    of a component being its smallest node. Each round links every root that has an edge to a smaller root to
    the smallest such root, compresses all paths by pointer jumping and drops the edges now inside one
    component.
    """
    while u.size:
        pu, pv = parent[u], parent[v]
        cross = pu != pv
        u, v, pu, pv = u[cross], v[cross], pu[cross], pv[cross]
        np.minimum.at(parent, np.maximum(pu, pv), np.minimum(pu, pv))
        while True:
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent[:] = grand


def _chunks(pairs: np.ndarray) -> Iterator[np.ndarray]:
    for a in range(0, len(pairs), CHUNK_PAIRS):
        yield np.asarray(pairs[a : a + CHUNK_PAIRS])


def _merge_unique(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted unique values of ``a`` (sorted, unique) and ``b``."""
    m = np.concatenate([a, np.unique(b)])
    m.sort(kind="stable")  # merges the two sorted runs
    return m[np.concatenate([[True], m[1:] != m[:-1]])] if m.size else m


def cluster(sigs: SignatureSet, pair_files: Sequence[str | os.PathLike[str]]) -> dict[str, Any]:
    """Nodes (keys of documents in pairs, ascending), their kept document key, cluster id and reason code.

    Two passes over the pair files, in chunks: the sorted node keys first, then union-find over node indices.
    Memory: a few arrays of the number of nodes, plus one chunk of pairs.
    """
    files = [(path, *read_pairs(path)) for path in pair_files]
    nodes = np.zeros(0, dtype=np.uint64)
    for path, pairs, meta in files:
        if meta["digest"] != sigs.digest:
            raise ValueError(f"{path}: made from another set of shards than the signature files")
        for chunk in _chunks(pairs):
            nodes = _merge_unique(nodes, chunk.ravel())
    parent = np.arange(nodes.size, dtype=np.int32 if nodes.size < 2**31 else np.int64)
    exact = np.zeros(nodes.size, dtype=bool)
    edges = {"exact": 0, "near": 0}
    for _, pairs, meta in files:
        for chunk in _chunks(pairs):
            u, v = np.searchsorted(nodes, chunk[:, 0]), np.searchsorted(nodes, chunk[:, 1])
            union(parent, u.astype(parent.dtype), v.astype(parent.dtype))
            if meta["source"] == "exact":
                exact[v] = True
        edges["exact" if meta["source"] == "exact" else "near"] += len(pairs)
    is_root = parent == np.arange(nodes.size, dtype=parent.dtype)
    reason = np.full(nodes.size, REASONS.index("near"), dtype=np.uint8)
    reason[exact] = REASONS.index("exact")
    reason[is_root] = REASONS.index("keep")
    cluster_of_root = np.cumsum(is_root, dtype=parent.dtype) - 1  # clusters numbered by their kept document
    stats = [{k: v for k, v in meta.items() if k not in ("kind", "digest")} for _, _, meta in files]
    return {
        "nodes": nodes,
        "kept": nodes[parent],
        "cluster": cluster_of_root[parent],
        "reason": reason,
        "pair_files": stats,
        "edges": edges,
    }


def _examples(sigs: SignatureSet, result: dict[str, Any], sizes: np.ndarray) -> list[dict[str, Any]]:
    """The largest clusters and a few more spread over the cluster ids, with member ids."""
    largest = np.argsort(-sizes, kind="stable")[: EXAMPLES // 2]
    spread = np.linspace(0, sizes.size - 1, EXAMPLES - largest.size).astype(np.int64) if sizes.size else []
    chosen = sorted(set(largest.tolist()) | set(np.asarray(spread).tolist()))
    out = []
    for c in chosen:
        at = np.flatnonzero(result["cluster"] == c)[:EXAMPLE_MEMBERS]
        ids = sigs.ids(result["nodes"][at])
        out.append(
            {
                "cluster": c,
                "size": int(sizes[c]),
                "kept": sigs.ids(result["kept"][at[:1]])[0],
                "members": [
                    {"id": i, "reason": REASONS[r]} for i, r in zip(ids, result["reason"][at], strict=True)
                ],
            }
        )
    return out


def write_clusters(
    signatures: Sequence[str | os.PathLike[str]],
    pair_files: Sequence[str | os.PathLike[str]],
    assign_dir: str | os.PathLike[str],
    clusters_tsv: str | os.PathLike[str],
    summary: str | os.PathLike[str],
) -> dict[str, Any]:
    """Write ``{assign_dir}/{shard stem}.assign.json`` for every shard, the clusters TSV and a summary.

    ``assign_dir`` is a store kept between runs: a shard's assignment is rewritten only when it changes (so
    only the shards whose own outcome changed are filtered and tokenized again), and the assignments of
    shards that are gone are removed.
    """
    sigs = SignatureSet(signatures)
    result = cluster(sigs, pair_files)
    nodes = result["nodes"]
    shard_starts = np.arange(len(sigs.names) + 1, dtype=np.uint64) << np.uint64(ROW_BITS)
    bounds = np.searchsorted(nodes, shard_starts)  # nodes of shard s: bounds[s]:bounds[s + 1]
    with atomic_path(clusters_tsv) as tmp, open(tmp, "wb") as tsv:
        for s, name in enumerate(sigs.names):
            at = slice(bounds[s], bounds[s + 1])
            ids, kept = sigs.ids(nodes[at]), sigs.ids(result["kept"][at])
            # A cluster is named by the id of the document it keeps: stable when unrelated data is added.
            tsv.write("".join(f"{i}\t{k}\n" for i, k in zip(ids, kept, strict=True)).encode())
            assign = {
                "shard": name,
                "rows": split_keys(nodes[at])[1].tolist(),
                "reason": [REASONS[r] for r in result["reason"][at]],
                "duplicate_of": kept,
            }
            write_if_changed(Path(assign_dir) / f"{stem(name)}.assign.json", orjson.dumps(assign))
    current = {f"{stem(name)}.assign.json" for name in sigs.names}
    for old in Path(assign_dir).glob("*.assign.json"):
        if old.name not in current:
            old.unlink()
    sizes = np.bincount(result["cluster"])
    counts = np.bincount(result["reason"], minlength=len(REASONS))
    size_hist = np.unique(sizes, return_counts=True)
    info = {
        "shards": len(sigs.names),
        "docs": sum(int(s.meta["docs"]) for s in sigs.stores),
        "params": sigs.params.to_json(),
        "clusters": int(sizes.size),
        "docs_in_clusters": int(nodes.size),
        "removed": {"exact": int(counts[1]), "near": int(counts[2])},
        "edges": result["edges"],
        "cluster_size_histogram": {str(k): int(v) for k, v in zip(*size_hist, strict=True)},
        "pair_files": result["pair_files"],
        "examples": _examples(sigs, result, sizes),
    }
    write_json(summary, info)
    return info


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], fromfile_prefix_chars="@")
    parser.add_argument("--signatures", nargs="+", required=True, help="all signature files (or @list.txt)")
    parser.add_argument(
        "--pairs", nargs="+", required=True, help="all pair files, exact and bands (or @list)"
    )
    parser.add_argument("--assign-dir", required=True, help="writes {shard stem}.assign.json per shard here")
    parser.add_argument("--clusters", required=True, help="TSV to write: id<TAB>cluster per clustered doc")
    parser.add_argument("--summary", required=True, help="cluster summary JSON to write")
    args = parser.parse_args(argv)
    info = write_clusters(args.signatures, args.pairs, args.assign_dir, args.clusters, args.summary)
    print(
        f"dedup cluster: {info['clusters']} clusters over {info['docs_in_clusters']} documents, removed "
        f"{info['removed']}"
    )
