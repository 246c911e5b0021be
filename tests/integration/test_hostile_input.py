"""Issue 13, classes 1, 2, 10, 11 and 12: hostile or odd input to the installed plugins, run as a runtime
runs them (the frozen build when SKB_BIN_DIR is set). Every call has a hard timeout: a hang fails the
test. Outcomes are read back independently: stdout parsed with the json module, files on disk, and for
ptp the kernel state (ip -j), the firewall (iptables-save, nft) and the dataDir.
"""
import json
import os
import subprocess

import pytest

from tests.helpers import cni_env, run_plugin
from tests.integration.ptp_support import nspath, ptp_conf
from tests.integration.ptp_support import snapshot as _snapshot

PLUGINS = ["loopback", "ptp", "host-local", "debug"]
VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
SPEC_CODES = {1, 2, 3, 4, 5, 6, 7, 11, 50, 51}
TIMEOUT = 20


def snapshot(data, names):
    """What an attachment leaves: links, addresses, routes, firewall rules, reservations. (ADD switches
    forwarding on for good, as Go's ptp does: not a leftover of one attachment.)"""
    state = _snapshot(data, names)
    state.pop("sysctl")
    return state


def call(exe, env, stdin=b"", close=(), cwd=None):
    """Run ``exe`` with ``env``, ``stdin`` (dict, str or bytes), the fds in ``close`` closed in the child;
    returns (rc, stdout text, stderr text). A hang raises TimeoutExpired (the test fails)."""
    if isinstance(stdin, dict):
        stdin = json.dumps(stdin)
    if isinstance(stdin, str):
        stdin = stdin.encode()

    def pre():
        for fd in close:
            os.close(fd)

    p = subprocess.run([exe], env=env, input=None if 0 in close else stdin,
                       stdin=subprocess.DEVNULL if 0 in close else None,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=pre, timeout=TIMEOUT, cwd=cwd)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def one_error(rc, stdout, stderr):
    """The call failed with exactly one spec-shaped CNI error object on stdout and no traceback."""
    assert rc == 1, (rc, stdout, stderr)
    assert "Traceback" not in stderr, stderr
    err = json.loads(stdout)
    assert isinstance(err, dict) and err["code"] in SPEC_CODES and err["msg"], err
    return err


def conf_for(plugin, tmp_path, version="1.0.0", **extra):
    c = {"cniVersion": version, "name": "hostile", "type": plugin}
    if plugin in ("ptp", "host-local"):
        c["ipam"] = {"type": "host-local", "ranges": [[{"subnet": "10.44.0.0/24"}]], "dataDir": str(tmp_path / "ipam")}
    if plugin == "host-local":
        c = dict(c["ipam"], cniVersion=version, name="hostile")
        c = {"cniVersion": version, "name": "hostile", "type": "host-local", "ipam": c}
    c.update(extra)
    return c


@pytest.fixture
def exe(bin_dir):
    return lambda name: os.path.join(bin_dir, name)


# ---------------------------------------------------------------------------------------------------
# class 1: malformed strings and numbers in JSON

def test_lone_surrogates_come_out_as_u_fffd(exe, tmp_path):
    """Go's decoder turns a lone surrogate escape into U+FFFD: the debug plugin passes it through so."""
    prev = '{"cniVersion":"1.0.0","dns":{"domain":"a\\ud800b","search":["\\udfff"]}}'
    stdin = '{"cniVersion":"1.0.0","name":"n","type":"debug","x":"\\ud800","prevResult":%s}' % prev
    rc, out, err = call(exe("debug"), cni_env("ADD", netns="/x"), stdin)
    assert rc == 0 and "Traceback" not in err, (out, err)
    assert json.loads(out)["dns"] == {"domain": "a\ufffdb", "search": ["\ufffd"]}


@pytest.mark.parametrize("plugin", ["host-local", "debug"])
@pytest.mark.parametrize("where", ["key", "value", "prevResult", "cniVersion", "name"])
def test_lone_surrogates_anywhere_never_crash(exe, tmp_path, plugin, where):
    text = json.dumps(conf_for(plugin, tmp_path))[:-1]
    text += {"key": ', "\\ud800k": 1}', "value": ', "x": "\\udc00\\ud800"}',
             "prevResult": ', "prevResult": {"cniVersion": "1.0.0", "ips": [{"address": "\\ud800"}]}}',
             "cniVersion": ', "cniVersion": "1.0.\\ud800"}', "name": ', "name": "n\\ud800"}'}[where]
    for command in ("ADD", "CHECK", "DEL"):
        rc, out, err = call(exe(plugin), cni_env(command, netns="/x"), text)
        assert "Traceback" not in err and rc in (0, 1), (command, out, err)
        if rc:
            e = one_error(rc, out, err)
            if where == "cniVersion":
                assert e["code"] == 6 and "not a version string" in e["msg"]
        elif out:
            assert isinstance(json.loads(out), dict)


