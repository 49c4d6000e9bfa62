"""The data plane's error catalog: every ``ERR_NGROK_…`` code the edge answers with, to an agent
(a refused auth or bind: the SDK shows the code with the message; an SSH client of the SSH
gateway: printed to its session, edge/ssh_gateway.py) or to a public client (an
HTTP error page or JSON body, a refused TLS handshake). Codes are the hosted service's
(https://ngrok.com/docs/errors/) for the same situation; code names them through these
constants, never as literals (tests/unit/test_house_rules.py holds the edge and the core to
it). The API's own catalog is :mod:`chalicelib.core.errors`.

| constant                   | code             | to     | when                                                     |
|----------------------------|------------------|--------|----------------------------------------------------------|
| AUTHTOKEN_MALFORMED        | ERR_NGROK_105    | agent  | an authtoken that cannot be a credential's                |
| AUTHTOKEN_INVALID          | ERR_NGROK_107    | agent  | unknown or deleted credential, owner gone or inactive bot |
| SESSION_LIMIT              | ERR_NGROK_108    | agent  | the credential has its maximum of live sessions           |
| DOMAIN_OF_ANOTHER_ACCOUNT  | ERR_NGROK_320    | agent  | a domain another account reserved (or is above/under)     |
| SESSION_ENDPOINT_LIMIT     | ERR_NGROK_324    | agent  | the session has its maximum of endpoints                  |
| ENDPOINT_IN_USE            | ERR_NGROK_334    | agent  | the name or address is served by another endpoint         |
| ACL_REFUSED                | ERR_NGROK_399    | agent  | outside the credential's ACL                              |
| INVALID_OPTION             | ERR_NGROK_1602   | agent  | an option the edge cannot honour or a malformed one       |
| BASIC_AUTH_USERNAME_EMPTY  | ERR_NGROK_359    | agent  | a basic auth option's credential with no username         |
| BASIC_AUTH_PASSWORD_LENGTH | ERR_NGROK_360    | agent  | a basic auth option's password not 8 to 128 characters    |
| BASIC_AUTH_USERNAME_LENGTH | ERR_NGROK_15008  | agent  | a basic auth option's username over 128 characters        |
| UPSTREAM_PROTOCOL_INVALID  | ERR_NGROK_15003  | agent  | an upstream protocol (app_protocol) other than http1/http2 |
| INVALID_PROTOCOL           | ERR_NGROK_1622   | agent  | an endpoint protocol the edge does not serve              |
| SSH_KEY_UNKNOWN            | ERR_NGROK_1100   | ssh    | no public key of an SSH credential was offered            |
| SSH_TOO_MANY_KEYS          | ERR_NGROK_1101   | ssh    | a client offered more public keys than the gateway reads  |
| INVALID_TRAFFIC_POLICY     | ERR_NGROK_2201   | both   | a traffic policy the engine refuses                       |
| INTERNAL_TCP_CONNECT       | ERR_NGROK_2262   | agent  | an internal HTTP(S) endpoint's policy with on_tcp_connect |
| ADDRESS_NOT_RESERVED       | ERR_NGROK_7113   | agent  | a TCP address the account did not reserve                 |
| DOMAIN_NOT_RESERVED        | ERR_NGROK_7117   | agent  | a custom domain nobody reserved                           |
| ACCOUNT_ENDPOINT_LIMIT     | ERR_NGROK_18021  | agent  | the account has its maximum of online endpoints           |
| POOL_FULL                  | ERR_NGROK_18020  | agent  | the URL's pool has its maximum of endpoints               |
| TOO_MANY_CONNECTIONS       | ERR_NGROK_702    | public | the agent session has its maximum of open streams (429)   |
| NO_BACKEND                 | ERR_NGROK_724    | public | no online tunnel can serve an edge's backend (502)        |
| POLICY_FAILED              | ERR_NGROK_2300   | public | the traffic policy broke while running (502)              |
| MISDIRECTED                | ERR_NGROK_3002   | public | Host other than the TLS name, or a bad request head (421/400) |
| BAD_UPSTREAM_RESPONSE      | ERR_NGROK_3004   | public | the upstream's response is not valid HTTP (502)           |
| ENDPOINT_OFFLINE           | ERR_NGROK_3200   | public | no endpoint serves the name, or it went away (404/502)    |
| HOST_BANNED                | ERR_NGROK_3208   | both   | the name is banned by an abuse report (403)               |
| FORWARD_INTERNAL_FAILED    | ERR_NGROK_3502   | public | a forward-internal action names no usable endpoint (502)  |
| CLOUD_POLICY_FAILED        | ERR_NGROK_6029   | public | a cloud endpoint's policy did not answer (502)            |
| UPSTREAM_UNREACHABLE       | ERR_NGROK_8012   | public | the agent could not reach its upstream (502)              |
| IP_POLICY_MISSING          | ERR_NGROK_1801   | public | a restrict-ips action names a policy gone or broken       |
| IP_BLOCKED                 | ERR_NGROK_3203   | public | the client address is refused by an IP policy (403)       |
| WEBHOOK_REFUSED            | ERR_NGROK_3303   | public | a webhook body too large or its signature invalid         |
| JWT_MISSING                | ERR_NGROK_3401   | public | jwt-validation: no token presented                        |
| JWT_INVALID                | ERR_NGROK_3402   | public | jwt-validation: the token is not valid                    |
| JWKS_UNAVAILABLE           | ERR_NGROK_3403   | public | jwt-validation: the signing keys could not be fetched     |
| RATE_LIMITED               | ERR_NGROK_20000  | public | a rate-limit action refused the request (429)             |
| INVALID_CIRCUIT_BREAKER    | ERR_NGROK_361    | agent  | a circuit breaker threshold outside 0..1                  |
| CIRCUIT_BREAKER_TRIPPED    | ERR_NGROK_3202   | public | the endpoint's circuit breaker is open (503)              |
| SIGNIN_STATE_MISSING       | ERR_NGROK_3120   | public | openid-connect/oauth callback without its pending login   |
| SIGNIN_STATE_MISMATCH      | ERR_NGROK_3124   | public | the callback's state is not the pending login's (400)     |
| SIGNIN_FAILED              | ERR_NGROK_3300   | public | the sign-in could not finish (provider, token, ID token)  |
| WAF_BLOCKED                | ERR_NGROK_3700   | public | owasp-crs-request/-response: anomaly score at threshold (403) |
| AGENT_IP_RESTRICTED        | ERR_NGROK_9040   | agent  | the account's agent IP restrictions refuse the address    |
| ENDPOINT_STOPPED           | ERR_NGROK_3200   | agent  | StopTunnel: the endpoint was stopped through the API (it is offline now) |
"""

