"""The post-deploy check (components/runtime/post_deploy.py) against a v1 predictor on a
loopback port that answers from the test set's labels (tests/fake_predictor.py)."""

from __future__ import annotations

import pytest
from fake_predictor import FakePredictor

from components.runtime import post_deploy
from components.runtime.ports import free_port
from components.runtime.post_deploy import CheckFailed, check_served, post_deploy_check, tolerance


@pytest.fixture
def predictor(packed_small):
    with FakePredictor(packed_small) as running:
        yield running


def test_the_tolerance_is_four_binomial_standard_errors_with_a_floor():
    assert tolerance(0.9, 1000) == pytest.approx(4 * (0.9 * 0.1 / 1000) ** 0.5)
    assert round(tolerance(0.9, 1000), 4) == 0.0379
    assert round(tolerance(0.5, 100), 2) == 0.2  # a small slice tells little
    assert tolerance(1.0, 1000) == 0.005 and tolerance(0.0, 10) == 0.005


def test_a_model_that_answers_as_evaluated_passes_in_bounded_requests(predictor, packed_small):
    assert check_served(predictor.url, "fashion-mnist", str(packed_small), 0.9) == 1.0
    assert predictor.requests == [100] * 10  # CHECK_IMAGES, BATCH_IMAGES a request


def test_a_smaller_slice_sends_fewer_images(predictor, packed_small):
    check = post_deploy_check("fashion-mnist", str(packed_small), 0.9, images=150)
    assert check(predictor.url) == 1.0
    assert predictor.requests == [100, 50]


def test_a_model_that_answers_wrongly_fails_naming_both_accuracies(predictor, packed_small):
    predictor.shift = 1
    with pytest.raises(CheckFailed) as error:
        check_served(predictor.url, "fashion-mnist", str(packed_small), 0.9)
    assert str(error.value) == (
        "it answered 0.0000 of 1000 test images right, below 0.8621 (the evaluated accuracy "
        "0.9000 less the tolerance 0.0379)"
    )


def test_one_failed_request_fails_the_check(predictor, packed_small):
    predictor.statuses = [503]  # the first request; the other nine are answered
    with pytest.raises(CheckFailed) as error:
        check_served(predictor.url, "fashion-mnist", str(packed_small), 0.5)
    assert str(error.value) == (
        f"1 of 10 requests to {predictor.url} failed "
        "(first: HTTPError: HTTP Error 503: Service Unavailable)"
    )


def test_an_answer_over_its_limit_is_a_failed_request(predictor, packed_small):
    predictor.padding = 4096 * 100  # over ANSWER_BYTES_PER_IMAGE an image
    with pytest.raises(CheckFailed, match=r"10 of 10 requests .* over 409600 bytes for 100"):
        check_served(predictor.url, "fashion-mnist", str(packed_small), 0.5)


def test_a_service_that_never_answers_fails_within_the_timeouts(
    silent_server, packed_small, monkeypatch
):
    monkeypatch.setattr(post_deploy, "REQUEST_TIMEOUT_SECONDS", 0.1)
    with pytest.raises(CheckFailed, match=r"^2 of 2 requests .* failed \(first: TimeoutError"):
        check_served(silent_server, "fashion-mnist", str(packed_small), 0.5, images=200)


def test_a_service_that_refuses_connections_fails(packed_small):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(CheckFailed, match=r"^10 of 10 requests .* \(first: URLError"):
        check_served(url, "fashion-mnist", str(packed_small), 0.5)


@pytest.mark.parametrize(
    ("accuracy", "images", "message"),
    [
        (1.5, 1000, "accuracy must be in [0, 1], got 1.5"),
        (0.9, 0, "check images must be at least 1, got 0"),
    ],
)
def test_bad_check_values_are_one_line(accuracy, images, message, packed_small):
    with pytest.raises(ValueError) as error:
        post_deploy_check("fashion-mnist", str(packed_small), accuracy, images)
    assert str(error.value) == message
