"""host-local: our frozen plugin against Go's /usr/lib/cni/host-local, in one run.

    tests/sandbox /usr/bin/python3 bench/hostlocal.py [--bin-dir DIR] [-n 40]

host-local touches no network state (only its dataDir, a temporary directory here), so this needs no
namespace; `make bench` runs it in the sandbox with the others anyway. Three measurements:

1. ADD then DEL of one attachment, interleaved warm (as installed: served by the warm-start server),
   cold (SKB_WARM=0: every call by exec) and Go, medians with p25-p75 (target: warm <= 1.5x Go).
2. Flatness: ADD+DEL in a /16 that already holds 60,000 reservations vs in an empty one, warm, cold and
   Go, interleaved round by round; the ratio of each round's two (medians with p25-p75 of the rounds)
   (target: ours <= 1.5x of empty, and never slower than Go there). The reservations are written
   directly in the Go layout, as if another host-local had made them; the first call afterwards rebuilds
   our index (reported separately: it is paid once, not per call). Then 400 ADD+DELs in a row at
   60,000 (warm, 64-character ids), across the index journal's folds: median, mean, p99 and max.
3. GC over 1,000 and 10,000 reservations, half of them not valid any more (grows linearly).
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

GO = "/usr/lib/cni/host-local"


def conf(data_dir, subnet="10.1.0.0/16", version="1.0.0", **top):
    c = {"cniVersion": version, "name": "bench", "type": "host-local",
         "ipam": {"type": "host-local", "dataDir": data_dir, "ranges": [[{"subnet": subnet}]]}}
    c.update(top)
    return json.dumps(c).encode()


def call(exe, command, cid, stdin, extra=None):
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_IFNAME": "eth0", "CNI_NETNS": "/x",
           "CNI_PATH": os.path.dirname(exe), "CNI_ARGS": "", "PATH": "/usr/bin:/bin", **(extra or {})}
    t = time.perf_counter()
    p = subprocess.run([exe], input=stdin, env=env, capture_output=True)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"{exe} {command} {cid} failed: {p.stdout.decode()} {p.stderr.decode()}")
    return dt


def add_del(exe, stdin, cid, extra=None):
    return call(exe, "ADD", cid, stdin, extra) + call(exe, "DEL", cid, stdin, extra)


def median_ms(xs):
    return statistics.median(xs) * 1000


def fill(data_dir, n):
    """n reservations in the Go layout (a /16 from 10.1.0.2 on), last_reserved_ip.0 at the last one."""
    d = os.path.join(data_dir, "bench")
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        v = (10 << 24) | (1 << 16) | (i + 2)
        ip = f"{v >> 24}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}"
        with open(os.path.join(d, ip), "wb") as f:
            f.write(f"fill{i}\r\neth0".encode())
    with open(os.path.join(d, "last_reserved_ip.0"), "w") as f:
        f.write(ip)


def flatness(ours, n, tmp):
    from bench import warmstart
    full = {"ours": os.path.join(tmp, "full"), "go": os.path.join(tmp, "gofull")}
    for d in full.values():
        fill(d, 60000)
    t = time.perf_counter()
    call(ours, "ADD", "first", conf(full["ours"]))
    first = (time.perf_counter() - t) * 1000
    call(ours, "DEL", "first", conf(full["ours"]))
    variants = [("warm", ours, {}, "ours"), ("cold", ours, warmstart.COLD_ENV, "ours"), ("go", GO, {}, "go")]
    go_every = 4     # Go's calls at 60,000 take half a second each: one round in four
    ms = {(label, size): [] for label, *_ in variants for size in ("empty", "60k")}
    ratios = {label: [] for label, *_ in variants}
    for i in range(n):
        k = i % len(variants)
        for label, exe, extra, who in variants[k:] + variants[:k]:
            if who == "go" and i % go_every:
                continue
            order = [("empty", os.path.join(tmp, f"flat-{label}")), ("60k", full[who])]
            pair = {}
            for size, d in order[::-1] if i % 2 else order:
                pair[size] = add_del(exe, conf(d), f"f{label}{i}", extra) * 1000
                ms[(label, size)].append(pair[size])
            ratios[label].append(pair["60k"] / pair["empty"])
    print(f"ADD+DEL in an empty /16 vs one holding 60,000 reservations, interleaved ({n} rounds, Go every "
          f"{go_every}th), medians (p25-p75) ms; ratio: per round, median (p25-p75):")
    for label, *_ in variants:
        print(f"  {label:5} empty {warmstart.spread(ms[(label, 'empty')]):>22}   60,000 "
              f"{warmstart.spread(ms[(label, '60k')]):>24}   {warmstart.spread(ratios[label])}x")
    go60 = statistics.median(ms[("go", "60k")])
    for label in ("warm", "cold"):
        r = statistics.median(ratios[label])
        vs_go = statistics.median(ms[(label, "60k")]) / go60
        print(f"ours {label} at 60,000: {r:.2f}x its empty range (target <= 1.5x: {'ok' if r <= 1.5 else 'MISSED'}), "
              f"{vs_go:.3f}x Go at 60,000 (target <= 1x: {'ok' if vs_go <= 1 else 'MISSED'})")
    print(f"first call after foreign changes (index rebuild from 60,000 files): {first:.0f} ms")
    # many calls in a row: the index's journal is folded into a new base every few hundred calls
    skb = os.path.join(full["ours"], "bench", ".skb")
    names = set(os.listdir(skb))
    row, folds = [], 0
    for i in range(400):
        row.append(add_del(ours, conf(full["ours"]), f"{i:064x}") * 1000)   # ids as containerd makes them
        now = set(os.listdir(skb))
        folds += now != names
        names = now
    q = statistics.quantiles(row, n=100)
    print(f"ours warm, 400 ADD+DELs in a row at 60,000: median {statistics.median(row):.2f} ms, mean "
          f"{statistics.mean(row):.2f} ms, p99 {q[98]:.2f} ms, max {max(row):.2f} ms; {folds} journal folds")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default=os.environ.get("SKB_BIN_DIR", "dist/bin"))
    ap.add_argument("-n", type=int, default=40)
    opts = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bench import warmstart
    ours = os.path.join(opts.bin_dir, "host-local")
    for exe in (ours, GO):
        if not os.access(exe, os.X_OK):
            raise SystemExit(f"missing {exe}: run `make build` (ours) / `make deps` (Go's)")
    tmp = tempfile.mkdtemp(prefix="skb-bench-hl-")
    try:
        # 1. ADD+DEL, interleaved (order rotated)
        server = warmstart.ensure_server(opts.bin_dir, "host-local")
        variants = [("warm", ours, {}), ("cold", ours, warmstart.COLD_ENV), ("go", GO, {})]
        times = {label: [] for label, _, _ in variants}
        for label, exe, extra in variants:
            for i in range(3):
                add_del(exe, conf(os.path.join(tmp, label)), f"warm{i}", extra)
        for i in range(opts.n):
            k = i % len(variants)
            for label, exe, extra in variants[k:] + variants[:k]:
                times[label].append(add_del(exe, conf(os.path.join(tmp, label)), f"c{i}", extra))
        ms = {label: [t * 1000 for t in v] for label, v in times.items()}
        g = median_ms(times["go"])
        print(f"host-local ADD+DEL, n={opts.n}, medians (p25-p75) ms; warm-start server "
              f"{'pid ' + str(server['pid']) if server else 'none'}:")
        for label in ("warm", "cold", "go"):
            print(f"  {label:5} {warmstart.spread(ms[label]):>22}  {median_ms(times[label]) / g:.2f}x Go")
        w = median_ms(times["warm"]) / g
        print(f"warm ADD+DEL {w:.2f}x Go (target <= 1.5x): {'ok' if w <= 1.5 else 'MISSED'}")
        warmstart.report(opts.bin_dir)

        # 2. flatness in a /16 with 60,000 reservations
        flatness(ours, opts.n, tmp)

        # 3. GC over 1,000 and 10,000 reservations, half of them valid
        for n in (1000, 10000):
            d = os.path.join(tmp, f"gc{n}")
            fill(d, n)
            valid = [{"containerID": f"fill{i}", "ifname": "eth0"} for i in range(0, n, 2)]
            stdin = conf(d, version="1.1.0", **{"cni.dev/valid-attachments": valid})
            t = time.perf_counter()
            call(ours, "GC", "", stdin)
            dt = (time.perf_counter() - t) * 1000
            left = len([x for x in os.listdir(os.path.join(d, "bench")) if x[0].isdigit()])
            print(f"GC over {n} reservations ({n // 2} released): {dt:.0f} ms, {left} left")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
