"""The model serving now (the champion): found, copied within limits, evaluated.

On a cluster the champion is what the InferenceService ``model_name`` in the step's
namespace serves: its predictor's ``STORAGE_URI``. That is the truth of what serves; the
registry's DEPLOYED record follows it (the deploy step writes it once the rollout is
done), so the registry is not asked. Every model this project serves, registered or not,
lives at ``pvc://<model_pvc>/<model_name>/<run>``, and the evaluate step mounts
``model_pvc`` at ``MODEL_STORE``: the champion is read there, with no download and no
credentials; the only network call is one read of the API server, with its timeouts.

The service and the volume's files may have been written by anyone with edit rights in
the namespace, so a URI on another volume or scheme, a path that leaves the volume, a
link, a file over its size limit, or a model of other classes is not evaluated: the
champion is then unreadable, and the gate keeps it serving. An API server that refuses the
read (after the client's retries) fails the step in one line: what serves is unknown.

Locally nothing stays serving: each run's deploy step stops its predictor after checking
it, and ``fmnist serve`` serves the newest run, passed or not. A local run has no
champion, and the gate is ``min_accuracy`` alone; the gate's line says so.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

from components.runtime.gate import Champion
from components.specs.kinds import INFERENCESERVICE
from components.specs.params import Serving
from trainer.model_dir import CARD_FILE, MODEL_STORE, WEIGHTS_FILE

# model.pt of the largest architecture is 1.7 MB and model.json a few KB: room to grow.
SIZE_LIMITS = {WEIGHTS_FILE: 32 * 2**20, CARD_FILE: 2**20}
CHUNK = 2**20
LOCAL_NOTE = "a local run: each run's predictor is stopped after its check, so none stays serving"


class Unreadable(ValueError):
    """The champion cannot be evaluated; the message says why, in one line."""


class ChampionUnknown(RuntimeError):
    """Whether a model serves cannot be told (the API refuses or fails); one line."""


def find_champion(serving: Serving, target: str, dataset_dir: str) -> Champion:
    """What serves ``serving.model_name`` now, evaluated on the test split of ``dataset_dir``."""
    if target == "local":
        return Champion(note=LOCAL_NOTE)
    from kubernetes.client.exceptions import ApiException

    from components.runtime.kserve import storage_uri_of
    from components.runtime.kube import KubeClient, current_namespace
    from components.runtime.waiting import short_reason

    kube, namespace, name = KubeClient.connect(), current_namespace(), serving.model_name
    try:
        isvc = kube.get(INFERENCESERVICE, namespace, name)
    except ApiException as error:  # without it, which model serves is unknown: stop here
        raise ChampionUnknown(
            f"cannot read InferenceService {namespace}/{name} to find the model serving now: "
            f"{short_reason(error)}"
        ) from None
    if isvc is None:
        return Champion(note=f"no InferenceService {namespace}/{name}")
    uri = storage_uri_of(isvc)
    if not uri:
        what = f"InferenceService {namespace}/{name}"
        return Champion(uri=what, note="its predictor names no STORAGE_URI")
    shown = uri if uri.isprintable() else ascii(uri)  # the gate's line stays one line
    try:
        accuracy, loss = evaluate_champion(uri, serving.model_pvc, MODEL_STORE, dataset_dir)
    except Unreadable as error:
        return Champion(uri=shown, note=str(error))
    return Champion(uri=shown, accuracy=accuracy, loss=loss)


def evaluate_champion(uri: str, pvc: str, store: str, dataset_dir: str) -> tuple[float, float]:
    """(accuracy, loss) of the model at ``uri`` on the test split; Unreadable if it can't be."""
    from components.runtime.evaluation import evaluate_model_dir
    from trainer.data import load_packed

    source = model_dir_on_volume(uri, pvc, store)
    with tempfile.TemporaryDirectory(prefix="champion-") as copy:
        for name, limit in SIZE_LIMITS.items():
            copy_bounded(source / name, Path(copy) / name, limit)
        classes = _card(Path(copy)).get("class_names")
        expected = load_packed(dataset_dir).manifest["class_names"]
        if classes != expected:
            raise Unreadable(f"it classifies {_short(classes)}, not the dataset's classes")
        try:
            result, _ = evaluate_model_dir(copy, dataset_dir)
        except Exception as error:  # noqa: BLE001 - a model we did not write: any failure
            raise Unreadable(f"it does not load: {_first_line(error)}") from None
    return result.accuracy, result.loss


def model_dir_on_volume(uri: str, pvc: str, store: str) -> Path:
    """The model directory ``pvc://<pvc>/<path>`` where the step mounts ``pvc``."""
    prefix = f"pvc://{pvc}/"
    if not uri.startswith(prefix):
        raise Unreadable(f"it is not on model_pvc {pvc}, the only volume the step reads")
    root = Path(store).resolve()
    directory = (root / uri[len(prefix) :]).resolve()
    if directory == root or not directory.is_relative_to(root):
        raise Unreadable(f"its path leaves the model folders of {pvc}")
    return directory


def copy_bounded(source: Path, target: Path, limit: int) -> None:
    """Copy a regular file of at most ``limit`` bytes; Unreadable for anything else."""
    try:
        mode = os.lstat(source).st_mode
    except OSError as error:
        raise Unreadable(f"no {source.name} ({error.strerror})") from None
    if not stat.S_ISREG(mode):
        raise Unreadable(f"{source.name} is not a regular file")
    copied = 0
    with open(os.open(source, os.O_RDONLY | os.O_NOFOLLOW), "rb") as read, target.open("wb") as out:
        while chunk := read.read(CHUNK):
            copied += len(chunk)
            if copied > limit:
                raise Unreadable(f"{source.name} is over its limit of {limit:,} bytes")
            out.write(chunk)


def _card(directory: Path) -> dict:
    try:
        card = json.loads((directory / CARD_FILE).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise Unreadable(f"{CARD_FILE} is not JSON: {error}") from None
    if not isinstance(card, dict):
        raise Unreadable(f"{CARD_FILE} is not a JSON object")
    return card


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else type(error).__name__
