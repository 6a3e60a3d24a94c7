-- wrk script for bench_cache.py: POST the bodies in the file named by WRK_BODIES (one JSON
-- body per line) in order, and print one machine-readable summary line (latencies in
-- microseconds). One wrk thread keeps the file's order across its connections.
local bodies = {}
for line in io.lines(os.getenv("WRK_BODIES")) do bodies[#bodies + 1] = line end
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

request = function()
  i = i + 1
  if i > #bodies then i = 1 end  -- wrapped: bench_cache.py refuses the window
  return wrk.format(nil, nil, nil, bodies[i])
end

function done(summary, latency, requests)  -- serve_post.lua's line, and the bodies
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, ' ..
    '"mean_us": %.1f, "connect": %d, "read": %d, "write": %d, "status": %d, ' ..
    '"timeout": %d, "bodies": %d}\n', summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency.mean, e.connect, e.read,
    e.write, e.status, e.timeout, #bodies))
end
