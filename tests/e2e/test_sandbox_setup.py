"""The e2e sandbox's set-up script mounts in an order that works whatever exists on the machine: a tmpfs
on /opt hides /opt/cni/bin (after `make install` it exists), so nothing may be mounted there before the
directory is made again on the tmpfs."""
import os
import shlex

import pytest

from tests.e2e import sandbox


def mount_plan(binds, existing):
    """[(tmpfs or bind, target)] of the set-up script, checking each target exists when it is mounted on:
    a dir exists if it exists on the machine and no tmpfs mounted above it hid it, or a mkdir made it."""
    dirs = set(existing)
    made = set()
    hidden_by = []
    plan = []
    for line in sandbox._setup_script(binds).splitlines():
        words = shlex.split(line)
        if words[:2] == ["mkdir", "-p"]:
            made.update(words[2:])
        elif words[:1] == ["mount"] and words[1] in ("-t", "--bind"):
            target = words[-1]
            visible = target in made or (target in dirs and not any(target.startswith(h + "/") for h in hidden_by))
            assert visible, f"{line!r}: {target} does not exist at this point"
            if words[1] == "-t":
                hidden_by.append(target)
                made = {m for m in made if not m.startswith(target + "/")}
            plan.append(("tmpfs" if words[1] == "-t" else "bind", target))
    return plan


@pytest.mark.parametrize("installed", [False, True], ids=["fresh", "after-make-install"])
def test_mounts_have_their_mount_points(monkeypatch, installed):
    existing = {"/run", "/var/lib", "/var/tmp", "/opt", "/etc/cni/net.d", "/usr/lib/cni"}
    if installed:
        existing.add("/opt/cni/bin")
    monkeypatch.setattr(os.path, "isdir", lambda d: d in existing)
    plan = mount_plan({"/opt/cni/bin": "/tmp/skb-test-bin.x"}, existing)
    assert ("tmpfs", "/opt") in plan and ("tmpfs", "/usr/lib/cni") in plan
    assert plan[-1] == ("bind", "/opt/cni/bin")
    assert ("tmpfs", "/opt/cni/bin") not in plan   # /opt's tmpfs already hides it
