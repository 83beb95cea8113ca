"""What a Ray fleet asks of the cluster, checked before any actor starts (no Ray needed)."""

from __future__ import annotations

from typing import Any

import pytest

from trio_rlmesh.ray import _placement_shortfall


def node(alive: bool = True, **resources: float) -> dict[str, Any]:
    return {"Alive": alive, "Resources": resources}


LAPTOP = [node(CPU=2.0, memory=8 * 2**30)]


@pytest.mark.parametrize(
    ("count", "asked", "nodes"),
    [
        (2, {"num_cpus": 1}, LAPTOP),
        (8, {"num_cpus": 0.25}, LAPTOP),
        (8, {}, LAPTOP),  # actors that ask for nothing need nothing
        (100, {"num_cpus": 0}, LAPTOP),
        (3, {"num_gpus": 1}, [node(CPU=4.0, GPU=2.0), node(CPU=4.0, GPU=1.0)]),
        (2, {"resources": {"sim": 1}}, [node(CPU=1.0, sim=1.0), node(CPU=1.0, sim=1.0)]),
    ],
)
def test_a_fleet_the_cluster_can_hold_passes(
    count: int, asked: dict[str, Any], nodes: list[dict[str, Any]]
) -> None:
    assert _placement_shortfall(count, asked, nodes) is None


@pytest.mark.parametrize(
    ("count", "asked", "nodes", "why"),
    [
        (8, {"num_cpus": 1}, LAPTOP, "the cluster has CPU 2 on 1 node, room for 2 of them"),
        (
            2,
            {"num_cpus": 1, "num_gpus": 1},
            [node(CPU=8.0, GPU=1.0), node(CPU=8.0)],
            "the cluster has CPU 16, GPU 1 on 2 nodes, room for 1 of them",
        ),
        # Two half GPUs do not make room for an actor that wants a whole one.
        (
            1,
            {"num_gpus": 1},
            [node(GPU=0.5), node(GPU=0.5)],
            "the cluster has GPU 1 on 2 nodes, room for 0 of them",
        ),
        (
            1,
            {"memory": 16 * 2**30},
            LAPTOP,
            "the cluster has memory 8.0 GiB on 1 node, room for 0 of them",
        ),
        (
            3,
            {"resources": {"sim": 1}},
            [node(sim=2.0), node(False, sim=4.0)],  # a dead node holds nothing
            "the cluster has sim 2 on 1 node, room for 2 of them",
        ),
    ],
)
def test_a_fleet_the_cluster_cannot_hold_says_what_it_has(
    count: int, asked: dict[str, Any], nodes: list[dict[str, Any]], why: str
) -> None:
    assert _placement_shortfall(count, asked, nodes) == why
