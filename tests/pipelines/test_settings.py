"""The run workspace's values are checked as Kubernetes checks a PVC, with the shared rules.

Kubernetes v1.36.3 ``pkg/apis/core/validation/validation.go``: a PVC's storage request
must be a quantity above zero (``ValidatePositiveQuantityValue``) and need not be whole
(storage is not in ``helper.IsIntegerResourceName``'s list), so ``500m`` passes as the CPU
and memory of a training job do (``components/specs/params.py``); a StorageClass name is
a DNS-1123 subdomain (``ValidateClassName``).
"""

from __future__ import annotations

import pytest

from components.specs.params import ParamError, TrainingJob
from pipelines.settings import Workspace


@pytest.mark.parametrize("size", ["500m", "1.5Gi", "5Gi", "2", ".5"])
def test_a_workspace_size_kubernetes_accepts_is_accepted(size):
    assert Workspace(size=size).size == size
    assert TrainingJob(memory=size).memory == size  # the same rule as a job's quantities


@pytest.mark.parametrize("size", ["0", "0m", "-1Gi", "1e3", "5 Gi", "lots", ""])
def test_a_workspace_size_kubernetes_refuses_is_refused(size):
    with pytest.raises(ParamError) as refused:
        Workspace(size=size)
    assert refused.value.name == "workspace_size"
    with pytest.raises(ParamError):
        TrainingJob(memory=size)


@pytest.mark.parametrize(
    ("storage_class", "accepted"),
    [("", True), ("nfs-client", True), ("fast.ssd", True), ("Fast", False), ("a_b", False)],
)
def test_the_storage_class_is_empty_or_a_dns_subdomain(storage_class, accepted):
    if accepted:
        assert Workspace(storage_class=storage_class).storage_class == storage_class
        return
    with pytest.raises(ParamError) as refused:
        Workspace(storage_class=storage_class)
    assert refused.value.name == "workspace_storage_class"
