{{/*
Chart name, truncated to 63 characters (a DNS label).
*/}}
{{- define "nodeimage.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name prefix of every resource: <release>-nodeimage, or the release name
alone when it already contains the chart name. Truncated so that
"<fullname>-controller" still fits in 63 characters.
*/}}
{{- define "nodeimage.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "nodeimage.controller.fullname" -}}
{{ include "nodeimage.fullname" . }}-controller
{{- end }}

{{- define "nodeimage.daemon.fullname" -}}
{{ include "nodeimage.fullname" . }}-daemon
{{- end }}

{{- define "nodeimage.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every resource.
*/}}
{{- define "nodeimage.labels" -}}
helm.sh/chart: {{ include "nodeimage.chart" . }}
app.kubernetes.io/name: {{ include "nodeimage.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nodeimage
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels of one component: include with (dict "ctx" $ "component" "controller").
*/}}
{{- define "nodeimage.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodeimage.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "nodeimage.componentLabels" -}}
{{ include "nodeimage.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "nodeimage.controller.serviceAccountName" -}}
{{- if .Values.controller.serviceAccount.create }}
{{- default (include "nodeimage.controller.fullname" .) .Values.controller.serviceAccount.name }}
{{- else }}
{{- required "controller.serviceAccount.name is required when controller.serviceAccount.create is false" .Values.controller.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "nodeimage.daemon.serviceAccountName" -}}
{{- if .Values.daemon.serviceAccount.create }}
{{- default (include "nodeimage.daemon.fullname" .) .Values.daemon.serviceAccount.name }}
{{- else }}
{{- required "daemon.serviceAccount.name is required when daemon.serviceAccount.create is false" .Values.daemon.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference: include with (dict "ctx" $ "name" "controller" "image" .Values.controller.image).
A digest wins over the tag; the tag defaults to the chart's appVersion.
*/}}
{{- define "nodeimage.image" -}}
{{- $repo := required (printf "%s.image.repository is required: no nodeimage images are published yet; build and push them (make images, see docs/install.md) and set it" .name) .image.repository }}
{{- if .image.digest }}
{{- printf "%s@%s" $repo .image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/*
Directory of the containerd socket (mounted with a hostPath).
*/}}
{{- define "nodeimage.daemon.socketDir" -}}
{{- $sock := required "daemon.containerdSocket is required" .Values.daemon.containerdSocket }}
{{- if not (isAbs $sock) }}
{{- fail (printf "daemon.containerdSocket must be an absolute path, got %q" $sock) }}
{{- end }}
{{- dir $sock }}
{{- end }}

{{/*
Whether the chart creates the secrets namespace.
*/}}
{{- define "nodeimage.createSecretsNamespace" -}}
{{- if and .Values.createSecretsNamespace (ne .Values.secretsNamespace .Release.Namespace) }}true{{ end }}
{{- end }}

{{/*
Checks of value combinations; included by the controller Deployment so they
run on every render.
*/}}
{{- define "nodeimage.validate" -}}
{{- if not .Values.secretsNamespace }}
{{- fail "secretsNamespace must not be empty" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled }}
{{- fail "enable metrics.serviceMonitor or metrics.podMonitor, not both (each target would be scraped twice)" }}
{{- end }}
{{- if and (gt (int .Values.controller.replicas) 1) (not .Values.controller.leaderElection.enabled) }}
{{- fail "controller.replicas > 1 needs controller.leaderElection.enabled=true (otherwise every replica reconciles)" }}
{{- end }}
{{- end }}

{{/*
The controller's priority class: the one set, or system-cluster-critical
while the start-up gate is on (it must schedule when every other node is
gated), or none.
*/}}
{{- define "nodeimage.controller.priorityClassName" -}}
{{- if .Values.controller.priorityClassName -}}
{{- .Values.controller.priorityClassName -}}
{{- else if .Values.startupGate.enabled -}}
system-cluster-critical
{{- end -}}
{{- end }}
