"""Commands about the machine and the models on it: train and inspect the shipped models,
report the hardware and its roofline, check the install, and compile for a TPU."""
