"""Pods through containerd's CRI, the way kubelet makes them: ours against the Go reference plugins.

    make bench                                 (runs this inside tests/sandbox, with the others)
    tests/sandbox .venv/bin/python bench/pods.py [--bin-dir DIR] [-n 200] [--concurrency 1,10]
                                                 [--attribution 40] [--attribution-concurrency 1,10]
                                                 [--json FILE]

Two throwaway machines (tests/e2e/sandbox.py: their own net, mount and pid namespaces, private tmpfs), each
with its own containerd 1.6 whose CRI plugin runs the same conflist (ptp over host-local, 10.88.0.0/16)
from /opt/cni/bin: in one, our installed suite (--bin-dir, default dist/bin, as `make install` lays it
out; warm start on, as installed); in the other, a copy of Debian's Go plugins (--go-dir). containerd also
runs its built-in loopback from the same dir, as on a node.

For each concurrency (1 and 10 by default), N pods per variant: each is RunPodSandbox (set-up: the pause
container and the CNI ADDs), then StopPodSandbox and RemovePodSandbox (teardown: the CNI DELs, the netns
and the container removed), with that many pods in flight at once. The N pods of a variant are made in two
blocks, ordered ours, Go, Go, ours, so that drift hits both alike. Reported per variant: p50 and p99 of
set-up and teardown latency, pods per second, and the ratio ours/Go. After every block nothing may be left
in that machine: no link but lo, no host-local reservation, no /run/netns entry, no pod in
ListPodSandbox, no process but the machine's own (containerd, and our warm-start server: resident by
design, docs/WARM.md). A leftover or a failed call fails the bench (exit 1), after printing it.

The CNI share (how much of set-up and teardown the plugins take) comes from separate passes of
--attribution pods (at concurrency 1, and again at 10), because measuring it costs something: there every
plugin in /opt/cni/bin is a tiny static shim that times the real plugin (fork, exec, wait) and logs start
and end. Each pass also reports ptp's calls' own durations (ADD, DEL: p50 and p99; containerd may call DEL
twice per pod): at 10 in flight, they tell whether a tail in pod latency is the plugins' or the rest of
the runtime's.
The same shim wraps both variants; its own exec is outside the timed interval but inside that pass's pod
latency, so the shares are slight underestimates, alike for both. A pod's CNI time is the union of its
calls' intervals (containerd runs the pod network's ADD and loopback's at once). host-local is not
wrapped (ptp runs it, within ptp's time), so our ptp still runs our host-local in its own process there.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench import warmstart  # noqa: E402 (the benches' shared helpers)
GO_DIR = "/usr/lib/cni"
PLUGINS = ("ptp", "host-local", "loopback")
NETWORK, SUBNET = "pods", "10.88.0.0/16"
CONFLIST = {"cniVersion": "1.0.0", "name": NETWORK, "plugins": [
    {"type": "ptp", "ipMasq": False,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": SUBNET}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
TIMING_LOG = "/run/skb-bench-cni.log"   # inside each machine, written by the shims
# the machine itself, and our warm-start server and its spare child (resident by design: docs/WARM.md)
EXPECTED_PROCESSES = {"catatonit", "sh", "sleep", "containerd", "ps", "skb-warm"}

SHIM_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* <dir>/<name>: run <REAL>/<name> with our argv, stdio and environment; log "name command start end". */
int main(int argc, char **argv) {
    (void)argc;
    const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    char real[4096];
    snprintf(real, sizeof real, "%s/%s", REAL, name);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pid_t p = fork();
    if (p < 0) return 127;
    if (p == 0) { execv(real, argv); _exit(127); }
    int st = 0;
    while (p > 0 && waitpid(p, &st, 0) < 0) {}
    clock_gettime(CLOCK_MONOTONIC, &b);
    const char *cmd = getenv("CNI_COMMAND"), *cid = getenv("CNI_CONTAINERID");
    char line[512];
    int n = snprintf(line, sizeof line, "%s %s %s %lld %lld\n", name, cmd ? cmd : "-", cid ? cid : "-",
                     (long long)a.tv_sec * 1000000000LL + a.tv_nsec, (long long)b.tv_sec * 1000000000LL + b.tv_nsec);
    if (n < 0) n = 0;
    if (n >= (int)sizeof line) n = sizeof line - 1;
    int fd = open(LOG, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) { if (write(fd, line, n) < 0) {} close(fd); }
    if (WIFSIGNALED(st)) { signal(WTERMSIG(st), SIG_DFL); kill(getpid(), WTERMSIG(st)); }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
"""


