{{/* Names ------------------------------------------------------------------ */}}

{{- define "kube-reloader.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kube-reloader.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kube-reloader.namespace" -}}
{{- .Values.namespace | default .Release.Namespace -}}
{{- end -}}

{{- define "kube-reloader.serviceAccountName" -}}
{{- if .Values.reloader.serviceAccount.create -}}
{{- default (include "kube-reloader.fullname" .) .Values.reloader.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.reloader.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Labels ----------------------------------------------------------------- */}}

{{- define "kube-reloader.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-reloader.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- with .Values.reloader.matchLabels }}
{{ include "kube-reloader.tplYaml" (dict "value" . "context" $) }}
{{- end }}
{{- end -}}

{{- define "kube-reloader.labels" -}}
{{ include "kube-reloader.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* User-given labels and annotations go through `tpl`, as in Reloader's chart, so a value may
name the release ("{{ .Release.Name }}"). Call with (dict "value" <map> "context" $). */}}
{{- define "kube-reloader.tplYaml" -}}
{{- tpl (toYaml .value) .context -}}
{{- end -}}

{{/* Maps merged left to right (a later key wins) and printed as YAML, after `tpl`: labels from
several values without a duplicate key. Call with (dict "maps" (list ...) "context" $). */}}
{{- define "kube-reloader.mergedMaps" -}}
{{- $out := dict -}}
{{- range .maps }}
{{- with . }}{{- $out = mergeOverwrite $out (include "kube-reloader.tplYaml" (dict "value" . "context" $.context) | fromYaml) -}}{{- end -}}
{{- end -}}
{{- with $out }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* The release annotations Reloader's chart renders on its objects (Helm sets the same ones on
install; rendering them keeps `helm template` output identical to Reloader's). */}}
{{- define "kube-reloader.helmAnnotations" -}}
meta.helm.sh/release-name: {{ .Release.Name | quote }}
meta.helm.sh/release-namespace: {{ .Release.Namespace | quote }}
{{- end -}}

{{/* Image: reloader.deployment.image.name (older Reloader charts) wins over image.repository. */}}
{{- define "kube-reloader.image" -}}
{{- $legacy := .Values.reloader.deployment.image | default dict -}}
{{- if $legacy.name -}}
{{- printf "%s:%s" $legacy.name ($legacy.tag | default .Chart.AppVersion | toString) -}}
{{- else -}}
{{- $repo := .Values.image.repository -}}
{{- with .Values.global.imageRegistry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion | toString) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kube-reloader.imagePullPolicy" -}}
{{- $legacy := .Values.reloader.deployment.image | default dict -}}
{{- $legacy.pullPolicy | default .Values.image.pullPolicy -}}
{{- end -}}

{{/* Pull secrets: names or {name: ...} objects, from global and deployment. */}}
{{- define "kube-reloader.imagePullSecrets" -}}
{{- range $s := concat (.Values.global.imagePullSecrets | default list) (.Values.reloader.deployment.imagePullSecrets | default list) }}
{{- if kindIs "map" $s }}
- name: {{ $s.name }}
{{- else }}
- name: {{ $s }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Mode ------------------------------------------------------------------- */}}

{{/* The replica count actually deployed. */}}
{{- define "kube-reloader.replicas" -}}
{{- .Values.reloader.deployment.replicas | int -}}
{{- end -}}

{{/* "true" when sharding is on: sharding.enabled true, or auto with more than one replica. */}}
{{- define "kube-reloader.sharding" -}}
{{- $mode := .Values.reloader.sharding.enabled | toString -}}
{{- if or (eq $mode "true") (and (eq $mode "auto") (gt (include "kube-reloader.replicas" . | int) 1)) -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when replicas coordinate through Leases (enableHA or sharding). */}}
{{- define "kube-reloader.usesLeases" -}}
{{- if or .Values.reloader.enableHA (include "kube-reloader.sharding" .) -}}
true
{{- end -}}
{{- end -}}

{{/* Watched namespaces when watchGlobally is false, as a JSON list, computed as Reloader's chart
does: the release namespace (or `namespace`), always, plus reloader.namespaces (list or comma
string; trimmed, de-duplicated, sorted). Empty list in global mode. */}}
{{- define "kube-reloader.watchNamespaces" -}}
{{- $clean := list -}}
{{- if not .Values.reloader.watchGlobally -}}
{{- $clean = list (include "kube-reloader.namespace" .) -}}
{{- $ns := .Values.reloader.namespaces | default list -}}
{{- if kindIs "string" $ns -}}{{- $ns = splitList "," $ns -}}{{- end -}}
{{- range $ns -}}
{{- $t := . | toString | trim -}}
{{- if $t -}}{{- $clean = append $clean $t -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $clean | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/* "true" when the cluster serves OpenShift DeploymentConfigs or isOpenshift is set: the binary
detects the API at start and then needs RBAC for it. */}}
{{- define "kube-reloader.openshift" -}}
{{- if or .Values.reloader.isOpenshift (.Capabilities.APIVersions.Has "apps.openshift.io/v1") -}}
true
{{- end -}}
{{- end -}}

{{/* Configuration errors the schema cannot express. */}}
{{/* "true" with shadow.enabled: the controller writes nothing, so RBAC grants only reads (and,
with HA or sharding, the Leases and shard assignment the replicas coordinate with). */}}
{{- define "kube-reloader.shadow" -}}
{{- if (.Values.shadow | default dict).enabled }}true{{ end -}}
{{- end -}}

{{- define "kube-reloader.validate" -}}
{{- if and .Values.reloader.ignoreSecrets .Values.reloader.ignoreConfigMaps -}}
{{- fail "reloader.ignoreSecrets and reloader.ignoreConfigMaps cannot both be true: nothing would be watched" -}}
{{- end -}}
{{- $ns := .Values.reloader.namespaces | default list -}}
{{- if kindIs "string" $ns -}}{{- $ns = splitList "," $ns | compact -}}{{- end -}}
{{- if and .Values.reloader.watchGlobally $ns -}}
{{- fail "reloader.namespaces is set but reloader.watchGlobally is true: set reloader.watchGlobally=false to watch only those namespaces" -}}
{{- end -}}
{{- end -}}

{{/* The admission webhook (admissionWebhook, docs/admission-webhook.md) ------------ */}}
{{- define "kube-reloader.admissionSecret" -}}
{{ include "kube-reloader.fullname" . }}-admission-tls
{{- end -}}

{{- define "kube-reloader.admissionService" -}}
{{ include "kube-reloader.fullname" . }}-admission
{{- end -}}

{{/* Declared custom kinds (reloader.customKinds, docs/custom-kinds.md) ------------- */}}
{{- define "kube-reloader.customKindGroup" -}}
{{- $parts := splitList "/" .apiVersion -}}
{{- if eq (len $parts) 2 }}{{ first $parts }}{{ else }}{{ fail (printf "reloader.customKinds: apiVersion %q must be <group>/<version>" .apiVersion) }}{{ end -}}
{{- end -}}

{{- define "kube-reloader.customKindResource" -}}
{{- .resource | default (printf "%ss" (lower .kind)) -}}
{{- end -}}

{{/* One --custom-kind flag: group/version/Kind and the settings given. */}}
{{- define "kube-reloader.customKindFlag" -}}
--custom-kind={{ .apiVersion }}/{{ .kind }}
{{- with .resource }},resource={{ . }}{{ end -}}
{{- with .template }},template={{ . }}{{ end -}}
{{- with .reloadBy }},reload-by={{ . }}{{ end -}}
{{- with .selector }},selector={{ . }}{{ end -}}
{{- with .podLabel }},pod-label={{ . }}{{ end -}}
{{- end -}}

{{/* "true" when a declared kind restarts by eviction: the pod rules podRestarts grants. */}}
{{- define "kube-reloader.customKindEvicts" -}}
{{- range .Values.reloader.customKinds }}{{ if eq (.reloadBy | default "") "eviction" }}true{{ end }}{{ end -}}
{{- end -}}

{{/* RBAC rules ------------------------------------------------------------- */}}

{{/* What kube-reloader needs in every namespace it watches: read the configs it watches, read
and patch workloads, create Jobs (CronJob reloads) and re-create Jobs (Job reloads), write
Events. Used by the ClusterRole (watchGlobally) and by each watched namespace's Role. */}}
{{- define "kube-reloader.watchRules" -}}
{{- $v := .Values.reloader -}}
{{- if include "kube-reloader.shadow" . }}
{{- include "kube-reloader.shadowWatchRules" . }}
{{- else -}}
- apiGroups: [""]
  resources:
  {{- if not $v.ignoreConfigMaps }}
    - configmaps
  {{- end }}
  {{- if not $v.ignoreSecrets }}
    - secrets
  {{- end }}
  verbs: [get, list, watch]
- apiGroups: [apps]
  resources: [deployments, daemonsets, statefulsets]
  verbs: [get, list, watch, patch]
{{- if not $v.ignoreCronJobs }}
# patch: a CronJob annotated cronjob-reload-strategy: patch has its job template patched.
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [get, list, watch, patch]
# The Job a CronJob reload creates is owned by the CronJob with blockOwnerDeletion, which the
# OwnerReferencesPermissionEnforcement admission plugin (on in OpenShift) allows only to who may
# update the CronJob's finalizers.
- apiGroups: [batch]
  resources: [cronjobs/finalizers]
  verbs: [update]
{{- end }}
{{- if not $v.ignoreJobs }}
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create, delete, get, list, watch]
{{- else if not $v.ignoreCronJobs }}
# A CronJob reload creates a Job from its template.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create]
{{- end }}
{{- if $v.isArgoRollouts }}
- apiGroups: [argoproj.io]
  resources: [rollouts]
  verbs: [get, list, watch, patch]
{{- end }}
{{- if include "kube-reloader.openshift" . }}
- apiGroups: [apps.openshift.io]
  resources: [deploymentconfigs]
  verbs: [get, list, watch, patch]
{{- end }}
{{- range $v.customKinds }}
# Declared custom kind {{ .apiVersion }} {{ .kind }} (reloader.customKinds): its template patched.
- apiGroups: [{{ include "kube-reloader.customKindGroup" . }}]
  resources: [{{ include "kube-reloader.customKindResource" . }}]
  verbs: [get, list, watch, patch]
{{- end }}
{{- if $v.enableCSIIntegration }}
- apiGroups: [secrets-store.csi.x-k8s.io]
  resources: [secretproviderclasses, secretproviderclasspodstatuses]
  verbs: [get, list, watch]
{{- end }}
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- if ($v.podRestarts).labelledPods }}
# Pods labelled kube-reloader.io/restart-by=eviction (podRestarts.labelledPods): watched as
# workloads of their own, the restart recorded on each, and evicted (never deleted).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch]
- apiGroups: [""]
  resources: [pods/eviction]
  verbs: [create]
{{- else if or ($v.podRestarts).enabled (include "kube-reloader.customKindEvicts" .) }}
# restart-by: eviction (docs/pod-restarts.md): a workload's pods listed by its selector, and
# evicted through the Eviction API (never deleted), so PodDisruptionBudgets hold.
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
- apiGroups: [""]
  resources: [pods/eviction]
  verbs: [create]
{{- end }}
{{- end }}
{{- end -}}

