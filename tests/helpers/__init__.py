"""Helpers shared by the tests: plain HTTP requests to a local port, group-rule builders."""
