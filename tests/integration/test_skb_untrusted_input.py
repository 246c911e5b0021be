"""The skb command on hostile and odd input (issue 13, classes 6 and 7): a record is untrusted input, so
replay runs only bare plugin names found in the bin dirs and shows what it runs; records with fields of
the wrong type, FIFOs and devices where a file or a directory is expected, non-UTF-8 names: each gives a
clear one-line error and a non-zero exit, never a traceback, never a hang (every run has a hard timeout).
Outcomes are checked independently: marker files a refused program would have written, /run/netns."""
import json
import os
import subprocess

import pytest

from tests.helpers import cni_env, run_plugin


@pytest.fixture
def skb(bin_dir):
    return os.path.join(bin_dir, "skb")


def run(skb, *args, env=None):
    e = {"PATH": os.environ["PATH"]}
    e.update(env or {})
    p = subprocess.run([skb, *args], env=e, capture_output=True, timeout=60)
    p.out = p.stdout.decode(errors="replace")
    p.err = p.stderr.decode(errors="replace")
    return p


def one_line_error(p, *words):
    assert p.returncode != 0, (p.out, p.err)
    assert "Traceback" not in p.err and "Traceback" not in p.out, p.err
    lines = [line for line in p.err.splitlines() if line.strip()]
    assert len(lines) == 1, p.err
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def evil(tmp_path):
    """A program that must never run: it leaves a marker file when it does."""
    marker = tmp_path / "evil-ran"
    d = tmp_path / "evil-bin"
    d.mkdir()
    for name in ("evil", "debug", "host-local", "ptp"):
        p = d / name
        p.write_text(f'#!/bin/sh\ntouch "{marker}"\ncat >/dev/null\necho \'{{"cniVersion":"1.0.0"}}\'\n')
        p.chmod(0o755)
    return d, marker


