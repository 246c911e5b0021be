"""ptp + host-local: ours against the Go reference pair, in one run, inside the sandbox.

    tests/sandbox .venv/bin/python bench/ptp.py [--bin-dir DIR] [-n 30] [--warmup 5] [--concurrent 20]

Ours is <bin-dir>/ptp with CNI_PATH=<bin-dir> (so our host-local: in-process in the frozen build), twice:
"warm" as installed (served by the warm-start server, docs/WARM.md) and "cold" with SKB_WARM=0 (every call
by exec). Go's is /usr/lib/cni/ptp with CNI_PATH=/usr/lib/cni. <bin-dir> is --bin-dir, else $SKB_BIN_DIR (the installed
frozen build), else wrappers over the source tree (slower start-up: said in the output). If <bin-dir>
has no host-local, Go's host-local serves ours too, and the output says so. Run outside a sandbox, the
script re-executes itself through tests/sandbox: nothing touches this machine's network.

1. Sequential: each round, for each variant (order rotated), one ADD then one DEL in a netns of its own,
   each timed from spawn to reaped exit and checked. Medians of ADD, DEL and ADD+DEL; ratio ours/Go.
2. Concurrent: N ADDs (N netns, N containers) started at once, wall time until the last exits; then N DELs
   at once. Several rounds, medians; every call must succeed and leave the netns empty again.
Targets (warm): ADD+DEL median <= 1.0x Go; concurrent ADDs+DELs wall time <= 1.0x Go, no failures.
Spread: p25-p75 of the sequential samples, min-max of the concurrent rounds.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench import warmstart  # noqa: E402
GO_DIR = "/usr/lib/cni"
TARGET = 1.0


def spawn(exe, env, stdin_path, out_path):
    """Start ``exe`` with stdin/stdout redirected to files (no pipes to drain); return the pid."""
    fin = os.open(stdin_path, os.O_RDONLY)
    fout = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        return os.posix_spawn(exe, [exe], env, file_actions=[(os.POSIX_SPAWN_DUP2, fin, 0),
                                                              (os.POSIX_SPAWN_DUP2, fout, 1),
                                                              (os.POSIX_SPAWN_DUP2, fout, 2)])
    finally:
        os.close(fin)
        os.close(fout)


def wait(pid):
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


class Variant:
    def __init__(self, name, exe, cni_path, tmp, subnet, extra_env=None):
        self.name = name
        self.exe = exe
        self.cni_path = cni_path
        self.extra_env = extra_env or {}
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.conf = os.path.join(self.dir, "conf.json")
        with open(self.conf, "w") as f:
            json.dump({"cniVersion": "1.0.0", "name": f"bench-{name}", "type": "ptp",
                       "ipam": {"type": "host-local", "subnet": subnet,
                                "routes": [{"dst": "0.0.0.0/0"}], "dataDir": os.path.join(self.dir, "ipam")}}, f)

    def env(self, command, cid, netns):
        return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CNI_COMMAND": command, "CNI_CONTAINERID": cid,
                "CNI_NETNS": f"/run/netns/{netns}", "CNI_IFNAME": "eth0", "CNI_ARGS": "", "CNI_PATH": self.cni_path,
                **self.extra_env}

    def call(self, command, cid, netns, out):
        """(wall seconds, exit code, CPU seconds of the processes this bench waited for)."""
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        rc = wait(spawn(self.exe, self.env(command, cid, netns), self.conf, out))
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, rc, (after.ru_utime + after.ru_stime) - (ru.ru_utime + ru.ru_stime)

    def fail(self, what, out):
        with open(out) as f:
            sys.exit(f"bench: {self.name} {what} failed: {f.read()}")


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def netns_links(ns):
    out = subprocess.run(["ip", "-n", ns, "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return [line.split(":")[1].strip() for line in out.splitlines()]


def sequential(variants, n, warmup, bin_dir):
    """Wall times, and CPU time per ADD+DEL: of the processes the bench waits for (Go's ptp and the
    host-local it execs; our launcher, or our whole cold call), plus, for warm calls, the server's own
    CPU and its reaped children's (the calls, and the spares' preparation) over the measured rounds."""
    samples = {v.name: {"ADD": [], "DEL": [], "ADD+DEL": [], "cpu": []} for v in variants}
    for v in variants:
        sh("ip", "netns", "add", f"bs-{v.name}")
    server0 = None
    for rnd in range(warmup + n):
        if rnd == warmup:
            server0 = _server_cpu(bin_dir)
        k = rnd % len(variants)
        for v in variants[k:] + variants[:k]:
            ns, out, cid = f"bs-{v.name}", os.path.join(v.dir, "out"), f"seq{rnd}"
            ta, rc, ca = v.call("ADD", cid, ns, out)
            if rc != 0:
                v.fail("ADD", out)
            td, rc, cd = v.call("DEL", cid, ns, out)
            if rc != 0 or netns_links(ns) != ["lo"]:
                v.fail("DEL", out)
            if rnd >= warmup:
                s = samples[v.name]
                s["ADD"].append(ta * 1e3)
                s["DEL"].append(td * 1e3)
                s["ADD+DEL"].append((ta + td) * 1e3)
                s["cpu"].append((ca + cd) * 1e3)
    server1 = _server_cpu(bin_dir, settle=True)
    samples["server_cpu_per_round"] = (server1 - server0) / n if server0 is not None and server1 is not None else None
    for v in variants:
        subprocess.run(["ip", "netns", "del", f"bs-{v.name}"], check=False)
    return samples


def _server_cpu(bin_dir, settle=False):
    """CPU ms of the warm server and its reaped children (None: no server). settle: first wait until
    no call's child is left to reap (a child answers before it ends)."""
    deadline = time.monotonic() + 5
    while True:
        found = [s for s in warmstart.servers(bin_dir) if "cpuSelfMs" in s]
        if not found:
            return None
        if not settle or all(s["children"] == 0 for s in found) or time.monotonic() > deadline:
            return sum(s["cpuSelfMs"] + s["cpuChildrenMs"] for s in found)
        time.sleep(0.05)


