{{/* The image reference of an image value: repository:tag[@digest], the tag defaulting to the chart's appVersion. */}}
{{- define "coxswain.imageRef" -}}
{{- $tag := .image.tag | default .appVersion -}}
{{- $ref := printf "%s:%s" .image.repository $tag -}}
{{- if .image.digest -}}{{- $ref = printf "%s@%s" $ref .image.digest -}}{{- end -}}
{{- $ref -}}
{{- end -}}

{{/* The operator's image. */}}
{{- define "coxswain.image" -}}
{{- include "coxswain.imageRef" (dict "image" .Values.image "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{/* The proxy's image. */}}
{{- define "coxswain.proxyImage" -}}
{{- include "coxswain.imageRef" (dict "image" .Values.proxy.image "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{/* The CA mode as the operator spells it (Auto or External); cert-manager needs External. */}}
{{- define "coxswain.caMode" -}}
{{- $mode := lower (toString .Values.discovery.ca.mode) -}}
{{- if not (has $mode (list "auto" "external")) -}}
{{- fail (printf "discovery.ca.mode is auto or external, not %q" .Values.discovery.ca.mode) -}}
{{- end -}}
{{- if and .Values.discovery.ca.certManager.enabled (ne $mode "external") -}}
{{- fail "discovery.ca.certManager.enabled needs discovery.ca.mode=external: cert-manager authors the CA the operator consumes" -}}
{{- end -}}
{{- if eq $mode "auto" -}}Auto{{- else -}}External{{- end -}}
{{- end -}}

{{/* The in-cluster name of the discovery Service. */}}
{{- define "coxswain.discoveryHost" -}}
coxswain-discovery.{{ .Release.Namespace }}.svc
{{- end -}}
