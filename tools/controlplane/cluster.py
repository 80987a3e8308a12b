#!/usr/bin/env python3
"""A real Kubernetes control plane with the Kubeflow controllers and two real nodes, here.

    python tools/controlplane/cluster.py build  [--trainer v2.1.0|v2.3.0] [--kserve v0.15.2|v0.20.0]
    python tools/controlplane/cluster.py up     [same options] [--workers 0|1|2]  # build, start
    python tools/controlplane/cluster.py up --without-nodes  # steps 1-5 below: kwok's nodes only
    python tools/controlplane/cluster.py nodes   # then steps 6-7: the real nodes join it
    python tools/controlplane/cluster.py down                    # stop everything
    python tools/controlplane/cluster.py status
    python tools/controlplane/cluster.py images                  # build the images (cached)
    python tools/controlplane/cluster.py restart-apiserver [--down-seconds N]
    python tools/controlplane/cluster.py karmada   # attach Karmada, the workers its members
    python tools/controlplane/cluster.py build-karmada  # build Karmada only (cached)
    python tools/controlplane/cluster.py node-off 2  # lose real-node-2 (a power cut)
    python tools/controlplane/cluster.py node-on 2   # and get it back

Every component is built with ``go build`` from the module pinned in
``tools/controlplane/<component>/go.mod`` (the ``tool`` directives name the programs) into a
machine-level cache keyed by that go.mod/go.sum, ``${XDG_CACHE_HOME:-~/.cache}/fmnist-controlplane/
<component>-<hash>/``, together with the component's CRDs, webhook configurations and config
maps rendered with kustomize from the same module. ``up`` then

1. runs kwokctl's "binary" runtime (sigs.k8s.io/kwok pkg/kwokctl/runtime/binary) with our
   etcd, kube-apiserver (RBAC and the default admission plugins on), kube-controller-manager,
   kube-scheduler and kwok binaries; kwokctl makes the certificates and the admin kubeconfig;
2. applies the CRDs, the webhook configurations (each webhook's ``clientConfig`` rewritten to
   ``https://127.0.0.1:<port><path>`` with this harness's CA), the config maps and the fake
   nodes (config/nodes.yaml);
3. starts the controllers as local processes with the admin kubeconfig, each serving its
   webhooks with this harness's certificate, their own certificate rotators off where a flag
   or setting allows it (Training Operator v1 and Kueue keep theirs, fed a Secret holding
   this harness's certificate, which their rotators accept as valid);
4. waits until every controller answers its readiness probe and its webhook port over TLS,
   then applies what needs the webhooks (the torch-distributed ClusterTrainingRuntime) and
   kwok's ClusterLogs, and waits for the nodes to be Ready;
5. starts ``--workers`` MultiKueue worker clusters (harness/workers.py), each with its own
   control plane, JobSet, Training Operator, Trainer and Kueue, and puts each one's
   kubeconfig in a Secret on the main cluster, their manager;
6. starts CoreDNS, the image registry with the images of harness/images.py pushed into it
   (harness/registry.py), and the two real nodes (harness/node.py: each containerd v2 with
   runc, the bridge CNI, a kubelet and kube-proxy; the second in a network namespace of its
   own, harness/node_network.py), which pull the images, and waits until they are Ready;
7. starts kube-router's NetworkPolicy controller on each real node (harness/enforcer.py), so
   that the NetworkPolicies of k8s/network-policies are enforced there.

``karmada``, on a running cluster with both workers, starts Karmada's control plane (its own
kube-apiserver, and the aggregated apiserver, webhook, controller manager and scheduler,
built then unless ``build-karmada`` built them before: nothing else needs them, so CI builds
them while the cluster tests run) and joins the two workers to it as members (harness/karmada.py;
build/cluster/kubeconfig-karmada).

The work is done by the ``harness`` package beside this file, one module per concern.
Files: build/cluster/kubeconfig (admin), build/cluster/logs/<component>.log,
build/cluster/state.json (ports, pids, versions), build/cluster/bin/ (links into the cache).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The harness, and the project itself for its image names (components/images.py): CI starts
# the build with the system's Python, before the project's venv exists.
sys.path[:0] = [str(HERE), str(HERE.parents[1])]
from harness.commands import main  # noqa: E402

if __name__ == "__main__":
    main(sys.argv[1:], __doc__.split("\n\n")[0])
