"""Loopback ADD: our frozen plugin against the Go reference, in one run, inside the sandbox.

    make bench                                   (builds, then runs this inside tests/sandbox)
    tests/sandbox /usr/bin/python3 bench/loopback.py [--bin-dir DIR] [-n 40] [--warmup 5]

Without --bin-dir: $SKB_BIN_DIR, else `make build` and an install into a temporary dir. Run outside a
sandbox, it re-executes itself through tests/sandbox: plugins never touch this machine's netns.

What is measured, per call: wall time from fork to reaped exit, and peak RSS (ru_maxrss from wait4). Each
call is made by a tiny static C runner compiled here, not by Python: a child forked from a Python parent
inherits the parent's RSS high-water mark (~11 MB), which would hide the plugins' own.
Variants, interleaved round by round (order rotated) so drift hits all alike:
  warm       <bin-dir>/loopback, as installed: served by the context's warm-start server (docs/WARM.md)
  cold       <bin-dir>/loopback with SKB_WARM=0: launcher -> bundled loader -> frozen bundle, every call
  go         /usr/lib/cni/loopback                   (containernetworking-plugins 1.1.1)
  src -I -S  /usr/bin/python3 -I -S, same code from the source tree
  src -I     /usr/bin/python3 -I, same code from the source tree
  floor      /usr/bin/python3 -I -S -c pass          (no ADD: the floor of any per-call Python design)
  warm/cold/go VERSION                               (the call podman makes before every command)
Every ADD gets the same work: one netns per variant, lo set DOWN (untimed) before each call, then the
result and lo's UP flag are checked. cniVersion 1.0.0 (the Go plugin's newest).
Targets: warm ADD <= 1.2x Go, warm VERSION <= 1.0x, cold ADD <= 3.5x; peak RSS <= 3x Go: for cold the
process's, for warm the pages the server's child faulted in (its own memory; the server's RSS is reported
separately, it is shared by every call).
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
PY = "/usr/bin/python3"  # Debian's interpreter, never a version-manager shim
GO_DEFAULT = "/usr/lib/cni"
TARGET_WARM, TARGET_COLD, TARGET_VERSION, TARGET_RSS = 1.2, 3.5, 1.0, 3.0

RUNNER_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* runner IN OUT ERR PROG ARGS...: run PROG once; print "<wall ns> <ru_maxrss KB> <wait status>". */
int main(int argc, char **argv) {
    if (argc < 5) return 2;
    int in = open(argv[1], O_RDONLY), out = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600),
        err = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0 || err < 0) return 2;
    struct timespec a, b;
    struct rusage ru;
    int st;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in, 0), dup2(out, 1), dup2(err, 2);
        execv(argv[4], argv + 4);
        _exit(127);
    }
    if (pid < 0 || wait4(pid, &st, 0, &ru) < 0) return 2;
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%lld %ld %d\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec),
           ru.ru_maxrss, st);
    return 0;
}
"""


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def build_runner(tmp):
    src = os.path.join(tmp, "runner.c")
    exe = os.path.join(tmp, "runner")
    with open(src, "w") as f:
        f.write(RUNNER_C)
    for cc in (["musl-gcc", "-static"], ["gcc", "-static"], ["gcc"], ["cc"]):
        if shutil.which(cc[0]) and subprocess.run(cc + ["-O2", "-o", exe, src], capture_output=True).returncode == 0:
            return exe
    sys.exit("bench: no C compiler for the runner (make deps installs gcc and musl-tools)")


def default_bin_dir(tmp):
    if os.environ.get("SKB_BIN_DIR"):
        return os.environ["SKB_BIN_DIR"]
    subprocess.run(["make", "-C", ROOT, "build"], check=True, stdout=subprocess.DEVNULL)
    dest = os.path.join(tmp, "bin")
    subprocess.run([PY, os.path.join(ROOT, "build", "bundle.py"), "install", os.path.join(ROOT, "dist", "bin"),
                    dest], check=True, stdout=subprocess.DEVNULL)
    return dest


