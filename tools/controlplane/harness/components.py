"""The components of one cluster: each a Go module pinned in tools/controlplane/<name>/."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.paths import CONTROLPLANE
from harness.pins import upstream


@dataclass(frozen=True)
class Component:
    """One folder under tools/controlplane: a Go module, its programs and its manifests."""

    name: str
    module: str
    tools: dict[str, str]  # binary name -> package
    manifests: tuple[str, ...] = ()  # kustomize folders of the module, rendered together
    namespace: str = ""  # the namespace kustomize sets on them
    files: tuple[str, ...] = ()  # files of the module kept as they are
    ldflags: tuple[str, ...] = field(default=())
    folder: str = ""  # the folder of its go.mod, when another component's (default: name)

    @property
    def dir(self) -> Path:
        """tools/controlplane/<folder or name>/: its go.mod and go.sum."""
        return CONTROLPLANE / (self.folder or self.name)

    @property
    def version(self) -> str:
        """The version of the component's module that its own go.mod pins."""
        (pin,) = [
            p for p in upstream.pins() if p.module == self.module and p.gomod.parent == self.dir
        ]
        return pin.version


def _k8s_ldflags() -> tuple[str, ...]:
    """The version variables hack/lib/version.sh sets (kwokctl reads `--version`)."""
    version = upstream.pin("k8s.io/kubernetes").version
    major, minor = version[1:].split(".")[:2]
    flags = []
    for package in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        for key, value in (
            ("gitVersion", version),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", "1970-01-01T00:00:00Z"),
        ):
            flags.append(f"-X {package}.{key}={value}")
    return tuple(flags)


def _control_plane() -> list[Component]:
    """Kubernetes itself, etcd and kwok."""
    return [
        Component(
            "kubernetes",
            "k8s.io/kubernetes",
            {
                "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
                "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
                "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
            },
            ldflags=_k8s_ldflags(),
        ),
        Component("etcd", "go.etcd.io/etcd/server/v3", {"etcd": "go.etcd.io/etcd/server/v3"}),
        Component(
            "kwok",
            "sigs.k8s.io/kwok",
            {"kwok": "sigs.k8s.io/kwok/cmd/kwok", "kwokctl": "sigs.k8s.io/kwok/cmd/kwokctl"},
            files=(
                "kustomize/stage/node/fast/node-initialize.yaml",
                "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
                "kustomize/stage/pod/fast/pod-ready.yaml",
                "kustomize/stage/pod/fast/pod-delete.yaml",
            ),
            ldflags=(
                "-X sigs.k8s.io/kwok/pkg/consts.KubeVersion="
                + upstream.pin("k8s.io/kubernetes").version[1:],
            ),
        ),
    ]


def _node() -> list[Component]:
    """What the real nodes run: kubelet, kube-proxy, containerd, DNS, registry, policy enforcer.

    The kubelet and kube-proxy come from the control plane's module (its build cache), but
    build after the controllers: a cluster of kwok's nodes needs neither.
    """
    containerd = "github.com/containerd/containerd/v2"
    return [
        Component(
            "kubelet",
            "k8s.io/kubernetes",
            {
                "kubelet": "k8s.io/kubernetes/cmd/kubelet",  # harness/node.py
                "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
            },
            ldflags=_k8s_ldflags(),
            folder="kubernetes",
        ),
        Component(
            "containerd",
            containerd,
            {
                name: f"{containerd}/cmd/{name}"
                for name in ("containerd", "containerd-shim-runc-v2", "ctr")
            },
        ),
        # coredns/main.go: upstream's program with only the plugins the tier's Corefile uses.
        Component(
            "coredns",
            "github.com/coredns/coredns",
            {"coredns": "fmnist.local/controlplane/coredns"},
        ),
        # registry/main.go: upstream's program with only the filesystem storage driver.
        Component(
            "registry",
            "github.com/distribution/distribution/v3",
            {"registry": "fmnist.local/controlplane/registry"},
        ),
        # kube-router/main.go: upstream's program with only its NetworkPolicy controller.
        Component(
            "kube-router",
            "github.com/cloudnativelabs/kube-router/v2",
            {"kube-router": "fmnist.local/controlplane/kube-router"},
        ),
    ]


