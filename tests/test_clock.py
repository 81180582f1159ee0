"""The outside clock, measured on programs whose timing the test controls."""
import os
import sys
import textwrap
import threading
import time

import pytest

from tr2.clock import analyze, parse_iter, read_stamped_log, run_clocked

PY = sys.executable

# Sleeps to absolute deadlines, so step i ends at t0 + (i+1)*ms exactly (no drift from sleep's overshoot),
# prints nanoGPT's iter line every 10 steps with its own time field scaled by OWN_FACTOR.
FAKE = textwrap.dedent("""
    import sys, time
    steps, ms = int(sys.argv[1]), float(sys.argv[2])
    stop = int(sys.argv[3]) if len(sys.argv) > 3 else steps
    own_factor = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    t0 = time.perf_counter(); last, last_n = t0, -1
    for i in range(stop + 1):
        target = t0 + (i + 1) * ms / 1000.0
        while True:
            d = target - time.perf_counter()
            if d <= 0:
                break
            time.sleep(d)
        if i % 10 == 0:
            now = time.perf_counter()
            print(f"iter {i}: loss 2.5000, time {own_factor * (now - last) * 1000 / (i - last_n):.4f}ms", flush=True)
            last, last_n = now, i
    print("peak memory: 123456 bytes", flush=True)
""")


@pytest.fixture
def fake(tmp_path):
    p = tmp_path / "fake.py"
    p.write_text(FAKE)
    return str(p)


def test_clock_measures_a_program_of_known_step_time(fake, tmp_path):
    log = tmp_path / "run.log"
    r = run_clocked([PY, fake, "100", "20"], log, window=(20, 100))
    assert r["status"] == "ok" and r["reason"] is None and r["returncode"] == 0
    assert abs(r["step_ms"] - 20.0) / 20.0 < 0.01
    assert abs(r["own_step_ms"] - 20.0) / 20.0 < 0.01
    assert abs(r["own_vs_clock"]) < 0.01
    assert r["peak_bytes"] == 123456
    # the stamped log: one line per output line, "<monotonic seconds>\t<line>", in arrival order
    raw = log.read_text().splitlines()
    assert len(raw) == 11 + 1
    stamps = read_stamped_log(log)
    assert [line for _t, line in stamps][-1] == "peak memory: 123456 bytes"
    assert all(a[0] <= b[0] for a, b in zip(stamps, stamps[1:]))
    assert all(abs(t - time.monotonic()) < 60 for t, _ in stamps)


def test_clock_protocol_window_100_to_400(fake, tmp_path):
    r = run_clocked([PY, fake, "400", "3"], tmp_path / "run.log")  # the default window (100, 400)
    assert r["status"] == "ok"
    assert abs(r["step_ms"] - 3.0) / 3.0 < 0.01
    assert r["iters"] == 41 and r["last_step"] == 400


def test_a_program_without_step_400_is_a_record(fake, tmp_path):
    r = run_clocked([PY, fake, "400", "1", "200"], tmp_path / "run.log")
    assert r["status"] == "no-window"
    assert "400" in r["reason"] and "200" in r["reason"]
    assert r["step_ms"] is None and r["returncode"] == 0


def test_a_failing_program_is_a_record(tmp_path):
    prog = "print('iter 0: loss 1.0, time 1.00ms', flush=True); raise RuntimeError('the kernel broke')"
    r = run_clocked([PY, "-c", prog], tmp_path / "run.log")
    assert r["status"] == "failed" and r["returncode"] == 1
    assert r["reason"].startswith("exit code 1: RuntimeError: the kernel broke")
    assert any("Traceback" in line for line in r["tail"])
    assert "\n" not in r["reason"]


def test_a_program_killed_by_a_signal_and_one_that_cannot_start(tmp_path):
    r = run_clocked([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], tmp_path / "a.log")
    assert r["status"] == "failed" and r["returncode"] == -9
    r = run_clocked([str(tmp_path / "no-such-program")], tmp_path / "b.log")
    assert r["status"] == "failed" and r["reason"].startswith("could not start")


