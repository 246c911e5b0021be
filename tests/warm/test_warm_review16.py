"""Review 16: servers for contexts a caller makes per call. A caller that puts each call in a session of its
own (Go's SysProcAttr.Setsid), or in an IPC or UTS namespace of its own (unshare), or in a cgroup of its
own, made a new context per call: each first call started a server there that never served (its key never
came back), stayed the 10 idle minutes (the cgroup could not be removed, the namespaces lived on), and 16
of them kept every other context from a server. A server now leaves at start when the caller that started
it was alone in its cgroup, session or namespaces, and at its lifecycle checks when no process but servers
is left in them."""
import os
import subprocess

import pytest

from tests.helpers import cni_env
from tests.warm.support import COLD, server_logs, servers, wait_for


def _calls(wbin, n, argv_prefix=(), session=False):
    """``n`` VERSION calls, each made the way given, warm and exec'd: the same answers."""
    argv = [*argv_prefix, os.path.join(wbin, "loopback")]
    for _ in range(n):
        w = subprocess.run(argv, env=cni_env("VERSION"), capture_output=True, start_new_session=session)
        c = subprocess.run(argv, env=cni_env("VERSION", **COLD), capture_output=True, start_new_session=session)
        assert (w.returncode, w.stdout, w.stderr) == (c.returncode, c.stdout, c.stderr) and w.returncode == 0, w


@pytest.mark.parametrize("how, where", [
    ({"argv_prefix": ["unshare", "--time", "--fork"]}, "time namespace"),
    ({"session": True}, "session"),
    ({"argv_prefix": ["unshare", "--ipc"]}, "IPC namespace"),
    ({"argv_prefix": ["unshare", "--uts"]}, "UTS namespace"),
])
def test_a_context_made_per_call_keeps_no_server(wbin, how, where):
    if how.get("argv_prefix") and subprocess.run([*how["argv_prefix"], "true"], capture_output=True).returncode:
        pytest.skip(f"{' '.join(how['argv_prefix'])} is not possible here")
    before = {s["pid"] for s in servers(wbin)}
    seen = server_logs().count(f"its first caller was alone in its {where}")
    _calls(wbin, 6, **how)
    wait_for(lambda: server_logs().count(f"its first caller was alone in its {where}") > seen,
             f"a server started for a per-call {where} to leave")
    # none of them stays: only the servers there were before (this test's own context's)
    wait_for(lambda: {s["pid"] for s in servers(wbin)} <= before, "no server but the earlier ones")
