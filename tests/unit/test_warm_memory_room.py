"""The room a warm server would have in its caller's memory cgroup (skb/plugin/warm/children.py): the
tightest limit of the cgroup and its ancestors, in the cgroup v2 and v1 layouts, written here as files."""
from skb.plugin.warm.children import memory_room


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_v2_the_tightest_ancestor_counts(tmp_path):
    root = tmp_path / "cg"
    _write(root / "a" / "memory.max", "max\n")
    _write(root / "a" / "memory.current", "1000\n")
    _write(root / "a" / "b" / "memory.max", str(100 << 20) + "\n")
    _write(root / "a" / "b" / "memory.current", str(70 << 20) + "\n")
    _write(root / "a" / "b" / "c" / "memory.max", str(500 << 20) + "\n")
    _write(root / "a" / "b" / "c" / "memory.current", str(10 << 20) + "\n")
    _write(tmp_path / "cgroup", "0::/a/b/c\n")
    assert memory_room(str(tmp_path / "cgroup"), str(root)) == 30 << 20


def test_v1_memory_controller_and_unlimited(tmp_path):
    root = tmp_path / "cg"
    _write(root / "memory" / "x" / "memory.limit_in_bytes", "9223372036854771712\n")   # unlimited
    _write(root / "memory" / "x" / "memory.usage_in_bytes", "5\n")
    _write(tmp_path / "cgroup", "12:cpu,cpuacct:/x\n7:memory:/x\n0::/\n")
    assert memory_room(str(tmp_path / "cgroup"), str(root)) is None
    _write(root / "memory" / "x" / "memory.limit_in_bytes", str(30 << 20) + "\n")
    assert memory_room(str(tmp_path / "cgroup"), str(root)) == (30 << 20) - 5


def test_nothing_readable_is_no_limit(tmp_path):
    assert memory_room(str(tmp_path / "missing"), str(tmp_path)) is None
    _write(tmp_path / "cgroup", "0::/gone\n")
    assert memory_room(str(tmp_path / "cgroup"), str(tmp_path / "cg")) is None
