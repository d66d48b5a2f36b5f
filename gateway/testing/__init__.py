"""Test helpers: stand-in servers that speak upstream protocols on loopback."""
