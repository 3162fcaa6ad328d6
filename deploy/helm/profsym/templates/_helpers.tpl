{{- define "profsym.labels" -}}
app.kubernetes.io/part-of: profsym
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "profsym.image" -}}
{{ .root.Values.images.registry }}/{{ .name }}:{{ .root.Values.images.tag }}
{{- end -}}

{{- define "profsym.scheme" -}}
{{ if .Values.tls.enabled }}https{{ else }}http{{ end }}
{{- end -}}

{{- define "profsym.spread" -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        app.kubernetes.io/name: {{ . }}
    matchLabelKeys: [pod-template-hash]
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        app.kubernetes.io/name: {{ . }}
    matchLabelKeys: [pod-template-hash]
{{- end -}}

{{- define "profsym.restricted" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
