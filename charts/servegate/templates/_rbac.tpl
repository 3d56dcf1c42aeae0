{{/*
The RBAC rules, exactly the tables of docs/rbac.md (test/chart.test.ts compares them).
Keep each rule as plain YAML here; rbac.yaml only places them in (Cluster)Roles.
*/}}

{{/* What the kubernetes source watches and the controller writes, per watched scope. */}}
{{- define "servegate.rbac.watchRules" -}}
- apiGroups: [serving.servegate.dev]
  resources: [servingdeployments]
  verbs: [list, watch]
- apiGroups: [serving.servegate.dev]
  resources: [servingdeployments/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch]
{{- if .Values.rbac.projectNamespaceKeys }}
- apiGroups: [""]
  resources: [secrets]
  verbs: [list, watch]
{{- end }}
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
{{- if .Values.gateway.kubernetes.kserve.enabled }}
- apiGroups: [serving.kserve.io]
  resources: [inferenceservices]
  verbs: [list, watch]
{{- end }}
{{- end }}

{{/* The keys namespace: key Secrets (unless the watch rules there already grant them). */}}
{{- define "servegate.rbac.keyRules" -}}
- apiGroups: [""]
  resources: [secrets]
  verbs: [list, watch]
{{- end }}

{{/* Leader election, in the gateway's own namespace. */}}
{{- define "servegate.rbac.leaderElectionRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{{ include "servegate.leaseName" . | quote }}]
  verbs: [get, update]
{{- end }}
