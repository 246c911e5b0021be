"""What ``skb install`` learns about its node by itself: the node's pod CIDRs from the Kubernetes API (read
with the pod's ServiceAccount, so the DaemonSet needs no image of anyone else's), and the MTU of the
interface the node's default route leaves by. Standard library only (see ``skb.install``).

The API is reached as every in-cluster client reaches it: ``https://$KUBERNETES_SERVICE_HOST:
$KUBERNETES_SERVICE_PORT``, the server's certificate checked against the ServiceAccount's ``ca.crt`` (its
name included: the certificate holds the service address), the ServiceAccount's ``token`` as a bearer
token (read again for every request: a projected token is rotated). The request is ``GET
/api/v1/nodes/<name>``: the ClusterRole in deploy/daemonset.yaml grants only ``get`` on nodes.
"""
import errno
import http.client
import json
import os
import ssl
import time
import urllib.parse

from skb.install.files import InstallError, read_regular

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
MAX_BODY = 4 << 20          # a Node object is a few KB; managedFields can make it tens
DEFAULT_MTU = 1500


class Retry(InstallError):
    """Worth asking again: the API cannot be reached (yet), or the node has no pod CIDR yet."""


def _read(path, what):
    try:
        data = read_regular(path, 1 << 20, f"ServiceAccount {what}")
        if data is None:
            raise OSError(errno.EINVAL, "not a regular file", path)
        return data.decode("utf-8", "replace").strip()
    except OSError as e:
        raise InstallError(f"cannot read the ServiceAccount's {what} {path}: {e.strerror} (is the pod's "
                           "ServiceAccount token mounted? automountServiceAccountToken must not be false)") from None


def api_address(environ=os.environ):
    host = environ.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = environ.get("KUBERNETES_SERVICE_PORT", "").strip() or "443"
    if not host:
        raise InstallError("KUBERNETES_SERVICE_HOST is not set: --pod-cidr-from-api works inside a Kubernetes "
                           "pod; elsewhere give --pod-cidr")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InstallError(f"KUBERNETES_SERVICE_PORT {port!r} is not a port number")
    return host, int(port)


def get_node(name, sa_dir=SA_DIR, environ=os.environ, timeout=10.0):
    """The Node object ``name`` as a dict."""
    host, port = api_address(environ)
    token = _read(os.path.join(sa_dir, "token"), "token")
    ca = os.path.join(sa_dir, "ca.crt")
    try:
        ctx = ssl.create_default_context(cadata=_read(ca, "CA certificate"))
    except (OSError, ssl.SSLError) as e:
        raise InstallError(f"cannot load the cluster's CA certificate {ca}: {e}") from None
    where = f"the Kubernetes API at {host}:{port}"
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=timeout)
    try:
        conn.request("GET", "/api/v1/nodes/" + urllib.parse.quote(name, safe=""),
                     headers={"Authorization": f"Bearer {token}", "Accept": "application/json",
                              "User-Agent": "skb-cni-install"})
        resp = conn.getresponse()
        body = resp.read(MAX_BODY + 1)
    except ssl.SSLCertVerificationError as e:
        raise InstallError(f"{where}: its certificate does not verify against {ca}: {e.verify_message}") from None
    except (OSError, http.client.HTTPException) as e:
        raise Retry(f"cannot reach {where}: {getattr(e, 'strerror', None) or e}") from None
    finally:
        conn.close()
    if resp.status in (401, 403):
        raise InstallError(f"{where} refused to show node {name!r} (HTTP {resp.status}): the pod's ServiceAccount "
                           "needs get on nodes (the ClusterRole and ClusterRoleBinding in deploy/daemonset.yaml)")
    if resp.status == 404:
        raise InstallError(f"{where} has no node {name!r}: NODE_NAME must be the pod's spec.nodeName "
                           "(the downward API, as in deploy/daemonset.yaml)")
    if resp.status != 200:
        raise InstallError(f"{where} answered HTTP {resp.status} for node {name!r}: "
                           f"{body[:200].decode('utf-8', 'replace')}")
    if len(body) > MAX_BODY:
        raise InstallError(f"{where}: the node object is larger than {MAX_BODY} bytes")
    try:
        node = json.loads(body)
    except ValueError:
        raise InstallError(f"{where}: the answer for node {name!r} is not JSON") from None
    if not isinstance(node, dict):
        raise InstallError(f"{where}: the answer for node {name!r} is not an object")
    return node


