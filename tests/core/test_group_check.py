"""The linear group check finds exactly the groups that wait on themselves, on random DAGs with random
groups (everything Snakemake's own check finds, and what it misses)."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pytest
import snakemake.api  # noqa: F401  (imports snakemake.dag in the order it needs)
from snakemake.dag import DAG
from snakemake.exceptions import WorkflowError

from workflow_scripts.core.group_check import check_groups, cyclic_groups


@dataclass(eq=False)
class Job:
    name: str
    lineno: int = 1  # what Snakemake's error reads of a rule
    snakefile: str = "Snakefile"

    @property
    def rule(self) -> Any:
        return self


@dataclass(eq=False)
class Group:
    groupid: str
    jobs: set[Job] = field(default_factory=set)

    def __contains__(self, job: Job) -> bool:
        return job in self.jobs

    def __iter__(self) -> Any:
        return iter(sorted(self.jobs, key=lambda j: j.name))


@dataclass
class Dag:
    _group: dict[Job, Group]
    _dependencies: dict[Job, dict[Job, set[str]]]


def random_dag(rng: random.Random) -> Dag:
    """Jobs in topological order (each depends only on earlier ones), some of them in a few groups."""
    jobs = [Job(f"r{i % 5}") for i in range(rng.randint(2, 30))]
    deps: dict[Job, dict[Job, set[str]]] = defaultdict(dict)
    for i, job in enumerate(jobs):
        for dep in rng.sample(jobs[:i], k=min(i, rng.randint(0, 3))):
            deps[job][dep] = set()
    groups = [Group(f"g{k}") for k in range(rng.randint(1, 3))]
    membership = {}
    for job in jobs:
        if rng.random() < 0.5:
            group = rng.choice(groups)
            group.jobs.add(job)
            membership[job] = group
    return Dag(membership, deps)


def snakemakes_verdict(dag: Dag) -> bool:
    try:
        DAG._check_groups(dag)  # type: ignore[arg-type]
    except WorkflowError:
        return False
    return True


def ours(dag: Dag) -> bool:
    try:
        check_groups(dag)
    except WorkflowError:
        return False
    return True


def waits_on_itself(dag: Dag) -> bool:
    """The definition, searched plainly: a group runs as one job once everything its members depend on
    outside it is done, so it may not depend on itself, through jobs outside it or through other groups
    (each of those waiting on all its own members' dependencies)."""
    for group in set(dag._group.values()):
        stack = [dep for job in group.jobs for dep in dag._dependencies.get(job, {}) if dep not in group]
        seen = set(stack)
        while stack:
            job = stack.pop()
            if job in group:
                return True
            unit = dag._group[job].jobs if job in dag._group else [job]
            for dep in (d for j in unit for d in dag._dependencies.get(j, {})):
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
    return False


def test_the_verdict_is_the_definitions_and_never_laxer_than_snakemakes() -> None:
    """Snakemake's own search shares its visited jobs between paths, so it misses some returns (a member
    reached inside the group first is not searched again from outside), and it looks at one group at a
    time (two groups waiting on each other pass): ours finds those too."""
    rng = random.Random(3)
    dags = [random_dag(rng) for _ in range(3000)]
    verdicts = [(ours(dag), not waits_on_itself(dag), snakemakes_verdict(dag)) for dag in dags]
    assert all(valid == expected for valid, expected, _ in verdicts)
    assert all(snakemake or not valid for valid, _, snakemake in verdicts)
    assert 100 < sum(not valid for valid, _, _ in verdicts) < 2900  # both kinds of DAG were seen
    assert any(snakemake and not valid for valid, _, snakemake in verdicts)  # what Snakemake misses


def test_the_group_named_is_on_the_cycle() -> None:
    a, b, c, d = Job("a"), Job("b"), Job("c"), Job("d")
    inner, other = Group("inner", {a, c}), Group("other", {d})
    deps = {a: {b: set()}, b: {c: set()}, d: {a: set()}}  # a -> b (outside) -> c: back into inner
    assert cyclic_groups({a: inner, c: inner, d: other}, deps) == [inner]
    with pytest.raises(WorkflowError, match="Group inner depends on itself"):
        check_groups(Dag({a: inner, c: inner, d: other}, deps))
