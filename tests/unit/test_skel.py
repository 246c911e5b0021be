"""The dispatcher, in-process with a fake plugin: output shapes, codes, no tracebacks on stdout."""
import json
import os

import pytest

from skb.plugin import skel


class FakeResult:
    def to_dict(self, version):
        return {"cniVersion": version, "ips": []}


calls = []


def add(call):
    calls.append(("ADD", call.args, call.conf))
    return FakeResult()


def boom(call):
    raise KeyError("oops")


def nothing(call):
    return None


PLUGIN = skel.Plugin("fake", "a test double", add=add, delete=nothing, check=nothing)
BROKEN = skel.Plugin("broken", "raises", add=boom, delete=boom, check=boom)
ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0",
       "CNI_ARGS": "", "CNI_PATH": "/opt/cni/bin"}


def call(plugin=PLUGIN, stdin=b'{"cniVersion":"1.0.0","name":"n","type":"fake"}', **env):
    e = dict(ENV)
    e.update(env)
    return skel.run(plugin, {k: v for k, v in e.items() if v is not None}, stdin)


def test_add_prints_result_in_config_version():
    out = call(stdin=b'{"cniVersion":"0.3.1","name":"n"}')
    assert out.code == 0 and json.loads(out.stdout) == {"cniVersion": "0.3.1", "ips": []}


