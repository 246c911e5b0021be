"""skb install as operators hit it in the field (review 15): files at a config's name that are not
regular files, a suite extracted under a restrictive umask, a stop while the API is asked again. Same fake
suites and helpers as test_installer.py."""
import os
import signal
import stat
import subprocess
import time

import pytest

from tests.integration.test_installer import CONF, install, node, read, rendered, skb  # noqa: F401 (fixtures)
from tests.integration.test_installer import api  # noqa: F401 (fixture)


@pytest.mark.parametrize("kind", ["dangling-link", "fifo", "link-to-dir"])
def test_a_broken_file_sorting_first_is_refused_as_the_doctor_names_it(skb, node, tmp_path, kind):
    """libcni passes over directories only: a dangling link, a FIFO or a link to a directory sorting first
    is a file it fails on (or blocks on), and so fails every network lookup. The installer sat behind each
    without a word."""
    os.makedirs(node.conf)
    first = os.path.join(node.conf, "05-x.conflist")
    if kind == "dangling-link":
        os.symlink(str(tmp_path / "nowhere"), first)
        why = "a dangling symbolic link"
    elif kind == "fifo":
        os.mkfifo(first)
        why = "not a regular file"
    else:
        os.mkdir(tmp_path / "adir")
        os.symlink(str(tmp_path / "adir"), first)
        why = "a directory"
    r = install(skb, node, node.v1)
    assert r.returncode == 1, r.stderr
    assert f"{first} is {why}; it comes before {CONF}" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(node.conf, CONF))
    r = install(skb, node, node.v1, "--force")
    assert r.returncode == 0 and "warning" in r.stderr, r.stderr
    # a real directory sorting first is one libcni passes over: nothing to say
    os.unlink(first)
    os.mkdir(first)
    r = install(skb, node, node.v1)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_a_fifo_at_our_configs_name_never_holds_the_installer(skb, node):
    """It blocked in open() for ever, --force or not, holding the conf dir's lock."""
    os.makedirs(node.conf)
    os.mkfifo(os.path.join(node.conf, CONF))
    r = install(skb, node, node.v1)
    assert r.returncode == 1 and "is not a regular file, not a configuration of network 'skb': refusing" in r.stderr
    r = install(skb, node, node.v1, "--force")
    assert r.returncode == 0, r.stderr
    assert read(os.path.join(node.conf, CONF)) == rendered("10.244.1.0/24")


def test_a_fifo_replacing_our_config_ends_a_wait_instead_of_holding_it(skb, node):
    """--wait's watch blocked in open() on it, and no longer heard SIGTERM."""
    args = [skb, "install", "--from", node.v1, "--bin-dir", node.bin, "--conf-dir", node.conf,
            "--pod-cidr", "10.244.1.0/24", "--wait", "--interval", "0.2"]
    p = subprocess.Popen(args, env={"PATH": os.environ["PATH"], "SKB_MTU": "1500"}, stderr=subprocess.PIPE, text=True)
    try:
        target = os.path.join(node.conf, CONF)
        deadline = time.monotonic() + 30
        while not os.path.exists(target) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.unlink(target)
        os.mkfifo(target)
        assert p.wait(timeout=20) == 1
        assert "is not a regular file" in p.stderr.read()
    finally:
        p.kill()
        p.wait()


def test_a_suite_extracted_under_a_restrictive_umask_installs(skb, node, tmp_path):
    """tar by a user under umask 027 leaves the suite's files 640 and its launchers 750: the copy did not
    match its MANIFEST's modes, the install failed blaming a replaced source, and left 24 MB aside."""
    ext = str(tmp_path / "ext")
    subprocess.run(f"mkdir {ext} && cd {node.v1} && tar -cf - . | (umask 027 && cd {ext} && tar --no-same-permissions "
                   "-xf -)", shell=True, check=True)
    bundle = os.readlink(os.path.join(ext, ".skb"))
    modes = {stat.S_IMODE(os.lstat(os.path.join(d, f)).st_mode)
             for d, _, fs in os.walk(os.path.join(ext, bundle)) for f in fs}
    assert modes and all(not m & 0o007 for m in modes), modes    # the test's own premise
    r = install(skb, node, ext)
    assert r.returncode == 0, r.stderr
    installed = os.path.join(node.bin, bundle)
    with open(os.path.join(installed, "MANIFEST")) as f:
        for line in f.read().splitlines():
            digest, mode, rel = line.split(" ", 2)
            if digest != "link":
                assert stat.S_IMODE(os.lstat(os.path.join(installed, rel)).st_mode) == int(mode, 8), line
    assert not [e for e in os.listdir(node.bin) if e.startswith(".skb-tmp")]


def test_an_altered_source_is_refused_and_leaves_nothing_aside(skb, node, tmp_path):
    ext = str(tmp_path / "ext")
    subprocess.run(["cp", "-a", node.v1, ext], check=True)
    bundle = os.readlink(os.path.join(ext, ".skb"))
    with open(os.path.join(ext, bundle, "MANIFEST")) as f:
        rel = f.read().splitlines()[0].split(" ", 2)[2]
    with open(os.path.join(ext, bundle, rel), "ab") as f:
        f.write(b"x")
    r = install(skb, node, ext)
    assert r.returncode == 1 and "does not match its MANIFEST" in r.stderr and "Extract the release again" in r.stderr
    assert not [e for e in os.listdir(node.bin) if e.startswith(".skb-tmp")]


