"""skb.tool.libcni in-process: conf dir loading, stdin building, chaining, the cache and GC, against libcni's
documented behaviour (cni-spec.md §2.4-2.5, §3.9-3.11, §4.3, §5), with a scripted executor."""
import base64
import json
import os

import pytest

from skb.tool import libcni
from skb.cni.errors import CNIError
from skb.tool.libcni import LibcniError


def write(d, name, obj):
    path = os.path.join(str(d), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj))
    return path


def clist(name="net", version="1.0.0", plugins=None, **extra):
    c = {"cniVersion": version, "name": name, "plugins": plugins if plugins is not None else [{"type": "a"}]}
    c.update(extra)
    return c


# ---------------------------------------------------------------------------------------------------
# loading (§5.1)

def test_conf_files_exact_extensions_sorted_no_dirs(tmp_path):
    for name in ["b.conflist", "a.conflist", "c.conflist.bak", "d.CONFLIST", ".conflist", "x.conf", "y.json"]:
        write(tmp_path, name, "{}")
    os.mkdir(tmp_path / "dir.conflist")
    found = [os.path.basename(p) for p in libcni.conf_files(str(tmp_path), (".conflist",))]
    assert sorted(found) == [".conflist", "a.conflist", "b.conflist"]
    assert libcni.conf_files(str(tmp_path / "missing"), (".conflist",)) == []


def test_conflist_files_are_searched_before_conf_files(tmp_path):
    write(tmp_path, "00-net.conf", {"cniVersion": "0.3.1", "name": "net", "type": "single"})
    write(tmp_path, "99-net.conflist", clist(plugins=[{"type": "listed"}]))
    n = libcni.load_network(str(tmp_path), "net")
    assert [p.type for p in n.plugins] == ["listed"] and n.source.endswith("99-net.conflist")


def test_first_file_with_the_name_wins(tmp_path):
    write(tmp_path, "20-x.conflist", clist(plugins=[{"type": "second"}]))
    write(tmp_path, "10-x.conflist", clist(plugins=[{"type": "first"}]))
    assert libcni.load_network(str(tmp_path), "net").plugins[0].type == "first"


def test_a_broken_file_aborts_every_lookup(tmp_path):
    write(tmp_path, "10-good.conflist", clist(name="good"))
    write(tmp_path, "05-bad.conflist", '{"cniVersion": "1.0.0",\n "name": "bad",\n "plugins": [],}')
    with pytest.raises(LibcniError) as e:
        libcni.load_network(str(tmp_path), "good")
    assert str(e.value).startswith("error parsing configuration list: trailing comma")
    assert "line 3" in str(e.value)


def test_not_found_messages(tmp_path):
    with pytest.raises(libcni.NoConfigsFound, match=f"^no net configurations found in {tmp_path}$"):
        libcni.load_network(str(tmp_path), "x")
    write(tmp_path, "a.conflist", clist(name="other"))
    with pytest.raises(libcni.NotFound, match=f'^no net configuration with name "x" in {tmp_path}$'):
        libcni.load_network(str(tmp_path), "x")
    write(tmp_path, "b.conf", {"name": "other2", "type": "t"})
    with pytest.raises(libcni.NotFound):
        libcni.load_network(str(tmp_path), "x")


def test_single_conf_is_up_converted_to_a_list(tmp_path):
    single = {"cniVersion": "0.3.1", "name": "old", "type": "bridge", "ipam": {"type": "host-local"}}
    write(tmp_path, "10-old.json", single)
    n = libcni.load_network(str(tmp_path), "old")
    assert (n.name, n.cni_version, len(n.plugins)) == ("old", "0.3.1", 1)
    assert n.plugins[0].raw == single and n.plugins[0].ipam_type == "host-local"
    # what gets cached is libcni's re-encoding of the list: Go map order, compact
    assert n.bytes == (b'{"cniVersion":"0.3.1","name":"old","plugins":[{"cniVersion":"0.3.1",'
                       b'"ipam":{"type":"host-local"},"name":"old","type":"bridge"}]}')
    assert n.plugins[0].description() == 'type="bridge" name="old"'


def test_single_conf_without_type(tmp_path):
    write(tmp_path, "10-x.conf", clist(name="x"))   # a conflist in a .conf file
    with pytest.raises(LibcniError, match="^error parsing configuration: missing 'type'$"):
        libcni.load_network(str(tmp_path), "x")


