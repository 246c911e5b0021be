"""skb install / skb uninstall against temporary directories: what lands, reruns, upgrades, refusals,
--wait, and runs killed with SIGKILL at every step and at random instants: the bin dir and the conf dir
are never half-written, and a rerun completes.

The suites installed here are fake (a bundle dir of random bytes with its MANIFEST, launchers carrying
the launcher's marker), so the tests need no build; the ``skb`` that installs them is ``bin_dir``'s:
the frozen one when SKB_BIN_DIR is set, else the source tree. A last test installs the real frozen suite.
"""
import json
import os
import random
import signal
import subprocess
import time

import pytest

from skb.install import conflist
from skb.install import files
from tests.fake_kube_api import FakeAPI
from tests.helpers import cni_env, run_plugin

APPLETS = ("debug", "host-local", "loopback", "ptp", "skb")
CONF = "10-skb.conflist"


def make_suite(path, version, size=2 << 20, parts=4, applets=APPLETS, docs=False):
    """A staged bin dir: .skb-<version>-<hash>/ (random files + MANIFEST), the .skb link, and launchers
    whose bytes differ per version, each naming its bundle as build/bundle.py stage writes it. ``docs``:
    the bundle holds LICENSE and NOTICE, as a real one does."""
    rng = random.Random(version)
    work = os.path.join(path, ".work")
    os.makedirs(os.path.join(work, "_internal"))
    if docs:
        for doc in ("LICENSE", "NOTICE"):
            with open(os.path.join(work, doc), "w") as f:
                f.write(f"{doc} of skb-cni {version}\n")
    for i in range(parts):
        with open(os.path.join(work, "_internal", f"part{i}.so"), "wb") as f:
            f.write(rng.randbytes(size))
    with open(os.path.join(work, "skb-cni"), "wb") as f:
        f.write(b"\x7fELF fake " + version.encode())
    os.chmod(os.path.join(work, "skb-cni"), 0o755)
    lines = files.manifest_lines(work)
    with open(os.path.join(work, "MANIFEST"), "w") as f:
        f.write("\n".join(lines) + "\n")
    import hashlib
    name = f".skb-{version}-{hashlib.sha256(chr(10).join(lines).encode()).hexdigest()[:12]}"
    os.rename(work, os.path.join(path, name))
    os.symlink(name, os.path.join(path, ".skb"))
    for applet in applets:
        slot = name.encode() + bytes(files.BUNDLE_SLOT + 1 - len(name))
        with open(os.path.join(path, applet), "wb") as f:
            f.write(b"\x7fELF " + files.LAUNCHER_MARK + f" {applet} {version} ".encode() + b"x" * 20000
                    + files.BUNDLE_MARK + slot)
        os.chmod(os.path.join(path, applet), 0o755)
    return path


def tar_over(suite, bin_dir):
    """What extracting a release tarball over an install leaves: the suite's files copied in, nothing
    removed (GNU tar removes no file the archive does not hold)."""
    os.makedirs(bin_dir, exist_ok=True)
    subprocess.run(f"tar -C {suite} -cf - . | tar -C {bin_dir} -xf -", shell=True, check=True)


@pytest.fixture
def skb(bin_dir):
    return os.path.join(bin_dir, "skb")


@pytest.fixture
def node(tmp_path):
    """A node's dirs, two versions of the suite to install, and the template's rendering for two CIDRs."""
    class Node:
        bin = str(tmp_path / "opt" / "cni" / "bin")
        conf = str(tmp_path / "etc" / "cni" / "net.d")
        v1 = make_suite(str(tmp_path / "suite1"), "0.1.0")
        v2 = make_suite(str(tmp_path / "suite2"), "0.2.0")
    return Node


def run(skb, *args, env=None, timeout=60):
    e = {"PATH": os.environ["PATH"], "SKB_MTU": "1500"}   # the MTU tests below read it from a netns
    e.update(env or {})
    return subprocess.run([skb, *args], env=e, capture_output=True, text=True, timeout=timeout)