@pytest.mark.kernel
def test_ptp_add_with_surrogates_in_its_config_succeeds_and_del_leaves_nothing(exe, make_netns, tmp_path):
    ns = make_netns()
    data = str(tmp_path / "ipam")
    before = snapshot(data, [ns])
    text = json.dumps(ptp_conf(data))[:-1] + ', "vendor": "\\ud800", "args": {"x": "\\udfff"}}'
    env = cni_env("ADD", netns=nspath(ns), path=os.path.dirname(exe("ptp")))
    rc, out, err = call(exe("ptp"), env, text)
    assert rc == 0 and "Traceback" not in err, (out, err)
    assert json.loads(out)["ips"][0]["address"] == "10.22.0.2/24"
    rc, out, err = call(exe("ptp"), dict(env, CNI_COMMAND="DEL"), text)
    assert (rc, out) == (0, ""), err
    assert snapshot(data, [ns]) == before


@pytest.mark.parametrize("plugin", PLUGINS)
def test_very_long_integers_are_a_located_decode_error(exe, tmp_path, plugin):
    text = '{"cniVersion": "1.0.0", "name": "n", "type": "%s",\n "mtu": %s}' % (plugin, "9" * 5000)
    e = one_error(*call(exe(plugin), cni_env("ADD", netns="/x"), text))
    assert e["code"] == 6 and "number too long" in e["msg"] and "line 2, column 9" in e["msg"], e
    ok = '{"cniVersion": "1.0.0", "name": "n", "type": "debug", "big": %s}' % ("9" * 4000)
    rc, out, err = call(exe("debug"), cni_env("ADD", netns="/x"), ok)
    assert rc == 0, (out, err)


# ---------------------------------------------------------------------------------------------------
# class 2: paths naming FIFOs, devices, directories, dangling links

