"""status's look at the cloud over plain HTTP, along the route openstacksdk last took (cloud_route.py).

Loading openstacksdk (and keystoneauth and requests with it) was most of what `gpu-rent status` cost. With a kept
route, the same four lists go out with the standard library, side by side as cloud.observe sends them, and their
JSON becomes the same CloudView through the same functions (cloud.servers_of and the rest). Anything unexpected
(a refusal, an error status, a redirect, a timeout, a body not as the SDK's would be) gives None, and status reads
through the SDK as it always did, which logs in again if need be and keeps a fresh route.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.request
from urllib.parse import urlsplit

from gpu_rent import __version__
from gpu_rent.cloud import view as cloud
from gpu_rent.cloud.route import Call, Route
from gpu_rent.project.settings import resource_names

# A cloud slower than this is waited for by the SDK path instead (whose own waits are its business).
TIMEOUT_SECONDS = 10
# The SDK follows "next" links as long as they come; a list longer than this many pages is left to it.
MAX_PAGES = 100
USER_AGENT = f"gpu-rent/{__version__} (status) Python-urllib"


class Unexpected(Exception):
    """An answer the SDK path must look at instead."""


def observe(route: Route, prefix: str) -> cloud.CloudView | None:
    """cloud.observe's view, read along route; None when anything is not as expected."""
    wanted = resource_names(prefix)
    try:
        calls = route.calls
        servers, volumes, ips, snapshots = cloud.side_by_side(
            lambda: _listed(route, calls["servers"]),
            lambda: _listed(route, calls["volumes"]),
            lambda: _listed(route, calls["floating_ips"]),
            lambda: _listed(route, calls["snapshots"]),
        )
        return cloud.CloudView(
            cloud.servers_of(servers, wanted),
            cloud.volumes_of(volumes, wanted),
            cloud.floating_ips_of(ips),
            cloud.snapshots_of(snapshots, wanted),
        )
    except Exception:  # any failure at all: the SDK path answers instead, with its own messages
        return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is the SDK path's to follow (or refuse): the token is never sent anywhere the route does not name."""

    def redirect_request(self, *args, **kwargs):
        return None


def _opener(route: Route, call: Call) -> urllib.request.OpenerDirector:
    # the proxies requests (under the SDK) chose for this endpoint, kept in the route: urllib's own reading of
    # the environment differs (its no_proxy knows no CIDR ranges) and could send the token through a proxy
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect(), urllib.request.ProxyHandler(call.proxies)]
    if any(c.endpoint.startswith("https:") for c in route.calls.values()):
        handlers.append(urllib.request.HTTPSHandler(context=_tls(route)))
    return urllib.request.build_opener(*handlers)


def _tls(route: Route) -> ssl.SSLContext:
    """TLS as keystoneauth's session had it: verify off, or against the very CA bundle requests used."""
    if route.verify is False:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif isinstance(route.verify, str) and os.path.isdir(route.verify):
        context = ssl.create_default_context(capath=route.verify)
    elif isinstance(route.verify, str):
        context = ssl.create_default_context(cafile=route.verify)
    else:
        context = ssl.create_default_context()
    if isinstance(route.cert, str):
        context.load_cert_chain(route.cert)
    elif route.cert:
        context.load_cert_chain(*route.cert)
    return context


def _listed(route: Route, call: Call) -> list:
    """Every item of one list, page after page as the SDK's Resource.list follows them."""
    opener = _opener(route, call)
    items: list = []
    url: str | None = _joined(call.endpoint, call.path)
    for _ in range(MAX_PAGES):
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT, "X-Auth-Token": route.token}
        request = urllib.request.Request(url, headers={**headers, **call.headers})
        with opener.open(request, timeout=TIMEOUT_SECONDS) as response:
            # a Link header's next page the SDK would follow too: not looked for here
            if response.status != 200 or 'rel="next"' in (response.headers.get("Link") or ""):
                raise Unexpected(f"{url}: {response.status}")
            body = json.load(response)
        page = body[call.key]
        if not isinstance(page, list):
            raise Unexpected(f"{url}: {call.key} is not a list")
        items += page
        url = _next(body, call) if page else None
        if url is None:
            return items
    raise Unexpected(f"{call.endpoint}{call.path}: more than {MAX_PAGES} pages")


def _next(body: dict, call: Call) -> str | None:
    """The next page's URL, found where openstacksdk looks (Resource._get_next_link): a `links` or
    `<key>_links` entry with rel next, else a top-level `next`."""
    links = body["links"] if "links" in body else body.get(f"{call.key}_links") or []
    if isinstance(links, dict):
        links = [{k: v} for k, v in links.items()]
    href = next((link["href"] for link in links if link.get("rel") == "next" and "href" in link), None)
    href = href or body.get("next")
    if not href:
        return None
    if href.startswith("/v"):  # "/v2.1/servers/detail?marker=...": relative to the endpoint, its version cut
        href = href[href.find("/", 1) :]
    url = href if urlsplit(href).netloc else _joined(call.endpoint, href)
    if urlsplit(url)[:2] != urlsplit(call.endpoint)[:2]:  # the token goes only where the catalog said
        raise Unexpected(f"next page on another host: {url}")
    return url


def _joined(endpoint: str, path: str) -> str:
    """keystoneauth's join of an endpoint and a relative URL."""
    return f"{endpoint.rstrip('/')}/{path.lstrip('/')}"
