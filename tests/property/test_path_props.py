"""Property: every path-valued key, given any kind of file (FIFO with or without a reader, device,
directory, socket, symlinks good and dangling, relative, NUL, surrogates), ends in a success or one
spec-shaped error naming the key, never a hang, a traceback or a file created outside the temp dir.

In-process: the debug plugin (cniOutput, captureFile, skbDebugLog), skel's SKB_DEBUG_LOG writer and
host-local's resolvConf and dataDir. Each example runs under an alarm: a blocking open fails the test.
"""
import json
import os
import signal
import socket

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from skb.cni import netconf
from skb.cni.errors import CNIError
from skb.plugin import skel
from skb_plugins.debug import debug
from skb_plugins.hostlocal_ipam import config as hcfg

SPEC_CODES = {1, 2, 3, 4, 5, 6, 7, 11}
KINDS = ["regular", "missing", "fifo", "fifo-with-reader", "dev-zero", "dev-null", "dir", "socket", "link-regular",
         "link-dangling", "link-dir", "link-loop", "relative", "nul", "surrogate", "empty", "number", "list"]


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    d = tmp_path_factory.mktemp("paths")
    os.mkfifo(d / "fifo")
    os.mkfifo(d / "fifo2")
    reader = os.open(d / "fifo2", os.O_RDWR | os.O_NONBLOCK)
    (d / "regular").write_text("nameserver 10.0.0.53\n")
    (d / "dir").mkdir()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(d / "sock"))
    (d / "link-regular").symlink_to(d / "regular")
    (d / "link-dangling").symlink_to(d / "gone" / "x")
    (d / "link-dir").symlink_to(d / "dir")
    (d / "loop").symlink_to(d / "loop")
    paths = {"regular": str(d / "regular"), "missing": str(d / "missing"), "fifo": str(d / "fifo"),
             "fifo-with-reader": str(d / "fifo2"), "dev-zero": "/dev/zero", "dev-null": "/dev/null",
             "dir": str(d / "dir"), "socket": str(d / "sock"), "link-regular": str(d / "link-regular"),
             "link-dangling": str(d / "link-dangling"), "link-dir": str(d / "link-dir"),
             "link-loop": str(d / "loop"), "relative": "rel/x", "nul": str(d / "a\0b"),
             "surrogate": str(d / "s\ud800"), "empty": "", "number": 7, "list": [str(d / "regular")]}
    yield d, paths
    os.close(reader)
    s.close()


class Alarm:
    def __enter__(self):
        def hang(*_):
            raise AssertionError("a call blocked for 5 s")
        self.old = signal.signal(signal.SIGALRM, hang)
        signal.alarm(5)

    def __exit__(self, *exc):
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.old)


def check_error(out_json, keys):
    assert out_json["code"] in SPEC_CODES, out_json
    assert any(k in out_json["msg"] for k in keys), out_json


ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0", "CNI_ARGS": "",
       "CNI_PATH": "/x"}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["cniOutput", "captureFile", "skbDebugLog"]), st.sampled_from(KINDS),
                       min_size=1, max_size=3),
       st.sampled_from(["ADD", "DEL", "CHECK", "STATUS", "GC"]))
def test_debug_plugin_record_paths(place, keys, command):
    d, paths = place
    conf = {"cniVersion": "1.1.0", "name": "n", "type": "debug"}
    conf.update({k: paths[v] for k, v in keys.items()})
    with Alarm():
        out, call = debug.run(dict(ENV, CNI_COMMAND=command), json.dumps(conf).encode())
        if out.code == 0:
            skel.write_debug_logs(call.plugin(), ENV, out, 0.0, [("captureFile", debug.capture_path(out))]
                                  if debug.capture_path(out) and call.capture_ok else [])
    assert "Traceback" not in out.stderr, out.stderr
    if out.code:
        check_error(json.loads(out.stdout), list(keys))
        # DEL fails only on a common field of the wrong JSON type (the protocol layer refuses those)
        assert command != "DEL" or keys.get("skbDebugLog") in ("number", "list"), (keys, out.stdout)
    else:
        # a lone surrogate decodes to U+FFFD (as in Go): an ordinary file name
        bad = {k for k, v in keys.items() if v not in ("regular", "missing", "link-regular", "surrogate", "empty")}
        assert not bad or command == "DEL", (keys, out.stdout)
    assert not (d / "gone").exists() and not os.path.exists("rel")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(KINDS))
def test_skb_debug_log_never_blocks_nor_raises(place, kind):
    d, paths = place
    path = paths[kind]
    out = skel.run(skel.Plugin("p", "t", add=None, delete=None, check=None), {"CNI_COMMAND": "VERSION"}, b"")
    with Alarm():
        skel.write_debug_logs(skel.Plugin("p", "t", None, None, None), {"CNI_COMMAND": "VERSION"}, out, 0.0,
                              [("SKB_DEBUG_LOG", path)] if isinstance(path, str) else [])
    assert not (d / "gone").exists()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(KINDS), st.sampled_from(KINDS))
def test_host_local_resolv_conf_and_data_dir(place, resolv, data_dir):
    d, paths = place
    ipam = {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]], "resolvConf": paths[resolv],
            "dataDir": paths[data_dir]}
    raw = {"cniVersion": "1.0.0", "name": "n", "type": "host-local", "ipam": ipam}
    with Alarm():
        try:
            ipc = netconf.load(json.dumps(raw), hcfg.HostLocalConf, "ADD").ipam
            if ipc.resolv_conf:
                dns = hcfg.read_resolv_conf(ipc.resolv_conf)
                if resolv in ("regular", "link-regular"):
                    assert dns["nameservers"] == ["10.0.0.53"]
        except CNIError as e:
            assert e.code in (5, 7) and ("ipam.resolvConf" in e.msg or "ipam.dataDir" in e.msg), e
            return
    assert resolv in ("regular", "link-regular", "empty", "surrogate", "missing") and data_dir not in ("relative", "nul", "number", "list")
