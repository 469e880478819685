"""Real servers the tests start as processes, each runnable with `python -m`."""
