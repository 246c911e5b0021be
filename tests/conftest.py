import json
import os
import subprocess
import uuid

import pytest

from tests.helpers import GO_BIN_DIR, in_sandbox, ip_json, link_flags, source_bin_dir

SANDBOXED = in_sandbox()


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SKB_SANDBOX") == "1" and not SANDBOXED:
        raise pytest.UsageError("SKB_SANDBOX=1 but this process shares PID 1's netns: refusing to run")
    refuse = pytest.mark.skip(reason="kernel test refused outside a sandbox netns: run it through tests/sandbox "
                                     "(make test does)")
    no_frozen = pytest.mark.skip(reason="needs the frozen build: set SKB_BIN_DIR (make test does)")
    no_go = pytest.mark.skip(reason=f"needs the Go reference plugins in {GO_BIN_DIR}")
    for item in items:
        if "kernel" in item.keywords and not SANDBOXED:
            item.add_marker(refuse)
        if "frozen" in item.keywords and not os.environ.get("SKB_BIN_DIR"):
            item.add_marker(no_frozen)
        if "gobin" in item.keywords and not os.path.isdir(GO_BIN_DIR):
            item.add_marker(no_go)


@pytest.fixture(scope="session")
def bin_dir(tmp_path_factory):
    """Where our plugins are: the frozen install when SKB_BIN_DIR is set, else wrappers over the source."""
    frozen = os.environ.get("SKB_BIN_DIR")
    return frozen if frozen else source_bin_dir(str(tmp_path_factory.mktemp("srcbin")))


@pytest.fixture
def make_netns(request):
    """Factory for named network namespaces (``/run/netns/<name>``, a tmpfs inside the sandbox);
    every one made is deleted at the end of the test."""
    if not SANDBOXED:
        pytest.skip("netns creation refused outside the sandbox")
    made = []

    def make(prefix="skbt"):
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        subprocess.run(["ip", "netns", "add", name], check=True)
        made.append(name)
        return name

    yield make
    for name in made:
        # The kernel destroys a deleted netns asynchronously, and a veth's host end (with the routes and
        # addresses on it) lingers until then: delete its links first, so the next test starts clean.
        try:
            links = ip_json("link", "show", netns=name)
        except subprocess.CalledProcessError:
            links = []
        for link in links:
            if link["ifname"] != "lo":
                subprocess.run(["ip", "-n", name, "link", "del", "dev", link["ifname"]], check=False,
                               capture_output=True)
        subprocess.run(["ip", "netns", "del", name], check=False)


def _host_state():
    """What a kernel test may not leave behind in the sandbox host's netns (it stands for the node)."""
    links = {link["ifname"] for link in ip_json("link", "show")}
    routes = {json.dumps(r, sort_keys=True) for fam in ("-4", "-6") for r in ip_json(fam, "route", "show", "table", "all")
              if r.get("protocol") != "kernel" and r.get("type") not in ("local", "multicast", "broadcast")}
    addrs = {f"{a['local']}/{a['prefixlen']}" for link in ip_json("addr", "show") for a in link.get("addr_info", [])}
    netns = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    return {"links": links, "routes": routes, "addresses": addrs, "named netns": netns}


@pytest.fixture(autouse=True)
def _sandbox_host_left_as_found(request):
    """Every kernel test must leave the sandbox host as it found it: lo UP (it stands for the node's own
    lo), and no link, route, address or named netns of its own left behind (later tests would trip on
    them, as a node would)."""
    if not (SANDBOXED and "kernel" in request.keywords):
        yield
        return
    before = _host_state()
    yield
    assert "UP" in link_flags("lo"), "the sandbox host's lo was set DOWN by this test"
    after = _host_state()
    leaks = {k: sorted(after[k] - before[k]) for k in after if after[k] - before[k]}
    if leaks:
        for name in leaks.get("named netns", []):
            subprocess.run(["ip", "netns", "del", name], check=False)
        for name in leaks.get("links", []):
            subprocess.run(["ip", "link", "del", name], check=False)
        pytest.fail(f"this test left state in the sandbox host's netns: {leaks}")
