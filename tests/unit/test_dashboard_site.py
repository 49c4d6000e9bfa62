"""The deployed dashboard (scripts/dashboard_site.py): the site's files in an S3 bucket (moto),
index.html naming the API, and the template told the site's origin."""

import json

import pytest
from moto import mock_aws


from scripts import dashboard_site

API = "https://abc123.execute-api.eu-west-1.amazonaws.com/api"


@pytest.fixture(autouse=True)
def no_configured_origin(monkeypatch):
    monkeypatch.delenv("DASHBOARD_ORIGIN", raising=False)
    monkeypatch.delenv("DASHBOARD_BUCKET", raising=False)


def test_index_names_the_api_and_allows_only_its_origin():
    html = dict((k, b) for k, b, _ in dashboard_site.site_files(API))["index.html"].decode()
    assert f'<meta name="api-base-url" content="{API}">' in html
    assert "connect-src 'self' https://abc123.execute-api.eu-west-1.amazonaws.com;" in html
    with pytest.raises(ValueError):
        dashboard_site.render_index(html, 'https://x"><script>')


def test_origin_and_url(monkeypatch):
    assert dashboard_site.origin("b", "eu-west-1") == "https://b.s3.eu-west-1.amazonaws.com"
    assert dashboard_site.site_url("b", "eu-west-1").endswith(".amazonaws.com/index.html")
    assert (
        dashboard_site.bucket_name("prod", "123", "eu-west-1")
        == "tunnel-service-dashboard-prod-123-eu-west-1"
    )
    monkeypatch.setenv("DASHBOARD_ORIGIN", "https://dash.example.com/")
    assert dashboard_site.origin("b", "eu-west-1") == "https://dash.example.com"


def test_template_gets_the_origin_in_functions_and_gateway_responses():
    template = {
        "Resources": {
            "APIHandler": {
                "Type": "AWS::Serverless::Function",
                "Properties": {"Environment": {"Variables": {"TABLE_NAME": "t"}}},
            },
            "Authorizer": {"Type": "AWS::Serverless::Function", "Properties": {}},
            "GatewayResponseUnauthorized": {
                "Type": "AWS::ApiGateway::GatewayResponse",
                "Properties": {
                    "ResponseParameters": {
                        "gatewayresponse.header.Content-Type": "'application/json'"
                    }
                },
            },
            "Table": {"Type": "AWS::DynamoDB::Table", "Properties": {}},
        }
    }
    dashboard_site.with_dashboard_origin(template, "https://d.example.com")
    resources = template["Resources"]
    for name in ("APIHandler", "Authorizer"):
        assert (
            resources[name]["Properties"]["Environment"]["Variables"]["DASHBOARD_ORIGIN"]
            == "https://d.example.com"
        )
    assert resources["APIHandler"]["Properties"]["Environment"]["Variables"]["TABLE_NAME"] == "t"
    params = resources["GatewayResponseUnauthorized"]["Properties"]["ResponseParameters"]
    assert (
        params["gatewayresponse.header.Access-Control-Allow-Origin"] == "'https://d.example.com'"
    )
    assert resources["Table"]["Properties"] == {}


def test_publish_uploads_every_file_with_its_type():
    import boto3

    with mock_aws():
        s3 = boto3.client("s3", region_name="eu-west-1")
        url = dashboard_site.publish(s3, "dash-bucket", "eu-west-1", API)
        assert url == "https://dash-bucket.s3.eu-west-1.amazonaws.com/index.html"
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="dash-bucket")["Contents"]}
        assert {
            "index.html",
            "app.css",
            "favicon.svg",
            "js/main.js",
            "js/api.js",
            "js/pages/overview.js",
        } <= keys
        head = s3.head_object(Bucket="dash-bucket", Key="js/main.js")
        assert head["ContentType"] == "text/javascript; charset=utf-8"
        index = s3.get_object(Bucket="dash-bucket", Key="index.html")
        assert index["ContentType"].startswith("text/html")
        assert API.encode() in index["Body"].read()
        policy = json.loads(s3.get_bucket_policy(Bucket="dash-bucket")["Policy"])
        [statement] = policy["Statement"]
        assert statement["Action"] == "s3:GetObject" and statement["Principal"] == "*"
        assert statement["Resource"] == "arn:aws:s3:::dash-bucket/*"
        # a second publish (an update) goes over the same bucket
        assert dashboard_site.publish(s3, "dash-bucket", "eu-west-1", API) == url