def concurrent(variants, count, rounds):
    walls = {v.name: {"ADD": [], "DEL": [], "total": []} for v in variants}
    failures = {v.name: 0 for v in variants}
    for v in variants:
        for i in range(count):
            sh("ip", "netns", "add", f"bc-{v.name}-{i}")
    for rnd in range(rounds):
        for v in (variants if rnd % 2 == 0 else variants[::-1]):
            total = 0.0
            for command in ("ADD", "DEL"):
                t0 = time.perf_counter()
                pids = [spawn(v.exe, v.env(command, f"c{rnd}-{i}", f"bc-{v.name}-{i}"), v.conf,
                              os.path.join(v.dir, f"out{i}")) for i in range(count)]
                codes = [wait(p) for p in pids]
                wall = time.perf_counter() - t0
                total += wall
                bad = [i for i, c in enumerate(codes) if c != 0]
                if bad:
                    failures[v.name] += len(bad)
                    with open(os.path.join(v.dir, f"out{bad[0]}")) as f:
                        print(f"bench: {v.name} concurrent {command} #{bad[0]} failed: {f.read().strip()}")
                walls[v.name][command].append(wall * 1e3)
            walls[v.name]["total"].append(total * 1e3)
            for i in range(count):
                if netns_links(f"bc-{v.name}-{i}") != ["lo"]:
                    failures[v.name] += 1
                    print(f"bench: {v.name}: netns bc-{v.name}-{i} not empty after DEL")
    for v in variants:
        for i in range(count):
            subprocess.run(["ip", "netns", "del", f"bc-{v.name}-{i}"], check=False)
    return walls, failures


