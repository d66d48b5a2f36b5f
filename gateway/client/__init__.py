"""The headless aiortc client: our own receive path, used by tests, benchmarks and users."""