@pytest.mark.parametrize("obj,msg", [
    ({"cniVersion": "1.0.0", "plugins": [{"type": "a"}]}, "error parsing configuration list: no name"),
    ({"name": 5, "plugins": []}, "error parsing configuration list: invalid name type float64"),
    ({"name": "n", "cniVersion": 1, "plugins": []}, "error parsing configuration list: invalid cniVersion type float64"),
    ({"name": "n", "cniVersions": "1.0.0"}, "error parsing configuration list: invalid type for cniVersions"),
    ({"name": "n", "cniVersions": [1]}, "error parsing configuration list: invalid type for cniVersions index 0: float64"),
    ({"name": "n", "cniVersions": ["x.y"]}, "error parsing configuration list: invalid cniVersions entry x.y at index 0"),
    ({"name": "n", "disableCheck": 1, "plugins": [{"type": "a"}]},
     "error parsing configuration list: invalid type float64 for disableCheck"),
    ({"name": "n", "disableGC": "yes", "plugins": [{"type": "a"}]},
     'error parsing configuration list: invalid value "yes" for disableGC'),
    ({"name": "n", "loadOnlyInlinedPlugins": True},
     "error parsing configuration list: `loadOnlyInlinedPlugins` is true, and no 'plugins' key"),
    ({"name": "n", "plugins": {}}, "error parsing configuration list: invalid 'plugins' type map[string]interface {}"),
    ({"name": "n", "plugins": []}, "error parsing configuration list: no plugins in list"),
    ({"name": "n", "plugins": [{"type": "a"}, {"ipam": {}}]},
     "failed to parse plugin config 1: error parsing configuration: missing 'type'"),
    ({"name": "n", "plugins": [{"type": 3}]}, "failed to parse plugin config 0: error parsing configuration: json: "
                                              "cannot unmarshal number into Go struct field PluginConf.type of type string"),
    ([1], "error parsing configuration list: json: cannot unmarshal array into Go value of type map[string]interface {}"),
])
def test_conflist_errors_are_libcnis(obj, msg):
    with pytest.raises(LibcniError) as e:
        libcni.conflist_from_bytes(json.dumps(obj).encode())
    assert str(e.value).startswith(msg), str(e.value)


def test_cni_versions_picks_the_highest_known():
    n = libcni.conflist_from_bytes(json.dumps(clist(version="0.3.1", cniVersions=["0.4.0", "1.0.0", "2.0.0"])))
    assert n.cni_version == "1.0.0"
    n = libcni.conflist_from_bytes(json.dumps({"name": "n", "cniVersions": ["9.0.0"], "plugins": [{"type": "a"}]}))
    assert n.cni_version == ""


def test_bool_flags_accept_strings():
    n = libcni.conflist_from_bytes(json.dumps(clist(disableCheck="TRUE", disableGC=False)))
    assert (n.disable_check, n.disable_gc) == (True, False)


def test_conflist_without_plugins_takes_them_from_the_subdirectory(tmp_path):
    write(tmp_path, "10-n.conflist", {"cniVersion": "1.1.0", "name": "n"})
    with pytest.raises(LibcniError, match="^no plugin configs found$"):
        libcni.load_network(str(tmp_path), "n")
    write(tmp_path, "n/20-b.conf", {"type": "b"})
    write(tmp_path, "n/10-a.conf", {"type": "a"})
    write(tmp_path, "n/30-c.json", {"type": "ignored"})
    assert [p.type for p in libcni.load_network(str(tmp_path), "n").plugins] == ["a", "b"]
    write(tmp_path, "11-m.conflist", clist(name="m", plugins=[{"type": "inline"}], loadOnlyInlinedPlugins=True))
    write(tmp_path, "m/10-x.conf", {"type": "x"})
    assert [p.type for p in libcni.load_network(str(tmp_path), "m").plugins] == ["inline"]


def test_default_network_files_are_containerds_order(tmp_path):
    for name in ["20-b.conflist", "10-a.conf", "15-c.json", "05-z.txt"]:
        write(tmp_path, name, "{}")
    assert [os.path.basename(p) for p in libcni.default_network_files(str(tmp_path))] == \
        ["10-a.conf", "15-c.json", "20-b.conflist"]


# ---------------------------------------------------------------------------------------------------
# finding plugins (§5.3)

