"""Traffic policy documents copied from the hosted service's documentation, as data.

Each entry: (source URL, the YAML as published). The tests in test_policy_docs_examples.py
run them on synthetic traffic and check what the page says the policy does.
"""

DOCS = "https://ngrok.com/docs/traffic-policy"

REMOVE_HEADERS = (
    f"{DOCS}/examples/add-and-remove-headers/",
    """
on_http_request:
- actions:
  - type: remove-headers
    config:
      headers:
      - X-Powered-By
""",
)

DEPRECATE_V2 = (
    f"{DOCS}/examples/add-and-remove-headers/",
    """
on_http_request:
- expressions:
  - "'2' in req.headers['X-Api-Version']"
  name: Deprecate API v2
  actions:
  - type: custom-response
    config:
      status_code: 400
      body: '{"error":{"message":"Version 2 of the API is no longer supported. Use
        Version 3 instead."}}'
""",
)

COMPRESS_ALL = (
    f"{DOCS}/examples/compress-json-responses/",
    """
on_http_response:
- name: Add compression
  actions:
  - type: compress-response
    config:
      algorithms:
      - gzip
      - br
      - deflate
      - compress
""",
)

ENFORCE_TLS = (
    f"{DOCS}/examples/enforce-tls/",
    """
on_http_request:
- name: Reject requests using old TLS versions
  expressions:
  - conn.tls.version < '1.3'
  actions:
  - type: custom-response
    config:
      status_code: 401
      body: 'Unauthorized: TLS version too old'
""",
)

RATE_LIMIT_ENDPOINT = (
    f"{DOCS}/examples/rate-limit-requests/",
    """
on_http_request:
- expressions:
  - req.url.contains('/api/specific_endpoint')
  actions:
  - type: rate-limit
    config:
      name: Only allow 30 requests per minute
      algorithm: sliding_window
      capacity: 30
      rate: 60s
      bucket_key:
      - conn.client_ip
""",
)

RATE_LIMIT_TIERS = (
    f"{DOCS}/examples/rate-limit-requests/",
    """
on_http_request:
- expressions:
  - "!('Authorization' in req.headers)"
  name: Unauthorized rate limiting tier
  actions:
  - type: rate-limit
    config:
      name: Allow 10 requests per minute
      algorithm: sliding_window
      capacity: 10
      rate: 60s
      bucket_key:
      - conn.client_ip
- expressions:
  - "('Authorization' in req.headers)"
  name: Authorized rate limiting tier
  actions:
  - type: rate-limit
    config:
      name: Allow 100 requests per minute
      algorithm: sliding_window
      capacity: 100
      rate: 60s
      bucket_key:
      - conn.client_ip
""",
)

BLOG_REWRITE = (
    f"{DOCS}/examples/url-rewrites/",
    """
on_http_request:
- expressions:
  - req.url.path.startsWith('/blog')
  actions:
  - type: url-rewrite
    config:
      from: "/blog/([0-9]+)/([a-zA-Z]+)/"
      to: "/blog/index.php?p=$1&title=$2"
""",
)

EDGE_USERS = (
    f"{DOCS}/examples/user-agent-filtering/",
    """
on_http_request:
- expressions:
  - req.user_agent.name == 'Edge'
  actions:
  - type: custom-response
    config:
      status_code: 200
      body: Hello Edge User!
""",
)

DENY_BOTS = (
    f"{DOCS}/examples/user-agent-filtering/",
    """
on_http_request:
- expressions:
  - req.user_agent.is_bot
  actions:
  - type: deny
    config:
      status_code: 403
""",
)

AB_TEST = (
    f"{DOCS}/examples/a-b-tests/",
    """
on_http_request:
- expressions:
  - rand.double() <= 0.5
  actions:
  - type: forward-internal
    config:
      url: https://a.internal
- actions:
  - type: forward-internal
    config:
      url: https://b.internal
""",
)

ROBOTS = (
    f"{DOCS}/examples/block-unwanted-requests/",
    """
on_http_request:
  - name: Add `robots.txt` to deny specific bots and crawlers
    expressions:
      - req.url.contains('/robots.txt')
    actions:
      - type: custom-response
        config:
          status_code: 200
          body: "User-agent: ChatGPT-User\\r\\nDisallow: /"
          headers:
            content-type: text/plain
""",
)

ONLY_GET = (
    f"{DOCS}/examples/block-unwanted-requests/",
    """
on_http_request:
  - expressions:
      - req.method != 'GET'
    actions:
      - type: deny
""",
)

