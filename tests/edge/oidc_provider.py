"""A real OpenID Connect provider for the sign-in tests, run as a process: authlib's
authorization server (Flask integration) with the authorization code grant, OpenID Connect
(ID tokens signed RS256 with a key made at start, its JWKS published), PKCE required (S256),
a discovery document, a user info endpoint (which also makes it a plain OAuth 2.0 server for
the ``oauth`` action), and a login form that signs in whoever types an email address.

    python oidc_provider.py '{"port": N, "clients": [{"client_id", "client_secret",
                              "redirect_uris": [...]}]}'

It prints ``ready`` once it listens. ``GET /codes`` says how many codes were issued and
redeemed (the tests check that a refused callback never redeemed one).
"""

import fnmatch
import hmac
import html
import json
import os
import sys
import time
import uuid

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.jose import JsonWebKey
from authlib.oauth2.rfc6749 import ClientMixin, grants
from authlib.oauth2.rfc6749.models import AuthorizationCodeMixin
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from flask import Flask, jsonify, request

CFG = json.loads(sys.argv[1])
os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"  # 127.0.0.1 over plain HTTP, a test
ISSUER = f"http://127.0.0.1:{CFG['port']}"
KEY = JsonWebKey.generate_key("RSA", 2048, is_private=True, options={"kid": "test-key-1"})
PRIVATE = KEY.as_dict(is_private=True)
PRIVATE["kid"] = "test-key-1"
PUBLIC = KEY.as_dict(is_private=False)
PUBLIC.update({"kid": "test-key-1", "alg": "RS256", "use": "sig"})
CODES = {}
TOKENS = {}
STATS = {"issued": 0, "redeemed": 0, "authorize_requests": 0}


class User:
    def __init__(self, email):
        self.email = email
        self.id = "u-" + email.split("@")[0]
        self.name = email.split("@")[0].title()

    def get_user_id(self):
        return self.id


USERS = {}


class Client(ClientMixin):
    def __init__(self, spec):
        self.client_id = spec["client_id"]
        self.client_secret = spec["client_secret"]
        self.redirect_uris = spec["redirect_uris"]

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope):
        return " ".join(
            s for s in (scope or "").split() if s in ("openid", "email", "profile", "extra")
        )

    def check_redirect_uri(self, redirect_uri):  # patterns: the endpoints' names vary
        return any(fnmatch.fnmatchcase(redirect_uri, p) for p in self.redirect_uris)

    def has_client_secret(self):
        return True

    def check_client_secret(self, client_secret):
        return hmac.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method, endpoint):
        return method in ("client_secret_basic", "client_secret_post")

    def check_token_endpoint_auth_method(self, method):
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type):
        return response_type == "code"

    def check_grant_type(self, grant_type):
        return grant_type == "authorization_code"


CLIENTS = {c["client_id"]: Client(c) for c in CFG["clients"]}


class Code(AuthorizationCodeMixin):
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def get_redirect_uri(self):
        return self.redirect_uri

    def get_scope(self):
        return self.scope

    def get_nonce(self):
        return self.nonce

    def get_auth_time(self):
        return self.auth_time

    def get_acr(self):
        return None

    def get_amr(self):
        return None


class CodeGrant(grants.AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

    def save_authorization_code(self, code, req):
        STATS["issued"] += 1
        CODES[code] = Code(
            code=code,
            client_id=req.client.client_id,
            redirect_uri=req.redirect_uri,
            scope=req.scope,
            user_id=req.user.email,
            nonce=req.data.get("nonce"),
            auth_time=int(time.time()),
            code_challenge=req.data.get("code_challenge"),
            code_challenge_method=req.data.get("code_challenge_method"),
        )

    def query_authorization_code(self, code, client):
        item = CODES.get(code)
        if item is not None and item.client_id == client.client_id:
            return item
        return None

    def delete_authorization_code(self, authorization_code):
        STATS["redeemed"] += 1
        CODES.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code):
        return USERS[authorization_code.user_id]


class OpenID(OpenIDCode):
    def exists_nonce(self, nonce, req):
        return False

    def get_jwt_config(self, grant):
        return {"key": PRIVATE, "alg": "RS256", "iss": ISSUER, "exp": 3600}

    def generate_user_info(self, user, scope):
        return UserInfo(sub=user.id, name=user.name, email=user.email)


app = Flask(__name__)


def save_token(token, req):
    TOKENS[token["access_token"]] = req.user


server = AuthorizationServer(app, query_client=CLIENTS.get, save_token=save_token)
server.register_grant(CodeGrant, [OpenID(require_nonce=False), CodeChallenge(required=True)])


@app.get("/.well-known/openid-configuration")
def discovery():
    return jsonify(
        {
            "issuer": ISSUER,
            "authorization_endpoint": f"{ISSUER}/authorize",
            "token_endpoint": f"{ISSUER}/token",
            "jwks_uri": f"{ISSUER}/jwks",
            "userinfo_endpoint": f"{ISSUER}/userinfo",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        }
    )


@app.get("/jwks")
def jwks():
    return jsonify({"keys": [PUBLIC]})


@app.get("/codes")
def codes():
    return jsonify(STATS)


@app.route("/authorize", methods=["GET", "POST"])
def authorize():
    if request.method == "GET":
        STATS["authorize_requests"] += 1
        server.get_consent_grant(end_user=None)  # refuses a bad client or redirect_uri
        action = html.escape("/authorize?" + request.query_string.decode(), quote=True)
        return (
            f'<!doctype html><form method="post" action="{action}">'
            '<input name="email"><button>Sign in</button></form>'
        )
    email = request.form.get("email", "")
    user = USERS.setdefault(email, User(email))
    return server.create_authorization_response(grant_user=user)


@app.post("/token")
def token():
    return server.create_token_response()


@app.get("/userinfo")
def userinfo():
    auth = request.headers.get("Authorization", "")
    user = TOKENS.get(auth[7:]) if auth.startswith("Bearer ") else None
    if user is None:
        return jsonify({"error": "invalid_token"}), 401
    return jsonify(
        {
            "sub": user.id,
            "id": user.id,
            "email": user.email,
            "name": user.name,
            "login": user.email.split("@")[0],
            "nonce_check": str(uuid.uuid4()),
        }
    )


if __name__ == "__main__":
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    print("ready", flush=True)
    app.run(host="127.0.0.1", port=CFG["port"], threaded=True)
