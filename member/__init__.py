"""Member runtime, listener API, producer and admin client: the data plane."""
