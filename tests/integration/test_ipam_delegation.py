"""IPAM delegation (skb.plugin.delegate) as ptp uses it: lookup in CNI_PATH with libcni's rules and texts, the
caller's environment and unmodified stdin, the delegate's result and errors passed on, and the
in-process fast path for our own host-local giving exactly what exec gives."""
import json
import os
import shutil
import stat
import sys

import pytest

from skb.plugin import delegate as ipam
from skb.cni.env import CmdArgs
from skb.cni.errors import CNIError
from tests.helpers import GO_BIN_DIR
from tests.integration.ptp_support import Ptp, nspath, ptp_conf, reservations


def script(path, text, shell="/bin/bash"):
    with open(path, "w") as f:
        f.write(f"#!{shell}\n" + text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


# --------------------------------------------------------------------------------------------------
# lookup (no kernel)


def test_find_in_path_errors_like_libcni(tmp_path):
    with pytest.raises(CNIError) as e:
        ipam.find_in_path("", ["/a"])
    assert e.value.msg == "no plugin name provided" and e.value.code == 7
    with pytest.raises(CNIError) as e:
        ipam.find_in_path("../host-local", ["/a"])
    assert e.value.msg == "invalid plugin name: ../host-local"
    with pytest.raises(CNIError) as e:
        ipam.find_in_path("nosuch", ["/a", "/b/c"])
    assert e.value.msg == 'failed to find plugin "nosuch" in path [/a /b/c]'


def test_find_in_path_first_regular_file_wins(tmp_path):
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    (a / "x").mkdir()                     # a directory of that name is skipped
    (b / "x").write_text("")              # a regular file wins, executable or not (as in libcni)
    (c / "x").write_text("")
    assert ipam.find_in_path("x", [str(a), str(b), str(c)]) == str(b / "x")
    os.symlink(str(c / "x"), str(a / "y"))
    assert ipam.find_in_path("y", [str(a), str(b)]) == str(a / "y")   # symlinks are followed


def test_own_build_identity(tmp_path, monkeypatch):
    """Fast path only for a launcher that would run this very bundle."""
    bindir = tmp_path / "bin"
    bundle = bindir / ".skb-0.1.0-abcdefabcdef"
    bundle.mkdir(parents=True)
    (bundle / "skb-cni").write_text("")
    os.symlink(bundle.name, str(bindir / ".skb"))
    launcher = b"\x7fELF launcher bytes"
    (bindir / "host-local").write_bytes(launcher)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(bundle / "skb-cni"))
    check = ipam._is_own_build
    assert check(str(bindir / "host-local"), "host-local")
    # a byte-identical copy in another dir whose .skb points at our bundle: ours
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(str(bindir / "host-local"), str(other / "host-local"))
    os.symlink(str(bundle), str(other / ".skb"))
    assert check(str(other / "host-local"), "host-local")
    # different bytes (a foreign host-local next to our .skb): not ours
    (other / "host-local").write_bytes(b"\x7fELF Go host-local")
    assert not check(str(other / "host-local"), "host-local")
    # our launcher bytes, but its .skb is another bundle (another version): not ours
    third = tmp_path / "third"
    third.mkdir()
    (third / "host-local").write_bytes(launcher)
    (third / ".skb-0.2.0-ffffffffffff").mkdir()
    os.symlink(".skb-0.2.0-ffffffffffff", str(third / ".skb"))
    assert not check(str(third / "host-local"), "host-local")
    # no .skb at all
    (tmp_path / "fourth").mkdir()
    (tmp_path / "fourth" / "host-local").write_bytes(launcher)
    assert not check(str(tmp_path / "fourth" / "host-local"), "host-local")
    # from source (not frozen) there is no fast path
    monkeypatch.setattr(sys, "frozen", False)
    assert not check(str(bindir / "host-local"), "host-local")


def test_delegate_env_keeps_the_callers_and_overrides_the_command(monkeypatch):
    monkeypatch.setenv("SOMETHING", "kept")
    monkeypatch.setenv("CNI_PATH", "/x::/y")
    args = CmdArgs("ADD", "c1", "/run/netns/n", "eth0", "IgnoreUnknown=1", ["/x", "/y"])
    env = ipam._environ("DEL", args, None)
    assert env["CNI_COMMAND"] == "DEL" and env["SOMETHING"] == "kept"
    assert env["CNI_PATH"] == "/x::/y"    # the caller's own spelling when it means the same dirs
    assert (env["CNI_CONTAINERID"], env["CNI_NETNS"], env["CNI_IFNAME"], env["CNI_ARGS"]) == \
        ("c1", "/run/netns/n", "eth0", "IgnoreUnknown=1")


# --------------------------------------------------------------------------------------------------
# through ptp, against the kernel


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "ipam")


