"""The messages of network add-ons behind the runtime's wrapper: flannel, Calico, AWS VPC CNI and Multus.
A good answer names the add-on, what its plugin depends on (its daemon, its token, its datastore) and
where to look."""
from skb.tool.catalogue.entry import BINS, CONF, Entry

FLANNEL_ENV = "/run/flannel/subnet.env"

ENTRIES = [
    Entry("flannel-subnet-env", "flannel",
          ["loadFlannelSubnetEnv failed: open <path>: no such file or directory",
           f"open {FLANNEL_ENV}: no such file or directory"],
          "flannel: {path} is missing, so flanneld is not running on this node (or not yet)",
          "flannel's CNI plugin reads the node's subnet from {path}, which flanneld (the kube-flannel "
          "DaemonSet's pod on this node) writes once it holds a lease. It is missing: flanneld is not running "
          "here (a crash loop, not scheduled, a node without a podCIDR), has not started yet, or flannel was "
          "removed and its file stayed in the conf dir, so pods still go to it.",
          ["kubectl -n kube-flannel get pods -o wide --field-selector spec.nodeName=<node>",
           "kubectl -n kube-flannel logs <that pod>",
           "kubectl get node <node> -o jsonpath='{{.spec.podCIDR}}'", "ls -l {path} /etc/cni/net.d/"],
          "get flanneld running on this node (it needs the node's podCIDR: kubeadm --pod-network-cidr, or "
          "the controller manager's --allocate-node-cidrs); if flannel was removed on purpose, delete its "
          "file from the conf dir", CONF, defaults={"path": FLANNEL_ENV}),
    Entry("flannel-delegate", "flannel", ["failed to delegate add: <rest>", "failed to delegate del: <rest>"],
          "flannel's delegated plugin failed",
          "flannel's CNI plugin does no networking itself: it hands the pod to the bridge plugin (and bridge "
          "to host-local) with the node's subnet. That delegate failed, as explained below; it must be "
          "installed beside flannel.", ["ls -l /opt/cni/bin/bridge /opt/cni/bin/host-local"], "", BINS),
    Entry("calico-clusterinfo", "Calico", "error getting ClusterInformation: <rest>",
          "Calico's plugin could not read its cluster information from the API server",
          "Every Calico CNI call starts by reading the ClusterInformation resource through the Kubernetes API "
          "(with /etc/cni/net.d/calico-kubeconfig). That failed, as explained below.",
          ["kubectl get clusterinformations.crd.projectcalico.org default"], "", ()),
    Entry("calico-unauthorized", "Calico", "connection is unauthorized: Unauthorized",
          "Calico's plugin was refused by the API server: its token is no longer valid",
          "The plugin authenticates with the token calico-node writes into /etc/cni/net.d/calico-kubeconfig "
          "and renews. The API server refused it: calico-node is not running on this node (so nobody renews "
          "the token), its service account or RBAC was deleted or recreated, or the kubeconfig points at a "
          "cluster that was rebuilt.",
          ["kubectl get pods -A -o wide | grep calico-node | grep <node>",
           "ls -l /etc/cni/net.d/calico-kubeconfig (when was it written?)",
           "kubectl get clusterrolebinding calico-node calico-cni-plugin"],
          "restart calico-node on this node so it writes a fresh token; reapply Calico's manifest if its RBAC "
          "is gone", ()),
    Entry("calico-nodename", "Calico", "stat /var/lib/calico/nodename: no such file or directory",
          "Calico: /var/lib/calico/nodename is missing, so calico-node has not started on this node",
          "The plugin learns the node's Calico name from /var/lib/calico/nodename, which calico-node writes "
          "at start (it must have the host's /var/lib/calico mounted). Missing: calico-node is not running "
          "here or still starting, crash-looping, or runs without that mount.",
          ["kubectl get pods -A -o wide | grep calico-node | grep <node>", "kubectl logs <that pod> -c calico-node",
           "ls -l /var/lib/calico/"],
          "get calico-node running on the node (its init containers first); the file appears when it does", ()),
    Entry("aws-assign", "AWS VPC CNI", "add cmd: failed to assign an IP address to container",
          "AWS VPC CNI: ipamd had no free address for the pod",
          "The aws-cni plugin asks ipamd (the aws-node DaemonSet's pod on this node) for one of the ENI "
          "addresses it keeps warm. None was free: the instance type's ENI and address limit is reached (its "
          "max pods), the subnet has run out of addresses, ipamd has not attached ENIs yet (just started), or "
          "with security groups for pods the branch ENI is not attached yet.",
          ["/var/log/aws-routed-eni/ipamd.log on the node", "kubectl -n kube-system get pods -l k8s-app=aws-node -o wide",
           "kubectl describe node <node> (pods against its pod limit)", "the subnet's free addresses (VPC console)"],
          "schedule fewer pods on the node or use a larger instance type, free or add subnet addresses, or "
          "enable prefix delegation (ENABLE_PREFIX_DELEGATION)", ()),
    Entry("aws-delete", "AWS VPC CNI",
          "Failed to process delete request for pod <pod> namespace <name> container <id>: <rest>",
          "AWS VPC CNI: the DEL of pod {pod} failed",
          "aws-cni asks ipamd to release the pod's address on DEL; that request failed, as explained below "
          "(an error of '<nil>' is a bug of older releases that hides the reason).",
          ["/var/log/aws-routed-eni/plugin.log and ipamd.log"], "upgrade the VPC CNI if the error is <nil>", ()),
    Entry("aws-delnetwork", "AWS VPC CNI", "Error received from DelNetwork gRPC call for container <id>: <rest>",
          "AWS VPC CNI: ipamd did not answer the DEL of container {id}",
          "aws-cni's DEL calls ipamd over gRPC on 127.0.0.1:50051; the call failed, as explained below.",
          ["/var/log/aws-routed-eni/ipamd.log"], "", ()),
    Entry("aws-ipamd-down", "AWS VPC CNI", "dial tcp 127.0.0.1:50051: connect: connection refused",
          "AWS VPC CNI: ipamd is not running on this node",
          "Nothing listens on 127.0.0.1:50051, ipamd's port: the aws-node pod on this node is down, crash "
          "looping or restarting (after an upgrade). Pods wait, and DELs fail until it is back.",
          ["kubectl -n kube-system get pods -l k8s-app=aws-node -o wide", "kubectl -n kube-system logs <that pod>"],
          "get aws-node running on the node (its logs say why it is not)", ()),
    Entry("multus-delegate", "Multus",
          ['[<pod>:<network>]: error adding container to network "<network2>": <rest>',
           '[<pod>:<network>]: error deleting container from network "<network2>": <rest>'],
          "Multus: network {network2} of pod {pod} failed",
          "Multus runs each network of the pod (the cluster's default one, then those the pod's annotation "
          "asks for) as a delegate; this one failed with the error explained below.",
          ["kubectl get network-attachment-definitions -A", "the delegate network's config"], "", BINS),
    Entry("multus-k8s-delegates", "Multus", "Multus: [<pod>]: error loading k8s delegates k8s args: <rest>",
          "Multus could not load the networks of pod {pod}",
          "Multus reads the pod's network annotation and the NetworkAttachmentDefinitions it names, or the "
          "delegate's file in its own conf dir; that failed, as explained below.",
          ["kubectl get network-attachment-definitions -A", "ls -l /etc/cni/multus/net.d/"], "", CONF),
    Entry("multus-invoke", "Multus", 'Multus: error in invoke Delegate add - "<plugin>": <rest>',
          "Multus: its delegate {plugin} failed",
          "Multus ran {plugin} for the pod's network and it failed, as explained below.", (), "", BINS),
    Entry("multus-shim", "Multus", "CNI request failed with status <n>",
          "Multus (thick plugin): the multus daemon answered the shim with HTTP status {n}",
          "The multus-shim binary the runtime runs only forwards the call to the multus daemon on the node; "
          "the daemon answered {n}. Its own log has the delegate's real error.",
          ["kubectl -n kube-system logs <the multus pod on this node>"], "read the daemon's log for the real error",
          BINS),
]
