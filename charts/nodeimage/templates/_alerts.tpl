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
{{- $ns := .Release.Namespace }}
{{- $controller := include "nodeimage.controller.fullname" . }}
{{- $daemon := include "nodeimage.daemon.fullname" . }}
NodeImageJobFailing:
  # More than a tenth of a job's nodes failed (a single failure on a large
  # job does not page anyone; a job that fails broadly does).
  enabled: true
  expr: 'nodeimage_job_nodes{state="failed"} / on (kind, namespace, name) nodeimage_job_nodes{state="desired"} > 0.1'
  for: 5m
  severity: warning
  runbook: nodeimagejobfailing
  summary: A nodeimage pull job failed on more than 10% of its nodes
  description: {{`'{{ $labels.kind }} {{ with $labels.namespace }}{{ . }}/{{ end }}{{ $labels.name }}: {{ $value | humanizePercentage }} of its nodes failed.'`}}
NodeImagePullsFailing:
  # Most pulls on a node fail, for a sustained time (at least 3 failures and
  # more than half of the pulls over 15 minutes).
  enabled: true
  expr: '(sum by (node) (rate(nodeimage_daemon_pulls_total{result="failed"}[15m])) / sum by (node) (rate(nodeimage_daemon_pulls_total[15m])) > 0.5) and (sum by (node) (increase(nodeimage_daemon_pulls_total{result="failed"}[15m])) >= 3)'
  for: 15m
  severity: warning
  runbook: nodeimagepullsfailing
  summary: Most image pulls fail on a node
  description: {{`'{{ $value | humanizePercentage }} of the pulls on node {{ $labels.node }} failed over the last 15 minutes.'`}}
NodeImageDaemonDown:
  # A daemon cannot be scraped (down or not running). Its pods are found by
  # name and namespace (the target labels both monitors add), not by the
  # job label, which depends on the monitor kind and the names in use.
  enabled: true
  expr: 'up{namespace="{{ $ns }}", pod=~"{{ $daemon }}-[a-z0-9]+"} == 0'
  for: 10m
  severity: warning
  runbook: nodeimagedaemondown
  summary: A nodeimage daemon is down
  description: {{`'The nodeimage daemon {{ $labels.pod }} ({{ $labels.instance }}) has not answered scrapes for 10 minutes; its node pulls nothing.'`}}
NodeImageControllerUnavailable:
  # No controller replica is available (not scheduled, crashing or not
  # Ready): no job makes progress. Needs kube-state-metrics.
  enabled: true
  expr: 'kube_deployment_status_replicas_available{namespace="{{ $ns }}", deployment="{{ $controller }}"} < 1'
  for: 5m
  severity: critical
  runbook: nodeimagecontrollerunavailable
  summary: No nodeimage controller replica is available
  description: {{`'Deployment {{ $labels.namespace }}/{{ $labels.deployment }} has had no available replica for 5 minutes: jobs and NodeImages are not reconciled.'`}}
NodeImageControllerNoLeader:
  # Controller replicas run but none holds the lease: per installation
  # (namespace) and per cluster where a `cluster` label tells clusters apart
  # (one Prometheus or Thanos ruler for several clusters).
  enabled: true
  expr: 'sum by (cluster, namespace) (nodeimage_controller_leader{namespace="{{ $ns }}"}) < 1'
  for: 5m
  severity: critical
  runbook: nodeimagecontrollernoleader
  summary: No nodeimage controller replica leads
  description: 'Controller replicas are scraped but none has held the leader-election lease for 5 minutes: nothing is reconciled.'
NodeImageDaemonsUnavailable:
  # Daemon pods exist but are not available (not Ready, crashing).
  # Needs kube-state-metrics.
  enabled: true
  expr: 'kube_daemonset_status_number_unavailable{namespace="{{ $ns }}", daemonset="{{ $daemon }}"} > 0'
  for: 15m
  severity: warning
  runbook: nodeimagedaemonsunavailable
  summary: nodeimage daemons are not available on some nodes
  description: {{`'{{ $value }} nodes of DaemonSet {{ $labels.namespace }}/{{ $labels.daemonset }} have had no available daemon for 15 minutes.'`}}
NodeImageDaemonsNotScheduled:
  # Nodes that should run a daemon have none scheduled (taints, resources,
  # Pod Security). Needs kube-state-metrics.
  enabled: true
  expr: 'kube_daemonset_status_desired_number_scheduled{namespace="{{ $ns }}", daemonset="{{ $daemon }}"} - kube_daemonset_status_current_number_scheduled{namespace="{{ $ns }}", daemonset="{{ $daemon }}"} > 0'
  for: 15m
  severity: warning
  runbook: nodeimagedaemonsnotscheduled
  summary: nodeimage daemons are not scheduled on some nodes
  description: {{`'{{ $value }} nodes that should run a daemon of {{ $labels.namespace }}/{{ $labels.daemonset }} have none scheduled.'`}}
NodeImagePinnedShareHigh:
  # Images kept pinned for tag entries take more than daemon.pinning.alertShare
  # of a node's image filesystem: kubelet's GC cannot free that space.
  enabled: true
  expr: 'max by (node) (nodeimage_daemon_pinned_bytes) / max by (node) (nodeimage_daemon_image_fs_capacity_bytes) > {{ .Values.daemon.pinning.alertShare }}'
  for: 15m
  severity: warning
  runbook: nodeimagepinnedsharehigh
  summary: Pinned pre-pulled images fill a node's image filesystem
  description: {{`'Images pinned for NodeImage entries take {{ $value | humanizePercentage }} of the image filesystem of node {{ $labels.node }}.'`}}
NodeImageImagesLost:
  # Images keep leaving a node after they were pulled (kubelet's image GC
  # on a runtime without pins): pre-pulls are being undone.
  enabled: true
  expr: 'sum by (node) (increase(nodeimage_daemon_images_lost_total[1h])) >= 3'
  for: 0m
  severity: warning
  runbook: nodeimageimageslost
  summary: Pre-pulled images keep leaving a node
  description: {{`'Pre-pulled images left node {{ $labels.node }} at least 3 times in the last hour while tag entries still wanted them.'`}}
NodeImageStartupGateOverdue:
  # A node still carries the start-up taint 5 minutes past the gate's bound:
  # neither the controller nor the node's own daemon could remove it (a
  # policy or RBAC that refuses the write, a daemon that cannot reach the API
  # server). The node takes no Pods. Read from the node's own daemon, so it
  # fires with no controller running.
  enabled: true
  expr: 'max by (node) (nodeimage_daemon_startup_gate_overdue_seconds) > 0'
  for: 5m
  severity: critical
  runbook: nodeimagestartupgateoverdue
  summary: A node stays behind nodeimage's start-up taint past its bound
  description: {{`'Node {{ $labels.node }} has carried the start-up taint for {{ $value }}s past the gate''s bound: it takes no Pods. Remove the taint by hand and see the node''s daemon log.'`}}
{{- end }}
