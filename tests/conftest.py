import os
import subprocess
import uuid

import pytest

from tests.helpers import GO_BIN_DIR, in_sandbox, link_flags, source_bin_dir

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
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture(autouse=True)
def _sandbox_host_lo_stays_up(request):
    """Every kernel test must leave the sandbox host's lo UP: it stands for the node's own lo."""
    yield
    if SANDBOXED and "kernel" in request.keywords:
        assert "UP" in link_flags("lo"), "the sandbox host's lo was set DOWN by this test"
