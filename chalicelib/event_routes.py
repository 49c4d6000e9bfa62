"""The routes of event subscriptions' sources and of the traffic inspector
(chalicelib/captured_requests.py), registered through chalicelib/resources.py.

``/event_destinations`` and ``/event_subscriptions`` are collections (chalicelib.rest);
``/event_subscriptions/{subscription_id}/sources`` and ``…/sources/{type}`` are the hosted
API's event sources: POST (201), GET (list: ``{"sources": […], "uri"}``), GET/PATCH one
(the source), DELETE one (204).
"""

from typing import Any, Callable

from chalicelib import audit, captured_requests, event_subscriptions, rest, web

SOURCES = "/event_subscriptions/{subscription_id}/sources"
CAPTURED = "/endpoints/{endpoint_id}/captured_requests"


def _updated(c: Any, subscription_id: str, result: Any) -> Any:
    """A source changed: its subscription's ``event_subscription_updated.v0`` (chalicelib.audit)."""
    return audit.changed_part(
        c,
        event_subscriptions.PATH,
        lambda: event_subscriptions.get(c, subscription_id),
        result,
    )


def register(route: Callable[..., Any]) -> None:
    """The sources' and the inspector's routes (the two collections are registry entries:
    chalicelib/resources.py)."""

    @route(SOURCES, ["POST"], name="create_event_source")
    def create_event_source(subscription_id):
        c = web.ctx()  # the body is read after the subscription: another account's is a 404
        return rest.idempotent_create(
            c,
            lambda: _updated(
                c,
                subscription_id,
                event_subscriptions.create_source(
                    c, subscription_id, lambda: web.body(event_subscriptions.SOURCE_FIELDS)
                ),
            ),
        )

    @route(SOURCES, ["GET"], name="list_event_sources")
    def list_event_sources(subscription_id):
        return event_subscriptions.list_sources(web.ctx(), subscription_id)

    @route(SOURCES + "/{type}", ["GET"], name="get_event_source")
    def get_event_source(subscription_id, type):
        return event_subscriptions.get_source(web.ctx(), subscription_id, type)

    @route(SOURCES + "/{type}", ["PATCH"], name="update_event_source")
    def update_event_source(subscription_id, type):
        c = web.ctx()  # the body is read after the subscription: another account's is a 404
        return _updated(
            c,
            subscription_id,
            event_subscriptions.update_source(
                c,
                subscription_id,
                type,
                lambda: web.body(event_subscriptions.SOURCE_UPDATE_FIELDS),
            ),
        )

    @route(SOURCES + "/{type}", ["DELETE"], name="delete_event_source")
    def delete_event_source(subscription_id, type):
        c = web.ctx()
        _updated(c, subscription_id, event_subscriptions.delete_source(c, subscription_id, type))
        return web.no_content()

    @route(
        CAPTURED, ["GET"], query=("limit", "before_id", "beforeId"), name="list_captured_requests"
    )
    def list_captured_requests(endpoint_id):
        return captured_requests.list_page(web.ctx(), endpoint_id)

    @route(CAPTURED + "/{request_id}", ["GET"], name="get_captured_request")
    def get_captured_request(endpoint_id, request_id):
        return captured_requests.get(web.ctx(), endpoint_id, request_id)

    @route(CAPTURED + "/{request_id}/replay", ["POST"], name="replay_captured_request")
    def replay_captured_request(endpoint_id, request_id):
        web.body([])
        return captured_requests.replay(web.ctx(), endpoint_id, request_id)

    @route("/endpoints/{endpoint_id}/capture", ["GET"], name="get_endpoint_capture")
    def get_endpoint_capture(endpoint_id):
        return captured_requests.get_settings(web.ctx(), endpoint_id)

    @route("/endpoints/{endpoint_id}/capture", ["PUT"], name="replace_endpoint_capture")
    def replace_endpoint_capture(endpoint_id):
        return captured_requests.put_settings(
            web.ctx(), endpoint_id, web.body(captured_requests.SETTINGS_FIELDS)
        )
