"""skb log: numbered records, W3C trace context, --follow (live, through truncation and rotation), and
odd input (special files, non-string fields, non-UTF-8) as one line and an exit status, never a traceback
or a hang."""
import json
import os
import select
import subprocess
import time

import pytest

from tests.helpers import cni_env, run_plugin

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACESTATE = "congo=t61rcWkgMzE"


@pytest.fixture
def skb(bin_dir):
    return os.path.join(bin_dir, "skb")


def log(skb, *args, timeout=60):
    p = subprocess.run([skb, "log", *args], capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def record(n, command="ADD", **extra):
    rec = {"time": f"2026-01-01T00:00:0{n}+0000", "plugin": "debug", "command": command,
           "env": {"CNI_CONTAINERID": f"c{n}", "CNI_IFNAME": "eth0", "CNI_NETNS": "/x"}, "stdin": "{}",
           "exitCode": 0, "stdout": "", "stderr": "", "durationMs": 1.5}
    rec.update(extra)
    return json.dumps(rec) + "\n"


def test_trace_context_recorded_and_shown(skb, bin_dir, tmp_path):
    cap, dbg_log = tmp_path / "cap.jsonl", tmp_path / "debug.jsonl"
    conf = {"cniVersion": "1.1.0", "name": "n", "type": "debug", "captureFile": str(cap)}
    env = cni_env("ADD", netns="/x", TRACEPARENT=TRACEPARENT, TRACESTATE=TRACESTATE, SKB_DEBUG_LOG=str(dbg_log))
    assert run_plugin(os.path.join(bin_dir, "debug"), env, conf).rc == 0
    run_plugin(os.path.join(bin_dir, "debug"), cni_env("DEL", netns="/x"), conf)     # no trace context
    recs = [json.loads(line) for line in cap.read_text().splitlines()]
    assert recs[0]["trace"] == {"traceparent": TRACEPARENT, "tracestate": TRACESTATE}
    assert "trace" not in recs[1]
    assert json.loads(dbg_log.read_text().splitlines()[0])["trace"]["traceparent"] == TRACEPARENT
    p = log(skb, str(cap))
    lines = p.stdout.splitlines()
    assert lines[0].startswith("#1 ") and lines[0].endswith(f"trace={TRACEPARENT}")
    assert lines[1].startswith("#2 ") and "trace=" not in lines[1]
    assert f"    tracestate: {TRACESTATE}" in log(skb, "-v", str(cap)).stdout


def test_odd_records_never_trace(skb, tmp_path):
    f = tmp_path / "odd.jsonl"
    f.write_bytes(b"".join([
        record(1).encode(),
        json.dumps({"env": "x", "exitCode": "a", "time": 5, "plugin": [1], "stdin": {"a": 1}, "trace": "x",
                    "command": None, "durationMs": "slow"}).encode() + b"\n",
        json.dumps({"env": {"CNI_CONTAINERID": 7, "CNI_NETNS": None}, "trace": {"traceparent": 5}}).encode() + b"\n",
        b"\xff\xfe not json\n", b"[1, 2]\n", b"\n",
        b'{"exitCode": 1, "stdout": "\xff\xfe", "command": "DEL"}',            # no newline at the end
    ]))
    p = log(skb, str(f))
    lines = p.stdout.splitlines()
    assert p.returncode == 0
    assert [line.split()[0] for line in lines if line.startswith("#")] == ["#1", "#2", "#3", "#4"]
    assert "FAILED (exit a)" in p.stdout and "trace=5" in p.stdout
    assert "not a JSON line, skipped" in p.stderr and "not a JSON object, skipped" in p.stderr


# (A missing file under --follow is not an error: it is waited for, as tail -F does; tested below.)
@pytest.mark.parametrize("special,follow", [(s, f) for s in ("fifo", "/dev/zero", "/dev/null", "dir", "missing")
                                            for f in (False, True) if (s, f) != ("missing", True)])
def test_special_files_one_line_error(skb, tmp_path, special, follow):
    path = {"fifo": str(tmp_path / "fifo"), "dir": str(tmp_path), "missing": str(tmp_path / "nope")}.get(special,
                                                                                                       special)
    if special == "fifo":
        os.mkfifo(path)
    p = log(skb, *(["--follow"] if follow else []), path, timeout=30)
    assert p.returncode == 1 and p.stderr.count("\n") == 1
    assert ("not a regular file" in p.stderr) or ("no such file" in p.stderr)


_pending = {}


def _read_lines(proc, want, deadline):
    """Up to ``want`` lines from the process's stdout (a raw pipe: select never misses buffered lines)."""
    fd = proc.stdout.fileno()
    buf = _pending.get(fd, b"")
    got = []
    while len(got) < want:
        while b"\n" in buf and len(got) < want:
            line, buf = buf.split(b"\n", 1)
            got.append(line.decode())
        if len(got) >= want or time.monotonic() >= deadline:
            break
        if select.select([fd], [], [], 0.5)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
    _pending[fd] = buf
    return got


def test_follow_through_truncation_and_rotation(skb, tmp_path):
    f = tmp_path / "calls.jsonl"
    f.write_text("".join(record(n) for n in range(1, 13)))
    proc = subprocess.Popen([skb, "log", "--follow", str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            bufsize=0)
    try:
        deadline = time.monotonic() + 60
        first = _read_lines(proc, 10, deadline)
        assert [line.split()[0] for line in first] == [f"#{n}" for n in range(3, 13)]    # the last 10
        with open(f, "a") as w:                      # a writer appending, the last record in two pieces
            w.write(record(13, "DEL"))
            w.flush()
            w.write(record(14)[:20])
            w.flush()
            time.sleep(0.5)
            w.write(record(14)[20:])
        got = _read_lines(proc, 2, deadline)
        assert got[0].startswith("#13 ") and " DEL " in got[0] and got[1].startswith("#14 ") and "container=c14 " in got[1]
        f.write_text(record(5, "CHECK"))             # truncated and rewritten
        got = _read_lines(proc, 1, deadline)
        assert " CHECK " in got[0] and "container=c5" in got[0]
        os.rename(f, tmp_path / "calls.jsonl.1")     # rotated: the old file gets one more, then a new one
        with open(tmp_path / "calls.jsonl.1", "a") as w:
            w.write(record(6, "GC"))
        f.write_text(record(7, "STATUS"))
        got = _read_lines(proc, 2, deadline)
        assert " GC " in got[0] and " STATUS " in got[1]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    err = proc.stderr.read().decode()
    assert "truncated" in err and "rotated" in err and "Traceback" not in err


def test_follow_waits_for_the_file(skb, tmp_path):
    f = tmp_path / "later.jsonl"
    proc = subprocess.Popen([skb, "log", "-f", str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    try:
        time.sleep(1)
        f.write_text(record(1))
        got = _read_lines(proc, 1, time.monotonic() + 60)
        assert got and got[0].startswith("#1 ")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_lines_option(skb, tmp_path):
    f = tmp_path / "calls.jsonl"
    f.write_text("".join(record(n) for n in range(1, 6)))
    assert [line.split()[0] for line in log(skb, "-n", "2", str(f)).stdout.splitlines()] == ["#4", "#5"]


def test_lone_surrogates_and_non_utf8_in_records(skb, tmp_path):
    f = tmp_path / "odd.jsonl"
    f.write_bytes(b'{"plugin": "\\ud800x", "env": {"CNI_NETNS": "/run/netns/\\udcff"}, "exitCode": 1, '
                  b'"stdout": "\\ud800"}\n')
    p = subprocess.run([skb, "log", str(f)], capture_output=True, timeout=60)
    assert p.returncode == 0 and b"Traceback" not in p.stderr
    assert p.stdout.startswith(b"#1 ? \\ud800x ")


def test_control_characters_are_shown_escaped(skb, tmp_path):
    """Review 15: a record's stderr, time and plugin reached the terminal raw (an OSC 52 clipboard write,
    a line erase, a fake record line)."""
    f = tmp_path / "evil.jsonl"
    f.write_text(record(1, time="\x1b]52;c;cHduZWQ=\x07", plugin="deb\x9bug", exitCode=1,
                        stderr="oops\r\x1b[2K#7 2026 debug ADD ok\nnext\tline\u202e") + record(2))
    for args in ([], ["-v"]):
        p = log(skb, *args, str(f))
        assert p.returncode == 0
        for raw in ("\x1b", "\x07", "\x9b", "\r", "\u202e"):
            assert raw not in p.stdout, (args, raw)
        assert "\\x1b]52;c;cHduZWQ=\\x07" in p.stdout and "deb\\x9bug" in p.stdout
        assert [line.split()[0] for line in p.stdout.splitlines() if not line.startswith(" ")] == ["#1", "#2"]
        assert "next\tline\\u202e" in p.stdout     # a tab stays a tab, a newline starts an indented line
    p = log(skb, "--json", str(f))
    assert "\x9b" not in p.stdout and "\u202e" not in p.stdout and "\x1b" not in p.stdout
    assert json.loads(p.stdout.splitlines()[0])["record"]["plugin"] == "deb\x9bug"


def test_a_closed_pipe_ends_quietly(skb, tmp_path):
    f = tmp_path / "many.jsonl"
    f.write_text("".join(record(n % 10) for n in range(20000)))
    p = subprocess.run(["bash", "-c", f'"{skb}" log "{f}" | head -1; exit "${{PIPESTATUS[0]}}"'],
                       capture_output=True, text=True, timeout=120)
    assert p.stdout.startswith("#1 ") and p.stdout.count("\n") == 1
    assert p.returncode == 141 and p.stderr == "", (p.returncode, p.stderr)
