"""Ways to reach an env or a model: :mod:`.inprocess` (in this process, no network) and
:mod:`.grpc` (rlmesh-wire-v1 over gRPC). This package itself exports nothing."""

__all__: list[str] = []
