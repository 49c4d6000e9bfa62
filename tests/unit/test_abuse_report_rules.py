"""Abuse report rules as pure logic: URL hosts and the derived report status."""
import pytest

from chalicelib import abuse_reports, errors


@pytest.mark.parametrize("url, host", [
    ("https://A.Example.com/x", "a.example.com"), ("http://a.example.com:8080", "a.example.com"),
    ("HTTPS://a.example.com?q=1#f", "a.example.com"), ("http://user:pw@a.example.com/", "a.example.com"),
    ("http://10.0.0.1:80/", "10.0.0.1"), ("http://[2001:DB8:0::1]/", "2001:db8::1"),
])
def test_url_host_is_lower_cased_without_port(url, host):
    assert abuse_reports.url_host("urls[0]", url) == host


@pytest.mark.parametrize("url", ["ftp://a.com", "//a.com/x", "a.com", "https://", "https://a b.com",
                                 "https://a.com:70000", "https://[x]/", "https://a.com:/"])
def test_bad_urls_are_refused_naming_the_url(url):
    with pytest.raises(errors.InvalidField) as exc:
        abuse_reports.url_host("urls[3]", url)
    assert repr(url) in exc.value.msg and "urls[3]" in exc.value.msg


@pytest.mark.parametrize("char", ["\x00", "\x1f", "\x7f"])
def test_urls_with_control_characters_are_refused(char):
    with pytest.raises(errors.InvalidField) as exc:
        abuse_reports.url_host("urls[0]", f"https://a.com/x{char}y")
    assert "control characters" in exc.value.msg
    assert abuse_reports.url_host("urls[0]", "https://a.com/x~y") == "a.com"   # 0x7e is fine


@pytest.mark.parametrize("statuses, report", [
    (["PENDING"], "PENDING"), (["PENDING", "PENDING"], "PENDING"),
    (["BANNED", "PENDING"], "PARTIALLY_PROCESSED"), (["IGNORE", "PENDING", "UNBANNED"],
                                                      "PARTIALLY_PROCESSED"),
    (["BANNED"], "PROCESSED"), (["UNBANNED", "IGNORE", "BANNED"], "PROCESSED"),
])
def test_report_status_is_derived_from_hostnames(statuses, report):
    entries = [{"hostname": f"h{i}", "status": s} for i, s in enumerate(statuses)]
    assert abuse_reports.derived_status(entries) == report
