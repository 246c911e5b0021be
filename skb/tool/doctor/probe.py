"""--probe: ADD and DEL of the pod network in scratch namespaces."""
import os
import shutil
import tempfile

from skb.tool import libcni
from skb.linux import scratch_netns
from skb.tool.doctor.findings import Finding

CRI_ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=skb-doctor;K8S_POD_NAME=probe;K8S_POD_INFRA_CONTAINER_ID={cid}"


def ips_on(res, ifname):
    """The addresses containerd's go-cni attributes to ``ifname`` in a result (any version, held in the
    1.1.0 shape): an IP with an ``interface`` index belongs to that interface (an index out of range
    makes the result invalid); one without, to the default interface. Returns (addresses, problem)."""
    found = []
    for ip in res.ips:
        if ip.interface is None:
            name = ifname
        elif ip.interface >= len(res.interfaces):
            return [], (f"ips entry {ip.address} names interface index {ip.interface} but there are only "
                        f"{len(res.interfaces)} interfaces (go-cni: invalid result)")
        else:
            name = res.interfaces[ip.interface].name
        if name == ifname:
            found.append(ip.address)
    return found, None


def probe(view, netconf, opts, findings):
    name = scratch_netns.unique_name("skb-probe")
    try:
        path = scratch_netns.add(name, opts.netns_dir)
    except scratch_netns.NetnsAdminError as e:
        findings.append(Finding("warning", "probe-failed", "cannot make a scratch netns for the probe", str(e),
                                "run skb doctor --probe as root"))
        return
    cache = tempfile.mkdtemp(prefix="skb-probe-cache-")
    cid = f"skb-probe-{os.urandom(8).hex()}"
    rt = libcni.RuntimeConf(cid, path, opts.probe_ifname, libcni.parse_cnitool_args(CRI_ARGS.format(cid=cid)))
    cni = libcni.CNIConfig(view.bin_dirs, cache, libcni.RawExec(stderr=False, timeout=opts.probe_timeout))
    where = f'network "{netconf.name}" ({os.path.basename(netconf.source)})'
    try:
        try:
            res = cni.add_list(netconf, rt)
        except (libcni.LibcniError, libcni.CNIError) as e:
            findings.append(Finding("error", "probe-failed", f"ADD of the pod network fails ({where})",
                                    libcni.describe(e), "fix the plugin error above; skb add "
                                    f"{netconf.name} <netns> -v --conf-dir {view.conf_dir} reproduces it",
                                    netconf.source))
        else:
            addrs, problem = ips_on(res, opts.probe_ifname)
            shown = libcni.go_marshal(libcni.result_dict(res)).decode()
            if problem or not addrs:
                findings.append(Finding(
                    "error", "probe-no-ip",
                    f"the pod network's result has no IP address on {opts.probe_ifname} ({where})",
                    f"{problem + '; ' if problem else ''}result: {shown[:600]}; containerd looks up "
                    f"{opts.probe_ifname} and fails the sandbox: 'failed to find network info for sandbox'",
                    "the chain must end with a result whose ips point (by interface index) at the container "
                    f"interface {opts.probe_ifname}: check the main plugin's ipam section, and that later plugins "
                    "pass prevResult through", netconf.source))
            else:
                findings.append(Finding("note", "probe", f"probe ADD ok: {opts.probe_ifname} got {', '.join(addrs)}",
                                        f"result: {shown[:300]}", "", netconf.source))
        try:
            cni.del_list(netconf, rt)
        except (libcni.LibcniError, libcni.CNIError) as e:
            findings.append(Finding("error", "probe-failed", f"DEL of the pod network fails ({where})",
                                    libcni.describe(e), "a runtime retries DEL until it succeeds; fix the plugin",
                                    netconf.source))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        try:
            scratch_netns.delete(name, opts.netns_dir)
        except scratch_netns.NetnsAdminError:
            pass
