"""Warm start's snapshot texts compared (skb/plugin/warm/snapshot.py): what the child's proof and the
refusal reasons rest on. The texts themselves come from build/warm_snapshot.c (tests/warm)."""
from skb.plugin.warm import snapshot

KEY = (b"skb-warm 3\nbundle /b\nns net 4:1\nroot 8:2\nUid:\t0\t0\t0\t0\nCapEff:\t01\n/proc/self/cgroup\n"
       b"0::/system.slice/containerd.service\nsid 5\nLANG unset\nadopt\n")
ADOPTED = b"pgid 5\nnice 0\nUmask:\t0022\nSigIgn:\t0000000000000000\nrlimits 1:2\nfd 0 9:9 2\nfd 1 9:8 1\n"


def test_split_and_fields():
    key, adopted = snapshot.split(KEY + ADOPTED)
    assert key == KEY and adopted == ADOPTED
    f = snapshot.fields(adopted)
    assert f[b"pgid"] == b"5" and f[b"Umask:"] == b"0022" and f[b"fd 0"] == b"9:9 2" and f[b"fd 1"] == b"9:8 1"


def test_expected_adds_what_pythons_start_up_ignores():
    exp = snapshot.fields(snapshot.expected(ADOPTED))
    assert int(exp[b"SigIgn:"], 16) == snapshot.PYTHON_IGNORES
    assert snapshot.expected(ADOPTED).replace(b"SigIgn:\t%016x" % snapshot.PYTHON_IGNORES, b"") == \
        ADOPTED.replace(b"SigIgn:\t0000000000000000", b"")


def test_reasons_name_the_differing_line():
    def reason(old, new):
        return snapshot.first_difference(KEY, KEY.replace(old, new)).split(":")[0]
    assert reason(b"ns net 4:1", b"ns net 4:3") == "ns-net"
    assert reason(b"0::/system.slice/containerd.service", b"0::/other") == "cgroup"
    assert reason(b"CapEff:\t01", b"CapEff:\t03") == "capabilities"
    assert reason(b"LANG unset", b"LANG=C") == "locale"
    assert reason(b"sid 5", b"sid 6") == "sid"
    assert snapshot.first_difference(ADOPTED, ADOPTED + b"fd 7 1:1 0\n").startswith("fd:")
    assert snapshot.first_difference(KEY, KEY) == "snapshot"


def test_fnv1a_is_the_launchers():
    """The 64-bit FNV-1a the launcher names a server's socket with (build/warm_snapshot.c: fnv1a)."""
    assert snapshot.fnv1a(b"") == "cbf29ce484222325"
    assert snapshot.fnv1a(b"a") == "af63dc4c8601ec8c"
