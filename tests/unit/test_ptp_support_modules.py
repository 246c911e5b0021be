"""skb.plugin.skel.UndoStack and skb.linux.proc: the undo stack ptp's ADD relies on, and the cheap program runner."""
import os

import pytest

from skb.linux import proc
from skb.cni.errors import CNIError
from skb.plugin.skel import UndoStack


def test_undo_runs_newest_first_and_keeps_going():
    done = []
    u = UndoStack()
    u.push("first", done.append, 1)
    u.push("broken", lambda: 1 / 0)
    u.push("third", done.append, 3)
    err = CNIError(999, "boom", "what happened")
    failed = u.unwind(err)
    assert done == [3, 1] and len(u) == 0
    assert [w for w, _e in failed] == ["broken"]
    assert err.details.startswith("what happened; cleanup after the failure also failed (broken: division by zero)")


def test_undo_empty():
    assert UndoStack().unwind(None) == []


def test_proc_run_roundtrip_large_stdin():
    data = os.urandom(3 << 20)   # far beyond a pipe's buffer both ways: no deadlock
    code, out, err = proc.run("/bin/cat", ["cat"], {"PATH": "/bin"}, data)
    assert code == 0 and out == data and err == b""


def test_proc_run_exit_codes_stderr_and_unread_stdin():
    code, out, err = proc.run("/bin/sh", ["sh", "-c", "echo out; echo err >&2; exit 7"], {}, b"x" * (1 << 20))
    assert (code, out, err) == (7, b"out\n", b"err\n")
    code, _out, _err = proc.run("/bin/sh", ["sh", "-c", "kill -9 $$"], {})
    assert code == -9


def test_proc_spawn_errors(tmp_path):
    with pytest.raises(proc.SpawnError):
        proc.run(str(tmp_path / "missing"), ["x"], {})
    f = tmp_path / "notexec"
    f.write_text("hello")
    with pytest.raises(proc.SpawnError):
        proc.run(str(f), ["x"], {})


def test_which(tmp_path):
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "tool", 0o755)
    assert proc.which("tool", {"PATH": str(tmp_path)}) == str(tmp_path / "tool")
    assert proc.which("sh", {"PATH": ""}) in ("/usr/bin/sh", "/bin/sh")    # system dirs as a fallback
    assert proc.which("no-such-tool-here", {"PATH": str(tmp_path)}) is None


def test_spawned_children_get_default_sigpipe_and_sigxfsz():
    """Python ignores SIGPIPE; an iptables or IPAM plugin we start must not inherit that."""
    from skb.linux import proc
    code, out, err = proc.run("/bin/sh", ["/bin/sh", "-c", "grep SigIgn /proc/self/status"], {}, b"")
    ignored = int(out.split()[1], 16)
    assert code == 0 and not ignored & (1 << (13 - 1)) and not ignored & (1 << (25 - 1))