def test_out_of_memory(tmp_path):
    prog = "import sys; print('iter 0: loss 1.0, time 1.00ms'); print('out of memory: tried to allocate 2 GiB'); sys.exit(3)"
    r = run_clocked([PY, "-c", prog], tmp_path / "run.log")
    assert r["status"] == "oom" and r["reason"] == "out of memory: tried to allocate 2 GiB"
    prog = "raise RuntimeError('CUDA out of memory. Tried to allocate 20.00 MiB')"  # died without its own line
    assert run_clocked([PY, "-c", prog], tmp_path / "run2.log")["status"] == "oom"


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    prog = textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("iter 0: loss 1.0, time 1.00ms", flush=True)
        time.sleep(60)
    """)
    t = time.monotonic()
    r = run_clocked([PY, "-c", prog], tmp_path / "run.log", timeout_s=0.7)
    assert time.monotonic() - t < 10
    assert r["status"] == "timeout" and "0.7 s" in r["reason"]
    child = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the program's child outlived the timeout")


def test_log_is_written_as_lines_arrive(tmp_path):
    log = tmp_path / "run.log"
    prog = "import time; print('iter 0: loss 1.0, time 1.00ms', flush=True); time.sleep(1.5)"
    th = threading.Thread(target=run_clocked, args=([PY, "-c", prog], log))
    th.start()
    try:
        for _ in range(40):
            if log.exists() and "iter 0" in log.read_text():
                assert th.is_alive()
                break
            time.sleep(0.05)
        else:
            pytest.fail("the first line was not in the log while the program ran")
    finally:
        th.join()


def test_unbuffered_even_without_flush(tmp_path):
    # PYTHONUNBUFFERED=1: a Python program's prints leave at once, so the stamps are 0.3 s apart
    prog = "import time\nfor i in (0, 10): print(f'iter {i}: loss 1.0, time 30.00ms'); time.sleep(0.3)"
    r = run_clocked([PY, "-c", prog], tmp_path / "run.log", window=(0, 10))
    assert r["status"] == "ok" and 25 < r["step_ms"] < 40


def test_analyze_weights_the_own_times_by_steps():
    lines = [(0.0, "iter 100: loss 1.0, time 9.00ms"), (0.1, "iter 110: loss 1.0, time 10.00ms"),
             (0.3, "iter 130: loss 1.0, time 10.00ms"), (0.35, "step 130: train loss 1.0, val loss 1.0"),
             (0.4, "iter 140: loss nan, time 10.00ms")]
    a = analyze(lines, (100, 140))
    assert a["step_ms"] == pytest.approx(10.0)
    assert a["own_step_ms"] == pytest.approx(10.0)
    assert a["own_vs_clock"] == pytest.approx(0.0, abs=1e-12)
    assert parse_iter("iter 5: loss 2.1234, time 12.34ms") == (5, 2.1234, 12.34)
    assert parse_iter("step 5: train loss 1.0, val loss 1.0") is None


def test_analyze_reads_the_peak_in_use_and_reserved():
    """Both sides print the device allocator's peak bytes in use and what its pools held (trainlog.peak_line);
    logs written before the reserved figure existed have the first alone."""
    from tr2.trainlog import peak_line
    assert peak_line(5, 7) == "peak memory: 5 bytes, reserved 7 bytes"
    both = analyze([(0.0, peak_line(1234, 5678))])
    assert (both["peak_bytes"], both["reserved_bytes"]) == (1234, 5678)
    old = analyze([(0.0, peak_line(1234))])
    assert (old["peak_bytes"], old["reserved_bytes"]) == (1234, None)
    assert analyze([(0.0, "peak memory: 12 bytes, reserved x bytes")])["peak_bytes"] is None


def test_on_line_sees_each_line_with_its_stamp_as_it_arrives(fake, tmp_path):
    """run_clocked's on_line (the series reads the card's energy counter at the window's iter lines): called once a
    line, in order, with the very stamps the clock keeps, so that a mark filed at t sits on the window's end."""
    seen = []
    r = run_clocked([PY, fake, "40", "5"], tmp_path / "run.log", window=(10, 40), on_line=lambda t, line: seen.append((t, line)))
    assert r["status"] == "ok"
    logged = read_stamped_log(tmp_path / "run.log")   # the log keeps the stamps to the microsecond
    assert [line for _t, line in seen] == [line for _t, line in logged]
    assert all(abs(a[0] - b[0]) < 1e-6 for a, b in zip(seen, logged))
    stamps = {parse_iter(line)[0]: t for t, line in seen if parse_iter(line)}
    assert r["window_t"] == [stamps[10], stamps[40]]
