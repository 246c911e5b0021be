"""The frozen build as a node gets it: self-contained, immune to the runtime's LD_LIBRARY_PATH, installed
atomically and idempotently, relocatable, shipped as a tarball that extracts to a working bin dir, and
failing in CNI's own words when its bundle is gone.

SKB_BIN_DIR names an installed bin dir (tests/run builds and installs one into a temp dir).
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from tests.helpers import Run, cni_env, ip_json, run_plugin

pytestmark = pytest.mark.frozen

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = "/usr/bin/python3"
BUNDLE_PY = os.path.join(ROOT, "build", "bundle.py")
LOOPBACK_CONF = {"cniVersion": "1.0.0", "name": "frozen-test", "type": "loopback"}


def load_bundle_module():
    spec = importlib.util.spec_from_file_location("skb_build_bundle", BUNDLE_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bundle = load_bundle_module()


@pytest.fixture(scope="module")
def installed():
    return os.environ["SKB_BIN_DIR"]


def run_cmd(cmd, env, stdin=b""):
    if isinstance(stdin, dict):
        stdin = json.dumps(stdin).encode()
    proc = subprocess.run(cmd, env=env, input=stdin, capture_output=True, timeout=30)
    proc.stdout = proc.stdout.decode(errors="replace")
    proc.stderr = proc.stderr.decode(errors="replace")
    return Run(proc)


def install(src, dest):
    return subprocess.run([PY, BUNDLE_PY, "install", src, dest], check=True, capture_output=True, text=True).stdout


def bundle_dirs(path):
    return sorted(e for e in os.listdir(path) if bundle.BUNDLE_RE.match(e))


def assert_version_ok(run):
    assert run.rc == 0, run
    assert {"0.3.1", "1.0.0"} <= set(run.json["supportedVersions"]), run


def assert_loopback_added(run, netns):
    assert run.rc == 0, run
    assert run.json["cniVersion"] == "1.0.0"
    assert [i["name"] for i in run.json["interfaces"]] == ["lo"]
    assert "127.0.0.1/8" in [ip["address"] for ip in run.json["ips"]]
    assert "UP" in ip_json("link", "show", "lo", netns=netns)[0]["flags"]


def lo_is_down(netns):
    return "UP" not in ip_json("link", "show", "lo", netns=netns)[0]["flags"]


# ------------------------------------------------------------------------------------ 1. self-contained

@pytest.mark.kernel
def test_runs_in_a_root_holding_only_the_bin_dir_proc_and_the_netns(installed, make_netns, tmp_path):
    """No /usr, no /lib, no Python, no libc on the "node": the bin dir carries everything it needs."""
    root = tmp_path / "root"
    shutil.copytree(installed, root / "opt" / "cni" / "bin", symlinks=True)
    ns = make_netns("frozen")
    (root / "proc").mkdir()
    (root / "run" / "netns").mkdir(parents=True)
    (root / "run" / "netns" / ns).touch()
    mounts = []
    try:
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
        mounts.append(root / "proc")
        subprocess.run(["mount", "--bind", f"/run/netns/{ns}", str(root / "run" / "netns" / ns)], check=True)
        mounts.append(root / "run" / "netns" / ns)

        # What the plugin can see, proc aside: the bin dir and the netns file, nothing else.
        listing = sorted(str(p.relative_to(root)) for top in ("opt", "run") for p in (root / top).rglob("*")
                         if ".skb-" not in str(p))  # never walk the mounted /proc: processes come and go
        print("chroot contents (bundle dir elided):", *listing, sep="\n  ")
        assert sorted(os.listdir(root)) == ["opt", "proc", "run"]
        assert not any(p.startswith(("usr", "lib", "lib64", "bin", "sbin", "etc")) for p in listing)

        chroot = ["chroot", str(root), "/opt/cni/bin/loopback"]
        assert lo_is_down(ns)
        add = run_cmd(chroot, cni_env("ADD", netns=f"/run/netns/{ns}", ifname="lo"), LOOPBACK_CONF)
        assert_loopback_added(add, ns)
        assert_version_ok(run_cmd(chroot, cni_env("VERSION"), {"cniVersion": "1.0.0"}))
    finally:
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", str(m)], check=False)


# ---------------------------------------------------------------------------- 2. foreign LD_LIBRARY_PATH

@pytest.fixture
def poisoned_lib_dir(tmp_path):
    """A lib dir that breaks any ordinary dynamic program: an empty libc.so.6, and libm/libz/libpython
    names on copies of an unrelated library."""
    lib = tmp_path / "poison"
    lib.mkdir()
    (lib / "libc.so.6").write_bytes(b"")
    donor = "/usr/lib/x86_64-linux-gnu/libutil.so.1"
    libpython = "libpython%d.%d.so.1.0" % sys.version_info[:2]  # the one the bundle ships
    for name in ("libm.so.6", "libz.so.1", libpython, "libdl.so.2", "libpthread.so.0"):
        shutil.copyfile(donor, lib / name)
    broken = subprocess.run(["/bin/true"], env={"LD_LIBRARY_PATH": str(lib)}, capture_output=True)
    assert broken.returncode != 0, "the poisoned dir should break an ordinary dynamic program"
    return str(lib)


@pytest.mark.kernel
def test_foreign_ld_library_path_is_ignored(installed, make_netns, poisoned_lib_dir):
    ns = make_netns("frozen")
    ld = f"{poisoned_lib_dir}:"  # containerd's form: <opt>/lib plus an empty entry
    exe = os.path.join(installed, "loopback")
    add = run_plugin(exe, cni_env("ADD", netns=f"/run/netns/{ns}", ifname="lo", LD_LIBRARY_PATH=ld),
                     LOOPBACK_CONF)
    assert_loopback_added(add, ns)
    assert_version_ok(run_plugin(exe, cni_env("VERSION", LD_LIBRARY_PATH=ld), {"cniVersion": "1.0.0"}))


def test_every_applet_starts_frozen(installed):
    """Each applet's modules are in the bundle (none lost to an exclude): VERSION for the plugins."""
    names = bundle.applet_names()
    assert set(names) == set(bundle.launchers(installed))
    for name in names:
        exe = os.path.join(installed, name)
        if name == "skb":
            run = run_cmd([exe, "version"], cni_env("VERSION"))
            assert run.rc == 0 and "skb-cni" in run.stdout, run
        else:
            assert_version_ok(run_plugin(exe, cni_env("VERSION"), {"cniVersion": "1.0.0"}))


