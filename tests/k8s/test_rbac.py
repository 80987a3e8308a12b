"""The Role in k8s/rbac grants exactly the API calls the steps' code makes.

The calls are derived from the source, not listed by hand: every function in
components/ is read with ``ast``, calls to the Kubernetes client
(``<verb>_namespaced_<kind>``) become ``(apiGroup, resource, verb)`` triples, and a
custom object's group and plural are followed from the ``CustomResource`` constant at the
call site through the project's own wrappers (``kube.create(PYTORCHJOB, ...)``,
``apply(kube, INFERENCESERVICE, ...)``) to the client call that uses them.
"""

from __future__ import annotations

import ast
import importlib
import re
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.manifests import CustomResource

REPO = Path(__file__).resolve().parents[2]
STEP_CODE = sorted((REPO / "components").glob("*.py"))
CLIENT_CALL = re.compile(r"(create|read|get|list|replace|patch|delete)_namespaced_(\w+)")
VERBS = {
    "create": "create",
    "read": "get",
    "get": "get",
    "list": "list",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
}
# Positions of group and plural in CustomObjectsApi's *_namespaced_custom_object calls.
CUSTOM_ARGS = {"group": 0, "plural": 3}


@dataclass(frozen=True)
class Ref:
    """A resource not known inside the function: its parameter ``param``."""

    param: str


@dataclass(frozen=True)
class Call:
    """One API call: a verb on a resource, which may still be a parameter."""

    verb: str
    group: str | Ref
    resource: str | Ref


@dataclass
class Function:
    node: ast.FunctionDef
    module: object
    params: list[str]
    is_method: bool
    calls: set[Call]


def core_resource(kind: str) -> str:
    """``pod`` -> ``pods``, ``pod_log`` -> ``pods/log``, ``persistent_volume_claim`` -> ..."""
    for sub in ("log", "status"):
        if kind.endswith(f"_{sub}"):
            return f"{core_resource(kind[: -len(sub) - 1])}/{sub}"
    return kind.replace("_", "") + "s"


def evaluate(expr: ast.expr, module):
    """The value of an expression in its module's namespace (constants, imported names)."""
    return eval(compile(ast.Expression(expr), "<rbac>", "eval"), vars(module))  # noqa: S307


def custom_part(call: ast.Call, part: str, function: Function):
    """The group or plural argument: a string, or a Ref to a CustomResource parameter."""
    keywords = {kw.arg: kw.value for kw in call.keywords}
    expr = keywords.get(part)
    if expr is None:
        expr = call.args[CUSTOM_ARGS[part]]
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        if expr.value.id in function.params:
            return Ref(expr.value.id)
    try:
        return evaluate(expr, function.module)
    except NameError as exc:
        raise AssertionError(
            f"{function.module.__name__}:{call.lineno}: cannot tell the {part} of this API call "
            f"({ast.unparse(expr)}); use a CustomResource constant or parameter"
        ) from exc


def direct_calls(function: Function) -> set[Call]:
    """Calls of kubernetes client methods inside one function."""
    found = set()
    for node in ast.walk(function.node):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        match = CLIENT_CALL.fullmatch(node.func.attr)
        if not match:
            continue
        verb, kind = VERBS[match[1]], match[2]
        if kind.startswith("custom_object"):
            group, plural = (custom_part(node, part, function) for part in ("group", "plural"))
            if kind.endswith("_status"):
                plural = f"{plural}/status"
            found.add(Call(verb, group, plural))
        else:
            found.add(Call(verb, "", core_resource(kind)))
    return found


def load_functions() -> dict[str, list[Function]]:
    """Every function and method in the step code, by name."""
    functions: dict[str, list[Function]] = {}
    for path in STEP_CODE:
        module = importlib.import_module(f"components.{path.stem}")
        tree = ast.parse(path.read_text(), str(path))
        methods = {
            id(item) for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) for item in cls.body
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                params = [arg.arg for arg in node.args.args]
                function = Function(node, module, params, id(node) in methods, set())
                function.calls = direct_calls(function)
                functions.setdefault(node.name, []).append(function)
    return functions


def bind(callee: Function, site: ast.Call, caller: Function) -> set[Call] | None:
    """The callee's calls with its resource parameters bound to this call's arguments.

    None when an argument for such a parameter is no CustomResource (the call is not to
    this callee: ``job.get("status")`` is a dict's get, not KubeClient.get).
    """
    params = callee.params[1:] if callee.is_method else callee.params
    arguments = dict(zip(params, site.args, strict=False))
    arguments.update({kw.arg: kw.value for kw in site.keywords if kw.arg})
    bound = set()
    for call in callee.calls:
        values = {}
        for field in ("group", "resource"):
            value = getattr(call, field)
            if isinstance(value, Ref):
                expr = arguments.get(value.param)
                if isinstance(expr, ast.Name) and expr.id in caller.params:
                    values[field] = Ref(expr.id)
                    continue
                try:
                    obj = evaluate(expr, caller.module) if expr is not None else None
                except NameError:
                    obj = None
                if not isinstance(obj, CustomResource):
                    return None
                value = obj.group if field == "group" else obj.plural
            values[field] = value
        bound.add(Call(call.verb, values["group"], values["resource"]))
    return bound


def derive_calls() -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every API call the step code can make."""
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
    return {
        (call.group, call.resource, call.verb)
        for same_name in functions.values()
        for function in same_name
        for call in function.calls
        if not isinstance(call.group, Ref) and not isinstance(call.resource, Ref)
    }


@pytest.fixture(scope="module")
def role(render_kustomization) -> dict:
    (role,) = [obj for obj in render_kustomization(REPO / "k8s" / "rbac") if obj["kind"] == "Role"]
    return role


def granted(role: dict) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_derivation_sees_the_training_steps_calls():
    calls = derive_calls()
    assert {
        ("kubeflow.org", "pytorchjobs", "create"),
        ("kubeflow.org", "pytorchjobs", "get"),
        ("", "pods", "list"),
        ("", "pods/log", "get"),
    } <= calls


def test_role_grants_every_call_the_steps_make_and_nothing_else(role):
    calls, grants = derive_calls(), granted(role)
    assert calls - grants == set(), "calls in components/ that k8s/rbac/role.yaml does not grant"
    assert grants - calls == set(), "grants in k8s/rbac/role.yaml that no step uses"


def test_role_has_no_wildcards(role):
    for rule in role["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(api):\n    api.read_namespaced_pod_log('p', 'ns')\n", {("", "pods/log", "get")}),
        (
            "def f(api):\n    api.list_namespaced_persistent_volume_claim('ns')\n",
            {("", "persistentvolumeclaims", "list")},
        ),
        (
            "def f(api):\n    api.patch_namespaced_custom_object_status("
            "'kubeflow.org', 'v1beta1', 'ns', 'experiments', 'x', {})\n",
            {("kubeflow.org", "experiments/status", "patch")},
        ),
        (
            "def f(api):\n    api.replace_namespaced_custom_object("
            "plural='inferenceservices', group='serving.kserve.io', version='v1beta1',"
            " namespace='ns', name='x', body={})\n",
            {("serving.kserve.io", "inferenceservices", "update")},
        ),
    ],
)
def test_client_calls_map_to_rbac_triples(source, expected):
    node = ast.parse(source).body[0]
    function = Function(node, types.ModuleType("example"), ["api"], False, set())
    calls = direct_calls(function)
    assert {(call.group, call.resource, call.verb) for call in calls} == expected
