"""Helpers for the ptp tests: configs, a runner, kernel/firewall/IPAM state snapshots, and traffic
(ICMP echo and HTTP) between namespaces made inside the sandbox. Everything here reads state with
independent tools (`ip -j`, iptables-save, nft, the dataDir), never through skb."""
import json
import os
import re
import subprocess
import sys
import time

from tests.helpers import GO_BIN_DIR, cni_env, ip_json, run_plugin

GO_PTP = os.path.join(GO_BIN_DIR, "ptp")


def ptp_conf(data_dir, version="1.0.0", name="ptpnet", v4="10.22.0.0/24", v6=None, routes=None, **extra):
    """A ptp config with host-local IPAM over ``v4`` and/or ``v6`` (each its own range set)."""
    ranges = []
    if v4:
        ranges.append([{"subnet": v4}])
    if v6:
        ranges.append([{"subnet": v6}])
    if routes is None:
        routes = ([{"dst": "0.0.0.0/0"}] if v4 else []) + ([{"dst": "::/0"}] if v6 else [])
    c = {"cniVersion": version, "name": name, "type": "ptp",
         "ipam": {"type": "host-local", "ranges": ranges, "routes": routes, "dataDir": data_dir}}
    c.update(extra)
    return c


class Ptp:
    """Runs one ptp executable with a given CNI_PATH (which decides the host-local used)."""

    def __init__(self, exe, cni_path, extra_env=None):
        self.exe = exe
        self.cni_path = cni_path
        self.extra_env = dict(extra_env or {})

    def __call__(self, command, conf, netns="", containerid="ctr1", ifname="eth0", args="", **env):
        e = cni_env(command, containerid=containerid, netns=netns, ifname=ifname, args=args, path=self.cni_path)
        e.update(self.extra_env)
        e.update(env)
        return run_plugin(self.exe, e, conf)

    def add(self, conf, netns, **kw):
        return self("ADD", conf, netns, **kw)

    def delete(self, conf, netns="", prev=None, **kw):
        if prev is not None:
            conf = dict(conf, prevResult=prev)
        return self("DEL", conf, netns, **kw)

    def check(self, conf, netns, prev, **kw):
        return self("CHECK", dict(conf, prevResult=prev), netns, **kw)


def nspath(name):
    return f"/run/netns/{name}"


# --------------------------------------------------------------------------------------------------
# state


