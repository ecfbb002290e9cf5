package test

import (
	"bufio"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const (
	chartDir   = "../poppyhost"
	readmePath = "../../../README.md"
	release    = "ph"
	namespace  = "poppy"
	publicHost = "poppyhost.example"
)

// kubeVersion is the oldest Kubernetes the chart supports (Chart.yaml
// kubeVersion; the preStop sleep action needs 1.30).
var kubeVersion = &chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}

// required are the values every install must set.
func required() map[string]any {
	return map[string]any{
		"publicURL":      "https://" + publicHost,
		"database":       map[string]any{"existingSecret": "poppyhost-db"},
		"adminToken":     map[string]any{"existingSecret": "poppyhost-admin"},
		"keks":           map[string]any{"existingSecret": "poppyhost-keks"},
		"trustedProxies": []any{"10.0.0.0/8"},
	}
}

// ciValues reads one of the chart's ci/*-values.yaml files.
func ciValues(t *testing.T, name string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "ci", name))
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return c
}

// renderValues coalesces vals with the chart's defaults and validates them
// against values.schema.json, as `helm install` does.
func renderValues(c *chart.Chart, vals map[string]any) (chartutil.Values, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kubeVersion
	return chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: true,
	}, caps)
}

// manifests is a rendered release, decoded strictly.
type manifests struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	opsService     *corev1.Service
	ingress        *networkingv1.Ingress
	hpa            *autoscalingv2.HorizontalPodAutoscaler
	pdb            *policyv1.PodDisruptionBudget
	job            *batchv1.Job
	serviceMonitor *unstructured.Unstructured
	dashboard      *corev1.ConfigMap
	prometheusRule *unstructured.Unstructured
	notes          string
}

// render renders the chart with vals and decodes every manifest into its
// Kubernetes API type, refusing unknown fields, duplicates and unknown kinds.
func render(t *testing.T, vals map[string]any) manifests {
	t.Helper()
	c := loadChart(t)
	rv, err := renderValues(c, vals)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	files, err := engine.Render(c, rv)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	var m manifests
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasSuffix(name, "NOTES.txt") {
			m.notes = files[name]
			continue
		}
		if strings.HasSuffix(name, ".tpl") {
			continue
		}
		for _, doc := range splitManifests(files[name]) {
			decode(t, name, doc, &m)
		}
	}
	return m
}

var separator = regexp.MustCompile(`(?m)^---\s*$`)

// splitManifests splits a rendered file into its YAML documents, leaving
// out those with nothing but comments and blank lines.
func splitManifests(s string) []string {
	var docs []string
	for _, d := range separator.Split(s, -1) {
		if hasContent(d) {
			docs = append(docs, d)
		}
	}
	return docs
}

func hasContent(doc string) bool {
	sc := bufio.NewScanner(strings.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			return true
		}
	}
	return false
}

