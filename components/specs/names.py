"""Kubernetes names, quantities and image references: the one set of checks every command uses.

The rules are Kubernetes' own (k8s.io/apimachinery ``pkg/util/validation``): a DNS-1123
label (namespaces), a DNS-1035 label (Services, and the objects a Service or a pod is
named after: InferenceServices, training jobs, Katib Experiments), a DNS-1123 subdomain
(PVCs, StorageClasses, runtimes); a resource quantity as ``resource.Quantity`` reads it
(here: unsigned, without exponent, and above zero, since every quantity we set is a size
or a limit); and an image reference in the grammar of distribution/reference
(``[host[:port]/]path[:tag][@digest]``).
"""

from __future__ import annotations

import re

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
IMAGE_NAME_MAX = 255  # distribution/reference: the name part (before tag and digest)

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN_PATTERN = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
QUANTITY_PATTERN = re.compile(
    r"(?P<number>\d+(\.\d*)?|\.\d+)(?P<suffix>m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?"
)
_SUFFIXES = {
    "m": 1e-3,
    **{suffix: 1000.0**power for power, suffix in enumerate("kMGTPE", start=1)},
    **{suffix + "i": 1024.0**power for power, suffix in enumerate("KMGTPE", start=1)},
}
# An extended resource name: a DNS-subdomain prefix, "/", and a name (e.g. nvidia.com/gpu).
_RESOURCE_NAME = re.compile(
    r"(?=.{1,253}/)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_HOST = re.compile(
    r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*(:\d+)?"
)
_PATH = re.compile(r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*")
_TAG = re.compile(r"\w[\w.-]{0,127}")
_SERVICE_ADDRESS = re.compile(rf"https?://{_HOST.pattern}/?")  # no path
_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")


def _fits(pattern: re.Pattern, text: object, max_length: int) -> bool:
    return isinstance(text, str) and len(text) <= max_length and bool(pattern.fullmatch(text))


def is_dns_label(text: object, max_length: int = LABEL_MAX) -> bool:
    """A DNS-1123 label: lowercase letters, digits and ``-``, alphanumeric at both ends."""
    return _fits(_DNS1123_LABEL, text, max_length)


def is_dns1035_label(text: object, max_length: int = LABEL_MAX) -> bool:
    """A DNS-1035 label: a DNS-1123 label that starts with a letter."""
    return _fits(_DNS1035_LABEL, text, max_length)


def is_dns_subdomain(text: object, max_length: int = SUBDOMAIN_MAX) -> bool:
    """A DNS-1123 subdomain: DNS labels joined by dots."""
    return _fits(DNS_SUBDOMAIN_PATTERN, text, max_length)


def is_quantity(text: object) -> bool:
    """A Kubernetes quantity above zero, such as ``2``, ``500m``, ``1.5``, ``4Gi``."""
    found = QUANTITY_PATTERN.fullmatch(text) if isinstance(text, str) else None
    return found is not None and float(found["number"]) > 0


def quantity_value(text: str) -> float:
    """A quantity accepted by ``is_quantity`` as a number: ``500m`` is 0.5, ``4Gi`` 4 * 2**30."""
    found = QUANTITY_PATTERN.fullmatch(text)
    if found is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(found["number"]) * _SUFFIXES.get(found["suffix"], 1.0)


def is_resource_name(text: object) -> bool:
    """An extended resource name such as ``nvidia.com/gpu`` or ``nvidia.com/mig-1g.10gb``."""
    return isinstance(text, str) and bool(_RESOURCE_NAME.fullmatch(text))


def is_service_address(text: object) -> bool:
    """An HTTP(S) server's address: ``http://host:port`` or ``https://host``, no path."""
    return isinstance(text, str) and bool(_SERVICE_ADDRESS.fullmatch(text))


def is_image(text: object) -> bool:
    """An image reference such as ``ghcr.io/org/trainer:0.1``, ``localhost:5000/x@sha256:...``.

    The first part of the name is a registry host only if it has a dot or a port or is
    ``localhost`` (as Docker decides); otherwise it belongs to the repository path.
    """
    if not isinstance(text, str) or text.count("@") > 1:
        return False
    reference, at, digest = text.partition("@")
    host, slash, rest = reference.partition("/")
    if not (slash and ("." in host or ":" in host or host == "localhost")):
        host, rest = "", reference
    path, colon, tag = rest.rpartition(":") if ":" in rest else (rest, "", "")
    name_length = len(reference) - len(colon + tag)
    return (
        name_length <= IMAGE_NAME_MAX
        and (not host or bool(_HOST.fullmatch(host)))
        and bool(_PATH.fullmatch(path))
        and (not colon or bool(_TAG.fullmatch(tag)))
        and (not at or bool(_DIGEST.fullmatch(digest)))
    )
