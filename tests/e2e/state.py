"""What a runtime and our plugins left in a sandbox: the records of the calls, and the kernel and disk
state that must be gone after teardown."""
import json

CAPTURE = "/run/skb-e2e/capture.jsonl"  # the debug plugin's captureFile, in every conflist of these tests
CALL_LOG = "/run/skb-e2e/calls.jsonl"  # SKB_DEBUG_LOG given to the runtime: every plugin call, any network


def records(sb, path=CALL_LOG):
    try:
        text = sb.read(path)
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def calls(sb, path=CALL_LOG, plugin=None, command=None, ifname=None):
    out = []
    for r in records(sb, path):
        env = r.get("env", {})
        if plugin and r.get("plugin") != plugin:
            continue
        if command and r.get("command") != command:
            continue
        if ifname is not None and env.get("CNI_IFNAME") != ifname:
            continue
        out.append(r)
    return out


def conflist(name, subnet, debug=None, ip_masq=False, version="1.0.0", loopback=True):
    """ptp over host-local, then loopback, then debug (capturing every call; ``debug`` adds its keys)."""
    plugins = [{"type": "ptp", "ipMasq": ip_masq,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                         "routes": [{"dst": "0.0.0.0/0"}]}}]
    if loopback:
        plugins.append({"type": "loopback"})
    plugins.append(dict({"type": "debug", "captureFile": CAPTURE}, **(debug or {})))
    return {"cniVersion": version, "name": name, "plugins": plugins}


def write_conflist(sb, conf, filename=None):
    sb.write(f"/etc/cni/net.d/{filename or '10-' + conf['name'] + '.conflist'}", json.dumps(conf, indent=2))


def links(sb):
    return [l["ifname"] for l in sb.ip("link") if l["ifname"] != "lo"]


def reservations(sb, network):
    """host-local's reservation files (one per address held) in the sandbox's default dataDir."""
    return [n for n in sb.listdir(f"/var/lib/cni/networks/{network}")
            if not n.startswith((".", "last_reserved_ip")) and n != "lock"]


def cached_results(sb):
    return sb.listdir("/var/lib/cni/results")


def nat_rules(sb):
    """Masquerade state both backends could leave: iptables chains/rules named CNI-, nft tables."""
    ipt = sb.run(["iptables-save", "-t", "nat"], check=False).stdout
    left = [l for l in ipt.splitlines() if "CNI-" in l]
    nft = sb.run(["nft", "list", "ruleset"], check=False).stdout
    left += [l.strip() for l in nft.splitlines() if "masquerade" in l]
    return left


def netns_files(sb):
    return sb.listdir("/run/netns")


def assert_clean(sb, network):
    """Nothing of any attachment left: no veth, no reservation, no masquerade rule, no cached result,
    no netns bind mount."""
    state = {"links": links(sb), "reservations": reservations(sb, network), "nat": nat_rules(sb),
             "cached results": cached_results(sb), "netns": netns_files(sb)}
    assert state == {"links": [], "reservations": [], "nat": [], "cached results": [], "netns": []}, state
