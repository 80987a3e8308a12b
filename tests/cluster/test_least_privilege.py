"""What the pipeline's account may do, asked of the tier's real API server (RBAC on).

Each test namespace holds the ServiceAccount ``pipeline-runner`` bound to k8s/rbac
(conftest.py ``make_namespace``). ``kubectl auth can-i --as`` sends a SubjectAccessReview
to the API server, which answers with its RBAC authorizer, as for a request of the account
itself. tests/k8s/test_rbac.py compares the grants with the code's API calls; here the
answers of the real authorizer show where they stop: no Secrets, no bare pods, no
NetworkPolicies (which would open the namespace), nothing in another namespace, the own
namespace's object but no other. The "yes" rows show that the check can answer yes.

Upstream behaviour relied on: k8s.io/apiserver v0.36.3 pkg/endpoints/request/requestinfo.go
files ``namespaces/<name>`` under namespace ``<name>``, so the Role's ``get namespaces``
reaches the run's own Namespace object only.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cluster
OWN, OTHER, CLUSTER = "own", "other", "cluster"
ANSWERS = [  # verb, resource, where, allowed
    ("create", "pytorchjobs.kubeflow.org", OWN, True),
    ("get", "pods --subresource=log", OWN, True),
    ("get", "namespace/{own}", OWN, True),
    ("get", "nodes", CLUSTER, True),
    ("get", "serviceaccounts", OWN, True),  # does the predictor's account exist?
    ("create", "serviceaccounts --subresource=token", OWN, False),  # but never its token
    ("get", "secrets", OWN, False),
    ("list", "secrets", OWN, False),
    ("create", "pods", OWN, False),
    ("create", "pods --subresource=exec", OWN, False),
    ("create", "networkpolicies.networking.k8s.io", OWN, False),
    ("create", "rolebindings.rbac.authorization.k8s.io", OWN, False),
    ("create", "pytorchjobs.kubeflow.org", OTHER, False),
    ("list", "pods", OTHER, False),
    ("get", "namespace/{other}", OTHER, False),
    ("list", "namespaces", CLUSTER, False),
    ("delete", "nodes", CLUSTER, False),
]


def can_i(kubectl, account: str, verb: str, resource: str, namespace: str = "") -> bool:
    """``kubectl auth can-i`` as the account; True for "yes".

    ``resource`` is what follows the verb: a type (``pods``), a type and a name
    (``namespace/x``) or a type and its subresource (``pods --subresource=log``: in
    ``pods/log`` kubectl reads ``log`` as a pod's name).
    """
    where = ["-n", namespace] if namespace else ["--all-namespaces"]  # cluster-scoped
    asked = [verb, *resource.split(), *where, f"--as={account}"]
    answer = kubectl("auth", "can-i", *asked, check=False)
    assert answer.split()[0] in ("yes", "no"), answer
    return answer.split()[0] == "yes"


def test_the_pipeline_account_may_do_what_the_steps_do_and_no_more(
    kubectl, namespace, namespace_factory
):
    other = namespace_factory()
    account = f"system:serviceaccount:{namespace}:pipeline-runner"
    where = {OWN: namespace, OTHER: other, CLUSTER: ""}
    asked = {
        (verb, resource, place): can_i(
            kubectl, account, verb, resource.format(own=namespace, other=other), where[place]
        )
        for verb, resource, place, _ in ANSWERS
    }
    assert asked == {(verb, resource, place): allowed for verb, resource, place, allowed in ANSWERS}
