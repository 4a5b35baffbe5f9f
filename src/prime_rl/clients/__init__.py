"""HTTP clients of prime-rl: the one place that talks to inference servers.

- :mod:`~prime_rl.clients.config`: the config shapes (``RetryPolicy``, ``ClientConfig``,
  ``AdminClientConfig``),
- :mod:`~prime_rl.clients.backoff`: the one retry delay and ``Retry-After`` parsing,
- :mod:`~prime_rl.clients.errors`: the one classification of failed requests,
- :mod:`~prime_rl.clients.pool`: the aiohttp session over the servers, the least-loaded picker,
  health probes,
- :mod:`~prime_rl.clients.admin`: weight updates to every server,
- :mod:`~prime_rl.clients.chat`: chat completions for the offline collector.

It imports only the shared modules (config, logging, tracing, paths), never a process package.
"""
