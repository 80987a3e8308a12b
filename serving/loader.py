"""Load a model directory for serving; any problem with it is one line naming the file.

Imports torch but not KServe, so ``fmnist serve`` can check a directory before it starts
a server.
"""

from __future__ import annotations

import pickle
from pathlib import Path

MESSAGE_LIMIT = 200  # characters of an underlying error kept in the one-line message


class ModelDirError(ValueError):
    """The model directory cannot be served; the message is one line naming the file."""


def load_served_model(model_dir: str | Path, device="cpu"):
    """The network (eval mode, on ``device``) and the card of ``model_dir``.

    Raises:
        ModelDirError: a file is missing, the card is malformed, or the weights are
            truncated, not a PyTorch file, or do not fit the card.
    """
    from trainer.model import load_model_dir
    from trainer.model_dir import CARD_FILE, WEIGHTS_FILE

    directory = Path(model_dir)
    try:
        return load_model_dir(directory, device)
    except (FileNotFoundError, ValueError) as exc:
        message = _first_line(exc)
        raise ModelDirError(
            message if str(directory) in message else f"{directory}: {message}"
        ) from exc
    except (TypeError, AttributeError) as exc:  # fields of the wrong kind in the card
        raise ModelDirError(
            f"{directory / CARD_FILE}: malformed model card ({_first_line(exc)})"
        ) from exc
    except (RuntimeError, KeyError, EOFError, OSError, pickle.UnpicklingError) as exc:
        raise ModelDirError(
            f"{directory / WEIGHTS_FILE}: not a readable PyTorch state_dict, truncated or "
            f"corrupt ({type(exc).__name__}: {_first_line(exc) or 'no details'})"
        ) from exc


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines() or [""]
    line = lines[0]
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 3] + "..."
