"""Managed certificates: ACME orders for reserved domains (docs/CERTIFICATES.md).

``orders`` is the store side (the work queue, leases, challenge answers, status writes) and
imports no ACME library: the API and the edge use it. ``worker`` drives orders with certbot's
``acme`` library; ``dns`` publishes DNS-01 answers (Route 53, or the service's own DNS server).
"""
