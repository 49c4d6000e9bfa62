"""What is online: agent sessions, their tunnels and endpoints, and served-hostname claims.

Written by the edge only (the API reads it). Items live in the account's collections
``tunnel_session`` / ``tunnel`` / ``endpoint`` and carry the edge ``instance_id`` and
``heartbeat_at``; a hostname (or TCP ``host:port``) claim is a uniqueness item
``U#online_host#<name>`` naming the endpoint that serves it. A session whose heartbeat is
older than STALE_SECONDS is offline (its edge died): its tunnels and endpoints count as
offline too, and its claims may be taken over.
"""
import os
import time
from typing import Any, Dict, List, Optional

from pynamodb.exceptions import DeleteError, PutError, UpdateError

from chalicelib import errors, store

SESSIONS, TUNNELS, ENDPOINTS = "tunnel_session", "tunnel", "endpoint"
HOST_NAMESPACE = "online_host"


def stale_seconds() -> float:
    return float(os.environ.get("ONLINE_STALE_SECONDS", "45"))


STALE_SECONDS = stale_seconds()


def _now() -> float:
    return time.time()


def _put(pk: str, sk: str, kind: str, account_id: Optional[str], data: Dict[str, Any]) -> None:
    item = store.new_item(pk, sk, kind=kind, account_id=account_id, data=data)
    item.save(add_version_condition=False)


def _delete(pk: str, sk: str) -> None:
    try:
        store.new_item(pk, sk).delete(add_version_condition=False)
    except DeleteError:
        pass


def session_started(*, account_id, session_id, credential_id, instance_id, agent_version, os,
                    ip, metadata, region, transport="ngrok/2") -> None:
    now = _now()
    _put(store.collection_pk(account_id, SESSIONS), session_id, SESSIONS, account_id, {
        "credential_id": credential_id, "instance_id": instance_id,
        "agent_version": agent_version, "os": os, "ip": ip, "metadata": metadata,
        "region": region, "transport": transport, "started_at": now, "heartbeat_at": now,
        "stop_requested": False, "restart_requested": False, "tunnels": []})


def session_heartbeat(account_id, session_id, instance_id) -> Optional[dict]:
    item = store.get(store.collection_pk(account_id, SESSIONS), session_id)
    if item is None:
        return None
    item.data["heartbeat_at"] = _now()
    item.data["instance_id"] = instance_id
    try:
        item.save(add_version_condition=False)
    except PutError:
        return None
    return {"stop_requested": bool(item.data.get("stop_requested")),
            "restart_requested": bool(item.data.get("restart_requested"))}


def session_ended(account_id, session_id) -> None:
    item = store.get(store.collection_pk(account_id, SESSIONS), session_id)
    if item is None:
        return
    for tunnel_id in item.data.get("tunnels", []):
        tunnel_stopped(account_id, tunnel_id)
    _delete(store.collection_pk(account_id, SESSIONS), session_id)


def tunnel_started(*, account_id, session_id, tunnel_id, instance_id, proto, public_url=None,
                   hostname=None, port=None, labels=None, forwards_to="", metadata="",
                   endpoint_id=None, traffic_policy="", bind_id=None) -> None:
    data = {"session_id": session_id, "instance_id": instance_id, "proto": proto,
            "public_url": public_url, "hostname": hostname, "port": port,
            "labels": labels, "forwards_to": forwards_to, "metadata": metadata,
            "endpoint_id": endpoint_id, "traffic_policy": traffic_policy,
            "started_at": _now()}
    _put(store.collection_pk(account_id, TUNNELS), tunnel_id, TUNNELS, account_id, data)
    if endpoint_id:
        _put(store.collection_pk(account_id, ENDPOINTS), endpoint_id, ENDPOINTS, account_id,
             {**data, "tunnel_id": tunnel_id})
    session = store.get(store.collection_pk(account_id, SESSIONS), session_id)
    if session is not None:
        session.data.setdefault("tunnels", []).append(tunnel_id)
        session.save(add_version_condition=False)


def tunnel_stopped(account_id, tunnel_id) -> None:
    item = store.get(store.collection_pk(account_id, TUNNELS), tunnel_id)
    if item is None:
        return
    if item.data.get("endpoint_id"):
        _delete(store.collection_pk(account_id, ENDPOINTS), item.data["endpoint_id"])
    _delete(store.collection_pk(account_id, TUNNELS), tunnel_id)


def claim_hostname(hostname, *, account_id, endpoint_id, instance_id) -> None:
    pk = store.unique_pk(HOST_NAMESPACE, hostname)
    held = store.get(pk, store.UNIQUE_SK)
    if held is not None and held.data.get("endpoint_id") != endpoint_id:
        session = store.get(store.collection_pk(held.data["account_id"], SESSIONS),
                            held.data.get("session_id", "")) if held.data.get("session_id") \
            else None
        live = _now() - held.data.get("heartbeat_at", 0) < stale_seconds()
        if live or session is not None:
            raise errors.Conflict(f"'{hostname}' is already served by another endpoint")
    _put(pk, store.UNIQUE_SK, "unique", None, {"account_id": account_id,
                                               "endpoint_id": endpoint_id,
                                               "instance_id": instance_id,
                                               "heartbeat_at": _now()})


def release_hostname(hostname, *, endpoint_id) -> None:
    pk = store.unique_pk(HOST_NAMESPACE, hostname)
    held = store.get(pk, store.UNIQUE_SK)
    if held is not None and held.data.get("endpoint_id") == endpoint_id:
        _delete(pk, store.UNIQUE_SK)


def request_stop(account_id, session_id) -> None:
    item = store.get(store.collection_pk(account_id, SESSIONS), session_id)
    if item is None:
        raise errors.NotFound(f"No tunnel session with id '{session_id}' exists")
    item.data["stop_requested"] = True
    item.save(add_version_condition=False)


def online_tunnels(account_id, labels: dict) -> List[dict]:
    return []
