-- vllm-fleet (roles/services/router): the teams' request counters for Prometheus.
-- HAProxy's own exporter has no per-key series; the front door already counts each team's
-- requests in its stick table (vllm_fleet_teams, keyed by the team's name), so this service
-- prints that table in Prometheus' text format on the metrics frontend's /metrics/teams.
-- Team names are letters, digits, - and _ (validated), safe inside a label value.
core.register_service("vllm_fleet_team_metrics", "http", function(applet)
  local lines = {
    "# HELP vllm_fleet_router_team_requests_total Requests made with each team's key (refused ones included).",
    "# TYPE vllm_fleet_router_team_requests_total counter",
    "# HELP vllm_fleet_router_team_request_rate Requests made with each team's key over the last minute.",
    "# TYPE vllm_fleet_router_team_request_rate gauge",
  }
  local teams = core.backends["vllm_fleet_teams"].stktable:dump()
  for team, data in pairs(teams) do
    lines[#lines + 1] = string.format('vllm_fleet_router_team_requests_total{team="%s"} %d', team, data["http_req_cnt"])
    lines[#lines + 1] = string.format('vllm_fleet_router_team_request_rate{team="%s"} %d', team, data["http_req_rate"])
  end
  local body = table.concat(lines, "\n") .. "\n"
  applet:set_status(200)
  applet:add_header("content-type", "text/plain; version=0.0.4")
  applet:add_header("content-length", tostring(string.len(body)))
  applet:start_response()
  applet:send(body)
end)