def install(skb, node, suite, *extra, env=None, cidr="10.244.1.0/24"):
    args = ["install", "--from", suite, "--bin-dir", node.bin, "--conf-dir", node.conf] + \
        (["--pod-cidr", cidr] if cidr else []) + list(extra)
    return run(skb, *args, env=env)


def rendered(cidr, mtu="1500"):
    return conflist.conf_bytes(conflist.render(conflist.DEFAULT_TEMPLATE, conflist.template_values(
        conflist.parse_pod_cidrs(cidr), {"MTU": mtu})))


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def assert_installed(node, suite, previous=None):
    """``suite`` is installed; ``previous`` (the suite before an upgrade) may keep its bundle, which stays
    until the next upgrade for plugins that started from it a moment before."""
    name = os.readlink(os.path.join(suite, ".skb"))
    entries = sorted(os.listdir(node.bin))
    if previous is not None:
        old = os.readlink(os.path.join(previous, ".skb"))
        entries = [e for e in entries if e != old]
    assert entries == sorted([".skb", name, *APPLETS])
    assert os.readlink(os.path.join(node.bin, ".skb")) == name
    assert files.verify(os.path.join(node.bin, name))
    for a in APPLETS:
        assert read(os.path.join(node.bin, a)) == read(os.path.join(suite, a))
        assert os.access(os.path.join(node.bin, a), os.X_OK)


def assert_consistent(node, suites, confs):
    """What a runtime could see right now is whole: the .skb link names a complete bundle of one of
    ``suites``; each launcher present is a complete launcher of one of them, and exists only once its
    bundle does; the conflist is absent or exactly one of ``confs``. Temporary names may be left over."""
    entries = os.listdir(node.bin) if os.path.isdir(node.bin) else []
    link = os.path.join(node.bin, ".skb")
    launchers = [e for e in entries if e in APPLETS]
    if os.path.lexists(link):
        name = os.readlink(link)
        assert name in [os.readlink(os.path.join(s, ".skb")) for s in suites]
        assert files.verify(os.path.join(node.bin, name)), f"{name} is incomplete but .skb names it"
    else:
        assert not launchers, "a launcher was installed before its bundle"
    for e in entries:
        if files.BUNDLE_RE.match(e):
            assert files.verify(os.path.join(node.bin, e)), f"{e}: a bundle under its final name is incomplete"
    for a in launchers:
        assert read(os.path.join(node.bin, a)) in [read(os.path.join(s, a)) for s in suites], f"{a} is half-written"
    path = os.path.join(node.conf, CONF)
    if os.path.exists(path):
        assert read(path) in confs, "the conflist is half-written"


# ------------------------------------------------------------------------------------ install, rerun, upgrade

def test_install_then_rerun_changes_nothing(skb, node):
    r = install(skb, node, node.v1)
    assert r.returncode == 0, r.stderr
    assert_installed(node, node.v1)
    conf_path = os.path.join(node.conf, CONF)
    assert read(conf_path) == rendered("10.244.1.0/24")
    assert os.listdir(node.conf) == [CONF]
    before = {p: os.stat(os.path.join(node.bin, p)).st_ino for p in os.listdir(node.bin)}
    conf_ino = os.stat(conf_path).st_ino

    r = install(skb, node, node.v1)
    assert r.returncode == 0, r.stderr
    assert "already installed" in r.stderr and "up to date" in r.stderr
    assert {p: os.stat(os.path.join(node.bin, p)).st_ino for p in os.listdir(node.bin)} == before
    assert os.stat(conf_path).st_ino == conf_ino  # not even rewritten: no inotify event for the runtime


def test_upgrade_switches_bundle_and_launchers_and_keeps_only_the_previous(skb, node):
    assert install(skb, node, node.v1).returncode == 0
    r = install(skb, node, node.v2, cidr="10.244.2.0/24")
    assert r.returncode == 0, r.stderr
    assert_installed(node, node.v2, previous=node.v1)
    v1 = os.readlink(os.path.join(node.v1, ".skb"))
    assert files.verify(os.path.join(node.bin, v1)), "the previous bundle stays for in-flight calls"
    assert install(skb, node, node.v1).returncode == 0          # the next upgrade: v2 is now the previous
    assert install(skb, node, node.v2, cidr="10.244.2.0/24").returncode == 0
    assert_installed(node, node.v2, previous=node.v1)


