"""Fixtures of the end-to-end tests: our installed frozen suite driven by real runtimes (podman, ctr,
containerd's CRI plugin) inside a throwaway sandbox per test (see tests/e2e/sandbox.py).

The runtimes, runc, busybox-static and catatonit come from Debian's packages (``make deps``); the CRI
stubs and grpcio from PyPI (pyproject's ``test`` extra). A test whose tool is missing is skipped, naming
it and the fix. Each test must finish within RUNTIME_TEST_BUDGET seconds.
"""
import os
import shutil
import time

import pytest

from tests.e2e import images
from tests.e2e.sandbox import Sandbox

RUNTIME_TEST_BUDGET = 60.0


def require(*tools):
    missing = [t for t in tools if not shutil.which(t, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (make deps installs the e2e packages)")


def require_cni(podman):
    """Skip, with podman's own reason, when this podman cannot run CNI plugins (see Podman.cni_unsupported)."""
    reason = podman.cni_unsupported()
    if reason:
        pytest.skip(reason)
    return podman


@pytest.fixture(scope="session")
def suite_dir():
    path = os.environ.get("SKB_BIN_DIR")
    if not path:
        pytest.skip("needs the frozen build installed: set SKB_BIN_DIR (make test does)")
    return path


@pytest.fixture(scope="session")
def image_archives(tmp_path_factory):
    """{"busybox": path, "pause": path}: OCI archives built once per session, under /tmp (visible inside
    every sandbox: /tmp is not one of its private mounts)."""
    require("busybox", "catatonit")
    d = tmp_path_factory.mktemp("e2e-images")
    return {"busybox": images.busybox(str(d / "busybox.tar")), "pause": images.pause(str(d / "pause.tar"))}


@pytest.fixture
def sandbox(suite_dir):
    require("unshare", "nsenter", "catatonit")
    sb = Sandbox(binds={"/opt/cni/bin": suite_dir})
    sb.start()
    try:
        yield sb
        # Warm start is on, as in a default install: the runtime's calls are served by a warm server
        # (docs/WARM.md). Its figures, for the log: calls served and refused by reason.
        status = sb.run(["/opt/cni/bin/skb", "warm", "status", "--json"], check=False)
        print(f"\nwarm start in the sandbox: {status.stdout.strip()}")
    finally:
        sb.stop()


@pytest.fixture(autouse=True)
def _within_budget(request):
    start = time.monotonic()
    yield
    took = time.monotonic() - start
    print(f"\n{request.node.nodeid}: {took:.1f}s")
    assert took < RUNTIME_TEST_BUDGET, f"an end-to-end test must take under {RUNTIME_TEST_BUDGET:.0f}s, took {took:.1f}s"