# ------------------------------------------------------------------ 3. install: idempotent, relocatable

def test_install_is_idempotent_and_leaves_other_files_alone(installed, tmp_path):
    dest = tmp_path / "opt-cni-bin"
    dest.mkdir()
    (dest / "bridge").write_bytes(b"#!/bin/sh\necho not ours\n")
    os.chmod(dest / "bridge", 0o755)
    (dest / ".hidden-other").write_text("keep")
    (dest / "some-dir").mkdir()
    (dest / "some-dir" / "f").write_text("keep too")

    install(installed, str(dest))
    first = {e: os.lstat(dest / e).st_ino for e in os.listdir(dest)}
    name = os.readlink(dest / ".skb")
    assert bundle_dirs(dest) == [name]

    out = install(installed, str(dest))
    assert "already installed" in out
    assert bundle_dirs(dest) == [name]
    # Nothing rewritten: same inodes for every launcher, the link and the bundle dir.
    assert {e: os.lstat(dest / e).st_ino for e in os.listdir(dest)} == first
    assert not [e for e in os.listdir(dest) if e.startswith(bundle.TMP_PREFIX)]
    assert (dest / "bridge").read_bytes() == b"#!/bin/sh\necho not ours\n"
    assert (dest / ".hidden-other").read_text() == "keep"
    assert (dest / "some-dir" / "f").read_text() == "keep too"
    assert_version_ok(run_plugin(str(dest / "loopback"), cni_env("VERSION"), {"cniVersion": "1.0.0"}))


def test_upgrade_swaps_the_link_and_keeps_only_the_previous_bundle(installed, tmp_path):
    dest = tmp_path / "bin"
    install(installed, str(dest))
    name = os.readlink(dest / ".skb")
    # Pretend the node runs an older release: its bundle dir is what .skb points at.
    old = ".skb-0.0.1-000000000000"
    shutil.copytree(dest / name, dest / old, symlinks=True)
    os.unlink(dest / ".skb")
    os.symlink(old, dest / ".skb")
    shutil.rmtree(dest / name)

    older = ".skb-0.0.0-000000000000"          # two releases back: nothing can still be running from it
    shutil.copytree(dest / old, dest / older, symlinks=True)

    install(installed, str(dest))
    assert os.readlink(dest / ".skb") == name
    # the previous release stays until the next upgrade (plugins started from it a moment ago still
    # load modules from it); the one before goes
    assert bundle_dirs(dest) == sorted([name, old])
    assert_version_ok(run_plugin(str(dest / "loopback"), cni_env("VERSION"), {"cniVersion": "1.0.0"}))


