"""Abuse report rules as pure logic: URL hosts and the derived report status."""

import pytest

from chalicelib import abuse_reports
from chalicelib.core import errors


@pytest.mark.parametrize(
    "url, host",
    [
        ("https://A.Example.com/x", "a.example.com"),
        ("http://a.example.com:8080", "a.example.com"),
        ("HTTPS://a.example.com?q=1#f", "a.example.com"),
        ("http://user:pw@a.example.com/", "a.example.com"),
        ("http://10.0.0.1:80/", "10.0.0.1"),
        ("http://[2001:DB8:0::1]/", "2001:db8::1"),
    ],
)
def test_url_host_is_lower_cased_without_port(url, host):
    assert abuse_reports.url_host("urls[0]", url) == host


@pytest.mark.parametrize(
    "url",
    [
        "ftp://a.com",
        "//a.com/x",
        "a.com",
        "https://",
        "https://a b.com",
        "https://a.com:70000",
        "https://[x]/",
        "https://a.com:/",
    ],
)
def test_bad_urls_are_refused_naming_the_url(url):
    with pytest.raises(errors.InvalidField) as exc:
        abuse_reports.url_host("urls[3]", url)
    assert repr(url) in exc.value.msg and "urls[3]" in exc.value.msg


@pytest.mark.parametrize("char", ["\x00", "\x1f", "\x7f"])
def test_urls_with_control_characters_are_refused(char):
    with pytest.raises(errors.InvalidField) as exc:
        abuse_reports.url_host("urls[0]", f"https://a.com/x{char}y")
    assert "control characters" in exc.value.msg
    assert abuse_reports.url_host("urls[0]", "https://a.com/x~y") == "a.com"  # 0x7e is fine


@pytest.mark.parametrize(
    "statuses, report",
    [
        (["PENDING"], "PENDING"),
        (["PENDING", "PENDING"], "PENDING"),
        (["BANNED", "PENDING"], "PARTIALLY_PROCESSED"),
        (["IGNORE", "PENDING", "UNBANNED"], "PARTIALLY_PROCESSED"),
        (["BANNED"], "PROCESSED"),
        (["UNBANNED", "IGNORE", "BANNED"], "PROCESSED"),
    ],
)
def test_report_status_is_derived_from_hostnames(statuses, report):
    entries = [{"hostname": f"h{i}", "status": s} for i, s in enumerate(statuses)]
    assert abuse_reports.derived_status(entries) == report


# ---- each refusal's contract body: msg names the URL, its place and the reason; details ---------
@pytest.mark.parametrize(
    "url, why",
    [
        ("https://a.com/x y", "it contains whitespace or control characters"),
        ("https://a.com/\x1f", "it contains whitespace or control characters"),
        ("https://a.com/\x7f", "it contains whitespace or control characters"),
        ("https://a.com/\u2003", "it contains whitespace or control characters"),
        ("ftp://a.com/", "it must be an absolute http:// or https:// URL"),
        ("a.com/x", "it must be an absolute http:// or https:// URL"),
        ("https:///x", "it has no host"),
        ("http://:80/", "it has no host"),
        ("https://a.com:65536/", "its port is not a number from 0 to 65535"),
        ("https://a.com:x/", "its port is not a number from 0 to 65535"),
        ("https://a.com:/", "its port is empty"),
        ("https://[1.2.3.4]/", "An IPv4 address cannot be in brackets"),
        ("https://[v1.future]/", "its bracketed host is not an IPv6 address"),
        ("https://[::1/", "Invalid IPv6 URL"),
        ("https://a_b.com/", "its host "),
        ("https://-a.com/", "its host "),
    ],
)
def test_a_refused_url_names_itself_its_place_and_the_reason(url, why):
    with pytest.raises(errors.InvalidField) as info:
        abuse_reports.url_host("urls[2]", url)
    refusal = info.value
    assert refusal.status_code == 400 and refusal.error_code == errors.INVALID_FIELD
    assert refusal.msg.startswith(f"Invalid URL {url!r} in 'urls[2]': {why}"), refusal.msg
    assert refusal.details == {"field": "urls", "url": url}


def test_the_host_reason_comes_from_the_hostname_rules():
    with pytest.raises(errors.InvalidField) as info:
        abuse_reports.url_host("urls[0]", "https://" + "a" * 64 + ".com/")
    assert info.value.msg.startswith(
        f"Invalid URL 'https://{'a' * 64}.com/' in 'urls[0]': its host "
    )
    assert (
        len(info.value.msg)
        > len(f"Invalid URL 'https://{'a' * 64}.com/' in 'urls[0]': its host ") + 5
    )


def test_a_refused_url_is_quoted_in_details_up_to_200_characters():
    url = "ftp://a.com/" + "p" * 300
    with pytest.raises(errors.InvalidField) as info:
        abuse_reports.url_host("urls[0]", url)
    assert info.value.details == {"field": "urls", "url": url[:200]}


@pytest.mark.parametrize(
    "url, host",
    [
        ("https://a.com:0/", "a.com"),
        ("https://a.com:65535/", "a.com"),
        ("http://A.COM/", "a.com"),
        ("https://[::FFFF:1.2.3.4]:8/", "::ffff:102:304"),
    ],
)
def test_ports_0_to_65535_and_hosts_are_normalised(url, host):
    assert abuse_reports.url_host("urls[0]", url) == host


def test_urls_are_checked_each_with_its_index_and_kept_as_sent():
    urls = ["https://a.com/1", "HTTP://B.com/2"]
    assert abuse_reports._check_urls("urls", urls) is urls
    with pytest.raises(errors.InvalidField) as info:
        abuse_reports._check_urls("urls", ["https://a.com/", "https://b.com/", "nope"])
    assert info.value.msg.startswith("Invalid URL 'nope' in 'urls[2]': ")
    with pytest.raises(errors.InvalidField) as info:
        abuse_reports._check_urls("urls", [])
    assert info.value.msg == "Field 'urls' must not be empty"
    assert info.value.details == {"field": "urls"}
