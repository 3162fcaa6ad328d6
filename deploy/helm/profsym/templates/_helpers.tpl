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

{{- /* Node affinity to the architectures in .Values.architectures (kubernetes.io/arch): the
images are built for amd64 and arm64, and a node of another architecture is never tried, where
the pod could only crash-loop. */ -}}
{{- define "profsym.affinity" -}}
{{- $archs := .Values.architectures -}}
{{- if not $archs }}
{{- fail "architectures must list the node architectures to run on (kubernetes.io/arch): amd64, arm64 or both" }}
{{- end }}
{{- range $archs }}
{{- if not (has . (list "amd64" "arm64")) }}
{{- fail (printf "architectures: %q has no image: profsym's images are built for amd64 and arm64" .) }}
{{- end }}
{{- end -}}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - key: kubernetes.io/arch
              operator: In
              values: {{ toJson $archs }}
{{- end -}}
