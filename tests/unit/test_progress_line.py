import pytest

from gpu_rent.on_vm.progress_line import ProgressLine, last, parse


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('::gpu-rent-progress {"done":2472,"total":3862,"stage":"models"}', ProgressLine(2472, 3862, "models")),
        ('::gpu-rent-progress {"done":0}', ProgressLine(0)),
        ('  ::gpu-rent-progress {"done":5,"stage":"extensions"}\n', ProgressLine(5, None, "extensions")),
        ('::gpu-rent-progress {"done":1,"total":null}', ProgressLine(1)),
    ],
)
def test_valid_lines_give_their_object(line, expected):
    assert parse(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "plain output",
        '::gpu-rent-progress {"total":5}',  # done is required
        '::gpu-rent-progress {"done":-1}',
        '::gpu-rent-progress {"done":1.5}',
        '::gpu-rent-progress {"done":true}',
        '::gpu-rent-progress {"done":"3"}',
        '::gpu-rent-progress {"done":1,"total":-2}',
        '::gpu-rent-progress {"done":1,"stage":' + '"' + "x" * 65 + '"}',
        '::gpu-rent-progress {"done":1,"stage":7}',
        "::gpu-rent-progress [1, 2]",
        "::gpu-rent-progress {not json",
        '::gpu-rent-progress{"done":1}',  # the space after the marker is part of it
        'echo ::gpu-rent-progress {"done":1}',  # only at the start of a line
    ],
)
def test_other_and_malformed_lines_are_none(line):
    assert parse(line) is None


def test_last_finds_the_latest_valid_line_among_text():
    text = "\n".join(
        [
            '::gpu-rent-progress {"done":1}',
            "fetching",
            '::gpu-rent-progress {"done":7,"total":9}',
            "::gpu-rent-progress {",
        ]
    )
    assert last(text) == ProgressLine(7, 9)
    assert last("nothing here") is None and last(None) is None


def test_the_runner_reads_progress_from_the_retries_of_a_polling_task():
    from gpu_rent.rental.runner import progress_in

    retry = {
        "event": "runner_retry",
        "event_data": {"res": {"stdout": 'fetching\n::gpu-rent-progress {"done":10,"total":20,"stage":"models: a"}'}},
    }
    assert progress_in(retry) == ProgressLine(10, 20, "models: a")
    failed = {"event": "runner_on_failed", "event_data": retry["event_data"]}
    assert progress_in(failed) is None
    assert progress_in({"event": "runner_on_ok", "event_data": {"res": {"stdout_lines": ["x"]}}}) is None
