"""``reprise serve NAME[@ALIAS|:VERSION] ...``: serve registered models over HTTP."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["serve"]


def serve(
    refs: Annotated[list[str], typer.Argument(
        help="Models to serve: NAME@ALIAS (follows the alias), NAME:VERSION (pinned) or "
             "NAME (the newest version, followed).", metavar="NAME[@ALIAS|:VERSION]...")],
    host: Annotated[str, typer.Option(help="Address to bind; 0.0.0.0 exposes the server "
                                           "beyond this machine (set a token).")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    max_batch_size: Annotated[int, typer.Option(help="Most rows per predict call "
                                                     "(1: no batching).")] = 64,
    max_wait_ms: Annotated[float, typer.Option(
        help="Longest a batch keeps gathering arriving requests.")] = 2.0,
    latency_budget_ms: Annotated[float, typer.Option(
        help="Answer 503 + Retry-After when the queue would take longer.")] = 1000.0,
    poll_interval: Annotated[float, typer.Option(
        help="Seconds between checks of where followed aliases point.")] = 5.0,
    max_body_bytes: Annotated[int, typer.Option(help="Larger request bodies get 413.")
                              ] = 4 * 1024 * 1024,
    extra_columns: Annotated[str | None, typer.Option(
        help="reject or ignore unknown columns (default: each model's own policy).")] = None,
    out_of_range: Annotated[str | None, typer.Option(
        help="flag or reject values outside the training range (default: the model's).")
    ] = None,
    max_header_bytes: Annotated[int, typer.Option(
        help="Larger request lines + headers get 431.")] = 64 * 1024,
    header_timeout: Annotated[float, typer.Option(
        help="Seconds to send the request line and headers (then 408).")] = 10.0,
    body_timeout: Annotated[float, typer.Option(
        help="Seconds to send a request body (then 408).")] = 60.0,
    max_connections: Annotated[int, typer.Option(
        help="Open connections beyond this are refused at once (503).")] = 1000,
    allowed_host: Annotated[list[str] | None, typer.Option(
        metavar="HOST", help="A host name the Host header may carry (repeat; default: any, or only "
             "the loopback names when bound to loopback).")] = None,
    allowed_origin: Annotated[list[str] | None, typer.Option(
        metavar="ORIGIN", help="A browser origin (https://app.example) allowed to call "
                                "from another site (repeat; default: none).")] = None,
    access_log: Annotated[bool, typer.Option("--access-log", help="Log every request.")
                          ] = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    key_header: Annotated[str, typer.Option(
        help="During a rollout that names no key: requests with the same value of this "
             "header always reach the same version (empty: a random draw each).")
    ] = "x-request-key",
    key_column: Annotated[str | None, typer.Option(
        help="Instead, the value of this input column (a request's first row).")] = None,
    shadow_queue: Annotated[int, typer.Option(
        help="Request copies waiting for a shadowed candidate; more are dropped and "
             "counted.")] = 100,
    no_request_log: Annotated[bool, typer.Option(
        "--no-request-log", help="Do not log requests (by default a sample of answered "
        "predictions goes to the workspace's request log).")] = False,
    log_sample: Annotated[float, typer.Option(
        help="Share of requests logged, 0..1.")] = 0.1,
    log_cap: Annotated[int, typer.Option(
        help="At most this many requests logged per second.")] = 100,
    log_exclude: Annotated[list[str] | None, typer.Option(
        metavar="COL", help="An input or output column never logged, e.g. PII (repeat).")
    ] = None,
    log_buffer: Annotated[int, typer.Option(
        help="Rows of the request log waiting to be written; beyond, records are dropped "
             "and counted.")] = 50_000,
    log_flush_s: Annotated[float, typer.Option(
        help="Seconds between writes of the request log.")] = 10.0,
    log_max_age_days: Annotated[float, typer.Option(
        help="Remove request-log chunks older than this (0: keep).")] = 30.0,
    log_max_mb: Annotated[float, typer.Option(
        help="Then the oldest beyond this size per model (0: no limit).")] = 1024.0,
    slo_availability: Annotated[float, typer.Option(
        help="Availability objective of models without a running rollout (whose policy "
             "gives its own): /metrics shows its burn rates and alerts.")] = 0.999,
    slo_latency_ms: Annotated[float | None, typer.Option(
        help="Latency objective: requests slower than this spend its budget (default: "
             "none).")] = None,
    slo_latency_target: Annotated[float, typer.Option(
        help="The share of requests that must be faster than --slo-latency-ms.")] = 0.99,
    monitor: Annotated[str | None, typer.Option(
        metavar="POLICY.yaml", help="Run the closed loop (as `reprise monitor watch`) on each "
        "followed alias in this process, by this trigger policy; with several servers, one "
        "decides at a time.")] = None,
    monitor_interval: Annotated[float, typer.Option(
        help="Seconds between two looks of --monitor at the traffic.")] = 60.0,
    cache_mb: Annotated[float, typer.Option(
        help="Response cache: keep answers of recent rows, per model version, up to this "
             "many MiB (0: no cache).")] = 0.0,
    cache_admit: Annotated[str, typer.Option(
        help="second: once the cache is full, store a row's answer when the row misses a "
             "second time (a row asked once costs no store and evicts nothing; while there "
             "is room, every miss is stored); first: store every miss.")] = "second",
    cache_min_hit_rate: Annotated[float, typer.Option(
        help="A version whose rows hit less often than this has only one request in 64 "
             "looked up until they hit again (0: always look up).")] = 0.01,
    warmup_idle: Annotated[float, typer.Option(
        help="Seconds a served version may stay idle before a warm-up call with its "
             "example rows (0: never).")] = 300.0,
    runtime: Annotated[str, typer.Option(
        help="native (scikit-learn/torch), onnx (the version's ONNX graph in ONNX Runtime; "
             "the process imports neither) or auto (ONNX when the version has a "
             "parity-proven graph).")] = "native",
    otel: Annotated[bool, typer.Option(
        "--otel", help="Export OpenTelemetry spans of prediction requests, configured by "
                       "the OTEL_* environment variables (pip install 'reprise-ml[otel]').")
    ] = False,
) -> None:
    """Serve registered models: Reprise's JSON API, the Open Inference Protocol (KServe V2),
    health probes and Prometheus metrics. A bearer token is required when
    REPRISE_SERVE_TOKEN is set. Ctrl-C drains in-flight requests, then stops."""
    from reprise.cli._fast import serve_command

    serve_command(refs, host=host, port=port, max_batch_size=max_batch_size,
                  max_wait_ms=max_wait_ms, latency_budget_ms=latency_budget_ms,
                  poll_interval=poll_interval, max_body_bytes=max_body_bytes,
                  extra_columns=extra_columns, out_of_range=out_of_range,
                  max_header_bytes=max_header_bytes, header_timeout=header_timeout,
                  body_timeout=body_timeout, max_connections=max_connections,
                  allowed_host=allowed_host or [], allowed_origin=allowed_origin or [],
                  access_log=access_log, log_level=log_level, key_header=key_header,
                  key_column=key_column, shadow_queue=shadow_queue,
                  no_request_log=no_request_log, log_sample=log_sample, log_cap=log_cap,
                  log_exclude=log_exclude or [], log_buffer=log_buffer,
                  log_flush_s=log_flush_s,
                  log_max_age_days=log_max_age_days, log_max_mb=log_max_mb,
                  slo_availability=slo_availability, slo_latency_ms=slo_latency_ms,
                  slo_latency_target=slo_latency_target, otel=otel, monitor=monitor,
                  monitor_interval=monitor_interval, cache_mb=cache_mb,
                  cache_admit=cache_admit, cache_min_hit_rate=cache_min_hit_rate,
                  warmup_idle=warmup_idle, runtime=runtime)
