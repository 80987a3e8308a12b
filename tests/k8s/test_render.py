"""``fmnist render``: every kind's output passes its upstream schema; the karmada kind's flags.

The command runs for real (its parser, its handler, its YAML on stdout); only the
``render`` sub-command is registered, so these tests need no other command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from cli.commands import render
from cli.errors import UsageError
from components.specs.karmada import propagation_policy
from components.specs.kinds import PROPAGATION_POLICY

REPO = Path(__file__).resolve().parents[2]
KIND_FLAGS = {"karmada": ["--cluster", "member1"]}


def run_render(argv: list[str], capsys) -> list[dict]:
    parser = argparse.ArgumentParser(prog="fmnist")
    render.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["render", *argv])
    assert args.handler(args) == 0
    return [doc for doc in yaml.safe_load_all(capsys.readouterr().out) if doc]


@pytest.mark.parametrize("kind", sorted(render.KINDS))
def test_every_kind_renders_objects_that_pass_their_schema(kind, capsys, validate_object):
    objects = run_render([kind, *KIND_FLAGS.get(kind, [])], capsys)
    assert objects
    for obj in objects:
        validate_object(obj)


@pytest.mark.parametrize(
    "clusters", [["member3", "member4"], ["gpu-a", "gpu-b", "cpu-c"], ["only"]]
)
def test_karmada_policy_for_the_given_clusters(clusters, capsys, validate_object):
    flags = [flag for cluster in clusters for flag in ("--cluster", cluster)]
    (policy,) = run_render(
        ["karmada", *flags, "--namespace", "team-a", "--queue-name", "gpu"], capsys
    )
    validate_object(policy)
    assert policy["metadata"] == {"name": "fmnist-training-jobs", "namespace": "team-a"}
    assert policy["spec"]["resourceSelectors"] == [
        {
            "apiVersion": api_version,
            "kind": kind,
            "namespace": "team-a",
            "labelSelector": {"matchLabels": {"kueue.x-k8s.io/queue-name": "gpu"}},
        }
        for api_version, kind in (
            ("kubeflow.org/v1", "PyTorchJob"),
            ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
        )
    ]
    placement = policy["spec"]["placement"]
    assert placement["clusterAffinity"]["clusterNames"] == clusters
    # each job whole in one cluster, never duplicated into all of them
    assert placement["spreadConstraints"] == [
        {"spreadByField": "cluster", "minGroups": 1, "maxGroups": 1}
    ]
    # the only replica scheduling under which Karmada v1.18.1 both honours the spread
    # constraint and looks at free capacity (spreadconstraint/select_clusters.go)
    assert placement["replicaScheduling"] == {
        "replicaSchedulingType": "Divided",
        "replicaDivisionPreference": "Aggregated",
    }
    assert policy["spec"]["failover"] == {"cluster": {"purgeMode": "Directly"}}
    assert policy["spec"]["propagateDeps"] is True  # the job's PVCs, ConfigMaps, Secrets follow


def test_karmada_defaults_reproduce_the_committed_policy(capsys):
    (policy,) = run_render(["karmada", "--cluster", "member1", "--cluster", "member2"], capsys)
    committed = yaml.safe_load((REPO / "k8s" / "karmada" / "propagation-policy.yaml").read_text())
    assert policy == committed
    assert (policy["apiVersion"], policy["kind"]) == (
        PROPAGATION_POLICY.api_version,
        PROPAGATION_POLICY.kind,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["karmada"],  # no cluster at all
        ["karmada", "--cluster", "member1=1"],  # the weights of earlier releases
        ["karmada", "--cluster", "Member_1"],  # not a cluster name
        ["karmada", "--cluster", "m" * 49],  # longer than Karmada allows
    ],
)
def test_bad_cluster_flags_are_usage_errors_naming_the_flag(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        run_render(argv, capsys)
    assert exc.value.code == 2
    assert "--cluster" in capsys.readouterr().err


def test_a_cluster_given_twice_is_a_usage_error(capsys):
    with pytest.raises(UsageError, match="--cluster: each member cluster once"):
        run_render(["karmada", "--cluster", "a", "--cluster", "a"], capsys)


def test_builder_rejects_no_cluster():
    with pytest.raises(ValueError, match="at least one member cluster"):
        propagation_policy(name="p", namespace="ns", queue_name="q", clusters=[])
