"""The gate's decision, on a table of challengers and champions."""

import pytest

from components.runtime.gate import Champion, decide

NOTHING = Champion(note="no InferenceService fashion-mnist in team-a")
SERVING = "pvc://fmnist-models/fashion-mnist/run-1"


def serving(accuracy):
    return Champion(uri=SERVING, accuracy=accuracy, loss=0.4)


@pytest.mark.parametrize(
    ("accuracy", "min_accuracy", "min_improvement", "champion", "deploy", "reason"),
    [
        (
            0.9, 0.85, 0.0, NOTHING, True,
            "Passed: 90.00% >= 85.00% (min_accuracy); nothing serves yet (no InferenceService "
            "fashion-mnist in team-a); the deploy step follows.",
        ),
        (
            0.8, 0.85, 0.0, NOTHING, False,
            "Not passed: 80.00% < 85.00% (min_accuracy); the model is not deployed.",
        ),
        (
            0.85, 0.85, 0.0, Champion(), True,
            "Passed: 85.00% >= 85.00% (min_accuracy); nothing serves yet; the deploy step follows.",
        ),
        (
            0.9, 0.85, 0.0, serving(0.88), True,
            "Passed: 90.00% >= 85.00% (min_accuracy) and >= the serving model's 88.00% + 0.00% "
            "(min_improvement); the deploy step follows.",
        ),
        (
            0.88, 0.85, 0.0, serving(0.88), True,  # a tie is not worse
            "Passed: 88.00% >= 85.00% (min_accuracy) and >= the serving model's 88.00% + 0.00% "
            "(min_improvement); the deploy step follows.",
        ),
        (
            0.87, 0.85, 0.0, serving(0.88), False,
            "Not passed: 87.00% < the serving model's 88.00% + 0.00% (min_improvement); the "
            f"serving model {SERVING} keeps serving.",
        ),
        (
            0.7132, 0.5, 0.01, serving(0.7032), True,  # 0.7132 - 0.7032 < 0.01 in floats
            "Passed: 71.32% >= 50.00% (min_accuracy) and >= the serving model's 70.32% + 1.00% "
            "(min_improvement); the deploy step follows.",
        ),
        (
            0.8099, 0.5, 0.01, serving(0.80), False,  # one image of 10,000 short
            "Not passed: 80.99% < the serving model's 80.00% + 1.00% (min_improvement); the "
            f"serving model {SERVING} keeps serving.",
        ),
        (
            0.8, 0.85, 0.0, serving(0.5), False,  # better than the champion, under the bar
            "Not passed: 80.00% < 85.00% (min_accuracy); the model is not deployed.",
        ),
        (
            0.9, 0.85, 0.0, Champion(uri="s3://bucket/model", note="not on model_pvc"), False,
            "Not passed: 90.00% >= 85.00% (min_accuracy), but the serving model s3://bucket/model "
            "could not be evaluated (not on model_pvc); it keeps serving.",
        ),
        (
            float("nan"), 0.0, 0.0, NOTHING, False,
            "Not passed: nan% < 0.00% (min_accuracy); the model is not deployed.",
        ),
    ],
    ids=[
        "nothing-serves", "nothing-serves-below-bar", "nothing-serves-exactly-at-bar",
        "beats-champion", "ties-champion", "worse-than-champion", "improvement-float-rounding",
        "improvement-one-image-short", "below-bar-beats-champion", "champion-unreadable",
        "nan-accuracy",
    ],
)  # fmt: skip
def test_the_gate_decides_and_says_why_in_one_line(
    accuracy, min_accuracy, min_improvement, champion, deploy, reason
):
    decision = decide(accuracy, min_accuracy, min_improvement, champion)
    assert (decision.deploy, decision.reason) == (deploy, reason)
    assert "\n" not in decision.reason
