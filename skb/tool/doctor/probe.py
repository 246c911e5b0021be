"""--probe: ADD and DEL of the pod network, as a runtime would, without ever changing the node.

A diagnostic never changes the node it diagnoses. The probe runs in a forked child that first gives
itself a network namespace and a mount namespace of its own: the "scratch node". Its plugins run there,
so whatever they do to "the host" (a veth end, routes, sysctls such as ``net.ipv4.ip_forward``,
masquerade rules) happens in the scratch node and vanishes with it. The files they keep are isolated too:
the netns dir is a private tmpfs, and /var/lib/cni, /run/cni and every host-local ``dataDir`` the network
names are covered by an overlay whose writes go to that tmpfs (the node's reservations stay visible, none
is added or advanced). When a directory cannot be isolated, the probe is skipped and says why. Its calls record themselves
nowhere (the debug log, a debug plugin's captureFile and cniOutput go to a temporary directory).

What the ADD needed from the node is reported, not done: sysctls it changed in the scratch node whose
value on the node differs (forwarding off: pods would get no traffic beyond the node). Links the DEL
left behind in the scratch node are reported as leftovers.
"""
import os
import tempfile

from skb.cni.errors import CNIError
from skb.tool import libcni, scratch_node
from skb.tool.libcni.aside import AsideExec
from skb.linux import scratch_netns
from skb.linux.netlink import RtNetlink
from skb.tool.doctor.findings import Finding
from skb.tool.doctor.reservations import host_local_stores

CRI_ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=skb-doctor;K8S_POD_NAME=probe;K8S_POD_INFRA_CONTAINER_ID={cid}"
# node sysctls a pod network's ADD may need: read on the node, and in the scratch node before and after
SYSCTL_DIRS = ("net/ipv4/conf/all", "net/ipv4/conf/default", "net/ipv6/conf/all", "net/ipv6/conf/default")
SYSCTL_FILES = ("net/ipv4/ip_forward",)
NEEDS = {"net.ipv4.ip_forward": ("IPv4 forwarding is off on the node", "forwarding-off"),
         "net.ipv4.conf.all.forwarding": ("IPv4 forwarding is off on the node", "forwarding-off"),
         "net.ipv6.conf.all.forwarding": ("IPv6 forwarding is off on the node", "forwarding-off")}


