"""The messages of the runtimes: kubelet, containerd (its CRI plugin, go-cni, ctr), CRI-O (ocicni) and
podman. Most wrap a plugin's error (``<rest>``), explained in turn. kubelet's failed probes are here too:
the node's traffic to a running pod, not a CNI call."""
import re

from skb.tool.catalogue.entry import BINS, CONF, IPAM, RUN, VERSIONS, Entry

# where a probe went: "10.244.1.5:8080/healthz" (a URL without its scheme) or "10.244.1.5:8080: connect: ..."
_HOST_PORT = re.compile(r"(?:\[([0-9A-Fa-f:.]{2,45})\]|([0-9.]{7,15}))(?::(\d{1,5}))?")


def _probe(v):
    """The pod's address and port a probe went to, and what its error says about the path from the node."""
    url, detail = v.get("url", ""), v.get("detail", "")
    m = _HOST_PORT.match(url.split("://", 1)[-1] if url else detail)
    ip, port = ((m.group(1) or m.group(2)), m.group(3) or "") if m else ("", "")
    host = f"[{ip}]" if ":" in ip else ip
    out = {"kind": (v.get("probe") or "").lower(), "pod_ip": ip or "POD_IP", "port": port or "PORT",
           "target": url or (f"{host}:{port}" if ip and port else "POD_IP:PORT")}
    if ip:
        out["ip"] = ip
    words = detail.lower()
    slow = ("if the application answers slowly, raise the probe's timeoutSeconds; otherwise fix what the doctor "
            "finds below (a pod range overlapping the node, strict rp_filter) and any firewall rule or network "
            "policy dropping the node's traffic to pods")
    if "connection refused" in words:
        out["why"] = (f"A refusal means the pod's address answered: the path from the node works, and nothing "
                      f"listens on port {out['port']} in the container (not started yet, listening on 127.0.0.1 "
                      "only, or on another port)")
        out["remedy"] = (f"make the container listen on port {out['port']} on all its addresses (not only "
                         "127.0.0.1), or point the probe at the port it listens on; a slow start wants a "
                         "startupProbe")
    elif any(w in words for w in ("no route to host", "network is unreachable", "host is unreachable")):
        out["why"] = (f"The node found no way to {ip or 'the pod'}: its route there leads nowhere, or nothing "
                      "answers ARP or neighbour discovery for it (the pod's veth is gone or down)")
        out["remedy"] = ("fix the node's route to the pod (skb doctor names a pod range overlapping the node's "
                         "network); a pod whose veth is gone must be recreated")
    elif any(w in words for w in ("timeout", "deadline exceeded", "timed out", "canceled")):
        out["why"] = ("No answer came within the probe's timeoutSeconds (1 s unless set): the application is slow "
                      "to answer, or packets between the node and the pod are dropped")
        out["remedy"] = slow
    else:
        out["why"] = "The request from the node to the pod failed"
        out["remedy"] = slow
    return out


