"""What every layer needs of the process before anything else runs: the JAX platform and host
devices, chosen before JAX starts (which backends load, how many virtual CPU devices a run
gets), and replacing a file all or nothing. Below every other layer (imports nothing of
claimbench)."""
