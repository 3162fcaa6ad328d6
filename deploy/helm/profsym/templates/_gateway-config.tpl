{{- /*
The gateway's OpenTelemetry Collector configuration, built from values. It follows
services/gateway/config/production.yaml (the deploy tests compare the two, see
TestGatewayConfigAgreesWithDistribution) and adds what the chart knows: TLS, the read token,
k8s_attributes, files. gateway.config is merged over it last (maps key by key, lists replaced),
so any Collector setting can be changed or added from values.
*/ -}}
{{- define "profsym.gatewayConfigBase" -}}
{{- $g := .Values.gateway -}}
{{- $tls := .Values.tls.enabled -}}
extensions:
  health_check:
    endpoint: 0.0.0.0:13133
  # Receivers' middleware: InvalidArgument for undecodable OTLP, refusals counted and logged;
  # readiness that follows pushback.
  refusals:
    log_interval: 30s
    readiness: {endpoint: 0.0.0.0:13134, path: /readyz, pushback_window: 10s}
  {{- if $g.otlpGrpcEndpoint }}
  # The exporter's middleware: a downstream outage logged at its start, summarized, and at its end.
  downstream_watch:
    summary_interval: 1m
  file_storage:
    directory: ${env:PROFSYM_GATEWAY_QUEUE_DIR:-/var/lib/profsym-gateway/queue}
    create_directory: true
    fsync: true
  {{- end }}
  {{- if $g.files.enabled }}
  otlp_plain: {}
  {{- end }}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 0.0.0.0:4317
        max_recv_msg_size_mib: 16
        middlewares: [{id: refusals}]
        {{- if $tls }}
        tls: {cert_file: /etc/profsym/tls/tls.crt, key_file: /etc/profsym/tls/tls.key, client_ca_file: /etc/profsym/ca/ca.crt}
        {{- end }}
      http:
        endpoint: 0.0.0.0:4318
        middlewares: [{id: refusals}]
        {{- if $tls }}
        tls: {cert_file: /etc/profsym/tls/tls.crt, key_file: /etc/profsym/tls/tls.key, client_ca_file: /etc/profsym/ca/ca.crt}
        {{- end }}
processors:
  memory_limiter:
    check_interval: 1s
    limit_percentage: 80
    spike_limit_percentage: 20
  {{- if $g.k8sAttributes.enabled }}
  # Matched by the container.id our collector and the eBPF profiler set on each process's
  # resource, or a k8s.pod.uid a sender sets; never by the connection, which is the profiler's.
  k8s_attributes:
    auth_type: serviceAccount
    pod_association:
      - sources: [{from: resource_attribute, name: container.id}]
      - sources: [{from: resource_attribute, name: k8s.pod.uid}]
    extract:
      metadata: [k8s.namespace.name, k8s.pod.name, k8s.pod.uid, k8s.container.name, k8s.node.name, k8s.deployment.name]
  {{- end }}
  symbolize:
    endpoint: {{ include "profsym.scheme" . }}://symbolizer:7070
    {{- if $tls }}
    tls: {ca_file: /etc/profsym/ca/ca.crt}
    {{- end }}
    bearer_token_file: /etc/profsym/read-token/token
    timeout: 2s
    deadline: {{ $g.symbolizeTimeout }}
    # Each binary's lookups go to the replica owning its build ID (docs/design/0006-fleet-scale.md).
    affinity:
      enabled: {{ $g.symbolizeAffinity }}
      dns: symbolizer-headless:7070
      refresh_interval: 10s
      attempt_timeout: 1s
      balance_factor: 1.25
      eject_for: 10s
      give_up_after: 30s
exporters:
  {{- if $g.otlpGrpcEndpoint }}
  otlp_grpc:
    endpoint: ${env:PROFSYM_OTLP_ENDPOINT:-otlp-backend:4317}
    # No ca_file: with one the Collector speaks TLS even when insecure is true. Under tls.enabled
    # the cluster CA is trusted beside the public roots through SSL_CERT_DIR.
    tls:
      insecure: ${env:PROFSYM_OTLP_INSECURE:-false}
    compression: gzip
    middlewares: [{id: downstream_watch}]
    timeout: 30s
    retry_on_failure: {initial_interval: 1s, max_interval: 30s, max_elapsed_time: 0}
    sending_queue:
      storage: file_storage
      num_consumers: 2
      sizer: requests
      queue_size: {{ $g.queue.requests }}
      block_on_overflow: false
  {{- end }}
  {{- if $g.files.enabled }}
  file:
    path: /tmp/profiles/profiles.otlp.pb
    format: proto
    encoding: otlp_plain
    create_directory: true
    rotation: {max_megabytes: {{ $g.files.maxMegabytes }}, max_backups: {{ $g.files.maxBackups }}}
  pprof:
    directory: /tmp/pprof
    keep_files: {{ $g.files.keepFiles }}
  {{- end }}
service:
  extensions:
    - health_check
    - refusals
    {{- if $g.otlpGrpcEndpoint }}
    - downstream_watch
    - file_storage
    {{- end }}
    {{- if $g.files.enabled }}
    - otlp_plain
    {{- end }}
  telemetry:
    logs: {level: info, encoding: json}
    metrics:
      level: normal
      readers:
        - pull: {exporter: {prometheus: {host: 0.0.0.0, port: 8888}}}
  pipelines:
    profiles:
      receivers: [otlp]
      processors:
        - memory_limiter
        {{- if $g.k8sAttributes.enabled }}
        - k8s_attributes
        {{- end }}
        - symbolize
      exporters:
        {{- if $g.otlpGrpcEndpoint }}
        - otlp_grpc
        {{- end }}
        {{- if $g.files.enabled }}
        - file
        - pprof
        {{- end }}
{{- end -}}

{{- define "profsym.gatewayConfig" -}}
{{- $cfg := include "profsym.gatewayConfigBase" . | fromYaml -}}
{{- if hasKey $cfg "Error" -}}
{{- fail (printf "gateway configuration: %s" $cfg.Error) -}}
{{- end -}}
{{- $cfg = mustMergeOverwrite $cfg (deepCopy (default dict .Values.gateway.config)) -}}
{{- toYaml $cfg -}}
{{- end -}}