def test_find_in_path(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "dir-plugin").mkdir()
    write(b, "dir-plugin", "")
    write(b, "noexec", "")
    write(a, "p", "")
    write(b, "p", "")
    assert libcni.find_in_path("p", [str(a), str(b)]) == str(a / "p")
    assert libcni.find_in_path("dir-plugin", [str(a), str(b)]) == str(b / "dir-plugin")
    assert libcni.find_in_path("noexec", [str(b)]) == str(b / "noexec")   # the execute bit is not checked
    for plugin, paths, msg in [("", ["/x"], "no plugin name provided"), ("a/b", ["/x"], "invalid plugin name: a/b"),
                               ("p", [], "no paths provided"),
                               ("q", [str(a), str(b)], f'failed to find plugin "q" in path [{a} {b}]')]:
        with pytest.raises(LibcniError) as e:
            libcni.find_in_path(plugin, paths)
        assert str(e.value) == msg


# ---------------------------------------------------------------------------------------------------
# a scripted executor

class FakeExec:
    """Records each call; answers from ``script[(command, type)]``: bytes for stdout, or a CNIError."""

    def __init__(self, script=None):
        self.script = script or {}
        self.calls = []

    def find_in_path(self, plugin, paths):
        if plugin == "missing":
            raise LibcniError(f'failed to find plugin "{plugin}" in path [{" ".join(paths)}]')
        return f"/fake/{plugin}"

    def exec_plugin(self, path, stdin, environ):
        ptype = path.rsplit("/", 1)[-1]
        command = environ["CNI_COMMAND"]
        self.calls.append((command, ptype, json.loads(stdin), {k: v for k, v in environ.items() if k.startswith("CNI_")}))
        answer = self.script.get((command, ptype), b"")
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            return answer(json.loads(stdin))
        return answer


def runner(tmp_path, script=None):
    return libcni.CNIConfig(["/opt/cni/bin", "/usr/lib/cni"], str(tmp_path / "cache"), FakeExec(script))


RT = libcni.RuntimeConf("ctr1", "/run/netns/x", "eth0", [("IgnoreUnknown", "1"), ("K8S_POD_NAME", "p")],
                        {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}], "mac": "m"})
IPAM_RESULT = b'{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.2/24","gateway":"10.1.0.1"}]}'


def net(version="1.0.0", plugins=None, **extra):
    plugins = plugins or [{"type": "main", "ipam": {"type": "host-local"}},
                          {"type": "portmap", "capabilities": {"portMappings": True, "bandwidth": True}},
                          {"type": "tail", "name": "own", "cniVersion": "0.1.0"}]
    return libcni.conflist_from_bytes(json.dumps(clist(version=version, plugins=plugins, **extra)))


def test_add_chains_results_and_caches_the_last(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): IPAM_RESULT,
                            ("ADD", "portmap"): lambda conf: json.dumps(conf["prevResult"]).encode(),
                            ("ADD", "tail"): b'{"ips":[{"address":"10.1.0.2/24"}]}'})   # no cniVersion: the config's
    n = net()
    res = cni.add_list(n, RT)
    calls = cni.exec.calls
    assert [(c[0], c[1]) for c in calls] == [("ADD", "main"), ("ADD", "portmap"), ("ADD", "tail")]
    first, second, third = (c[2] for c in calls)
    assert "prevResult" not in first and first["name"] == "net" and first["cniVersion"] == "1.0.0"
    assert second["prevResult"] == json.loads(IPAM_RESULT)
    assert second["runtimeConfig"] == {"portMappings": RT.capability_args["portMappings"]}   # only its capability
    assert second["capabilities"] == {"portMappings": True, "bandwidth": True}                # not stripped
    assert third["name"] == "net" and third["cniVersion"] == "1.0.0"                          # overwritten
    env = calls[0][3]
    assert env == {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "ctr1", "CNI_NETNS": "/run/netns/x",
                   "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=p", "CNI_IFNAME": "eth0",
                   "CNI_PATH": "/opt/cni/bin:/usr/lib/cni"}
    assert libcni.result_dict(res) == {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.2/24"}]}
    path = tmp_path / "cache" / "results" / "net-ctr1-eth0"
    raw = path.read_text()
    rec = json.loads(raw)
    assert list(rec) == ["kind", "containerId", "config", "ifName", "networkName", "netns", "cniArgs",
                         "capabilityArgs", "result"]
    assert rec["kind"] == "cniCacheV1" and base64.b64decode(rec["config"]) == n.bytes
    assert rec["cniArgs"] == [["IgnoreUnknown", "1"], ["K8S_POD_NAME", "p"]]
    assert rec["result"] == {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.2/24"}]}
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "cache" / "results").stat().st_mode & 0o777) == "0o700"