def _run(*cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.stdout if p.returncode == 0 else f"<{cmd[0]} failed: {p.stderr.strip()}>"


def iptables_rules():
    """The nat rules and chains of both families, without the timestamped comment lines."""
    out = []
    for tool in ("iptables-save", "ip6tables-save"):
        out += [f"{tool}: {line}" for line in _run(tool, "-t", "nat").splitlines()
                if line.startswith(("-A ", ":CNI-"))]
    return sorted(out)


def masq_chain_rules():
    """The iptables lines of ptp masquerade chains (CNI-<24 hex>): other plugins' chains (portmap's
    CNI-HOSTPORT-*, CNI-DN-*) left in the sandbox by other tests are not ours to judge."""
    return [line for line in iptables_rules() if re.search(r"CNI-[0-9a-f]{24}\b", line)]


def nft_masq_rules():
    """The rules in our nftables masquerade chain (the table and its chains may exist; rules are
    per attachment)."""
    p = subprocess.run(["nft", "-j", "list", "chain", "inet", "cni_plugins_masquerade", "masq_checks"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return []
    return [item["rule"].get("comment", "") for item in json.loads(p.stdout)["nftables"] if "rule" in item]


def reservations(data_dir, name="ptpnet"):
    """host-local's reservation files (address -> content), without the bookkeeping files."""
    d = os.path.join(data_dir, name)
    if not os.path.isdir(d):
        return {}
    out = {}
    for f in os.listdir(d):
        if f.startswith(("last_reserved_ip", "lock", ".")) or os.path.isdir(os.path.join(d, f)):
            continue
        with open(os.path.join(d, f), "rb") as fh:
            out[f] = fh.read()
    return out


def _routes(netns=None):
    out = []
    for fam in ("-4", "-6"):
        for r in ip_json(fam, "route", "show", "table", "all", netns=netns):
            if r.get("type") in ("multicast",) or r.get("dst", "").startswith(("fe80", "ff00")):
                continue
            out.append(json.dumps({k: v for k, v in r.items() if k not in ("expires",)}, sort_keys=True))
    return sorted(out)


def netns_state(netns=None):
    """Links, addresses and routes of a netns (None: the sandbox host), comparable with ==."""
    links = sorted((l["ifname"], l.get("link_type"), "UP" in l["flags"]) for l in ip_json("link", "show", netns=netns))
    addrs = sorted((a["ifname"], f"{i['local']}/{i['prefixlen']}") for a in ip_json("addr", "show", netns=netns)
                   for i in a.get("addr_info", []) if not i["local"].startswith("fe80"))
    return {"links": links, "addrs": addrs, "routes": _routes(netns)}


SYSCTLS = ("net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding")


def host_sysctls():
    out = {}
    for name in SYSCTLS:
        with open("/proc/sys/" + name) as f:
            out[name] = f.read().strip()
    return out


def snapshot(data_dir, netns_names=(), name="ptpnet"):
    """Everything a ptp ADD may change: host and container kernel state, firewall rules, IPAM files,
    host sysctls."""
    return {"host": netns_state(), "netns": {n: netns_state(n) for n in netns_names},
            "iptables": iptables_rules(), "nft": nft_masq_rules(), "ipam": reservations(data_dir, name),
            "sysctl": host_sysctls()}


def host_veths():
    return [l["ifname"] for l in ip_json("link", "show") if l["ifname"].startswith("veth")]


# --------------------------------------------------------------------------------------------------
# traffic

_PING = r"""
import os, socket, struct, sys, time
dst, count = sys.argv[1], int(sys.argv[2])
v6 = ":" in dst
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW,
                  socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP)
s.settimeout(1.0)
ident = os.getpid() & 0xFFFF
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b)); t = (t >> 16) + (t & 0xFFFF); t += t >> 16
    return ~t & 0xFFFF
got = 0
for seq in range(count):
    payload = b"skb-ptp-test"
    typ = 128 if v6 else 8
    hdr = struct.pack("!BBHHH", typ, 0, 0, ident, seq)
    if not v6:
        hdr = struct.pack("!BBHHH", typ, 0, csum(hdr + payload), ident, seq)
    s.sendto(hdr + payload, (dst, 0))
    deadline = time.time() + 1.0
    while time.time() < deadline:
        try:
            data, addr = s.recvfrom(2048)
        except socket.timeout:
            break
        icmp = data if v6 else data[(data[0] & 0xF) * 4:]
        t, _c, _s, i, q = struct.unpack("!BBHHH", icmp[:8])
        if t == (129 if v6 else 0) and i == ident and q == seq:
            got += 1
            break
print(got)
sys.exit(0 if got == count else 1)
"""


def in_netns(netns, argv):
    return (["ip", "netns", "exec", netns] if netns else []) + argv


def ping(dst, netns=None, count=2):
    """ICMP echo from ``netns`` (None: the sandbox host) to ``dst``; True when every echo was answered."""
    p = subprocess.run(in_netns(netns, [sys.executable, "-c", _PING, dst, str(count)]),
                       capture_output=True, text=True, timeout=30)
    return p.returncode == 0


_SERVER = r"""
import http.server, socket, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("pod %s\n" % sys.argv[2]).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
class S(http.server.HTTPServer):
    address_family = socket.AF_INET6
    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()
srv = S(("::", int(sys.argv[1])), H)
print("ready", flush=True)
srv.serve_forever()
"""


class HTTPServer:
    """A tiny HTTP server in a netns (dual-stack, port ``port``) answering ``pod <label>``."""

    def __init__(self, netns, port=8080, label="x"):
        self.proc = subprocess.Popen(in_netns(netns, [sys.executable, "-c", _SERVER, str(port), label]),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError(f"server did not start: {self.proc.stderr.read()}")

    def stop(self):
        self.proc.kill()
        self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def http_get(ip, port=8080, netns=None, timeout=3):
    """GET http://ip:port/ from ``netns`` (None: the sandbox host, as a kubelet probe): (status, body)."""
    host = f"[{ip}]" if ":" in ip else ip
    code = ("import sys, urllib.request\n"
            f"r = urllib.request.urlopen('http://{host}:{port}/', timeout={timeout})\n"
            "print(r.status, r.read().decode().strip())")
    p = subprocess.run(in_netns(netns, [sys.executable, "-c", code]), capture_output=True, text=True,
                       timeout=timeout + 10)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    status, _, body = p.stdout.strip().partition(" ")
    return int(status), body


def wait_for(pred, timeout=5.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()
