"""A stand-in for the sglang package: only `python -m sglang.launch_server`, for tests (see launch_server.py)."""
