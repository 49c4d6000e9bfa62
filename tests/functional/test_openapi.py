"""The OpenAPI document: valid, complete (every route the app serves, nothing else), public."""

import pytest
from openapi_spec_validator import validate

from app import app
from chalicelib import openapi


@pytest.fixture(scope="module")
def document():
    return openapi.build(app)


def _app_operations():
    served = set()
    for path, by_method in app.routes.items():
        for method, entry in by_method.items():
            if not entry.view_name.startswith("method_not_allowed_"):
                served.add((method, path))
    return served


def _documented_operations(document):
    return {(method.upper(), path) for path, item in document["paths"].items() for method in item}


def test_document_is_valid_openapi_3(document):
    validate(document)


def test_every_route_is_documented_and_every_documented_path_is_served(document):
    assert _documented_operations(document) == _app_operations()


def test_every_route_is_described_by_the_operation_table():
    # A new route fails here until chalicelib/openapi.py says what its body and response are.
    assert openapi.undescribed_routes(app) == []


def test_operation_ids_are_unique_and_are_the_view_names(document):
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))
    views = {entry.view_name for by_method in app.routes.values() for entry in by_method.values()}
    assert set(ids) <= views


def test_operations_document_auth_version_errors_and_pagination(document):
    for path, item in document["paths"].items():
        for method, op in item.items():
            if path == "/openapi.json":
                assert op["security"] == []
                continue
            assert "security" not in op  # the global bearer requirement applies
            refs = [p.get("$ref") for p in op["parameters"]]
            assert "#/components/parameters/ServiceVersion" in refs
            for status in ("400", "401", "403", "404", "500"):
                assert op["responses"][status] == {"$ref": f"#/components/responses/E{status}"}
            if method == "get" and not path.endswith("}") and "{" not in path.split("/")[-1]:
                names = {p.get("name") for p in op["parameters"]} | set(refs)
                if "#/components/parameters/Limit" in refs:
                    assert "before_id" in names
    assert document["security"] == [{"bearer": []}]
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_list_operations_have_pagination(document):
    lists = [
        op
        for path, item in document["paths"].items()
        for method, op in item.items()
        if op["summary"].startswith("List ")
    ]
    assert lists
    for op in lists:
        refs = [p.get("$ref") for p in op["parameters"]]
        assert "#/components/parameters/Limit" in refs
        assert any(p.get("name") == "before_id" for p in op["parameters"])
        schema = op["responses"]["200"]["content"]["application/json"]["schema"]
        assert {"uri", "next_page_uri"} <= set(schema["required"])


def test_request_bodies_come_from_the_resource_field_lists(document):
    from chalicelib import api_keys

    body = document["paths"]["/api_keys"]["post"]["requestBody"]["content"]["application/json"][
        "schema"
    ]
    assert set(body["properties"]) == {f.name for f in api_keys.CREATE_FIELDS}
    assert body["additionalProperties"] is False
    assert body["properties"]["description"]["maxLength"] == 255
    patch = document["paths"]["/api_keys/{key_id}"]["patch"]["requestBody"]["content"][
        "application/json"
    ]["schema"]
    assert set(patch["properties"]) == {f.name for f in api_keys.UPDATE_FIELDS} | {"id"}


def test_document_is_served_without_auth_or_version_header(api):
    resp = api.request("GET", "/openapi.json", version=None)
    assert resp.status == 200, resp
    body = resp.json
    validate(body)
    assert body["servers"][0]["url"].startswith("http")
    assert _documented_operations(body) == _app_operations()


def test_document_is_built_once_and_cached():
    first = openapi.document(app, "http://a")
    second = openapi.document(app, "http://b")
    assert first["paths"] is second["paths"]
    assert first["servers"] != second["servers"]
