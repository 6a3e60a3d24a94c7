"""W3C Trace Context on prediction requests, and OpenTelemetry spans (the ``otel`` extra).

Without OpenTelemetry, a prediction request that carries a ``traceparent`` header gets one
back: the same trace id and flags when the header is valid, with a span id of the
server's own as the parent id, as a server that continued the trace would send on; a new
trace when it is not valid (the spec: a malformed ``traceparent`` is ignored). A request
without the header costs one look through its headers.

With :class:`Tracing` (``reprise serve --otel``), each prediction request is a server
span, parented by the incoming ``traceparent``, with children for the validation (parse
and signature check), the queue wait and the model call (the batch's ``predict``). The
spans are made when the answer is ready, with the times measured on the way (the batcher
records when the call ran): the request path holds no span open across an ``await``.
``opentelemetry`` is imported only here, and only when tracing is on.
"""

from __future__ import annotations

import logging
import os
import random
import time
from typing import Any

from reprise.core import require

__all__ = ["TRACEPARENT", "Tracing", "continue_trace", "parse_traceparent",
           "tracer_provider_from_env"]

_logger = logging.getLogger(__name__)
TRACEPARENT = b"traceparent"
_HEX = b"0123456789abcdef"
_DASH = 0x2D


def parse_traceparent(value: bytes) -> tuple[bytes, bytes, int] | None:
    """``(trace id, parent id, flags)`` of a valid ``traceparent`` header value (the ids as
    lower-case hex), or None (W3C Trace Context, section 3.2: version 00 is exactly 55
    characters; a later version may be longer, parsed as 00; version ff, upper-case hex
    and all-zero ids are invalid).

    Example:
        >>> parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        (b'4bf92f3577b34da6a3ce929d0e0e4736', b'00f067aa0ba902b7', 1)
    """
    if len(value) < 55 or value[2] != _DASH or value[35] != _DASH or value[52] != _DASH:
        return None
    version, trace, parent, flags = value[:2], value[3:35], value[36:52], value[53:55]
    # bytes.translate deletes the hex digits in C: what is left was not lower-case hex
    if (version + trace + parent + flags).translate(None, _HEX) or version == b"ff":
        return None
    if (version == b"00" and len(value) != 55) or (len(value) > 55 and value[55] != _DASH):
        return None
    if trace == b"0" * 32 or parent == b"0" * 16:
        return None
    return trace, parent, int(flags, 16)


def continue_trace(value: bytes | None) -> bytes:
    """The ``traceparent`` to answer a request carrying ``value`` with (tracing off): its
    trace continued with a new span id, or a new trace (not sampled) when ``value`` is
    not valid."""
    parsed = None if value is None else parse_traceparent(value)
    if parsed is None:
        return b"00-%032x-%016x-00" % (random.getrandbits(128) or 1,
                                        random.getrandbits(64) or 1)
    trace, _, flags = parsed
    return b"00-%s-%016x-%02x" % (trace, random.getrandbits(64) or 1, flags & 0x01)