def write_records(path, *records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def record(plugin="debug", stdin=None, **env):
    e = {"CNI_COMMAND": "VERSION", "CNI_CONTAINERID": "c1", "CNI_NETNS": "", "CNI_IFNAME": "eth0",
         "CNI_ARGS": "", "CNI_PATH": "/nonexistent"}
    e.update(env)
    return {"plugin": plugin, "command": e["CNI_COMMAND"], "env": e,
            "stdin": stdin if stdin is not None else '{"cniVersion":"1.0.0","name":"n","type":"debug"}',
            "exitCode": 0, "stdout": ""}


# ---------------------------------------------------------------------------------------------------
# class 6: replay runs only bare plugin names from the bin dirs

@pytest.mark.parametrize("plugin,stdin_type", [
    ("EVIL", None),                 # replaced by a path to the evil program below
    ("../evil-bin/evil", None),
    ("", "EVIL"),                   # no plugin name: the stdin's type, a path
    ("", "../../evil-bin/evil"),
    ("..", None),
])
def test_replay_refuses_a_record_naming_a_path(skb, bin_dir, tmp_path, evil, plugin, stdin_type):
    d, marker = evil
    path = str(d / "evil")
    plugin = path if plugin == "EVIL" else plugin
    stdin = None
    if stdin_type is not None:
        stdin = json.dumps({"cniVersion": "1.0.0", "name": "n", "type": path if stdin_type == "EVIL" else stdin_type})
    log = tmp_path / "log.jsonl"
    write_records(log, record(plugin, stdin))
    p = run(skb, "replay", str(log), "--json", env={"CNI_PATH": bin_dir})
    assert p.returncode == 2
    one_line_error(p, "not a plain plugin name", "--plugin")
    assert not marker.exists()


def test_replay_never_looks_in_the_recorded_cni_path(skb, tmp_path, evil):
    d, marker = evil
    log = tmp_path / "log.jsonl"
    write_records(log, record("evil", CNI_PATH=str(d)))
    p = run(skb, "replay", str(log), "--json", "--cni-path", str(tmp_path / "empty"))
    one_line_error(p, 'failed to find plugin "evil"')
    assert not marker.exists()


def test_replay_shows_what_runs_and_replaces_a_foreign_cni_path(skb, bin_dir, tmp_path, evil):
    """The plugin comes from the bin dirs and the CNI_PATH it gets (for its own delegation) is the bin
    dirs, not the record's."""
    d, marker = evil
    log = tmp_path / "log.jsonl"
    write_records(log, record("debug", CNI_PATH=f"{d}:{bin_dir}"))
    p = run(skb, "replay", str(log), "--json", env={"CNI_PATH": bin_dir})
    assert p.returncode in (0, 1), p.err
    out = json.loads(p.out)
    assert out["plugin"] == os.path.join(bin_dir, "debug")
    assert f"running {os.path.join(bin_dir, 'debug')}" in p.err
    assert out["env"]["CNI_PATH"] == bin_dir and "replaced by the bin dirs" in out["pathNote"]
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------------
# class 7: records of the wrong shape, special files, non-UTF-8 names

@pytest.mark.parametrize("bad", [
    {"env": {"CNI_COMMAND": 5}},
    {"env": {"CNI_COMMAND": "ADD", "CNI_NETNS": ["x"]}},
    {"env": {"CNI_COMMAND": "ADD"}, "plugin": 7},
    {"env": {"CNI_COMMAND": "ADD"}, "plugin": "debug", "stdin": {"type": "debug"}},
    {"env": {"CNI_COMMAND": "ADD"}, "plugin": "debug", "command": ["ADD"]},
    {"env": {"CNI_COMMAND": "ADD"}, "plugin": "debug", "exitCode": "0"},
    {"env": {"CNI_COMMAND": "ADD", "CNI_ARGS": "\ud800"}, "plugin": "debug"},
    {"env": ["CNI_COMMAND=ADD"], "plugin": "debug"},
    {"plugin": "debug"},
])
def test_records_with_fields_of_the_wrong_type_are_refused(skb, bin_dir, tmp_path, bad, evil):
    d, marker = evil
    log = tmp_path / "log.jsonl"
    write_records(log, bad)
    p = run(skb, "replay", str(log), env={"CNI_PATH": f"{d}:{bin_dir}"})
    assert p.returncode == 2
    one_line_error(p, "record #1 cannot be replayed")
    assert not marker.exists()
    p = run(skb, "log", str(log))
    assert "Traceback" not in p.err, p.err


def test_a_record_with_odd_text_replays_without_a_traceback(skb, bin_dir, tmp_path):
    log = tmp_path / "log.jsonl"
    write_records(log, record("debug", stdin='{"cniVersion":"1.0.0","name":"\ud800","type":"debug"}',
                              CNI_NETNS="/run/netns/\udcff", time="\udcff"))
    p = run(skb, "replay", str(log), env={"CNI_PATH": bin_dir, "COLUMNS": "120"})
    assert p.returncode in (0, 1) and "Traceback" not in p.err, p.err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
@pytest.mark.parametrize("command", ["replay", "log"])
def test_record_file_that_is_not_a_regular_file(skb, tmp_path, kind, command):
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
        word = "FIFO"
    elif kind == "dev-zero":
        path, word = "/dev/zero", "character device"
    else:
        path, word = tmp_path, "directory"
    p = run(skb, command, str(path))
    one_line_error(p, word)


def test_runner_refuses_special_files_in_the_conf_dir(skb, tmp_path):
    conf = tmp_path / "net.d"
    conf.mkdir()
    os.mkfifo(conf / "10-a.conflist")
    os.symlink("/dev/zero", conf / "20-b.conf")
    p = run(skb, "status", "n", "--conf-dir", str(conf), "--cni-path", str(tmp_path))
    one_line_error(p, "10-a.conflist", "FIFO")
    os.unlink(conf / "10-a.conflist")
    p = run(skb, "status", "n", "--conf-dir", str(conf), "--cni-path", str(tmp_path))
    one_line_error(p, "20-b.conf", "character device")
    for bad in ("/dev/zero", str(conf / "20-b.conf")):
        p = run(skb, "status", "n", "--conf-dir", bad, "--cni-path", str(tmp_path))
        one_line_error(p, "not a directory")


def test_runner_cache_file_that_is_a_fifo(skb, bin_dir, tmp_path):
    """A FIFO where a cached result is expected: DEL does not hang on it."""
    conf = tmp_path / "net.d"
    conf.mkdir()
    (conf / "10-n.conflist").write_text(json.dumps(
        {"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "debug", "cniOutput": str(tmp_path / "out")}]}))
    cache = tmp_path / "cache"
    (cache / "results").mkdir(parents=True)
    os.mkfifo(cache / "results" / "n-c1-eth0")
    p = run(skb, "del", "n", "/nonexistent-netns", "--container-id", "c1", "--conf-dir", str(conf),
            "--cni-path", bin_dir, "--cache-dir", str(cache))
    assert "Traceback" not in p.err and p.returncode == 0, p.err
    # the DEL reached the plugin (its text record says so), and the cache entry went as libcni's DEL
    # removes it (unlinked, never opened)
    record = (tmp_path / "out").read_text()
    assert record.startswith("CmdDel\nContainerID: c1\n"), record
    assert not os.path.lexists(cache / "results" / "n-c1-eth0")


@pytest.mark.kernel
def test_netns_names_that_are_not_utf8(skb, tmp_path):
    before = sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else []
    p = subprocess.run([skb.encode(), b"netns", b"add", b"bad-\xff"], capture_output=True, timeout=60,
                       env={"PATH": os.environ["PATH"]})
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1 and "Traceback" not in err and "not valid UTF-8" in err, err
    assert (sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else []) == before
    p = subprocess.run([skb.encode(), b"add", b"n", b"/run/netns/x-\xff", b"--conf-dir", str(tmp_path).encode()],
                       capture_output=True, timeout=60, env={"PATH": os.environ["PATH"]})
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("kind", ["fifo", "file", "dev-null"])
def test_netns_run_dir_that_is_not_a_directory(skb, tmp_path, kind):
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    elif kind == "file":
        path = tmp_path / "file"
        path.write_text("")
    else:
        path = "/dev/null"
    for args in (["list"], ["add", "x"], ["del", "x"]):
        p = run(skb, "netns", *args, "--run-dir", str(path))
        one_line_error(p, "not a directory")


def test_record_of_an_unused_debug_call_still_replays(skb, bin_dir, tmp_path):
    """The ordinary path still works: a captured VERSION call replays with the same outcome."""
    cap = tmp_path / "cap.jsonl"
    r = run_plugin(os.path.join(bin_dir, "debug"), cni_env("VERSION", SKB_DEBUG_LOG=str(cap)),
                   {"cniVersion": "1.0.0", "name": "n", "type": "debug"})
    assert r.rc == 0
    p = run(skb, "replay", str(cap), "--json", env={"CNI_PATH": bin_dir})
    assert p.returncode == 0 and json.loads(p.out)["same"] is True, p.err