{{/* Shadow mode's watch rules: the same objects, read only. Jobs are read for CronJob and Job
reloads (the incumbent creates them). */}}
{{- define "kube-reloader.shadowWatchRules" -}}
{{- $v := .Values.reloader -}}
- apiGroups: [""]
  resources:
  {{- if not $v.ignoreConfigMaps }}
    - configmaps
  {{- end }}
  {{- if not $v.ignoreSecrets }}
    - secrets
  {{- end }}
  verbs: [get, list, watch]
- apiGroups: [apps]
  resources: [deployments, daemonsets, statefulsets]
  verbs: [get, list, watch]
{{- if not $v.ignoreCronJobs }}
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [get, list, watch]
{{- end }}
{{- if or (not $v.ignoreJobs) (not $v.ignoreCronJobs) }}
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch]
{{- end }}
{{- if $v.isArgoRollouts }}
- apiGroups: [argoproj.io]
  resources: [rollouts]
  verbs: [get, list, watch]
{{- end }}
{{- if include "kube-reloader.openshift" . }}
- apiGroups: [apps.openshift.io]
  resources: [deploymentconfigs]
  verbs: [get, list, watch]
{{- end }}
{{- range $v.customKinds }}
- apiGroups: [{{ include "kube-reloader.customKindGroup" . }}]
  resources: [{{ include "kube-reloader.customKindResource" . }}]
  verbs: [get, list, watch]
{{- end }}
{{- if ($v.podRestarts).labelledPods }}
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
{{- end }}
{{- if $v.enableCSIIntegration }}
- apiGroups: [secrets-store.csi.x-k8s.io]
  resources: [secretproviderclasses, secretproviderclasspodstatuses]
  verbs: [get, list, watch]
{{- end }}
{{- end -}}

