{{/* Names, labels and small computed values shared by the templates. */}}

{{- define "servegate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "servegate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "servegate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "servegate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "servegate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "servegate.labels" -}}
helm.sh/chart: {{ include "servegate.chart" . }}
{{ include "servegate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: servegate
{{- end }}

{{- define "servegate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "servegate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "servegate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The namespace of the API-key Secrets: gateway.auth.keysNamespace, else the release namespace. */}}
{{- define "servegate.keysNamespace" -}}
{{- default .Release.Namespace .Values.gateway.auth.keysNamespace }}
{{- end }}

{{/* The configuration file: .Values.gateway as it is (the same schema as `servegate serve --config`). */}}
{{/* The gateway configuration: values.gateway without the chart-only gateway.tls.secretName, which becomes the mounted
     Secret's files. */}}
{{- define "servegate.config" -}}
{{- $g := deepCopy .Values.gateway }}
{{- if $g.tls.secretName }}
{{- $_ := set $g.tls "certFile" "/etc/servegate-tls/tls.crt" }}
{{- $_ := set $g.tls "keyFile" "/etc/servegate-tls/tls.key" }}
{{- end }}
{{- $_ := unset $g.tls "secretName" }}
{{- if .Values.rbac.projectNamespaceKeys }}
{{- $_ := set $g.auth "projectNamespaceKeys" true }}
{{- else if and $g.auth.projectNamespaceKeys .Values.rbac.create }}
{{- fail "gateway.auth.projectNamespaceKeys needs Secret access in the project namespaces: set rbac.projectNamespaceKeys: true instead (it sets both)" }}
{{- end }}
{{- $_ := set $g.kubernetes.leaderElection "leaseName" (include "servegate.leaseName" .) }}
{{ toYaml $g }}
{{- end }}

{{/*
The Lease of leader election. The default name (servegate-controller) becomes <fullname>-controller, so that two
releases in one namespace elect a status writer each instead of one for both (the other release's deployments then got
no status at all); the release named servegate keeps servegate-controller. Any other name is used as written.
*/}}
{{- define "servegate.leaseName" -}}
{{- $l := .Values.gateway.kubernetes.leaderElection.leaseName -}}
{{- if eq $l "servegate-controller" -}}
{{- printf "%s-controller" (include "servegate.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $l -}}
{{- end -}}
{{- end }}

{{/* Whole seconds the pod may take to stop: preStop sleep + drain + 5 s for the process to exit. */}}
{{- define "servegate.terminationGracePeriodSeconds" -}}
{{- add (int .Values.preStopSleepSeconds) (int (ceil .Values.gateway.shutdown.drainSeconds)) 5 }}
{{- end }}

{{- define "servegate.replicasAboveOne" -}}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{/* The public host: an explicit one, else the host of gateway.publicUrl, else "". */}}
{{- define "servegate.publicHost" -}}
{{- if .explicit }}{{ .explicit }}{{- else if .root.Values.gateway.publicUrl }}{{ (urlParse .root.Values.gateway.publicUrl).hostname }}{{- end }}
{{- end }}

{{/* True when the gateway listener speaks https (a mounted Secret or files). */}}
{{- define "servegate.tlsOn" -}}
{{- if or .Values.gateway.tls.secretName .Values.gateway.tls.certFile }}true{{ end }}
{{- end }}

{{/*
V8's old-space limit in MiB: heapPercentOfMemoryLimit of resources.limits.memory (Ki, Mi, Gi, Ti, K, M, G, T or
bytes; decimals too), so that the heap fits the container instead of V8's default, which does not know the limit. Empty when
there is no memory limit or the percentage is 0.
*/}}
{{- define "servegate.maxOldSpaceMb" -}}
{{- $limit := "" -}}
{{- with .Values.resources -}}{{- with .limits -}}{{- with .memory -}}{{- $limit = toString . -}}{{- end -}}{{- end -}}{{- end -}}
{{- $pct := int (.Values.heapPercentOfMemoryLimit | default 0) -}}
{{- if and $limit (gt $pct 0) -}}
{{- $units := dict "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "K" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 -}}
{{- $num := regexFind "^[0-9]+([.][0-9]+)?" $limit -}}
{{- $unit := trimPrefix $num $limit -}}
{{- if not (or (eq $unit "") (hasKey $units $unit)) -}}
{{- fail (printf "resources.limits.memory %q: use a number with Ki, Mi, Gi, Ti, K, M, G or T, or bytes (heapPercentOfMemoryLimit reads it)" $limit) -}}
{{- end -}}
{{- $bytes := mulf (float64 $num) (float64 (get $units $unit | default 1)) -}}
{{- $mb := int64 (divf (mulf $bytes $pct) 104857600.0) -}}
{{- max $mb 64 -}}
{{- end -}}
{{- end -}}

{{/*
Kubernetes 1.28 or newer (the CRD's validation rules use CEL). Checked here rather than by Chart.yaml's kubeVersion:
helm refuses any kubeVersion constraint against an API server built from source without version stamps
(v0.0.0-master+...), which is what such a server reports; that one is let through.
*/}}
{{- define "servegate.checkKubeVersion" -}}
{{- $v := .Capabilities.KubeVersion.Version -}}
{{- if and (not (hasPrefix "v0.0.0" $v)) (semverCompare "<1.28.0-0" $v) -}}
{{- fail (printf "servegate needs Kubernetes 1.28 or newer (its CustomResourceDefinition's validation rules use CEL); this cluster reports %s" $v) -}}
{{- end -}}
{{- end -}}
