"""company.cgroup_alone: a server's cgroup holds nothing but its own processes (review 15: a caller that
makes a cgroup per call could not remove it while a server lived there). Laid out in a temporary dir as
the kernel lays out /proc/self/cgroup and the hierarchies (v1 and v2)."""
import os

from skb.plugin.warm import company


def layout(tmp_path, lines, procs):
    """/proc/self/cgroup's ``lines``; ``procs``: {dir under the root: cgroup.procs text}."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    cgfile = tmp_path / "cgroup"
    cgfile.write_text("\n".join(lines) + "\n")
    root = tmp_path / "fs"
    for d, text in procs.items():
        (root / d).mkdir(parents=True, exist_ok=True)
        (root / d / "cgroup.procs").write_text(text)
    return str(cgfile), str(root)


def test_v1_a_cgroup_of_ours_alone_in_one_hierarchy(tmp_path):
    cgfile, root = layout(tmp_path, ["9:name=systemd:/system.slice/rt.service", "8:pids:/calls/c1",
                                     "5:cpu,cpuacct:/"],
                          {"systemd/system.slice/rt.service": "100\n200\n", "pids/calls/c1": "200\n201\n",
                           "cpu/": "1\n100\n200\n"})
    assert company.cgroup_alone({"200", "201"}, cgfile, root)
    assert not company.cgroup_alone({"200"}, cgfile, root)          # 201 is someone else's


def test_v2_and_what_cannot_be_read(tmp_path):
    cgfile, root = layout(tmp_path, ["0::/system.slice/rt.service"], {"system.slice/rt.service": "100\n200\n"})
    assert not company.cgroup_alone({"200"}, cgfile, root)
    assert company.cgroup_alone({"100", "200"}, cgfile, root)
    assert not company.cgroup_alone({"200"}, str(tmp_path / "none"), root)   # no /proc/self/cgroup
    cgfile, root = layout(tmp_path / "b", ["0::/gone"], {})
    assert not company.cgroup_alone({"200"}, cgfile, root)                  # no such cgroup dir
    cgfile, root = layout(tmp_path / "c", ["0::/empty"], {"empty": ""})
    assert not company.cgroup_alone({"200"}, cgfile, root)                  # (not where we are)


def test_other_warm_servers_do_not_count(tmp_path):
    """A process named skb-warm (another server, or a spare) keeps no cgroup alive: this test's own pid
    stands for one only if its comm says so, which it does not."""
    me = str(os.getpid())
    cgfile, root = layout(tmp_path, ["0::/x"], {"x": f"200\n{me}\n"})
    assert not company.cgroup_alone({"200"}, cgfile, root)


def test_v2_beside_v1_on_a_hybrid_host(tmp_path):
    """The 0:: line's cgroup is under unified/ there: it was read under the root, found nowhere, and a
    server never ended in a v2 cgroup made for one call (review 15)."""
    cgfile, root = layout(tmp_path, ["8:pids:/", "0::/call"], {"pids": "1\n200\n", "unified/call": "200\n"})
    assert company.cgroup_alone({"200"}, cgfile, root)


def test_a_process_whose_main_thread_ended_is_still_seen_in_its_namespaces(monkeypatch):
    """Review 16: /proc/PID/ns is gone for a zombie leader while a thread lives on; the runtime then counted
    as absent, and a server left its IPC namespace with the runtime still there."""
    real_stat, real_listdir = os.stat, os.listdir

    def stat(path, *a, **k):
        if path.startswith("/proc/4242/ns/"):
            raise FileNotFoundError(path)
        if path.startswith("/proc/4242/task/4243/ns/"):
            return real_stat("/proc/self/ns/" + path.rsplit("/", 1)[1])
        return real_stat(path, *a, **k)

    def listdir(path):
        return ["4242", "4243"] if path == "/proc/4242/task" else real_listdir(path)
    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "listdir", listdir)
    assert company._ns("4242", "ipc") == company._ns("self", "ipc") is not None
