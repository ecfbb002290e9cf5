package samples_test

import (
	"testing"

	"github.com/poppyhost/poppyhost/internal/testkit/samples"
)

func TestParse(t *testing.T) {
	got := samples.Parse(t, []byte(`# HELP a_total A.
# TYPE a_total counter
a_total{x="1 2"} 3

b 4.5e+06
`))
	if len(got) != 2 || got[`a_total{x="1 2"}`] != 3 || got["b"] != 4.5e6 {
		t.Errorf("Parse = %v", got)
	}
	if f := samples.Families(got); len(f) != 2 || !f["a_total"] || !f["b"] {
		t.Errorf("Families = %v", f)
	}
}