def pod_cidrs_of(node, name):
    """The pod CIDRs of a Node object as text (``spec.podCIDRs``, else ``spec.podCIDR``)."""
    spec = node.get("spec") if isinstance(node.get("spec"), dict) else {}
    cidrs = spec.get("podCIDRs")
    if not isinstance(cidrs, list) or not cidrs:
        cidrs = [spec["podCIDR"]] if isinstance(spec.get("podCIDR"), str) and spec["podCIDR"] else []
    if not all(isinstance(c, str) for c in cidrs):
        raise InstallError(f"node {name!r}: spec.podCIDRs is not a list of strings")
    if not cidrs:
        raise Retry(f"node {name!r} has no spec.podCIDRs yet: is kube-controller-manager run with "
                     "--allocate-node-cidrs (kubeadm: --pod-network-cidr)?")
    return " ".join(cidrs)


def node_pod_cidrs(name, sa_dir=SA_DIR, environ=os.environ, wait=300.0, log=None, sleep=time.sleep):
    """The pod CIDRs of node ``name`` (text for ``parse_pod_cidrs``). A node that has none yet, or an API
    that cannot be reached, is asked again every few seconds for up to ``wait`` seconds (the controller
    allocates a node's CIDR shortly after the node registers)."""
    if not name:
        raise InstallError("no node name: set NODE_NAME from the pod's spec.nodeName (downward API) or give "
                           "--node-name")
    deadline = time.monotonic() + wait
    delay = 1.0
    while True:
        try:
            return pod_cidrs_of(get_node(name, sa_dir, environ), name)
        except Retry as e:
            if time.monotonic() + delay > deadline:
                raise
            if log:
                log(f"install: {e}; asking again in {delay:g}s")
            sleep(delay)
            delay = min(delay * 2, 10.0)


# ------------------------------------------------------------------------------------ MTU

def default_route_interface(proc="/proc"):
    """The interface of the node's default route: IPv4's with the lowest metric, else IPv6's (never lo,
    where the kernel keeps unreachable defaults). None when the node has no default route."""
    best = None
    try:
        with open(os.path.join(proc, "net", "route"), encoding="ascii", errors="replace") as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if len(fields) < 8 or fields[1] != "00000000" or fields[7] != "00000000":
                    continue
                flags, metric = int(fields[3], 16), int(fields[6])
                if flags & 1 and fields[0] != "lo" and (best is None or metric < best[1]):   # RTF_UP
                    best = (fields[0], metric)
    except (OSError, ValueError):
        pass
    if best:
        return best[0]
    try:
        with open(os.path.join(proc, "net", "ipv6_route"), encoding="ascii", errors="replace") as f:
            for line in f.read().splitlines():
                fields = line.split()
                if len(fields) == 10 and fields[0] == "0" * 32 and fields[1] == "00" and fields[9] != "lo" \
                        and int(fields[8], 16) & 1 and (best is None or int(fields[5], 16) < best[1]):
                    best = (fields[9], int(fields[5], 16))
    except (OSError, ValueError):
        pass
    return best[0] if best else None


def default_route_mtu(proc="/proc", sys_dir="/sys"):
    """(interface, MTU) of the default route's interface, or (None, None)."""
    iface = default_route_interface(proc)
    if not iface or "/" in iface:
        return None, None
    try:
        with open(os.path.join(sys_dir, "class", "net", iface, "mtu"), encoding="ascii") as f:
            return iface, int(f.read().strip())
    except (OSError, ValueError):
        return iface, None