def pct(values, p):
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def build_shim(tmp, real_inner):
    src, exe = os.path.join(tmp, "shim.c"), os.path.join(tmp, f"shim-{abs(hash(real_inner))}")
    with open(src, "w") as f:
        f.write("#include <signal.h>\n" + SHIM_C)
    defs = [f'-DREAL="{real_inner}"', f'-DLOG="{TIMING_LOG}"']
    for cc in (["musl-gcc", "-static"], ["gcc", "-static"], ["gcc"]):
        if shutil.which(cc[0]) and subprocess.run(cc + ["-O2"] + defs + ["-o", exe, src],
                                                  capture_output=True).returncode == 0:
            return exe
    sys.exit("bench: no C compiler for the timing shim (make deps installs gcc and musl-tools)")


class Machine:
    """One sandbox with its containerd (CRI) and the conflist, plugins from ``plugin_dir`` (a host dir)."""

    def __init__(self, name, plugin_dir, pause_archive, shim_dir=None):
        from tests.e2e.sandbox import Sandbox
        from tests.e2e.runtimes import Containerd
        from tests.e2e.cri import CRIClient
        self.name = name
        binds = {"/opt/cni/real": plugin_dir}
        if shim_dir:
            binds["/opt/cni/bin"] = shim_dir
        else:
            binds["/opt/cni/bin"] = plugin_dir
        self.sb = Sandbox(binds=binds)
        self.sb.start()
        try:
            self.containerd = Containerd(self.sb, "/opt/cni/bin").start()
            self.containerd.import_image(pause_archive, namespace="k8s.io")
            self.sb.write(f"/etc/cni/net.d/10-{NETWORK}.conflist", json.dumps(CONFLIST))
            self.cri = CRIClient(self.containerd.grpc_target(), timeout=120)
            deadline = time.monotonic() + 30
            while not self._network_ready():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: containerd's CRI never reported the network ready")
                time.sleep(0.1)
        except BaseException:
            self.sb.stop()
            raise

    def _network_ready(self):
        conds = {c.type: c.status for c in self.cri.status().status.conditions}
        return conds.get("NetworkReady", False)

    def pod(self, i, block):
        cfg = self.cri.pod_config(f"{block}-{i}", self.sb.cgroup_parent)
        t0 = time.perf_counter()
        pod_id = self.cri.run_pod(cfg)
        t1 = time.perf_counter()
        self.cri.stop_pod(pod_id)
        self.cri.remove_pod(pod_id)
        t2 = time.perf_counter()
        return pod_id, t1 - t0, t2 - t1

    def run_block(self, n, concurrency, block):
        """n pods, ``concurrency`` in flight: [(pod id, set-up s, teardown s)], failures, wall s."""
        results, failures, lock = [], [], threading.Lock()

        def one(i):
            try:
                r = self.pod(i, block)
                with lock:
                    results.append(r)
            except Exception as e:  # a failed call is reported, and fails the bench
                with lock:
                    failures.append(f"{block}-{i}: {type(e).__name__}: {str(e)[:300]}")
        t = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(one, range(n)))
        return results, failures, time.perf_counter() - t

    def leftovers(self):
        from tests.e2e import state
        left = {}
        links = state.links(self.sb)
        if links:
            left["links"] = links
        res = state.reservations(self.sb, NETWORK)
        if res:
            left["reservations"] = res
        ns = state.netns_files(self.sb)
        if ns:
            left["netns"] = ns
        pods = self.cri.list_pods()
        if pods:
            left["pods"] = [p.id[:12] for p in pods]
        # A plugin process (a warm child after its answer, a shim) may still be on its way out: a process
        # is a leftover only if it is still there after a grace period.
        deadline = time.monotonic() + 5
        while True:
            ps = self.sb.run(["ps", "-e", "-o", "comm="]).stdout.split()
            extra = sorted(p for p in ps if p not in EXPECTED_PROCESSES)
            if not extra or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if extra:
            left["processes"] = extra
        return left

    def warm_status(self):
        r = self.sb.run(["/opt/cni/bin/skb", "warm", "status", "--json"], check=False)
        try:
            return [s for s in json.loads(r.stdout) if "error" not in s]
        except ValueError:
            return []

    def timings(self):
        try:
            text = self.sb.read(TIMING_LOG)
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            f = line.split()
            if len(f) == 5:
                out.append((f[0], f[1], f[2], int(f[3]) / 1e9, int(f[4]) / 1e9))
        return out

    def close(self):
        try:
            self.cri.close()
        finally:
            self.sb.stop()


