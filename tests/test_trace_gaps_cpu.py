"""scripts/trace_gaps.py: idle time between a trace's GPU activities, by the pair of kernels around it."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
import trace_gaps as tg  # noqa: E402


def _x(name, ts, dur, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def test_gaps_sums_idle_and_merges_overlaps():
    trace = {"traceEvents": [
        _x("a", 0, 10), _x("b", 12, 5),                  # gap 2 after a
        _x("side", 14, 10),                              # overlaps b, ends at 24: no gap between b and side
        _x("c", 30, 1, cat="gpu_memset"),                # gap 6 after side (the interval's last end)
        _x("host", 5, 100, cat="cpu_op"),               # not a GPU event
        {"ph": "i", "cat": "kernel", "name": "marker", "ts": 40},
    ]}
    span, busy, gs = tg.gaps(tg.gpu_events(trace))
    assert span == 31 and busy == 10 + 12 + 1
    assert gs == [(2.0, "a", "b"), (6.0, "side", "c")]


def test_gaps_of_nothing_and_of_one():
    assert tg.gaps([]) == (0.0, 0.0, [])
    assert tg.gaps([(3.0, 7.0, "k")]) == (4.0, 4.0, [])


def test_report_per_step_and_pairs():
    trace = {"traceEvents": [_x("k1", 0, 10), _x("k2", 13, 10), _x("k1", 123, 10), _x("k2", 136, 10)]}
    text = tg.report(trace, steps=2, top=5)
    first = text.splitlines()[0]
    assert "span      73.0 us a step" in first and "idle     53.0" in first and "1.5 gaps a step" in first
    assert "  gaps     2-4     us:     1.0 a step,      3.0 us a step" in text
    assert "  gaps   100-inf   us:     0.5 a step,     50.0 us a step" in text
    assert "     50.0   0.5  100.0  k2 -> k1" in text


def test_memset_waits_group_by_what_came_before():
    trace = {"traceEvents": [
        _x("ours", 0, 10), _x("Memset (Device)", 11, 1, cat="gpu_memset"), _x("nvjet_a", 15, 20),   # 5 after ours
        _x("Memset (Device)", 37, 1, cat="gpu_memset"), _x("nvjet_b", 42, 10),                      # 7 after nvjet_a
        _x("ours2", 52.5, 1), _x("ours3", 54, 1),                                                   # gaps 0.5, 0.5
    ]}
    w = tg.memset_waits(trace)
    assert w["after another kernel"] == [5.0] and w["after a product"] == [7.0]
    assert w["kernel -> kernel"] == [0.5, 0.5]
    text = tg.memset_report(trace, 1)
    assert "median gap kernel -> kernel 0.50 us" in text
    assert "memsets after a product: 1.0 a step, 7.00 us each" in text and "6.5 us a step" in text


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    good = tmp_path / "t.json"
    good.write_text('{"traceEvents": []}')
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for argv, says in [(["--memsets", str(good)], "trace_gaps.py"), ([str(good), "0"], "STEPS '0'"),
                       ([str(good), "30", "x"], "TOP 'x'"), ([str(tmp_path / "none.json"), "30"], "No such file"),
                       ([str(bad), "30"], "trace_gaps:"), (["--memsets", str(bad), "30"], "trace_gaps:")]:
        assert tg.main(argv) == 2
        err = capsys.readouterr().err
        assert says in err, (argv, err)
    assert tg.main(["--memsets", str(good), "30"]) == 0
    assert "median gap kernel -> kernel 0.00 us" in capsys.readouterr().out


def test_replay_starts_split_by_a_loss_read_before_the_inputs():
    copy = "Memcpy HtoD (Pinned -> Device)"
    trace = {"traceEvents": [
        _x(copy, 0, 2, cat="gpu_memcpy"), _x("fill_f32", 20, 1), _x("k", 22, 50),          # launched ahead: 18
        _x("Memcpy DtoH (Device -> Pageable)", 80, 2, cat="gpu_memcpy"),                   # the loss read
        _x(copy, 600, 2, cat="gpu_memcpy"), _x(copy, 610, 2, cat="gpu_memcpy"),            # two copies: the last counts
        _x("fill_f32", 1112, 1),                                                           # after the read: 500
        _x(copy, 1200, 2, cat="gpu_memcpy"), _x("fill_f32", 1205, 1),                      # ahead again: 3
        _x(copy, 1300, 2, cat="gpu_memcpy"),                                               # no kernel follows: skipped
        _x("cudaGraphLaunch", 5, 540, cat="cuda_runtime"), _x("cudaGraphLaunch", 700, 420, cat="cuda_runtime"),
    ]}
    s = tg.replay_starts(trace)
    assert s == {"after a loss read": [500.0], "launched ahead": [18.0, 3.0], "graph launch": [540.0, 420.0]}
    text = tg.starts_report(trace, 3)
    assert "after a loss read: 1 (first kernel after the input copy), median 500.0 us" in text
    assert "launched ahead: 2 (first kernel after the input copy), median 10.5 us, min 3.0, max 18.0, 7.0 us a step" in text
    assert "graph launch: 2 (the host's calls), median 480.0 us" in text
    assert tg.starts_report({"traceEvents": []}, 1).splitlines() == ["after a loss read: none", "launched ahead: none",
                                                                    "graph launch: none"]


def test_starts_form_on_the_command_line(tmp_path, capsys):
    good = tmp_path / "t.json"
    good.write_text('{"traceEvents": []}')
    assert tg.main(["--starts", str(good), "30"]) == 0
    assert "after a loss read: none" in capsys.readouterr().out
    assert tg.main(["--starts", str(good)]) == 2
    assert "--starts TRACE" in capsys.readouterr().err
