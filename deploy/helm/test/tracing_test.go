package test

import (
	"strings"
	"testing"
)

// otelEnv returns the server container's OTEL_* variables: value, or
// "secret:{name}/{key}".
func otelEnv(t *testing.T, vals map[string]any) map[string]string {
	t.Helper()
	m := render(t, vals)
	out := map[string]string{}
	for _, e := range m.deployment.Spec.Template.Spec.Containers[0].Env {
		if !strings.HasPrefix(e.Name, "OTEL_") {
			continue
		}
		if _, dup := out[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		out[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	return out
}

// TestTracing: tracing is off by default (no OTEL_* variable); with an
// endpoint the Deployment sets OpenTelemetry's standard variables, the
// collector's headers from a Secret, and extraEnv adds the others.
func TestTracing(t *testing.T) {
	if got := otelEnv(t, required()); len(got) != 0 {
		t.Errorf("tracing on by default: %v", got)
	}
	got := otelEnv(t, merge(required(), map[string]any{
		"tracing": map[string]any{"endpoint": "http://otel-collector.observability:4318", "serviceName": "poppyhost-eu",
			"samplerRatio": 0.25, "headers": map[string]any{"existingSecret": "otlp", "key": "headers"}},
		"extraEnv": []any{map[string]any{"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "deployment.environment=prod"}},
	}))
	want := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4318",
		"OTEL_SERVICE_NAME":           "poppyhost-eu",
		"OTEL_TRACES_SAMPLER":         "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":     "0.25",
		"OTEL_EXPORTER_OTLP_HEADERS":  "secret:otlp/headers",
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment=prod",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("OTEL_* variables %v, want %v", got, want)
	}
	// Without a headers Secret there is no headers variable; the default
	// ratio traces every request.
	got = otelEnv(t, merge(required(), map[string]any{"tracing": map[string]any{"endpoint": "https://otlp.example"}}))
	if _, ok := got["OTEL_EXPORTER_OTLP_HEADERS"]; ok || got["OTEL_TRACES_SAMPLER_ARG"] != "1" {
		t.Errorf("OTEL_* variables %v", got)
	}
}
