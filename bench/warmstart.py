"""Shared by the benches: warm start (docs/WARM.md) as a default install runs it, and the spread of a sample.

Not a bench itself (``make bench`` runs it too: it only prints the warm-start servers it finds).
"""
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tests.helpers import in_sandbox  # noqa: E402 (the sandbox check, defined once)

COLD_ENV = {"SKB_WARM": "0"}  # the documented opt-out: the same install, every call by exec


def enter_sandbox(script, argv=None, python=sys.executable):
    """Unless already inside tests/sandbox, run ``script`` again there (with ``python`` and the same
    arguments): a bench never touches this machine's network."""
    if in_sandbox():
        return
    if os.environ.get("SKB_SANDBOX_INNER"):
        sys.exit("bench: inside tests/sandbox but its netns cannot be told from the machine's: refusing")
    sandbox = os.path.join(ROOT, "tests", "sandbox")
    os.execv(sandbox, [sandbox, python, os.path.abspath(script)] + (argv if argv is not None else sys.argv[1:]))


def servers(bin_dir):
    try:
        out = subprocess.run([os.path.join(bin_dir, "skb"), "warm", "status", "--json"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    found = {s["pid"]: s for s in json.loads(out) if s.get("binDir") == os.path.abspath(bin_dir)}
    return list(found.values())


def ensure_server(bin_dir, applet="loopback", limit=60.0):
    """Make calls until this context's server runs (the first call starts it; the bench then measures
    the steady state a node is in). Returns its status, or None when warm start is off or unavailable."""
    exe = os.path.join(bin_dir, applet)
    deadline = time.monotonic() + limit
    env = {"CNI_COMMAND": "VERSION", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    while time.monotonic() < deadline:
        subprocess.run([exe], env=env, capture_output=True, stdin=subprocess.DEVNULL)
        found = [s for s in servers(bin_dir) if not s.get("stopping")]
        if found:
            return found[0]
        time.sleep(0.2)
    return None


def stop(bin_dir):
    subprocess.run([os.path.join(bin_dir, "skb"), "warm", "stop"], capture_output=True)


def report(bin_dir, out=sys.stdout):
    """The servers' own figures: calls served/refused, server RSS, a call's child memory."""
    for s in servers(bin_dir):
        if "error" in s:
            continue
        out.write(f"warm server pid {s['pid']}: served {s['served']}, refused {s['refused'] or 'none'}, "
                  f"peak children {s['peakChildren']}; server RSS {s['rssKB']} KB; per call (median of the last 64): "
                  f"child peak RSS {s['childMaxRssKB']} KB (mostly shared with the server), pages the child "
                  f"faulted in (its own memory, upper bound) {s['childFaultedKB']} KB\n")


def spread(values):
    """'median (p25-p75)' of a sample, as text."""
    s = sorted(values)
    q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0], s[0], s[0]]
    return f"{statistics.median(s):.2f} ({q[0]:.2f}-{q[2]:.2f})"


if __name__ == "__main__":
    for d in sys.argv[1:]:
        report(d)
