"""The harness's certificates: one CA, one serving certificate for every webhook."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

from harness.paths import PKI
from harness.processes import run

# The names the controllers' certificate rotators check (open-policy-agent/cert-controller
# ValidCert): the CA must be valid for the rotator's CAName, the serving certificate for the
# webhook Service's DNS name. The apiserver checks the IP of the rewritten URL.
CA_NAMES = ["training-operator-ca", "kueue-ca"]  # training-operator pkg/cert, kueue pkg/util/cert
SERVICE_NAMES = [
    "training-operator.kubeflow.svc",
    "kueue-webhook-service.kueue-system.svc",
    "jobset-webhook-service.jobset-system.svc",
    "kubeflow-trainer-controller-manager.kubeflow-system.svc",
    "katib-controller.kubeflow.svc",
    "kserve-webhook-server-service.kserve.svc",
    "karmada-aggregated-apiserver.karmada-system.svc",  # harness/karmada.py's APIService
]


def make_pki() -> dict[str, Path]:
    """A CA and one serving certificate (127.0.0.1 and every webhook Service name).

    RSA keys in PKCS#1 form: cert-controller's rotator parses the CA key with
    x509.ParsePKCS1PrivateKey (open-policy-agent/cert-controller v0.16.0 pkg/rotator).
    """
    PKI.mkdir(parents=True, exist_ok=True)
    paths = {name: PKI / name for name in ("ca.crt", "ca.key", "tls.crt", "tls.key")}
    tls_names = ",".join(f"DNS:{name}" for name in ["localhost", *SERVICE_NAMES])
    extensions = (
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,{tls_names}\n"
    )
    made_for = PKI / "tls.ext"  # the names the certificate here was made for
    if made_for.exists() and made_for.read_text() == extensions:
        if all(path.exists() for path in paths.values()):
            return paths
    ca_names = ",".join(f"DNS:{name}" for name in CA_NAMES)
    made_for.write_text(extensions)
    ca_key, ca_crt, key, crt = (str(paths[n]) for n in ("ca.key", "ca.crt", "tls.key", "tls.crt"))
    csr = str(PKI / "tls.csr")
    for command in (
        f"genrsa -traditional -out {ca_key} 2048",
        f"req -x509 -new -key {ca_key} -subj /CN=fmnist-cluster-tier-ca -days 3650 -out {ca_crt}"
        " -addext basicConstraints=critical,CA:TRUE"
        " -addext keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
        f" -addext subjectAltName={ca_names}",
        f"genrsa -traditional -out {key} 2048",
        f"req -new -key {key} -subj /CN=127.0.0.1 -out {csr}",
        f"x509 -req -in {csr} -CA {ca_crt} -CAkey {ca_key} -CAcreateserial -days 3650"
        f" -extfile {PKI / 'tls.ext'} -out {crt}",
    ):
        run(["openssl", *command.split()])
    return paths


def install_certs(folder: Path, pki: dict[str, Path]) -> None:
    """tls.crt/tls.key (and ca.crt) where controller-runtime's webhook server reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        shutil.copyfile(pki[name], folder / name)


def remove_certs(folder: Path) -> None:
    """Undo ``install_certs`` where the files are still ours; remove folders left empty."""
    for name in ("tls.crt", "tls.key", "ca.crt"):
        ours, theirs = PKI / name, folder / name
        if ours.exists() and theirs.exists() and ours.read_bytes() == theirs.read_bytes():
            theirs.unlink()
    for empty in (folder, *folder.parents):
        if empty == Path("/tmp") or not empty.is_dir() or any(empty.iterdir()):
            break
        empty.rmdir()


def cert_secret(namespace: str, name: str, pki: dict[str, Path]) -> dict:
    """A Secret a cert-controller rotator accepts as its CA and serving certificate."""
    data = {key: base64.b64encode(path.read_bytes()).decode() for key, path in pki.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"namespace": namespace, "name": name},
        "data": data,
    }
