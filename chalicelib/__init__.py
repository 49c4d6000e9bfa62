"""The tunnel management service: everything app.py's routes call into."""
