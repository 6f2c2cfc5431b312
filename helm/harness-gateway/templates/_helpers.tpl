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

{{/* Cluster mode: interchangeable replicas of one gateway on one PostgreSQL
(docs/design/cluster.md §11). */}}
{{- define "harness-gateway.cluster" -}}
{{- if eq .Values.mode "cluster" }}true{{ end }}
{{- end }}

{{/* Processes that share the peer token: network mode's, and a cluster's replicas, which
present and accept it when they forward calls to each other. */}}
{{- define "harness-gateway.peers" -}}
{{- if or (include "harness-gateway.network" .) (include "harness-gateway.cluster" .) }}true{{ end }}
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
{{- if include "harness-gateway.cluster" . }}
{{- /* A leaving replica hands its partitions over before its streams end (cluster.md §9.3). */}}
{{- $needed = add $needed .Values.cluster.handoverSeconds }}
{{- end }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $needed $s.marginSeconds }}
{{- else if lt (int .Values.terminationGracePeriodSeconds) (int (add $needed 1)) }}
{{- fail (printf "terminationGracePeriodSeconds %v is shorter than shutdown.preStopSeconds + delaySeconds + graceSeconds%s + 1 (%v): the kubelet would kill the daemon mid-shutdown" .Values.terminationGracePeriodSeconds (ternary " + cluster.handoverSeconds" "" (not (empty (include "harness-gateway.cluster" .)))) (add $needed 1)) }}
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

{{/* The values that turn the NATS and PostgreSQL backends on, read with their defaults:
`helm upgrade --reuse-values` from a release of an older chart reuses that chart's values,
which have none of these keys, and must render as before. */}}
{{- define "harness-gateway.routerBackend" -}}
{{- dig "router" "backend" "standalone" .Values.network }}
{{- end }}

{{- define "harness-gateway.persistent" -}}
{{- if dig "enabled" true .Values.persistence }}true{{ end }}
{{- end }}

{{/* Network mode whose Router is an existing NATS JetStream cluster (network.nats): no
Router process; each daemon joins the cluster itself. */}}
{{- define "harness-gateway.natsRouter" -}}
{{- if and (include "harness-gateway.network" .) (eq (include "harness-gateway.routerBackend" .) "nats") }}true{{ end }}
{{- end }}

{{/* Network mode with the chart's own Router Deployment. */}}
{{- define "harness-gateway.standaloneRouter" -}}
{{- if and (include "harness-gateway.network" .) (eq (include "harness-gateway.routerBackend" .) "standalone") }}true{{ end }}
{{- end }}

{{/* Network mode whose stores and cards live in an existing PostgreSQL (network.postgresql),
or cluster mode, whose replicas all open it (checkValues requires it there). */}}
{{- define "harness-gateway.postgresql" -}}
{{- if and (include "harness-gateway.peers" .) (dig "postgresql" "enabled" false .Values.network) }}true{{ end }}
{{- end }}