AUTHTOKEN_MALFORMED = "ERR_NGROK_105"
AUTHTOKEN_INVALID = "ERR_NGROK_107"
SESSION_LIMIT = "ERR_NGROK_108"
DOMAIN_OF_ANOTHER_ACCOUNT = "ERR_NGROK_320"
SESSION_ENDPOINT_LIMIT = "ERR_NGROK_324"
ENDPOINT_IN_USE = "ERR_NGROK_334"
ACL_REFUSED = "ERR_NGROK_399"
INVALID_OPTION = "ERR_NGROK_1602"
BASIC_AUTH_USERNAME_EMPTY = "ERR_NGROK_359"
BASIC_AUTH_PASSWORD_LENGTH = "ERR_NGROK_360"
BASIC_AUTH_USERNAME_LENGTH = "ERR_NGROK_15008"
UPSTREAM_PROTOCOL_INVALID = "ERR_NGROK_15003"
INVALID_PROTOCOL = "ERR_NGROK_1622"
SSH_KEY_UNKNOWN = "ERR_NGROK_1100"
SSH_TOO_MANY_KEYS = "ERR_NGROK_1101"
INVALID_TRAFFIC_POLICY = "ERR_NGROK_2201"
INTERNAL_TCP_CONNECT = "ERR_NGROK_2262"
ADDRESS_NOT_RESERVED = "ERR_NGROK_7113"
DOMAIN_NOT_RESERVED = "ERR_NGROK_7117"
ACCOUNT_ENDPOINT_LIMIT = "ERR_NGROK_18021"
POOL_FULL = "ERR_NGROK_18020"
TOO_MANY_CONNECTIONS = "ERR_NGROK_702"
NO_BACKEND = "ERR_NGROK_724"
POLICY_FAILED = "ERR_NGROK_2300"
MISDIRECTED = "ERR_NGROK_3002"
BAD_UPSTREAM_RESPONSE = "ERR_NGROK_3004"
ENDPOINT_OFFLINE = "ERR_NGROK_3200"
ENDPOINT_STOPPED = ENDPOINT_OFFLINE  # to its agent, in a StopTunnel (DELETE /endpoints/{id})
HOST_BANNED = "ERR_NGROK_3208"
FORWARD_INTERNAL_FAILED = "ERR_NGROK_3502"
CLOUD_POLICY_FAILED = "ERR_NGROK_6029"
UPSTREAM_UNREACHABLE = "ERR_NGROK_8012"
IP_POLICY_MISSING = "ERR_NGROK_1801"
IP_BLOCKED = "ERR_NGROK_3203"
WEBHOOK_REFUSED = "ERR_NGROK_3303"
BODY_TOO_LARGE = "ERR_NGROK_10088"  # "Request body size too large." (request-body-find-replace)
JWT_MISSING = "ERR_NGROK_3401"
JWT_INVALID = "ERR_NGROK_3402"
JWKS_UNAVAILABLE = "ERR_NGROK_3403"
RATE_LIMITED = "ERR_NGROK_20000"
INVALID_CIRCUIT_BREAKER = "ERR_NGROK_361"
CIRCUIT_BREAKER_TRIPPED = "ERR_NGROK_3202"
WAF_BLOCKED = "ERR_NGROK_3700"  # "The request was blocked by the WAF." (owasp-crs-*)
SIGNIN_STATE_MISSING = "ERR_NGROK_3120"
SIGNIN_STATE_MISMATCH = "ERR_NGROK_3124"
SIGNIN_FAILED = "ERR_NGROK_3300"
AGENT_IP_RESTRICTED = "ERR_NGROK_9040"