@pytest.fixture
def specials(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x")
    (tmp_path / "adir").mkdir()
    return {"fifo": str(fifo), "zero": "/dev/zero", "null": "/dev/null", "dir": str(tmp_path / "adir"),
            "dangling": str(tmp_path / "dangling")}


@pytest.mark.parametrize("kind", ["fifo", "zero", "null", "dir", "dangling"])
def test_host_local_resolv_conf_must_be_a_regular_file(exe, tmp_path, specials, kind):
    c = conf_for("host-local", tmp_path)
    c["ipam"]["resolvConf"] = specials[kind]
    e = one_error(*call(exe("host-local"), cni_env("ADD", netns="/x"), c))
    assert e["code"] == 7 and "ipam.resolvConf" in e["msg"] and specials[kind] in e["msg"], e
    assert not (tmp_path / "ipam").exists()       # refused before the store was touched
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("key", ["skbDebugLog", "captureFile", "cniOutput"])
@pytest.mark.parametrize("kind", ["fifo", "null", "dir", "dangling"])
def test_record_files_must_be_regular_files(exe, tmp_path, specials, key, kind):
    c = conf_for("debug", tmp_path, **{key: specials[kind]})
    e = one_error(*call(exe("debug"), cni_env("ADD", netns="/x"), c))
    assert e["code"] == 7 and key in e["msg"] and specials[kind] in e["msg"], e
    rc, out, err = call(exe("debug"), cni_env("DEL"), c)       # DEL: a remark, and cleanup goes on
    assert (rc, out) == (0, "") and key in err, err
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("plugin", PLUGINS)
def test_skb_debug_log_fifo_does_not_hang_version_or_change_its_answer(exe, specials, plugin):
    rc, out, err = call(exe(plugin), {"CNI_COMMAND": "VERSION", "SKB_DEBUG_LOG": specials["fifo"]})
    assert rc == 0 and json.loads(out)["supportedVersions"] == VERSIONS, (out, err)
    assert "SKB_DEBUG_LOG" in err and "FIFO" in err


def test_skb_debug_log_fifo_with_a_reader_is_refused_too(exe, specials, tmp_path):
    peer = os.open(specials["fifo"], os.O_RDWR | os.O_NONBLOCK)
    try:
        rc, out, err = call(exe("debug"), cni_env("ADD", netns="/x", SKB_DEBUG_LOG=specials["fifo"]),
                            conf_for("debug", tmp_path))
        assert rc == 0 and "FIFO" in err
        with pytest.raises(BlockingIOError):
            os.read(peer, 100)   # nothing was written into it
    finally:
        os.close(peer)


# ---------------------------------------------------------------------------------------------------
# class 10: relative paths

@pytest.mark.parametrize("plugin,key,where", [
    ("host-local", "dataDir", "ipam"), ("host-local", "resolvConf", "ipam"), ("ptp", "dataDir", "ipam"),
    ("debug", "skbDebugLog", ""), ("debug", "captureFile", ""), ("debug", "cniOutput", ""),
    ("loopback", "skbDebugLog", "")])
def test_relative_paths_are_code_7_naming_the_key(exe, tmp_path, plugin, key, where):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    c = conf_for(plugin, tmp_path, version="1.1.0", **{"cni.dev/valid-attachments": []})
    (c[where] if where else c)[key] = "rel/file"
    # (ptp checks CNI_NETNS before its configuration on ADD and CHECK; its IPAM part is host-local's)
    for command in ("STATUS", "GC") if plugin == "ptp" else ("ADD", "CHECK", "STATUS", "GC"):
        got = call(exe(plugin), cni_env(command, netns="/x", path=os.path.dirname(exe(plugin))), c, cwd=str(cwd))
        if (command, key) == ("GC", "resolvConf") and got[0] == 0:
            continue   # GC reads only the dataDir (an edited config must not block cleanup)
        e = one_error(*got)
        assert e["code"] == 7 and key in e["msg"] and "relative path" in e["msg"], (command, e)
    assert os.listdir(cwd) == []


def test_relative_skb_debug_log_is_reported_and_the_call_goes_on(exe, tmp_path):
    """An environment variable is the operator's setting for every call: a bad one must not fail them
    all (VERSION included). It is refused with a remark on stderr; nothing appears in the cwd."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    rc, out, err = call(exe("debug"), cni_env("ADD", netns="/x", SKB_DEBUG_LOG="log.jsonl"),
                        conf_for("debug", tmp_path), cwd=str(cwd))
    assert rc == 0 and "SKB_DEBUG_LOG" in err and "relative path" in err
    assert os.listdir(cwd) == []


# ---------------------------------------------------------------------------------------------------
# class 11: closed standard streams

@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "STATUS", "GC"])
def test_closed_stdin_is_a_decode_error_naming_stdin(exe, plugin, command):
    e = one_error(*call(exe(plugin), cni_env(command, netns="/x"), close=(0,)))
    assert e["code"] == 6 and "stdin is closed" in e["msg"] and "cniVersion" not in e, e


@pytest.mark.parametrize("plugin", PLUGINS)
def test_closed_stdout_version_no_traceback_and_the_record_is_written(exe, tmp_path, plugin):
    log = tmp_path / "log.jsonl"
    for env in ({"CNI_COMMAND": "VERSION"}, {"CNI_COMMAND": "VERSION", "SKB_DEBUG_LOG": str(log)}):
        rc, out, err = call(exe(plugin), env, close=(1,))
        assert rc == 1 and "Traceback" not in err and "could not be written" in err, err
    rec = json.loads(log.read_text())
    assert rec["command"] == "VERSION" and rec["exitCode"] == 1 and "supportedVersions" in rec["stdout"]


def test_closed_stdout_debug_add_still_captured(exe, tmp_path):
    cap = tmp_path / "cap.jsonl"
    rc, out, err = call(exe("debug"), cni_env("ADD", netns="/x"), conf_for("debug", tmp_path, captureFile=str(cap)),
                        close=(1,))
    assert rc == 1 and "Traceback" not in err
    assert json.loads(cap.read_text())["command"] == "ADD"


@pytest.mark.kernel
def test_ptp_add_with_stdout_closed_is_undone(exe, make_netns, tmp_path):
    """The runtime can never learn of an ADD whose answer is lost, so it would never DEL it: undone."""
    ns = make_netns()
    data = str(tmp_path / "ipam")
    log = tmp_path / "log.jsonl"
    before = snapshot(data, [ns])
    c = dict(ptp_conf(data), ipMasq=True)
    env = cni_env("ADD", netns=nspath(ns), path=os.path.dirname(exe("ptp")), SKB_DEBUG_LOG=str(log))
    rc, out, err = call(exe("ptp"), env, c, close=(1,))
    assert rc == 1 and "Traceback" not in err and "undone" in err, err
    assert snapshot(data, [ns]) == before
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert recs[-1]["command"] == "ADD" and recs[-1]["exitCode"] == 1


# ---------------------------------------------------------------------------------------------------
# class 12: protocol details

@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("stdin", [b"", b"{", b"[1]", b'{"cniVersion": "1.0.0", "name": 5}'])
def test_errors_before_the_config_is_read_carry_no_cni_version(exe, plugin, stdin):
    e = one_error(*call(exe(plugin), cni_env("ADD", netns="/x"), stdin))
    assert e["code"] in (6, 7) and "cniVersion" not in e, e


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "STATUS", "GC"])
def test_a_cni_version_that_is_not_a_version_string_is_code_6(exe, tmp_path, plugin, command):
    for v in ("v1.0.0", "1.1.0-rc1", "one"):
        c = conf_for(plugin, tmp_path, version=v)
        e = one_error(*call(exe(plugin), cni_env(command, netns="/x"), c))
        assert e["code"] == 6 and "not a version string" in e["msg"], (v, e)
    c = conf_for(plugin, tmp_path, version="9.9.9")   # a version, just not one we speak
    assert one_error(*call(exe(plugin), cni_env(command, netns="/x"), c))["code"] == 1


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("var", ["CNI_IFNAME", "CNI_CONTAINERID", "CNI_NETNS", "CNI_ARGS", "CNI_PATH",
                                 "SKB_DEBUG_LOG"])
def test_non_utf8_environment_never_crashes(exe, tmp_path, plugin, var):
    """os.environ carries non-UTF-8 bytes as lone surrogates: they must never reach an encoder unchecked."""
    env = {k.encode(): v.encode() for k, v in cni_env("ADD", netns="/x", path=os.path.dirname(exe(plugin))).items()}
    env[var.encode()] = env.get(var.encode(), b"") + b"\xff\xfe"
    for command in (b"ADD", b"DEL", b"VERSION"):
        env[b"CNI_COMMAND"] = command
        p = subprocess.run([exe(plugin)], env=env, input=json.dumps(conf_for(plugin, tmp_path)).encode(),
                           capture_output=True, timeout=TIMEOUT)
        out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        assert p.returncode in (0, 1) and "Traceback" not in err, (command, out, err)
        if p.returncode:
            assert one_error(p.returncode, out, err)["code"] != 999
        elif out:
            assert isinstance(json.loads(out), dict)


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("close", [(2,), (0, 1, 2)])
def test_closed_stderr_or_all_streams_never_crash(exe, tmp_path, plugin, close):
    c = conf_for(plugin, tmp_path, inject={"ADD": {"stderr": "remark"}}) if plugin == "debug" else conf_for(plugin, tmp_path)
    for command in ("ADD", "DEL", "VERSION", "STATUS"):
        rc, out, err = call(exe(plugin), cni_env(command, netns="/x", path=os.path.dirname(exe(plugin))), c,
                            close=close)
        assert rc in (0, 1) and "Traceback" not in out, (command, rc, out)
        if 1 not in close and out:
            assert json.loads(out).get("code") != 999, out


def test_host_local_gc_with_stderr_closed_or_broken_releases_and_succeeds(exe, tmp_path):
    """GC writes a remark after releasing: a closed or broken stderr must not make that a failure."""
    c = conf_for("host-local", tmp_path, version="1.1.0")
    env = cni_env("ADD", containerid="gone", netns="/x", path=os.path.dirname(exe("host-local")))
    for how in ("closed", "broken"):
        rc, out, err = call(exe("host-local"), env, c)
        assert rc == 0, err
        gc = dict(c, **{"cni.dev/valid-attachments": []})
        if how == "closed":
            rc, out, err = call(exe("host-local"), dict(env, CNI_COMMAND="GC"), gc, close=(2,))
        else:
            r, w = os.pipe()
            os.close(r)          # nobody reads stderr: every write to it fails with EPIPE
            p = subprocess.run([exe("host-local")], env=dict(env, CNI_COMMAND="GC"), input=json.dumps(gc).encode(),
                               stdout=subprocess.PIPE, stderr=w, timeout=TIMEOUT)
            os.close(w)
            rc, out = p.returncode, p.stdout.decode()
        assert (rc, out) == (0, ""), (how, rc, out)
        assert [f for f in os.listdir(tmp_path / "ipam" / "hostile") if f[0].isdigit()] == [], how
