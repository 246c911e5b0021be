"""Plugin calls as a runtime makes them: back to back, spaced 10 ms apart, and 20 at once; ours vs Go.

    make bench
    tests/sandbox .venv/bin/python bench/calls.py [--bin-dir DIR] [-n 200] [--blocks 4] [--endurance 5000]

Each call is made by a small static C runner compiled here, as Go's ``exec.Cmd`` makes it: stdin, stdout
and stderr are pipes; the runner writes the config to stdin and closes it, reads stdout and stderr to
their end, then reaps the process. A call's time runs from before the fork to after the reap. The runner
checks every call's exit status (and, for ADD, that stdout is a result), so a failing variant is caught.

Patterns (each a sequence of calls the runner repeats n times):
  back to back   the next call starts as soon as the previous one is reaped (a node starting many pods)
  spaced         10 ms of sleep between two calls (a quiet node)
  concurrent     20 ptp ADDs started at once, all reaped, then the 20 DELs (rounds)
Calls: VERSION (loopback), loopback ADD (the same netns every time), host-local ADD then DEL (one
container id), ptp + host-local ADD then DEL (one netns). Ours is <bin-dir> as installed (warm start on,
docs/WARM.md); Go's is /usr/lib/cni. Ours and Go alternate in blocks (ours, Go, Go, ours, ...) so that a
drift of the machine hits both alike; medians over all of a variant's calls, with p25-p75.

--endurance N: N sequential loopback ADDs and VERSIONs against one server, sampling the server's RSS and
open fds every N/10 calls (they must stay flat), and the spares' own memory.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench import warmstart  # noqa: E402

GO_DIR = "/usr/lib/cni"
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# ratio of medians, ours / Go (issue 18)
TARGETS = {("back to back", "VERSION"): 0.8, ("back to back", "loopback ADD"): 1.0,
           ("back to back", "host-local ADD+DEL"): 1.0, ("back to back", "ptp ADD+DEL"): 0.9,
           ("spaced", "VERSION"): 0.6, ("spaced", "loopback ADD"): 0.8, ("spaced", "host-local ADD+DEL"): 1.0,
           ("spaced", "ptp ADD+DEL"): 0.9, ("concurrent", "20 ptp ADDs + 20 DELs"): 0.9}

RUNNER_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* callrun GAP_US N PAR DIR...: each DIR holds one call (argv, env: NUL-separated; stdin). One unit is
 * the DIRs in order; PAR > 1 runs each DIR as PAR calls at once (argv/env files DIR/<i>.argv, .env).
 * Prints one line per unit: its wall time in ns. GAP_US: sleep between units. */
static char *slurp(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) { perror(path); exit(2); }
    char *b = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, b + got, (size_t)st.st_size - got);
        if (n <= 0) { perror(path); exit(2); }
        got += (size_t)n;
    }
    b[got] = 0;
    close(fd);
    *len = got;
    return b;
}

static char **split(char *b, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += b[i] == 0;
    char **v = calloc(n + 1, sizeof(char *));
    size_t k = 0;
    for (size_t i = 0; i < len; i += strlen(b + i) + 1) v[k++] = b + i;
    v[k] = NULL;
    return v;
}

struct call { char **argv, **env, *in; size_t inlen; };
struct run { pid_t pid; int out, err, st; size_t outlen; char buf[65536]; };

static void load(struct call *c, const char *dir, int i)
{
    char p[4096];
    size_t l;
    snprintf(p, sizeof p, "%s/%d.argv", dir, i);
    char *a = slurp(p, &l); c->argv = split(a, l);
    snprintf(p, sizeof p, "%s/%d.env", dir, i);
    char *e = slurp(p, &l); c->env = split(e, l);
    snprintf(p, sizeof p, "%s/stdin", dir);
    c->in = slurp(p, &c->inlen);
}

static void start(struct call *c, struct run *r)
{
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) { perror("pipe"); exit(2); }
    r->pid = fork();
    if (r->pid == 0) {
        dup2(in[0], 0), dup2(out[1], 1), dup2(err[1], 2);
        execve(c->argv[0], c->argv, c->env);
        _exit(127);
    }
    close(in[0]), close(out[1]), close(err[1]);
    if (c->inlen && write(in[1], c->in, c->inlen) != (ssize_t)c->inlen) { perror("write stdin"); exit(2); }
    close(in[1]);
    r->out = out[0], r->err = err[0], r->outlen = 0;
}

static void finish(struct run *rs, int n)
{
    int open_fds = 2 * n;
    struct pollfd *pf = calloc((size_t)(2 * n), sizeof(*pf));
    for (int i = 0; i < n; i++)
        pf[2 * i].fd = rs[i].out, pf[2 * i + 1].fd = rs[i].err, pf[2 * i].events = pf[2 * i + 1].events = POLLIN;
    while (open_fds) {
        if (poll(pf, (nfds_t)(2 * n), -1) < 0) { if (errno == EINTR) continue; perror("poll"); exit(2); }
        for (int j = 0; j < 2 * n; j++) {
            if (pf[j].fd < 0 || !pf[j].revents) continue;
            struct run *r = &rs[j / 2];
            char tmp[4096];
            char *dst = j % 2 ? tmp : r->buf + r->outlen;
            size_t room = j % 2 ? sizeof tmp : sizeof r->buf - 1 - r->outlen;
            ssize_t got = read(pf[j].fd, dst, room ? room : 1);
            if (got > 0 && !(j % 2)) r->outlen += (size_t)got;
            if (got <= 0) { close(pf[j].fd); pf[j].fd = -1; open_fds--; }
        }
    }
    for (int i = 0; i < n; i++) {
        while (waitpid(rs[i].pid, &rs[i].st, 0) < 0 && errno == EINTR) ;
        rs[i].buf[rs[i].outlen] = 0;
    }
    free(pf);
}

int main(int argc, char **argv)
{
    if (argc < 5) return 2;
    long gap = atol(argv[1]), n = atol(argv[2]);
    int par = atoi(argv[3]), ndirs = argc - 4;
    struct call *calls = calloc((size_t)(ndirs * par), sizeof(*calls));
    for (int d = 0; d < ndirs; d++)
        for (int i = 0; i < par; i++) load(&calls[d * par + i], argv[4 + d], i);
    struct run *rs = calloc((size_t)par, sizeof(*rs));
    struct timespec ts = {gap / 1000000, (gap % 1000000) * 1000};
    for (long u = 0; u < n; u++) {
        if (gap && u) nanosleep(&ts, NULL);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int d = 0; d < ndirs; d++) {
            for (int i = 0; i < par; i++) start(&calls[d * par + i], &rs[i]);
            finish(rs, par);
            for (int i = 0; i < par; i++)
                if (rs[i].st != 0) {
                    fprintf(stderr, "call %s (%d) failed: wait status %d, stdout: %s\n", argv[4 + d], i, rs[i].st,
                            rs[i].buf);
                    return 1;
                }
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
    }
    return 0;
}
"""


