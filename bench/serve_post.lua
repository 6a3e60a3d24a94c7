-- wrk script for bench_serve.py: POST the JSON body in the file named by WRK_BODY_FILE
-- and print one machine-readable summary line (latencies in microseconds).
local f = assert(io.open(os.getenv("WRK_BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
local auth = os.getenv("WRK_AUTH")  -- bench_hostile.py: the bearer token
if auth then wrk.headers["Authorization"] = auth end
local traceparent = os.getenv("WRK_TRACEPARENT")  -- bench_observability.py
if traceparent then wrk.headers["traceparent"] = traceparent end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, ' ..
    '"mean_us": %.1f, "connect": %d, "read": %d, "write": %d, "status": %d, ' ..
    '"timeout": %d}\n', summary.requests, summary.duration, latency:percentile(50),
    latency:percentile(99), latency.mean, e.connect, e.read, e.write, e.status, e.timeout))
end