def source_tree_path(tmp):
    """A sys.path entry holding the packages under their import names (plugins/ is skb_plugins)."""
    path = os.path.join(tmp, "src")
    os.makedirs(path)
    os.symlink(os.path.join(ROOT, "skb"), os.path.join(path, "skb"))
    os.symlink(os.path.join(ROOT, "plugins"), os.path.join(path, "skb_plugins"))
    return path


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main(argv=None):
    ap = argparse.ArgumentParser(description="loopback ADD: ours vs Go, latency and peak RSS")
    ap.add_argument("--bin-dir", help="installed skb-cni bin dir (default: $SKB_BIN_DIR or build+install)")
    ap.add_argument("--go-dir", default=GO_DEFAULT, help="Go reference plugins (default %(default)s)")
    ap.add_argument("-n", type=int, default=60, help="measured calls per variant (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cni-version", default="1.0.0")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args(argv)

    warmstart.enter_sandbox(__file__, argv, PY)

    tmp = tempfile.mkdtemp(prefix="skb-bench.")
    try:
        return bench(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench(args, tmp):
    runner = build_runner(tmp)
    bin_dir = os.path.abspath(args.bin_dir) if args.bin_dir else default_bin_dir(tmp)
    src = source_tree_path(tmp)
    boot = f"import sys; sys.path.insert(0, {src!r}); from skb.applets import main; sys.exit(main(['loopback']))"
    ours = [os.path.join(bin_dir, "loopback")]
    go = [os.path.join(args.go_dir, "loopback")]
    version = {"CNI_COMMAND": "VERSION"}
    # (name, argv, ADD?, extra environment)
    variants = [
        ("warm", ours, True, {}),
        ("cold", ours, True, warmstart.COLD_ENV),
        ("go", go, True, {}),
        ("src -I -S", [PY, "-I", "-S", "-c", boot], True, {}),
        ("src -I", [PY, "-I", "-c", boot], True, {}),
        ("floor", [PY, "-I", "-S", "-c", "pass"], False, {}),
        ("warm VER", ours, False, version),
        ("cold VER", ours, False, dict(version, **warmstart.COLD_ENV)),
        ("go VER", go, False, version),
    ]
    server = warmstart.ensure_server(bin_dir)
    print(f"warm-start server: {'pid ' + str(server['pid']) if server else 'none (warm start off here)'}")
    for name, cmd, _, _ in variants:
        if not os.access(cmd[0], os.X_OK):
            sys.exit(f"bench: {name}: {cmd[0]} is not executable")

    conf = os.path.join(tmp, "conf.json")
    with open(conf, "w") as f:
        json.dump({"cniVersion": args.cni_version, "name": "bench", "type": "loopback"}, f)
    out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
    netns = {}
    for i, (name, _, add, _) in enumerate(variants):
        if add:
            netns[name] = f"skb-bench-{i}"
            sh("ip", "netns", "add", netns[name])

    samples = {name: ([], []) for name, _, _, _ in variants}
    for rnd in range(args.warmup + args.n):
        k = rnd % len(variants)
        for name, cmd, add, extra in variants[k:] + variants[:k]:
            env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **extra}
            if add:
                ns = netns[name]
                sh("ip", "-n", ns, "link", "set", "lo", "down")
                env.update(CNI_COMMAND="ADD", CNI_CONTAINERID=f"bench{rnd}", CNI_NETNS=f"/run/netns/{ns}",
                           CNI_IFNAME="lo", CNI_ARGS="", CNI_PATH=args.go_dir)
            line = sh(runner, conf, out, err, *cmd, env=env).split()
            wall_ns, rss_kb, status = int(line[0]), int(line[1]), int(line[2])
            if status != 0:
                with open(out) as fo, open(err) as fe:
                    sys.exit(f"bench: {name} failed (wait status {status})\nstdout: {fo.read()}\nstderr: {fe.read()}")
            if add:
                with open(out) as fo:
                    result = json.load(fo)
                flags = json.loads(sh("ip", "-j", "-n", netns[name], "link", "show", "lo"))[0]["flags"]
                if "UP" not in flags or result.get("cniVersion") != args.cni_version:
                    sys.exit(f"bench: {name}: lo not UP after ADD ({flags}) or wrong result {result}")
            if rnd >= args.warmup:
                samples[name][0].append(wall_ns / 1e6)
                samples[name][1].append(rss_kb)
    for ns in netns.values():
        subprocess.run(["ip", "netns", "del", ns], check=False)

    stats = {}
    for name, (times, rss) in samples.items():
        stats[name] = {"median_ms": statistics.median(times), "p25_ms": pct(times, 25), "p75_ms": pct(times, 75),
                       "p90_ms": pct(times, 90), "min_ms": min(times),
                       "rss_kb": max(rss), "rss_median_kb": statistics.median(rss), "n": len(times)}
    go = stats["go"]
    srv = (warmstart.servers(bin_dir) or [{}])[0]
    print(f"loopback ADD, cniVersion {args.cni_version}, n={args.n} after {args.warmup} warm-up rounds, "
          f"interleaved; ours = {bin_dir}")
    load = os.getloadavg()[0]
    if load > 0.5 * os.cpu_count():
        print(f"warning: load average {load:.1f} on {os.cpu_count()} CPUs while measuring: the numbers are noisy")
    print(f"{'variant':11} {'median ms':>10} {'p25-p75 ms':>13} {'p90 ms':>8} {'min ms':>8} {'peak RSS KB':>12} "
          f"{'time/go':>8} {'RSS/go':>7}")
    for name, s in stats.items():
        ref = stats["go VER"] if name.endswith("VER") else go
        print(f"{name:11} {s['median_ms']:10.2f} {s['p25_ms']:6.2f}-{s['p75_ms']:<6.2f} {s['p90_ms']:8.2f} {s['min_ms']:8.2f} "
              f"{s['rss_kb']:12d} {s['median_ms'] / ref['median_ms']:7.2f}x {s['rss_kb'] / ref['rss_kb']:6.2f}x")
    print("(warm: the launcher's own peak RSS; the call's child is measured by the server, below)")
    warmstart.report(bin_dir)
    w_ratio = stats["warm"]["median_ms"] / go["median_ms"]
    c_ratio = stats["cold"]["median_ms"] / go["median_ms"]
    v_ratio = stats["warm VER"]["median_ms"] / stats["go VER"]["median_ms"]
    r_ratio = stats["cold"]["rss_kb"] / go["rss_kb"]
    child_kb = srv.get("childFaultedKB")
    print(f"cold over `src -I -S` (the freezing's own cost): {stats['cold']['median_ms'] - stats['src -I -S']['median_ms']:+.2f} ms")
    bundle = os.path.realpath(os.path.join(bin_dir, ".skb"))
    size = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(bundle) for f in fs)
    print(f"sizes: bundle {os.path.basename(bundle)} {size / 1e6:.1f} MB, "
          f"launcher {os.path.getsize(os.path.join(bin_dir, 'loopback'))} bytes")
    verdict = []
    for label, ratio, target in (("warm ADD", w_ratio, TARGET_WARM), ("warm VERSION", v_ratio, TARGET_VERSION),
                                 ("cold ADD", c_ratio, TARGET_COLD), ("cold peak RSS", r_ratio, TARGET_RSS)):
        verdict.append(f"{label} median {ratio:.2f}x Go (target <= {target:g}x): " + ("ok" if ratio <= target else "MISSED"))
    if child_kb is not None:
        cr = child_kb / go["rss_kb"]
        verdict.append(f"warm call's own memory {child_kb} KB = {cr:.2f}x Go's peak RSS (target <= {TARGET_RSS:g}x): "
                       + ("ok" if cr <= TARGET_RSS else "MISSED") + f"; server RSS {srv.get('rssKB')} KB, shared")
    print("\n".join(verdict))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bin_dir": bin_dir, "stats": stats, "bundle_bytes": size, "warm_server": srv}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
