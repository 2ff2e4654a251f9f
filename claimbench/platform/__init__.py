"""The process's JAX platform and host devices, chosen before JAX starts: which backends load
and how many virtual CPU devices a run gets. Below every other layer (imports nothing of
claimbench)."""