def _kubeflow(trainer: str, kserve: str) -> list[Component]:
    """The controllers the project's objects need (Trainer and KServe selectable)."""
    trainer_module = "github.com/kubeflow/trainer/v2"
    return [
        Component(
            "jobset", "sigs.k8s.io/jobset", {"jobset": "sigs.k8s.io/jobset"}, ("config/default",)
        ),
        Component(
            "training-operator",
            "github.com/kubeflow/training-operator",
            {"training-operator": "github.com/kubeflow/training-operator/cmd/training-operator.v1"},
            ("manifests/overlays/standalone",),
        ),
        Component(
            f"trainer-{trainer}",
            trainer_module,
            {"trainer-controller-manager": f"{trainer_module}/cmd/trainer-controller-manager"},
            ("manifests/base/crds", "manifests/base/webhook"),
            namespace="kubeflow-system",
            files=(
                "manifests/base/manager/controller_manager_config.yaml",
                "manifests/base/runtimes/torch_distributed.yaml",
            ),
        ),
        Component(
            "kueue",
            "sigs.k8s.io/kueue",
            {"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
            ("config/default",),
        ),
        Component(
            "katib",
            "github.com/kubeflow/katib",
            {
                "katib-controller": "github.com/kubeflow/katib/cmd/katib-controller/v1beta1",
                "goptuna-suggestion": "github.com/kubeflow/katib/cmd/suggestion/goptuna/v1beta1",
                "katib-db-manager": "github.com/kubeflow/katib/cmd/db-manager/v1beta1",
                "file-metricscollector": "github.com/kubeflow/katib/cmd/metricscollector/v1beta1/"
                "file-metricscollector",
            },
            ("manifests/v1beta1/installs/katib-standalone",),
        ),
        Component(
            f"kserve-{kserve}",
            "github.com/kserve/kserve",
            {"kserve-manager": "github.com/kserve/kserve/cmd/manager"},
            ("config/default",) if kserve == "v0.15.2" else ("config/default", "config/configmap"),
            namespace="" if kserve == "v0.15.2" else "kserve",
        ),
    ]


def without_nodes(wanted: dict[str, Component]) -> dict[str, Component]:
    """What a cluster of kwok's nodes alone runs: ``wanted`` less the real nodes' programs."""
    node_programs = {component.name for component in _node()}
    return {name: c for name, c in wanted.items() if name not in node_programs}


def karmada() -> Component:
    """Karmada's control plane (harness/karmada.py), over the MultiKueue workers.

    Built on its own, when ``cluster.py karmada`` first needs it, since nothing else does.
    """
    module = "github.com/karmada-io/karmada"
    crds = "charts/karmada/_crds/bases"
    return Component(
        "karmada",
        module,
        {
            f"karmada-{name}": f"{module}/cmd/{name}"
            for name in ("aggregated-apiserver", "controller-manager", "scheduler", "webhook")
        },
        # The CRDs without the kustomization's conversion patches: only the bindings have a
        # second version (v1alpha1), which nothing here reads.
        files=(
            *(f"{crds}/{path}" for path in KARMADA_CRDS),
            "artifacts/deploy/webhook-configuration.yaml",
        ),
    )


# charts/karmada/_crds/kustomization.yaml's resources (Karmada v1.18.1).
KARMADA_CRDS = (
    "multicluster/multicluster.x-k8s.io_serviceexports.yaml",
    "multicluster/multicluster.x-k8s.io_serviceimports.yaml",
    "policy/policy.karmada.io_clusteroverridepolicies.yaml",
    "policy/policy.karmada.io_clusterpropagationpolicies.yaml",
    "policy/policy.karmada.io_clustertaintpolicies.yaml",
    "policy/policy.karmada.io_federatedresourcequotas.yaml",
    "policy/policy.karmada.io_overridepolicies.yaml",
    "policy/policy.karmada.io_propagationpolicies.yaml",
    "work/work.karmada.io_resourcebindings.yaml",
    "work/work.karmada.io_clusterresourcebindings.yaml",
    "work/work.karmada.io_works.yaml",
    "config/config.karmada.io_resourceinterpretercustomizations.yaml",
    "config/config.karmada.io_resourceinterpreterwebhookconfigurations.yaml",
    "networking/networking.karmada.io_multiclusteringresses.yaml",
    "networking/networking.karmada.io_multiclusterservices.yaml",
    "autoscaling/autoscaling.karmada.io_federatedhpas.yaml",
    "autoscaling/autoscaling.karmada.io_cronfederatedhpas.yaml",
    "remedy/remedy.karmada.io_remedies.yaml",
    "apps/apps.karmada.io_workloadrebalancers.yaml",
)


def components(trainer: str, kserve: str) -> dict[str, Component]:
    """The components of one cluster, by folder name (Karmada aside: ``karmada()``).

    In build order after containerd and the registry (the images go through those): the
    control plane and the controllers, then what only the real nodes run.
    """
    found = _control_plane() + _kubeflow(trainer, kserve) + _node()
    for component in found:
        if not (component.dir / "go.mod").exists():
            raise SystemExit(f"no {component.dir}/go.mod: choose a version that has a folder")
    return {component.name: component for component in found}
