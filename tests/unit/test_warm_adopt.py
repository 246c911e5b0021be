"""The order in which a warm child takes on its caller's priority and limits (skb/plugin/warm/adopt.py),
against a model of the kernel's rule without CAP_SYS_NICE (setpriority(2), getrlimit(2)): a process may
always lower its priority, and may raise it to nice n only while 20 - n <= its soft RLIMIT_NICE. Whether
the spare's own limit or the caller's is the one that allows the caller's priority, the child ends with
both of the caller's values."""
import os
import resource

import pytest

from skb.plugin.warm import adopt, snapshot


class Kernel:
    def __init__(self, nice, limit):
        self.nice, self.limit = nice, limit

    def setpriority(self, which, who, n):
        if n < self.nice and 20 - n > self.limit:
            raise PermissionError(13, "Permission denied")
        self.nice = n

    def setrlimit(self, r, pair):
        assert r == resource.RLIMIT_NICE  # (the only limit that differs below)
        self.limit = pair[0]


def _rlimits(nice_limit):
    pairs = [b"1024:4096"] * snapshot.NLIMITS
    pairs[resource.RLIMIT_NICE] = b"%d:40" % nice_limit
    return b" ".join(pairs)


def _adopt(monkeypatch, kernel, nice, limit):
    monkeypatch.setattr(os, "setpriority", kernel.setpriority)
    monkeypatch.setattr(resource, "setrlimit", kernel.setrlimit)
    have = {b"nice": b"%d" % kernel.nice, b"rlimits": _rlimits(kernel.limit)}
    want = {b"nice": b"%d" % nice, b"rlimits": _rlimits(limit)}
    adopt.Adopter(want, have).run({b"nice", b"rlimits"})


@pytest.mark.parametrize("own, callers", [(20, 0), (0, 20), (20, 20), (15, 0)])
def test_the_callers_priority_whichever_limit_allows_it(monkeypatch, own, callers):
    """(20, 0): only the spare's own limit allows nice 0 (set before the caller's lower limit); (0, 20):
    only the caller's (once more after it); (15, 0) lowers the priority: always allowed."""
    kernel = Kernel(5, own)
    nice = 0 if own != 15 else 7
    _adopt(monkeypatch, kernel, nice, callers)
    assert (kernel.nice, kernel.limit) == (nice, callers)


def test_a_priority_neither_limit_allows_is_a_refusal(monkeypatch):
    kernel = Kernel(5, 10)
    with pytest.raises(adopt.Refused) as e:
        _adopt(monkeypatch, kernel, 0, 12)
    assert str(e.value).startswith("nice") and kernel.nice == 5