def test_stdin_keys_are_sorted_as_gos_map_encoding(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): IPAM_RESULT})
    cni.add_list(net(plugins=[{"type": "main", "zeta": 1, "alpha": {"b": 1, "a": 2}}]), RT)
    stdin = cni.exec.calls[0][2]
    assert list(stdin) == sorted(stdin) and list(stdin["alpha"]) == ["a", "b"]


def test_static_runtime_config_passes_when_no_capability_matches(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): IPAM_RESULT})
    cni.add_list(net(plugins=[{"type": "main", "capabilities": {"ips": True, "mac": False},
                               "runtimeConfig": {"static": 1}}]), RT)
    assert cni.exec.calls[0][2]["runtimeConfig"] == {"static": 1}


def test_add_validates_before_running(tmp_path):
    cni = runner(tmp_path)
    for rt, msg in [(libcni.RuntimeConf("", "/x", "eth0"), "missing containerID"),
                    (libcni.RuntimeConf("bad id", "/x", "eth0"), "invalid characters in containerID; bad id"),
                    (libcni.RuntimeConf("c", "/x", "a" * 16), "interface name is too long")]:
        with pytest.raises(LibcniError) as e:
            cni.add_list(net(), rt)
        assert str(e.value).startswith(f'plugin type="main" failed (add): {msg}'), str(e.value)
    assert cni.exec.calls == []


def test_add_failure_names_the_plugin_and_keeps_its_error(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): IPAM_RESULT, ("ADD", "portmap"): CNIError(7, "bad", "port 0")})
    with pytest.raises(LibcniError) as e:
        cni.add_list(net(), RT)
    assert str(e.value) == 'plugin type="portmap" failed (add): bad; port 0'
    assert e.value.cni_error().code == 7
    assert not (tmp_path / "cache" / "results").exists()   # nothing cached after a failed ADD


@pytest.mark.parametrize("stdout,msg", [
    (b"", "failed to unmarshal raw result: unexpected end of JSON input"),
    (b'{"cniVersion":"7.0.0"}', 'unsupported CNI result version "7.0.0"'),
    (b"[]", "failed to unmarshal raw result"),
])
def test_bad_add_output(tmp_path, stdout, msg):
    cni = runner(tmp_path, {("ADD", "main"): stdout})
    with pytest.raises(LibcniError, match=msg):
        cni.add_list(net(plugins=[{"type": "main"}]), RT)


def test_null_result_is_an_empty_one(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): b"null"})
    res = cni.add_list(net(plugins=[{"type": "main"}]), RT)
    assert libcni.result_dict(res) == {"cniVersion": "1.0.0"}


def test_del_runs_in_reverse_with_the_cached_result(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): IPAM_RESULT, ("ADD", "portmap"): IPAM_RESULT,
                            ("ADD", "tail"): IPAM_RESULT})
    n = net()
    cni.add_list(n, RT)
    cni.exec.calls.clear()
    cni.del_list(n, RT)
    assert [c[1] for c in cni.exec.calls] == ["tail", "portmap", "main"]
    assert all(c[2]["prevResult"] == json.loads(IPAM_RESULT) for c in cni.exec.calls)
    assert not (tmp_path / "cache" / "results" / "net-ctr1-eth0").exists()
    cni.exec.calls.clear()
    cni.del_list(n, RT)    # again: no cache, no prevResult, still fine
    assert all("prevResult" not in c[2] for c in cni.exec.calls)


def test_del_converts_the_cached_result_to_the_list_version(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): IPAM_RESULT})
    cni.add_list(net(plugins=[{"type": "main"}]), RT)
    cni.exec.calls.clear()
    cni.del_list(net("0.4.0", plugins=[{"type": "main"}]), RT)   # the config changed while it ran
    assert cni.exec.calls[0][2]["prevResult"] == {"cniVersion": "0.4.0", "dns": {}, "ips": [
        {"address": "10.1.0.2/24", "gateway": "10.1.0.1", "version": "4"}]}


