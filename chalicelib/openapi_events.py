"""The OpenAPI description of the event routes: component schemas (merged into
chalicelib.openapi's), and the operations of the routes chalicelib/event_routes.py registers
(the registry's ``Routes`` entry reads them)."""

from typing import Any, Dict, Tuple

Schema = Dict[str, Any]


def schemas() -> Dict[str, Schema]:
    from chalicelib.openapi import STR, URI, _common, _nullable, _obj, _ref

    aws_auth = _obj(
        {
            "role": _nullable(_obj({"role_arn": STR})),
            "creds": _nullable(
                _obj(
                    {
                        "aws_access_key_id": STR,
                        "aws_secret_access_key": _nullable(
                            {**STR, "description": "never returned"}
                        ),
                    }
                )
            ),
        }
    )

    def target(arn: str) -> Schema:
        return _nullable(_obj({arn: STR, "auth": aws_auth}))

    return {
        "EventTarget": _obj(
            {
                "kinesis": target("stream_arn"),
                "firehose": target("delivery_stream_arn"),
                "cloudwatch_logs": target("log_group_arn"),
                "datadog": {"nullable": True},
                "azure_logs_ingestion": {"nullable": True},
            },
            "exactly one of kinesis, firehose, cloudwatch_logs",
        ),
        "EventDestination": _obj(
            {**_common("event_destination"), "format": STR, "target": _ref("EventTarget")}
        ),
        "EventSource": _obj(
            {
                "type": STR,
                "uri": URI,
                "filter": {**STR, "description": "CEL expression over the event (when set)"},
                "fields": {
                    "type": "array",
                    "items": STR,
                    "description": "the object's fields delivered (when set; else all)",
                },
            }
        ),
        "EventSourceList": _obj(
            {"sources": {"type": "array", "items": _ref("EventSource")}, "uri": URI}
        ),
        "CapturedRequest": _obj(
            {
                "id": STR,
                "uri": URI,
                "endpoint_id": STR,
                "endpoint_url": STR,
                "start": STR,
                "duration_ms": {"type": "number"},
                "method": STR,
                "target": STR,
                "host": STR,
                "proto": STR,
                "http_version": STR,
                "client_addr": STR,
                "status_code": {"type": "integer"},
                "request_headers": {
                    "type": "object",
                    "additionalProperties": {"type": "array", "items": STR},
                },
                "response_headers": {
                    "type": "object",
                    "additionalProperties": {"type": "array", "items": STR},
                },
                "request_body_size": {"type": "integer"},
                "response_body_size": {"type": "integer"},
                "bodies_captured": {"type": "boolean"},
                "request_body": _nullable(STR),
                "response_body": _nullable(STR),
                "request_body_truncated": {"type": "boolean"},
                "response_body_truncated": {"type": "boolean"},
            },
            "a request the edge captured (traffic inspector); bodies base64",
        ),
        "CaptureSetting": _obj({"capture_bodies": {"type": "boolean"}, "uri": URI}),
        "ReplayResult": _obj(
            {"status_code": {"type": "integer"}, "duration_ms": {"type": "number"}}
        ),
        "EventSubscription": _obj(
            {
                **_common("event_subscription"),
                "sources": {"type": "array", "items": _ref("EventSource")},
                "destinations": {"type": "array", "items": _ref("Ref")},
            }
        ),
    }


def operations() -> Dict[Tuple[str, str], Any]:
    from chalicelib import captured_requests, event_subscriptions
    from chalicelib.openapi import Op

    ops: Dict[Tuple[str, str], Any] = {}
    sources = "/event_subscriptions/{subscription_id}/sources"
    tag = "Event sources"
    ops[("POST", sources)] = Op(
        "Add an event type to the subscription",
        tag,
        "EventSource",
        201,
        event_subscriptions.SOURCE_FIELDS,
    )
    ops[("GET", sources)] = Op(
        "The subscription's event types (one page, unpaginated)", tag, "EventSourceList"
    )
    ops[("GET", sources + "/{type}")] = Op(
        "Get one of the subscription's event types", tag, "EventSource"
    )
    ops[("PATCH", sources + "/{type}")] = Op(
        "Replace an event source's filter and fields",
        tag,
        "EventSource",
        200,
        event_subscriptions.SOURCE_UPDATE_FIELDS,
    )
    ops[("DELETE", sources + "/{type}")] = Op(
        "Remove an event type from the subscription", tag, None, 204
    )
    captured = "/endpoints/{endpoint_id}/captured_requests"
    tag = "Traffic inspector"
    ops[("GET", captured)] = Op(
        "List the endpoint's captured requests, newest first",
        tag,
        "CapturedRequest",
        list_key="captured_requests",
        list_prefix="req",
    )
    ops[("GET", captured + "/{request_id}")] = Op("Get a captured request", tag, "CapturedRequest")
    ops[("POST", captured + "/{request_id}/replay")] = Op(
        "Replay a captured request through the edge", tag, "ReplayResult"
    )
    ops[("GET", "/endpoints/{endpoint_id}/capture")] = Op(
        "Get the endpoint's capture setting", tag, "CaptureSetting"
    )
    ops[("PUT", "/endpoints/{endpoint_id}/capture")] = Op(
        "Set whether the edge captures the endpoint's bodies",
        tag,
        "CaptureSetting",
        fields=captured_requests.SETTINGS_FIELDS,
    )
    return ops
