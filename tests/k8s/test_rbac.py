"""The RBAC of k8s/rbac grants exactly the API calls the steps' code makes.

The calls are derived from the source, not listed by hand. Every function in
``components/`` (all its subpackages) is read with ``ast``. A call of a method of the
``kubernetes`` client (any ``*Api`` class of ``kubernetes.client``) becomes an RBAC triple
``(apiGroup, resource, verb)`` taken from the request that method sends: the path template
and HTTP method the generated client passes to ``call_api`` (kubernetes-client/python
30.1.0: ``AppsV1Api.list_namespaced_deployment`` sends ``GET
/apis/apps/v1/namespaces/{namespace}/deployments``, i.e. ``list`` on ``deployments`` of
``apps``), mapped to verbs as the API server does (Kubernetes docs, "Authorization",
request verbs). A path outside ``namespaces/{namespace}`` is cluster-scoped and needs a
ClusterRole; everything else goes in the Role.

A custom object's group and plural are placeholders of that path: they are followed from
the ``CustomResource`` at the call site through the project's own wrappers
(``kube.create(PYTORCHJOB, ...)``, ``create_or_adopt(kube, EXPERIMENT, ...)``) to the client
call. The launcher handles job kinds only through ``JobKind`` objects, so a resource written
``<something>.resource`` (``target.kind.resource``) stands for the ``.resource`` of every
such object ``components/`` defines (the JobKinds of PyTorchJob and TrainJob).

A request for one Namespace (``namespaces/{name}``) is filed by the API server under that
namespace (k8s.io/apiserver v0.36.3 pkg/endpoints/request/requestinfo.go: the name after
``namespaces`` becomes the request's namespace), so a Role there grants it: reading the run's
own namespace goes in the Role, and no ClusterRole is needed for it.

Every Role and ClusterRole shipped anywhere in k8s/ is one of these, each compared with the
calls of the code that acts with it: the steps' Role and ClusterRole (k8s/rbac), and the log
reader a MultiKueue worker grants the train step's log follower
(k8s/kueue/multikueue/worker, ``components/runtime/logs.py`` LogFollower).

``pipelines/`` (the CLI, which acts with the user's own credentials) is not part of this.
Discovery and OpenAPI documents (``KubeClient.served_resources``/``openapi_schema``) are
non-resource URLs every authenticated user may read (the ``system:discovery`` ClusterRole).
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import itertools
import re
import types
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import pytest

from components.specs.kinds import CustomResource

REPO = Path(__file__).resolve().parents[2]
STEP_CODE = sorted((REPO / "components").rglob("*.py"))
CLIENT_METHOD = re.compile(r"(create|read|get|list|replace|patch|delete|connect)_\w+")
CALL_API = re.compile(r"call_api\(\s*'([^']+)',\s*'([A-Z]+)'")
# HTTP method -> RBAC verb, for a request on one object / on a collection.
VERBS = {
    "GET": ("get", "list"),
    "POST": ("create", "create"),
    "PUT": ("update", "update"),
    "PATCH": ("patch", "patch"),
    "DELETE": ("delete", "deletecollection"),
}
SERVICE_ACCOUNT = {"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": "kubeflow"}


@dataclass(frozen=True)
class Ref:
    """A part (``group`` or ``plural``) of the CustomResource in parameter ``param``."""

    param: str
    part: str
    suffix: str = ""  # a subresource, e.g. "/status"


@dataclass(frozen=True)
class Call:
    """One API call; group and resource may still be parts of a parameter."""

    verb: str
    group: str | Ref
    resource: str | Ref
    namespaced: bool = True

    def resolved(self) -> bool:
        return not isinstance(self.group, Ref) and not isinstance(self.resource, Ref)


@dataclass
class Function:
    node: ast.FunctionDef
    module: types.ModuleType
    params: list[str]
    is_method: bool
    calls: set[Call]
    owner: str = ""  # the class of a method


@functools.cache
def client_request(method: str) -> tuple[str, str, tuple[str, ...]] | None:
    """(path template, HTTP method, positional parameters) of a kubernetes client method."""
    found = set()
    for name, cls in vars(kubernetes.client).items():
        with_info = getattr(cls, f"{method}_with_http_info", None)
        if not (name.endswith("Api") and inspect.isclass(cls) and with_info):
            continue
        path, http = CALL_API.search(inspect.getsource(with_info)).groups()
        params = tuple(
            p.name
            for p in inspect.signature(getattr(cls, method)).parameters.values()
            if p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self"
        )
        found.add((path, http, params))
    assert len(found) <= 1, f"{method} sends different requests in different classes: {found}"
    return found.pop() if found else None


def request_call(path: str, http: str) -> Call:
    """The RBAC call a request path template and HTTP method make (placeholders kept)."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespaced = rest[:2] == ["namespaces", "{namespace}"]
    if namespaced:
        rest = rest[2:]
    elif rest[:2] == ["namespaces", "{name}"]:  # one Namespace: filed under itself
        namespaced = True
    resource, named, subresource = rest[0], len(rest) > 1, rest[2:]
    one, collection = VERBS[http]
    return Call(one if named else collection, group, "/".join([resource, *subresource]), namespaced)