def test_del_below_0_4_0_gets_no_prev_result(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): b'{"cniVersion":"0.3.1","ips":[{"address":"10.1.0.2/24"}]}'})
    n = net("0.3.1", plugins=[{"type": "main"}])
    cni.add_list(n, RT)
    cni.exec.calls.clear()
    cni.del_list(n, RT)
    assert "prevResult" not in cni.exec.calls[0][2]


def test_del_with_a_corrupt_cache_drops_it_and_proceeds(tmp_path):
    cni = runner(tmp_path)
    path = tmp_path / "cache" / "results" / "net-ctr1-eth0"
    path.parent.mkdir(parents=True)
    path.write_text('{"kind":"cniCacheV1","result":{"cniVersion":"1.0.0","ips":[{"address":"nonsense"}]}}')
    cni.del_list(net(plugins=[{"type": "main"}]), RT)
    assert "prevResult" not in cni.exec.calls[0][2] and not path.exists()


def test_legacy_cache_file_is_a_bare_result(tmp_path):
    cni = runner(tmp_path)
    path = tmp_path / "cache" / "results" / "net-ctr1-eth0"
    path.parent.mkdir(parents=True)
    path.write_bytes(IPAM_RESULT)
    cni.check_list(net(plugins=[{"type": "main"}]), RT)
    assert cni.exec.calls[0][2]["prevResult"] == json.loads(IPAM_RESULT)


def test_del_error_names_the_plugin(tmp_path):
    cni = runner(tmp_path, {("DEL", "portmap"): CNIError(11, "try again")})
    with pytest.raises(LibcniError, match='^plugin type="portmap" failed \\(delete\\): try again$'):
        cni.del_list(net(), RT)
    assert [c[1] for c in cni.exec.calls] == ["tail", "portmap"]   # stops at the first error


def test_check(tmp_path):
    cni = runner(tmp_path)
    with pytest.raises(LibcniError, match='^configuration version "0.3.1" does not support the CHECK command$'):
        cni.check_list(net("0.3.1"), RT)
    cni.check_list(net(disableCheck=True), RT)
    assert cni.exec.calls == []
    cni.check_list(net(), RT)
    assert [c[1] for c in cni.exec.calls] == ["main", "portmap", "tail"]
    cni = runner(tmp_path, {("CHECK", "main"): CNIError(999, "gone")})
    with pytest.raises(CNIError):   # CHECK errors come back unwrapped, as in libcni
        cni.check_list(net(), RT)


def test_status(tmp_path):
    cni = runner(tmp_path)
    cni.status_list(net("1.0.0"))
    assert cni.exec.calls == []
    cni = runner(tmp_path, {("STATUS", "portmap"): CNIError(50, "not ready")})
    with pytest.raises(CNIError, match="not ready"):
        cni.status_list(net("1.1.0"))
    assert [c[1] for c in cni.exec.calls] == ["main", "portmap"]
    stdin, env = cni.exec.calls[0][2], cni.exec.calls[0][3]
    assert stdin["name"] == "net" and stdin["cniVersion"] == "1.1.0" and "runtimeConfig" not in stdin
    assert (env["CNI_CONTAINERID"], env["CNI_NETNS"], env["CNI_IFNAME"], env["CNI_ARGS"]) == ("", "", "", "")


def _add_some(cni, n):
    for cid in ("c1", "c2", "c3"):
        cni.add_list(n, libcni.RuntimeConf(cid, f"/run/netns/{cid}", "eth0", [("K", cid)]))
    cni.add_list(net("1.1.0", plugins=[{"type": "main"}], name="other"), libcni.RuntimeConf("c9", "/n", "eth0"))
    cni.exec.calls.clear()


def test_gc_like_cnitool_collects_every_cached_attachment(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): IPAM_RESULT})
    n = net("1.1.0", plugins=[{"type": "main"}])
    _add_some(cni, n)
    assert cni.gc_list(n) == []
    dels = [c for c in cni.exec.calls if c[0] == "DEL"]
    assert [c[3]["CNI_CONTAINERID"] for c in dels] == ["c1", "c2", "c3"]
    assert dels[0][3]["CNI_ARGS"] == "K=c1" and dels[0][3]["CNI_NETNS"] == "/run/netns/c1"  # from the cache
    gc = [c for c in cni.exec.calls if c[0] == "GC"]
    assert len(gc) == 1 and "cni.dev/valid-attachments" not in gc[0][2] and "cni.dev/attachments" not in gc[0][2]
    assert sorted(os.listdir(tmp_path / "cache" / "results")) == ["other-c9-eth0"]