def read_sysctls():
    """{dotted name: value} of the sysctls in SYSCTL_DIRS/FILES, as this process's netns sees them."""
    out = {}
    names = list(SYSCTL_FILES)
    for d in SYSCTL_DIRS:
        try:
            names += [f"{d}/{n}" for n in os.listdir("/proc/sys/" + d)]
        except OSError:
            pass
    for name in names:
        try:
            fd = os.open("/proc/sys/" + name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            out[name.replace("/", ".")] = os.read(fd, 256).decode(errors="replace").strip()
        except OSError:
            pass
        finally:
            os.close(fd)
    return out


def side_effect(key, changed):
    """Whether a sysctl the probe saw change is the kernel's side effect of switching forwarding: IPv4's
    switches every interface's forwarding and sets all.accept_redirects to the opposite (a forwarding
    node ignores redirects); IPv6's switches every interface's forwarding. No plugin needs those."""
    if "net.ipv4.ip_forward" in changed and key.startswith("net.ipv4.conf.") and \
            (key.endswith(".forwarding") or key == "net.ipv4.conf.all.accept_redirects"):
        return True
    return "net.ipv6.conf.all.forwarding" in changed and key != "net.ipv6.conf.all.forwarding" and \
        key.startswith("net.ipv6.conf.") and key.endswith(".forwarding")


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


# ---------------------------------------------------------------------------------------------------
# the scratch node (runs in the forked child only)

def _links():
    with RtNetlink(label="the scratch node") as nl:
        return sorted(link.name for link in nl.link_list())


def _child(view, netconf, opts, scratch):
    """The probe proper, in the scratch node: a JSON-able report."""
    scratch_node.enter(scratch, "skb-probe")
    stores = [os.path.dirname(store) for _n, store in host_local_stores([netconf])]
    for n, d in enumerate(dict.fromkeys(list(scratch_node.COVERED) + stores)):
        scratch_node.isolate(d, scratch, n, "skb-probe", required=d in stores)
    before, links_before = read_sysctls(), _links()
    name = scratch_netns.unique_name("skb-probe")
    path = scratch_netns.add(name, scratch)
    cache = os.path.join(scratch, ".cache")
    cid = f"skb-probe-{os.urandom(8).hex()}"
    rt = libcni.RuntimeConf(cid, path, opts.probe_ifname, libcni.parse_cnitool_args(CRI_ARGS.format(cid=cid)))
    # (AsideExec: the probe's calls append to none of the runtime's call logs, which are on the node's file
    # system)
    cni = libcni.CNIConfig(view.bin_dirs, cache, AsideExec(stderr=False, timeout=opts.probe_timeout))
    out = {"add": None, "del": None, "changed": {}, "leftover": []}
    try:
        res = cni.add_list(netconf, rt)
    except (libcni.LibcniError, CNIError) as e:
        out["add"] = {"error": libcni.describe(e)}
    else:
        addrs, problem = ips_on(res, opts.probe_ifname)
        out["add"] = {"addrs": addrs, "problem": problem,
                      "result": libcni.go_marshal(libcni.result_dict(res)).decode()}
    after = read_sysctls()
    out["changed"] = {k: [before.get(k), v] for k, v in after.items() if before.get(k) != v}
    try:
        cni.del_list(netconf, rt)
    except (libcni.LibcniError, CNIError) as e:
        out["del"] = {"error": libcni.describe(e)}
    out["leftover"] = [link for link in _links() if link not in links_before]
    return out


# ---------------------------------------------------------------------------------------------------
# the parent: fork, wait (bounded), turn the report into findings

def _run_child(view, netconf, opts, scratch):
    allowed = 2 * opts.probe_timeout * max(1, len(netconf.plugins)) + 30
    return scratch_node.run(lambda: _child(view, netconf, opts, scratch), allowed, "the probe")


def probe(view, netconf, opts, findings):
    node = read_sysctls()
    made = None
    scratch = opts.netns_dir
    if not os.path.isdir(scratch):      # a mount point for the child's tmpfs, removed afterwards
        scratch = made = tempfile.mkdtemp(prefix="skb-probe-")
    try:
        reply = _run_child(view, netconf, opts, scratch)
    finally:
        if made:
            try:
                os.rmdir(made)
            except OSError:
                pass
    where = f'network "{netconf.name}" ({os.path.basename(netconf.source)})'
    if "skipped" in reply:
        findings.append(Finding("warning", "probe-skipped", f"the probe of {where} did not run",
                                str(reply["skipped"]), "run skb doctor --probe as root; the probe never changes "
                                "the node, so it refuses to run where it cannot isolate what the plugins write",
                                netconf.source))
        return
    add = reply.get("add") or {}
    if "error" in add:
        findings.append(Finding("error", "probe-failed", f"ADD of the pod network fails ({where})",
                                add["error"], "fix the plugin error above; skb add "
                                f"{netconf.name} <netns> -v --conf-dir {view.conf_dir} reproduces it",
                                netconf.source))
    else:
        addrs, problem, shown = add.get("addrs") or [], add.get("problem"), add.get("result", "")
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
    changed = reply.get("changed") or {}
    for key, (old, new) in sorted(changed.items()):
        if node.get(key) == new or side_effect(key, changed):
            continue
        what, code = NEEDS.get(key, (f"the pod network's ADD needs {key} = {new}; the node has {node.get(key)}",
                                     "probe-needs"))
        findings.append(Finding(
            "error" if code == "forwarding-off" else "warning", code, what,
            f"the probe's ADD of {where} switched {key} from {old} to {new} in its scratch node; on the node it is "
            f"{node.get(key)}" + (": pods would get no traffic beyond the node until a real ADD switches it on "
                                  "(a change to the node), or again whenever something switches it off"
                                  if code == "forwarding-off" else ""),
            f"sysctl -w {key}={new} and persist it in /etc/sysctl.d/", netconf.source))
    if reply.get("del") and "error" in reply["del"]:
        findings.append(Finding("error", "probe-failed", f"DEL of the pod network fails ({where})",
                                reply["del"]["error"], "a runtime retries DEL until it succeeds; fix the plugin",
                                netconf.source))
    if reply.get("leftover"):
        findings.append(Finding("warning", "probe-leftover", f"DEL of {where} leaves links on the node",
                                f"after ADD and DEL the probe's scratch node still has "
                                f"{', '.join(map(str, reply['leftover']))}", "fix the plugin's DEL", netconf.source))