def main(argv=None):
    ap = argparse.ArgumentParser(description="ptp + host-local ADD/DEL: ours vs Go")
    ap.add_argument("--bin-dir", help="installed skb-cni bin dir (default: $SKB_BIN_DIR, else the source tree)")
    ap.add_argument("--go-dir", default=GO_DIR)
    ap.add_argument("-n", type=int, default=30, help="sequential rounds measured (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--concurrent", type=int, default=20, help="calls started at once (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=5, help="concurrent rounds (default %(default)s)")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args(argv)
    warmstart.enter_sandbox(__file__, argv)
    tmp = tempfile.mkdtemp(prefix="skb-bench-ptp.")
    try:
        return bench(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench(args, tmp):
    bin_dir = args.bin_dir or os.environ.get("SKB_BIN_DIR")
    mode = "frozen build" if bin_dir else "source tree (no frozen build given: start-up is slower than installed)"
    if not bin_dir:
        sys.path.insert(0, ROOT)
        from tests.helpers import source_bin_dir
        bin_dir = source_bin_dir(os.path.join(tmp, "srcbin"))
    bin_dir = os.path.abspath(bin_dir)
    ours_path = bin_dir
    if not os.path.exists(os.path.join(bin_dir, "host-local")):
        ours_path = f"{bin_dir}:{args.go_dir}"
        mode += "; NOTE: no host-local of ours there, Go's host-local serves our ptp"
    variants = [Variant("warm", os.path.join(bin_dir, "ptp"), ours_path, tmp, "10.77.0.0/16"),
                Variant("cold", os.path.join(bin_dir, "ptp"), ours_path, tmp, "10.76.0.0/16", warmstart.COLD_ENV),
                Variant("go", os.path.join(args.go_dir, "ptp"), args.go_dir, tmp, "10.78.0.0/16")]
    server = warmstart.ensure_server(bin_dir, "ptp") if os.path.exists(os.path.join(bin_dir, "skb")) else None
    mode += f"; warm-start server {'pid ' + str(server['pid']) if server else 'none'}"
    print(f"ptp + host-local, cniVersion 1.0.0, IPv4; ours = {bin_dir}/ptp ({mode}); go = {args.go_dir}/ptp")

    seq = sequential(variants, args.n, args.warmup, bin_dir)
    print(f"\nsequential: n={args.n} after {args.warmup} warm-up rounds, interleaved; medians in ms")
    print(f"{'':8}{'ADD':>22}{'DEL':>22}{'ADD+DEL (p25-p75)':>24}")
    for v in variants:
        s = seq[v.name]
        print(f"{v.name:8}{warmstart.spread(s['ADD']):>22}{warmstart.spread(s['DEL']):>22}"
              f"{warmstart.spread(s['ADD+DEL']):>24}")
    ratios = {}
    for name in ("warm", "cold"):
        ratios[name] = {k: statistics.median(seq[name][k]) / statistics.median(seq["go"][k]) for k in ("ADD", "DEL", "ADD+DEL")}
        r = ratios[name]
        print(f"{name + '/go':8}{r['ADD']:21.2f}x{r['DEL']:21.2f}x{r['ADD+DEL']:23.2f}x")
    cpu = {v.name: statistics.median(seq[v.name]["cpu"]) for v in variants}
    if seq["server_cpu_per_round"] is not None:
        launcher = cpu["warm"]
        cpu["warm"] += seq["server_cpu_per_round"]
        how = f"warm = launcher {launcher:.2f} + server and its children {seq['server_cpu_per_round']:.2f} (mean)"
    else:
        how = "no warm server: warm is the launcher's only"
    print(f"CPU per ADD+DEL (user + system, ms; median of the processes waited for): warm {cpu['warm']:.2f}, "
          f"cold {cpu['cold']:.2f}, go {cpu['go']:.2f}; warm/go {cpu['warm'] / cpu['go']:.2f}x, "
          f"cold/go {cpu['cold'] / cpu['go']:.2f}x ({how})")
    ratios["cpu"] = cpu

    walls, failures = concurrent(variants, args.concurrent, args.rounds)
    print(f"\nconcurrent: {args.concurrent} ADDs at once, then {args.concurrent} DELs at once; "
          f"{args.rounds} rounds; median wall ms")
    print(f"{'':8}{'ADDs':>9}{'DELs':>9}{'total':>9}{'total min-max':>16}{'failures':>10}")
    for v in variants:
        w = walls[v.name]
        print(f"{v.name:8}{statistics.median(w['ADD']):9.1f}{statistics.median(w['DEL']):9.1f}"
              f"{statistics.median(w['total']):9.1f}{min(w['total']):8.1f}-{max(w['total']):<7.1f}{failures[v.name]:10d}")
    cratio = {}
    for name in ("warm", "cold"):
        cratio[name] = {k: statistics.median(walls[name][k]) / statistics.median(walls["go"][k])
                        for k in ("ADD", "DEL", "total")}
        c = cratio[name]
        print(f"{name + '/go':8}{c['ADD']:8.2f}x{c['DEL']:8.2f}x{c['total']:8.2f}x")
    warmstart.report(bin_dir)

    ok_seq = ratios["warm"]["ADD+DEL"] <= TARGET
    ok_con = cratio["warm"]["total"] <= TARGET and failures["warm"] == 0
    print(f"\nwarm ADD+DEL median {ratios['warm']['ADD+DEL']:.2f}x Go (target <= {TARGET}x): {'ok' if ok_seq else 'MISSED'}"
          f"; cold {ratios['cold']['ADD+DEL']:.2f}x")
    print(f"{args.concurrent} concurrent ADDs+DELs, warm {cratio['warm']['total']:.2f}x Go (target <= {TARGET}x, no failures): "
          f"{'ok' if ok_con else 'MISSED'}; cold {cratio['cold']['total']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bin_dir": bin_dir, "mode": mode, "sequential": seq, "concurrent": walls,
                       "failures": failures, "ratios": ratios, "concurrent_ratios": cratio}, f, indent=1)
    # Like bench/loopback.py, a missed ratio is reported, not an error; a failed call is.
    return 1 if failures["warm"] or failures["cold"] else 0


if __name__ == "__main__":
    sys.exit(main())
