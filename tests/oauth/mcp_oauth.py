"""The official Python MCP SDK's OAuth client against an MCP server that wants a token.

    python mcp_oauth.py MCP_URL [--expect-tool NAME ...] [--call NAME JSON_ARGS]
                        [--login NAME] [--auth-method none|client_secret_basic|client_secret_post]
                        [--timeout SECONDS] [--trace]

Run with the interpreter tests/mcp/setup.sh installs (target/mcp-deps/py/bin/python,
mcp 2.3.0). Connects to the Streamable HTTP endpoint MCP_URL with the SDK's
`OAuthClientProvider`, which, on the server's 401, reads the protected resource
metadata (the `resource_metadata` of `WWW-Authenticate`), discovers the
authorization server (RFC 8414, falling back to OpenID discovery), registers a
client dynamically and runs authorization code + PKCE with the `resource` of
the metadata (RFC 8707). No browser: the redirect handler follows the
authorization URL with httpx2, signs in on the provider's development login
page as --login (default "alice"), confirms the consent page and stops at the
redirect to the client's loopback redirect_uri (nothing listens there: `code`,
`state` and `iss` are read from the `Location` header). Then `tools/list`,
and `tools/call` of --call's tool with its arguments (a JSON object), must
succeed, and every --expect-tool must be listed.

On success: one JSON line on stdout, e.g.
    {"ok": true, "tools": [...], "call": {...}, "unauthorized": 1, "token": {...}, ...}
and exit 0. On failure: the failing step and its details on stderr (with the
HTTP exchanges so far), exit 1. Usage errors exit 2. The whole run is bounded
by --timeout (default 60 s).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
import time
import traceback
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

# The client's redirect_uri. Nothing listens there: the scripted browser stops
# at the redirect to it. A loopback http URI, as for a native client.
REDIRECT_URI = "http://127.0.0.1:33418/callback"
# Redirects the scripted browser follows at most (authorization endpoint ->
# login -> resume -> consent -> resume -> redirect_uri is about 6).
MAX_BROWSER_STEPS = 20


class StepFailed(Exception):
    """A step of the run did not go as it must."""

    def __init__(self, step: str, details: str) -> None:
        super().__init__(f"{step}: {details}")
        self.step = step


class MemoryStorage(TokenStorage):
    """Tokens and the registered client, for this run only."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Traffic:
    """Every HTTP exchange of the run (the MCP client's and the scripted browser's)."""

    def __init__(self) -> None:
        self.exchanges: list[str] = []
        self.unauthorized = 0  # 401s from the MCP endpoint
        self.mcp_url = ""
        self.step = "start"  # the step in progress, for a timeout's report

    async def on_response(self, response: httpx2.Response) -> None:
        request = response.request
        line = f"{request.method} {request.url} -> {response.status_code}"
        challenge = response.headers.get("www-authenticate")
        if challenge:
            line += f" (WWW-Authenticate: {challenge})"
        location = response.headers.get("location")
        if location:
            line += f" (Location: {location})"
        self.exchanges.append(line)
        if response.status_code == 401 and str(request.url).split("?")[0] == self.mcp_url:
            self.unauthorized += 1


