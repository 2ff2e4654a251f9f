"""Server URLs a user gives are checked before any request: one ValueError naming the flag."""

from __future__ import annotations

import pytest

from claimbench.serving.clients.urls import check_http_url


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("notaurl", "must start with http:// or https://"),
        ("ftp://host/", "must start with http:// or https://"),
        ("http://[::1", "is not a valid URL"),
        ("http://", "names no host"),
        ("https://:80", "names no host"),
        ("http://host:99999", "port 99999 is not in 1..65535"),
        ("http://ho st:8000", "space or control character"),
        ("http://host:8000/v1\n", "space or control character"),
    ],
)
def test_a_url_no_request_could_go_to_is_one_line(url, words):
    with pytest.raises(ValueError, match="^--url ") as info:
        check_http_url(url, "--url")
    assert words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "https://example.org/v1", "http://[::1]:8000", "http://h"]
)
def test_good_urls_pass_unchanged(url):
    assert check_http_url(url, "--url") == url


def test_bench_and_mcp_refuse_a_bad_url_in_one_line(tmp_path):
    from cli_helpers import assert_one_line_error, invoke

    bench = invoke("bench", "--requests", "1", "--url", "http://[::1")
    assert_one_line_error(bench, "--url 'http://[::1' is not a valid URL")
    agents = tmp_path / "agents.yaml"
    assert invoke("agents", "add", "a", "--file", str(agents)).exit_code == 0
    mcp = invoke(
        "--root",
        str(tmp_path),
        "mcp",
        "--agents",
        str(agents),
        "--http",
        "--server-url",
        "http://[::1",
    )
    assert_one_line_error(mcp, "--server-url 'http://[::1' is not a valid URL")