@pytest.mark.kernel
def test_sigterm_while_the_api_is_asked_again_ends_the_wait(skb, node, api):
    """A node with no pod CIDR yet is asked again for up to --api-wait (300 s): SIGTERM waited for it all,
    past any pod's grace period."""
    api.nodes["node-1"] = {}
    args = [skb, "install", "--from", node.v1, "--bin-dir", node.bin, "--conf-dir", node.conf, "--wait",
            "--pod-cidr-from-api", "--service-account-dir", api.sa, "--node-name", "node-1"]
    p = subprocess.Popen(args, env={"PATH": os.environ["PATH"], "SKB_MTU": "1500", **api.env},
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not api.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert api.requests     # asked once: from here on it waits to ask again
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=5) == 1
        assert "stopped by SIGTERM while waiting for the Kubernetes API" in p.stderr.read()
        assert not os.path.exists(os.path.join(node.conf, CONF))
    finally:
        p.kill()
        p.wait()


def test_a_huge_file_sorting_first_is_named_without_being_read_whole(skb, node):
    """A 1.5 GB file before ours cost 8.9 s and 3.1 GB of memory at every --wait round (review 15)."""
    os.makedirs(node.conf)
    huge = os.path.join(node.conf, "00-huge.conf")
    with open(huge, "wb") as f:
        f.truncate(1 << 30)      # sparse: nothing written to disk
    r = install(skb, node, node.v1)
    assert r.returncode == 1 and f"{huge} is unreadable (larger than 4 MiB, which no network configuration is)" \
        in r.stderr, r.stderr


def test_a_source_listing_world_writable_modes_installs_at_most_755(skb, node, tmp_path):
    """A suite whose MANIFEST says 777 (or a build under umask 0) installed files anyone could rewrite."""
    ext = str(tmp_path / "ext")
    subprocess.run(["cp", "-a", node.v1, ext], check=True)
    bundle = os.path.join(ext, os.readlink(os.path.join(ext, ".skb")))
    manifest = os.path.join(bundle, "MANIFEST")
    lines = []
    with open(manifest) as f:
        for line in f.read().splitlines():
            digest, mode, rel = line.split(" ", 2)
            if digest != "link":
                os.chmod(os.path.join(bundle, rel), 0o777)
                mode = "777"
            lines.append(f"{digest} {mode} {rel}")
    with open(manifest, "w") as f:
        f.write("\n".join(lines) + "\n")
    r = install(skb, node, ext)
    assert r.returncode == 0, r.stderr
    installed = os.path.join(node.bin, os.path.basename(bundle))
    for dirpath, _, files in os.walk(installed):
        for name in files:
            mode = stat.S_IMODE(os.lstat(os.path.join(dirpath, name)).st_mode)
            assert mode & 0o022 == 0, (name, oct(mode))
    # and a file of the install made writable by others since is altered: a rerun repairs it
    victim = os.path.join(installed, lines[0].split(" ", 2)[2])
    os.chmod(victim, 0o777)
    assert install(skb, node, ext).returncode == 0
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o755


@pytest.mark.parametrize("flag", ["--template", "--pod-cidr-file"])
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_file_given_on_the_command_line_is_read_bounded_and_without_waiting(skb, node, tmp_path, flag, kind):
    """--template /dev/zero took the installer to 7.9 GB in 4 s; a FIFO held it for ever (review 15)."""
    path = tmp_path / "given"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)
    cidr = None if flag == "--pod-cidr-file" else "10.244.1.0/24"
    r = install(skb, node, node.v1, flag, str(path), cidr=cidr)
    assert r.returncode == 1 and f"{path}: not a regular file" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(node.conf, CONF))


def test_uninstall_names_why_the_file_at_our_name_is_not_ours(skb, node):
    """It said the file "holds network None"."""
    assert install(skb, node, node.v1).returncode == 0
    with open(os.path.join(node.conf, CONF), "w") as f:
        f.write('{"cniVersion": "1.0.0", "name": "skb", "plugins": [')
    r = subprocess.run([skb, "uninstall", "--bin-dir", node.bin, "--conf-dir", node.conf], capture_output=True,
                       text=True, env={"PATH": os.environ["PATH"]}, timeout=60)
    assert r.returncode == 1 and "is invalid JSON at line 1" in r.stderr and "None" not in r.stderr, r.stderr


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_what_the_installer_replaces_or_clears_in_the_bin_dir_is_logged(skb, node, kind):
    """A regular file or a directory at the .skb link's name, and an earlier install's leftovers, were
    replaced or removed without a word (review 15b)."""
    os.makedirs(node.bin)
    link = os.path.join(node.bin, ".skb")
    if kind == "file":
        with open(link, "w") as f:
            f.write("an operator's note\n")
    else:
        os.mkdir(link)
    leftover = os.path.join(node.bin, ".skb-tmp.4242.link")
    os.symlink("nowhere", leftover)
    r = install(skb, node, node.v1)
    assert r.returncode == 0, r.stderr
    assert f"install: replacing {link}: it was a {kind}, not the link to the bundle in use" in r.stderr, r.stderr
    assert f"install: removed {leftover} (left by an install that did not finish)" in r.stderr, r.stderr
    assert os.readlink(link) == os.readlink(os.path.join(node.v1, ".skb"))
    assert not os.path.lexists(leftover)
    r = install(skb, node, node.v1)
    assert r.returncode == 0 and "replacing" not in r.stderr and "did not finish" not in r.stderr, r.stderr
