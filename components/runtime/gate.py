"""The gate: deploy the new model (the challenger) only if it is good enough and not worse.

One pure function, ``decide``, makes the decision and says why in one line; the evaluate
step prints that line and hands the decision to the pipeline's ``dsl.If``. The rules:

1. the challenger's test accuracy reaches ``min_accuracy``;
2. if a model serves (the champion), the challenger's accuracy on the same test images is
   at least the champion's plus ``min_improvement`` (0: a tie passes);
3. a champion that serves but could not be evaluated keeps serving: with nothing to
   compare with, a nightly run never risks replacing it with a worse model.

Nothing serving: rule 1 alone.
"""

from __future__ import annotations

from dataclasses import dataclass

# Accuracies are counts over the same test images (one image of 10,000 is 1e-4), so a
# difference below this is float rounding (0.7132 - 0.7032 < 0.01), not a model being worse.
TOLERANCE = 1e-9


@dataclass(frozen=True)
class Champion:
    """The model serving now: where it is, its results on the same test images, or why not.

    ``uri`` empty: nothing serves (``note`` says where it looked). ``uri`` set and
    ``accuracy`` None: it serves but could not be evaluated (``note`` says why).
    """

    uri: str = ""
    accuracy: float | None = None
    loss: float | None = None
    note: str = ""

    @property
    def serves(self) -> bool:
        """Whether a model serves now."""
        return bool(self.uri)


@dataclass(frozen=True)
class Decision:
    """Whether the deploy step follows, and why, in one line."""

    deploy: bool
    reason: str


def decide(
    accuracy: float, min_accuracy: float, min_improvement: float, champion: Champion
) -> Decision:
    """The gate's decision on a challenger of test accuracy ``accuracy``."""
    if not accuracy >= min_accuracy:  # a NaN accuracy fails too
        return Decision(
            False,
            f"Not passed: {accuracy:.2%} < {min_accuracy:.2%} (min_accuracy); "
            "the model is not deployed.",
        )
    absolute = f"{accuracy:.2%} >= {min_accuracy:.2%} (min_accuracy)"
    if not champion.serves:
        note = f" ({champion.note})" if champion.note else ""
        return Decision(
            True, f"Passed: {absolute}; nothing serves yet{note}; the deploy step follows."
        )
    if champion.accuracy is None:
        return Decision(
            False,
            f"Not passed: {absolute}, but the serving model {champion.uri} could not be "
            f"evaluated ({champion.note}); it keeps serving.",
        )
    bar = f"the serving model's {champion.accuracy:.2%} + {min_improvement:.2%} (min_improvement)"
    if accuracy - champion.accuracy >= min_improvement - TOLERANCE:
        return Decision(True, f"Passed: {absolute} and >= {bar}; the deploy step follows.")
    return Decision(
        False,
        f"Not passed: {accuracy:.2%} < {bar}; the serving model {champion.uri} keeps serving.",
    )
