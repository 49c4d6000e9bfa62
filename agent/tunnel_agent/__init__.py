"""Device agent: a local REST API that creates, lists and deletes HTTP tunnels.

Tunnels are served by a local ingress listener that routes each request by its
``Host`` header to the tunnel's ``forwards_to`` address, applying the tunnel's
traffic policy on the way. Independent of the management service (never imports
``chalicelib``).
"""

__version__ = "0.1.0"
