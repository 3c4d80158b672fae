{{/*
Base name of every object: fullnameOverride, else the chart name (workload-resizer).
Truncated so that "<fullname>-reconciler" stays a valid 63-character DNS label.
*/}}
{{- define "wr.fullname" -}}
{{- default .Chart.Name .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "wr.webhookName" -}}{{ include "wr.fullname" . }}-webhook{{- end -}}
{{- define "wr.reconcilerName" -}}{{ include "wr.fullname" . }}-reconciler{{- end -}}
{{- define "wr.tlsSecretName" -}}{{ include "wr.fullname" . }}-webhook-tls{{- end -}}

{{- define "wr.configName" -}}
{{- default (printf "%s-config" (include "wr.fullname" .)) .Values.config.name -}}
{{- end -}}

{{- define "wr.leaseName" -}}
{{- default (include "wr.reconcilerName" .) .Values.reconciler.leaderElection.id -}}
{{- end -}}

{{- define "wr.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{- define "wr.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: workload-resizer
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "webhook") */}}
{{- define "wr.selectorLabels" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "wr.componentLabels" -}}
{{ include "wr.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Default affinity: prefer one replica per node. (dict "ctx" $ "component" "webhook") */}}
{{- define "wr.defaultAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "wr.selectorLabels" . | nindent 12 }}
{{- end -}}

{{/* DNS names of the webhook Service. */}}
{{- define "wr.webhookDNSNames" -}}
{{- $svc := include "wr.webhookName" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}

{{/*
tls.mode=helm: the CA and serving certificate, as a dict (ca.crt, tls.crt, tls.key),
generated once per render (cached in .Values so the Secret and the webhook
configuration agree) and taken over from the existing Secret on upgrade.
*/}}
{{- define "wr.helmTLS" -}}
{{- if not (hasKey .Values "__wrGeneratedTLS") -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "wr.tlsSecretName" .) -}}
{{- $data := dict -}}
{{- if and $existing (hasKey ($existing.data | default dict) "ca.crt") (hasKey $existing.data "tls.crt") (hasKey $existing.data "tls.key") -}}
{{- $data = dict "ca.crt" (index $existing.data "ca.crt" | b64dec) "tls.crt" (index $existing.data "tls.crt" | b64dec) "tls.key" (index $existing.data "tls.key" | b64dec) -}}
{{- else -}}
{{- $days := int .Values.tls.helm.validityDays -}}
{{- $ca := genCA (printf "%s-ca" (include "wr.fullname" .)) $days -}}
{{- $names := include "wr.webhookDNSNames" . | fromJsonArray -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" (include "wr.webhookName" .) .Release.Namespace) nil $names $days $ca -}}
{{- $data = dict "ca.crt" $ca.Cert "tls.crt" $cert.Cert "tls.key" $cert.Key -}}
{{- end -}}
{{- $_ := set .Values "__wrGeneratedTLS" $data -}}
{{- end -}}
{{- toJson (get .Values "__wrGeneratedTLS") -}}
{{- end -}}

{{/* base64 caBundle for the webhook configuration; empty in certManager mode. */}}
{{- define "wr.caBundle" -}}
{{- if eq .Values.tls.mode "provided" -}}
{{- .Values.tls.provided.caBundle | b64enc -}}
{{- else if eq .Values.tls.mode "helm" -}}
{{- index (include "wr.helmTLS" . | fromJson) "ca.crt" | b64enc -}}
{{- end -}}
{{- end -}}

{{/* Pod-level settings shared by both Deployments: (dict "ctx" $ "component" "webhook" "v" .Values.webhook) */}}
{{- define "wr.podScheduling" -}}
{{- with .v.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
{{- if .v.affinity }}
  {{- toYaml .v.affinity | nindent 2 }}
{{- else }}
  {{- include "wr.defaultAffinity" . | nindent 2 }}
{{- end }}
{{- with .v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Annotations of the `helm test` objects: a failed run's stay for inspection until the next. */}}
{{- define "wr.testHook" -}}
helm.sh/hook: test
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}

{{/* The Secret holding the originals HMAC keys (mounted into both Deployments). */}}
{{- define "wr.originalsKeysSecretName" -}}
{{- .Values.originalsKeys.existingSecret | default (printf "%s-originals-keys" (include "wr.fullname" .)) -}}
{{- end -}}

{{/* The namespace scope (scope.*), one source for both programs and the webhook configuration. */}}
{{- define "wr.excludedNamespaces" -}}
{{- concat (list "kube-system" .Release.Namespace) .Values.scope.excludeNamespaces .Values.webhook.excludeNamespaces | uniq | toJson -}}
{{- end -}}

{{/* scope.namespaceSelector in kubectl syntax, for the --namespace-selector flags. */}}
{{- define "wr.namespaceSelectorText" -}}
{{- $sel := .Values.scope.namespaceSelector -}}
{{- $parts := list -}}
{{- range $key, $value := ($sel.matchLabels | default dict) -}}
{{- $parts = append $parts (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- range ($sel.matchExpressions | default list) -}}
{{- if eq .operator "In" -}}{{- $parts = append $parts (printf "%s in (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "NotIn" -}}{{- $parts = append $parts (printf "%s notin (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "Exists" -}}{{- $parts = append $parts .key -}}
{{- else -}}{{- $parts = append $parts (printf "!%s" .key) -}}
{{- end -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}

{{/* Flags of both programs that set the namespace scope. */}}
{{- define "wr.scopeArgs" -}}
- --exclude-namespaces={{ include "wr.excludedNamespaces" . | fromJsonArray | join "," }}
- {{ printf "--namespace-selector=%s" (include "wr.namespaceSelectorText" .) | quote }}
{{- end -}}

{{/* CEL (ValidatingAdmissionPolicy): true when the request's namespace is in the scope
(scope.*: the excluded names, and the label selector on variables.nsLabels, the labels of
namespaceObject). */}}
{{- define "wr.scopeCEL" -}}
{{- $sel := .Values.scope.namespaceSelector -}}
{{- $labels := "variables.nsLabels" -}}
{{- $terms := list (printf "!(request.namespace in %s)" (include "wr.excludedNamespaces" .)) -}}
{{- range $k, $v := ($sel.matchLabels | default dict) -}}
{{- $terms = append $terms (printf "(%s in %s && %s[%s] == %s)" (toJson $k) $labels $labels (toJson $k) (toJson $v)) -}}
{{- end -}}
{{- range ($sel.matchExpressions | default list) -}}
{{- $k := toJson .key -}}
{{- if eq .operator "In" -}}
{{- $terms = append $terms (printf "(%s in %s && %s[%s] in %s)" $k $labels $labels $k (toJson .values)) -}}
{{- else if eq .operator "NotIn" -}}
{{- $terms = append $terms (printf "(!(%s in %s) || !(%s[%s] in %s))" $k $labels $labels $k (toJson .values)) -}}
{{- else if eq .operator "Exists" -}}
{{- $terms = append $terms (printf "(%s in %s)" $k $labels) -}}
{{- else if eq .operator "DoesNotExist" -}}
{{- $terms = append $terms (printf "!(%s in %s)" $k $labels) -}}
{{- else -}}
{{- fail (printf "scope.namespaceSelector: unsupported operator %q" .operator) -}}
{{- end -}}
{{- end -}}
{{- join " && " $terms -}}

{{- end -}}

{{/* PromQL label matchers (without braces) of the webhook's and the reconciler's scrape targets. */}}
{{- define "wr.webhookSelector" -}}
{{- .Values.monitoring.webhookSelector | default (printf "job=%q" (include "wr.webhookName" .)) -}}
{{- end -}}
{{- define "wr.reconcilerSelector" -}}
{{- .Values.monitoring.reconcilerSelector | default (printf "job=%q" (include "wr.reconcilerName" .)) -}}
{{- end -}}