class FormParser(HTMLParser):
    """The forms of an HTML page: action, method and the inputs' names and values."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag == "form":
            self.forms.append(
                {"action": attributes.get("action", ""), "method": attributes.get("method", "get"), "inputs": {}}
            )
        elif tag == "input" and self.forms and "name" in attributes:
            self.forms[-1]["inputs"][attributes["name"]] = attributes.get("value", "")


class ScriptedBrowser:
    """Plays the user at the authorization server's development login and consent pages."""

    def __init__(self, login: str, traffic: Traffic) -> None:
        self.login = login
        self.traffic = traffic
        self.result: AuthorizationCodeResult | None = None
        self.requested: dict[str, str] = {}  # the authorization request's parameters
        self.pages: list[str] = []  # what the user saw: "login", "consent"

    async def redirect_handler(self, authorization_url: str) -> None:
        query = parse_qs(urlsplit(authorization_url).query)
        self.requested = {key: values[0] for key, values in query.items() if key != "code_challenge"}
        async with httpx2.AsyncClient(
            follow_redirects=False,
            timeout=httpx2.Timeout(10.0),
            event_hooks={"response": [self.traffic.on_response]},
        ) as browser:
            method, url, form = "GET", authorization_url, None
            for _ in range(MAX_BROWSER_STEPS):
                if method == "GET":
                    response = await browser.get(url)
                else:
                    response = await browser.post(url, data=form)
                if response.is_redirect:
                    target = urljoin(str(response.url), response.headers["location"])
                    if target.split("?")[0] == REDIRECT_URI:
                        self.result = self.callback_result(target)
                        return
                    method, url, form = "GET", target, None
                    continue
                if response.status_code != 200:
                    raise StepFailed(
                        "authorization",
                        f"{response.request.method} {response.url} answered {response.status_code}: {response.text[:500]}",
                    )
                method, url, form = self.fill_in(response)
            raise StepFailed("authorization", f"no redirect to {REDIRECT_URI} after {MAX_BROWSER_STEPS} pages")

    def fill_in(self, page: httpx2.Response) -> tuple[str, str, dict[str, str]]:
        """The form the user submits on this page: sign in, or confirm consent."""
        parser = FormParser()
        parser.feed(page.text)
        forms = [f for f in parser.forms if f["inputs"].get("prompt") in ("login", "consent")]
        if not forms:
            raise StepFailed("authorization", f"{page.url}: neither a login nor a consent form in: {page.text[:500]}")
        form = forms[0]
        prompt = form["inputs"]["prompt"]
        self.pages.append(prompt)
        data = dict(form["inputs"])
        if prompt == "login":
            data.update({"login": self.login, "password": "any password"})
        return form["method"].upper(), urljoin(str(page.url), form["action"]), data

    def callback_result(self, redirect: str) -> AuthorizationCodeResult:
        query = {key: values[0] for key, values in parse_qs(urlsplit(redirect).query).items()}
        if "error" in query:
            raise StepFailed(
                "authorization",
                f"the authorization server redirected with error {query['error']}: {query.get('error_description', '')}",
            )
        if "code" not in query:
            raise StepFailed("authorization", f"redirect to the client without a code: {redirect}")
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

    async def callback_handler(self) -> AuthorizationCodeResult:
        if self.result is None:
            raise StepFailed("authorization", "the redirect handler did not reach the client's redirect_uri")
        return self.result


