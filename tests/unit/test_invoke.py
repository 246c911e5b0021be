"""skb.cni.invoke, the one invocation layer: the lookup refuses anything but a bare plugin name, and a
failure reads in libcni's words. (Delegation and the runner are tested through ptp and `skb`.)"""
import os

import pytest

from skb.cni import invoke


@pytest.mark.parametrize("name,msg", [
    ("", "no plugin name provided"),
    ("a/b", "invalid plugin name: a/b"),
    ("..", "invalid plugin name: .."),
    (".", "invalid plugin name: ."),
    ("x\0y", "invalid plugin name: x\0y"),
    (None, "no plugin name provided"),
])
def test_names_that_are_not_bare_file_names_are_refused(tmp_path, name, msg):
    (tmp_path / "x").write_text("")
    with pytest.raises(invoke.PluginNotFound) as e:
        invoke.find_in_path(name, [str(tmp_path)])
    assert e.value.msg == msg and e.value.code == 7


def test_empty_entries_never_mean_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "p").write_text("")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(invoke.PluginNotFound) as e:
        invoke.find_in_path("p", ["", "/nonexistent"])
    assert e.value.msg == 'failed to find plugin "p" in path [ /nonexistent]'


def test_a_fifo_or_directory_of_that_name_is_skipped(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    os.mkfifo(a / "p")
    (b / "p").write_text("")
    assert invoke.find_in_path("p", [str(a), str(b)]) == str(b / "p")


@pytest.mark.parametrize("code,text", [(1, "exit status 1"), (-9, "signal: killed"), (-15, "signal: terminated"),
                                       (-11, "signal: segmentation fault"), (-40, "signal: signal 40")])
def test_exit_text_is_gos(code, text):
    assert invoke.exit_text(code) == text


@pytest.mark.parametrize("stdout,stderr,msg,code", [
    (b"", b"", "netplugin failed with no error message: exit status 1", 0),
    (b"", b"boom\n", 'netplugin failed: "boom\\n": exit status 1', 0),
    (b"[1]", b"", 'netplugin failed but error parsing its diagnostic message "[1]": json: cannot unmarshal array '
                  "into Go value of type types.Error", 0),
    (b'{"code":"7","msg":"m"}', b"", 'netplugin failed but error parsing its diagnostic message '
                                     '"{\\"code\\":\\"7\\",\\"msg\\":\\"m\\"}": json: cannot unmarshal string into '
                                     "Go struct field Error.code of type uint", 0),
    (b'{"code":11,"Msg":"later","details":"d"}', b"", "later", 11),
])
def test_plugin_error(stdout, stderr, msg, code):
    e = invoke.plugin_error(stdout, stderr, "exit status 1")
    assert (e.msg, e.code) == (msg, code)


def test_execute_reports_what_happened(tmp_path):
    def spawn(result):
        def run(path, argv, env, stdin):
            assert argv == [path] and env["CNI_COMMAND"] == "ADD" and stdin == b"{}"
            if isinstance(result, OSError):
                raise result
            return result
        return run
    env = invoke.environ({"KEEP": "1"}, "ADD", "c1", "/run/netns/x", "eth0", "", "/opt/cni/bin")
    assert env == {"KEEP": "1", "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x",
                   "CNI_IFNAME": "eth0", "CNI_ARGS": "", "CNI_PATH": "/opt/cni/bin"}
    assert invoke.execute("/p", env, b"{}", spawn((0, b"out", b"err"))) == (b"out", b"err")
    with pytest.raises(invoke.PluginFailed) as e:
        invoke.execute("/p", env, b"{}", spawn((-9, b"", b"")))
    assert e.value.msg == "netplugin failed with no error message: signal: killed" and e.value.status == -9
    with pytest.raises(invoke.CNIError) as e:
        invoke.execute("/p", env, b"{}", spawn(PermissionError(13, "Permission denied")))
    assert e.value.msg == "netplugin failed with no error message: fork/exec /p: permission denied"


@pytest.mark.parametrize("stdout,msg", [(b"", "unexpected end of JSON input"),
                                        (b"[]", "json: cannot unmarshal array into Go value of type map[string]interface {}")])
def test_unreadable_results(stdout, msg):
    with pytest.raises(invoke.ResultUnreadable) as e:
        invoke.decode_result(stdout, "1.0.0")
    assert e.value.msg == msg


def test_a_result_without_version_is_read_in_the_configs():
    assert invoke.decode_result(b'{"ips":[]}', "0.4.0") == {"ips": [], "cniVersion": "0.4.0"}
    assert invoke.decode_result(b"null", "") == {"cniVersion": "0.1.0"}


def test_the_lookup_skips_empty_entries_and_missing_directories_and_finds_an_executable(tmp_path, monkeypatch):
    good = tmp_path / "good"
    good.mkdir()
    (good / "p").write_text("#!/bin/sh\n")
    os.chmod(good / "p", 0o755)
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(invoke.os, "stat", lambda p: stats.append(p) or real_stat(p))
    found = invoke.find_in_path("p", ["", str(tmp_path / "missing"), "/a\0b", str(good)])
    assert found == str(good / "p")
    assert stats == [str(tmp_path / "missing" / "p"), str(good / "p")]        # never "/p", never the NUL entry


def test_exit_status_0_and_json_kinds():
    assert invoke.exit_text(0) == "exit status 0"
    assert [invoke.json_kind(v) for v in (None, True, 1, 1.5, "s", [], {})] == \
        ["null", "bool", "number", "number", "string", "array", "object"]


@pytest.mark.parametrize("stdout,stderr,want", [
    (b"", b"bad \xff\n", (0, 'netplugin failed: "bad \\xff\\n": exit status 1', None)),
    (b"null", b"", (0, "", None)),
    (b'{"code":0,"msg":"m"}', b"", (0, "m", None)),
    (b'{"code":11,"msg":"m","details":"d"}', b"", (11, "m", "d")),
    (b'{"code":-1,"msg":"m"}', b"", (0, 'netplugin failed but error parsing its diagnostic message "{\\"code\\":-1,'
                                        '\\"msg\\":\\"m\\"}": json: cannot unmarshal number into Go struct field '
                                        'Error.code of type uint', None)),
    (b'{"code":true}', b"", (0, 'netplugin failed but error parsing its diagnostic message "{\\"code\\":true}": json: '
                                'cannot unmarshal bool into Go struct field Error.code of type uint', None)),
    (b'{"msg":5}', b"", (0, 'netplugin failed but error parsing its diagnostic message "{\\"msg\\":5}": json: cannot '
                            'unmarshal number into Go struct field Error.msg of type string', None)),
    (b'{"details":[]}', b"", (0, 'netplugin failed but error parsing its diagnostic message "{\\"details\\":[]}": '
                                 'json: cannot unmarshal array into Go struct field Error.details of type string', None)),
    (b"\xff{", b"", (0, 'netplugin failed but error parsing its diagnostic message "\\xff{": invalid UTF-8 byte at '
                        'line 1, column 1', None)),
])
def test_plugin_error_exact(stdout, stderr, want):
    e = invoke.plugin_error(stdout, stderr, "exit status 1")
    assert (e.code, e.msg, e.details or None) == want


def test_a_failed_plugin_keeps_its_output_and_error():
    def spawn(path, argv, env, stdin):
        return 3, b'{"code":7,"msg":"m","details":"d"}', b"trace"
    with pytest.raises(invoke.PluginFailed) as ei:
        invoke.execute("/p", {}, b"", spawn)
    e = ei.value
    assert (e.code, e.msg, e.details, e.stdout, e.stderr, e.status) == (7, "m", "d", b'{"code":7,"msg":"m","details":"d"}',
                                                                        b"trace", 3)
    with pytest.raises(invoke.PluginFailed) as ei:
        invoke.execute("/p", {}, b"", lambda *a: (1, b"", b"oops"))
    assert ei.value.msg == 'netplugin failed: "oops": exit status 1'


def test_a_plugin_that_cannot_start_without_an_errno():
    def spawn(path, argv, env, stdin):
        raise OSError("no such thing")
    with pytest.raises(invoke.CNIError) as ei:
        invoke.execute("/p", {}, b"", spawn)
    assert (ei.value.code, ei.value.msg) == (0, "netplugin failed with no error message: fork/exec /p: no such thing")
    with pytest.raises(invoke.CNIError) as ei:
        invoke.execute("/p", {}, b"", lambda *a: (_ for _ in ()).throw(FileNotFoundError(2, "x")))
    assert (ei.value.code, ei.value.msg) == (0, "netplugin failed with no error message: fork/exec /p: no such file or "
                                                "directory")


@pytest.mark.parametrize("stdout,msg", [(b" \n", "unexpected end of JSON input"), (b"{", "unexpected end of input: the "
                                        "JSON is empty or cut short at line 1, column 2"),
                                        (b"5", "json: cannot unmarshal number into Go value of type map[string]interface {}")])
def test_unreadable_results_are_code_0(stdout, msg):
    with pytest.raises(invoke.ResultUnreadable) as e:
        invoke.decode_result(stdout, "1.0.0")
    assert (e.value.code, e.value.msg) == (0, msg)


@pytest.mark.parametrize("version", ['""', "5", "null"])
def test_a_result_whose_version_is_empty_or_not_a_string_gets_the_configs(version):
    assert invoke.decode_result(b'{"cniVersion":%s}' % version.encode(), "1.0.0") == {"cniVersion": "1.0.0"}
    assert invoke.decode_result(b'{"cniVersion":"0.4.0"}', "1.0.0") == {"cniVersion": "0.4.0"}


def test_environ_sets_the_six_variables_empty_by_default():
    assert invoke.environ({"CNI_X": "1"}, "VERSION") == {"CNI_X": "1", "CNI_COMMAND": "VERSION", "CNI_CONTAINERID": "",
                                                         "CNI_NETNS": "", "CNI_IFNAME": "", "CNI_ARGS": "", "CNI_PATH": ""}
