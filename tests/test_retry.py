"""tr2.retry: a failure whose cause was the machine (no data, no GPU) is run again on resume; others stay."""
from tr2 import retry

NO_DATA = {"status": "failed", "reason": "exit code 2: tr2.train: error: data file 'input.txt' not found; put ..."}
NO_GPU = {"status": "failed", "reason": "exit code 2: tr2.train: error: --device: 'cuda' asked for, but no CUDA device "
          "is visible to the cupy side"}


def test_causes():
    assert retry.cause(NO_DATA) == "no data" and retry.should_retry(NO_DATA)
    assert retry.cause(NO_GPU) == "no GPU" and retry.should_retry(NO_GPU)
    assert retry.should_retry({"status": "failed", "reason": "exit code 1: x", "tail": ["TR2_DATA: '/x' is not a folder"]})
    for stays in ({"status": "failed", "reason": "exit code 1: ZeroDivisionError"}, {"status": "oom", "reason": "no CUDA device"},
                  {"status": "ok", "reason": None}, {"status": "timeout", "reason": "ran past 600 s"}):
        assert not retry.should_retry(stays)
    assert "no data" in retry.note(NO_DATA) and "input.txt" in retry.note(NO_DATA)


def test_drop_retried_keeps_the_new_record():
    old = {**NO_DATA, "k": 1}
    new = {"status": "ok", "k": 1, "retried": retry.note(old)}
    other = {"status": "failed", "reason": "exit code 1: bug", "k": 2}
    assert retry.drop_retried([old, other, new], lambda r: r["k"]) == [other, new]
    assert retry.drop_retried([old], lambda r: r["k"]) == [old]   # not yet retried: the failure stands
