"""skb.linux.sysctl: name forms (no kernel) and reads/writes in a container netns, checked with
``ip netns exec NAME cat /proc/sys/...`` (a separate process that enters the netns itself)."""
import errno
import subprocess

import pytest

from skb.linux import netns
from skb.linux import sysctl


@pytest.mark.parametrize("name,path", [
    ("net.ipv4.ip_forward", "/proc/sys/net/ipv4/ip_forward"),
    ("net/ipv4/ip_forward", "/proc/sys/net/ipv4/ip_forward"),
    ("/net/ipv4/ip_forward", "/proc/sys/net/ipv4/ip_forward"),
    ("/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv4/ip_forward"),
    ("net/ipv4/conf/eth0.100/rp_filter", "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"),   # slashes: verbatim
    ("net.ipv4.conf.eth0/100.rp_filter", "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"),   # dots: swapped
    ("net.ipv6.conf.all.disable_ipv6", "/proc/sys/net/ipv6/conf/all/disable_ipv6"),
])
def test_path(name, path):
    assert sysctl.path(name) == path


def cat(netns_name, name):
    return subprocess.run(["ip", "netns", "exec", netns_name, "cat", f"/proc/sys/{name}"],
                          check=True, capture_output=True, text=True).stdout.strip()


def host_read(name):
    with open(f"/proc/sys/{name}") as f:
        return f.read().strip()


@pytest.mark.kernel
def test_read_matches_the_file():
    assert sysctl.read("net.ipv4.ip_forward") == host_read("net/ipv4/ip_forward")
    assert sysctl.read("net/ipv4/ping_group_range") == host_read("net/ipv4/ping_group_range")


@pytest.mark.kernel
def test_write_in_container_netns_only(make_netns):
    name = make_netns()
    key = "net/ipv4/conf/all/rp_filter"
    host_before = host_read(key)
    new = "2" if cat(name, key) != "2" else "1"
    with netns.enter(f"/run/netns/{name}"):
        assert sysctl.write(key, new) is True
        assert sysctl.write("net.ipv4.conf.all.rp_filter", int(new)) is False      # already so
        assert sysctl.read(key) == new
    assert cat(name, key) == new
    assert host_read(key) == host_before
    assert sysctl.read(key) == host_before


@pytest.mark.kernel
def test_multi_field_values_compare_by_fields(make_netns):
    name = make_netns()
    with netns.enter(f"/run/netns/{name}"):
        assert "\t" in sysctl.read("net/ipv4/ping_group_range")
        assert sysctl.write("net.ipv4.ping_group_range", "0 0") in (True, False)
        assert sysctl.write("net.ipv4.ping_group_range", "0    0") is False
    assert cat(name, "net/ipv4/ping_group_range").split() == ["0", "0"]


@pytest.mark.kernel
def test_dotted_interface_name_with_slashes(make_netns):
    name = make_netns()
    subprocess.run(["ip", "-n", name, "link", "add", "d0.5", "type", "veth", "peer", "name", "d1"], check=True)
    key = "net/ipv4/conf/d0.5/rp_filter"
    new = "2" if cat(name, key) != "2" else "1"
    with netns.enter(f"/run/netns/{name}"):
        assert sysctl.write(key, new) is True
        assert sysctl.read("net.ipv4.conf.d0/5.rp_filter") == new
    assert cat(name, key) == new


@pytest.mark.kernel
def test_errors_name_sysctl_and_netns(make_netns):
    name = make_netns()
    with netns.enter(f"/run/netns/{name}"):
        with pytest.raises(sysctl.SysctlError) as e:
            sysctl.read("net.ipv4.conf.nope0.rp_filter")
        assert e.value.errno == errno.ENOENT and e.value.code == 999
        assert e.value.msg == (f"cannot read sysctl net.ipv4.conf.nope0.rp_filter in netns /run/netns/{name}: "
                               "no such file or directory (ENOENT)")
        with pytest.raises(sysctl.SysctlError) as e:
            sysctl.write("net/ipv4/conf/all/rp_filter", "banana")
        assert e.value.errno == errno.EINVAL
        assert e.value.msg == (f'cannot set sysctl net/ipv4/conf/all/rp_filter to "banana" in netns '
                               f"/run/netns/{name}: invalid argument (EINVAL)")
    with pytest.raises(sysctl.SysctlError) as e:
        sysctl.read("net.ipv4.nope")
    assert "(the plugin's own)" in e.value.msg