{{/* What values.schema.json cannot say, checked once per render (the StatefulSet includes
it): each half configuration fails here, naming the value, rather than crash-looping pods. */}}
{{- define "harness-gateway.checkValues" -}}
{{- $network := .Values.network }}
{{- $postgresqlEnabled := dig "postgresql" "enabled" false $network }}
{{- $natsServers := dig "nats" "servers" list $network }}
{{- $registryReplicas := dig "registry" "replicas" 1 $network }}
{{- if not (include "harness-gateway.network" .) }}
{{- if eq (include "harness-gateway.routerBackend" .) "nats" }}
{{- fail (printf "network.router.backend: nats needs mode: network (%s mode has no Router to replace)" .Values.mode) }}
{{- end }}
{{- if and $postgresqlEnabled (not (include "harness-gateway.cluster" .)) }}
{{- fail "network.postgresql.enabled needs mode: network (or mode: cluster)" }}
{{- end }}
{{- end }}
{{- if include "harness-gateway.cluster" . }}
{{- include "harness-gateway.checkClusterValues" . }}
{{- end }}
{{- if include "harness-gateway.natsRouter" . }}
{{- if not $natsServers }}
{{- fail "network.router.backend: nats needs network.nats.servers (nats://HOST:PORT or tls://HOST:PORT)" }}
{{- end }}
{{- $scheme := first $network.nats.servers | splitList "://" | first }}
{{- range $network.nats.servers }}
{{- if not (hasPrefix (printf "%s://" $scheme) .) }}
{{- fail (printf "network.nats.servers mixes nats:// and tls:// (%s): one scheme for every server" .) }}
{{- end }}
{{- end }}
{{- if and $network.nats.tls.clientCertificate (not $network.nats.tls.secretName) }}
{{- fail "network.nats.tls.clientCertificate needs network.nats.tls.secretName (a Secret with ca.crt, tls.crt and tls.key)" }}
{{- end }}
{{- else if $natsServers }}
{{- fail "network.nats.servers is set but network.router.backend is not nats, so no daemon would use it" }}
{{- end }}
{{- if and $postgresqlEnabled (not $network.postgresql.url) }}
{{- fail "network.postgresql.enabled needs network.postgresql.url (postgresql://USER@HOST:PORT/DATABASE)" }}
{{- end }}
{{- if and (gt (int $registryReplicas) 1) (not (include "harness-gateway.postgresql" .)) }}
{{- fail (printf "network.registry.replicas %v needs network.postgresql.enabled: without PostgreSQL each replica would hold its own cards and signing key" $registryReplicas) }}
{{- end }}
{{- if and (not (include "harness-gateway.persistent" .)) (not (include "harness-gateway.postgresql" .)) (not (include "harness-gateway.cluster" .)) }}
{{- fail "persistence.enabled: false needs network.postgresql.enabled: a SQLite store on an emptyDir loses every agent's history at the first restart" }}
{{- end }}
{{- end }}

{{/* The daemon's flags for a NATS JetStream Router. The ring limits become the stream's
MaxMsgs and MaxBytes, the same on every daemon, so none of them redefines the stream. */}}
{{- define "harness-gateway.natsArgs" -}}
{{- $nats := .Values.network.nats -}}
- --router
- {{ join "," $nats.servers | quote }}
{{- if $nats.creds.secretName }}
- --nats-creds
- /etc/harness/nats/nats.creds
{{- end }}
{{- if $nats.tls.secretName }}
- --nats-tls-ca
- /etc/harness/nats/ca.crt
{{- if $nats.tls.clientCertificate }}
- --nats-tls-cert
- /etc/harness/nats/tls.crt
- --nats-tls-key
- /etc/harness/nats/tls.key
{{- end }}
{{- end }}
- --nats-subject-prefix
- {{ $nats.subjectPrefix | quote }}
- --nats-replicas
- {{ $nats.replicas | quote }}
- --nats-max-age
- {{ $nats.maxAge | quote }}
- --nats-duplicate-window
- {{ $nats.duplicateWindow | quote }}
- --ring-max-entries
- {{ .Values.network.router.ringMaxEntries | quote }}
- --ring-max-bytes
- {{ .Values.network.router.ringMaxBytes | quote }}
{{- end }}

{{/* The NATS files from their Secrets, in one volume at /etc/harness/nats. */}}
{{- define "harness-gateway.natsVolume" -}}
{{- $nats := .Values.network.nats -}}
{{- if or $nats.creds.secretName $nats.tls.secretName }}
- name: nats
  projected:
    defaultMode: 0440
    sources:
      {{- with $nats.creds.secretName }}
      - secret:
          name: {{ . }}
          items:
            - key: {{ $nats.creds.key }}
              path: nats.creds
      {{- end }}
      {{- with $nats.tls.secretName }}
      - secret:
          name: {{ . }}
          items:
            - key: ca.crt
              path: ca.crt
            {{- if $nats.tls.clientCertificate }}
            - key: tls.crt
              path: tls.crt
            - key: tls.key
              path: tls.key
            {{- end }}
      {{- end }}
{{- end }}
{{- end }}

{{- define "harness-gateway.natsMount" -}}
{{- if or .Values.network.nats.creds.secretName .Values.network.nats.tls.secretName }}
- name: nats
  mountPath: /etc/harness/nats
  readOnly: true
{{- end }}
{{- end }}

{{/* libpq's variables for a process that opens the PostgreSQL store: the password from
its Secret (never in the URL, which the pod spec shows), the TLS mode and CA. */}}
{{- define "harness-gateway.postgresqlEnv" -}}
{{- $pg := .Values.network.postgresql -}}
{{- with $pg.password.secretName }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $pg.password.key }}
{{- end }}
{{- with $pg.sslMode }}
- name: PGSSLMODE
  value: {{ . | quote }}
{{- end }}
{{- if $pg.sslRootCert.secretName }}
- name: PGSSLROOTCERT
  value: /etc/harness/postgresql/ca.crt
{{- end }}
{{- end }}