def test_install_removes_the_bundles_no_launcher_names(skb, node, tmp_path):
    """Releases extracted by tar one over the other leave every bundle behind; skb install removes those
    no launcher names (keeping the one .skb named until now for one more round), and keeps one that a
    launcher still names (here the applet "old-applet", which the newer releases no longer have)."""
    v3 = make_suite(str(tmp_path / "suite3"), "0.3.0")
    old = make_suite(str(tmp_path / "suite0"), "0.0.9", applets=("old-applet",))
    names = {s: os.readlink(os.path.join(s, ".skb")) for s in (old, node.v1, node.v2, v3)}
    for suite in (old, node.v1, node.v2):
        tar_over(suite, node.bin)
    assert sorted(e for e in os.listdir(node.bin) if files.BUNDLE_RE.match(e)) == sorted(
        names[s] for s in (old, node.v1, node.v2))
    assert files.launcher_bundle(os.path.join(node.bin, "ptp")) == names[node.v2]
    assert files.launcher_bundle(os.path.join(node.bin, "old-applet")) == names[old]

    r = install(skb, node, v3)
    assert r.returncode == 0, r.stderr
    kept = sorted(e for e in os.listdir(node.bin) if files.BUNDLE_RE.match(e))
    assert kept == sorted([names[v3], names[node.v2], names[old]])   # v1: nothing names it any more
    assert f"removed {os.path.join(node.bin, names[node.v1])} (no launcher uses it)" in r.stderr
    os.unlink(os.path.join(node.bin, "old-applet"))
    r = install(skb, node, v3)
    assert sorted(e for e in os.listdir(node.bin) if files.BUNDLE_RE.match(e)) == [names[v3]]
    assert_installed(node, v3)


def test_install_repairs_an_altered_bundle_and_a_truncated_launcher(skb, node):
    assert install(skb, node, node.v1).returncode == 0
    name = os.readlink(os.path.join(node.bin, ".skb"))
    with open(os.path.join(node.bin, name, "_internal", "part0.so"), "r+b") as f:
        f.truncate(100)
    with open(os.path.join(node.bin, "ptp"), "r+b") as f:
        f.truncate(10)
    assert install(skb, node, node.v1).returncode == 0
    assert_installed(node, node.v1)


def test_no_config(skb, node):
    r = install(skb, node, node.v1, "--no-config", cidr=None)
    assert r.returncode == 0, r.stderr
    assert_installed(node, node.v1)
    assert not os.path.exists(node.conf)


def test_template_and_set_and_pod_cidr_sources(skb, node, tmp_path):
    tpl = tmp_path / "t.template"
    tpl.write_text('{"cniVersion": "1.0.0", "name": "skb", "plugins": [{"type": "ptp", "mtu": ${MTU}, '
                   '"ipam": {"type": "host-local", "subnet": "${POD_CIDR}"}}]}')
    cidrs = tmp_path / "pod-cidrs"
    cidrs.write_text("10.244.7.0/24 fd00:7::/64")
    r = install(skb, node, node.v1, "--template", str(tpl), "--pod-cidr-file", str(cidrs), "--set", "MTU=1450",
                cidr=None)
    assert r.returncode == 0, r.stderr
    conf = json.loads(read(os.path.join(node.conf, CONF)))
    assert conf["plugins"][0] == {"type": "ptp", "mtu": 1450, "ipam": {"type": "host-local", "subnet": "10.244.7.0/24"}}

    r = install(skb, node, node.v1, env={"SKB_POD_CIDR": "10.244.8.0/24"}, cidr=None)
    assert r.returncode == 0, r.stderr
    assert read(os.path.join(node.conf, CONF)) == rendered("10.244.8.0/24")


# ------------------------------------------------------------------------------------ uninstall

