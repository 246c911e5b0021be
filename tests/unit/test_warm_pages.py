"""Warm start's page arithmetic (skb/plugin/warm/pages.py): which learnt pages a spare may fault in."""
from hypothesis import given, strategies as st

from skb.plugin.warm import pages


def _pages(runs):
    return {p for first, n in runs for p in range(first, first + n)}


def test_within_examples():
    ranges = [(10, 20), (30, 40)]
    assert pages.within([(0, 5)], ranges) == []
    assert pages.within([(8, 30)], ranges) == [(10, 10), (30, 8)]
    assert pages.within([(12, 3), (19, 2), (39, 5)], ranges) == [(12, 3), (19, 1), (39, 1)]


def _sorted_disjoint(draw_list):
    out, at = [], 0
    for gap, size in draw_list:
        at += gap
        out.append((at, at + size))
        at += size
    return out


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 20)), max_size=8),
       st.lists(st.tuples(st.integers(0, 20), st.integers(1, 20)), max_size=8))
def test_within_is_the_intersection(runs, ranges):
    """Exactly the learnt pages that lie in a private writable mapping: no page outside one is touched."""
    runs = [(lo, hi - lo) for lo, hi in _sorted_disjoint(runs)]
    ranges = _sorted_disjoint(ranges)
    mapped = {p for lo, hi in ranges for p in range(lo, hi)}
    got = pages.within(runs, ranges)
    assert _pages(got) == _pages(runs) & mapped
    assert sum(n for _, n in got) == len(_pages(got))  # no page twice


def test_private_writable_reads_this_process(tmp_path):
    """Our own maps: a private writable mapping we make is listed, a shared one and a read-only one are not."""
    import mmap
    f = tmp_path / "f"
    f.write_bytes(b"\0" * 3 * mmap.PAGESIZE)
    with open(f, "r+b") as fh:
        shared = mmap.mmap(fh.fileno(), 0, mmap.MAP_SHARED)
        ro = mmap.mmap(fh.fileno(), 0, mmap.MAP_PRIVATE, mmap.PROT_READ)
        priv = mmap.mmap(-1, 3 * mmap.PAGESIZE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        import ctypes
        addr = {name: ctypes.addressof(ctypes.c_char.from_buffer(m)) >> 12 for name, m in (("shared", shared),
                                                                                          ("priv", priv))}
        # (a read-only mapping cannot be exported as a writable buffer: it is found in /proc/self/maps by path)
        ranges = pages.private_writable()
        inside = lambda page: any(lo <= page < hi for lo, hi in ranges)  # noqa: E731
        assert inside(addr["priv"])
        assert not inside(addr["shared"])
        with open("/proc/self/maps") as m:
            ro_pages = [int(line.split("-")[0], 16) >> 12 for line in m if line.rstrip().endswith(str(f))
                        and line.split()[1].startswith("r--p")]
        assert ro_pages and not any(inside(p) for p in ro_pages)
        shared.close()
        ro.close()
        priv.close()
