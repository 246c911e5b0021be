"""Review 16e: inputs that still ended as code 999 (a traceback), or passed where they should not."""
import os

import pytest

from tests.helpers import cni_env, run_plugin
from tests.integration.ptp_support import host_veths, nspath, ptp_conf, snapshot
from tests.integration.test_ptp_ownership import data_dir  # noqa: F401 (fixture)

pytestmark = pytest.mark.kernel


@pytest.mark.parametrize("key", ["addHooks", "delHooks", "checkHooks"])
def test_a_debug_hook_argument_with_a_nul_byte_is_refused_not_a_traceback(bin_dir, make_netns, key):
    """It was code 999 "ValueError: embedded null byte" with a traceback, for DEL too, which never fails."""
    ns = make_netns()
    conf = {"cniVersion": "1.0.0", "name": "d", "type": "debug", key: [["echo", "ok"], ["echo", "a\0b"]]}
    exe = os.path.join(bin_dir, "debug")
    command = {"addHooks": "ADD", "delHooks": "DEL", "checkHooks": "CHECK"}[key]
    if command == "CHECK":
        conf["prevResult"] = {"cniVersion": "1.0.0"}
    r = run_plugin(exe, cni_env(command, netns=nspath(ns)), conf)
    assert "Traceback" not in r.stderr, r
    if command == "DEL":      # (a DEL reads what it can and never fails)
        assert r.rc == 0 and r.stdout == "", r
        assert f"{key}" in r.stderr, r
    else:
        assert r.rc == 1 and r.json["code"] == 7, r
        assert r.json["msg"] == f"invalid field {key}[1][1]: it contains a NUL byte", r


@pytest.mark.parametrize("code", [0, 4294967296, 2 ** 70])
def test_an_injected_error_code_a_runtime_cannot_read_is_refused(bin_dir, code):
    conf = {"cniVersion": "1.0.0", "name": "d", "type": "debug", "inject": {"ADD": {"error": {"code": code}}}}
    r = run_plugin(os.path.join(bin_dir, "debug"), cni_env("ADD", netns="/nonexistent"), conf)
    assert r.rc == 1 and r.json["code"] == 7 and "from 1 to 4294967295" in r.json["msg"], r
    conf["inject"]["ADD"]["error"]["code"] = 4294967295
    r = run_plugin(os.path.join(bin_dir, "debug"), cni_env("ADD", netns="/nonexistent"), conf)
    assert r.rc == 1 and r.json["code"] == 4294967295, r


@pytest.mark.parametrize("ifname", ["eth%d", "e%d%d", "all", "default"])
def test_ptp_refuses_an_ifname_the_kernel_would_not_take_as_it_is(bin_dir, make_netns, data_dir, ifname):
    """Code 999 after IPAM ("link not found": the kernel named the peer eth0; or EINVAL): now code 4,
    before anything is made."""
    ns = make_netns()
    conf = ptp_conf(data_dir)
    before = snapshot(data_dir, [ns], "ptpnet")
    r = run_plugin(os.path.join(bin_dir, "ptp"), cni_env("ADD", netns=nspath(ns), ifname=ifname, path=bin_dir), conf)
    assert r.rc == 1 and r.json["code"] == 4 and r.json["msg"] == f"CNI_IFNAME {ifname!r} cannot be the pod's interface name", r
    assert snapshot(data_dir, [ns], "ptpnet") == before and not host_veths()


@pytest.mark.parametrize("ipam, words", [
    ({"routes": [{"dst": "../../etc"}]}, 'e.g. "0.0.0.0/0"'),
    ({"routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1 "}]}, "write an address alone"),
    ({"gateway": "10.1.0.1 "}, "write an address alone"),
    ({"rangeStart": "10.1.0.x"}, "write an address alone"),
])
def test_host_local_names_the_fix_of_a_value_that_is_no_address(bin_dir, data_dir, ipam, words):
    conf = {"cniVersion": "1.0.0", "name": "n", "type": "host-local",
            "ipam": dict({"type": "host-local", "subnet": "10.1.0.0/24", "dataDir": data_dir}, **ipam)}
    r = run_plugin(os.path.join(bin_dir, "host-local"), cni_env("ADD", netns="/nonexistent"), conf)
    assert r.rc == 1 and r.json["code"] == 7 and words in r.json.get("details", ""), r