def sh(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def build_runner(tmp):
    src, exe = os.path.join(tmp, "callrun.c"), os.path.join(tmp, "callrun")
    with open(src, "w") as f:
        f.write(RUNNER_C)
    cc = shutil.which("musl-gcc") or "gcc"
    sh(cc, "-static", "-O2", "-o", exe, src)
    return exe


def write_call(dirpath, calls, stdin):
    """One call dir: calls = [(argv, env)] (one per parallel instance); the same stdin for all."""
    os.makedirs(dirpath, exist_ok=True)
    for i, (argv, env) in enumerate(calls):
        with open(os.path.join(dirpath, f"{i}.argv"), "wb") as f:
            f.write(b"".join(a.encode() + b"\0" for a in argv))
        with open(os.path.join(dirpath, f"{i}.env"), "wb") as f:
            f.write(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    with open(os.path.join(dirpath, "stdin"), "wb") as f:
        f.write(stdin)
    return dirpath


class Side:
    """One implementation (ours or Go): its call dirs per pattern."""

    def __init__(self, name, bin_dir, tmp, net_index):
        self.name, self.bin_dir = name, bin_dir
        self.dir = os.path.join(tmp, name)
        self.ns = [f"skb-calls-{name}-{i}" for i in range(21)]
        for ns in self.ns:
            sh("ip", "netns", "add", ns)
        base = {"PATH": PATH, "CNI_PATH": bin_dir}
        lo_conf = json.dumps({"cniVersion": "1.0.0", "name": f"calls-lo-{name}", "type": "loopback"}).encode()
        data = os.path.join(self.dir, "ipam")
        subnet = f"10.{90 + net_index}.0.0/16"
        hl_conf = json.dumps({"cniVersion": "1.0.0", "name": f"calls-hl-{name}",
                              "ipam": {"type": "host-local", "subnet": subnet, "dataDir": data}}).encode()
        ptp_conf = json.dumps({"cniVersion": "1.0.0", "name": f"calls-ptp-{name}", "type": "ptp",
                               "ipam": {"type": "host-local", "subnet": subnet, "dataDir": data,
                                        "routes": [{"dst": "0.0.0.0/0"}]}}).encode()
        exe = {a: os.path.join(bin_dir, a) for a in ("loopback", "host-local", "ptp")}

        def env(cmd, cid, ns, ifname):
            return dict(base, CNI_COMMAND=cmd, CNI_CONTAINERID=cid, CNI_NETNS=f"/run/netns/{ns}", CNI_IFNAME=ifname,
                        CNI_ARGS="")

        d = self.dir
        self.units = {
            "VERSION": [write_call(f"{d}/version", [([exe["loopback"]], dict(base, CNI_COMMAND="VERSION"))], b"")],
            "loopback ADD": [write_call(f"{d}/lo-add", [([exe["loopback"]], env("ADD", "lo1", self.ns[0], "lo"))],
                                        lo_conf)],
            "host-local ADD+DEL": [
                write_call(f"{d}/hl-add", [([exe["host-local"]], env("ADD", "hl1", self.ns[0], "eth0"))], hl_conf),
                write_call(f"{d}/hl-del", [([exe["host-local"]], env("DEL", "hl1", self.ns[0], "eth0"))], hl_conf)],
            "ptp ADD+DEL": [
                write_call(f"{d}/ptp-add", [([exe["ptp"]], env("ADD", "ptp1", self.ns[0], "eth0"))], ptp_conf),
                write_call(f"{d}/ptp-del", [([exe["ptp"]], env("DEL", "ptp1", self.ns[0], "eth0"))], ptp_conf)],
            "20 ptp ADDs + 20 DELs": [
                write_call(f"{d}/ptp20-add", [([exe["ptp"]], env("ADD", f"c{i}", self.ns[1 + i], "eth0"))
                                              for i in range(20)], ptp_conf),
                write_call(f"{d}/ptp20-del", [([exe["ptp"]], env("DEL", f"c{i}", self.ns[1 + i], "eth0"))
                                              for i in range(20)], ptp_conf)],
        }

    def cleanup(self):
        for ns in self.ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def run(runner, side, unit, gap_us, n, par=1):
    p = subprocess.run([runner, str(gap_us), str(n), str(par)] + side.units[unit], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"bench: {side.name} {unit}: {p.stderr.strip()}")
    return [int(x) / 1e6 for x in p.stdout.split()]


def q(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def endurance(runner, ours, bin_dir, n):
    """n sequential calls (ADD and VERSION alternating in chunks) against one server: RSS and fds flat."""
    print(f"\nendurance: {n} sequential calls, the server sampled every {n // 10}")
    print(f"{'calls':>7} {'server RSS KB':>14} {'server fds':>11} {'spares':>7} {'spares own KB':>14}")
    rows = []
    for i in range(11):
        if i:
            run(runner, ours, "loopback ADD", 0, n // 20)
            run(runner, ours, "VERSION", 0, n // 20)
        s = (warmstart.servers(bin_dir) or [{}])[0]
        pid = s.get("pid")
        fds = len(os.listdir(f"/proc/{pid}/fd")) if pid else -1
        spares = s.get("spares", [])
        own = sum(x.get("ownKB", 0) for x in spares) if isinstance(spares, list) else 0
        rows.append((i * (n // 10), s.get("rssKB"), fds, len(spares) if isinstance(spares, list) else spares, own))
        print(f"{rows[-1][0]:7d} {rows[-1][1]!s:>14} {fds:11d} {rows[-1][3]!s:>7} {own:14d}")
    first, last = rows[1], rows[-1]
    print(f"server RSS {first[1]} -> {last[1]} KB, fds {first[2]} -> {last[2]} (after the first {n // 10} calls)")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description="plugin calls back to back, spaced, concurrent: ours vs Go")
    ap.add_argument("--bin-dir", default=os.environ.get("SKB_BIN_DIR"), help="installed skb-cni bin dir")
    ap.add_argument("--go-dir", default=GO_DIR)
    ap.add_argument("-n", type=int, default=200, help="calls (units) per variant and pattern (default %(default)s)")
    ap.add_argument("--blocks", type=int, default=4, help="blocks per variant, alternating (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds of the concurrent pattern (default %(default)s)")
    ap.add_argument("--only", help="comma-separated call names to run (default all)")
    ap.add_argument("--endurance", type=int, default=0, help="also N sequential calls: server RSS and fds")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args(argv)
    warmstart.enter_sandbox(__file__)
    if not args.bin_dir:
        sys.exit("bench: give --bin-dir (an installed suite, e.g. dist/bin after make build)")
    bin_dir = os.path.abspath(args.bin_dir)
    tmp = tempfile.mkdtemp(prefix="skb-bench-calls-")
    sides = []
    try:
        runner = build_runner(tmp)
        sides = [Side("ours", bin_dir, tmp, 0), Side("go", args.go_dir, tmp, 1)]
        ours, go = sides
        server = warmstart.ensure_server(bin_dir)
        print(f"warm-start server: {'pid ' + str(server['pid']) if server else 'none (warm start off here)'}")
        results = {}
        names = ["VERSION", "loopback ADD", "host-local ADD+DEL", "ptp ADD+DEL"]
        if args.only:
            names = [x for x in names if x in args.only.split(",")]
        per_block = max(1, args.n // args.blocks)
        for pattern, gap in (("back to back", 0), ("spaced", 10000)):
            for unit in names:
                got = {"ours": [], "go": []}
                for b in range(args.blocks):
                    order = (ours, go) if b % 2 == 0 else (go, ours)
                    for side in order:
                        run(runner, side, unit, gap, 5)  # warm-up of the block (not counted)
                        got[side.name] += run(runner, side, unit, gap, per_block)
                results[(pattern, unit)] = got
        if not args.only or "concurrent" in args.only:
            got = {"ours": [], "go": []}
            for r in range(args.rounds):
                for side in ((ours, go) if r % 2 == 0 else (go, ours)):
                    got[side.name] += run(runner, side, "20 ptp ADDs + 20 DELs", 0, 1, par=20)
            results[("concurrent", "20 ptp ADDs + 20 DELs")] = got
        load = os.getloadavg()[0]
        print(f"\nours = {bin_dir} (warm start as installed), Go = {args.go_dir}; {args.n} calls per variant "
              f"and pattern in {args.blocks} alternating blocks; concurrent: {args.rounds} rounds")
        if load > 0.5 * (os.cpu_count() or 1):
            print(f"warning: load average {load:.1f} on {os.cpu_count()} CPUs while measuring: the numbers are noisy")
        print(f"{'pattern':13} {'call':22} {'ours ms (p25-p75)':>22} {'Go ms (p25-p75)':>22} {'ours/Go':>8} {'target':>7}")
        out = {}
        for (pattern, unit), got in results.items():
            o, g = got["ours"], got["go"]
            ratio = statistics.median(o) / statistics.median(g)
            target = TARGETS.get((pattern, unit))
            mark = "" if target is None else ("ok" if ratio <= target else "MISSED")
            print(f"{pattern:13} {unit:22} {statistics.median(o):8.2f} ({q(o, 25):5.2f}-{q(o, 75):5.2f}) "
                  f"{statistics.median(g):8.2f} ({q(g, 25):5.2f}-{q(g, 75):5.2f}) {ratio:7.2f}x "
                  f"{'<=' + format(target, 'g') if target else '':>7} {mark}")
            out[f"{pattern}/{unit}"] = {"ours_ms": o, "go_ms": g, "ratio": ratio, "target": target}
        warmstart.report(bin_dir)
        if args.endurance:
            out["endurance"] = endurance(runner, ours, bin_dir, args.endurance)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        for s in sides:
            s.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
