"""REST shapes written once: a resource module supplies its functions, this registers its routes.

A *collection* is the usual five routes over one resource::

    POST   {path}                 create(c, *parents, fields)        -> 201
    GET    {path}                 list_page(c, *parents, limit, before_id) -> page
    GET    {path}/{id}            get(c, *parents, id)
    PATCH  {path}/{id}            update(c, *parents, id, fields)
    DELETE {path}/{id}            delete(c, *parents, id)            -> 204

where ``parents`` are the path's own parameters (``/edges/https/{edge_id}/routes`` has
``edge_id``). ``fields`` is the strict body parsed against ``CREATE_FIELDS`` /
``UPDATE_FIELDS``, or the raw JSON object when the module parses its body itself (``None``).

A resource module that follows the naming convention (``PREFIX``, ``LIST_KEY``,
``CREATE_FIELDS``, ``UPDATE_FIELDS``, ``create``, ``get``, ``list_page``, ``update``,
``delete``) is one entry of ``chalicelib.resources``::

    Collection("/api_keys", api_keys, "key_id", "api_key", "API key", "API keys", "APIKey")

A module holding two resources, or with other function names, hands an :class:`Ops` instead.
*Modules* (``/edges/tcp/{edge_id}/backend`` …) are GET/PUT/DELETE of one named part of a
resource: :func:`modules`; :func:`actions` and :func:`command` are POSTs on one resource.
``chalicelib.resources`` lists every resource with its shape; ``app.py`` registers them all. View names (and so OpenAPI operation ids) are
``create_<name>``, ``list_<plural>``, ``get_<name>``, ``update_<name>``, ``delete_<name>``.
"""

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Optional, Sequence

from chalicelib import audit, filters, idempotency, list_filters, web

ALL = ("create", "list", "get", "update", "delete")
_PARAM = re.compile(r"{(\w+)}")


@dataclass(frozen=True)
class Ops:
    """What a collection's routes call (see the module docstring for the signatures)."""

    prefix: str
    list_key: str
    create: Optional[Callable[..., Any]] = None
    get: Optional[Callable[..., Any]] = None
    list_page: Optional[Callable[..., Any]] = None
    update: Optional[Callable[..., Any]] = None
    delete: Optional[Callable[..., Any]] = None
    create_fields: Optional[Sequence[Any]] = None  # None: the raw JSON object is passed
    update_fields: Optional[Sequence[Any]] = None

    @classmethod
    def of(cls, module: Any) -> "Ops":
        """The conventional names of a resource module."""
        return cls(
            prefix=module.PREFIX,
            list_key=module.LIST_KEY,
            create=getattr(module, "create", None),
            get=getattr(module, "get", None),
            list_page=getattr(module, "list_page", None),
            update=getattr(module, "update", None),
            delete=getattr(module, "delete", None),
            create_fields=getattr(module, "CREATE_FIELDS", None),
            update_fields=getattr(module, "UPDATE_FIELDS", None),
        )


def _body(fields: Optional[Sequence[Any]], path_id: Optional[str] = None) -> Any:
    if fields is None:
        return web.json_object()
    return web.body(fields, path_id=path_id)


def collection(
    route: Callable[..., Any],
    path: str,
    resource: Any,
    id_param: str,
    *,
    name: str,
    plural: Optional[str] = None,
    ops: Iterable[str] = ALL,
) -> None:
    """Register the collection routes of ``resource`` (a module or an :class:`Ops`) at ``path``."""
    o = resource if isinstance(resource, Ops) else Ops.of(resource)
    plural = plural or name + "s"
    parents = _PARAM.findall(path)
    item_path = f"{path}/{{{id_param}}}"
    wanted = set(ops)

    def parent_values(params: dict) -> list:
        return [params[p] for p in parents]

    if "create" in wanted:

        @route(path, ["POST"], name=f"create_{name}")
        def create(**params):
            c = web.ctx()
            return idempotent_create(
                c,
                lambda: audit.changed(
                    c, path, "created", o.create(c, *parent_values(params), _body(o.create_fields))
                ),
            )

    if "list" in wanted:
        by_field = getattr(resource, "LIST_QUERY_FILTERS", {})  # chalicelib.list_filters

        @route(path, ["GET"], query=web.LIST_QUERY + tuple(by_field), name=f"list_{plural}")
        def list_(**params):
            c = web.ctx()
            limit, before_id = web.list_params(o.prefix, tuple(by_field))
            query = web.request().query_params
            text = list_filters.expression(query, by_field, (query or {}).get("filter"))
            if text is None:
                # (items, more) or, for lists that skip items, (items, more, cursor)
                items, more, *cursor = o.list_page(c, *parent_values(params), limit, before_id)
                return web.page(
                    c,
                    path.format(**params),
                    o.list_key,
                    items,
                    more,
                    limit,
                    cursor=cursor[0] if cursor else None,
                )
            return filtered_page(
                c, o, parent_values(params), path.format(**params), limit, before_id, text
            )

    if "get" in wanted:

        @route(item_path, ["GET"], name=f"get_{name}")
        def get(**params):
            return o.get(web.ctx(), *parent_values(params), params[id_param])

    if "update" in wanted:

        @route(item_path, ["PATCH"], name=f"update_{name}")
        def update(**params):
            rid = params[id_param]
            c = web.ctx()
            return audit.changed(
                c,
                path,
                "updated",
                o.update(c, *parent_values(params), rid, _body(o.update_fields, path_id=rid)),
            )

    if "delete" in wanted:

        @route(item_path, ["DELETE"], name=f"delete_{name}")
        def delete(**params):
            c, rid = web.ctx(), params[id_param]
            audit.deleting(
                c,
                path,
                lambda: o.get(c, *parent_values(params), rid),
                lambda: o.delete(c, *parent_values(params), rid),
            )
            return web.no_content()


