"""The Jupyter server extension: one sampler for the whole server, read by an authenticated REST API."""
