"""API Gateway's own answers, in the contract's error body, for the local server and tests.

Deployed, API Gateway answers some requests before any view runs: no route (403 "Missing
Authentication Token"), no or refused API key (401), an authorizer that fails (500). The
deployed stack's gateway responses (see the template in .chalice/) rewrite those into the
contract's error body; :class:`ContractGateway` does the same for ``chalice local``'s
LocalGateway, which ``make run`` serves and the functional tests' chalice.test.Client uses.

The client address: deployed, API Gateway puts the connection's peer in the event's
``requestContext.identity.sourceIp``; chalice's LocalGateway always says 127.0.0.1. A
:class:`ContractGateway` says ``source_ip`` (per request: scripts/api_server.py passes the
connection's peer; else the gateway's ``source_ip`` attribute, which in-process tests set),
so the account's IP restrictions (chalicelib.web.check_ip_restrictions) see the real one.

One deviation from the deployed stack: there, ``details.operation_id`` of a gateway-made
error is API Gateway's request id (``op_`` + its UUID), because no view runs to mint one.
"""

import json
from typing import Any, Dict, Optional

from chalice.local import LocalGateway, LocalGatewayException

from chalicelib import auth
from chalicelib.core import errors, ids

# What the deployed gateway responses say (kept in step with resources.json).
NOT_FOUND_MSG = "No such path: check the method and path of the request"
UNAUTHORIZED_MSG = errors.Unauthorized.default_msg
THROTTLED_MSG = "Too many requests: the API's request rate limit is exhausted; retry later"


def _response(status: int, error_code: str, msg: str) -> Dict[str, Any]:
    operation_id = ids.new_id("op")
    body = errors.error_body(status, error_code, msg, operation_id)
    # "Every response carries the operation id in the Operation-Id header too" (docs/CONTRACT.md).
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json", "Operation-Id": operation_id},
        "multiValueHeaders": {},
        "body": json.dumps(body),
    }


class ContractGateway(LocalGateway):
    # The client address of requests that name none (None: LocalGateway's 127.0.0.1).
    source_ip: Optional[str] = None
    _request_ip: Optional[str] = None  # this request's (a gateway serves one thread)

    def handle_request(
        self,
        method: str,
        path: str,
        headers: Dict[str, Any],
        body: Optional[bytes],
        source_ip: Optional[str] = None,
    ) -> Dict[str, Any]:
        self._request_ip = source_ip or self.source_ip
        try:
            return super().handle_request(method, path, headers, body)
        except auth.AuthFailed:
            return _response(401, errors.UNAUTHORIZED, UNAUTHORIZED_MSG)
        except LocalGatewayException as exc:
            if exc.CODE == 401:
                return _response(401, errors.UNAUTHORIZED, UNAUTHORIZED_MSG)
            if (
                exc.CODE == 403
                and b"Missing Authentication Token" in exc.body
                or b"Authorization header requires" in exc.body
            ):
                return _response(404, errors.NOT_FOUND, NOT_FOUND_MSG)
            if exc.CODE == 403:
                return _response(403, errors.FORBIDDEN, errors.Forbidden.default_msg)
            return _response(500, errors.INTERNAL, errors.Internal.default_msg)
        except Exception:  # noqa: BLE001 - an authorizer crash is a 500, as on API Gateway
            return _response(500, errors.INTERNAL, errors.Internal.default_msg)

    def _generate_lambda_event(
        self, method: str, path: str, headers: Dict[str, Any], body: Optional[bytes]
    ) -> Dict[str, Any]:
        event = super()._generate_lambda_event(method, path, headers, body)
        if self._request_ip:
            event["requestContext"]["identity"]["sourceIp"] = self._request_ip
        return event


def load_local_app(project_dir: str, stage: str):
    """The Chalice app and its stage config, prepared as ``chalice local`` prepares them
    (stage config and its environment variables, thread-local current_request, route
    validation). scripts/api_server.py serves it through :class:`ContractGateway`."""
    from chalice.cli import validate_routes
    from chalice.cli.factory import CLIFactory
    from chalice.local import CustomLocalChalice, LocalChalice

    config = CLIFactory(project_dir).create_config_obj(chalice_stage_name=stage)
    app_obj = config.chalice_app
    validate_routes(app_obj.routes)
    CustomLocalChalice.__bases__ = (LocalChalice, app_obj.__class__)
    app_obj.__class__ = CustomLocalChalice
    return app_obj, config
