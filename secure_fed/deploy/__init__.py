"""Running every party as its own process: key ceremony, transport, TLS, Flower glue.

``keys`` (the key ceremony and the per-party loaders), ``transport`` (server-to-server
requests over HTTPS), ``tls`` (a local CA and the client and server TLS settings) and
``errors``; ``flower/`` holds the only code that imports ``flwr``. Nothing else in
``secure_fed`` imports this package (``docs/deploy.md``).
"""