ENTRIES = [
    Entry("not-ready-status", "kubelet",
          ["NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: <rest>",
           "NetworkReady=false reason:NetworkPluginNotReady message:<rest>"],
          "kubelet: the runtime reports its pod network as not ready, so the node is NotReady",
          "kubelet asks the container runtime for its status every few seconds; the runtime answered "
          "NetworkReady=false, with the reason explained below. Mostly the runtime found no network "
          "configuration it could load; with containerd 2 and a cniVersion 1.1.0 network it can also be a "
          "plugin failing STATUS (its daemon or datastore is down). No new pod goes to the node until it clears.",
          ["crictl info (NetworkReady, lastCNILoadStatus)", "journalctl -u containerd -u crio --since -15m"],
          "fix the reason below; the node turns Ready by itself once the runtime has a network",
          CONF + BINS + ("status-failed",), ("status",)),
    Entry("kubelet-cni-setup", "kubelet",
          'NetworkPlugin cni failed to set up pod "<pod>" network: <rest>',
          "kubelet (dockershim) ran ADD of the pod network for {pod}, and it failed",
          "Up to Kubernetes 1.23 kubelet ran the CNI plugins itself for Docker nodes (dockershim); this wraps "
          "the plugin's own error, explained below. kubelet retries with a new sandbox.", (), "", CONF + BINS),
    Entry("kubelet-cni-teardown", "kubelet",
          'NetworkPlugin cni failed to teardown pod "<pod>" network: <rest>',
          "kubelet (dockershim) ran DEL of the pod network for {pod}, and it failed",
          "kubelet retries the DEL; until one succeeds the pod's address stays reserved and its rules stay "
          "on the node. The plugin's error is explained below.", (), "", VERSIONS + ("leaked-reservation",),
          ("version", "leaks")),
    Entry("cni-add-network", "kubelet",
          ["Error adding network: <rest>", "Error while adding to cni network: <rest>"],
          "ADD of the pod network failed (kubelet's or CRI-O's own CNI code)",
          "Older kubelets (with Docker) and CRI-O log a plugin's ADD error this way; it is explained below.",
          (), "", CONF + BINS),
    Entry("cni-del-network", "kubelet",
          "Error deleting network: <rest>",
          "DEL of the pod network failed (kubelet's or CRI-O's own CNI code)",
          "The runtime retries; the pod's address stays reserved until a DEL succeeds. Explained below.",
          (), "", VERSIONS + ("leaked-reservation",), ("version", "leaks")),
    # A probe's timeout is the node's traffic to a running pod, not a CNI call: this entry takes the whole
    # line, so the "deadline" of a plugin's call never claims it.
    Entry("kubelet-probe", "kubelet",
          ['<probe> probe failed: Get "<url>": <detail>', "<probe> probe failed: Get <url>: <detail>",
           "<probe> probe failed: dial tcp <detail>",
           'probeType="<probe>" <...>output="Get "<url>": <detail>',
           'probeType="<probe>" <...>output="dial tcp <detail>'],
          "kubelet's {kind} probe of {target} failed: the pod's traffic from the node, not a CNI call",
          "kubelet sends a pod's probes from the node itself (the node's network namespace) to the pod's address; "
          "no CNI plugin runs here, the pod's network was set up when it started. {why}. What the node can break "
          "on that path: its route to the pod must lead through the pod's own veth (a pod range overlapping the "
          "node's network sends it elsewhere), strict reverse-path filtering (rp_filter 1) drops the pod's "
          "replies that arrive on another interface than the node's route back, and a firewall rule or network "
          "policy may drop traffic from the node. IP forwarding is not on this path (the node talks to its own "
          "pod) but the pod's other traffic needs it; the doctor checks all three.",
          ["ip route get {pod_ip} (on the node: it must leave through the pod's host-side veth, not an uplink)",
           "curl -g -sS -m 5 -o /dev/null -w '%{{http_code}}\\n' {target} (the probe's request, sent from the "
           "node as kubelet sends it)",
           "sysctl net.ipv4.conf.all.rp_filter net.ipv4.ip_forward",
           "nsenter -t $(crictl inspect -o go-template --template '{{{{.info.pid}}}}' <container id>) -n ip route "
           "(the pod's routes: its way back to the node)"],
          "{remedy}", ("pod-range-overlap", "rp-filter-strict", "forwarding-off"), ("node",), derive=_probe),
    Entry("sandbox-setup", "containerd",
          ['failed to setup network for sandbox "<sandbox>": <rest>', "failed to setup network for sandbox: <rest>",
           'failed to set up sandbox container "<id>" network for pod "<pod>": <rest>'],
          "the runtime's ADD for a new pod sandbox failed",
          "containerd's CRI plugin (and dockershim before it) ran ADD of the pod network for a new sandbox "
          "(kubelet's RunPodSandbox) and it failed: the pod stays in ContainerCreating and kubelet retries "
          "with a new sandbox. The cause is the message after the colon, explained below.",
          ["kubectl describe pod <pod> (the FailedCreatePodSandBox events)",
           "journalctl -u containerd --since -15m | grep -i cni"], "", CONF + BINS, ("version",)),
    Entry("sandbox-destroy", "containerd",
          ['failed to destroy network for sandbox "<sandbox>": <rest>', 'failed to destroy network for sandbox "<sandbox>"'],
          "the runtime's DEL for a pod sandbox failed",
          "StopPodSandbox ran DEL of the pod network and it failed; kubelet retries, and the pod's address "
          "stays reserved until a DEL succeeds. A cached result that no longer parses, or a configuration "
          "changed or removed since the ADD, are the usual causes; the error is explained below.",
          ["ls /var/lib/cni/results/ (the cached results of this sandbox)"],
          "fix the error below; skb gc NETWORK --keep-live releases what a DEL that never succeeds leaves",
          VERSIONS + ("leaked-reservation",), ("version", "leaks")),
    Entry("crio-setup", "CRI-O",
          "failed to create pod network sandbox <sandbox>(<id>): <rest>",
          "CRI-O's ADD for pod sandbox {sandbox} failed",
          "CRI-O ran ADD of its default network for a new pod sandbox and it failed; kubelet retries with a "
          "new sandbox. The plugin's error is explained below.",
          ["journalctl -u crio --since -15m | grep -i cni"], "", CONF + BINS, ("version",)),
    Entry("crio-add-pod", "CRI-O",
          'error adding pod <pod> to CNI network "<network>": <rest>',
          "ADD of network {network} for pod {pod} failed",
          "CRI-O (ocicni) ran the network's plugins for the pod and one failed; its error is explained below.",
          (), "", CONF + BINS),
    Entry("crio-status", "CRI-O", "failed to get network status for pod sandbox <sandbox>(<id>): <rest>",
          "CRI-O could not get the network status of pod sandbox {sandbox}",
          "CRI-O asks the network for the pod's status (a CHECK) while it sets up and reports the sandbox; "
          "that failed, as explained below.", (), "", VERSIONS + BINS, ("version",)),
    Entry("crio-check-pod", "CRI-O", 'error checking pod <pod> for CNI network "<network>": <rest>',
          "CHECK of network {network} for pod {pod} failed",
          "CRI-O runs CHECK right after ADD (cniVersion 0.4.0 and later); the error is explained below.",
          (), "", VERSIONS + BINS, ("version",)),
    Entry("cni-config-uninitialized", "containerd", "cni config uninitialized",
          "the runtime has no usable CNI network configuration",
          "The runtime found no network configuration it could load in its CNI conf dir. Usual causes: the "
          "network add-on has not written its file yet (normal for a few seconds after a node joins), the "
          "file is in another directory than the runtime reads, it has an extension libcni ignores, or a file "
          "there does not parse, which aborts the whole load.",
          ["ls -l /etc/cni/net.d/ (and the conf_dir / network_dir the runtime's config names)"],
          "install the network add-on, or move its file where the runtime reads; skb doctor names the file",
          CONF),
    Entry("cni-plugin-not-initialized", "containerd", "cni plugin not initialized",
          "containerd's CRI plugin has not loaded a CNI network",
          "containerd answers this until a load of its conf dir succeeds: the directory is empty or missing, "
          "every file in it fails to load (one invalid file makes the whole load fail), or a plugin is "
          "missing. containerd reloads when the directory changes, but only the directory it found at start.",
          ["crictl info (lastCNILoadStatus)", "ls -l /etc/cni/net.d/"],
          "fix the file the doctor names; restart containerd if the directory itself was created or replaced "
          "after it started", CONF + BINS + VERSIONS),
    Entry("no-network-config", "containerd", "no network config found in <dir>",
          "containerd found no loadable network configuration in {dir}",
          "go-cni, containerd's CNI library, looked in {dir} and loaded nothing: no .conf/.conflist/.json "
          "file, only files it cannot load, or a directory removed and made again after containerd started "
          "(containerd keeps watching the one it found at start, so it never sees the new files).",
          ["ls -l {dir}", "crictl info | grep -A2 lastCNILoadStatus"],
          "write the pod network into {dir} (skb doctor says what is wrong with what is there); if {dir} was "
          "created or replaced after containerd started, restart containerd", CONF),
    Entry("load-config-file", "containerd",
          ["failed to load CNI config list file <path>: <rest>", "failed to load CNI config file <path>: <rest>"],
          "containerd could not load {path}",
          "containerd's CNI library (go-cni) reads the files of its conf dir in name order until it has "
          "max_conf_num networks (1 by default); a file it reaches that libcni refuses fails the whole load, so "
          "containerd has no network at all, not even from the files before it, and new pods wait ('cni plugin "
          "not initialized'). libcni's reason is explained below.",
          ["skb doctor (names the file, and the line and column of a JSON error)", "ls -l {path}"],
          "fix {path}, or move it out of the conf dir; containerd loads the directory again when a file in it "
          "changes", CONF),
    Entry("load-config-skipped", "CRI-O, podman or kubelet",
          ["Error loading CNI config list file <path>: <rest>", "Error loading CNI config file <path>: <rest>"],
          "{path} is skipped: it does not load",
          "CRI-O (ocicni), podman and kubelet's own CNI code (dockershim) read every file of the conf dir and skip "
          "one that libcni refuses, with this warning: the other files' networks still load, and the first of "
          "them by name becomes the default network, or none does. libcni's reason is explained below.",
          ["skb doctor (names the file, and the line and column of a JSON error)", "ls -l {path}"],
          "fix {path} or remove it; once it loads, it may become the default network (the first file by name)",
          CONF),
    Entry("cni-config-load-failed", "containerd",
          ["cni config load failed: <rest>", "cni config load failed", "failed to load cni config"],
          "containerd could not load its CNI configuration",
          "A load of the conf dir failed; libcni stops at the first failure, so one bad file (invalid JSON, a "
          "conflist without plugins, a FIFO or a directory named like a config) hides every network. The "
          "reason is explained below.", ["ls -l /etc/cni/net.d/"], "fix the file skb doctor names", CONF),
    Entry("cni-init-failed", "containerd",
          "failed to load cni during init, please check CRI plugin status before setting up network for pods",
          "containerd started without a CNI network",
          "At start containerd's CRI plugin loads the conf dir once; it failed (the reason follows on the same "
          "line). It keeps watching the directory, and pods wait until a load succeeds.",
          ["crictl info (lastCNILoadStatus)"], "write the pod network into the conf dir", CONF),
    Entry("no-networks-found", "CRI-O", ["No networks found in <dir>", "No CNI configuration file in <dir>"],
          "no network configuration file in {dir}",
          "The runtime (CRI-O's ocicni, kubelet's old CNI code, or Multus reading its own conf dir) found no "
          ".conf, .conflist or .json file it could load in {dir}. Usual causes: the network add-on has not "
          "started, it writes to another directory than this one (CRI-O: network_dir), or the file's "
          "extension or content is wrong.", ["ls -l {dir}"],
          "write the network into {dir}, or point the reader at the directory the add-on writes", CONF),
    Entry("missing-default-network", "CRI-O", "Missing CNI default network",
          "no default network (CRI-O's ocicni, or podman before 2.0)",
          "ocicni found no network to use for pods: none loaded from its network_dir, or cni_default_network "
          "names a network no file defines. A network_dir pointing elsewhere than where the add-on writes "
          "gives the same message.", ["crio config | grep -A3 crio.network", "ls -l /etc/cni/net.d/"],
          "make network_dir the directory that holds the network, or fix cni_default_network", CONF),
    Entry("podman-network-not-found", "podman", 'CNI network "<network>" not found',
          'podman has no network "{network}"',
          'podman looked for a network named "{network}" in its network_config_dir and found none it could '
          "use: no file defines it, the file does not load, or (podman 3 and 4) a plugin of it failed VERSION "
          "or does not speak its cniVersion, which makes podman drop the network without a word. After a "
          "reboot podman 3 could also lose its default network (a stale defaultCNINetExists marker).",
          ["podman network ls", "podman info --format '{{{{.Host.NetworkBackend}}}}'",
           "ls -l /etc/cni/net.d/"],
          'create the network (podman network create {network}), or fix the file skb doctor names; podman 3: '
          "remove /var/lib/containers/storage/libpod/defaultCNINetExists", CONF + BINS + VERSIONS, ("version",)),
    Entry("podman-configure-netns", "podman", "error configuring network namespace for container <id>: <rest>",
          "podman could not set up the network of container {id}",
          "podman ran ADD of the container's networks and it failed; the reason is explained below.", (), "",
          CONF + BINS),
    Entry("podman-teardown", "podman",
          "Error tearing down partially created network namespace for container <id>: <rest>",
          "podman's cleanup (DEL) after a failed start failed too",
          "After the failed ADD podman runs DEL at once; this is the DEL's error, explained below.", (), "",
          CONF + BINS),
    Entry("podman-cache", "podman", 'error loading cached network config: network "<network>" not found in CNI cache',
          'podman has no cached configuration for network "{network}"',
          "podman keeps each network's configuration in libcni's cache for the DEL; after a reboot that "
          "emptied /var/lib/cni, or a network removed in the meantime, it is gone. podman then reads the "
          "network's file from disk instead: harmless unless that fails too.", ["ls /var/lib/cni/results/"],
          "nothing to do if the container starts; otherwise see the error that follows", CONF),
    # ocicni (CRI-O) and podman's CNI backend print the same words and both skip the file: the line's own
    # prefix tells them apart (a journal line: crio[PID]: or podman[PID]:; logrus writes WARN[0000] only to a
    # terminal, where a command runs, not the crio service), else the answer names both.
    Entry("crio-validate", "CRI-O",
          ["crio[<n>]: <...>Error validating CNI config file <path>: [<rest>",
           "crio: <...>Error validating CNI config file <path>: [<rest>"],
          "CRI-O (ocicni) drops the network of {path}",
          "CRI-O's CNI library (ocicni) loads every file of its network_dir and checks each plugin of a network "
          "(VERSION) before it uses the network; here that failed, so CRI-O skips {path}: another file becomes "
          "the default network, or none does (then no pod starts: 'No CNI configuration file in ...'). The "
          "reasons are explained below.",
          ["ls -l {path}", "crio config 2>/dev/null | grep -A3 plugin_dirs (where CRI-O looks for plugins)",
           "skb doctor (reads crio.conf and /etc/crio/crio.conf.d/ as CRI-O does)"],
          "install the missing plugins into a directory of CRI-O's plugin_dirs, or add the directory that has them "
          "to plugin_dirs in crio.conf's [crio.network] (or a drop-in in /etc/crio/crio.conf.d/) and restart "
          "crio; or remove {path}", BINS + VERSIONS, ("version",)),
    Entry("podman-validate", "podman",
          ["podman[<n>]: <...>Error validating CNI config file <path>: [<rest>",
           "podman: <...>Error validating CNI config file <path>: [<rest>",
           "WARN[<n>] Error validating CNI config file <path>: [<rest>"],
          "podman drops the network of {path}",
          "podman (its CNI backend, which buildah shares) checks every plugin of a network (VERSION) before it "
          "uses the network; here that failed, so the network does not exist for podman. (A WARN[0000] line is "
          "a command's in a terminal, not the crio service's.) The reasons are explained below.", ["ls -l {path}"],
          "install the missing plugins where podman looks (cni_plugin_dirs in containers.conf), or remove "
          "{path}", BINS + VERSIONS, ("version",)),
    Entry("cni-validate", "CRI-O or podman", "Error validating CNI config file <path>: [<rest>",
          "CRI-O or podman drops the network of {path}",
          "CRI-O (ocicni) and podman (its CNI backend) both print these words when a plugin of a network fails "
          "its check (VERSION) as they load the conf dir, and both then skip {path}; this line does not say "
          "which printed it (a journal line does: crio[PID]: or podman[PID]:). The reasons are explained below.",
          ["ls -l {path}", "crio config 2>/dev/null | grep -A3 plugin_dirs (CRI-O's)",
           "grep -s -A3 cni_plugin_dirs /etc/containers/containers.conf /usr/share/containers/containers.conf "
           "(podman's)"],
          "install the missing plugins where that runtime looks: CRI-O, plugin_dirs in crio.conf's [crio.network] "
          "(or a drop-in in /etc/crio/crio.conf.d/), then restart crio; podman, cni_plugin_dirs in "
          "containers.conf. Or remove {path}", BINS + VERSIONS, ("version",)),
    Entry("podman-network-missing", "podman", "unable to find network with name or ID <name>: network not found",
          "podman has no network {name}",
          "The container was created with network {name}, which podman cannot find now: removed, renamed, or "
          "its configuration no longer loads (with the CNI backend, the file in network_config_dir).",
          ["podman network ls"], "recreate the network, or recreate the container with an existing one", CONF),
    Entry("network-info", "containerd", 'failed to find network info for sandbox "<sandbox>"',
          "containerd: the pod network's result has no IP for the pod's interface",
          "After ADD, containerd's CRI looks up the addresses of the interface it asked for (eth0) in the "
          "result; it found none: the last plugin of the chain dropped the previous result, the IPAM gave no "
          "address, or the addresses point (by interface index) at another interface.",
          ["skb doctor --probe (runs the ADD in scratch namespaces and shows the result)"],
          "make the chain end with a result that has the pod's address on eth0", CONF + BINS + RUN),
    Entry("cannot-convert", "containerd", "cannot convert: no valid IP addresses",
          "the runtime could not read an address from the plugin's result",
          "containerd's CNI library found no usable address in the ADD result (old containerd releases "
          "reading an old result version, or a plugin returning no ips).",
          ["skb doctor --probe"], "make the network's last plugin return the pod's address", RUN + IPAM),
]
