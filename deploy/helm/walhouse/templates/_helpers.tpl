{{/* Names and the parts every workload shares. */}}
{{- define "walhouse.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "walhouse.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "walhouse.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "walhouse.secretName" -}}
{{- default (printf "%s-secrets" (include "walhouse.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* walhouse.hasSecret (dict "root" $ "key" "pg-password" "value" .Values.secrets.pgPassword) */}}
{{- define "walhouse.hasSecret" -}}
{{- if or .value (has .key .root.Values.secrets.existingSecretKeys) -}}true{{- end -}}
{{- end -}}

{{/* The --*-file flags of the secrets a component may use. */}}
{{- define "walhouse.secretArgs" -}}
{{- $r := .root -}}
{{- $s := $r.Values.secrets -}}
{{- range $flag, $v := .flags }}
{{- if include "walhouse.hasSecret" (dict "root" $r "key" (index $v 0) "value" (index $s (index $v 1))) }}
- --{{ $flag }}=/etc/walhouse/secrets/{{ index $v 0 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Pod parts shared by every component. */}}
{{- define "walhouse.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
volumes:
  - name: secrets
    secret:
      secretName: {{ include "walhouse.secretName" . }}
      defaultMode: 0440
      optional: true
{{- with .Values.tls.caSecret }}
  - name: tls-ca
    secret:
      secretName: {{ . }}
      defaultMode: 0444
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
{{- end -}}

{{/* Container parts shared by every component. */}}
{{- define "walhouse.containerCommon" -}}
image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
imagePullPolicy: {{ .Values.image.pullPolicy }}
envFrom:
  - configMapRef:
      name: {{ include "walhouse.fullname" . }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: secrets
    mountPath: /etc/walhouse/secrets
    readOnly: true
{{- if .Values.tls.caSecret }}
  - name: tls-ca
    mountPath: /etc/walhouse/tls
    readOnly: true
{{- end }}
{{- end -}}

{{/* Liveness on /healthz, readiness on /readyz, of the named port. */}}
{{- define "walhouse.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  {{- toYaml .root.Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet: {path: /readyz, port: {{ .port }}}
  {{- toYaml .root.Values.probes.readiness | nindent 2 }}
startupProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  {{- toYaml .root.Values.probes.startup | nindent 2 }}
{{- end -}}
