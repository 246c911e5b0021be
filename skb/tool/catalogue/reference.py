"""The messages of the reference plugins (host-local, ptp, bridge, the meta plugins), of skb's own ptp
where it says more, and of iptables as those plugins run it."""
from skb.tool.catalogue.entry import BINS, IPAM, NODE, Entry


def _bridge_reason(v):
    reason = (v.get("reason") or "").lower()
    if "permission denied" in reason:
        return {"why": "the kernel refused the address: IPv6 is disabled on the node (disable_ipv6, or ipv6.disable=1 "
                       "on the kernel command line) while the network has an IPv6 range"}
    if "file exists" in reason:
        return {"why": "two ADDs raced to add the same address to the bridge; bridge releases before 0.8.2 gave up "
                       "instead of using it"}
    return {"why": "the kernel refused to add the address"}


ENTRIES = [
    Entry("veth-exists", "reference plugins", "container veth name provided (<ifname>) already exists",
          "the pod already has an interface named {ifname}",
          "ptp and bridge create the pod's end of the veth pair as CNI_IFNAME ({ifname}), and the pod's "
          "netns already has one: a second network attached under the same name (Multus attaching two "
          "networks as eth0, or a network named for 'lo'), or an ADD repeated without the DEL of the first.",
          ["ip netns exec <pod netns> ip link"],
          "give each attachment its own interface name (Multus: \"interface\" in the network annotation), or "
          "DEL the old attachment first", BINS),
    Entry("bridge-addr-different", "reference plugins",
          'failed to set bridge addr: "<name>" already has an IP address different from <cidr>',
          "the bridge {name} holds another address than the network's gateway {cidr}",
          "bridge puts the gateway ({cidr}) on {name} and refuses to replace an address it finds there: the "
          "pod range of the node changed (a new podCIDR, a cluster rebuilt on the same node), or another "
          "network add-on used a bridge of the same name before.",
          ["ip addr show dev {name}", "grep -l {name} /etc/cni/net.d/*"],
          "ip link delete {name} (its pods lose their network until they are recreated), or give the network "
          "its own bridge name", ("config-invalid",)),
    Entry("bridge-addr-add", "reference plugins",
          'failed to set bridge addr: could not add IP address to "<name>": <reason>',
          "bridge could not put the gateway on {name}: {reason}",
          "bridge adds the network's gateway to {name} before it attaches the pod; {why}.",
          ["ip addr show dev {name}", "sysctl net.ipv6.conf.all.disable_ipv6"],
          "with IPv6 off: remove the IPv6 range from the network, or turn IPv6 on", ("config-invalid",),
          derive=_bridge_reason),
    Entry("requested-ip-unavailable", "host-local",
          "requested IP address <ip> is not available in range set <range>",
          "the requested address {ip} is already reserved (range set {range})",
          "A fixed address was asked for (podman --ip, CNI_ARGS IP=, the ips capability), and host-local "
          "already has a reservation file for {ip}: another container holds it, or a stale file survived a "
          "crash or reboot (with the default dataDir on a disk, reservations outlive a reboot).",
          ["cat /var/lib/cni/networks/<network>/{ip} (the container holding it)"],
          "stop the container holding {ip}, or remove the stale file once you know it is stale (skb doctor "
          "lists leaked reservations)", IPAM, ("leaks",)),
    Entry("range-full", "host-local",
          ["no IP addresses available in range set: <range>", "no IP addresses available in range set"],
          "host-local: every address of {range} is reserved",
          "On a node that runs far fewer pods than the range holds, the reservations are leaked: containers "
          "whose DEL never ran or never succeeded (runtime crashes, a cleared result cache, reboots with the "
          "store on disk). Otherwise the range is simply too small for the pods of this node.",
          ["ls /var/lib/cni/networks/<network>/ | wc -l (reservations)", "crictl pods | wc -l (pods)"],
          "skb gc NETWORK --keep-live frees the leaked ones at cniVersion 1.1.0 (skb doctor lists them, and "
          "says how below 1.1.0); else widen the range",
          IPAM, ("leaks",)),
    Entry("allocate-range", "host-local", "failed to allocate for range <n>: <rest>",
          "host-local could not allocate from range set {n}",
          "host-local tried its range set number {n} (counting the ranges from 0) and failed for the reason "
          "explained below.", (), "", IPAM, ("leaks",)),
    Entry("duplicate-allocation", "host-local",
          ["<ip> has been allocated to <id>, duplicate allocation is not allowed", "duplicate allocation is not allowed"],
          "host-local: container {id} already holds {ip}",
          "host-local found a reservation for the same container and interface: an earlier ADD succeeded (or "
          "half succeeded) and no DEL released it, and the runtime is retrying ADD. Usual causes: a runtime "
          "restart between ADD and DEL, a DEL that failed, a state dir restored from a backup.",
          ["grep -l {id} /var/lib/cni/networks/*/*"],
          "skb gc NETWORK --keep-live releases what no live attachment holds (skb's host-local also returns the "
          "same address instead of failing)", ("leaked-reservation",), ("leaks",)),
    Entry("allocate-all", "host-local", "failed to allocate all requested IPs: <ip>",
          "host-local could not give the requested address {ip}",
          "A fixed address was asked for and it lies in none of the network's ranges (a podman --ip from "
          "another network, a range changed since), or another address requested for the same attachment "
          "(CNI_ARGS IP=, args.cni.ips, runtimeConfig.ips) lies in the same range set: host-local gives one "
          "address per range set.", ["the network's ipam ranges", "the addresses the runtime requested"],
          "request one address inside each range set, or widen the ranges", IPAM),
    Entry("no-plugin-name", "reference plugins", "no plugin name provided",
          "a plugin's IPAM section has no type",
          "ptp (and the other plugins that delegate to an IPAM plugin) found no ipam.type: the network has no "
          "ipam section, or one without \"type\". ptp cannot work without one.",
          ["the ipam section of the network's file"],
          'add "ipam": {{"type": "host-local", ...}} to the plugin', ("config-invalid",)),
    Entry("chained-only", "reference plugins", "must be called as chained plugin",
          "a meta plugin ran without a previous result",
          "portmap, tuning, bandwidth, firewall and sbr only change what an earlier plugin set up, and take "
          "its result as prevResult. This one ran first or alone: a conflist that starts with it, or a Multus "
          "network naming the plugin by itself.",
          ["the network's plugins list"], "put the main plugin (ptp, bridge, ...) first in the plugins list",
          ("load-error",)),
    Entry("iptables-invalid-mask", "iptables", "invalid mask `<n>' specified",
          "iptables was given a /{n} mask it cannot take: an IPv6 address, given to iptables",
          "A plugin's DEL or ADD handed an IPv6 address (with its /{n}) to iptables instead of ip6tables: "
          "older bridge and ptp releases did so for a pod that had IPv6 (even link-local) addresses when "
          "removing masquerade rules. The rule for that address is left behind.",
          ["ip6tables-save -t nat | grep CNI-", "iptables-save -t nat | grep CNI-"],
          "upgrade the plugin; remove the leftover CNI-* chains once their pods are gone", ()),
    Entry("iptables-no-chain", "iptables", "Couldn't load target `<word>'",
          "the chain {word} was already gone",
          "A DEL tried to remove the jump to {word}, which no longer exists: the DEL ran twice, or a firewall "
          "reload flushed the nat table. Harmless for a DEL; the plugin should ignore it.",
          ["iptables-save -t nat | grep {word}"], "upgrade the plugin if its DEL keeps failing on this", ()),
    Entry("skb-refused-overlap", "skb ptp",
          ["gateway <ip> is already in use on the node: <rest>", "pod address <ip> is already in use on the node: <rest>"],
          "skb's ptp refused the ADD: {ip} is already in use on the node",
          "The network's range overlaps the node's own network, and ptp would have put {ip} on the pod's host "
          "veth (a gateway) or routed it to the pod (a pod address), taking it from the node: the reference "
          "ptp does, and the node loses its router or an address. Nothing was changed.",
          ["ip -br addr; ip route show table all | grep {ip}"],
          "give the network a range outside the node's networks (skb doctor names the overlap)", NODE + IPAM,
          ("node",)),
    Entry("skb-address-in-use", "skb ptp", "address <ip> is already in use on the host",
          "skb's ptp: the node already routes {ip} elsewhere",
          "The node has a route for the pod's address {ip} to another interface: another network with an "
          "overlapping range, or a leftover of an attachment that was never deleted. ptp undid the ADD.",
          ["ip route get {ip}"], "remove the leftover route, or separate the ranges", NODE + IPAM, ("node", "leaks")),
]