NEED_AUTHORIZATION = (
    f"{DOCS}/examples/block-unwanted-requests/",
    """
on_http_request:
  - expressions:
      - "!('authorization' in req.headers)"
    actions:
      - type: custom-response
        config:
          status_code: 401
          body: Unauthorized
""",
)

LARGE_UPLOADS = (
    f"{DOCS}/examples/block-unwanted-requests/",
    """
on_http_request:
  - name: Block large POST/PUT requests.
    expressions:
      - req.method == 'POST' || req.method == 'PUT'
      - req.content_length >= 1000
    actions:
      - type: custom-response
        config:
          status_code: 400
          body: "Error: You can't upload content larger than 1MB."
""",
)

SUBDOMAIN_ROUTING = (
    f"{DOCS}/examples/route-requests/",
    """
on_http_request:
  # Extract subdomain and route to matching internal service
  - actions:
      - type: forward-internal
        config:
          url: https://${req.host.split('.example.com')[0]}.internal
""",
)

PATH_ROUTING = (
    f"{DOCS}/examples/route-requests/",
    """
on_http_request:
  # Route /api/v1/* to legacy API
  - expressions:
      - req.url.path.startsWith('/api/v1')
    actions:
      - type: forward-internal
        config:
          url: https://api-v1.internal
  # Route /api/v2/* to current API
  - expressions:
      - req.url.path.startsWith('/api/v2')
    actions:
      - type: forward-internal
        config:
          url: https://api-v2.internal
  # Unversioned /api/* defaults to latest
  - expressions:
      - req.url.path.startsWith('/api')
    actions:
      - type: forward-internal
        config:
          url: https://api-v2.internal
""",
)

BASIC_AUTH_PAIRS = (
    f"{DOCS}/examples/add-authentication/",
    """
on_http_request:
  # Prompt for username and password with up to 10 credential pairs
  - actions:
      - type: basic-auth
        config:
          credentials:
            - username: user1
              password: password123
            - username: user2
              password: securepass456
""",
)

PHASE_RULE_DENY = (
    f"{DOCS}/how-it-works/",
    """
on_tcp_connect:
  - expressions:
      - conn.client_ip == '192.168.1.200'
    actions:
      - type: deny
""",
)

REDIRECT_V1_V2 = (
    f"{DOCS}/how-it-works/",
    """
on_http_request:
  - expressions:
      - req.url.path.startsWith('/api/v1/')
    actions:
      - type: redirect
        config:
          from: /api/v1/
          to: /api/v2/
""",
)

INTERPOLATED_HEADERS = (
    f"{DOCS}/how-it-works/",
    """
on_http_request:
  - name: CEL Interpolation Example
    actions:
      - type: add-headers
        config:
          headers:
            X-Client-IP: "${conn.client_ip}"
            X-Request-Path: "${req.url.path}"
""",
)

SET_VARS_HELLO = (
    f"{DOCS}/actions/set-vars/",
    """
on_http_request:
  - actions:
      - type: set-vars
        config:
          vars:
            - variable_a: Hello,
            - variable_b: World!
  - actions:
      - type: custom-response
        config:
          status_code: 200
          headers:
            content-type: text/plain
          body: ${vars.variable_a} ${vars.variable_b}
""",
)

BLOCK_TOR = (
    f"{DOCS}/examples/block-unwanted-requests/",
    """
on_http_request:
  - expressions:
      - ('proxy.anonymous.tor' in conn.client_ip.categories)
    actions:
      - type: deny
        config:
          status_code: 403
""",
)

# terminate-tls without configuration: the edge terminates with its own certificate, TLS
# 1.2 to 1.3 (the docs' first example)
TERMINATE_TLS = (
    f"{DOCS}/actions/terminate-tls/",
    """
on_tcp_connect:
  - actions:
      - type: terminate-tls
""",
)

# Documented, but needing what this service does not offer: each must be refused at
# creation, naming the element.
REFUSED = [
    (
        f"{DOCS}/examples/oauth-protection/",
        """
on_http_request:
  - actions:
      - type: oauth
        config:
          provider: google
""",
        "on_http_request[0].actions[0].config.client_id",
        "no managed OAuth applications",
    ),
    (
        f"{DOCS}/examples/add-and-remove-headers/",
        """
on_http_request:
- actions:
  - type: add-headers
    config:
      headers:
        x-client-loc: "${conn.geo.city}, ${conn.geo.country}"
""",
        "on_http_request[0].actions[0].config.headers.x-client-loc",
        "conn.geo.city",
    ),
]
