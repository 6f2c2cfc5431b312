{{/* Names, labels and the pieces every workload shares. */}}

{{- define "harness-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The fullname: the release name when it already holds the chart name. Capped at 47
characters so that "<fullname>-registry-metrics" still fits a Service name (63). */}}
{{- define "harness-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 47 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "harness-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of one component: (dict "context" $ "component" "gateway"). */}}
{{- define "harness-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "harness-gateway.name" .context }}
app.kubernetes.io/instance: {{ .context.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Every object's labels: (dict "context" $ "component" "gateway"). */}}
{{- define "harness-gateway.labels" -}}
helm.sh/chart: {{ include "harness-gateway.chart" .context }}
{{ include "harness-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .context.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: harness-gateway
app.kubernetes.io/managed-by: {{ .context.Release.Service }}
{{- end }}

{{- define "harness-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "harness-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "harness-gateway.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{- define "harness-gateway.network" -}}
{{- if eq .Values.mode "network" }}true{{ end }}
{{- end }}

{{/* The Secret the chart generates for the tokens that no existingSecret names. */}}
{{- define "harness-gateway.tokensSecret" -}}
{{- printf "%s-tokens" (include "harness-gateway.fullname" .) }}
{{- end }}

{{- define "harness-gateway.adminTokenSecret" -}}
{{- default (include "harness-gateway.tokensSecret" .) .Values.auth.adminToken.existingSecret }}
{{- end }}

{{- define "harness-gateway.peerTokenSecret" -}}
{{- default (include "harness-gateway.tokensSecret" .) .Values.auth.peerToken.existingSecret }}
{{- end }}

{{- define "harness-gateway.tlsSecret" -}}
{{- if .Values.tls.secretName }}
{{- .Values.tls.secretName }}
{{- else if .Values.tls.certManager.enabled }}
{{- printf "%s-tls" (include "harness-gateway.fullname" .) }}
{{- else }}
{{- fail "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret) or tls.certManager.enabled" }}
{{- end }}
{{- end }}

{{/* A peer's in-cluster address: (dict "context" $ "component" "router" "port" 7771). */}}
{{- define "harness-gateway.peerURL" -}}
{{- $scheme := ternary "grpcs" "grpc" .context.Values.tls.enabled }}
{{- printf "%s://%s-%s.%s.svc:%v" $scheme (include "harness-gateway.fullname" .context) .component .context.Release.Namespace .port }}
{{- end }}

{{/* The config checksum: every ConfigMap a pod reads its settings from. A change rolls the
pods; nothing else does. */}}
{{- define "harness-gateway.configChecksum" -}}
{{- $config := include (print .Template.BasePath "/configmap.yaml") . }}
{{- $firewall := include (print .Template.BasePath "/firewall-configmap.yaml") . }}
{{- printf "%s\n%s" $config $firewall | sha256sum }}
{{- end }}

{{/* The flags every role shares: (dict "context" $ "grpcPort" N "metricsPort" N). */}}
{{- define "harness-gateway.commonArgs" -}}
{{- $ := .context -}}
- --listen
- "0.0.0.0:{{ .grpcPort }}"
- --metrics-listen
- "0.0.0.0:{{ .metricsPort }}"
- --health-listen
- "0.0.0.0:{{ $.Values.service.healthPort }}"
- --shutdown-delay
- "{{ $.Values.shutdown.delaySeconds }}s"
- --shutdown-grace
- "{{ $.Values.shutdown.graceSeconds }}s"
{{- if $.Values.tls.enabled }}
- --tls-cert
- /etc/harness/tls/tls.crt
- --tls-key
- /etc/harness/tls/tls.key
{{- end }}
{{- end }}

{{/* Flags of a process that joins the Registry (the daemons of network mode, the Router). */}}
{{- define "harness-gateway.joinArgs" -}}
- --registry
- {{ include "harness-gateway.peerURL" (dict "context" . "component" "registry" "port" .Values.network.registry.grpcPort) | quote }}
- --peer-token-file
- /etc/harness/tokens/peer-token
{{- with .Values.network.registry.publicKey }}
- --registry-public-key
- {{ . | quote }}
{{- end }}
{{- if .Values.tls.enabled }}
- --peer-tls-ca
- /etc/harness/tls/ca.crt
{{- end }}
{{- end }}

{{/* Container ports: (dict "context" $ "grpcPort" N "metricsPort" N). */}}
{{- define "harness-gateway.containerPorts" -}}
- name: grpc
  containerPort: {{ .grpcPort }}
  protocol: TCP
- name: metrics
  containerPort: {{ .metricsPort }}
  protocol: TCP
- name: health
  containerPort: {{ .context.Values.service.healthPort }}
  protocol: TCP
{{- end }}

{{/* Startup, readiness and liveness: native gRPC probes on the plaintext health port.
(dict "context" $ "readiness" "harness.v1.HarnessEndpointService"). `liveness` is SERVING
from listen to exit; the readiness name turns SERVING once the process takes calls and
NOT_SERVING at shutdown. */}}
{{- define "harness-gateway.probes" -}}
{{- $probes := .context.Values.probes }}
{{- $port := .context.Values.service.healthPort -}}
startupProbe:
  grpc: {port: {{ $port }}, service: liveness}
  periodSeconds: {{ $probes.startup.periodSeconds }}
  timeoutSeconds: {{ $probes.startup.timeoutSeconds }}
  failureThreshold: {{ $probes.startup.failureThreshold }}
readinessProbe:
  grpc: {port: {{ $port }}, service: {{ .readiness | quote }}}
  periodSeconds: {{ $probes.readiness.periodSeconds }}
  timeoutSeconds: {{ $probes.readiness.timeoutSeconds }}
  failureThreshold: {{ $probes.readiness.failureThreshold }}
livenessProbe:
  grpc: {port: {{ $port }}, service: liveness}
  periodSeconds: {{ $probes.liveness.periodSeconds }}
  timeoutSeconds: {{ $probes.liveness.timeoutSeconds }}
  failureThreshold: {{ $probes.liveness.failureThreshold }}
{{- end }}

{{/* The kubelet's grace: preStop, the shutdown delay and grace, and a margin; an explicit
value below the first three would cut the daemon's shutdown short, so it fails. */}}
{{- define "harness-gateway.terminationGrace" -}}
{{- $s := .Values.shutdown }}
{{- $needed := add $s.preStopSeconds $s.delaySeconds $s.graceSeconds }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $needed $s.marginSeconds }}
{{- else if lt (int .Values.terminationGracePeriodSeconds) (int (add $needed 1)) }}
{{- fail (printf "terminationGracePeriodSeconds %v is shorter than shutdown.preStopSeconds + delaySeconds + graceSeconds + 1 (%v): the kubelet would kill the daemon mid-shutdown" .Values.terminationGracePeriodSeconds (add $needed 1)) }}
{{- else }}
{{- .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* The pod fields every workload shares. */}}
{{- define "harness-gateway.podCommon" -}}
serviceAccountName: {{ include "harness-gateway.serviceAccountName" . }}
automountServiceAccountToken: false
enableServiceLinks: false
terminationGracePeriodSeconds: {{ include "harness-gateway.terminationGrace" . }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The preStop sleep: the endpoints controller takes the pod out of its Services meanwhile. */}}
{{- define "harness-gateway.lifecycle" -}}
lifecycle:
  preStop:
    exec:
      command: ["sleep", "{{ .Values.shutdown.preStopSeconds }}"]
{{- end }}

{{/* The token volume: the admin token, the peer token in network mode; each from its own
Secret, under a fixed file name. Mode 0440 with the pod's fsGroup: gateway/secret_file.py
accepts a root-owned, group-readable file. (dict "context" $ "admin" true "peer" true) */}}
{{- define "harness-gateway.tokenVolume" -}}
- name: tokens
  projected:
    defaultMode: 0440
    sources:
      {{- if .admin }}
      - secret:
          name: {{ include "harness-gateway.adminTokenSecret" .context }}
          items:
            - key: {{ .context.Values.auth.adminToken.key }}
              path: admin-token
      {{- end }}
      {{- if .peer }}
      - secret:
          name: {{ include "harness-gateway.peerTokenSecret" .context }}
          items:
            - key: {{ .context.Values.auth.peerToken.key }}
              path: peer-token
      {{- end }}
{{- end }}

{{- define "harness-gateway.tlsVolumes" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "harness-gateway.tlsSecret" . }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{- define "harness-gateway.tlsMounts" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/harness/tls
  readOnly: true
{{- end }}
{{- end }}

{{/* A /metrics Service: (dict "context" $ "component" "router" "suffix" "-router" "port" N).
The ServiceMonitor selects these by the metrics label; its jobLabel turns
app.kubernetes.io/name into the `job` the alert rules name (job="harness-gateway"). */}}
{{- define "harness-gateway.metricsService" -}}
{{- $ := .context -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "harness-gateway.fullname" $ }}{{ .suffix }}-metrics
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "harness-gateway.labels" (dict "context" $ "component" .component) | nindent 4 }}
    harness-gateway.io/metrics: "true"
spec:
  type: ClusterIP
  selector:
    {{- include "harness-gateway.selectorLabels" (dict "context" $ "component" .component) | nindent 4 }}
  ports:
    - name: metrics
      port: {{ .port }}
      targetPort: metrics
      protocol: TCP
      appProtocol: http
{{- end }}