def test_version_reply():
    out = call(CNI_COMMAND="VERSION", stdin=b"not read")
    assert json.loads(out.stdout) == {"cniVersion": "1.1.0", "supportedVersions": [
        "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}


def test_no_command_prints_about_on_stderr_exit_0():
    out = skel.run(PLUGIN, {}, b"")
    assert out.code == 0 and out.stdout == "" and "CNI fake plugin" in out.stderr and "1.1.0" in out.stderr


def test_error_json_shape():
    out = call(stdin=b'{"cniVersion":"1.0.0","name":"n",}')
    e = json.loads(out.stdout)
    assert out.code == 1 and e["code"] == 6 and "cniVersion" not in e   # no configuration: no version to speak
    assert "trailing comma" in e["msg"] and "^" in e["details"]


def test_error_uses_config_version_when_known():
    out = call(stdin=b'{"cniVersion":"0.4.0","name":"n"}', CNI_COMMAND="GC")
    assert json.loads(out.stdout) == {"cniVersion": "0.4.0", "code": 1, "msg": "config version does not allow GC",
                                      "details": 'GC needs cniVersion "1.1.0" or later; the config has "0.4.0"'}


def test_unknown_command_after_stdin_validation_like_go():
    assert json.loads(call(CNI_COMMAND="FOO", stdin=b"").stdout)["code"] == 6
    out = json.loads(call(CNI_COMMAND="FOO").stdout)
    assert out["code"] == 4 and out["msg"] == "unknown CNI_COMMAND: FOO"
    assert json.loads(call(CNI_COMMAND="add").stdout)["msg"] == "unknown CNI_COMMAND: add"


def test_missing_gc_and_status_succeed_silently():
    for cmd in ("GC", "STATUS"):
        out = call(CNI_COMMAND=cmd, stdin=b'{"cniVersion":"1.1.0","name":"n"}')
        assert (out.code, out.stdout) == (0, "")


def test_unexpected_exception_is_999_and_traceback_only_on_stderr():
    out = call(BROKEN)
    e = json.loads(out.stdout)
    assert out.code == 1 and e["code"] == 999 and "KeyError" in e["msg"] and "broken" in e["msg"]
    assert "Traceback" in out.stderr and "Traceback" not in out.stdout


def test_env_error_before_stdin():
    out = call(CNI_CONTAINERID="bad id", stdin=b"garbage")
    assert json.loads(out.stdout)["msg"] == "invalid characters in containerID"


# ---------------------------------------------------------------------------------------------------
# issue 13: the answer is made before success; odd stdin; the debug log setting

class Unwritable:
    def __init__(self, exc):
        self.exc = exc

    def to_dict(self, version):
        raise self.exc


def undo_recorder(exc, undo_fails=False):
    """A plugin whose ADD makes one change (with its undo on the call's stack) and answers ``exc``."""
    done = []

    def undo():
        done.append("undone")
        if undo_fails:
            raise RuntimeError("veth busy")

    def add(call):
        done.append("made")
        call.undo.push("remove the change", undo)
        return Unwritable(exc)
    return skel.Plugin("undoable", "test", add=add, delete=nothing, check=nothing), done


def test_a_result_that_cannot_be_written_undoes_the_add():
    from skb.cni.errors import CNIError
    plugin, done = undo_recorder(CNIError(1, "cannot convert: no valid IP addresses"))
    out = call(plugin, stdin=b'{"cniVersion":"0.2.0","name":"n"}')
    e = json.loads(out.stdout)
    assert out.code == 1 and done == ["made", "undone"] and e["code"] == 1 and "the ADD was undone" in e["details"]
    assert out.undo is None


def test_an_unexpected_failure_writing_the_result_undoes_too_and_says_if_the_undo_failed():
    plugin, done = undo_recorder(TypeError("not serialisable"), undo_fails=True)
    out = call(plugin)
    e = json.loads(out.stdout)
    assert out.code == 1 and done == ["made", "undone"] and e["code"] == 999 and "TypeError" in e["msg"]
    assert "cleanup after the failure also failed" in e["details"] and "veth busy" in e["details"]
    assert "Traceback" in out.stderr and "Traceback" not in out.stdout


def test_the_undo_stays_armed_until_the_answer_is_delivered():
    plugin, done = undo_recorder(None)

    class Fine:
        def to_dict(self, version):
            return {"cniVersion": version}

    def add(call):
        done.append("made")
        call.undo.push("remove the change", done.append, "undone")
        return Fine()
    plugin = skel.Plugin("undoable", "test", add=add, delete=nothing, check=nothing)
    out = call(plugin)
    assert out.code == 0 and done == ["made"] and len(out.undo) == 1
    assert "the ADD was undone" in out.settle(False, "stdout closed") and done == ["made", "undone"] and out.code == 1
    out = call(plugin)
    assert out.settle(True) == "" and out.code == 0 and done == ["made", "undone", "made"]
    assert call(CNI_COMMAND="DEL").undo is None


def test_a_failed_add_is_undone_newest_first_and_each_undo_runs():
    done = []

    def add(call):
        for i in range(3):
            call.undo.push(f"step {i}", done.append, i)
        call.undo.push("breaks", lambda: 1 / 0)
        raise RuntimeError("boom")
    out = call(skel.Plugin("t", "t", add=add, delete=nothing, check=nothing))
    assert out.code == 1 and done == [2, 1, 0] and json.loads(out.stdout)["code"] == 999


def test_a_result_with_surrogates_is_written_as_u_fffd():
    class R:
        def to_dict(self, version):
            return {"cniVersion": version, "interfaces": [{"name": "\ud800", "sandbox": "/run/netns/\udcff"}]}
    out = call(skel.Plugin("s", "t", add=lambda call: R(), delete=None, check=None))
    assert out.code == 0 and json.loads(out.stdout)["interfaces"] == [{"name": "\ufffd", "sandbox": "/run/netns/\ufffd"}]
    out.stdout.encode("utf-8")     # printable whatever the locale: no surrogate left


@pytest.mark.parametrize("stdin,code,words", [(None, 6, "stdin is closed")])
def test_closed_stdin(stdin, code, words):
    out = call(stdin=stdin)
    e = json.loads(out.stdout)
    assert out.code == 1 and e["code"] == code and words in e["msg"] and "cniVersion" not in e


def test_stdin_is_read_with_a_bound(monkeypatch):
    import io

    class Stdin(io.BytesIO):
        def isatty(self):
            return False

        @property
        def buffer(self):
            return self

    monkeypatch.setattr(skel, "STDIN_LIMIT", 10)
    out = call(stdin=Stdin(b"{" + b" " * 20 + b"}"))
    e = json.loads(out.stdout)
    assert e["code"] == 6 and "larger than 10 bytes" in e["msg"]


def test_a_closed_file_object_as_stdin_is_an_io_error():
    import io
    f = io.BytesIO(b"{}")
    f.close()
    e = json.loads(call(stdin=f).stdout)
    assert e["code"] == 5 and "stdin" in e["msg"]


def test_skb_debug_log_in_the_config_is_checked_before_the_work(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    calls.clear()
    stdin = json.dumps({"cniVersion": "1.0.0", "name": "n", "skbDebugLog": str(fifo)}).encode()
    e = json.loads(call(stdin=stdin).stdout)
    assert e["code"] == 7 and "skbDebugLog" in e["msg"] and "FIFO" in e["msg"] and calls == []
    out = call(stdin=stdin, CNI_COMMAND="DEL")          # DEL: a remark, and the cleanup runs
    assert (out.code, out.stdout) == (0, "") and "skbDebugLog" in out.stderr


def test_debug_logs_are_written_once_each_and_problems_are_remarks(tmp_path, capsys):
    log = tmp_path / "log"
    out = call()
    skel.write_debug_logs(PLUGIN, ENV, out, 0.001, [("skbDebugLog", str(log)), ("captureFile", str(tmp_path / ".." /
                                                     tmp_path.name / "log")), ("SKB_DEBUG_LOG", "rel")])
    assert len(log.read_text().splitlines()) == 1
    assert "SKB_DEBUG_LOG" in capsys.readouterr().err
