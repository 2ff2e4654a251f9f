"""Load offered to a served engine and what it met: the multi-tenant runs (``tenant_runs``),
the service rate at saturation that load levels are fractions of (``service_rate``), the steady
stretch and the load a trial really offered (``open_loop``), a driver that counts time in
engine steps (``step_driver``), time slicing between tenants (``time_slicing``), and serving a
tenant workload through the HTTP server (``http_serving``)."""
