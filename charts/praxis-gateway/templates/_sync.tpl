{{/*
The overlay-sync container, shared by the init container, the sidecar and
the native sidecar. Call with (dict "root" $ "kind" "init"|"sidecar"|"native").
*/}}
{{- define "praxis-gateway.syncContainer" -}}
{{- $root := .root -}}
{{- $v := $root.Values.overlay.sidecar -}}
- name: {{ if eq .kind "init" }}overlay-init{{ else }}overlay-sync{{ end }}
  image: {{ include "praxis-gateway.syncImage" $root | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if eq .kind "init" }}
  command: ["/usr/local/bin/gridsync-init"]
  {{- end }}
  {{- if eq .kind "native" }}
  restartPolicy: Always
  {{- end }}
  args:
    - --namespace=$(POD_NAMESPACE)
    - --config-map={{ include "praxis-gateway.overlayConfigMap" $root }}
    - --data-key={{ $v.dataKey }}
    - --output={{ $root.Values.overlay.mountPath }}/routing-overlay.json
    - --expected-network={{ required "overlay.sidecar.expectedNetwork is required with the sidecar" $v.expectedNetwork }}
    - --expected-gateway={{ include "praxis-gateway.gatewayName" $root }}
    - --expected-local-site={{ required "overlay.sidecar.expectedLocalSite is required with the sidecar" $v.expectedLocalSite }}
    - --log-level={{ $v.logLevel }}
    - --max-bytes={{ int64 $v.maxBytes }}
    {{- if $v.identity.enabled }}
    - --identity-cert=/etc/gridsync/identity/tls.crt
    - --identity-key=/etc/gridsync/identity/tls.key
    {{- if $v.identity.verifyCA }}
    - --identity-ca=/etc/gridsync/identity/ca.crt
    {{- end }}
    - --identity-dir={{ $root.Values.overlay.mountPath }}/identity
    - --identity-interval={{ $v.identity.interval }}
    {{- end }}
    {{- if eq .kind "init" }}
    - --timeout={{ $v.initTimeout }}
    {{- else }}
    - --health-addr=:{{ $v.healthPort }}
    - --probe-addr=:{{ $v.probePort }}
    - --expire-after={{ $v.expireAfter }}
    - --overlay-encoding={{ $v.encoding }}
    {{- with $v.report.to }}
    - --report-to={{ . }}
    - --report-token-file=/var/run/secrets/gridsync/report/token
    - --report-interval={{ $v.report.interval }}
    {{- with $v.report.serverName }}
    - --report-server-name={{ . }}
    {{- end }}
    {{- end }}
    {{- end }}
  env:
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    {{- if and (ne .kind "init") $v.report.to }}
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    {{- end }}
    # The Go runtime keeps itself under 90% of the container's limit.
    - name: GRIDSYNC_MEMORY_LIMIT
      valueFrom:
        resourceFieldRef:
          resource: limits.memory
  {{- if ne .kind "init" }}
  ports:
    - name: metrics
      containerPort: {{ $v.healthPort }}
      protocol: TCP
    - name: probes
      containerPort: {{ $v.probePort }}
      protocol: TCP
  # Native: holds the gateway back until a valid overlay is on disk.
  # Both: the readiness probe waits for it, so that the first readiness
  # probe, at the container's start, does not find the port still closed
  # and leave the pod unready for a whole period (5 s).
  startupProbe:
    httpGet: {path: /startupz, port: probes}
    periodSeconds: 1
    failureThreshold: 600
  livenessProbe:
    httpGet: {path: /livez, port: probes}
    periodSeconds: 10
  readinessProbe:
    httpGet: {path: /readyz, port: probes}
    periodSeconds: 5
  {{- end }}
  volumeMounts:
    - name: routing-overlay
      mountPath: {{ $root.Values.overlay.mountPath }}
    # The API token: only the sync containers get one.
    - name: overlay-sync-token
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
    {{- if and (ne .kind "init") $v.report.to }}
    # The report token: its own audience, good for the agent only.
    - name: overlay-report-token
      mountPath: /var/run/secrets/gridsync/report
      readOnly: true
    {{- end }}
    {{- if $v.identity.enabled }}
    # The TLS Secret as mounted; the gateway gets validated generations only.
    - name: identity-source
      mountPath: /etc/gridsync/identity
      readOnly: true
    {{- end }}
  securityContext:
    {{- include "praxis-gateway.containerSecurityContext" $root | nindent 4 }}
  resources:
    {{- toYaml (include "praxis-gateway.syncResources" $v | fromYaml) | nindent 4 }}
{{- end -}}

{{/*
The sync containers' resources. A sidecar holds an envelope about three
times over while it takes a new one (the one serving, the new one, the
validator's work), so past the default 1 MiB bound the default memory
limit (32Mi) grows by 4Mi for each MiB more (44Mi for 4 MiB); a limit set
to anything else is kept as it is.
*/}}
{{- define "praxis-gateway.syncResources" -}}
{{- $res := deepCopy (.resources | default dict) -}}
{{- $extra := sub (int64 .maxBytes) 1048576 -}}
{{- $limits := $res.limits | default dict -}}
{{- if and (gt $extra 0) (eq (toString (index $limits "memory")) "32Mi") -}}
{{- $_ := set $limits "memory" (printf "%dMi" (add 32 (mul 4 (div (add $extra 1048575) 1048576)))) -}}
{{- $_ := set $res "limits" $limits -}}
{{- end -}}
{{- toYaml $res -}}
{{- end -}}

{{- define "praxis-gateway.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}
