"""Sending a workload: replayed on an engine in process or against a running server over HTTP,
and the checks on a server URL a user gives."""
