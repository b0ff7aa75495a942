{{- define "praxis-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "praxis-gateway.fullname" -}}
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

{{- define "praxis-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "praxis-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object: commonLabels, then the chart's own (which win). */}}
{{- define "praxis-gateway.labels" -}}
{{- $own := dict
  "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-")
  "app.kubernetes.io/version" .Chart.AppVersion
  "app.kubernetes.io/managed-by" .Release.Service -}}
{{- $labels := mustMergeOverwrite (dict) (.Values.commonLabels | default dict) $own (include "praxis-gateway.selectorLabels" . | fromYaml) -}}
{{- toYaml $labels -}}
{{- end -}}

{{/*
Labels of an object with extra labels of its own (a monitor's, for the
Prometheus that selects it): one map, so no key is written twice; the
chart's own labels win. Call with (dict "root" $ "extra" <map>).
*/}}
{{- define "praxis-gateway.labelsWith" -}}
{{- $labels := mustMergeOverwrite (dict) (.extra | default dict) (include "praxis-gateway.labels" .root | fromYaml) -}}
{{- toYaml $labels -}}
{{- end -}}

{{/*
The pod template's labels: podLabels and commonLabels, then the selector
labels, which cannot be overridden. One map, so no key is written twice,
and no chart version, so that a chart upgrade alone does not roll the pods.
*/}}
{{- define "praxis-gateway.podLabels" -}}
{{- $labels := mustMergeOverwrite (dict) (.Values.commonLabels | default dict) (.Values.podLabels | default dict) (include "praxis-gateway.selectorLabels" . | fromYaml) -}}
{{- toYaml $labels -}}
{{- end -}}

{{/* The gateway's image: the digest when set, else the tag. */}}
{{- define "praxis-gateway.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* gridsync's release that this chart was tested with. */}}
{{- define "praxis-gateway.gridsyncVersion" -}}0.1.0{{- end -}}

{{/* The sidecar's image: its digest when set, else its tag, else gridsync's tested release. */}}
{{- define "praxis-gateway.syncImage" -}}
{{- $image := .Values.overlay.sidecar.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository ($image.tag | default (include "praxis-gateway.gridsyncVersion" .)) -}}
{{- end -}}
{{- end -}}

{{/* The gateway's name in its GridNetwork (the overlay's scope.gateway). */}}
{{- define "praxis-gateway.gatewayName" -}}
{{- default (include "praxis-gateway.fullname" .) .Values.overlay.sidecar.expectedGateway -}}
{{- end -}}

{{/*
fnv1a32 is the 32-bit FNV-1a hash of a string as 8 hex digits, as the
controller computes it for long ConfigMap names. Templates have no
bitwise operators, so the XOR of each byte into the low byte of the hash
is done bit by bit. Names are DNS names: the characters below are all a
network or gateway name (and the "/" between them) can hold.
*/}}
{{- define "praxis-gateway.fnv1a32" -}}
{{- $codes := dict "-" 45 "." 46 "/" 47 "0" 48 "1" 49 "2" 50 "3" 51 "4" 52 "5" 53 "6" 54 "7" 55 "8" 56 "9" 57 "a" 97 "b" 98 "c" 99 "d" 100 "e" 101 "f" 102 "g" 103 "h" 104 "i" 105 "j" 106 "k" 107 "l" 108 "m" 109 "n" 110 "o" 111 "p" 112 "q" 113 "r" 114 "s" 115 "t" 116 "u" 117 "v" 118 "w" 119 "x" 120 "y" 121 "z" 122 -}}
{{- $bits := list 1 2 4 8 16 32 64 128 -}}
{{- $h := 2166136261 -}}
{{- range $c := splitList "" . -}}
{{- if not (hasKey $codes $c) -}}
{{- fail (printf "overlay ConfigMap name: %q is not a DNS name character; set overlay.existingConfigMap" $c) -}}
{{- end -}}
{{- $b := get $codes $c -}}
{{- $low := mod $h 256 -}}
{{- $x := 0 -}}
{{- range $bit := $bits -}}
{{- if ne (mod (div $low $bit) 2) (mod (div $b $bit) 2) -}}
{{- $x = add $x $bit -}}
{{- end -}}
{{- end -}}
{{- $h = mod (mul (add (sub $h $low) $x) 16777619) 4294967296 -}}
{{- end -}}
{{- printf "%08x" (int64 $h) -}}
{{- end -}}

{{/*
The overlay ConfigMap's name: overlay.existingConfigMap, else the
controller's rule: grid-overlay-<network>-<gateway>, or when that exceeds
63 characters both cut to 20 and the FNV-1a hash of "<network>/<gateway>".
*/}}
{{- define "praxis-gateway.overlayConfigMap" -}}
{{- if .Values.overlay.existingConfigMap -}}
{{- .Values.overlay.existingConfigMap -}}
{{- else -}}
{{- $network := required "overlay.sidecar.expectedNetwork is required to derive the overlay ConfigMap's name (or set overlay.existingConfigMap)" .Values.overlay.sidecar.expectedNetwork -}}
{{- $gateway := include "praxis-gateway.gatewayName" . -}}
{{- $name := printf "grid-overlay-%s-%s" $network $gateway -}}
{{- if le (len $name) 63 -}}
{{- $name -}}
{{- else -}}
{{- printf "grid-overlay-%s-%s-%s" (trunc 20 $network) (trunc 20 $gateway) (include "praxis-gateway.fnv1a32" (printf "%s/%s" $network $gateway)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "praxis-gateway.serviceAccountName" -}}
{{- default (printf "%s-overlay-sync" (include "praxis-gateway.fullname" . | trunc 50 | trimSuffix "-")) .Values.overlay.sidecar.serviceAccountName -}}
{{- end -}}

{{/* seconds converts a duration of the form 90s, 10m, 2h or 1d to seconds. */}}
{{- define "praxis-gateway.seconds" -}}
{{- $d := toString . -}}
{{- $units := dict "s" 1 "m" 60 "h" 3600 "d" 86400 -}}
{{- $unit := substr (int (sub (len $d) 1)) (len $d) $d -}}
{{- if not (hasKey $units $unit) -}}
{{- fail (printf "%q is not a duration like 90s, 10m, 2h or 1d" $d) -}}
{{- end -}}
{{- mul (int (trimSuffix $unit $d)) (get $units $unit) -}}
{{- end -}}

{{/*
One of the gateway's probes (health.readiness or health.liveness). The
upstream chart's default probes the port named "http"; a listener renamed
with port.name (https, say) has no such port, and the kubelet would fail
that probe for ever. A TCP probe of "http" is therefore pointed at the
listener by its name when the listener is named otherwise.
*/}}
{{- define "praxis-gateway.probe" -}}
{{- $probe := deepCopy .probe -}}
{{- if and $probe.tcpSocket (eq (toString $probe.tcpSocket.port) "http") (ne .root.Values.port.name "http") -}}
{{- $_ := set $probe.tcpSocket "port" .root.Values.port.name -}}
{{- end -}}
{{- toYaml $probe -}}
{{- end -}}

{{/*
A grant of get and patch on this chart's one Deployment to the gridsync
agent's ServiceAccount: a Role and its RoleBinding named <fullname>-<suffix>.
The gateway gives it when it opts in to the agent rolling it.
*/}}
{{- define "praxis-gateway.deploymentGrant" -}}
{{- $root := .root -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ include "praxis-gateway.fullname" $root }}-{{ .suffix }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "praxis-gateway.labels" $root | nindent 4 }}
rules:
  - apiGroups: ["apps"]
    resources: ["deployments"]
    resourceNames: [{{ include "praxis-gateway.fullname" $root | quote }}]
    verbs: ["get", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ include "praxis-gateway.fullname" $root }}-{{ .suffix }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "praxis-gateway.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "praxis-gateway.fullname" $root }}-{{ .suffix }}
subjects:
  - kind: ServiceAccount
    name: {{ .serviceAccount }}
    namespace: {{ .namespace }}
{{- end }}