def test_an_incomplete_bundle_dir_is_replaced(installed, tmp_path):
    """A bundle dir with the right name but missing files (a cut tar extraction) is not trusted."""
    dest = tmp_path / "bin"
    install(installed, str(dest))
    name = os.readlink(dest / ".skb")
    os.unlink(dest / name / "skb-cni")
    install(installed, str(dest))
    assert bundle.verify(str(dest / name))
    assert_version_ok(run_plugin(str(dest / "loopback"), cni_env("VERSION"), {"cniVersion": "1.0.0"}))


def test_installed_tree_runs_from_a_copy_elsewhere(installed, tmp_path):
    """A DaemonSet writes /host/opt/cni/bin, the node runs /opt/cni/bin: nothing may name the install path."""
    first = tmp_path / "host" / "opt" / "cni" / "bin"
    install(installed, str(first))
    moved = tmp_path / "elsewhere" / "bin"
    shutil.copytree(first, moved, symlinks=True)
    shutil.rmtree(tmp_path / "host")
    assert not os.path.isabs(os.readlink(moved / ".skb"))
    assert_version_ok(run_plugin(str(moved / "loopback"), cni_env("VERSION"), {"cniVersion": "1.0.0"}))
    run = run_cmd([str(moved / "skb"), "version"], cni_env("VERSION"))
    assert run.rc == 0, run


# --------------------------------------------------------------------------------------- 4. the tarball

@pytest.mark.kernel
def test_tarball_extracts_to_a_working_bin_dir(installed, make_netns, tmp_path):
    tgz = tmp_path / "skb-cni-linux-amd64-vX.tgz"
    subprocess.run([PY, BUNDLE_PY, "dist", installed, str(tgz)], check=True, capture_output=True)
    with tarfile.open(tgz) as tar:
        members = tar.getmembers()
    assert all(m.name.startswith("./") and ".." not in m.name.split("/") for m in members)
    assert all(m.uid == 0 and m.gid == 0 for m in members)
    assert "." not in {m.name.rstrip("/") for m in members}, "must not carry (and chmod) the bin dir itself"
    names = [m.name[2:] for m in members]
    launchers = [names.index(a) for a in bundle.launchers(installed)]
    assert min(launchers) > max(i for i, n in enumerate(names) if n.startswith(".skb")), \
        "launchers are extracted after the bundle they name and the .skb link"

    dest = tmp_path / "opt" / "cni" / "bin"
    dest.mkdir(parents=True)
    (dest / "bridge").write_text("not ours")
    subprocess.run(["tar", "-xzf", str(tgz), "-C", str(dest)], check=True)
    assert (dest / "bridge").read_text() == "not ours"
    assert bundle.verify(str(dest / os.readlink(dest / ".skb")))

    ns = make_netns("frozen")
    add = run_plugin(str(dest / "loopback"), cni_env("ADD", netns=f"/run/netns/{ns}", ifname="lo"), LOOPBACK_CONF)
    assert_loopback_added(add, ns)


# ---------------------------------------------------------------------------------- 5. missing bundle

def test_missing_bundle_is_a_cni_error(installed, tmp_path):
    lonely = tmp_path.resolve() / "bin"  # the launcher reports its canonical path
    lonely.mkdir()
    shutil.copy2(os.path.join(installed, "loopback"), lonely / "loopback")
    run = run_plugin(str(lonely / "loopback"), cni_env("ADD"), LOOPBACK_CONF)
    assert run.rc == 1
    assert run.json == {"code": 999, "msg": f"skb-cni bundle missing: {lonely}/.skb",
                        "details": "reinstall skb-cni: extract its release tarball to a temporary dir and run its "
                                   "skb install (make install from a source tree)"}

    os.symlink(".skb-0.0.1-000000000000", lonely / ".skb")  # dangling link: same answer
    run = run_plugin(str(lonely / "loopback"), cni_env("VERSION"), {"cniVersion": "1.0.0"})
    assert run.rc == 1 and run.json["code"] == 999 and "bundle missing" in run.json["msg"], run


def test_bundle_without_its_loader_is_a_cni_error(installed, tmp_path):
    dest = tmp_path.resolve() / "bin"
    install(installed, str(dest))
    name = os.readlink(dest / ".skb")
    os.unlink(dest / name / "lib" / "ld-linux-x86-64.so.2")
    run = run_plugin(str(dest / "loopback"), cni_env("VERSION"), {"cniVersion": "1.0.0"})
    assert run.rc == 1
    assert run.json["code"] == 999
    assert run.json["msg"] == f"skb-cni bundle missing: {dest}/{name}/lib/ld-linux-x86-64.so.2"