func decode(t *testing.T, file, doc string, m *manifests) {
	t.Helper()
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
		t.Fatalf("%s: not YAML: %v\n%s", file, err, doc)
	}
	strict := func(dst any, seen bool) {
		t.Helper()
		if seen {
			t.Fatalf("%s: a second %s", file, head.Kind)
		}
		// UnmarshalStrict converts to JSON and decodes it with unknown
		// fields and duplicate keys refused.
		if err := yaml.UnmarshalStrict([]byte(doc), dst); err != nil {
			t.Fatalf("%s: %s does not decode strictly into the API type: %v\n%s", file, head.Kind, err, doc)
		}
	}
	// custom decodes a custom resource, which has no Go type here; seen is
	// the one decoded before, which must be nil.
	custom := func(seen *unstructured.Unstructured) *unstructured.Unstructured {
		t.Helper()
		if seen != nil {
			t.Fatalf("%s: a second %s", file, head.Kind)
		}
		var obj map[string]any
		if err := yaml.UnmarshalStrict([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return &unstructured.Unstructured{Object: obj}
	}
	switch head.APIVersion + " " + head.Kind {
	case "apps/v1 Deployment":
		strict(&m.deployment, m.deployment != nil)
	case "v1 Service":
		if strings.HasSuffix(file, "/service-ops.yaml") {
			strict(&m.opsService, m.opsService != nil)
		} else {
			strict(&m.service, m.service != nil)
		}
	case "networking.k8s.io/v1 Ingress":
		strict(&m.ingress, m.ingress != nil)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		strict(&m.hpa, m.hpa != nil)
	case "policy/v1 PodDisruptionBudget":
		strict(&m.pdb, m.pdb != nil)
	case "batch/v1 Job":
		strict(&m.job, m.job != nil)
	case "v1 ConfigMap":
		strict(&m.dashboard, m.dashboard != nil)
	case "monitoring.coreos.com/v1 PrometheusRule":
		m.prometheusRule = custom(m.prometheusRule)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		m.serviceMonitor = custom(m.serviceMonitor)
	default:
		t.Fatalf("%s: unexpected %s %s", file, head.APIVersion, head.Kind)
	}
}

// merge returns base with over laid on top (maps merge, the rest replaces).
func merge(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = merge(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// readmeEnv returns the POPPYHOST_* names of README.md's configuration table.
func readmeEnv(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "## Configuration")
	if !ok {
		t.Fatal("README.md has no Configuration section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	names := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `POPPYHOST_") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, n := range regexp.MustCompile("`(POPPYHOST_[A-Z_]+)`").FindAllStringSubmatch(first, -1) {
			names[n[1]] = true
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d settings in README.md's table: %v", len(names), names)
	}
	return names
}

func TestLint(t *testing.T) {
	cases := map[string]map[string]any{
		"required values": required(),
		"proxy-values":    ciValues(t, "proxy-values.yaml"),
		"certificate":     ciValues(t, "certificate-values.yaml"),
		"monitoring":      monitoringValues(),
	}
	for name, vals := range cases {
		t.Run(name, func(t *testing.T) {
			linter := lint.AllWithKubeVersion(chartDir, vals, namespace, kubeVersion)
			for _, msg := range linter.Messages {
				if msg.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", msg)
				} else {
					t.Logf("helm lint: %s", msg)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	m := render(t, required())
	env := readmeEnv(t)

	d := m.deployment
	if d == nil || m.service == nil || m.hpa == nil || m.pdb == nil || m.job == nil {
		t.Fatalf("missing manifests: %+v", m)
	}
	if m.ingress != nil || m.serviceMonitor != nil || m.dashboard != nil || m.prometheusRule != nil {
		t.Error("Ingress, ServiceMonitor, dashboard or PrometheusRule rendered although off by default")
	}
	if d.Spec.Replicas != nil {
		t.Errorf("replicas = %d with the HorizontalPodAutoscaler on; it must be left to the autoscaler", *d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	checkPodSecurity(t, "Deployment", pod)
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	checkContainerSecurity(t, "server", c)
	checkTmp(t, pod, c)

	// Proxy mode: plain HTTP on port "http"; probes on the operations
	// port.
	if len(c.Ports) != 2 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8443 ||
		c.Ports[1].Name != "ops" || c.Ports[1].ContainerPort != 9090 {
		t.Errorf("ports = %+v, want http on 8443 and ops on 9090", c.Ports)
	}
	checkProbe(t, "liveness", c.LivenessProbe, "/healthz")
	checkProbe(t, "readiness", c.ReadinessProbe, "/readyz")

	got := envMap(t, c.Env, env)
	want := map[string]string{
		"POPPYHOST_PUBLIC_URL":       "https://" + publicHost,
		"POPPYHOST_LISTEN_ADDR":      ":8443",
		"POPPYHOST_OPS_ADDR":         ":9090",
		"POPPYHOST_DATABASE_URL":     "secret:poppyhost-db/database-url",
		"POPPYHOST_ADMIN_TOKEN":      "secret:poppyhost-admin/admin-token",
		"POPPYHOST_KEKS":             "secret:poppyhost-keks/keks",
		"POPPYHOST_PLAIN_HTTP":       "true",
		"POPPYHOST_TRUSTED_PROXIES":  "10.0.0.0/8",
		"POPPYHOST_LOG_LEVEL":        "info",
		"POPPYHOST_SHUTDOWN_TIMEOUT": "20s",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("server env:\n got %v\nwant %v", got, want)
	}

	grace := *pod.TerminationGracePeriodSeconds
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatal("no preStop sleep")
	}
	if min := c.Lifecycle.PreStop.Sleep.Seconds + 2*20; grace <= min {
		t.Errorf("terminationGracePeriodSeconds %d is not above preStop + 2 x shutdown timeout (%d)", grace, min)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the service account token is mounted; the server never calls the Kubernetes API")
	}

	// Service, HPA and PDB point at the Deployment's pods.
	sel := d.Spec.Selector.MatchLabels
	if !reflect.DeepEqual(m.service.Spec.Selector, sel) {
		t.Errorf("Service selector %v, pods %v", m.service.Spec.Selector, sel)
	}
	for k, v := range sel {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("pod labels %v do not match the selector %v", d.Spec.Template.Labels, sel)
		}
	}
	if p := m.service.Spec.Ports; len(p) != 1 || p[0].Name != "http" || p[0].Port != 80 || p[0].TargetPort.StrVal != "http" {
		t.Errorf("Service ports = %+v", p)
	}
	checkOpsService(t, m, sel)
	if ref := m.hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
		t.Errorf("HPA targets %+v, want Deployment %s", ref, d.Name)
	}
	if *m.hpa.Spec.MinReplicas < 2 {
		t.Errorf("HPA minReplicas %d: one replica leaves nothing during a rollout or node drain", *m.hpa.Spec.MinReplicas)
	}
	if !reflect.DeepEqual(m.pdb.Spec.Selector.MatchLabels, sel) || m.pdb.Spec.MaxUnavailable == nil {
		t.Errorf("PDB = %+v", m.pdb.Spec)
	}

	checkMigrateJob(t, m, env)
	if !strings.Contains(m.notes, "https://"+publicHost) {
		t.Errorf("NOTES.txt does not name the public URL:\n%s", m.notes)
	}
}

func TestCertificateMode(t *testing.T) {
	vals := ciValues(t, "certificate-values.yaml")
	m := render(t, vals)
	env := readmeEnv(t)
	d := m.deployment
	if m.hpa != nil {
		t.Error("HPA rendered with autoscaling off")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	checkPodSecurity(t, "Deployment", pod)
	checkContainerSecurity(t, "server", c)
	if len(c.Ports) != 2 || c.Ports[0].Name != "https" || c.Ports[1].Name != "ops" {
		t.Errorf("ports = %+v, want https and ops", c.Ports)
	}
	// The operations listener is plain HTTP whatever the public one is.
	checkProbe(t, "liveness", c.LivenessProbe, "/healthz")
	checkProbe(t, "readiness", c.ReadinessProbe, "/readyz")

	got := envMap(t, c.Env, env)
	if got["POPPYHOST_TLS_CERT_FILE"] != "/etc/poppyhost/tls/tls.crt" || got["POPPYHOST_TLS_KEY_FILE"] != "/etc/poppyhost/tls/tls.key" {
		t.Errorf("TLS files: %v", got)
	}
	for _, name := range []string{"POPPYHOST_PLAIN_HTTP", "POPPYHOST_TRUSTED_PROXIES", "POPPYHOST_DEV", "POPPYHOST_DEV_CA_DIR", "POPPYHOST_ALLOW_PRIVATE_FETCH"} {
		if _, ok := got[name]; ok {
			t.Errorf("%s is set in certificate mode", name)
		}
	}
	var mounted bool
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == "/etc/poppyhost/tls" {
			mounted = vm.ReadOnly
			for _, v := range pod.Volumes {
				if v.Name == vm.Name && (v.Secret == nil || v.Secret.SecretName != "poppyhost-tls") {
					t.Errorf("TLS volume %+v is not the Secret poppyhost-tls", v)
				}
			}
		}
	}
	if !mounted {
		t.Error("the TLS Secret is not mounted read-only at /etc/poppyhost/tls")
	}
	if p := m.service.Spec.Ports; len(p) != 1 || p[0].Name != "https" || p[0].Port != 443 {
		t.Errorf("Service ports = %+v", p)
	}
	checkOpsService(t, m, d.Spec.Selector.MatchLabels)
	checkMigrateJob(t, m, env)
}

func TestIngressAndServiceMonitor(t *testing.T) {
	m := render(t, ciValues(t, "proxy-values.yaml"))
	ing := m.ingress
	if ing == nil || m.serviceMonitor == nil {
		t.Fatal("Ingress or ServiceMonitor not rendered")
	}
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" {
		t.Errorf("ingressClassName = %v", ing.Spec.IngressClassName)
	}
	var hosts []string
	for _, r := range ing.Spec.Rules {
		hosts = append(hosts, r.Host)
		b := r.HTTP.Paths[0].Backend.Service
		if b.Name != m.service.Name || b.Port.Name != "http" {
			t.Errorf("rule %s goes to %+v", r.Host, b)
		}
	}
	if !reflect.DeepEqual(hosts, []string{publicHost, "shop.example.com"}) {
		t.Errorf("Ingress hosts = %v", hosts)
	}
	if len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "poppyhost-ingress-tls" || len(ing.Spec.TLS[0].Hosts) != 2 {
		t.Errorf("Ingress TLS = %+v", ing.Spec.TLS)
	}

	sm := m.serviceMonitor
	if sm.GetAPIVersion() != "monitoring.coreos.com/v1" || sm.GetKind() != "ServiceMonitor" {
		t.Errorf("ServiceMonitor is %s %s", sm.GetAPIVersion(), sm.GetKind())
	}
	if sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels = %v", sm.GetLabels())
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 {
		t.Fatalf("endpoints = %v", eps)
	}
	ep := eps[0].(map[string]any)
	if ep["port"] != "ops" || ep["path"] != "/metrics" || ep["scheme"] != "http" {
		t.Errorf("endpoint = %v", ep)
	}
	// It selects the operations Service and not the public one.
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if !subset(sel, m.opsService.Labels) {
		t.Errorf("ServiceMonitor selects %v, operations Service labels %v", sel, m.opsService.Labels)
	}
	if subset(sel, m.service.Labels) {
		t.Errorf("ServiceMonitor selects the public Service too (%v)", m.service.Labels)
	}
}

func TestSchemaRejects(t *testing.T) {
	c := loadChart(t)
	if _, err := renderValues(c, required()); err != nil {
		t.Fatalf("the required values are refused: %v", err)
	}
	cases := map[string]struct {
		vals map[string]any
		want string
	}{
		"http public URL":       {merge(required(), map[string]any{"publicURL": "http://poppyhost.example"}), "publicURL"},
		"public URL with path":  {merge(required(), map[string]any{"publicURL": "https://poppyhost.example/x"}), "publicURL"},
		"no public URL":         {func() map[string]any { v := required(); delete(v, "publicURL"); return v }(), "publicURL"},
		"no database secret":    {func() map[string]any { v := required(); delete(v, "database"); return v }(), "database"},
		"no admin token secret": {func() map[string]any { v := required(); delete(v, "adminToken"); return v }(), "adminToken"},
		"no KEK secret":         {func() map[string]any { v := required(); delete(v, "keks"); return v }(), "keks"},
		"unknown value":         {merge(required(), map[string]any{"rateLimits": map[string]any{"perAddress": 10}}), "rateLimits"},
		"unknown nested value":  {merge(required(), map[string]any{"database": map[string]any{"url": "postgres://x"}}), "url"},
		"proxy mode without trusted proxies": {
			merge(required(), map[string]any{"trustedProxies": []any{}}), "trustedProxies"},
		"certificate mode without a Secret": {
			merge(required(), map[string]any{"tls": map[string]any{"mode": "certificate"}}), "secretName"},
		"bad log level": {merge(required(), map[string]any{"logLevel": "verbose"}), "logLevel"},
		"bad TLS mode":  {merge(required(), map[string]any{"tls": map[string]any{"mode": "dev-ca"}}), "mode"},
		"sampler ratio above 1": {
			merge(required(), map[string]any{"tracing": map[string]any{"samplerRatio": 2}}), "samplerRatio"},
		"extra env without a name": {
			merge(required(), map[string]any{"extraEnv": []any{map[string]any{"value": "x"}}}), "name"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := renderValues(c, tc.vals)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not name %q: %v", tc.want, err)
			}
		})
	}

	// A grace period too short for draining fails the render.
	rv, err := renderValues(c, merge(required(), map[string]any{"terminationGracePeriodSeconds": 30}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Render(c, rv); err == nil || !strings.Contains(err.Error(), "terminationGracePeriodSeconds") {
		t.Errorf("short grace period: err = %v", err)
	}
}

func subset(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) > 0
}

// envMap flattens env to name -> value or "secret:name/key", checking that
// every name is one of README.md's and none is set twice.
func envMap(t *testing.T, env []corev1.EnvVar, readme map[string]bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range env {
		if !readme[e.Name] {
			t.Errorf("env %s is not a setting in README.md's table", e.Name)
		}
		if _, dup := out[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			if e.Value != "" {
				t.Errorf("env %s has both a value and a Secret", e.Name)
			}
			out[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom != nil:
			t.Errorf("env %s comes from something other than a Secret: %+v", e.Name, e.ValueFrom)
		default:
			out[e.Name] = e.Value
		}
	}
	for _, secret := range []string{"POPPYHOST_DATABASE_URL", "POPPYHOST_ADMIN_TOKEN", "POPPYHOST_KEKS"} {
		if v, ok := out[secret]; ok && !strings.HasPrefix(v, "secret:") {
			t.Errorf("%s is given as a plain value, not from a Secret", secret)
		}
	}
	return out
}

func checkPodSecurity(t *testing.T, what string, pod corev1.PodSpec) {
	t.Helper()
	sc := pod.SecurityContext
	if sc == nil {
		t.Fatalf("%s: no pod securityContext", what)
	}
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: pod runAsNonRoot is not true", what)
	}
	if sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("%s: pod runAsUser is not a non-root UID", what)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod seccompProfile is not RuntimeDefault", what)
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("%s: shares a host namespace", what)
	}
}

func checkContainerSecurity(t *testing.T, what string, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Fatalf("%s: no container securityContext", what)
	}
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: runAsNonRoot is not true", what)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem is not true", what)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation is not false", what)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", what)
	}
	if sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("%s: capabilities = %+v, want drop [ALL] and no add", what, sc.Capabilities)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: seccompProfile is not RuntimeDefault", what)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: no memory request or limit: %+v", what, c.Resources)
	}
}

