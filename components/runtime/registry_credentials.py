"""Which token the Model Registry client sends, and where: only the one the user gives.

Left to itself, the client (model-registry
0.3.8 to 0.3.11 ``model_registry/_client.py``, ``ModelRegistry.__init__`` ->
``_get_user_token``) reads the file named by ``$KF_PIPELINES_SA_TOKEN_PATH``, else the
pod's service-account token, and sends it as ``Authorization: Bearer`` to whatever address
it is given, over plain http too: a run's ``model_registry`` parameter could collect the
runner's token. Here the client never looks for a token; it gets the one in
``Credentials`` (the Secret the steps mount, ``model_registry_secret``), and a token goes
over plain http only with ``model_registry_insecure``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

# Where the register and deploy steps mount the Secret named by model_registry_secret
# (pipelines/evaluate_and_deploy.py), and its keys.
CREDENTIALS_DIR = "/var/run/secrets/fmnist/model-registry"
TOKEN_KEY, CA_KEY = "token", "ca.crt"


class RegistryError(RuntimeError):
    """The registry cannot be reached, or does not hold what was asked for (one line)."""


@dataclass(frozen=True)
class Credentials:
    """What the client may send the registry: a bearer token and a CA bundle, both optional."""

    token: str = field(default="", repr=False)  # never in a log or a message
    ca_file: str | None = None  # PEM bundle that signs the registry's https certificate
    insecure: bool = False  # the user allows the token over plain http

    @classmethod
    def from_dir(cls, directory: str = CREDENTIALS_DIR, insecure: bool = False) -> Credentials:
        """The ``token`` and ``ca.crt`` files of a mounted Secret; none where it is absent."""
        token, ca = Path(directory) / TOKEN_KEY, Path(directory) / CA_KEY
        return cls(
            token=token.read_text().strip() if token.is_file() else "",
            ca_file=str(ca) if ca.is_file() else None,
            insecure=insecure,
        )


def client_class():
    """The client class, without its fallback to an ambient token."""
    from model_registry import ModelRegistry

    class ExplicitTokenOnly(ModelRegistry):
        """``ModelRegistry`` that sends only the token it is given, never one it finds."""

        @staticmethod
        def _get_user_token(user_token_envvar: str | None = None) -> str | None:
            return None

    return ExplicitTokenOnly


def check_transport(address: str, credentials: Credentials) -> None:
    """Refuse a token over plain http unless allowed (then warn), and https with no token.

    Raises:
        RegistryError: in one line, naming the parameter that changes it.
    """
    secure = urlparse(address).scheme == "https"
    if credentials.token and not secure:
        if not credentials.insecure:
            raise RegistryError(
                f"model registry {address}: refusing to send its token over plain http; "
                "use an https:// address, or set model_registry_insecure=true"
            )
        print(
            f"warning: sending the model registry token over plain http to {address} "
            "(model_registry_insecure=true)",
            flush=True,
        )
    if secure and not credentials.token:  # the client connects over https only with a token
        raise RegistryError(
            f"model registry {address}: an https registry needs a token; put it under the key "
            f"{TOKEN_KEY!r} of the Secret named by model_registry_secret"
        )
