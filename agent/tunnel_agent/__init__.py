"""Device agent: a local REST API that creates, lists and deletes tunnels.

Each tunnel is an HTTP endpoint of the official agent SDK (``ngrok``) on the edge, which
serves its public URL and enforces its traffic policy. Independent of the service in this
repository (never imports ``chalicelib`` or ``edge``): it talks to the edge only through
the SDK.
"""

__version__ = "0.2.0"