def test_uninstall_removes_only_our_config_and_purge_only_our_launchers(skb, node):
    assert install(skb, node, node.v1).returncode == 0
    go_ptp = b"\x7fELF a Go plugin, not ours"
    with open(os.path.join(node.bin, "ptp"), "wb") as f:  # e.g. the Go ptp installed over ours since
        f.write(go_ptp)
    with open(os.path.join(node.bin, "bridge"), "wb") as f:
        f.write(b"\x7fELF Go bridge")
    r = run(skb, "uninstall", "--conf-dir", node.conf)
    assert r.returncode == 0, r.stderr
    assert os.listdir(node.conf) == [] and "not ready" in r.stderr
    assert sorted(os.listdir(node.bin))[:2] == [".skb", os.readlink(os.path.join(node.bin, ".skb"))]
    r = run(skb, "uninstall", "--conf-dir", node.conf)
    assert r.returncode == 0 and "already gone" in r.stderr

    r = run(skb, "uninstall", "--conf-dir", node.conf, "--purge", "--bin-dir", node.bin)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(node.bin)) == ["bridge", "ptp"] and read(os.path.join(node.bin, "ptp")) == go_ptp
    assert "kept" in r.stderr and "not an skb-cni launcher" in r.stderr


def test_uninstall_keep_config_keeps_it_with_or_without_purge(skb, node):
    assert install(skb, node, node.v1).returncode == 0
    conf = read(os.path.join(node.conf, CONF))
    r = run(skb, "uninstall", "--conf-dir", node.conf, "--bin-dir", node.bin, "--keep-config")
    assert r.returncode == 0, r.stderr
    assert read(os.path.join(node.conf, CONF)) == conf
    assert_installed(node, node.v1)
    r = run(skb, "uninstall", "--conf-dir", node.conf, "--bin-dir", node.bin, "--keep-config", "--purge")
    assert r.returncode == 0, r.stderr
    assert read(os.path.join(node.conf, CONF)) == conf
    assert not set(APPLETS) & set(os.listdir(node.bin))


def test_purge_removes_the_tarballs_docs_only_when_they_are_ours(skb, node, tmp_path):
    suite = make_suite(str(tmp_path / "suite3"), "0.3.0", size=1 << 10, docs=True)
    bundle = os.path.join(suite, os.readlink(os.path.join(suite, ".skb")))
    for ours, operators in ((True, False), (False, True)):
        bin_dir = str(tmp_path / f"bin-{ours}")
        tar_over(suite, bin_dir)
        for doc in ("LICENSE", "NOTICE"):          # what the release tarball puts beside the suite
            with open(os.path.join(bin_dir, doc), "wb") as f:
                f.write(read(os.path.join(bundle, doc)) if ours else b"the operator's own " + doc.encode())
        with open(os.path.join(bin_dir, "README.md"), "w") as f:
            f.write("# skb-cni\n\nCNI plugins\n" if ours else "# what is in this dir\n")
        r = run(skb, "uninstall", "--conf-dir", node.conf, "--purge", "--bin-dir", bin_dir)
        assert r.returncode == 0, r.stderr
        left = sorted(os.listdir(bin_dir))
        assert left == ([] if ours else ["LICENSE", "NOTICE", "README.md"]), left
        if operators:
            assert read(os.path.join(bin_dir, "LICENSE")) == b"the operator's own LICENSE"


def test_uninstall_refuses_another_networks_config_unless_forced(skb, node):
    os.makedirs(node.conf)
    with open(os.path.join(node.conf, CONF), "w") as f:
        json.dump({"name": "cbr0"}, f)
    r = run(skb, "uninstall", "--conf-dir", node.conf)
    assert r.returncode == 1 and "holds network 'cbr0', not 'skb': refusing to remove it" in r.stderr
    assert os.path.exists(os.path.join(node.conf, CONF))
    assert run(skb, "uninstall", "--conf-dir", node.conf, "--network", "cbr0").returncode == 0
    with open(os.path.join(node.conf, CONF), "w") as f:
        json.dump({"name": "cbr0"}, f)
    assert run(skb, "uninstall", "--conf-dir", node.conf, "--force").returncode == 0
    assert os.listdir(node.conf) == []