@pytest.fixture
def recorder(tmp_path):
    """A host-local that records its environment and stdin, then runs Go's host-local."""
    d = tmp_path / "rec-bin"
    rec = tmp_path / "rec"
    d.mkdir()
    rec.mkdir()
    script(d / "host-local", f'env -0 > "{rec}/env.$CNI_COMMAND"\n'
                             f'tee "{rec}/stdin.$CNI_COMMAND" | {GO_BIN_DIR}/host-local\n'
                             'exit ${PIPESTATUS[1]}\n')
    return str(d), rec


@pytest.mark.kernel
def test_delegate_gets_env_and_unmodified_stdin(bin_dir, make_netns, data_dir, recorder):
    bindir, rec = recorder
    ns = make_netns()
    ptp = Ptp(os.path.join(bin_dir, "ptp"), f"{bindir}:{GO_BIN_DIR}", extra_env={"MY_RUNTIME_VAR": "x y"})
    conf = ptp_conf(data_dir)
    # odd formatting, key order and escapes: the delegate must get these very bytes
    raw = ('{ "name" :"ptpnet","cniVersion":"1.0.0",\n\t"type":"ptp", "args": {"cni": {"note": "\\u00e9"}},'
           f' "ipam": {json.dumps(conf["ipam"], indent=3)}, "x": 1.0e2 }}\n').encode()
    prev = None
    for command in ("ADD", "CHECK", "DEL"):
        stdin = raw
        if command == "CHECK":
            stdin = raw.rstrip()[:-1] + b', "prevResult": ' + prev.encode() + b"}"
        r = ptp(command, stdin, nspath(ns), args="IgnoreUnknown=1;K8S_POD_NAME=p")
        assert r.rc == 0, (command, r)
        if command == "ADD":
            prev = r.stdout
        assert (rec / f"stdin.{command}").read_bytes() == stdin
        env = dict(kv.split("=", 1) for kv in (rec / f"env.{command}").read_text().split("\0") if kv)
        assert env["CNI_COMMAND"] == command
        assert env["CNI_CONTAINERID"] == "ctr1" and env["CNI_NETNS"] == nspath(ns) and env["CNI_IFNAME"] == "eth0"
        assert env["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=p"
        assert env["CNI_PATH"] == f"{bindir}:{GO_BIN_DIR}" and env["MY_RUNTIME_VAR"] == "x y"


@pytest.fixture
def fake_ipam(tmp_path):
    d = tmp_path / "fake-bin"
    d.mkdir()

    def make(body):
        script(d / "host-local", body, shell="/bin/sh")
        return str(d)
    return make


@pytest.mark.kernel
def test_delegate_error_object_is_passed_on(bin_dir, make_netns, data_dir, fake_ipam):
    d = fake_ipam('echo "ipam says hello" >&2\n'
                  'echo \'{"cniVersion":"1.0.0","code":11,"msg":"try again later","details":"store busy"}\'\nexit 1\n')
    r = Ptp(os.path.join(bin_dir, "ptp"), d).add(ptp_conf(data_dir), nspath(make_netns()))
    assert r.rc == 1 and r.json == {"cniVersion": "1.0.0", "code": 11, "msg": "try again later",
                                    "details": "store busy"}, r
    assert "ipam says hello" in r.stderr


@pytest.mark.kernel
def test_delegate_failing_without_an_error_object(bin_dir, make_netns, data_dir, fake_ipam):
    d = fake_ipam('echo "segfault or so" >&2\nexit 2\n')
    r = Ptp(os.path.join(bin_dir, "ptp"), d).add(ptp_conf(data_dir), nspath(make_netns()))
    # libcni's words, as Go's invoke package prints them (the same text `skb add` gives)
    assert r.rc == 1 and r.json["msg"] == 'netplugin failed: "segfault or so\\n": exit status 2', r
    d = fake_ipam('exit 3\n')
    r = Ptp(os.path.join(bin_dir, "ptp"), d).add(ptp_conf(data_dir), nspath(make_netns()))
    assert r.rc == 1 and r.json["msg"] == "netplugin failed with no error message: exit status 3", r
    d = fake_ipam('echo "not json"\nexit 1\n')
    r = Ptp(os.path.join(bin_dir, "ptp"), d).add(ptp_conf(data_dir), nspath(make_netns()))
    assert r.rc == 1 and r.json["msg"].startswith("netplugin failed but error parsing its diagnostic message"), r


@pytest.mark.kernel
def test_delegate_result_without_cni_version_is_read_in_the_configs(bin_dir, make_netns, data_dir, fake_ipam):
    d = fake_ipam('[ "$CNI_COMMAND" = ADD ] && echo \'{"ips":[{"version":"4","address":"10.40.0.9/24",'
                  '"gateway":"10.40.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}\'\nexit 0\n')
    ptp = Ptp(os.path.join(bin_dir, "ptp"), d)
    ns = make_netns()
    conf = ptp_conf(data_dir, version="0.4.0")
    r = ptp.add(conf, nspath(ns))
    assert r.rc == 0, r
    assert r.json["cniVersion"] == "0.4.0"
    assert r.json["ips"] == [{"version": "4", "interface": 1, "address": "10.40.0.9/24", "gateway": "10.40.0.1"}]
    assert ptp.delete(conf, nspath(ns)).rc == 0


@pytest.mark.kernel
def test_delegate_stderr_passed_on_success(bin_dir, make_netns, data_dir, tmp_path):
    d = tmp_path / "b"
    d.mkdir()
    script(d / "host-local", f'echo "host-local note" >&2\nexec {GO_BIN_DIR}/host-local\n', shell="/bin/sh")
    ptp = Ptp(os.path.join(bin_dir, "ptp"), str(d))
    ns = make_netns()
    r = ptp.add(ptp_conf(data_dir), nspath(ns))
    assert r.rc == 0 and "host-local note" in r.stderr, r
    assert ptp.delete(ptp_conf(data_dir), nspath(ns)).rc == 0


# --------------------------------------------------------------------------------------------------
# in-process vs exec: the same results, files and errors


def _strip(result):
    """A result without what differs per run (MACs, netns paths)."""
    out = json.loads(json.dumps(result))
    for i in out.get("interfaces", []):
        i.pop("mac", None)
        if "sandbox" in i:
            i["sandbox"] = "<netns>"
    return out


@pytest.mark.kernel
def test_in_process_and_exec_give_the_same(bin_dir, make_netns, tmp_path, monkeypatch):
    """ptp run in this process through skel.run, its host-local once in-process (what the frozen build
    does for its own host-local) and once exec'd: same results, same files, same errors."""
    from skb.plugin import skel
    from skb_plugins.hostlocal_ipam.hostlocal import PLUGIN as HOSTLOCAL
    from skb_plugins.ptp import ptp as ptp_plugin

    runs = {}
    for mode in ("in-process", "exec"):
        monkeypatch.setattr(ipam, "_in_process", (lambda *a: HOSTLOCAL) if mode == "in-process" else (lambda *a: None))
        data = str(tmp_path / mode)
        conf = json.dumps(ptp_conf(data, v4="10.50.0.0/29", v6="fd00:50::/125"))
        log = []
        netnses = [make_netns() for _ in range(7)]

        def call(command, i):
            env = {"CNI_COMMAND": command, "CNI_CONTAINERID": f"c{i}", "CNI_NETNS": nspath(netnses[i]),
                   "CNI_IFNAME": "eth0", "CNI_ARGS": "", "CNI_PATH": bin_dir}
            out = skel.run(ptp_plugin.PLUGIN, env, conf)
            log.append((command, i, out.code, _strip(json.loads(out.stdout)) if out.stdout else None))

        for i in range(6):       # the v4 range holds 5 addresses besides the gateway: the 6th fails
            call("ADD", i)
        call("DEL", 2)
        call("ADD", 6)
        for i in (0, 1, 3, 4, 6):
            call("DEL", i)
        runs[mode] = (log, reservations(data))
    assert runs["in-process"] == runs["exec"]
    log = runs["exec"][0]
    assert [code for _c, _i, code, _o in log] == [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    assert runs["exec"][1] == {}


@pytest.mark.kernel
@pytest.mark.frozen
def test_frozen_build_runs_its_own_host_local_in_process(bin_dir, make_netns, tmp_path):
    """The installed build: our host-local in CNI_PATH runs in-process, SKB_IPAM_EXEC=1 execs it, a
    foreign host-local earlier in CNI_PATH is exec'd; all three give the same result."""
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.symlink(os.path.join(GO_BIN_DIR, "host-local"), str(foreign / "host-local"))
    cases = [("in-process", bin_dir, {}),
             ("exec " + os.path.join(bin_dir, "host-local"), bin_dir, {"SKB_IPAM_EXEC": "1"}),
             ("exec " + str(foreign / "host-local"), f"{foreign}:{bin_dir}", {})]
    results = []
    for i, (how, cni_path, env) in enumerate(cases):
        data = str(tmp_path / f"d{i}")
        ptp = Ptp(os.path.join(bin_dir, "ptp"), cni_path, extra_env=dict(env, SKB_IPAM_TRACE="1"))
        ns = make_netns()
        conf = ptp_conf(data)
        r = ptp.add(conf, nspath(ns))
        assert r.rc == 0, r
        assert f"skb-cni: IPAM ADD host-local: {how}" in r.stderr, r.stderr
        results.append(_strip(r.json))
        d = ptp.delete(conf, nspath(ns))
        assert d.rc == 0 and f"skb-cni: IPAM DEL host-local: {how}" in d.stderr, d
        assert reservations(data) == {}
    assert results[0] == results[1] == results[2]
