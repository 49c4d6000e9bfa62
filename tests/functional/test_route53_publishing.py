"""DNS-01 answers published in Route 53 (chalicelib.acme.dns.Route53, the AWS deployment's
provider: DNS_ROUTE53_ZONE_ID), against moto's server as a process: every value published
for a name is kept in its one TXT record set, a removed value leaves the others, the last one
removed deletes the record set, and names are matched without case or trailing dot."""

import time

import boto3
import pytest

from tests.support.fixtures import moto_server  # noqa: F401 (a fixture)

ZONE = "acme-challenge.tunnels.example"


@pytest.fixture(scope="module")
def route53(moto_server):  # noqa: F811
    return moto_server.url


@pytest.fixture
def zone(route53, monkeypatch):
    """A new hosted zone; the provider reaches moto through boto3's per-service endpoint
    variable, as it would reach Route 53 itself without one."""
    for name, value in {
        "AWS_ENDPOINT_URL_ROUTE_53": route53,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    client = boto3.client("route53")
    created = client.create_hosted_zone(Name=ZONE, CallerReference=str(time.time_ns()))
    return client, created["HostedZone"]["Id"].split("/")[-1]


def _txt(client, zone_id, name):
    sets = client.list_resource_record_sets(HostedZoneId=zone_id)["ResourceRecordSets"]
    return {
        s["Name"]: ([r["Value"] for r in s["ResourceRecords"]], s["TTL"])
        for s in sets
        if s["Type"] == "TXT" and s["Name"] == name
    }


def test_values_are_published_kept_together_and_removed_one_by_one(zone, monkeypatch):
    from chalicelib.acme import dns

    client, zone_id = zone
    monkeypatch.setenv("DNS_ROUTE53_ZONE_ID", zone_id)
    provider = dns.provider()
    assert isinstance(provider, dns.Route53) and provider.zone_id == zone_id
    name = f"Abc123.{ZONE}."  # case and trailing dot do not make another name
    record = f"abc123.{ZONE}."
    provider.publish(name, "first-digest")
    provider.publish(f"abc123.{ZONE}", "second-digest")
    provider.publish(name, "first-digest")  # again: not twice
    assert _txt(client, zone_id, record) == {
        record: (['"first-digest"', '"second-digest"'], dns.TTL)
    }
    provider.remove(name, "first-digest")
    assert _txt(client, zone_id, record) == {record: (['"second-digest"'], dns.TTL)}
    provider.remove(name, "never-published")  # nothing to remove: nothing changes
    assert _txt(client, zone_id, record) == {record: (['"second-digest"'], dns.TTL)}
    provider.remove(name, "second-digest")
    assert _txt(client, zone_id, record) == {}


def test_names_next_to_each_other_keep_their_own_values(zone, monkeypatch):
    from chalicelib.acme import dns

    client, zone_id = zone
    provider = dns.Route53(zone_id)
    provider.publish(f"a.{ZONE}", "for-a")
    provider.publish(f"b.{ZONE}", "for-b")
    provider.remove(f"a.{ZONE}", "for-a")
    assert _txt(client, zone_id, f"a.{ZONE}.") == {}
    assert _txt(client, zone_id, f"b.{ZONE}.") == {f"b.{ZONE}.": (['"for-b"'], dns.TTL)}
