"""The dashboard deployed: dashboard/ published to an S3 bucket as a static site over HTTPS,
and the API told its origin (docs/DASHBOARD.md "Deployed").

- :func:`origin` is the site's origin: ``DASHBOARD_ORIGIN`` when set (a CDN or a domain of
  your own in front of the bucket), else the bucket's own HTTPS address
  ``https://<bucket>.s3.<region>.amazonaws.com`` (S3 serves it with a certificate of AWS; the
  bucket name has no dot, so the certificate covers it).
- :func:`with_dashboard_origin` writes that origin into the packaged template before it is
  deployed: ``DASHBOARD_ORIGIN`` in every function's environment (chalicelib/cors.py answers
  CORS for it only) and ``Access-Control-Allow-Origin`` on API Gateway's own error responses
  (an authorizer's 401 is one of them: without the header the browser could not read it).
- :func:`publish` uploads every file of dashboard/ with its media type; ``index.html`` names
  the API (``<meta name="api-base-url">``) and its CSP ``<meta>`` allows that origin in
  ``connect-src`` (S3 cannot send headers: the policy travels in the page). The bucket is
  made readable by anyone (a bucket policy on GetObject; its public-access block is lifted
  for that bucket only): the files hold no secret, the API key is entered in the page.
"""

import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.join(PROJECT_DIR, "dashboard")
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
    ".json": "application/json",
}


def bucket_name(stage: str, account: str, region: str) -> str:
    return (
        os.environ.get("DASHBOARD_BUCKET")
        or f"tunnel-service-dashboard-{stage}-{account}-{region}"
    )


def origin(bucket: str, region: str, endpoint: Optional[str] = None) -> str:
    configured = (os.environ.get("DASHBOARD_ORIGIN") or "").strip().rstrip("/")
    if configured:
        return configured
    if endpoint:  # LocalStack: path-style, on its one endpoint
        return endpoint.rstrip("/")
    return f"https://{bucket}.s3.{region}.amazonaws.com"


def site_url(bucket: str, region: str, endpoint: Optional[str] = None) -> str:
    if os.environ.get("DASHBOARD_ORIGIN"):
        return os.environ["DASHBOARD_ORIGIN"].rstrip("/") + "/index.html"
    if endpoint:
        return f"{endpoint.rstrip('/')}/{bucket}/index.html"
    return f"https://{bucket}.s3.{region}.amazonaws.com/index.html"


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def render_index(html: str, api_url: str) -> str:
    """index.html naming the API: its base URL in the meta tag, its origin in connect-src."""
    api_url = api_url.rstrip("/")
    if '"' in api_url or "<" in api_url or " " in api_url:
        raise ValueError(f"not a URL: {api_url!r}")
    html, named = re.subn(
        r'<meta name="api-base-url" content="[^"]*">',
        f'<meta name="api-base-url" content="{api_url}">',
        html,
    )
    html, allowed = re.subn(
        r"connect-src 'self'", f"connect-src 'self' {_origin_of(api_url)}", html
    )
    if named != 1 or allowed != 1:
        raise ValueError("dashboard/index.html lost its api-base-url or CSP meta tag")
    return html


def site_files(api_url: str) -> List[Tuple[str, bytes, str]]:
    """(key, body, content type) of every file the site serves."""
    files = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = os.path.join(folder, name)
            key = os.path.relpath(path, ROOT).replace(os.sep, "/")
            content_type = TYPES.get(os.path.splitext(name)[1].lower())
            if content_type is None:
                continue
            with open(path, "rb") as handle:
                body = handle.read()
            if key == "index.html":
                body = render_index(body.decode("utf-8"), api_url).encode("utf-8")
            files.append((key, body, content_type))
    return files


def with_dashboard_origin(template: Dict[str, Any], site_origin: str) -> None:
    """The packaged template, told the dashboard's origin (in place)."""
    for resource in template.get("Resources", {}).values():
        props = resource.setdefault("Properties", {})
        if resource.get("Type") == "AWS::Serverless::Function":
            variables = props.setdefault("Environment", {}).setdefault("Variables", {})
            variables["DASHBOARD_ORIGIN"] = site_origin
        elif resource.get("Type") == "AWS::ApiGateway::GatewayResponse":
            params = props.setdefault("ResponseParameters", {})
            params["gatewayresponse.header.Access-Control-Allow-Origin"] = f"'{site_origin}'"
            params["gatewayresponse.header.Vary"] = "'Origin'"


def publish(
    s3: Any, bucket: str, region: str, api_url: str, endpoint: Optional[str] = None
) -> str:
    """Upload the site to ``bucket`` (created when missing, made publicly readable); its URL."""
    try:
        s3.head_bucket(Bucket=bucket)
    except Exception:  # noqa: BLE001 - missing: create it
        kwargs: Dict[str, Any] = {"Bucket": bucket}
        if region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
        s3.create_bucket(**kwargs)
    s3.put_public_access_block(
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": False,
            "RestrictPublicBuckets": False,
        },
    )
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "DashboardFilesArepublic",
                        "Effect": "Allow",
                        "Principal": "*",
                        "Action": "s3:GetObject",
                        "Resource": f"arn:aws:s3:::{bucket}/*",
                    }
                ],
            }
        ),
    )
    for key, body, content_type in site_files(api_url):
        s3.put_object(
            Bucket=bucket, Key=key, Body=body, ContentType=content_type, CacheControl="no-cache"
        )
    return site_url(bucket, region, endpoint)