def test_gc_with_a_valid_list_sends_both_keys(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): IPAM_RESULT, ("ADD", "second"): IPAM_RESULT})
    n = net("1.1.0", plugins=[{"type": "main"}, {"type": "second"}])
    _add_some(cni, n)
    assert cni.gc_list(n, [("c2", "eth0")]) == []
    assert [c[3]["CNI_CONTAINERID"] for c in cni.exec.calls if c[0] == "DEL" and c[1] == "main"] == ["c1", "c3"]
    gc = [c for c in cni.exec.calls if c[0] == "GC"]
    assert [c[1] for c in gc] == ["main", "second"]
    want = [{"containerID": "c2", "ifname": "eth0"}]
    assert gc[0][2]["cni.dev/valid-attachments"] == want and gc[0][2]["cni.dev/attachments"] == want


def test_gc_continues_after_errors_and_reports_them_all(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): IPAM_RESULT, ("DEL", "main"): CNIError(11, "busy"),
                            ("GC", "main"): CNIError(999, "gc broke")})
    n = net("1.1.0", plugins=[{"type": "missing"}, {"type": "main"}])
    cni.add_list(net("1.1.0", plugins=[{"type": "main"}]), libcni.RuntimeConf("c1", "/n", "eth0"))
    errors = [str(e) for e in cni.gc_list(n, [])]
    assert errors == ['failed to delete stale attachment c1 eth0: plugin type="main" failed (delete): busy',
                      'failed to GC plugin missing: failed to find plugin "missing" in path [/opt/cni/bin /usr/lib/cni]',
                      "failed to GC plugin main: gc broke"]


def test_gc_below_1_1_0_only_dels_and_disable_gc_does_nothing(tmp_path):
    cni = runner(tmp_path, {("ADD", "main"): IPAM_RESULT})
    n = net("1.0.0", plugins=[{"type": "main"}])
    cni.add_list(n, libcni.RuntimeConf("c1", "/n", "eth0"))
    cni.exec.calls.clear()
    cni.gc_list(net("1.0.0", plugins=[{"type": "main"}], disableGC=True))
    assert cni.exec.calls == []
    cni.gc_list(n)
    assert [c[0] for c in cni.exec.calls] == ["DEL"]


def test_cached_attachments_filters_like_libcni(tmp_path):
    cni = runner(tmp_path)
    d = tmp_path / "cache" / "results"
    d.mkdir(parents=True)
    (d / "n-c1-eth0").write_text(json.dumps({"kind": "cniCacheV1", "containerId": "c1", "ifName": "eth0",
                                             "networkName": "n", "config": base64.b64encode(b"{}").decode()}))
    (d / "n-c2-eth0").write_text(json.dumps({"kind": "cniCacheV1", "containerId": "c2", "ifName": "",
                                             "networkName": "n"}))
    (d / "n-c3-eth0").write_text("not json")
    (d / "n-c4-eth0").write_text(json.dumps({"kind": "other", "containerId": "c4", "ifName": "eth0",
                                             "networkName": "n"}))
    assert [(a.container_id, a.config) for a in cni.cached_attachments()] == [("c1", b"{}")]
    assert cni.cached_attachments("c1")[0].network == "n" and cni.cached_attachments("c9") == []


def test_version_info(tmp_path):
    cni = runner(tmp_path, {("VERSION", "p"): b'{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}'})
    assert cni.version_info("p") == ["0.4.0", "1.0.0"]
    _, _, stdin, env = cni.exec.calls[0]
    assert stdin == {"cniVersion": "1.1.0"}
    assert (env["CNI_NETNS"], env["CNI_IFNAME"], env["CNI_PATH"], env["CNI_CONTAINERID"]) == ("dummy", "dummy",
                                                                                               "dummy", "")
    with pytest.raises(LibcniError, match='^plugin p does not support config version "1.1.0"$'):
        cni.validate_plugin("p", "1.1.0")
    cni = runner(tmp_path, {("VERSION", "old"): CNIError(4, "unknown CNI_COMMAND: VERSION")})
    assert cni.version_info("old") == ["0.1.0"]


