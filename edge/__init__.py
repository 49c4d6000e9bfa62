"""The data plane: a long-lived asyncio process that speaks the agent protocol of the ngrok
SDKs, serves the public HTTP/HTTPS/TCP listeners and enforces what the API stores.
Start it with ``python -m edge``; settings in edge/config.py."""
