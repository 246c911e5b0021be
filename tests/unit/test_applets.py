"""The multi-call dispatcher: applet selection, and VERSION answered without loading plugin code."""
import json
import subprocess
import sys

from skb.cni.versions import SUPPORTED_VERSIONS

PROBE = """
import os, sys
os.environ["CNI_COMMAND"] = "VERSION"
from skb.applets import main
code = main([{name!r}])
sys.stdout.flush()
loaded = sorted(m for m in sys.modules if m.startswith(("skb", "skb_plugins")))
sys.stderr.write(" ".join(loaded))
sys.exit(code)
"""


def run(name):
    return subprocess.run([sys.executable, "-c", PROBE.format(name=name)], capture_output=True, text=True)


def test_version_reply_without_loading_plugins():
    for name in ("loopback", "ptp", "host-local", "debug"):
        p = run(name)
        assert p.returncode == 0
        assert json.loads(p.stdout) == {"cniVersion": "1.1.0", "supportedVersions": list(SUPPORTED_VERSIONS)}
        assert p.stderr.split() == ["skb", "skb.applets", "skb.cni", "skb.cni.versions"], p.stderr


def test_version_is_logged_when_the_debug_log_is_on(tmp_path):
    log = tmp_path / "log"
    p = subprocess.run([sys.executable, "-c", "import sys; from skb.applets import main; sys.exit(main(['loopback']))"],
                       env={"CNI_COMMAND": "VERSION", "SKB_DEBUG_LOG": str(log)}, capture_output=True, text=True)
    assert p.returncode == 0 and json.loads(p.stdout)["supportedVersions"] == list(SUPPORTED_VERSIONS)
    assert json.loads(log.read_text())["command"] == "VERSION"


def test_unknown_applet_usage(capsys):
    from skb.applets import main
    assert main(["nope"]) == 2
    assert "applets:" in capsys.readouterr().err