@pytest.mark.parametrize("stdout,expect", [
    (b'{"cniVersion":"0.2.0"}', ["0.1.0", "0.2.0"]),
    (b'{"supportedVersions":["1.0.0"]}', "decoding version info: missing field cniVersion"),
    (b'{"cniVersion":"1.0.0"}', "decoding version info: missing field supportedVersions"),
    (b"nope", "decoding version info"),
])
def test_decode_version_info(stdout, expect):
    if isinstance(expect, list):
        assert libcni.decode_version_info(stdout) == expect
    else:
        with pytest.raises(LibcniError, match=expect):
            libcni.decode_version_info(stdout)


@pytest.mark.parametrize("stdout,stderr,status,msg,code", [
    (b"", b"", "exit status 1", "netplugin failed with no error message: exit status 1", 0),
    (b"", b"boom\n", "exit status 2", 'netplugin failed: "boom\\n": exit status 2', 0),
    (b"oops", b"", "exit status 1", 'netplugin failed but error parsing its diagnostic message "oops": ', 0),
    (b'{"code":7,"msg":"bad","details":"d"}', b"", "exit status 1", "bad", 7),
])
def test_plugin_error_parsing(stdout, stderr, status, msg, code):
    e = libcni.parse_plugin_error(stdout, stderr, status)
    assert e.msg.startswith(msg) and e.code == code


def test_raw_exec_against_a_script(tmp_path):
    script = tmp_path / "plug"
    script.write_text('#!/bin/sh\necho "$CNI_COMMAND" >&2\nif [ "$CNI_COMMAND" = DEL ]; then '
                      'echo \'{"code":11,"msg":"later"}\'; exit 1; fi\ncat\n')
    script.chmod(0o755)
    import io
    err = io.StringIO()
    ex = libcni.RawExec(stderr=err)
    assert ex.exec_plugin(str(script), b"{}", dict(os.environ, CNI_COMMAND="ADD")) == b"{}"
    assert err.getvalue() == "ADD\n"   # stderr of a successful plugin is passed on
    with pytest.raises(CNIError) as e:
        ex.exec_plugin(str(script), b"{}", dict(os.environ, CNI_COMMAND="DEL"))
    assert (e.value.code, e.value.msg) == (11, "later")
    script.chmod(0o644)
    with pytest.raises(CNIError, match="fork/exec .*: permission denied"):
        ex.exec_plugin(str(script), b"{}", dict(os.environ))
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    with pytest.raises(CNIError, match="signal: killed"):
        libcni.RawExec(timeout=0.2).exec_plugin(str(slow), b"", dict(os.environ))


# ---------------------------------------------------------------------------------------------------
# cnitool's conventions (§6)

def test_cnitool_container_id():
    assert libcni.cnitool_container_id("/var/run/netns/cnitest") == "cnitool-20c433bb2b1d6ede56d6"
    assert libcni.cnitool_container_id("/var/run/netns/../netns/cnitest/") == "cnitool-20c433bb2b1d6ede56d6"


def test_cnitool_args_are_strict():
    assert libcni.parse_cnitool_args("A=1;B=x") == [("A", "1"), ("B", "x")]
    for bad, pair in [("A=", "A="), ("=1", "=1"), ("A=1;", ""), ("A=1=2", "A=1=2"), ("A", "A")]:
        with pytest.raises(LibcniError, match=f'^invalid CNI_ARGS pair "{pair}"$'):
            libcni.parse_cnitool_args(bad)


def test_go_marshal():
    assert libcni.go_marshal({"b": 1.0, "a": "<&>\u2028é"}) == b'{"a":"\\u003c\\u0026\\u003e\\u2028\xc3\xa9","b":1}'


def test_a_0_2_0_result_without_address_is_kept_as_go_keeps_it(tmp_path):
    """Go's 0.2 result type holds a result with no ip4/ip6 (what the debug plugin answers alone)."""
    cni = runner(tmp_path, {("ADD", "main"): b'{"cniVersion":"0.2.0","dns":{}}'})
    n = net("0.2.0", plugins=[{"type": "main"}, {"type": "main", "x": 1}])
    res = cni.add_list(n, RT)
    assert libcni.result_dict(res) == {"cniVersion": "0.2.0", "dns": {}}
    assert cni.exec.calls[1][2]["prevResult"] == {"cniVersion": "0.2.0", "dns": {}}
    rec = json.loads((tmp_path / "cache" / "results" / "net-ctr1-eth0").read_text())
    assert rec["result"] == {"cniVersion": "0.2.0", "dns": {}}
