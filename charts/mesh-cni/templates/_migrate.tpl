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

{{/*
mesh-cni.handBackTo is handBackTo, checked: mesh-cni's entry and the other
plugin's live in the primary's one list, and it cannot go together with
migrateFrom (one takes the other's entry out, the other takes ours out).
*/}}
{{- define "mesh-cni.handBackTo" -}}
{{- $h := .Values.handBackTo | default "" }}
{{- if $h }}
{{- if .Values.migrateFrom }}
{{- fail (printf "handBackTo=%s and migrateFrom=%s: set one (migrateFrom takes the other plugin's entry out, handBackTo takes mesh-cni's out)" $h .Values.migrateFrom) }}
{{- end }}
{{- $s := include "mesh-cni.settings" . | fromJson }}
{{- if or (not $s.chained) .Values.cni.subdirChaining }}
{{- fail (printf "handBackTo=%s needs cni.chained=true and cni.subdirChaining=false: mesh-cni takes its entry out of the primary's plugin list, where %s's is" $h $h) }}
{{- end }}
{{- end }}
{{- $h }}
{{- end }}
