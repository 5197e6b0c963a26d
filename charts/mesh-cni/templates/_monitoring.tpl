{{/*
mesh-cni.monitor: for the ServiceMonitor or PodMonitor (list $ "serviceMonitor"
"ServiceMonitor"), "true" when it is enabled and the cluster serves its kind,
"" when it is off or the API is missing (NOTES.txt says so). Enabled with
/metrics on loopback is a mistake no scraper can work around: it fails.
*/}}
{{- define "mesh-cni.monitor" -}}
{{- $ := index . 0 }}{{- $key := index . 1 }}{{- $kind := index . 2 }}
{{- $v := get $.Values $key }}
{{- if $v.enabled }}
{{- if not (include "mesh-cni.metricsSecure" $) }}
{{- fail (printf "%s.enabled needs metrics.bindAddress beyond loopback (e.g. \"\"): Prometheus cannot scrape a node's %s" $key $.Values.metrics.bindAddress) }}
{{- end }}
{{- if $.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $kind) }}true{{ end }}
{{- end }}
{{- end }}

{{/* The endpoint both monitors scrape, with the user's fields merged over it. */}}
{{- define "mesh-cni.monitorEndpoint" -}}
{{- $ := index . 0 }}{{- $v := index . 1 }}{{- $base := index . 2 }}
{{- $e := dict "port" "metrics" "path" "/metrics" "scheme" "https" "tlsConfig" (dict "insecureSkipVerify" (not $.Values.metrics.tlsSecretName)) }}
{{- with $v.interval }}{{ $_ := set $e "interval" . }}{{ end }}
{{- toYaml (list (mergeOverwrite $e $base (deepCopy $v.endpoint))) }}
{{- end }}