# ------------------------------------------------------------------------------------ --wait

def _run_waiting(skb, node, act, *extra):
    """``skb install --wait``: once the first install is done, ``act()``; then SIGTERM, which must end it
    with status 0. Its stderr."""
    args = [skb, "install", "--from", node.v1, "--bin-dir", node.bin, "--conf-dir", node.conf,
            "--pod-cidr", "10.244.1.0/24", "--wait", "--interval", "0.2", *extra]
    p = subprocess.Popen(args, env={"PATH": os.environ["PATH"]}, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        while not seen or "watching" not in seen[-1]:  # the first install is done
            seen.append(p.stderr.readline())
            assert seen[-1], f"skb install --wait ended: {''.join(seen)}"
        act()
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return "".join(seen) + p.stderr.read()


def test_wait_puts_back_what_goes_missing_and_stops_on_sigterm(skb, node):
    conf = os.path.join(node.conf, CONF)

    def remove_and_see_it_back():
        os.unlink(conf)
        os.unlink(os.path.join(node.bin, "loopback"))
        _wait_for(lambda: os.path.exists(conf) and os.path.exists(os.path.join(node.bin, "loopback")))
        assert_installed(node, node.v1)

    for uninstall_on_stop in (False, True):
        err = _run_waiting(skb, node, remove_and_see_it_back, *(["--uninstall-on-stop"] if uninstall_on_stop else []))
        assert "installing again" in err
        assert os.path.exists(conf) is not uninstall_on_stop, err


def test_wait_warns_once_when_a_file_of_our_network_name_comes_to_sort_first(skb, node):
    def shadow():
        with open(os.path.join(node.conf, "05-old.conflist"), "w") as f:
            json.dump({"cniVersion": "1.0.0", "name": "skb", "plugins": [{"type": "bridge"}]}, f)
        time.sleep(1.5)  # several checks

    err = _run_waiting(skb, node, shadow)
    assert err.count("05-old.conflist also defines network 'skb'") == 1, err
    assert read(os.path.join(node.conf, CONF)) == rendered("10.244.1.0/24")


def _wait_for(cond, timeout=20):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# ------------------------------------------------------------------------------------ killed half-way

CRASH_POINTS = ("bundle-copied", "link-made", "launcher-written", "config-half-written")


@pytest.mark.parametrize("point", CRASH_POINTS)
@pytest.mark.parametrize("upgrade", [False, True], ids=["fresh", "upgrade"])
def test_sigkill_at_each_step_leaves_whole_files_and_a_rerun_completes(skb, node, point, upgrade):
    old_conf, new_conf = rendered("10.244.1.0/24"), rendered("10.244.2.0/24")
    if upgrade:
        assert install(skb, node, node.v1).returncode == 0
    r = install(skb, node, node.v2, env={files.CRASH_ENV: point}, cidr="10.244.2.0/24")
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    assert_consistent(node, [node.v1, node.v2], [old_conf, new_conf])
    if point == "config-half-written":
        assert any(".skb-tmp." in e for e in os.listdir(node.conf)), "the kill landed mid-write"
    r = install(skb, node, node.v2, cidr="10.244.2.0/24")
    assert r.returncode == 0, r.stderr
    assert_installed(node, node.v2, previous=node.v1)
    assert os.listdir(node.conf) == [CONF] and read(os.path.join(node.conf, CONF)) == new_conf


def test_sigkill_at_random_instants(skb, node):
    """Upgrades back and forth, each SIGKILLed at a random instant of its run: after every kill what a
    runtime could see is whole; a final run completes."""
    suites = [node.v1, node.v2]
    confs = [rendered("10.244.1.0/24"), rendered("10.244.2.0/24")]
    start = time.monotonic()
    assert install(skb, node, node.v1).returncode == 0
    full = time.monotonic() - start
    rng = random.Random(1234)
    e = {"PATH": os.environ["PATH"]}
    killed = 0
    for i in range(16):
        target = i % 2 == 0
        args = [skb, "install", "--from", suites[target], "--bin-dir", node.bin, "--conf-dir", node.conf,
                "--pod-cidr", ["10.244.1.0/24", "10.244.2.0/24"][target]]
        p = subprocess.Popen(args, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0, full * 1.2))
        p.send_signal(signal.SIGKILL)
        killed += p.wait() == -signal.SIGKILL
        assert_consistent(node, suites, confs)
    assert killed >= 4, f"only {killed} of 16 runs were killed before finishing: the instants are too late"
    r = install(skb, node, node.v2, cidr="10.244.2.0/24")
    assert r.returncode == 0, r.stderr
    assert_installed(node, node.v2, previous=node.v1)


