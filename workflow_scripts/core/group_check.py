"""Snakemake's check that no group job depends on itself, in one pass over the DAG instead of one per job.

``DAG._check_groups`` (Snakemake 9) walks the dependencies of each member of a group, and does so once for
every member of that group again (it loops over ``_group.values()``, one entry per job). Our per-shard
groups (``shard_batch``) hold jobs that depend on a whole-corpus step (the dedup clustering, and through
it every signature job), so each walk covers the corpus and the whole check grows with the square of the
shards: at 10,000 shards ``snakemake -n --profile lumi`` spent over 10 minutes in it.

A group runs as one job once everything its members depend on outside it is done, so it must not depend
on itself: neither through jobs outside it (a path that leaves it and comes back) nor through other groups
(two groups waiting on each other). That is exactly when the graph of the DAG's jobs with each group
contracted into one node has a cycle (the DAG itself has none). ``check_groups`` contracts the groups and
sorts that graph once (Kahn's algorithm), and raises Snakemake's error for a group left on a cycle (what
the sort leaves, less the nodes that depend on none of it). Snakemake's own check misses some of these
(its search shares visited jobs between paths, and it looks at one group at a time). ``install`` puts it
in place of Snakemake's for the profiles that group jobs.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def cyclic_groups(groups: dict[Any, Any], dependencies: dict[Any, Any]) -> list[Any]:
    """The groups on a cycle of the DAG with each group contracted into one node (``groups``: job -> its
    group; ``dependencies``: job -> the jobs it depends on)."""

    def node(job: Any) -> Any:
        group = groups.get(job)
        return job if group is None else ("group", id(group))

    group_of = {("group", id(g)): g for g in groups.values()}
    edges: dict[Any, set[Any]] = defaultdict(set)
    for job, deps in dependencies.items():
        source = node(job)
        edges[source].update(target for dep in deps if (target := node(dep)) != source)
    waiting = defaultdict(int)  # per node: the nodes depending on it not yet removed
    for targets in edges.values():
        for target in targets:
            waiting[target] += 1
    ready = [n for n in set(edges) | set(waiting) if waiting[n] == 0]
    while ready:
        for target in edges.get(ready.pop(), ()):
            waiting[target] -= 1
            if waiting[target] == 0:
                ready.append(target)
    left = {n for n, count in waiting.items() if count}  # on a cycle, or depended on from one
    trimmed = True
    while trimmed:  # nodes only depended on from a cycle depend on nothing left in the end
        keep = {n for n in left if edges.get(n, set()) & left}
        trimmed, left = keep != left, keep
    return [group_of[n] for n in left if n in group_of]


def check_groups(dag: Any) -> None:
    """``DAG._check_groups``: raise Snakemake's error when a group depends on itself."""
    from snakemake.exceptions import WorkflowError

    cyclic = cyclic_groups(dag._group, dag._dependencies)
    if cyclic:
        group = min(cyclic, key=lambda g: str(g.groupid))
        rules = sorted({job.rule.name for job in group.jobs})
        raise WorkflowError(
            f"Group {group.groupid} depends on itself: a path of jobs in the DAG starts in the group (rules "
            f"{', '.join(rules)}) and leads back to it through jobs outside it or other groups, so it could "
            "never start. Remove those rules from the group, or add the rules on the path to it."
        )


def install() -> None:
    """Check groups with ``check_groups`` in this Snakemake process."""
    from snakemake.dag import DAG

    DAG._check_groups = check_groups  # type: ignore[method-assign]
