"""host-local under load and under SIGKILL: unique addresses, clean failures, a store that recovers.

Real processes, started together; real kills at random points of real calls. The store's files are the
oracle (reservation files read back by name and content)."""
import fcntl
import json
import os
import random
import signal
import subprocess
import time

import pytest

from tests.helpers import cni_env


def conf(data, ipam=None, version="1.0.0", **top):
    c = {"cniVersion": version, "name": "stress", "type": "host-local",
         "ipam": dict({"type": "host-local", "dataDir": str(data), "ranges": [[{"subnet": "10.7.0.0/24"}]]},
                      **(ipam or {}))}
    c.update(top)
    return json.dumps(c).encode()


def start(exe, command, cid, stdin):
    p = subprocess.Popen([exe], env=cni_env(command, containerid=cid, netns="/x"), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(stdin)
    p.stdin.close()
    return p


def finish(p):
    out = p.stdout.read()
    p.wait(timeout=60)
    p.stdout.close()
    p.stderr.close()
    return p.returncode, json.loads(out) if out.strip() else None


def reservations(d):
    """{ip name: content} of every file named like an address."""
    out = {}
    for n in os.listdir(d):
        if n != "lock" and not n.startswith(("last_reserved_ip.", ".")):
            out[n] = (d / n).read_bytes()
    return out


@pytest.mark.parametrize("capacity", [60, 253])
def test_100_concurrent_adds(bin_dir, tmp_path, capacity):
    exe = os.path.join(bin_dir, "host-local")
    ipam = {"ranges": [[{"subnet": "10.7.0.0/24", "rangeEnd": f"10.7.0.{capacity + 1}"}]]}
    stdin = conf(tmp_path, ipam)
    procs = [start(exe, "ADD", f"c{i}", stdin) for i in range(100)]
    results = [finish(p) for p in procs]
    ok = [r for rc, r in results if rc == 0]
    failed = [r for rc, r in results if rc != 0]
    addrs = [r["ips"][0]["address"] for r in ok]
    assert len(addrs) == len(set(addrs)) == min(100, capacity)
    assert len(failed) == 100 - len(ok)
    for r in failed:
        assert r["code"] == 100 and "no IP addresses available" in r["msg"], r
    files = reservations(tmp_path / "stress")
    assert sorted(f"{n}/24" for n in files) == sorted(addrs)          # the disk agrees with the results
    owners = [c.split(b"\r\n")[0] for c in files.values()]
    assert len(owners) == len(set(owners))


def test_sigkill_at_any_point_leaves_a_store_that_recovers(bin_dir, tmp_path):
    exe = os.path.join(bin_dir, "host-local")
    capacity = 40
    ipam = {"ranges": [[{"subnet": "10.7.0.0/24", "rangeEnd": f"10.7.0.{capacity + 1}"}]]}
    stdin = conf(tmp_path, ipam)
    gc_stdin = conf(tmp_path, ipam, version="1.1.0", **{"cni.dev/valid-attachments": []})
    started = time.perf_counter()
    assert finish(start(exe, "ADD", "warm", stdin))[0] == 0
    duration = time.perf_counter() - started
    rng = random.Random(1234)
    used = ["warm"]
    lock = os.open(tmp_path / "stress" / "lock", os.O_RDONLY)
    for i in range(120):
        command = rng.choice(["ADD", "ADD", "DEL", "GC"])
        cid = f"k{rng.randrange(20)}"
        used.append(cid)
        if i % 2:  # half the kills land anywhere in the call
            p = start(exe, command, cid, gc_stdin if command == "GC" else stdin)
            time.sleep(rng.uniform(0, duration * 1.2))
        else:      # the other half inside the store's critical section: the call waits for our lock first
            fcntl.flock(lock, fcntl.LOCK_EX)
            p = start(exe, command, cid, gc_stdin if command == "GC" else stdin)
            time.sleep(duration * 1.5)
            fcntl.flock(lock, fcntl.LOCK_UN)
            time.sleep(rng.uniform(0, 0.003))
        p.send_signal(signal.SIGKILL)
        finish(p)
    os.close(lock)
    d = tmp_path / "stress"
    for name, content in reservations(d).items():      # nothing torn: every reservation names its owner
        cid, sep, ifname = content.partition(b"\r\n")
        assert sep and cid and ifname == b"eth0", (name, content)
    # The runtime DELs every attachment whose ADD it saw fail; then the whole range is allocatable again.
    for cid in set(used):
        rc, out = finish(start(exe, "DEL", cid, stdin))
        assert rc == 0, out
    assert reservations(d) == {}
    assert os.listdir(d / ".skb" / "tmp") == []
    got = []
    for i in range(capacity + 1):
        rc, out = finish(start(exe, "ADD", f"new{i}", stdin))
        if rc == 0:
            got.append(out["ips"][0]["address"])
        else:
            assert out["code"] == 100
    assert len(got) == len(set(got)) == capacity


@pytest.mark.gobin
def test_go_and_ours_at_once_on_one_store(bin_dir, tmp_path):
    """Both plugins ADD into one dataDir concurrently (a node switching over under load): every address
    is unique, each sees the other's reservations, and DEL through the other plugin empties the store."""
    ours = os.path.join(bin_dir, "host-local")
    go = "/usr/lib/cni/host-local"
    stdin = conf(tmp_path)
    procs = [start(ours if i % 2 else go, "ADD", f"m{i}", stdin) for i in range(60)]
    results = [finish(p) for p in procs]
    assert all(rc == 0 for rc, _ in results), results
    addrs = [r["ips"][0]["address"] for _, r in results]
    assert len(set(addrs)) == 60
    for i in range(60):                    # each attachment DELeted by the plugin that did not add it
        rc, out = finish(start(go if i % 2 else ours, "DEL", f"m{i}", stdin))
        assert rc == 0, out
    assert reservations(tmp_path / "stress") == {}
    for i in range(0, 60, 2):              # and ours, added again, finds no stale state
        rc, out = finish(start(ours, "ADD", f"m{i}", stdin))
        assert rc == 0
    assert len(reservations(tmp_path / "stress")) == 30


def test_concurrent_add_del_across_journal_folds(bin_dir, tmp_path):
    """Four workers ADD and DEL their own attachments at once, long enough (ids of 200 characters) for
    the index's journal to be folded several times meanwhile: no address is ever held twice, and at the
    end the index (parsed from its bytes) agrees with the reservation files, in one index file."""
    import threading

    from tests.unit.test_hostlocal_index import disk, index_files, parsed
    exe = os.path.join(bin_dir, "host-local")
    stdin = conf(tmp_path)
    held, clashes, failures = {}, [], []
    guard = threading.Lock()

    def worker(w):
        for _ in range(14):    # three attachments held at once, then released
            mine = []
            for j in range(3):
                cid = f"w{w}-{j}-" + "x" * 200
                rc, out = finish(start(exe, "ADD", cid, stdin))
                if rc != 0:
                    failures.append(out)
                    return
                addr = out["ips"][0]["address"]
                with guard:
                    if addr in held:
                        clashes.append((addr, held[addr], cid))
                    held[addr] = cid
                mine.append((addr, cid))
            for addr, cid in mine:
                with guard:
                    del held[addr]
                rc, out = finish(start(exe, "DEL", cid, stdin))
                if rc != 0:
                    failures.append(out)
                    return

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [] and clashes == []
    d = str(tmp_path / "stress")
    assert disk(d) == {} and parsed(d)[2] == {} and len(index_files(d)) == 1
    for w in range(4):
        assert finish(start(exe, "ADD", f"again{w}", stdin))[0] == 0
    assert parsed(d)[2] == disk(d) and len(disk(d)) == 4
