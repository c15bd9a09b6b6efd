"""The hosts' path to Nova's metadata API, as Neutron's metadata agent makes it.

On a real cloud a VM asks http://169.254.169.254/ and the network node answers: the router's namespace
redirects port 80 of that address to a local haproxy (neutron/agent/l3/... metadata_driver: iptables
`-d 169.254.169.254/32 -p tcp --dport 80 -j REDIRECT --to-ports 9697`), which passes the request with
the VM's address in X-Forwarded-For to the metadata agent; the agent finds the port holding that
address, and sends the request on to nova-api-metadata with the port's device (the instance) and
project, signed with the shared secret (neutron/agent/metadata/proxy_base.py `_proxy_request`,
neutron/common/utils.py `sign_instance_id`: HMAC-SHA256 of the instance id). Nova checks the
signature and that the instance belongs to that project (nova/api/metadata/handler.py
`_handle_instance_id_request`, `_validate_shared_secret`, `_get_meta_by_instance_id`).

Here the ground's start.sh puts the same REDIRECT on the hosts' bridge, and this process is haproxy
and the agent in one: it listens on the hosts' gateway, takes the peer's address (a ground host
runs at its floating IP, so the port is the one that floating IP is bound to), and proxies to the
real nova-api-metadata on loopback with the same four headers. No port for the address: 404, as
upstream's agent answers.

Run: python -m gpu_rent_ground.metadata_proxy --listen ADDRESS:PORT --nova URL --secret-file FILE
     (admin credentials in OS_* / OS_CLOUD)
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import logging
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openstack

log = logging.getLogger("ground-metadata-proxy")
# Neutron's agent caches the port lookup too (its [cache] section); a miss is looked up again at once
# (proxy_base.py `__call__`: skip_cache=True when no instance was found).
LOOKUP_SECONDS = 5.0
# upstream's agent answers these from Nova as they come (proxy_base.py `_proxy_request`)
PASSED_ON = (200, 400, 403, 404, 409, 500, 502, 503, 504)


def sign_instance_id(secret: str, instance_id: str) -> str:
    """neutron/common/utils.py sign_instance_id: what nova's handler checks."""
    return hmac.new(secret.encode(), instance_id.encode(), hashlib.sha256).hexdigest()


class Lookup:
    """The instance and project behind an address: the port its floating IP is bound to."""

    def __init__(self, conn):
        self.conn = conn
        self.cache: dict[str, tuple[float, tuple[str, str] | None]] = {}
        self.lock = threading.Lock()

    def instance_of(self, address: str, skip_cache: bool = False) -> tuple[str, str] | None:
        with self.lock:
            cached = self.cache.get(address)
            if cached and not skip_cache and time.monotonic() - cached[0] < LOOKUP_SECONDS:
                return cached[1]
            found = None
            for ip in self.conn.network.ips(floating_ip_address=address):
                if ip.port_id:
                    port = self.conn.network.get_port(ip.port_id)
                    if port.device_id:
                        found = (port.device_id, port.project_id)
            self.cache[address] = (time.monotonic(), found)
            return found


def make_handler(lookup: Lookup, nova: urllib.parse.SplitResult, secret: str):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _proxy(self) -> None:
            address = self.client_address[0]
            try:
                found = lookup.instance_of(address) or lookup.instance_of(address, skip_cache=True)
            except Exception as e:  # the cloud's API down: what upstream's agent answers then
                log.warning("lookup of %s failed: %s", address, e)
                return self._answer(500, b"")
            if found is None:
                log.info("%s %s from %s: no port with that address", self.command, self.path, address)
                return self._answer(404, b"")
            instance_id, project_id = found
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {
                "X-Forwarded-For": address,
                "X-Instance-ID": instance_id,
                "X-Tenant-ID": project_id,
                "X-Instance-ID-Signature": sign_instance_id(secret, instance_id),
            }
            if body:
                headers["Content-Length"] = str(len(body))
            try:
                upstream = http.client.HTTPConnection(nova.hostname, nova.port, timeout=60)
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                kind = answer.getheader("Content-Type", "text/plain")
                upstream.close()
            except OSError:
                return self._answer(503, b"")
            if answer.status not in PASSED_ON:
                return self._answer(500, b"")
            self._answer(answer.status, data if answer.status == 200 else b"", kind)

        def _answer(self, status: int, data: bytes, kind: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_POST = _proxy

        def log_message(self, format: str, *args) -> None:
            log.info("%s %s", self.client_address[0], format % args)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="ADDRESS:PORT")
    parser.add_argument("--nova", required=True, help="nova-api-metadata's URL")
    parser.add_argument("--secret-file", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("openstack").setLevel(logging.WARNING)
    host, port = args.listen.rsplit(":", 1)
    handler = make_handler(Lookup(openstack.connect()), urllib.parse.urlsplit(args.nova),
                           args.secret_file.read_text().strip())  # fmt: skip
    ThreadingHTTPServer((host, int(port)), handler).serve_forever()


if __name__ == "__main__":
    main()
