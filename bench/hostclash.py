"""What ptp's host-clash check (skb.linux.hostclash) costs per ADD, on nodes with many pods.

    tests/sandbox .venv/bin/python bench/hostclash.py [--bin-dir DIR] [-n 300] [--pods 0,20,110,200]

Inside the sandbox (its host netns stands for the node), for each pod count: that many ptp-like host ends
(veth pairs with the peer in another netns, the shared gateways 10.77.0.1/32 and fd77::1/128, a scope-host
route to each pod address), an eth0 with a default route. Then, in this process, the check an ADD makes
(``hostclash.refuse``: the address and route dumps of the families used, the decision), for an IPv4, an
IPv6 and a dual-stack ADD, interleaved: median and p25-p75 in microseconds. At the largest pod count it also
times ours ptp ADD+DEL (warm, as installed in --bin-dir), to put the check's share in proportion, and the
import of the module in a fresh interpreter (the cold path pays it on every ADD). Everything made is
deleted again. Run outside a sandbox, it re-executes itself through tests/sandbox.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
PEERS = "skb-bench-hc"
MODES = {"IPv4": [("10.77.3.250", "10.77.0.1", "10.77.0.0/16")],
         "IPv6": [("fd77::3:fa", "fd77::1", "fd77::/64")],
         "dual-stack": [("10.77.3.250", "10.77.0.1", "10.77.0.0/16"), ("fd77::3:fa", "fd77::1", "fd77::/64")]}


def ip_batch(lines):
    subprocess.run(["ip", "-batch", "-"], input="\n".join(lines) + "\n", text=True, check=True)


def build(pods):
    subprocess.run(["ip", "netns", "add", PEERS], check=True)
    lines = ["link add eth0 type veth peer name uplink0 netns " + PEERS, "addr add 192.168.77.5/24 dev eth0",
             "link set eth0 up", "route add default via 192.168.77.1"]
    for i in range(1, pods + 1):
        h = f"veth{i:08x}"
        lines += [f"link add {h} type veth peer name p{i} netns {PEERS}", f"addr add 10.77.0.1/32 dev {h}",
                  f"addr add fd77::1/128 dev {h} nodad", f"link set {h} up",
                  f"route add 10.77.{i // 250}.{i % 250 + 2}/32 dev {h} scope host",
                  f"route add fd77::{i + 1:x}/128 dev {h}"]
    ip_batch(lines)


def teardown(pods):
    # Deleting the peer netns destroys every pair; the host ends go with it (the kernel may finish later).
    subprocess.run(["ip", "netns", "del", PEERS], check=False)
    subprocess.run(["ip", "link", "del", "eth0"], check=False, capture_output=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True).stdout
        if not any(link["ifname"].startswith("veth0") for link in json.loads(out or "[]")):
            return
        time.sleep(0.05)


def spread(xs):
    xs = sorted(xs)
    return f"{statistics.median(xs):7.0f} ({xs[len(xs) // 4]:.0f}-{xs[3 * len(xs) // 4]:.0f})"


def measure(n):
    from skb.linux import hostclash
    from skb.linux.netlink import RtNetlink
    times = {m: [] for m in MODES}
    with RtNetlink(label="the node") as nl:
        for mode, addrs in MODES.items():
            hostclash.refuse(nl, addrs)            # must pass: the ends share the gateway
        for i in range(n):
            order = list(MODES)[i % 3:] + list(MODES)[:i % 3]
            for mode in order:
                t = time.perf_counter()
                hostclash.refuse(nl, MODES[mode])
                times[mode].append((time.perf_counter() - t) * 1e6)
    return times


def add_del_ms(bin_dir, n):
    """Median ms of ours ptp ADD+DEL (dual-stack, host-local) with the node as built."""
    from tests.helpers import cni_env, run_plugin
    data = tempfile.mkdtemp(prefix="skb-bench-hc-")
    conf = {"cniVersion": "1.0.0", "name": "hcbench", "type": "ptp",
            "ipam": {"type": "host-local", "dataDir": data, "ranges": [[{"subnet": "10.78.0.0/16"}],
                                                                        [{"subnet": "fd78::/64"}]]}}
    exe = os.path.join(bin_dir, "ptp")
    out = []
    subprocess.run(["ip", "netns", "add", "skb-bench-hc-pod"], check=True)
    try:
        for i in range(n):
            t = time.perf_counter()
            r = run_plugin(exe, cni_env("ADD", containerid=f"hc{i}", netns="/run/netns/skb-bench-hc-pod",
                                        path=bin_dir), conf)
            d = run_plugin(exe, cni_env("DEL", containerid=f"hc{i}", netns="/run/netns/skb-bench-hc-pod",
                                        path=bin_dir), conf)
            out.append((time.perf_counter() - t) * 1000)
            if r.rc or d.rc:
                raise SystemExit(f"ptp ADD/DEL failed: {r} {d}")
    finally:
        subprocess.run(["ip", "netns", "del", "skb-bench-hc-pod"], check=False)
        shutil.rmtree(data, ignore_errors=True)
    return statistics.median(out)


def import_us(n=20):
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); import skb.linux.netlink, skb.cni.errors; "
            "t = time.perf_counter(); import skb.linux.hostclash; print((time.perf_counter() - t) * 1e6)")
    xs = [float(subprocess.run([sys.executable, "-I", "-S", "-c", code, ROOT], capture_output=True, text=True,
                               check=True).stdout) for _ in range(n)]
    return spread(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default=os.environ.get("SKB_BIN_DIR", os.path.join(ROOT, "dist", "bin")))
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--pods", default="0,20,110,200")
    opts = ap.parse_args()
    if os.environ.get("SKB_SANDBOX") != "1":
        os.execv(os.path.join(ROOT, "tests", "sandbox"), [os.path.join(ROOT, "tests", "sandbox"), sys.executable,
                                                          *sys.argv])
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"host-clash check per ADD, in-process (read + decide), n={opts.n}, median (p25-p75) us; "
          f"load average {' '.join(load)}")
    print(f"  {'pods':>5} " + " ".join(f"{m:>20}" for m in MODES))
    counts = [int(x) for x in opts.pods.split(",")]
    for pods in counts:
        build(pods)
        try:
            times = measure(opts.n)
            print(f"  {pods:5} " + " ".join(f"{spread(times[m]):>20}" for m in MODES))
            if pods == counts[-1] and os.access(os.path.join(opts.bin_dir, "ptp"), os.X_OK):
                ms = add_del_ms(opts.bin_dir, 20)
                check = statistics.median(times["dual-stack"]) / 1000
                print(f"  with {pods} pods: ours ptp ADD+DEL (dual-stack) median {ms:.1f} ms; the check is "
                      f"{check:.2f} ms of it ({100 * check / ms:.0f}%)")
        finally:
            teardown(pods)
    print(f"import of skb.linux.hostclash in a fresh interpreter (cold ADD): {import_us()} us")


if __name__ == "__main__":
    main()