# ------------------------------------------------------------------------------------ the real frozen suite

@pytest.mark.frozen
def test_frozen_suite_installs_itself(tmp_path):
    """The frozen skb installs the suite it runs from (no --from), and the copy works."""
    frozen = os.environ["SKB_BIN_DIR"]
    dest, conf = str(tmp_path / "bin"), str(tmp_path / "net.d")
    r = run(os.path.join(frozen, "skb"), "install", "--bin-dir", dest, "--conf-dir", conf,
            "--pod-cidr", "10.244.1.0/24")
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(dest)) == sorted(os.listdir(frozen))
    v = run_plugin(os.path.join(dest, "loopback"), cni_env("VERSION"), {"cniVersion": "1.0.0"})
    assert v.rc == 0 and "1.0.0" in v.json["supportedVersions"]
    r = run(os.path.join(dest, "skb"), "uninstall", "--conf-dir", conf, "--purge", "--bin-dir", dest)
    assert r.returncode == 0, r.stderr
    assert os.listdir(dest) == [] and os.listdir(conf) == []


# ------------------------------------------------------------------------------------ what the node tells

@pytest.mark.kernel
def test_mtu_is_the_default_route_interfaces_unless_given(skb, node, make_netns):
    """In a netns standing for the node: an uplink of MTU 1380 (a veth pair, both ends in that netns) carries
    the default route, and a second default of a higher metric, MTU 9000, must not win; the conflist gets
    1380. --mtu and SKB_MTU override it; a netns without a default route gets 1500."""
    ns = make_netns("mtu")
    for cmd in (["link", "add", "up0", "mtu", "1380", "type", "veth", "peer", "name", "up0p", "mtu", "1380"],
                ["link", "set", "up0", "up"], ["link", "set", "up0p", "up"],
                ["addr", "add", "192.0.2.10/24", "dev", "up0"], ["route", "add", "default", "via", "192.0.2.1"],
                ["link", "add", "up1", "mtu", "9000", "type", "veth", "peer", "name", "up1p", "mtu", "9000"],
                ["link", "set", "up1", "up"], ["link", "set", "up1p", "up"],
                ["addr", "add", "198.51.100.10/24", "dev", "up1"],
                ["route", "add", "default", "via", "198.51.100.1", "metric", "500"]):
        subprocess.run(["ip", "-n", ns, *cmd], check=True)
    mtus = {link["ifname"]: link["mtu"] for link in json.loads(subprocess.run(
        ["ip", "-n", ns, "-j", "link", "show"], check=True, capture_output=True, text=True).stdout)}
    assert mtus["up0"] == 1380

    def installed_mtu(*extra, env=None, netns=ns):
        e = {"PATH": os.environ["PATH"], **(env or {})}
        cmd = ["install", "--from", node.v1, "--bin-dir", node.bin, "--conf-dir", node.conf, "--pod-cidr",
               "10.244.1.0/24", *extra]
        p = subprocess.run((["ip", "netns", "exec", netns] if netns else []) + [skb, *cmd], env=e,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return json.loads(read(os.path.join(node.conf, CONF)))["plugins"][0]["mtu"], p.stderr

    mtu, log = installed_mtu()
    assert mtu == 1380 and "MTU 1380, from up0" in log
    assert installed_mtu("--mtu", "1450")[0] == 1450
    assert installed_mtu(env={"SKB_MTU": "1400"})[0] == 1400
    bare = make_netns("nomtu")
    mtu, log = installed_mtu(netns=bare)
    assert mtu == 1500 and "no default route" in log
    p = run(skb, "install", "--from", node.v1, "--bin-dir", node.bin, "--conf-dir", node.conf, "--pod-cidr",
            "10.244.1.0/24", "--mtu", "big")
    assert p.returncode == 1 and "--mtu 'big': expected a number" in p.stderr


@pytest.fixture
def api(tmp_path):
    if not os.environ.get("SKB_SANDBOX"):
        pytest.skip("the fake API server listens only inside the sandbox (make test)")
    a = FakeAPI(str(tmp_path))
    yield a
    a.close()


@pytest.mark.kernel
def test_pod_cidrs_from_the_kubernetes_api(skb, node, api):
    """What the DaemonSet does without kubectl: GET its Node with the ServiceAccount's token over TLS checked
    against the ServiceAccount's CA, and install the node's spec.podCIDRs (dual stack)."""
    api.nodes["node-1"] = {"podCIDR": "10.244.7.0/24", "podCIDRs": ["10.244.7.0/24", "fd00:244:7::/64"]}
    flags = ["--pod-cidr-from-api", "--service-account-dir", api.sa]
    r = install(skb, node, node.v1, *flags, cidr=None, env={**api.env, "NODE_NAME": "node-1"})
    assert r.returncode == 0, r.stderr
    ranges = json.loads(read(os.path.join(node.conf, CONF)))["plugins"][0]["ipam"]["ranges"]
    assert ranges == [[{"subnet": "10.244.7.0/24"}], [{"subnet": "fd00:244:7::/64"}]]
    assert api.requests == [("/api/v1/nodes/node-1", "Bearer t0ken")]

    # A node whose CIDR is not allocated yet: asked again until it is.
    api.nodes["node-2"] = [{}, {"podCIDRs": []}, {"podCIDR": "10.244.9.0/24"}]
    r = install(skb, node, node.v1, *flags, "--node-name", "node-2", cidr=None, env=api.env)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("has no spec.podCIDRs yet") == 2 and "asking again" in r.stderr
    assert "10.244.9.0/24" in read(os.path.join(node.conf, CONF), "r")


@pytest.mark.kernel
@pytest.mark.parametrize("case, words", [
    ("forbidden", ["HTTP 403", "needs get on nodes", "ClusterRole"]),
    ("no-such-node", ["has no node 'node-x'", "spec.nodeName"]),
    ("wrong-ca", ["does not verify against"]),
    ("no-token", ["cannot read the ServiceAccount's token"]),
    ("no-node-name", ["no node name", "NODE_NAME"]),
    ("not-in-a-pod", ["KUBERNETES_SERVICE_HOST is not set"]),
    ("never-allocated", ["has no spec.podCIDRs yet", "--allocate-node-cidrs"]),
])
def test_pod_cidrs_from_the_api_failures_are_named(skb, node, api, tmp_path, case, words):
    api.nodes["node-1"] = {}
    env, flags = {**api.env, "NODE_NAME": "node-1"}, ["--pod-cidr-from-api", "--service-account-dir", api.sa,
                                                       "--api-wait", "0"]
    if case == "forbidden":
        api.status = 403
    elif case == "no-such-node":
        env["NODE_NAME"] = "node-x"
    elif case == "wrong-ca":
        other = tmp_path / "other.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "k"),
                        "-out", str(other), "-days", "2", "-subj", "/CN=other"], check=True, capture_output=True)
        with open(os.path.join(api.sa, "ca.crt"), "wb") as f:
            f.write(other.read_bytes())
    elif case == "no-token":
        os.unlink(os.path.join(api.sa, "token"))
    elif case == "no-node-name":
        env["NODE_NAME"] = ""
    elif case == "not-in-a-pod":
        env = {"NODE_NAME": "node-1"}
    r = install(skb, node, node.v1, *flags, cidr=None, env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(node.conf, CONF))