def evaluate(expr: ast.expr, module):
    """The value of an expression in its module's namespace (constants, imported names)."""
    return eval(compile(ast.Expression(expr), "<rbac>", "eval"), vars(module))  # noqa: S307


def placeholder(value: str, call: ast.Call, params: tuple[str, ...], function: Function):
    """A ``{group}``/``{plural}`` path placeholder from the call's argument, or the value."""
    found = re.fullmatch(r"\{(\w+)\}(.*)", value)
    if not found:
        return value
    name, suffix = found.groups()
    keywords = {kw.arg: kw.value for kw in call.keywords}
    expr = keywords[name] if name in keywords else call.args[params.index(name)]
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        if expr.value.id in function.params:
            return Ref(expr.value.id, expr.attr, suffix)
    try:
        return evaluate(expr, function.module) + suffix
    except NameError as exc:
        raise AssertionError(
            f"{function.module.__name__}:{call.lineno}: cannot tell the {name} of this API call "
            f"({ast.unparse(expr)}); use a CustomResource constant or parameter"
        ) from exc


def direct_calls(function: Function) -> set[Call]:
    """Calls of kubernetes client methods inside one function."""
    found = set()
    for node in ast.walk(function.node):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        request = CLIENT_METHOD.fullmatch(node.func.attr) and client_request(node.func.attr)
        if not request:
            continue
        path, http, params = request
        call = request_call(path, http)
        group, resource = (
            placeholder(value, node, params, function) for value in (call.group, call.resource)
        )
        found.add(Call(call.verb, group, resource, call.namespaced))
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def load_functions() -> dict[str, list[Function]]:
    """Every function and method in components/, by name."""
    functions: dict[str, list[Function]] = {}
    for path in STEP_CODE:
        module = importlib.import_module(module_name(path))
        tree = ast.parse(path.read_text(), str(path))
        owners = {
            id(item): cls.name
            for cls in ast.walk(tree)
            if isinstance(cls, ast.ClassDef)
            for item in cls.body
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                params = [arg.arg for arg in node.args.args]
                owner = owners.get(id(node), "")
                function = Function(node, module, params, bool(owner), set(), owner)
                function.calls = direct_calls(function)
                functions.setdefault(node.name, []).append(function)
    return functions


@functools.cache
def passed_around(attribute: str) -> tuple[CustomResource, ...]:
    """The ``.<attribute>`` CustomResources of the objects components/ defines at module level."""
    found = {}
    for path in STEP_CODE:
        for value in vars(importlib.import_module(module_name(path))).values():
            resource = getattr(value, attribute, None)
            if isinstance(resource, CustomResource) and not inspect.isclass(value):
                found[id(value)] = resource
    return tuple(found.values())


def involves_kube(site: ast.Call) -> bool:
    """Whether a call is made on, or given, a KubeClient (``kube``, ``self.kube``)."""
    exprs = [*site.args, *(kw.value for kw in site.keywords)]
    if isinstance(site.func, ast.Attribute):
        exprs.append(site.func.value)
    return any(ast.unparse(expr).endswith("kube") for expr in exprs)


def resources_of(expr: ast.expr | None, site: ast.Call, caller: Function):
    """What an argument for a CustomResource parameter can be: [resources], a Ref, or None.

    None when it is no CustomResource (``job.get("status")`` is a dict's get, not
    KubeClient.get): this callee is not the one called.
    """
    if expr is None:
        return None
    if isinstance(expr, ast.Name) and expr.id in caller.params:
        return expr.id
    if isinstance(expr, ast.Call) and ast.unparse(expr.func) == "kueue_resource":
        expr = expr.args[-1]  # the same kind at the version served; rules name no version
    try:
        value = evaluate(expr, caller.module)
    except (NameError, AttributeError):
        candidates = passed_around(expr.attr) if isinstance(expr, ast.Attribute) else ()
        if candidates:
            return list(candidates)
        assert not involves_kube(site), (
            f"{caller.module.__name__}:{site.lineno}: cannot tell which resource "
            f"{ast.unparse(expr)} is; pass a CustomResource constant, a parameter, or a JobKind's"
        )
        return None
    return [value] if isinstance(value, CustomResource) else None


def bind(callee: Function, site: ast.Call, caller: Function) -> set[Call] | None:
    """The callee's calls with its resource parameters bound to this call's arguments."""
    params = callee.params[1:] if callee.is_method else callee.params
    arguments = dict(zip(params, site.args, strict=False))
    arguments.update({kw.arg: kw.value for kw in site.keywords if kw.arg})
    refs = sorted(
        {
            part.param
            for call in callee.calls
            for part in (call.group, call.resource)
            if isinstance(part, Ref)
        }
    )
    choices = {}
    for param in refs:
        choices[param] = resources_of(arguments.get(param), site, caller)
        if choices[param] is None:
            return None
    bound = set()
    for combination in itertools.product(
        *([value] if isinstance(value, str) else value for value in choices.values())
    ):
        chosen = dict(zip(choices, combination, strict=True))
        for call in callee.calls:
            group, resource = (bind_part(value, chosen) for value in (call.group, call.resource))
            bound.add(Call(call.verb, group, resource, call.namespaced))
    return bound


def bind_part(value, chosen: dict):
    """A group or resource with the parameter it refers to replaced by its argument."""
    if not isinstance(value, Ref):
        return value
    argument = chosen[value.param]
    if isinstance(argument, str):  # the caller's own parameter: still a Ref
        return Ref(argument, value.part, value.suffix)
    return getattr(argument, value.part) + value.suffix


def propagated() -> dict[str, list[Function]]:
    """Every function of components/, each with the calls it makes through what it calls."""
    functions = load_functions()
    changed = True
    while changed:  # propagate through wrappers until nothing new appears
        changed = False
        for caller in (f for same_name in functions.values() for f in same_name):
            for site in ast.walk(caller.node):
                if not isinstance(site, ast.Call):
                    continue
                name = getattr(site.func, "attr", getattr(site.func, "id", None))
                for callee in functions.get(name, []):
                    bound = bind(callee, site, caller) if callee.calls else None
                    if bound and not bound <= caller.calls:
                        caller.calls |= bound
                        changed = True
    return functions


def derive_calls(owner: str = "") -> set[Call]:
    """Every resolved API call the code in components/ (or one class of it) can make."""
    return {
        call
        for same_name in propagated().values()
        for function in same_name
        if not owner or f"{function.module.__name__}.{function.owner}" == owner
        for call in function.calls
        if call.resolved()
    }


def triples(calls, namespaced: bool) -> set[tuple[str, str, str]]:
    return {(c.group, c.resource, c.verb) for c in calls if c.namespaced is namespaced}


@pytest.fixture(scope="module")
def derived() -> set[Call]:
    return derive_calls()


@pytest.fixture(scope="module")
def rbac(render_kustomization) -> dict[str, dict]:
    """The objects of k8s/rbac by kind (one of each)."""
    objects = render_kustomization(REPO / "k8s" / "rbac")
    kinds = [obj["kind"] for obj in objects]
    assert sorted(kinds) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    return {obj["kind"]: obj for obj in objects}


def test_the_predictors_account_has_no_token_and_no_binding(rbac):
    """The predictor never calls the API: its ServiceAccount mounts no token by default, and
    neither binding names it."""
    account = rbac["ServiceAccount"]
    assert account["metadata"] == {"name": "fmnist-predictor", "namespace": "kubeflow"}
    assert account["automountServiceAccountToken"] is False
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        assert "fmnist-predictor" not in {s["name"] for s in rbac[binding]["subjects"]}


def granted(role: dict) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_derivation_sees_every_steps_calls(derived):
    assert triples(derived, namespaced=True) == {
        ("kubeflow.org", "pytorchjobs", "create"),  # train
        ("kubeflow.org", "pytorchjobs", "get"),
        ("kubeflow.org", "pytorchjobs", "delete"),
        ("trainer.kubeflow.org", "trainjobs", "create"),
        ("trainer.kubeflow.org", "trainjobs", "get"),
        ("trainer.kubeflow.org", "trainjobs", "delete"),
        ("kueue.x-k8s.io", "workloads", "list"),
        ("", "pods", "list"),
        ("", "pods/log", "get"),
        ("serving.kserve.io", "inferenceservices", "create"),  # deploy
        ("serving.kserve.io", "inferenceservices", "get"),  # and evaluate: the champion
        ("serving.kserve.io", "inferenceservices", "update"),
        ("apps", "deployments", "list"),
        ("kubeflow.org", "experiments", "create"),  # tune
        ("kubeflow.org", "experiments", "get"),
        ("kubeflow.org", "experiments", "delete"),
        ("kubeflow.org", "trials", "list"),
        ("", "namespaces", "get"),  # validate-serving: its own namespace's labels
        ("", "serviceaccounts", "get"),  # validate-serving: the predictor's account exists
    }
    assert triples(derived, namespaced=False) == {
        ("", "nodes", "get"),  # train: is a job's pod on a lost node? (lost_nodes.py)
    }


def test_role_grants_every_namespaced_call_and_nothing_else(rbac, derived):
    calls, grants = triples(derived, namespaced=True), granted(rbac["Role"])
    assert calls - grants == set(), "calls in components/ that k8s/rbac/role.yaml does not grant"
    assert grants - calls == set(), "grants in k8s/rbac/role.yaml that no step uses"


def test_cluster_role_grants_exactly_the_cluster_scoped_calls(rbac, derived):
    assert granted(rbac["ClusterRole"]) == triples(derived, namespaced=False)
    assert rbac["ClusterRole"]["metadata"] == {"name": "fmnist-pipeline-nodes"}


@pytest.mark.parametrize(
    ("binding", "role"), [("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")]
)
def test_both_roles_are_bound_to_the_pipeline_runner(rbac, binding, role):
    assert rbac[binding]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": role,
        "name": rbac[role]["metadata"]["name"],
    }
    assert rbac[binding]["subjects"] == [SERVICE_ACCOUNT]


