"""A server URL a user gives (``bench --url``, ``mcp --server-url``), checked before any
request: http or https, a host, a valid port, as the HTTP client will parse it."""

from __future__ import annotations


def check_http_url(url: str, flag: str) -> str:
    """``url`` unchanged, or ValueError (one line naming ``flag`` and the URL) if the client
    could not send a request to it."""
    import httpx

    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{flag} must start with http:// or https://, got {url!r}")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError(f"{flag} {url!r} holds a space or control character")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise ValueError(f"{flag} {url!r} is not a valid URL: {e}") from None
    if not parsed.host:
        raise ValueError(f"{flag} {url!r} names no host")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise ValueError(f"{flag} {url!r}: port {parsed.port} is not in 1..65535")
    return url
