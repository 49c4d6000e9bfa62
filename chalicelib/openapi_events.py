"""The OpenAPI description of the event routes (chalicelib/event_routes.py): component
schemas and operations, merged into chalicelib.openapi's tables."""
from typing import Any, Dict, Tuple

Schema = Dict[str, Any]


def schemas() -> Dict[str, Schema]:
    from chalicelib.openapi import STR, URI, _common, _nullable, _obj, _ref
    aws_auth = _obj({"role": _nullable(_obj({"role_arn": STR})),
                     "creds": _nullable(_obj({"aws_access_key_id": STR,
                                              "aws_secret_access_key": _nullable(
                                                  {**STR, "description": "never returned"})}))})

    def target(arn: str) -> Schema:
        return _nullable(_obj({arn: STR, "auth": aws_auth}))
    return {
        "EventTarget": _obj({"kinesis": target("stream_arn"),
                             "firehose": target("delivery_stream_arn"),
                             "cloudwatch_logs": target("log_group_arn"),
                             "datadog": {"nullable": True},
                             "azure_logs_ingestion": {"nullable": True}},
                            "exactly one of kinesis, firehose, cloudwatch_logs"),
        "EventDestination": _obj({**_common("event_destination"), "format": STR,
                                  "target": _ref("EventTarget")}),
        "EventSource": _obj({"type": STR, "uri": URI}),
        "EventSourceList": _obj({"sources": {"type": "array", "items": _ref("EventSource")},
                                 "uri": URI}),
        "EventSubscription": _obj({**_common("event_subscription"),
                                   "sources": {"type": "array", "items": _ref("EventSource")},
                                   "destinations": {"type": "array", "items": _ref("Ref")}}),
    }


def operations() -> Dict[Tuple[str, str], Any]:
    from chalicelib.openapi import Op, _crud
    ops: Dict[Tuple[str, str], Any] = {}
    ops.update(_crud("/event_destinations", "/event_destinations/{destination_id}",
                     "Event destinations", "EventDestination", "event_destinations",
                     "event_destinations", "event_destination", name="event destination",
                     field_schemas={"target": {"$ref": "#/components/schemas/EventTarget"}}))
    ops.update(_crud("/event_subscriptions", "/event_subscriptions/{subscription_id}",
                     "Event subscriptions", "EventSubscription", "event_subscriptions",
                     "event_subscriptions", "event_subscription", name="event subscription",
                     field_schemas={"sources": {"type": "array", "nullable": True, "items": {
                         "type": "object", "properties": {"type": {"type": "string"}}}}}))
    sources = "/event_subscriptions/{subscription_id}/sources"
    tag = "Event sources"
    ops[("POST", sources)] = Op("Add an event type to the subscription", tag, "EventSource",
                                201, "event_subscriptions:SOURCE_FIELDS")
    ops[("GET", sources)] = Op("The subscription's event types (one page, unpaginated)", tag,
                                "EventSourceList")
    ops[("GET", sources + "/{type}")] = Op("Get one of the subscription's event types", tag,
                                           "EventSource")
    ops[("PATCH", sources + "/{type}")] = Op("Update an event source (no field to change)",
                                             tag, "EventSource")
    ops[("DELETE", sources + "/{type}")] = Op("Remove an event type from the subscription",
                                              tag, None, 204)
    return ops
