"""The gRPC side, driver only: server lifecycle, one handler per RPC, proto conversion, the configuration form
and the error → response mapping."""
