{{- /*
The OpenTelemetry eBPF profiler's Collector configuration (collector.mode otel-ebpf-profiler):
its "profiling" receiver with the profiler's defaults but its sampling frequency, which is
collector.frequency (the profiler's own 20 Hz meets the 100 ms CPU period of CPU-limited
containers at two points only: see collector.frequency), an OTLP/gRPC exporter to the gateway
Service, as profsym's collector reaches it (the same name, port and TLS: the gateway's
certificate is issued for it, and under tls.enabled the collectors' client certificate admits
the profiler too). otelEbpfProfiler.config is merged over it last (maps key by key, lists
replaced).
*/ -}}
{{- define "profsym.otelEbpfProfilerConfigBase" -}}
receivers:
  profiling:
    samples_per_second: {{ int .Values.collector.frequency }}
exporters:
  otlp_grpc:
    endpoint: gateway.{{ .Values.namespaces.services }}.svc:4317
    {{- if .Values.tls.enabled }}
    tls: {ca_file: /etc/profsym/ca/ca.crt, cert_file: /etc/profsym/client/tls.crt, key_file: /etc/profsym/client/tls.key}
    {{- else }}
    tls: {insecure: true}
    {{- end }}
service:
  telemetry:
    logs: {level: info, encoding: json}
    metrics:
      readers:
        - pull: {exporter: {prometheus: {host: 0.0.0.0, port: 8888}}}
  pipelines:
    profiles:
      receivers: [profiling]
      exporters: [otlp_grpc]
{{- end -}}

{{- define "profsym.otelEbpfProfilerConfig" -}}
{{- $cfg := include "profsym.otelEbpfProfilerConfigBase" . | fromYaml -}}
{{- if hasKey $cfg "Error" -}}
{{- fail (printf "otel-ebpf-profiler configuration: %s" $cfg.Error) -}}
{{- end -}}
{{- $cfg = mustMergeOverwrite $cfg (deepCopy (default dict .Values.otelEbpfProfiler.config)) -}}
{{- toYaml $cfg -}}
{{- end -}}
