"""skb install / skb uninstall refusing what cannot work, before anything is written: bad pod CIDRs, MTUs
and names, a conf dir that is no directory, another network's config at our name or sorting before it
(our own network's name included), a full disk. Same fake suites and helpers as test_installer.py."""
import json
import os
import subprocess

import pytest

from tests.integration.test_installer import CONF, install, node, read, rendered, run, skb  # noqa: F401 (fixtures)


@pytest.mark.parametrize("args, env, words", [
    ([], {}, "${POD_RANGES}, which has no value (give the node's pod CIDR"),
    (["--pod-cidr", "10.244.1.1/24"], {}, "--pod-cidr: '10.244.1.1/24' is not a network"),
    ([], {"SKB_POD_CIDR": "nonsense"}, "SKB_POD_CIDR: 'nonsense' has no prefix length"),
    (["--pod-cidr-file", "/nonexistent/cidrs"], {}, "cannot read the pod CIDR file /nonexistent/cidrs"),
    (["--template", "/nonexistent/t"], {}, "cannot read the template /nonexistent/t"),
    (["--pod-cidr", "10.0.0.0/24", "--set", "bad"], {}, "--set 'bad': expected NAME=VALUE"),
    (["--pod-cidr", "10.244.1.0/32"], {}, "--pod-cidr: 10.244.1.0/32 is too small: host-local needs a gateway "
                                          "and at least one pod address, so at most a /30"),
    (["--pod-cidr", "10.244.1.0/31"], {}, "10.244.1.0/31 is too small"),
    (["--pod-cidr", "fd00::/128"], {}, "--pod-cidr: fd00::/128 is too small"),
    (["--pod-cidr", "0.0.0.0/0"], {}, "--pod-cidr: 0.0.0.0/0 is every address"),
    (["--pod-cidr", "::/0"], {}, "--pod-cidr: ::/0 is every address"),
    (["--pod-cidr", "240.0.0.0/24"], {}, "reserved (class E)"),
    (["--pod-cidr", "127.0.0.0/24"], {}, "overlaps 127.0.0.0/8, loopback"),
    (["--pod-cidr", "10.0.0.0/24", "--set", "MTU=99999"], {}, "--set MTU '99999': expected a number from 68 to 65535"),
    (["--pod-cidr", "10.0.0.0/24", "--mtu", "9"], {}, "--mtu '9': expected a number from 68 to 65535"),
    (["--pod-cidr", "10.0.0.0/24"], {"SKB_MTU": "abc"}, "SKB_MTU 'abc': expected a number from 68 to 65535"),
    (["--pod-cidr", "10.0.0.0/24", "--conf-name", "10-skb.txt"], {}, "--conf-name '10-skb.txt': the runtime reads "
                                                                     "a network list only from a name ending in .conflist"),
    (["--pod-cidr", "10.0.0.0/24", "--conf-name", "../escaped.conflist"], {},
     "--conf-name '../escaped.conflist': expected a plain file name in the conf dir"),
    (["--pod-cidr", "10.0.0.0/24", "--conf-name", ""], {}, "--conf-name '': expected a plain file name"),
])
def test_bad_input_is_refused_before_anything_is_written(skb, node, args, env, words):
    r = install(skb, node, node.v1, *args, env=env, cidr=None)
    assert r.returncode == 1
    assert words in r.stderr, r.stderr
    assert not os.path.exists(node.bin) and not os.path.exists(node.conf)
    assert not os.path.exists(os.path.join(os.path.dirname(node.conf), "escaped.conflist"))


@pytest.mark.parametrize("make, words", [
    (lambda p: open(p, "w").close(), "is a regular file, not a directory"),
    (lambda p: os.symlink(p + "-nowhere", p), "is a dangling symbolic link, not a directory"),
])
def test_a_conf_dir_that_is_no_directory_is_named(skb, node, make, words):
    os.makedirs(os.path.dirname(node.conf))
    make(node.conf)
    r = install(skb, node, node.v1)
    assert r.returncode == 1 and f"--conf-dir {node.conf} {words}" in r.stderr, r.stderr
    r = run(skb, "uninstall", "--conf-dir", node.conf)
    assert r.returncode == 1 and f"--conf-dir {node.conf} {words}" in r.stderr, r.stderr
    assert not os.path.isdir(node.conf)


def test_uninstall_refuses_a_conf_name_outside_the_conf_dir(skb, node):
    os.makedirs(node.conf)
    outside = os.path.join(os.path.dirname(node.conf), "escaped.conflist")
    with open(outside, "w") as f:
        json.dump({"name": "skb"}, f)
    r = run(skb, "uninstall", "--conf-dir", node.conf, "--conf-name", "../escaped.conflist")
    assert r.returncode == 1 and "expected a plain file name in the conf dir" in r.stderr, r.stderr
    assert os.path.exists(outside)