def actions(
    route: Callable[..., Any], path: str, handlers: Dict[str, Callable[..., Any]], *, owner: str
) -> None:
    """``POST {path}/<action>`` for each named handler: ``handler(c, *params)``, then 204.

    The body may be absent, ``{}``, or ``{"id": <the path's id>}`` (the hosted API's
    documented body), or the bare id (what the TypeScript client sends); any other field is
    a 400."""
    params_of = _PARAM.findall(path)
    for action, handler in handlers.items():
        _action_route(route, f"{path}/{action}", f"{action}_{owner}", params_of, handler)


def _action_route(route, path, name, params_of, handler) -> None:
    @route(path, ["POST"], name=name)
    def action(**params):
        c = web.ctx()
        values = [params[p] for p in params_of]
        raw = (web.request().raw_body or b"").strip()
        # The TypeScript client (@ngrok/ngrok-api) sends the path's id itself as the body.
        if not (values and raw and raw.decode("utf-8", "replace").strip('"') == values[-1]):
            web.body([], path_id=values[-1] if values else None)
        handler(c, *values)
        return web.no_content()


def command(
    route: Callable[..., Any], path: str, handler: Callable[..., Any], *, name: str
) -> None:
    """``POST {path}`` with no body (or ``{}``, or ``{"id": <the path's id>}``): 200 with
    ``handler(c, *params)``."""
    params_of = _PARAM.findall(path)

    @route(path, ["POST"], name=name)
    def run(**params):
        values = [params[p] for p in params_of]
        web.body([], path_id=values[-1] if values else None)
        return handler(web.ctx(), *values)


def idempotent_create(c: web.Ctx, create: Callable[[], Any]) -> Any:
    """201 with what ``create`` returns; with an ``Idempotency-Key`` header, at most once per
    key (chalicelib.idempotency): a repeat gets the first response again."""
    req = web.request()
    key = req.headers.get(idempotency.HEADER)
    if key is None:
        return web.created(create())
    idempotency.check_key(key)
    raw = req.raw_body or b""
    try:
        sent = json.loads(raw) if raw.strip() else None
    except (ValueError, UnicodeDecodeError):
        sent = raw.decode("utf-8", errors="replace")
    digest = idempotency.request_digest(c.principal.id, req.method, req.path, sent)
    (status, body), replayed = idempotency.run(c.account_id, key, digest, lambda: (201, create()))
    if status >= 400:
        body = {**body, "details": {**body.get("details", {}), "operation_id": web.operation_id()}}
    response = web.json_response(status, body)
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return response


def filtered_page(
    c: web.Ctx, o: Ops, parents: list, path: str, limit: int, before_id: Optional[str], text: str
) -> dict:
    """A list page of the items ``filter`` accepts (see chalicelib.filters).

    The filter is compiled once; the collection is read newest first in chunks of at most
    ``limit`` items (one Query each, through the module's own ``list_page``), until ``limit``
    items matched or :data:`filters.SCAN_LIMIT` items were read. ``next_page_uri`` continues
    before the last item read, with the same filter and limit.
    """
    matcher = filters.compile_filter(text)
    matched: list = []
    scanned = 0
    cursor = before_id
    more = False
    while scanned < filters.SCAN_LIMIT:
        chunk = min(web.MAX_LIMIT, filters.SCAN_LIMIT - scanned)
        # (items, more) or, for lists that skip items, (items, more, cursor after the skipped)
        items, chunk_more, *skipped_to = o.list_page(c, *parents, chunk, cursor)
        more = chunk_more
        scanned += max(len(items), 1)
        for position, item in enumerate(items):
            cursor = item["id"]
            if matcher.matches(item):
                matched.append(item)
                if len(matched) == limit:
                    more = chunk_more or position < len(items) - 1
                    break
        else:
            if skipped_to and skipped_to[0]:
                cursor = skipped_to[0]
        if len(matched) == limit or not chunk_more:
            break
    return web.page(
        c, path, o.list_key, matched, more, limit, cursor=cursor, extra={"filter": text}
    )


def modules(
    route: Callable[..., Any],
    path: str,
    names: Iterable[str],
    *,
    owner: str,
    get: Optional[Callable[..., Any]] = None,
    put: Optional[Callable[..., Any]] = None,
    delete: Optional[Callable[..., Any]] = None,
) -> None:
    """GET/PUT/DELETE ``{path}/<module>`` for each module name; views get the path's params
    in order and the module name: ``get(c, *params, module)``, ``put(c, *params, module, raw)``.
    A method whose function is None is not served (405), e.g. a part that can only be
    detached (``DELETE /reserved_domains/{id}/certificate``)."""
    params_of = _PARAM.findall(path)
    for module in names:
        _module_routes(route, f"{path}/{module}", module, owner, params_of, get, put, delete)


def _module_routes(route, path, module, owner, params_of, get, put, delete) -> None:
    def values(params: dict) -> list:
        return [params[p] for p in params_of]

    if get is not None:

        @route(path, ["GET"], name=f"get_{owner}_{module}")
        def get_module(**params):
            return get(web.ctx(), *values(params), module)

    if put is not None:

        @route(path, ["PUT"], name=f"replace_{owner}_{module}")
        def replace_module(**params):
            return put(web.ctx(), *values(params), module, web.json_object())

    if delete is not None:

        @route(path, ["DELETE"], name=f"delete_{owner}_{module}")
        def delete_module(**params):
            delete(web.ctx(), *values(params), module)
            return web.no_content()
