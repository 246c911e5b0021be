"""The warm-start tests' install: one per module (its own bundle path, so its own servers)."""
import json
import os

import pytest

from tests.helpers import cni_env, run_plugin
from tests.warm.support import WARM_DIR, ask, install_copy, pid_gone, stop_servers, the_server, wait_for


@pytest.fixture(scope="module")
def wbin(tmp_path_factory):
    """A private install, with its server running (started by a first call, as on a node)."""
    bindir = install_copy(os.environ["SKB_BIN_DIR"], str(tmp_path_factory.mktemp("warm") / "bin"))
    run_plugin(os.path.join(bindir, "loopback"), cni_env("VERSION"))
    the_server(bindir)
    yield bindir
    stop_servers(bindir)
    for name in os.listdir(WARM_DIR) if os.path.isdir(WARM_DIR) else ():
        if name.endswith(".sock"):  # servers of this install in other contexts (other netns, mount ns)
            st = json.loads(ask(os.path.join(WARM_DIR, name), b"S") or b"{}")
            if st.get("binDir") == bindir:
                ask(os.path.join(WARM_DIR, name), b"Q")
                wait_for(lambda: pid_gone(st["pid"]), "server to end")