{{/* What kube-reloader needs in its own namespace: publish the reloader-meta-info ConfigMap
(server-side apply: create, then get/patch of that name only), keep halts of changes rolled in
waves in kube-reloader-halts (get/patch of that name) and, with HA or sharding, its
Leases (one per replica, plus the leader's stakater-reloader-lock) and the shard assignment
ConfigMap the leader publishes and every replica watches (by name). */}}
{{- define "kube-reloader.releaseRules" -}}
{{- if not (include "kube-reloader.shadow" .) -}}
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create]
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [reloader-meta-info, kube-reloader-halts]
  verbs: [get, patch]
{{- end }}
{{- if include "kube-reloader.usesLeases" . }}
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [kube-reloader-shard-assignment]
  verbs: [get, list, watch, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, create, update, patch, delete]
{{- end }}
{{- end -}}

{{/* Args ------------------------------------------------------------------- */}}

{{/* The container args, as a YAML list (toYaml quotes what needs quoting). */}}
{{- define "kube-reloader.args" -}}
{{- $v := .Values.reloader -}}
{{- $a := list -}}
{{- with $v.logFormat }}{{ $a = append $a (printf "--log-format=%s" .) }}{{ end -}}
{{- with $v.logLevel }}{{ $a = append $a (printf "--log-level=%s" .) }}{{ end -}}
{{- if $v.ignoreSecrets }}{{ $a = append $a "--resources-to-ignore=secrets" }}{{ end -}}
{{- if $v.ignoreConfigMaps }}{{ $a = append $a "--resources-to-ignore=configMaps" }}{{ end -}}
{{- $ignored := list -}}
{{- if $v.ignoreJobs }}{{ $ignored = append $ignored "jobs" }}{{ end -}}
{{- if $v.ignoreCronJobs }}{{ $ignored = append $ignored "cronjobs" }}{{ end -}}
{{- if $ignored }}{{ $a = append $a (printf "--ignored-workload-types=%s" (join "," $ignored)) }}{{ end -}}
{{- /* Scoped with a list: --namespaces; scoped without one: KUBERNETES_NAMESPACE (deployment.yaml). */ -}}
{{- if and (not $v.watchGlobally) $v.namespaces }}{{ $a = append $a (printf "--namespaces=%s" (include "kube-reloader.watchNamespaces" . | fromJsonArray | join ",")) }}{{ end -}}
{{- if and $v.watchGlobally $v.ignoreNamespaces }}{{ $a = append $a (printf "--namespaces-to-ignore=%s" $v.ignoreNamespaces) }}{{ end -}}
{{- if and $v.watchGlobally $v.namespaceSelector }}{{ $a = append $a (printf "--namespace-selector=%s" $v.namespaceSelector) }}{{ end -}}
{{- with $v.resourceLabelSelector }}{{ $a = append $a (printf "--resource-label-selector=%s" .) }}{{ end -}}
{{- $flags := dict "auto" "auto-annotation" "configmap" "configmap-annotation" "secret" "secret-annotation" "configmap_auto" "configmap-auto-annotation" "secret_auto" "secret-auto-annotation" "search" "auto-search-annotation" "match" "search-match-annotation" "ignore" "ignore-annotation" "pausePeriod" "pause-deployment-annotation" "pauseTime" "pause-deployment-time-annotation" "configmap_exclude" "configmap-exclude-annotation" "secret_exclude" "secret-exclude-annotation" "secretproviderclass" "secretproviderclass-annotation" "secretproviderclass_auto" "secretproviderclass-auto-annotation" "secretproviderclass_exclude" "secretproviderclass-exclude-annotation" -}}
{{- $custom := $v.custom_annotations | default dict -}}
{{- range $key := keys $flags | sortAlpha }}
{{- with index $custom $key }}{{ $a = append $a (printf "--%s=%s" (index $flags $key) .) }}{{ end -}}
{{- end -}}
{{- with $v.webhookUrl }}{{ $a = append $a (printf "--webhook-url=%s" .) }}{{ end -}}
{{- if $v.isArgoRollouts }}{{ $a = append $a "--is-Argo-Rollouts=true" }}{{ end -}}
{{- with .Values.admissionWebhook }}{{ if .enabled }}
{{- $a = concat $a (list (printf "--admission-addr=:%v" (.port | default 9443)) (printf "--admission-settle=%s" (.settle | default "2s"))) -}}
{{- end }}{{ end -}}
{{- range $v.customKinds }}{{ $a = append $a (include "kube-reloader.customKindFlag" .) }}{{ end -}}
{{- if $v.isOpenshift }}{{ $a = append $a "--is-openshift=true" }}{{ end -}}
{{- if ($v.podRestarts).labelledPods }}{{ $a = append $a "--restart-labelled-pods=true" }}{{ end -}}
{{- if $v.enableCSIIntegration }}{{ $a = append $a "--enable-csi-integration=true" }}{{ end -}}
{{- if $v.reloadOnCreate }}{{ $a = append $a "--reload-on-create=true" }}{{ end -}}
{{- if $v.reloadOnDelete }}{{ $a = append $a "--reload-on-delete=true" }}{{ end -}}
{{- if $v.syncAfterRestart }}{{ $a = append $a "--sync-after-restart=true" }}{{ end -}}
{{- with .Values.shadow }}{{ if .enabled }}
{{- $a = concat $a (list "--shadow=true" (printf "--shadow-window=%s" (.window | default "60s")) (printf "--shadow-late-after=%s" (.lateAfter | default "10s"))) -}}
{{- end }}{{ end -}}
{{- if and $v.reloadStrategy (ne $v.reloadStrategy "default") }}{{ $a = append $a (printf "--reload-strategy=%s" $v.reloadStrategy) }}{{ end -}}
{{- if $v.autoReloadAll }}{{ $a = append $a "--auto-reload-all=true" }}{{ end -}}
{{- /* Reloader's leader election timings (#1206), only with enableHA as in its chart; each is an
alias of a Lease timing, so with sharding on it replaces sharding's flag for that timing. */ -}}
{{- $le := dict -}}
{{- if $v.enableHA }}
{{- $a = append $a "--enable-ha=true" -}}
{{- with $v.leaderElection }}
{{- with .leaseDuration }}{{ $_ := set $le "lease-duration" . }}{{ $a = append $a (printf "--leader-election-lease-duration=%s" .) }}{{ end -}}
{{- with .renewDeadline }}{{ $_ := set $le "renew-deadline" . }}{{ $a = append $a (printf "--leader-election-renew-deadline=%s" .) }}{{ end -}}
{{- with .retryPeriod }}{{ $_ := set $le "retry-period" . }}{{ $a = append $a (printf "--leader-election-retry-period=%s" .) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- if $v.enablePProf }}{{ $a = concat $a (list "--enable-pprof=true" (printf "--pprof-addr=%s" $v.pprofAddr)) }}{{ end -}}
{{- if include "kube-reloader.sharding" . }}
{{- $s := $v.sharding -}}
{{- $a = append $a "--sharding=true" -}}
{{- range $flag, $value := dict "lease-duration" $s.leaseDuration "renew-deadline" $s.renewDeadline "retry-period" $s.retryPeriod }}
{{- if not (hasKey $le $flag) }}{{ $a = append $a (printf "--%s=%s" $flag $value) }}{{ end -}}
{{- end -}}
{{- /* YAML reads an unquoted on/off as true/false (and `default` takes false for unset). */ -}}
{{- $server := "auto" -}}
{{- if kindIs "bool" $s.serverSide }}{{ $server = ternary "on" "off" $s.serverSide }}{{ else if $s.serverSide }}{{ $server = $s.serverSide }}{{ end -}}
{{- $a = append $a (printf "--server-side-sharding=%s" $server) -}}
{{- end -}}
{{- $r := $v.rateLimit -}}
{{- $a = append $a (printf "--max-patches-per-second=%v" ($r.maxPatchesPerSecond | int)) -}}
{{- $a = append $a (printf "--patch-burst=%v" ($r.patchBurst | int)) -}}
{{- $a = append $a (printf "--min-reload-interval=%s" $r.minReloadInterval) -}}
{{- with $r.maxPatchesPerSecondPerTenant }}{{ $a = append $a (printf "--max-patches-per-second-per-tenant=%v" .) }}{{ end -}}
{{- with $r.maxRetryBackoff }}{{ $a = append $a (printf "--max-retry-backoff=%s" .) }}{{ end -}}
{{- with $v.tenantLabel }}{{ $a = append $a (printf "--tenant-label=%s" .) }}{{ end -}}
{{- with $v.digestWorkers }}{{ $a = append $a (printf "--digest-workers=%v" (. | int)) }}{{ end -}}
{{- if and $v.wireFormat (ne $v.wireFormat "auto") }}{{ $a = append $a (printf "--wire-format=%s" $v.wireFormat) }}{{ end -}}
{{- if and $v.preciseKeys (ne (toString $v.preciseKeys) "off") }}{{ $a = append $a (printf "--precise-keys=%s" $v.preciseKeys) }}{{ end -}}
{{- with $v.churnBreaker }}{{ if .limit }}{{ $a = concat $a (list (printf "--churn-limit=%v" (.limit | int)) (printf "--churn-window=%s" .window) (printf "--churn-quiet=%s" .quiet)) }}{{ end }}{{ end -}}
{{- with $v.waves }}{{ with .policy }}{{ $a = append $a (printf "--waves=%s" .) }}{{ end }}{{ with .pollInterval }}{{ $a = append $a (printf "--wave-poll-interval=%s" .) }}{{ end }}{{ end -}}
{{- if and (hasKey $v "ignoreSecretTypes") (ne (toString $v.ignoreSecretTypes) "helm.sh/release.v1") }}{{ $a = append $a (printf "--ignore-secret-types=%s" (toString $v.ignoreSecretTypes)) }}{{ end -}}
{{- toYaml $a -}}
{{- end -}}