// checkTmp checks that /tmp is a writable emptyDir, the only writable path.
func checkTmp(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != "/tmp" {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.EmptyDir != nil && !vm.ReadOnly {
				return
			}
		}
	}
	t.Errorf("%s: no writable emptyDir at /tmp", c.Name)
}

func checkProbe(t *testing.T, what string, p *corev1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Fatalf("%s probe: none, or not httpGet", what)
	}
	g := p.HTTPGet
	// Health and readiness answer on the operations listener only, plain
	// HTTP whatever the Host.
	if g.Path != path || g.Port.StrVal != "ops" || g.Scheme != corev1.URISchemeHTTP {
		t.Errorf("%s probe: %s %s port %s, want HTTP %s port ops", what, g.Scheme, g.Path, g.Port.String(), path)
	}
	if len(g.HTTPHeaders) != 0 {
		t.Errorf("%s probe: headers %+v, want none", what, g.HTTPHeaders)
	}
}

// checkOpsService checks the operations listener's Service: cluster-internal
// and on the pods' ops port only.
func checkOpsService(t *testing.T, m manifests, sel map[string]string) {
	t.Helper()
	s := m.opsService
	if s == nil {
		t.Fatal("no operations Service")
	}
	if s.Spec.Type != corev1.ServiceTypeClusterIP || !reflect.DeepEqual(s.Spec.Selector, sel) {
		t.Errorf("operations Service: type %s, selector %v", s.Spec.Type, s.Spec.Selector)
	}
	if p := s.Spec.Ports; len(p) != 1 || p[0].Name != "ops" || p[0].Port != 9090 || p[0].TargetPort.StrVal != "ops" {
		t.Errorf("operations Service ports = %+v", p)
	}
	for _, p := range m.service.Spec.Ports {
		if p.TargetPort.StrVal == "ops" || p.TargetPort.IntValue() == 9090 {
			t.Errorf("the public Service exposes the operations port: %+v", p)
		}
	}
}

