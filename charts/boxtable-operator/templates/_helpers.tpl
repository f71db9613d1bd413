{{/*
Names and labels shared by every template.
*/}}

{{/* The chart's name, or nameOverride. */}}
{{- define "boxtable-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The base name of every object: fullnameOverride, else the release name when it already contains
the chart's name (release `boxtable-operator` gives the names of deploy/), else
`<release>-<chart name>`.
*/}}
{{- define "boxtable-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "boxtable-operator.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "boxtable-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "boxtable-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the operator's pods (the same as deploy/; immutable once installed). */}}
{{- define "boxtable-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "boxtable-operator.name" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{/*
The labels of every object: what deploy/ sets, Helm's own (chart, managed-by, instance, version),
and commonLabels. Call with (dict "root" $ "component" "controller"); an empty component leaves
out the name and component labels (the CRD has neither in deploy/).
*/}}
{{- define "boxtable-operator.labels" -}}
{{- $root := .root -}}
{{- if .component -}}
app.kubernetes.io/name: {{ include "boxtable-operator.name" $root }}
app.kubernetes.io/component: {{ .component }}
{{ end -}}
app.kubernetes.io/part-of: boxtable-operator
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/* `annotations:` of an object's metadata, from commonAnnotations and `extra` (a map), with a
leading newline and indented for metadata; nothing when there are none. Use right after labels:
`{{- include "boxtable-operator.annotations" (dict "root" $) }}`. */}}
{{- define "boxtable-operator.annotations" -}}
{{- $all := merge (dict) (.extra | default dict) (.root.Values.commonAnnotations | default dict) -}}
{{- with $all -}}
{{- printf "annotations:\n%s" (toYaml . | indent 2) | nindent 2 -}}
{{- end -}}
{{- end -}}

{{/* The operator's image: repository@digest when a digest is given, else repository:tag. */}}
{{- define "boxtable-operator.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the operator takes the leader-election Lease: leaderElection.enabled, or when
unset, whenever more than one replica runs. */}}
{{- define "boxtable-operator.leaderElection" -}}
{{- if kindIs "invalid" .Values.leaderElection.enabled -}}
{{- gt (int .Values.replicas) 1 -}}
{{- else -}}
{{- .Values.leaderElection.enabled -}}
{{- end -}}
{{- end -}}

{{/* The rules the operator needs in every namespace it watches (deploy/README.md ties each to
the call that needs it). */}}
{{- define "boxtable-operator.watchRules" -}}
# Watch BoxTables; add and remove the brighter.dev/cleanup finalizer (JSON patch).
- apiGroups: ["brighter.dev"]
  resources: ["boxtables"]
  verbs: ["get", "list", "watch", "patch"]
# Write status with server-side apply.
- apiGroups: ["brighter.dev"]
  resources: ["boxtables/status"]
  verbs: ["patch"]
# Watch Secrets' metadata for rotation (list, watch); read a referenced Secret with a list by
# name (never a get); keep a drop.brighter.dev/<uid> finalizer on it while a Drop BoxTable needs
# it (metadata-only patch).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["list", "watch", "patch"]
# Publish an events.k8s.io/v1 event on each transition (one create each; never updated).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create"]
{{- end -}}
