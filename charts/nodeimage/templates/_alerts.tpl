{{/*
The PrometheusRule's alerts: every metric name the alerts query is here, in
one place (the metrics unit tests of both binaries read templates/ and
dashboards/ and fail on a queried name the binaries do not export).
prometheusRule.alerts in values.yaml overrides these per alert name (any of
enabled, expr, for, severity, summary, description) and may add new ones.
The {{`...`}} quoting keeps Prometheus' own {{ $labels.x }} templates out of
Helm's reach.
*/}}
{{- define "nodeimage.alerts" -}}
NodeImageJobFailing:
  # A pull job (ImagePullJob, ImageListPullJob, ImagePrePullJob,
  # NodeUpgradeJob) has nodes whose pulls failed.
  enabled: true
  expr: 'nodeimage_job_nodes{state="failed"} > 0'
  for: 5m
  severity: warning
  summary: A nodeimage pull job has failed nodes
  description: {{`'{{ $labels.kind }} {{ with $labels.namespace }}{{ . }}/{{ end }}{{ $labels.name }} has {{ $value }} nodes whose pulls failed.'`}}
NodeImagePullsFailing:
  # A node's daemon failed pulls in the last 15 minutes.
  enabled: true
  expr: 'increase(nodeimage_daemon_pulls_total{result="failed"}[15m]) > 0'
  for: 0m
  severity: warning
  summary: Image pulls are failing on a node
  description: {{`'{{ $value | humanize }} pulls failed on node {{ $labels.node }} in the last 15 minutes (reason {{ $labels.reason }}).'`}}
NodeImageDaemonDown:
  # A daemon cannot be scraped (down or not running).
  enabled: true
  expr: 'up{job=~".*nodeimage-daemon.*"} == 0'
  for: 10m
  severity: warning
  summary: A nodeimage daemon is down
  description: {{`'The nodeimage daemon {{ $labels.pod }} ({{ $labels.instance }}) has not answered scrapes for 10 minutes; its node pulls nothing.'`}}
{{- end }}