@pytest.fixture
def small_fs(tmp_path):
    """A 1 MiB tmpfs (inside the sandbox's mount namespace): too small for a suite."""
    path = str(tmp_path / "full")
    os.makedirs(path)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "skb-test-full", path], check=True)
    yield path
    subprocess.run(["umount", path], check=True)


@pytest.mark.kernel
def test_a_full_disk_is_named_and_leaves_no_temporary_files(skb, node, small_fs, tmp_path):
    r = run(skb, "install", "--from", node.v1, "--bin-dir", small_fs, "--no-config")
    assert r.returncode == 1
    assert "No space left on device" in r.stderr and f"{small_fs}/.skb-tmp." in r.stderr, r.stderr
    assert "None" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert os.listdir(small_fs) == []
    # a config that does not fit either: named, no temporary file left
    with open(os.path.join(small_fs, "filler"), "wb") as f:
        with pytest.raises(OSError):
            while True:
                f.write(b"x" * 65536)
                f.flush()
    r = run(skb, "install", "--from", node.v1, "--bin-dir", str(tmp_path / "bin"), "--conf-dir", small_fs,
            "--pod-cidr", "10.244.1.0/24")
    assert r.returncode == 1 and "No space left on device" in r.stderr, r.stderr
    assert os.listdir(small_fs) == ["filler"]


def test_from_is_required_outside_a_frozen_suite(skb, node, bin_dir):
    if os.environ.get("SKB_BIN_DIR"):
        pytest.skip("the frozen skb defaults --from to its own suite (test_frozen_suite_installs_itself)")
    r = run(skb, "install", "--bin-dir", node.bin, "--no-config")
    assert r.returncode == 1 and "--from DIR is required" in r.stderr


def test_missing_suite_is_named(skb, node, tmp_path):
    r = install(skb, node, str(tmp_path))
    assert r.returncode == 1 and "holds no skb-cni suite" in r.stderr


# ------------------------------------------------------------------------------------ another network's config

def test_refuses_to_overwrite_another_networks_config_unless_forced(skb, node):
    os.makedirs(node.conf)
    other = json.dumps({"cniVersion": "0.3.1", "name": "cbr0", "plugins": [{"type": "flannel"}]}).encode()
    with open(os.path.join(node.conf, CONF), "wb") as f:
        f.write(other)
    r = install(skb, node, node.v1)
    assert r.returncode == 1
    assert f"{CONF} holds network 'cbr0', not 'skb': refusing to overwrite it" in r.stderr and "--force" in r.stderr
    assert read(os.path.join(node.conf, CONF)) == other
    r = install(skb, node, node.v1, "--force")
    assert r.returncode == 0, r.stderr
    assert read(os.path.join(node.conf, CONF)) == rendered("10.244.1.0/24")


def test_refuses_to_sit_behind_another_networks_config_unless_forced(skb, node):
    os.makedirs(node.conf)
    with open(os.path.join(node.conf, "05-calico.conflist"), "w") as f:
        json.dump({"cniVersion": "0.3.1", "name": "k8s-pod-network", "plugins": [{"type": "calico"}]}, f)
    r = install(skb, node, node.v1)
    assert r.returncode == 1
    assert "05-calico.conflist (network 'k8s-pod-network') comes before 10-skb.conflist" in r.stderr
    assert not os.path.exists(os.path.join(node.conf, CONF))
    r = install(skb, node, node.v1, "--force")
    assert r.returncode == 0 and "warning" in r.stderr
    r = install(skb, node, node.v1, "--conf-name", "00-skb.conflist")
    assert r.returncode == 0, r.stderr


def test_refuses_to_sit_behind_a_file_of_our_network_name_unless_it_is_a_copy(skb, node):
    os.makedirs(node.conf)
    old = json.dumps({"cniVersion": "1.0.0", "name": "skb", "plugins": [{"type": "bridge"}]})
    with open(os.path.join(node.conf, "05-old.conflist"), "w") as f:
        f.write(old)
    for wait in ([], ["--wait", "--interval", "0.2"]):  # --wait refuses the same way, before it watches
        r = install(skb, node, node.v1, *wait)
        assert r.returncode == 1, r.stderr
        assert "05-old.conflist also defines network 'skb', with other contents, and comes before " \
               "10-skb.conflist" in r.stderr and "--force" in r.stderr, r.stderr
        assert os.listdir(node.conf) == ["05-old.conflist"]
    r = install(skb, node, node.v1, "--force")
    assert r.returncode == 0 and "warning" in r.stderr
    assert read(os.path.join(node.conf, CONF)) == rendered("10.244.1.0/24")
    # an identical copy of ours sorting first (e.g. from an earlier --conf-name) shadows nothing
    os.unlink(os.path.join(node.conf, CONF))
    with open(os.path.join(node.conf, "05-old.conflist"), "wb") as f:
        f.write(rendered("10.244.1.0/24"))
    r = install(skb, node, node.v1)
    assert r.returncode == 0, r.stderr
    assert read(os.path.join(node.conf, CONF)) == rendered("10.244.1.0/24")
