{{/*
mesh-cni.migrateFrom is migrateFrom, checked: the takeover replaces the
other plugin's entry in the primary's own list, in the write that adds
mesh-cni's, so it needs inline chaining.
*/}}
{{- define "mesh-cni.migrateFrom" -}}
{{- $m := .Values.migrateFrom | default "" }}
{{- if $m }}
{{- $s := include "mesh-cni.settings" . | fromJson }}
{{- if or (not $s.chained) .Values.cni.subdirChaining }}
{{- fail (printf "migrateFrom=%s needs cni.chained=true and cni.subdirChaining=false: mesh-cni takes over %s's entry in the primary's plugin list, in the write that adds its own" $m $m) }}
{{- end }}
{{- end }}
{{- $m }}
{{- end }}