def test_role_lives_where_the_runs_do(rbac):
    assert rbac["Role"]["metadata"]["namespace"] == "kubeflow"
    assert rbac["RoleBinding"]["metadata"]["namespace"] == "kubeflow"
    assert "namespace" not in rbac["ClusterRoleBinding"]["metadata"]


@pytest.mark.parametrize("kind", ["Role", "ClusterRole"])
def test_role_has_no_wildcards(rbac, kind):
    for rule in rbac[kind]["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field]


K8S = REPO / "k8s"
ROLE_KINDS = ("Role", "ClusterRole")
LOG_READER = "components.runtime.logs.LogFollower"
LOG_ROLE = "fmnist-training-log-reader"


@pytest.fixture(scope="module")
def shipped(render_kustomization) -> list[dict]:
    """Every Role, ClusterRole and binding of every kustomization under k8s/, once each."""
    found = {}
    for folder in sorted(path.parent for path in K8S.rglob("kustomization.yaml")):
        for obj in render_kustomization(folder):
            if obj["kind"] in (*ROLE_KINDS, "RoleBinding", "ClusterRoleBinding"):
                key = (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
                found[key] = obj
    return list(found.values())


@functools.cache
def namespaced_resources() -> frozenset[str]:
    """The resources the kubernetes client reaches under ``namespaces/{namespace}``."""
    found = set()
    for cls in vars(kubernetes.client).values():
        if not (inspect.isclass(cls) and cls.__name__.endswith("Api")):
            continue
        for path, _ in CALL_API.findall(inspect.getsource(cls)):
            if "/namespaces/{namespace}/" in path:
                call = request_call(path, "GET")
                found.add(call.resource)
    return frozenset(found)


def test_every_shipped_role_is_one_the_code_acts_with(shipped):
    """No Role or ClusterRole in k8s/ that these tests do not compare with code."""
    roles = {(o["kind"], o["metadata"]["name"]) for o in shipped if o["kind"] in ROLE_KINDS}
    assert roles == {
        ("Role", "fmnist-pipeline-steps"),
        ("ClusterRole", "fmnist-pipeline-nodes"),
        ("Role", "fmnist-training-log-reader"),
    }


def test_the_log_reader_grants_exactly_what_the_log_follower_calls(shipped):
    (role,) = [o for o in shipped if o["kind"] == "Role" and o["metadata"]["name"] == LOG_ROLE]
    bindings = [o for o in shipped if o["kind"] == "RoleBinding"]
    (binding,) = [o for o in bindings if o["roleRef"]["name"] == LOG_ROLE]
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    follower = derive_calls(LOG_READER)
    assert triples(follower, namespaced=False) == set()
    assert (
        granted(role)
        == triples(follower, namespaced=True)
        == {
            ("", "pods", "list"),
            ("", "pods/log", "get"),
        }
    )


def test_every_binding_grants_in_its_own_namespace_where_it_can(shipped):
    """A ClusterRole only for what has no namespace; a RoleBinding beside each Role."""
    for obj in shipped:
        if obj["kind"] == "ClusterRole":
            resources = {r for rule in obj["rules"] for r in rule["resources"]}
            assert resources.isdisjoint(namespaced_resources() - {"namespaces"}), obj
            assert "namespaces" not in resources, "the run's own namespace is the Role's"
        if obj["kind"] == "RoleBinding":
            namespace = obj["metadata"]["namespace"]
            assert obj["roleRef"]["kind"] == "Role", obj
            assert {s.get("namespace", namespace) for s in obj["subjects"]} == {namespace}


def test_namespaced_resources_are_told_from_cluster_scoped_ones():
    assert {"pods", "pods/log", "secrets", "networkpolicies"} <= namespaced_resources()
    assert {"nodes", "persistentvolumes"}.isdisjoint(namespaced_resources())


def calls_in(source: str, params=("api",)) -> set[tuple]:
    node = ast.parse(source).body[0]
    function = Function(node, types.ModuleType("example"), list(params), False, set())
    return {(c.group, c.resource, c.verb, c.namespaced) for c in direct_calls(function)}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "def f(api):\n    api.read_namespaced_pod_log('p', 'ns')\n",
            ("", "pods/log", "get", True),
        ),
        (
            "def f(api):\n    api.list_namespaced_persistent_volume_claim('ns')\n",
            ("", "persistentvolumeclaims", "list", True),
        ),
        (
            "def f(api):\n    api.patch_namespaced_custom_object_status("
            "'kubeflow.org', 'v1beta1', 'ns', 'experiments', 'x', {})\n",
            ("kubeflow.org", "experiments/status", "patch", True),
        ),
        (
            "def f(api):\n    api.replace_namespaced_custom_object("
            "plural='inferenceservices', group='serving.kserve.io', version='v1beta1',"
            " namespace='ns', name='x', body={})\n",
            ("serving.kserve.io", "inferenceservices", "update", True),
        ),
        (
            "def f(api):\n    api.list_namespaced_deployment('ns', label_selector='a=b')\n",
            ("apps", "deployments", "list", True),
        ),
        (
            "def f(api):\n    api.delete_collection_namespaced_job('ns')\n",
            ("batch", "jobs", "deletecollection", True),
        ),
        ("def f(api):\n    api.read_namespace('kubeflow')\n", ("", "namespaces", "get", True)),
        ("def f(api):\n    api.list_namespace()\n", ("", "namespaces", "list", False)),
        ("def f(api):\n    api.list_node()\n", ("", "nodes", "list", False)),
    ],
)
def test_client_calls_map_to_rbac_triples(source, expected):
    assert calls_in(source) == {expected}


def test_a_custom_resource_parameter_stays_open_until_a_caller_binds_it():
    source = (
        "def f(api, resource):\n"
        "    api.get_namespaced_custom_object(resource.group, 'v1', 'ns', resource.plural, 'x')\n"
    )
    node = ast.parse(source).body[0]
    (call,) = direct_calls(Function(node, types.ModuleType("m"), ["api", "resource"], False, set()))
    assert call == Call("get", Ref("resource", "group"), Ref("resource", "plural"))


def test_other_methods_of_the_same_name_are_no_api_calls():
    assert calls_in("def f(job):\n    job.get('status')\n    job.list()\n", ("job",)) == set()
