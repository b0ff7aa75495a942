{{/* The chart's name, overridable. */}}
{{- define "gridsync-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: object names start with it. */}}
{{- define "gridsync-agent.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gridsync-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gridsync-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gridsync-agent.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gridsync-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "gridsync-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gridsync-agent.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The rules below are the controller's least privilege, as controller/rbac
states it; the chart tests compare the two.
*/}}
{{- define "gridsync-agent.clusterRules" -}}
- apiGroups: ["grid.praxis.fast"]
  resources: ["gridnetworks", "inferenceproviders"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["grid.praxis.fast"]
  resources: ["gridnetworks"]
  verbs: ["patch"]
- apiGroups: ["grid.praxis.fast"]
  resources: ["gridnetworks/status", "inferenceproviders/status"]
  verbs: ["get", "patch"]
- apiGroups: ["grid.praxis.fast"]
  resources: ["gridsites"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["grid.praxis.fast"]
  resources: ["gridsites/status"]
  verbs: ["get", "patch"]
{{- end -}}

{{/* The SWIM Service's EndpointSlice, written by the leader (controller/rbac SwimServiceRules). */}}
{{- define "gridsync-agent.swimServiceRules" -}}
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["get", "create", "patch"]
{{- end -}}

{{- define "gridsync-agent.namespaceRules" -}}
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch"{{ if .Values.deleteOrphanedOverlays }}, "delete"{{ end }}]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end -}}

{{/* The namespaces the agent works in: resourceNamespaces, or the older name namespaces. */}}
{{- define "gridsync-agent.resourceNamespaces" -}}
{{- $ns := .Values.resourceNamespaces -}}
{{- if .Values.namespaces -}}{{- $ns = .Values.namespaces -}}{{- end -}}
{{- toJson (uniq $ns) -}}
{{- end -}}

{{- define "gridsync-agent.leaderElectionRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}

{{/* The agent's image: the digest when set, else the tag, else the chart's appVersion. */}}
{{- define "gridsync-agent.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The Secret /metrics is served with over TLS: the site certificate or one of the user's. */}}
{{- define "gridsync-agent.metricsTLSSecret" -}}
{{- if eq .Values.metrics.tls.source "site" -}}
{{- required "metrics.tls.source site serves with the site certificate: set signals.siteSecretName" .Values.signals.siteSecretName -}}
{{- else -}}
{{- required "metrics.tls.source secret needs metrics.tls.secretName" .Values.metrics.tls.secretName -}}
{{- end -}}
{{- end -}}

{{/* The name a scraper checks the metrics certificate for. */}}
{{- define "gridsync-agent.metricsServerName" -}}
{{- if .Values.metrics.tls.serverName -}}
{{- .Values.metrics.tls.serverName -}}
{{- else if eq .Values.metrics.tls.source "site" -}}
{{- required "metrics.tls.source site: the certificate names the site, set swim.siteName" .Values.swim.siteName }}.grid.internal
{{- else -}}
{{- include "gridsync-agent.fullname" . }}.{{ .Release.Namespace }}.svc
{{- end -}}
{{- end -}}

{{/* A duration of the schema's form (1m30s, 500ms) in milliseconds. */}}
{{- define "gridsync-agent.milliseconds" -}}
{{- $unit := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h)" . -1 -}}
{{- $n := regexFind "^[0-9]+" . -}}
{{- $total = add $total (mul (int $n) (get $unit (trimPrefix $n .))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* Timings the agent refuses to start with, refused at render instead of
     a CrashLoopBackOff: a bound longer than the interval it runs in. */}}
{{- define "gridsync-agent.checkTimings" -}}
{{- $ms := dict -}}
{{- range $key, $value := dict "trustInterval" .Values.trust.probeInterval "trustTimeout" .Values.trust.probeTimeout "swimInterval" .Values.swim.probeInterval "swimTimeout" .Values.swim.probeTimeout -}}
{{- $_ := set $ms $key (include "gridsync-agent.milliseconds" $value | int) -}}
{{- end -}}
{{- if gt $ms.trustTimeout $ms.trustInterval -}}
{{- fail (printf "trust.probeTimeout (%s) must be no longer than trust.probeInterval (%s): the agent refuses to start" .Values.trust.probeTimeout .Values.trust.probeInterval) -}}
{{- end -}}
{{- if ge $ms.swimTimeout $ms.swimInterval -}}
{{- fail (printf "swim.probeTimeout (%s) must be shorter than swim.probeInterval (%s): the agent refuses to start" .Values.swim.probeTimeout .Values.swim.probeInterval) -}}
{{- end -}}
{{- end -}}
