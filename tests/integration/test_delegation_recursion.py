"""IPAM delegation cannot recurse (issue 13, class 5): an ipam.type that is the plugin itself, by name or
by the file it resolves to, is refused with code 7 naming ipam.type; a chain that comes back through
another program stops at a bounded depth (SKB_DELEGATION_DEPTH). Each call ends (a hard timeout) and
leaves nothing behind, checked with `ip -j` and the IPAM dataDir."""
import os

import pytest

from tests.helpers import ip_json
from tests.integration.ptp_support import Ptp, nspath, ptp_conf


def _links(ns):
    return sorted(link["ifname"] for link in ip_json("link", "show", netns=ns))


def _reservations(data_dir):
    net = os.path.join(data_dir, "ptpnet")
    return sorted(f for f in os.listdir(net) if f[0].isdigit()) if os.path.isdir(net) else []


@pytest.mark.kernel
def test_ipam_type_naming_the_plugin_itself_is_refused(bin_dir, make_netns, tmp_path):
    ns = make_netns()
    conf = ptp_conf(str(tmp_path / "ipam"))
    conf["ipam"]["type"] = "ptp"
    r = Ptp(os.path.join(bin_dir, "ptp"), bin_dir).add(conf, nspath(ns))
    assert r.rc == 1 and r.json["code"] == 7, r
    assert 'ipam.type "ptp" is this plugin itself' in r.json["msg"], r
    assert _links(ns) == ["lo"] and _reservations(str(tmp_path / "ipam")) == []


@pytest.mark.kernel
def test_ipam_type_resolving_to_the_plugins_own_file_is_refused(bin_dir, make_netns, tmp_path):
    """Another name for the same file (a symbolic link in another CNI_PATH dir) is the plugin itself."""
    alias = tmp_path / "alias"
    alias.mkdir()
    os.symlink(os.path.join(bin_dir, "ptp"), alias / "my-ipam")
    ns = make_netns()
    conf = ptp_conf(str(tmp_path / "ipam"))
    conf["ipam"]["type"] = "my-ipam"
    r = Ptp(os.path.join(bin_dir, "ptp"), f"{bin_dir}:{alias}").add(conf, nspath(ns))
    assert r.rc == 1 and r.json["code"] == 7, r
    assert 'ipam.type "my-ipam" is this plugin itself' in r.json["msg"], r
    assert _links(ns) == ["lo"]


@pytest.mark.kernel
def test_delegation_through_another_program_stops_at_a_bounded_depth(bin_dir, make_netns, tmp_path):
    """ptp -> "wrapper" (execs ptp again with the same stdin) -> ptp -> ...: the depth counter in the
    environment ends the chain with code 7 naming ipam.type, instead of a fork chain that never ends. (The
    wrapper gives each level an interface name of its own: for the same attachment, ptp's lock ends the
    chain at once, test_ptp_failures.py::test_ptp_reached_again_from_its_own_ipam_is_refused_not_a_deadlock.)"""
    d = tmp_path / "wrap-bin"
    d.mkdir()
    wrapper = d / "wrapper"
    wrapper.write_text(f'#!/bin/sh\necho "wrapper at depth $SKB_DELEGATION_DEPTH" >&2\n'
                       f'CNI_IFNAME="eth$SKB_DELEGATION_DEPTH" exec "{bin_dir}/ptp"\n')
    wrapper.chmod(0o755)
    ns = make_netns()
    conf = ptp_conf(str(tmp_path / "ipam"))
    conf["ipam"]["type"] = "wrapper"
    r = Ptp(os.path.join(bin_dir, "ptp"), f"{d}:{bin_dir}").add(conf, nspath(ns))
    assert r.rc == 1 and r.json["code"] == 7, r
    assert 'ipam.type "wrapper"' in r.json["msg"] and "nested 4 deep" in r.json["msg"], r
    assert r.stderr.count("wrapper at depth") == 4, r.stderr
    assert _links(ns) == ["lo"] and _reservations(str(tmp_path / "ipam")) == []


@pytest.mark.kernel
def test_the_depth_counter_is_passed_on_and_bounded(bin_dir, make_netns, tmp_path):
    """The delegate sees the depth incremented; a call arriving at the limit refuses to delegate."""
    d = tmp_path / "rec-bin"
    d.mkdir()
    seen = tmp_path / "depth"
    rec = d / "host-local"
    rec.write_text(f'#!/bin/sh\necho "$SKB_DELEGATION_DEPTH" > "{seen}"\n'
                   'echo \'{"cniVersion":"1.0.0","code":11,"msg":"stop here"}\'\nexit 1\n')
    rec.chmod(0o755)
    ptp = Ptp(os.path.join(bin_dir, "ptp"), str(d))
    conf = ptp_conf(str(tmp_path / "ipam"))
    r = ptp.add(conf, nspath(make_netns()), SKB_DELEGATION_DEPTH="2")
    assert r.json["msg"] == "stop here" and seen.read_text().strip() == "3", r
    seen.unlink()
    r = ptp.add(conf, nspath(make_netns()), SKB_DELEGATION_DEPTH="4")
    assert r.rc == 1 and r.json["code"] == 7 and 'ipam.type "host-local"' in r.json["msg"], r
    assert not seen.exists()     # the delegate was never started
