"""The Pod Security Standards "restricted" profile, as checks on a pod spec (plain dict).

The controls of Kubernetes v1.33's restricted profile (which includes baseline), as
written in kubernetes/website ``content/en/docs/concepts/security/pod-security-standards.md``
and implemented by k8s.io/pod-security-admission ``policy/check_*.go`` (kubernetes
v1.33.0 ``staging/src/k8s.io/pod-security-admission/policy``). ``violations`` returns one
line per broken control; the cluster tier checks the same pods against the real
admission plugin in a namespace labelled ``pod-security.kubernetes.io/enforce=restricted``.
"""

from __future__ import annotations

RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _containers(pod: dict) -> list[dict]:
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def violations(pod: dict) -> list[str]:
    """Every restricted-profile control ``pod`` (a PodSpec) breaks."""
    found = []
    pod_context = pod.get("securityContext", {})
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            found.append(f"host namespaces: {flag}")
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume types: {volume['name']} uses {sorted(kinds)}")
    if pod_context.get("runAsUser") == 0:
        found.append("running as non-root user: pod runAsUser 0")
    for container in _containers(pod):
        found += _container_violations(container, pod_context)
    return found


def _container_violations(container: dict, pod_context: dict) -> list[str]:
    name, context = container["name"], container.get("securityContext", {})
    found = []
    if context.get("privileged"):
        found.append(f"privileged: {name}")
    if context.get("allowPrivilegeEscalation") is not False:
        found.append(f"privilege escalation: {name} must set allowPrivilegeEscalation false")
    non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
    if non_root is not True:
        found.append(f"running as non-root: {name} (or the pod) must set runAsNonRoot true")
    if context.get("runAsUser") == 0:
        found.append(f"running as non-root user: {name} runAsUser 0")
    seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {}))
    if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
        found.append(f"seccomp: {name} (or the pod) needs RuntimeDefault or Localhost")
    capabilities = context.get("capabilities", {})
    if "ALL" not in capabilities.get("drop", []):
        found.append(f"capabilities: {name} must drop ALL")
    if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
        found.append(f"capabilities: {name} adds {capabilities['add']}")
    if any(port.get("hostPort") for port in container.get("ports", [])):
        found.append(f"host ports: {name}")
    return found


# The baseline profile's capabilities a container may add (check_capabilities_baseline.go).
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip


def baseline_violations(pod: dict) -> list[str]:
    """Every "baseline"-profile control ``pod`` (a PodSpec) breaks: what such a namespace refuses.

    Baseline leaves the user alone (root is allowed) and forbids host namespaces, hostPath
    volumes, privileged containers, added capabilities beyond its list, host ports and an
    Unconfined seccomp profile.
    """
    found = [line for line in violations(pod) if line.startswith("host namespaces")]
    for volume in pod.get("volumes", []):
        if "hostPath" in volume:
            found.append(f"hostPath volumes: {volume['name']}")
    pod_seccomp = pod.get("securityContext", {}).get("seccompProfile", {})
    for container in _containers(pod):
        name, context = container["name"], container.get("securityContext", {})
        if context.get("privileged"):
            found.append(f"privileged: {name}")
        added = set(context.get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES
        if added:
            found.append(f"capabilities: {name} adds {sorted(added)}")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            found.append(f"host ports: {name}")
        if context.get("seccompProfile", pod_seccomp).get("type") == "Unconfined":
            found.append(f"seccomp: {name} is Unconfined")
    return found
