{{/* Name of the chart, cut to 63 characters. */}}
{{- define "poppyhost.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name of the release's objects. */}}
{{- define "poppyhost.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "poppyhost.selectorLabels" -}}
app.kubernetes.io/name: {{ include "poppyhost.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "poppyhost.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "poppyhost.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "poppyhost.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The host of publicURL, without a port: probes send it as Host. */}}
{{- define "poppyhost.publicHost" -}}
{{- $u := urlParse (required "publicURL is required, e.g. https://poppyhost.example" .Values.publicURL) -}}
{{- regexReplaceAll ":[0-9]+$" $u.host "" | lower -}}
{{- end -}}

{{- define "poppyhost.tlsMode" -}}
{{- if eq .Values.tls.mode "certificate" -}}certificate{{- else if eq .Values.tls.mode "proxy" -}}proxy{{- else -}}{{- fail "tls.mode must be certificate or proxy" -}}{{- end -}}
{{- end -}}

{{/* Port name and scheme the pods serve: https with a certificate, http behind a proxy. */}}
{{- define "poppyhost.portName" -}}
{{- if eq (include "poppyhost.tlsMode" .) "certificate" -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{- define "poppyhost.servicePort" -}}
{{- if .Values.service.port -}}{{ .Values.service.port }}{{- else if eq (include "poppyhost.tlsMode" .) "certificate" -}}443{{- else -}}80{{- end -}}
{{- end -}}

{{/* The port the server listens on inside the pod. */}}
{{- define "poppyhost.containerPort" -}}8443{{- end -}}

{{/* The operations listener (POPPYHOST_OPS_ADDR): /healthz, /readyz and
/metrics over plain HTTP, for probes and Prometheus only. */}}
{{- define "poppyhost.opsPort" -}}9090{{- end -}}

{{/* Pod-level security context, shared by the server and the migration Job. */}}
{{- define "poppyhost.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container-level security context, shared likewise. */}}
{{- define "poppyhost.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* POPPYHOST_DATABASE_URL from the existing Secret. */}}
{{- define "poppyhost.databaseEnv" -}}
- name: POPPYHOST_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "database.existingSecret is required: a Secret holding the PostgreSQL URL" .Values.database.existingSecret }}
      key: {{ .Values.database.key }}
- name: POPPYHOST_KEKS
  valueFrom:
    secretKeyRef:
      name: {{ required "keks.existingSecret is required: a Secret holding the key-encryption keys" .Values.keks.existingSecret }}
      key: {{ .Values.keks.key }}
{{- end -}}
