"""bench/pods.py (the CRI pods benchmark) keeps working: a few pods through both variants' containerd,
the figures it reports, and its own leftover check passing. The numbers themselves are not judged here
(benchmarks are measured by `make bench`, never asserted)."""
import json
import os
import signal
import subprocess
import sys

import pytest

from tests.e2e.conftest import require

pytestmark = [pytest.mark.e2e, pytest.mark.kernel, pytest.mark.frozen]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pods_bench_runs_and_leaves_nothing(suite_dir, tmp_path):
    require("containerd", "runc", "containerd-shim-runc-v2", "catatonit")
    pytest.importorskip("cri_api", reason="the CRI stubs come from PyPI's container-runtime-interface-api")
    out = tmp_path / "pods.json"
    cmd = [sys.executable, os.path.join(ROOT, "bench", "pods.py"), "--bin-dir", suite_dir, "-n", "4",
           "--concurrency", "1,2", "--attribution", "2", "--attribution-concurrency", "1,2",
           "--json", str(out)]
    # Its own session; on a timeout it gets SIGTERM first, so that it stops its sandboxed containerds and
    # removes their cgroups (a SIGKILL would leave them), and only then is its group killed.
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        p.terminate()
        try:
            output, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            output, _ = p.communicate()
        pytest.fail(f"bench/pods.py did not finish in 300 s:\n{output}")
    assert p.returncode == 0, output
    data = json.loads(out.read_text())
    assert data["failures"] == [] and data["leftovers"] == {}
    for conc in ("1", "2"):
        for name in ("ours", "go"):
            s = data["levels"][conc][name]
            assert s["pods"] == 4 and 0 < s["setup_p50_ms"] <= s["setup_p99_ms"]
    assert set(data["cni_share"]) == {"ours", "go"}
    assert all(0 < v["setup"] < 1 and 0 < v["teardown"] < 1 for v in data["cni_share"].values())
    for conc in ("1", "2"):
        for name in ("ours", "go"):
            c = data["cni_calls"][conc][name]
            assert c["calls"] >= 4 and 0 < c["ADD_p50_ms"] <= c["ADD_p99_ms"] and 0 < c["DEL_p50_ms"] <= c["DEL_p99_ms"]
    assert [s for s in data["warm"] if s["served"] > 0], "a default install serves the pods' calls warm"