def union_length(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def attribution(name, plugin_dir, pause, tmp, n, concurrency=1):
    """Over n pods at ``concurrency``, plugins wrapped by the timing shim: ({"setup", "teardown": median
    CNI share, "ADD", "DEL": [call durations, s]}, failures)."""
    shim_dir = os.path.join(tmp, f"shim-{name}-c{concurrency}")
    os.makedirs(shim_dir)
    shim = build_shim(tmp, "/opt/cni/real")
    # The plugins containerd runs are timed; host-local (run by ptp, inside ptp's time) is the real one, by
    # symlink: our ptp then still runs our host-local in its own process, as installed.
    for p in ("ptp", "loopback"):
        shutil.copy(shim, os.path.join(shim_dir, p))
    os.symlink("/opt/cni/real/host-local", os.path.join(shim_dir, "host-local"))
    if os.path.exists(os.path.join(plugin_dir, ".skb")):
        os.symlink("/opt/cni/real/.skb", os.path.join(shim_dir, ".skb"))
    m = Machine(name, plugin_dir, pause, shim_dir=shim_dir)
    try:
        m.run_block(3, 1, "warmup")
        m.sb.run(["sh", "-c", f": > {TIMING_LOG}"])
        results, failures, _ = m.run_block(n, concurrency, "attr")
        calls = m.timings()
    finally:
        m.close()
    if failures:
        return None, failures
    by_pod, durations = {}, {"ADD": [], "DEL": []}
    for plugin, command, cid, a, b in calls:
        by_pod.setdefault(cid, {}).setdefault(command, []).append((a, b))
        if plugin == "ptp" and command in durations:  # the pod network's calls (loopback's are ~1 ms)
            durations[command].append(b - a)
    setup_share, teardown_share = [], []
    for pod_id, setup, teardown in results:
        c = by_pod.get(pod_id, {})
        setup_share.append(union_length(c.get("ADD", [])) / setup)
        teardown_share.append(union_length(c.get("DEL", [])) / teardown)
    return {"setup": statistics.median(setup_share), "teardown": statistics.median(teardown_share), **durations}, []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default=os.environ.get("SKB_BIN_DIR", os.path.join(ROOT, "dist", "bin")))
    ap.add_argument("--go-dir", default=GO_DIR)
    ap.add_argument("-n", type=int, default=200, help="pods per variant and concurrency (default %(default)s)")
    ap.add_argument("--concurrency", default="1,10", help="pods in flight, comma-separated (default %(default)s)")
    ap.add_argument("--attribution", type=int, default=40, help="pods of each CNI-share pass (0: skip)")
    ap.add_argument("--attribution-concurrency", default="1,10",
                    help="pods in flight in the CNI-share passes, comma-separated (default %(default)s)")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args(argv)
    warmstart.enter_sandbox(__file__, argv)

    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    missing = [t for t in ("containerd", "containerd-shim-runc-v2", "runc", "catatonit", "unshare", "nsenter")
               if not shutil.which(t, path=path)]
    try:
        import grpc  # noqa: F401
        import cri_api  # noqa: F401
    except ImportError:
        missing.append("grpcio/cri_api (pip install -e '.[test]')")
    if missing:
        print(f"pods bench skipped: not installed: {', '.join(missing)} (make deps installs them)")
        return 0
    bin_dir = os.path.abspath(args.bin_dir)
    for d, what in ((bin_dir, "our bin dir (make build)"), (args.go_dir, "the Go plugins")):
        if not all(os.access(os.path.join(d, p), os.X_OK) for p in PLUGINS):
            sys.exit(f"bench: {what} {d} lacks one of {', '.join(PLUGINS)}")
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]

    from tests.e2e import images
    tmp = tempfile.mkdtemp(prefix="skb-bench-pods.")
    try:
        pause = images.pause(os.path.join(tmp, "pause.tar"))
        # The machines hide /usr/lib/cni (so no Go plugin can stand in for ours): Go's are given a dir of
        # their own, as ours are.
        go_dir = os.path.join(tmp, "go-bin")
        os.makedirs(go_dir)
        for p in PLUGINS:
            shutil.copy2(os.path.join(args.go_dir, p), go_dir)
        return bench(args, tmp, bin_dir, go_dir, pause, levels)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench(args, tmp, bin_dir, go_dir, pause, levels):
    dirs = {"ours": bin_dir, "go": go_dir}
    started = time.monotonic()
    machines = {}
    bad = []
    out = {"n": args.n, "levels": {}, "leftovers": {}, "failures": []}
    try:
        for name, d in dirs.items():
            machines[name] = Machine(name, d, pause)
            r, f, _ = machines[name].run_block(5, 1, "warmup")
            bad += f
        for conc in levels:
            samples = {name: ([], [], 0.0, 0) for name in dirs}
            half = [args.n // 2, args.n - args.n // 2]
            for k, name in enumerate(("ours", "go", "go", "ours")):
                n = half[0] if k < 2 else half[1]
                results, failures, wall = machines[name].run_block(n, conc, f"c{conc}b{k}")
                setup, teardown, w, count = samples[name]
                samples[name] = (setup + [r[1] for r in results], teardown + [r[2] for r in results],
                                 w + wall, count + len(results))
                bad += failures
                left = machines[name].leftovers()
                if left:
                    bad.append(f"{name}, concurrency {conc}, block {k}: left behind {left}")
                    out["leftovers"][f"{name}-c{conc}-b{k}"] = left
            out["levels"][conc] = {}
            for name, (setup, teardown, wall, count) in samples.items():
                out["levels"][conc][name] = {
                    "pods": count, "setup_p50_ms": pct(setup, 50) * 1000, "setup_p99_ms": pct(setup, 99) * 1000,
                    "teardown_p50_ms": pct(teardown, 50) * 1000, "teardown_p99_ms": pct(teardown, 99) * 1000,
                    "pods_per_s": count / wall if wall else 0.0}
        out["warm"] = machines["ours"].warm_status()
    finally:
        for m in machines.values():
            m.close()
    if args.attribution:
        out["cni_share"], out["cni_calls"] = {}, {}
        for conc in [int(c) for c in args.attribution_concurrency.split(",") if c.strip()]:
            for name, d in dirs.items():
                got, failures = attribution(name, d, pause, tmp, args.attribution, conc)
                bad += failures
                if not got:
                    continue
                if conc == 1:
                    out["cni_share"][name] = {"setup": got["setup"], "teardown": got["teardown"]}
                out["cni_calls"].setdefault(str(conc), {})[name] = {
                    "setup_share": got["setup"], "teardown_share": got["teardown"],
                    **{f"{c}_{q}_ms": pct(got[c], int(q[1:])) * 1000 for c in ("ADD", "DEL") for q in ("p50", "p99")},
                    "calls": len(got["ADD"]) + len(got["DEL"])}
    out["failures"] = bad
    report(out, levels, time.monotonic() - started)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if bad else 0


def report(out, levels, took):
    print(f"CRI pods (RunPodSandbox, then StopPodSandbox + RemovePodSandbox), ptp + host-local, {out['n']} pods "
          f"per variant and concurrency, blocks ours/Go/Go/ours; ms")
    print(f"{'':14} {'set-up p50':>10} {'p99':>8} {'teardown p50':>13} {'p99':>8} {'pods/s':>8}")
    for conc in levels:
        row = out["levels"].get(conc, {})
        for name in ("ours", "go"):
            s = row.get(name)
            if s:
                print(f"c={conc:<3} {name:8} {s['setup_p50_ms']:10.1f} {s['setup_p99_ms']:8.1f} "
                      f"{s['teardown_p50_ms']:13.1f} {s['teardown_p99_ms']:8.1f} {s['pods_per_s']:8.1f}")
        if "ours" in row and "go" in row:
            o, g = row["ours"], row["go"]
            print(f"c={conc:<3} {'ours/go':8} {o['setup_p50_ms'] / g['setup_p50_ms']:9.2f}x "
                  f"{o['setup_p99_ms'] / g['setup_p99_ms']:7.2f}x {o['teardown_p50_ms'] / g['teardown_p50_ms']:12.2f}x "
                  f"{o['teardown_p99_ms'] / g['teardown_p99_ms']:7.2f}x {o['pods_per_s'] / g['pods_per_s']:7.2f}x")
    for name, s in out.get("cni_share", {}).items():
        print(f"CNI share ({name}, median over the attribution pass): set-up {s['setup']:.0%}, "
              f"teardown {s['teardown']:.0%}")
    for conc, row in out.get("cni_calls", {}).items():
        for name, c in row.items():
            print(f"ptp calls, {conc} pod(s) in flight ({name}, {c['calls']} calls timed by the shim): "
                  f"ADD p50 {c['ADD_p50_ms']:.1f} p99 {c['ADD_p99_ms']:.1f} ms, DEL p50 {c['DEL_p50_ms']:.1f} "
                  f"p99 {c['DEL_p99_ms']:.1f} ms; CNI share set-up {c['setup_share']:.0%}, "
                  f"teardown {c['teardown_share']:.0%}")
        if "ours" in row and "go" in row:
            o, g = row["ours"], row["go"]
            print(f"ptp calls, {conc} pod(s) in flight, ours/go: " + ", ".join(
                f"{k.replace('_ms', '').replace('_', ' ')} {o[k] / g[k]:.2f}x"
                for k in ("ADD_p50_ms", "ADD_p99_ms", "DEL_p50_ms", "DEL_p99_ms")))
    for s in out.get("warm", []):
        print(f"warm server (ours): served {s['served']}, refused {s['refused'] or 'none'}, "
              f"peak children {s['peakChildren']}, RSS {s['rssKB']} KB")
    if out["failures"]:
        print("FAILED:\n  " + "\n  ".join(out["failures"][:20]))
    else:
        print("leftovers after every block: none (links, reservations, netns, pods, processes)")
    print(f"bench took {took:.0f} s")


def _terminated(signum, frame):
    # SIGTERM (a test's timeout, a CI job cancelled): unwind, so that every machine is stopped and its
    # cgroups removed by the finally blocks, instead of leaving sandboxes behind
    raise SystemExit(f"bench: stopped by signal {signum}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminated)
    sys.exit(main())