class Tracing:
    """Spans of prediction requests through an OpenTelemetry ``TracerProvider``.

    ``owned``: the provider was made here (from the environment) and is shut down (its
    spans flushed) with the server; a provider given by the caller is left running.
    """

    def __init__(self, provider: Any, *, owned: bool = False) -> None:
        from opentelemetry import trace
        from opentelemetry.context import Context
        from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

        from reprise import __version__

        self._trace, self._Context, self._SpanKind = trace, Context, SpanKind
        self._NonRecordingSpan, self._SpanContext = NonRecordingSpan, SpanContext
        self._TraceFlags = TraceFlags
        self.provider, self.owned = provider, owned
        self.tracer = provider.get_tracer("reprise.serve", __version__)

    def _context(self, traceparent: bytes | None, tracestate: bytes | None) -> Any:
        parsed = None if traceparent is None else parse_traceparent(traceparent)
        if parsed is None:
            return self._Context()  # a new trace (an invalid header is ignored, and so is
            # its tracestate: the spec ties one to the other)
        from opentelemetry.trace import TraceState

        trace, parent, flags = parsed
        state = None if tracestate is None else TraceState.from_header(
            [tracestate.decode("latin-1")])  # invalid entries: dropped by the SDK
        remote = self._SpanContext(int(trace, 16), int(parent, 16), is_remote=True,
                                   trace_flags=self._TraceFlags(flags & 0x01),
                                   trace_state=state)
        return self._trace.set_span_in_context(self._NonRecordingSpan(remote))

    def start(self, name: str, start: float, traceparent: bytes | None,
              attributes: dict[str, Any], tracestate: bytes | None = None
              ) -> tuple[Any, int]:
        """The request's server span, begun at ``start`` (``time.perf_counter``), and the
        offset that turns ``perf_counter`` seconds into the span clock's nanoseconds."""
        offset = time.time_ns() - time.perf_counter_ns()
        span = self.tracer.start_span(name, context=self._context(traceparent, tracestate),
                                      kind=self._SpanKind.SERVER, attributes=attributes,
                                      start_time=int(start * 1e9) + offset)
        return span, offset

    def traceparent(self, span: Any, incoming: bytes | None) -> bytes:
        """The ``traceparent`` naming ``span`` (sent back with the answer); as without
        tracing when the SDK made no span (``OTEL_SDK_DISABLED``)."""
        ctx = span.get_span_context()
        if not ctx.is_valid:
            return continue_trace(incoming)
        return b"00-%032x-%016x-%02x" % (ctx.trace_id, ctx.span_id, int(ctx.trace_flags))

    def child(self, span: Any, name: str, start: float, end: float, offset: int,
              attributes: dict[str, Any] | None = None) -> None:
        """A finished child span of ``span`` from ``start`` to ``end`` (perf_counter)."""
        if end < start:
            return
        child = self.tracer.start_span(name, context=self._trace.set_span_in_context(span),
                                       attributes=attributes,
                                       start_time=int(start * 1e9) + offset)
        child.end(end_time=int(end * 1e9) + offset)

    def finish(self, span: Any, end: float, offset: int, status: int,
               error: str | None) -> None:
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, error))
            if error is not None:
                span.set_attribute("error.type", error)
        span.end(end_time=int(end * 1e9) + offset)

    def shutdown(self) -> None:
        """Flush and stop the provider made here (a given one belongs to its caller)."""
        if self.owned:
            self.provider.shutdown()


def tracer_provider_from_env() -> Any:
    """A ``TracerProvider`` configured by the OpenTelemetry SDK's environment variables:
    ``OTEL_TRACES_EXPORTER`` (``otlp``, the default, over HTTP/protobuf to
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT``; ``console``; ``none``;
    comma-separated for several), ``OTEL_SERVICE_NAME`` (default ``reprise-serve``),
    ``OTEL_RESOURCE_ATTRIBUTES``, and the ``OTEL_TRACES_SAMPLER`` and ``OTEL_BSP_*``
    settings the SDK reads itself."""
    from reprise.core.errors import UserError

    require("opentelemetry.sdk.trace", "otel", "reprise serve --otel")
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "reprise-serve"}))
    provider = TracerProvider(resource=resource)
    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    for name in filter(None, names):
        if name == "none":
            continue
        if name == "console":
            exporter: Any = ConsoleSpanExporter()
        elif name == "otlp":
            protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                                      os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL",
                                                     "http/protobuf"))
            if protocol != "http/protobuf":
                raise UserError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported by "
                                "reprise serve --otel; use http/protobuf (the default)")
            module = require("opentelemetry.exporter.otlp.proto.http.trace_exporter", "otel",
                             "reprise serve --otel")
            exporter = module.OTLPSpanExporter()
        else:
            raise UserError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r}; use otlp, "
                            "console or none")
        provider.add_span_processor(BatchSpanProcessor(exporter))
    _logger.info("tracing: spans exported to %s", ", ".join(names) or "nothing")
    return provider
