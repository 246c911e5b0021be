"""Whether a warm server may start in its caller's memory cgroup (skb/plugin/warm/children.py): the room
under the tightest limit of the cgroup and its ancestors, the inactive page cache not counted as used, in
the cgroup v2 and v1 layouts written here as files; and a cgroup that does not list the process (a cgroup
namespace over a mount from outside it) is refused, not read."""
from skb.plugin.warm.children import MIN_ROOM, memory_refusal

PID = 4242
MB = 1 << 20


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _v2(tmp_path, current=70 * MB, inactive=0, listed=True):
    root = tmp_path / "cg"
    _write(root / "cgroup.controllers", "cpu memory pids\n")
    _write(root / "a" / "memory.max", "max\n")
    _write(root / "a" / "memory.current", "1000\n")
    _write(root / "a" / "b" / "memory.max", str(100 * MB) + "\n")
    _write(root / "a" / "b" / "memory.current", f"{current}\n")
    _write(root / "a" / "b" / "memory.stat", f"anon 5\ninactive_file {inactive}\nactive_file 7\n")
    _write(root / "a" / "b" / "c" / "memory.max", str(500 * MB) + "\n")
    _write(root / "a" / "b" / "c" / "memory.current", str(10 * MB) + "\n")
    _write(root / "a" / "b" / "c" / "cgroup.procs", f"1\n{PID if listed else 7}\n")
    _write(tmp_path / "cgroup", "0::/a/b/c\n")
    return str(tmp_path / "cgroup"), str(root)


def test_v2_the_tightest_ancestor_counts(tmp_path):
    why = memory_refusal(*_v2(tmp_path), pid=PID)
    assert why == f"its memory cgroup has 30 MiB left (reclaimable page cache aside), below {MIN_ROOM >> 20} MiB"


def test_reclaimable_page_cache_is_not_use(tmp_path):
    assert memory_refusal(*_v2(tmp_path, current=95 * MB, inactive=60 * MB), pid=PID) is None


def test_a_cgroup_that_does_not_list_the_process_is_refused(tmp_path):
    cgroup, root = _v2(tmp_path, listed=False)
    assert memory_refusal(cgroup, root, pid=PID) == f"its memory cgroup is not where {cgroup} says"


def test_v1_memory_controller_and_unlimited(tmp_path):
    root = tmp_path / "cg"
    _write(root / "memory" / "x" / "memory.limit_in_bytes", "9223372036854771712\n")   # unlimited
    _write(root / "memory" / "x" / "memory.usage_in_bytes", "5\n")
    _write(root / "memory" / "x" / "cgroup.procs", f"{PID}\n")
    _write(tmp_path / "cgroup", "12:cpu,cpuacct:/x\n7:memory:/x\n0::/\n")
    assert memory_refusal(str(tmp_path / "cgroup"), str(root), pid=PID) is None
    _write(root / "memory" / "x" / "memory.limit_in_bytes", str(30 * MB) + "\n")
    _write(root / "memory" / "x" / "memory.stat", f"cache 9\ntotal_inactive_file {2 * MB}\n")
    # 30 MiB less (5 bytes less 2 MiB of inactive cache): 32 MiB less 5 bytes, 31 whole MiB
    assert "has 31 MiB left" in memory_refusal(str(tmp_path / "cgroup"), str(root), pid=PID)


def test_nothing_readable_is_no_limit(tmp_path):
    assert memory_refusal(str(tmp_path / "missing"), str(tmp_path), pid=PID) is None
