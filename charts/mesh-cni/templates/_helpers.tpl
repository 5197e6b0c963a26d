{{/*
Names and labels.
*/}}
{{- define "mesh-cni.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mesh-cni.fullname" -}}
{{- if .Values.linkerdCompat }}
{{- /* linkerd check reads the DaemonSet, ServiceAccount, ClusterRole and
ClusterRoleBinding by this name (templates/linkerd-compat.yaml). */}}
{{- "linkerd-cni" }}
{{- else if .Values.fullnameOverride }}
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

{{- define "mesh-cni.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mesh-cni.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* host:port for a listen address; IPv6 bracketed, "" = every address. */}}
{{- define "mesh-cni.hostPort" -}}
{{- $h := index . 0 | toString }}{{- $p := index . 1 }}
{{- if contains ":" $h }}[{{ $h }}]:{{ $p }}{{ else }}{{ $h }}:{{ $p }}{{ end }}
{{- end }}

{{/* "true" when /metrics listens beyond loopback (then the metrics-proxy
container serves it as HTTPS, each request authenticated and authorized
through the API server), else "". The agent decides the same way
(internal/agent.Loopback) and refuses a --metrics-addr beyond loopback. */}}
{{- define "mesh-cni.metricsSecure" -}}
{{- $h := .Values.metrics.bindAddress | toString }}
{{- if not (or (eq $h "localhost") (eq $h "::1") (hasPrefix "127." $h)) }}true{{ end }}
{{- end }}

{{/* The agent's loopback metrics port behind the metrics proxy:
metrics.internalPort, 0 meaning metrics.port + 1. Not metrics.port itself
nor probes.port: with host networking they would clash on the node. */}}
{{- define "mesh-cni.metricsInternalPort" -}}
{{- $m := .Values.metrics }}
{{- $p := int (default (add1 (int $m.port)) $m.internalPort) }}
{{- if or (eq $p (int $m.port)) (eq $p (int .Values.probes.port)) (gt $p 65535) }}
{{- fail (printf "metrics.internalPort=%d (the agent's loopback metrics behind the proxy) must differ from metrics.port and probes.port and be at most 65535" $p) }}
{{- end }}
{{- $p }}
{{- end }}

{{/* The plugin's own ServiceAccount: get pods, nothing else. */}}
{{- define "mesh-cni.pluginServiceAccountName" -}}
{{- default (printf "%s-plugin" (include "mesh-cni.fullname" .) | trunc 63 | trimSuffix "-") .Values.pluginServiceAccount.name }}
{{- end }}

{{/* Selector labels: only name and instance, so they never change on upgrade. */}}
{{- define "mesh-cni.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mesh-cni.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mesh-cni.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "mesh-cni.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: node-agent
app.kubernetes.io/part-of: mesh-cni
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- if .Values.linkerdCompat }}
k8s-app: linkerd-cni
{{- end }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "mesh-cni.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
Platform presets: what each platform sets when the value is not given
(conventions: docs/platforms in README.md).
*/}}
{{- define "mesh-cni.presets" -}}
gke:
  binDir: /home/kubernetes/bin
  resourceQuota: true
openshift:
  binDir: /var/lib/cni/bin
  confDir: /etc/cni/multus/net.d
  chained: false
  confFileName: mesh-cni.conflist
  scc: true
  nad: true
  seLinuxType: spc_t
  # Pods run under a UID from the namespace's range, not Istio's 1337:
  # only the spec tells the proxy's UID.
  istioTrustAnnotations: false
k3s:
  binDir: /var/lib/rancher/k3s/data/cni
  confDir: /var/lib/rancher/k3s/agent/etc/cni/net.d
microk8s:
  binDir: /var/snap/microk8s/current/opt/cni/bin
  confDir: /var/snap/microk8s/current/args/cni-network
eks: {}
aks: {}
talos: {}
# k3s in Docker: the k3s image's dirs (k3s >= 1.29.15, 1.30.11, 1.31.7,
# 1.32.3: k3s-io/k3s#11790; older images: /bin, set cni.binDir).
k3d:
  binDir: /var/lib/rancher/k3s/data/cni
  confDir: /var/lib/rancher/k3s/agent/etc/cni/net.d
# Inside the minikube VM or node container (kicbase containerd.toml).
minikube: {}
# k3s on the VM's own containerd or cri-dockerd, both configured with the
# Alpine cni-plugins dir (rancher-desktop k3s-containerd-config.toml).
rancher-desktop:
  binDir: /usr/libexec/cni
  confDir: /etc/cni/net.d
{{- end }}

{{/*
mesh-cni.settings resolves every setting once: an explicit value wins, then
the linkerd2-cni name of the same setting, then the platform preset, then the
default. Templates read it with `include "mesh-cni.settings" . | fromJson`.
*/}}
{{- define "mesh-cni.settings" -}}
{{- $v := .Values }}
{{- $presets := include "mesh-cni.presets" . | fromYaml }}
{{- $p := dict }}
{{- if $v.platform }}
{{- if not (hasKey $presets $v.platform) }}
{{- fail (printf "platform: unknown preset %q; use one of: gke, openshift, k3s, microk8s, eks, aks, talos, k3d, minikube, rancher-desktop" $v.platform) }}
{{- end }}
{{- $p = get $presets $v.platform }}
{{- end }}
{{- $s := dict "platform" $v.platform }}

{{- /* CNI dirs: cni.* > destCNI*Dir (linkerd2-cni) > preset > default. */}}
{{- $bin := $v.cni.binDir }}
{{- if and $v.destCNIBinDir $bin (ne $bin $v.destCNIBinDir) }}
{{- fail (printf "cni.binDir=%q and destCNIBinDir=%q disagree; set only one" $bin $v.destCNIBinDir) }}
{{- end }}
{{- $_ := set $s "binDir" (coalesce $bin $v.destCNIBinDir $p.binDir "/opt/cni/bin") }}
{{- $conf := $v.cni.confDir }}
{{- if and $v.destCNINetDir $conf (ne $conf $v.destCNINetDir) }}
{{- fail (printf "cni.confDir=%q and destCNINetDir=%q disagree; set only one" $conf $v.destCNINetDir) }}
{{- end }}
{{- $_ := set $s "confDir" (coalesce $conf $v.destCNINetDir $p.confDir "/etc/cni/net.d") }}
{{- range $k := list "binDir" "confDir" }}
{{- if not (hasPrefix "/" (get $s $k)) }}
{{- fail (printf "cni.%s=%q must be an absolute host path" $k (get $s $k)) }}
{{- end }}
{{- end }}
{{- range $k := list "stateDir" "runDir" }}
{{- if not (hasPrefix "/" (get $v $k)) }}
{{- fail (printf "%s=%q must be an absolute host path" $k (get $v $k)) }}
{{- end }}
{{- end }}
{{- $_ := set $s "confFileName" (coalesce $v.cni.confFileName $p.confFileName "") }}
{{- if kindIs "bool" $v.cni.chained }}
{{- $_ := set $s "chained" $v.cni.chained }}
{{- else if hasKey $p "chained" }}
{{- $_ := set $s "chained" $p.chained }}
{{- else }}
{{- $_ := set $s "chained" true }}
{{- end }}
{{- if and (not $s.chained) $v.cni.subdirChaining }}
{{- fail "cni.subdirChaining=true needs cni.chained=true: a standalone config has no chain to join" }}
{{- end }}
{{- if and (not $s.chained) (not $s.confFileName) }}
{{- fail "cni.chained=false needs cni.confFileName: the name of the standalone config file to write" }}
{{- end }}

{{- /* Backend and IPv6: the linkerd2-cni names, when given, set them. Left
null, the key stays out of the chain entry and takes its default
(docs/configuration.md). */}}
{{- $backend := $v.backend }}
{{- if hasKey $v "iptablesMode" }}
{{- $mapped := get (dict "nft" "iptables-nft" "legacy" "iptables-legacy" "plain" "auto") (toString $v.iptablesMode) }}
{{- if not $mapped }}
{{- fail (printf "iptablesMode: %q is not one of nft, legacy, plain" (toString $v.iptablesMode)) }}
{{- end }}
{{- if and $backend (ne $backend $mapped) }}
{{- fail (printf "backend=%q and iptablesMode=%q disagree; set only one" $backend $v.iptablesMode) }}
{{- end }}
{{- $backend = $mapped }}
{{- end }}
{{- $_ := set $s "backend" $backend }}
{{- $ipv6 := $v.ipv6 }}
{{- if hasKey $v "disableIPv6" }}
{{- $ipv6 = not $v.disableIPv6 }}
{{- end }}
{{- $_ := set $s "ipv6" $ipv6 }}

{{- /* Repair: repairController.enabled (linkerd2-cni) replaces the default. */}}
{{- $repair := $v.repair.enabled }}
{{- if and (hasKey $v "repairController") (hasKey $v.repairController "enabled") }}
{{- $repair = $v.repairController.enabled }}
{{- end }}
{{- $_ := set $s "repair" $repair }}
{{- if and $repair (not $v.rbac.create) }}
{{- fail "repair.enabled=true needs rbac.create=true: the repair controller must be granted evict/delete/patch on pods and events; set repair.enabled=false or rbac.create=true" }}
{{- end }}
{{- if and $v.startupTaint.enabled (not $v.rbac.create) }}
{{- fail "startupTaint.enabled=true needs rbac.create=true: removing the taint needs patch on nodes" }}
{{- end }}
{{- if and $v.startupTaint.enabled (not $v.startupTaint.key) }}
{{- fail "startupTaint.enabled=true needs startupTaint.key" }}
{{- end }}
{{- if eq (int $v.probes.port) (int $v.metrics.port) }}
{{- fail (printf "probes.port and metrics.port are both %v; they need different ports" $v.probes.port) }}
{{- end }}

{{- /* Extras the presets switch on. */}}
{{- $_ := set $s "resourceQuota" (ternary $v.resourceQuota.enabled (default false $p.resourceQuota) (kindIs "bool" $v.resourceQuota.enabled)) }}
{{- $_ := set $s "scc" (ternary $v.openshift.scc.enabled (default false $p.scc) (kindIs "bool" $v.openshift.scc.enabled)) }}
{{- $_ := set $s "nad" (ternary $v.openshift.networkAttachmentDefinition.enabled (default false $p.nad) (kindIs "bool" $v.openshift.networkAttachmentDefinition.enabled)) }}
{{- if and $s.nad $s.chained }}
{{- fail "openshift.networkAttachmentDefinition.enabled=true needs cni.chained=false: Multus attaches mesh-cni as its own network" }}
{{- end }}
{{- $se := deepCopy (default dict $v.seLinuxOptions) }}
{{- if and (not $se.type) $p.seLinuxType }}
{{- $_ := set $se "type" $p.seLinuxType }}
{{- end }}
{{- $_ := set $s "seLinuxOptions" $se }}

{{- /* Resources: the linkerd2-cni form {cpu: {request, limit}, ...}, when it
has any value, replaces requests/limits. */}}
{{- $conv := dict }}
{{- range $k := list "cpu" "memory" "ephemeral-storage" }}
{{- $r := get $v.resources $k }}
{{- if $r }}
{{- if $r.request }}{{ $_ := set $conv "requests" (merge (default dict $conv.requests) (dict $k $r.request)) }}{{ end }}
{{- if $r.limit }}{{ $_ := set $conv "limits" (merge (default dict $conv.limits) (dict $k $r.limit)) }}{{ end }}
{{- end }}
{{- end }}
{{- $res := omit $v.resources "cpu" "memory" "ephemeral-storage" }}
{{- if $conv }}
{{- $res = $conv }}
{{- end }}
{{- $_ := set $s "resources" $res }}

{{- /* Affinity: nodeAffinity (linkerd2-cni) fills in affinity.nodeAffinity. */}}
{{- $aff := deepCopy (default dict $v.affinity) }}
{{- if and $v.nodeAffinity (not $aff.nodeAffinity) }}
{{- $_ := set $aff "nodeAffinity" $v.nodeAffinity }}
{{- end }}
{{- $_ := set $s "affinity" $aff }}
{{- toJson $s }}
{{- end }}

{{/* Ports list from a linkerd2-cni comma string ("4190,4191") or a list. */}}
{{- define "mesh-cni.portList" -}}
{{- $out := list }}
{{- if kindIs "string" . }}
{{- range splitList "," . }}{{ $t := trim . }}{{ if $t }}{{ $out = append $out $t }}{{ end }}{{ end }}
{{- else }}
{{- range . }}{{ $out = append $out (toString .) }}{{ end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
mesh-cni.meshes renders the plugin's "meshes" object: each profile given in
the values, with its null and "" keys left out (the profile's default
applies; the defaults live in the plugin, docs/configuration.md), and the
linkerd2-cni proxy values folded into linkerd. A list, even [], is passed as
is: [] clears a profile's default list, as in the plugin. List items
become strings (ports are "4190" in the plugin); numbers are written as
integers. Nothing here knows a key: the schema, generated from the
plugin's type, checks them.
*/}}
{{- define "mesh-cni.meshes" -}}
{{- $v := .Values }}
{{- $out := dict }}
{{- range $name, $m := $v.meshes }}
{{- $c := dict }}
{{- range $k, $x := $m }}
{{- if kindIs "invalid" $x }}
{{- else if kindIs "slice" $x }}
{{- $l := list }}{{ range $x }}{{ $l = append $l (toString .) }}{{ end }}
{{- $_ := set $c $k $l }}
{{- else if kindIs "string" $x }}
{{- if $x }}{{ $_ := set $c $k $x }}{{ end }}
{{- else if kindIs "float64" $x }}
{{- $_ := set $c $k (int64 $x) }}
{{- else }}
{{- $_ := set $c $k $x }}
{{- end }}
{{- end }}
{{- $_ := set $out $name $c }}
{{- end }}
{{- /* A platform fact, not a default: on OpenShift pods run under UIDs from
their namespace's range, so only the spec tells Istio's proxy UID. */}}
{{- $p := get (include "mesh-cni.presets" . | fromYaml) (default "" $v.platform) | default dict }}
{{- if hasKey $p "istioTrustAnnotations" }}
{{- $i := default dict $out.istio }}
{{- if not (hasKey $i "trustAnnotations") }}
{{- $_ := set $i "trustAnnotations" $p.istioTrustAnnotations }}
{{- $_ := set $out "istio" $i }}
{{- end }}
{{- end }}
{{- /* linkerd2-cni's values, under their names, set the linkerd profile; its
own chart always lists proxyControlPort and proxyAdminPort before
ignoreInboundPorts. Unset, they are the linkerd profile's ignored inbound
ports (files/profiles.json, generated from internal/mesh): control, then admin. */}}
{{- $l := default dict $out.linkerd }}
{{- range $from, $to := dict "inboundProxyPort" "inboundPort" "outboundProxyPort" "outboundPort" "proxyUID" "proxyUID" "proxyGID" "proxyGID" }}
{{- if hasKey $v $from }}
{{- $x := get $v $from }}
{{- if not (kindIs "invalid" $x) }}
{{- $_ := set $l $to (int64 $x) }}
{{- else }}
{{- $_ := unset $l $to }}
{{- end }}
{{- end }}
{{- end }}
{{- if hasKey $v "ignoreInboundPorts" }}
{{- $lp := (.Files.Get "files/profiles.json" | fromJson).linkerd.ignoreInboundPorts }}
{{- $ports := list (toString (default (index $lp 0) $v.proxyControlPort)) (toString (default (index $lp 1) $v.proxyAdminPort)) }}
{{- $ports = concat $ports (include "mesh-cni.portList" $v.ignoreInboundPorts | fromJsonArray) }}
{{- $_ := set $l "ignoreInboundPorts" $ports }}
{{- end }}
{{- range $k := list "ignoreOutboundPorts" "portsToRedirect" }}
{{- if hasKey $v $k }}
{{- $ports := include "mesh-cni.portList" (get $v $k) | fromJsonArray }}
{{- if $ports }}{{ $_ := set $l $k $ports }}{{ else }}{{ $_ := unset $l $k }}{{ end }}
{{- end }}
{{- end }}
{{- if or $l (hasKey $out "linkerd") }}{{ $_ := set $out "linkerd" $l }}{{ end }}
{{- toJson $out }}
{{- end }}

{{/* Refuse a release namespace other components own (files/shared-namespaces.json,
generated from internal/config SharedNamespaces) unless allowSharedNamespace.
helm lint (neither install nor upgrade) is not refused. */}}
{{- define "mesh-cni.checkNamespace" -}}
{{- if and (or .Release.IsInstall .Release.IsUpgrade) (not .Values.allowSharedNamespace) }}
{{- $shared := .Files.Get "files/shared-namespaces.json" | fromJsonArray }}
{{- if has .Release.Namespace $shared }}
{{- fail (printf "namespace %q belongs to other components (docs/configuration.md#namespaces-the-chart-refuses): whoever may create pods there could run them as the mesh-cni agent, and it would have to admit privileged pods. Install into a namespace of its own (helm install ... -n mesh-cni --create-namespace), or set allowSharedNamespace=true to install here all the same" .Release.Namespace) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The Secret the metrics proxy serves (tls.crt, tls.key), "" for its
self-signed certificate: metrics.tlsSecretName, or with
metrics.certManager.enabled the one cert-manager writes (default
<fullname>-metrics-tls). Beyond loopback only. */}}
{{- define "mesh-cni.metricsTLSSecret" -}}
{{- if include "mesh-cni.metricsSecure" . }}
{{- if .Values.metrics.certManager.enabled }}
{{- default (printf "%s-metrics-tls" (include "mesh-cni.fullname" .) | trunc 63 | trimSuffix "-") .Values.metrics.tlsSecretName }}
{{- else }}
{{- .Values.metrics.tlsSecretName }}
{{- end }}
{{- end }}
{{- end }}

{{/* The DNS name in the metrics certificate cert-manager issues, which
scrapers verify (Prometheus tls_config.server_name): they connect to node
addresses, so the name is an identity, not an address. */}}
{{- define "mesh-cni.metricsServerName" -}}
{{- printf "%s-metrics.%s.svc" (include "mesh-cni.fullname" .) .Release.Namespace }}
{{- end }}