def jwt_parts(token: str) -> dict[str, Any] | None:
    """A JWT's header and claims, unverified (for the summary); None for an opaque token."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        header, claims = (json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in parts[:2])
    except ValueError:
        return None
    return {"header": header, "claims": claims}


async def run(args: argparse.Namespace, traffic: Traffic) -> dict[str, Any]:
    traffic.mcp_url = args.url
    storage = MemoryStorage()
    browser = ScriptedBrowser(args.login, traffic)
    auth = OAuthClientProvider(
        server_url=args.url,
        client_metadata=OAuthClientMetadata(
            client_name="haip mcp_oauth.py",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method=args.auth_method,
        ),
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )
    http = httpx2.AsyncClient(
        auth=auth,
        timeout=httpx2.Timeout(15.0),
        event_hooks={"response": [traffic.on_response]},
    )
    summary: dict[str, Any] = {"ok": True}
    step = traffic.step = "connect"
    try:
        async with http, streamable_http_client(args.url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                step = traffic.step = "initialize (with the OAuth flow on the first 401)"
                init = await session.initialize()
                summary["server"] = init.server_info.name
                summary["protocol_version"] = init.protocol_version
                if storage.tokens is None:
                    raise StepFailed(step, "the session started without the OAuth flow: the server asked for no token")

                step = traffic.step = "tools/list"
                tools = [tool.name for tool in (await session.list_tools()).tools]
                summary["tools"] = tools
                missing = [name for name in args.expect_tool if name not in tools]
                if missing:
                    raise StepFailed(step, f"expected tool(s) {missing} not listed; listed: {tools}")

                if args.call:
                    name, raw = args.call
                    step = traffic.step = f"tools/call {name}"
                    result = await session.call_tool(name, json.loads(raw))
                    texts = [block.text for block in result.content if block.type == "text"]
                    summary["call"] = {
                        "name": name,
                        "is_error": bool(result.is_error),
                        "structured": result.structured_content,
                        "text": "\n".join(texts),
                    }
                    if result.is_error:
                        raise StepFailed(step, f"the tool answered an error: {summary['call']}")
    except StepFailed:
        raise
    except Exception as exc:  # not cancellation: --timeout reports itself
        leaves = failures(exc)
        for leaf in leaves:
            if isinstance(leaf, StepFailed):
                raise leaf from exc
        raise StepFailed(step, "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves)) from exc

    tokens = storage.tokens
    client = storage.client_info
    assert tokens is not None and client is not None
    summary["unauthorized"] = traffic.unauthorized
    summary["login_pages"] = browser.pages
    summary["client_id"] = client.client_id
    summary["token_endpoint_auth_method"] = client.token_endpoint_auth_method
    summary["requested"] = {k: browser.requested.get(k) for k in ("resource", "scope", "prompt")}
    summary["token"] = {
        "scope": tokens.scope,
        "expires_in": tokens.expires_in,
        "refresh_token": tokens.refresh_token is not None,
        "jwt": jwt_parts(tokens.access_token),
    }
    return summary


def failures(exc: BaseException) -> list[BaseException]:
    """The leaf exceptions of a (possibly nested) exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in failures(inner)]
    return [exc]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="MCP client with OAuth (authorization code + PKCE) via the Python SDK")
    parser.add_argument("url", help="the MCP Streamable HTTP endpoint, e.g. http://127.0.0.1:8080/mcp")
    parser.add_argument("--expect-tool", action="append", default=[], metavar="NAME", help="a tool that must be listed")
    parser.add_argument("--call", nargs=2, metavar=("NAME", "JSON_ARGS"), help="a tool to call, with its arguments")
    parser.add_argument("--login", default="alice", help="the user signing in at the authorization server")
    parser.add_argument(
        "--auth-method",
        default="none",
        choices=["none", "client_secret_basic", "client_secret_post"],
        help="the token_endpoint_auth_method to register the client with (default: none, a public client)",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="overall limit in seconds (default 60)")
    parser.add_argument("--trace", action="store_true", help="print every HTTP exchange on stderr, on success too")
    args = parser.parse_args()
    if args.call:
        try:
            arguments = json.loads(args.call[1])
        except ValueError as exc:
            parser.error(f"--call {args.call[0]}: the arguments are not JSON: {exc}")
        if not isinstance(arguments, dict):
            parser.error(f"--call {args.call[0]}: the arguments must be a JSON object")
    if not args.url.startswith(("http://", "https://")):
        parser.error(f"the MCP URL must be http(s): {args.url}")
    return args


def main() -> int:
    args = parse_args()
    # The SDK logs the OAuth flow's failure with a traceback and then raises it;
    # this script reports the raised error itself (--trace keeps the SDK's log).
    if not args.trace:
        logging.getLogger("mcp.client.auth").setLevel(logging.CRITICAL)
    traffic = Traffic()
    started = time.monotonic()

    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(args.timeout):
            return await run(args, traffic)

    try:
        summary = anyio.run(bounded)
    except BaseException as exc:  # report everything, then fail
        leaves = failures(exc)
        for leaf in leaves:
            if isinstance(leaf, StepFailed):
                print(f"FAILED at {leaf}", file=sys.stderr)
            elif isinstance(leaf, TimeoutError):
                print(f"FAILED: no result within --timeout {args.timeout:g} s, at step {traffic.step}", file=sys.stderr)
            else:
                print("FAILED with an exception:", file=sys.stderr)
                traceback.print_exception(leaf, file=sys.stderr)
        print("HTTP exchanges so far:", file=sys.stderr)
        for line in traffic.exchanges:
            print(f"  {line}", file=sys.stderr)
        return 1
    if args.trace:
        for line in traffic.exchanges:
            print(f"  {line}", file=sys.stderr)
    summary["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(summary, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