{{- define "harness-gateway.postgresqlVolume" -}}
{{- $ca := .Values.network.postgresql.sslRootCert -}}
{{- if $ca.secretName }}
- name: postgresql-ca
  secret:
    secretName: {{ $ca.secretName }}
    defaultMode: 0440
    items:
      - key: {{ $ca.key }}
        path: ca.crt
{{- end }}
{{- end }}

{{- define "harness-gateway.postgresqlMount" -}}
{{- if .Values.network.postgresql.sslRootCert.secretName }}
- name: postgresql-ca
  mountPath: /etc/harness/postgresql
  readOnly: true
{{- end }}
{{- end }}

{{/* The values of the Registry's signing key: network.registry.signingKey, or in cluster mode
cluster.registryKey (the replicas are the Registry). */}}
{{- define "harness-gateway.registryKeyValues" -}}
{{- if include "harness-gateway.cluster" . }}
{{- toYaml .Values.cluster.registryKey }}
{{- else }}
{{- toYaml .Values.network.registry.signingKey }}
{{- end }}
{{- end }}

{{/* The Secret of the Registry's signing key: existingSecret, else the one the chart
generates (registry-key.yaml). */}}
{{- define "harness-gateway.registryKeySecret" -}}
{{- $key := include "harness-gateway.registryKeyValues" . | fromYaml }}
{{- default (printf "%s-registry-key" (include "harness-gateway.fullname" .)) $key.existingSecret }}
{{- end }}

{{/* What values.schema.json cannot say about mode: cluster (checkValues includes it). */}}
{{- define "harness-gateway.checkClusterValues" -}}
{{- $pg := .Values.network.postgresql }}
{{- if not (and $pg.enabled $pg.url) }}
{{- fail "mode: cluster needs an existing PostgreSQL: set network.postgresql.enabled: true and network.postgresql.url (postgresql://USER@HOST:PORT/DATABASE); every replica opens that one database (docs/design/cluster.md §1)" }}
{{- end }}
{{- if not .Values.cluster.seedKey.existingSecret }}
{{- fail "mode: cluster needs cluster.seedKey.existingSecret: a Secret you create holding the cluster's 32-byte seed key (unpadded base64url, docs/deploy.md). The chart never generates it: the migration Job reads it before the release exists, and losing it loses every agent's signing seed" }}
{{- end }}
{{- if or .Values.tls.enabled .Values.tls.clientCA.enabled }}
{{- fail "mode: cluster does not take tls.enabled (nor tls.clientCA) yet: replicas forward to each other's pod IP, which no certificate of the chart names (docs/deploy.md, Cluster mode)" }}
{{- end }}
{{- if eq (include "harness-gateway.routerBackend" .) "nats" }}
{{- fail "network.router.backend: nats needs mode: network; a cluster joins no Router (docs/design/cluster.md §12.3)" }}
{{- end }}
{{- $hpa := .Values.cluster.autoscaling }}
{{- if and $hpa.enabled (gt (int $hpa.minReplicas) (int $hpa.maxReplicas)) }}
{{- fail (printf "cluster.autoscaling.minReplicas %v is above maxReplicas %v" $hpa.minReplicas $hpa.maxReplicas) }}
{{- end }}
{{- end }}

{{/* The cluster's key files, each from its own Secret, in one volume at /etc/harness/keys:
seed-key, and registry-key for the replicas (the migration Job needs only the seed key).
Mode 0440 with the pod's fsGroup, as the tokens. (dict "context" $ "registry" true) */}}
{{- define "harness-gateway.clusterKeysVolume" -}}
{{- $cluster := .context.Values.cluster -}}
- name: keys
  projected:
    defaultMode: 0440
    sources:
      - secret:
          name: {{ $cluster.seedKey.existingSecret }}
          items:
            - key: {{ $cluster.seedKey.key }}
              path: seed-key
      {{- if .registry }}
      - secret:
          name: {{ include "harness-gateway.registryKeySecret" .context }}
          items:
            - key: {{ $cluster.registryKey.key }}
              path: registry-key
      {{- end }}
{{- end }}