func checkMigrateJob(t *testing.T, m manifests, readme map[string]bool) {
	t.Helper()
	j := m.job
	want := map[string]string{
		"helm.sh/hook":               "pre-install,pre-upgrade",
		"helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
		"helm.sh/hook-weight":        "0",
	}
	if !reflect.DeepEqual(j.Annotations, want) {
		t.Errorf("migrate Job annotations = %v, want %v", j.Annotations, want)
	}
	pod := j.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("migrate Job restartPolicy = %s", pod.RestartPolicy)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("migrate Job has %d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if !reflect.DeepEqual(c.Command, []string{"/migrate", "up"}) || len(c.Args) > 0 {
		t.Errorf("migrate Job runs %v %v", c.Command, c.Args)
	}
	server := m.deployment.Spec.Template.Spec
	if c.Image != server.Containers[0].Image {
		t.Errorf("migrate Job image %s, server image %s", c.Image, server.Containers[0].Image)
	}
	env := envMap(t, c.Env, readme)
	if !reflect.DeepEqual(env, map[string]string{"POPPYHOST_DATABASE_URL": "secret:poppyhost-db/database-url",
		"POPPYHOST_KEKS": "secret:poppyhost-keks/keks"}) {
		t.Errorf("migrate Job env = %v", env)
	}
	checkPodSecurity(t, "migrate Job", pod)
	checkContainerSecurity(t, "migrate", c)
	if !reflect.DeepEqual(pod.SecurityContext, server.SecurityContext) {
		t.Errorf("migrate Job pod securityContext differs from the server's")
	}
	if !reflect.DeepEqual(c.SecurityContext, server.Containers[0].SecurityContext) {
		t.Errorf("migrate Job container securityContext differs from the server's")
	}
	if j.Spec.BackoffLimit == nil || j.Spec.ActiveDeadlineSeconds == nil {
		t.Error("migrate Job has no backoffLimit or activeDeadlineSeconds")
	}
}
