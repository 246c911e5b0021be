"""Page learning: which pages calls' children write, so that a spare faults them in before its call.

A copy-on-write fault costs about 1.5 us a page here, and a call's child takes a few hundred of them;
a spare that has faulted those pages in ahead (MADV_POPULATE_WRITE, Linux 5.14+) spends that time before
its call instead of during it. Some spares learn instead (they do not prefault): once their call has
its answer they report the pages their process wrote, read from /proc/self/pagemap (docs/WARM.md).
"""
import array
import os
import struct

from skb.plugin.warm import snapshot

PAGE_SHIFT = 12         # x86_64 pages (4 KiB)
PREFAULT_STEP = 32      # pages (a system call counted as one) faulted in between two looks for a call
HOT_MAX = 2048          # pages a spare faults in ahead of its call, at most (8 MB: 2x a Go plugin's RSS)
LEARN_FIRST, LEARN_EVERY = 8, 64  # which spares learn: the first ones, then every 64th
PM_PRESENT, PM_EXCLUSIVE = 1 << 63, 1 << 56  # /proc/self/pagemap: the page is there and mapped only here


def learns(made):
    """Whether the ``made``-th spare of a server learns (reports its pages) rather than prefaults."""
    return made <= LEARN_FIRST or made % LEARN_EVERY == 0


class Learnt:
    """The union of the pages children reported (at most HOT_MAX), as sorted (first page, count) runs."""
    __slots__ = ("pages", "runs")

    def __init__(self):
        self.pages = set()
        self.runs = ()

    def add(self, data):
        """Add a child's report (packed page numbers). Past HOT_MAX (the server's memory moved on, or
        calls differ widely), start again from this report."""
        if len(data) % 8 or len(data) // 8 > HOT_MAX:
            return
        before = len(self.pages)
        pages = struct.unpack(f"<{len(data) // 8}Q", data)
        self.pages.update(pages)
        if len(self.pages) > HOT_MAX:
            self.pages = set(pages)
        elif len(self.pages) == before:
            return
        runs = []
        for p in sorted(self.pages):
            if runs and runs[-1][0] + runs[-1][1] == p:
                runs[-1][1] += 1
            else:
                runs.append([p, 1])
        self.runs = tuple((a, n) for a, n in runs)


def private_writable():
    """(first page, end page) of this process's private writable mappings, but the kernel's own
    ([vsyscall], [vvar], [vdso]), in address order, from /proc/self/maps."""
    out = []
    with open("/proc/self/maps", "rb") as f:
        lines = f.read().splitlines()
    for line in lines:
        m = line.split()
        if len(m) < 5 or m[1][1:2] != b"w" or m[1][3:4] != b"p" or (len(m) > 5 and m[5].startswith(b"[v")):
            continue
        out.append(tuple(int(x, 16) >> PAGE_SHIFT for x in m[0].split(b"-")))
    return out


def within(runs, ranges):
    """The parts of the (first, count) page runs that lie inside the (first, end) ranges; both sorted."""
    out, i = [], 0
    for first, count in runs:
        end = first + count
        while i < len(ranges) and ranges[i][1] <= first:
            i += 1
        j = i
        while j < len(ranges) and ranges[j][0] < end:
            lo, hi = max(first, ranges[j][0]), min(end, ranges[j][1])
            if lo < hi:
                out.append((lo, hi - lo))
            j += 1
    return out


def written():
    """Page numbers of this process's private writable memory that only it maps (written since the fork,
    or new), packed: what /proc/self/pagemap says (present and exclusively mapped). Nothing when there are
    more than HOT_MAX of them: such a call is not one to prepare the next ones for."""
    out = []
    fd = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    try:
        want = PM_PRESENT | PM_EXCLUSIVE
        for lo, hi in private_writable():
            data = os.pread(fd, (hi - lo) * 8, lo * 8)
            out += [lo + i for i, v in enumerate(memoryview(data).cast("Q")) if v & want == want]
            if len(out) > HOT_MAX:
                return b""
    finally:
        os.close(fd)
    return struct.pack(f"<{len(out)}Q", *out)


def prefault(runs):
    """Fault in, writable, the learnt pages that lie in this process's own private writable mappings now
    (what the server has since unmapped, or mapped again shared or read-only, is never touched), about
    PREFAULT_STEP pages per step (a generator: the caller looks for a call between steps). The steps run
    in C (skb_warm_prefault): a few hundred runs, one system call each, with no Python between them."""
    todo = within(runs, private_writable())
    flat = array.array("Q", [x for run in todo for x in run])
    address, _ = flat.buffer_info()
    step = snapshot.library().skb_warm_prefault
    at = 0
    while at < len(todo):
        at = step(address, len(todo), at, PREFAULT_STEP)
        yield
