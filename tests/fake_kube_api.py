"""A stand-in for the Kubernetes API server, as far as ``skb install --pod-cidr-from-api`` uses it: ``GET
/api/v1/nodes/NAME`` over TLS on 127.0.0.1, with a certificate for that address made by openssl, and a
ServiceAccount dir (token, ca.crt) that a pod would have mounted. It listens only on the loopback of the
sandbox's netns (or of ``netns``, a netns path: the socket is made by a thread that entered it)."""
import ctypes
import http.server
import json
import os
import ssl
import subprocess
import threading

CLONE_NEWNET = 0x40000000


class FakeAPI:
    """``nodes``: {name: spec dict, or a list of specs served in turn (the last one stays)}; ``status``
    403 refuses every request; ``requests``: (path, Authorization header) of each request."""

    def __init__(self, tmp, token="t0ken", netns=None):
        self.dir = os.path.join(tmp, "api")
        os.makedirs(self.dir)
        key, crt = os.path.join(self.dir, "key.pem"), os.path.join(self.dir, "crt.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                        "-days", "2", "-subj", "/CN=kubernetes", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        self.sa = os.path.join(tmp, "serviceaccount")
        os.makedirs(self.sa)
        with open(os.path.join(self.sa, "token"), "w") as f:
            f.write(token + "\n")
        with open(crt, "rb") as src, open(os.path.join(self.sa, "ca.crt"), "wb") as dst:
            dst.write(src.read())
        self.token, self.nodes, self.requests, self.status = token, {}, [], 200
        handler = self._handler()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        made = {}

        def make():
            try:
                if netns:
                    fd = os.open(netns, os.O_RDONLY)
                    libc = ctypes.CDLL(None, use_errno=True)
                    if libc.setns(fd, CLONE_NEWNET) != 0:     # this thread only
                        raise OSError(ctypes.get_errno(), f"setns {netns}")
                    os.close(fd)
                server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
                server.socket = ctx.wrap_socket(server.socket, server_side=True)
                made["server"] = server
            except Exception as e:  # reported by the constructor
                made["error"] = e

        t = threading.Thread(target=make)
        t.start()
        t.join()
        if "error" in made:
            raise made["error"]
        self.server = made["server"]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.server.server_port)}

    def _handler(self):
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                api.requests.append((self.path, self.headers.get("Authorization")))
                name = self.path.rsplit("/", 1)[-1]
                if self.headers.get("Authorization") != f"Bearer {api.token}" or api.status == 403:
                    code, body = 403, {"kind": "Status", "reason": "Forbidden"}
                elif not self.path.startswith("/api/v1/nodes/") or name not in api.nodes:
                    code, body = 404, {"kind": "Status", "reason": "NotFound"}
                else:
                    spec = api.nodes[name]
                    if isinstance(spec, list):
                        spec = spec.pop(0) if len(spec) > 1 else spec[0]
                    code, body = 200, {"kind": "Node", "metadata": {"name": name}, "spec": spec}
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        return Handler

    def close(self):
        self.server.shutdown()
        self.server.server_close()
