package agent

import (
	"testing"

	"github.com/dunglas/httpsfv"

	"github.com/poppyhost/poppyhost/internal/operations"
)

// FuzzOperationRef feeds Poppy-Operation headers, as a website's page
// brings them to the agent's browser, to OperationRef: a ref is taken
// only from an RFC 9651 Dictionary whose sid is the joined Session's, and
// the header a platform writes for any reference gives that reference
// back (extension 4). testdata/fuzz holds more seeds and every finding.
func FuzzOperationRef(f *testing.F) {
	const sid = "ses_Hq3vT8nW2kLm9xRb"
	for _, seed := range [][2]string{
		{`sid="ses_Hq3vT8nW2kLm9xRb", ref="exc_5Rt2.1791487200-k3Jd9Qx2mW8v"`, "exc_5Rt2.r1"},
		{`ref="exc_5Rt2.r1", sid="ses_Hq3vT8nW2kLm9xRb";x=1, other=?0`, "a.b"},
		{`sid="ses_other", ref="exc_5Rt2.r1"`, "a.b"},
		{`sid=ses_Hq3vT8nW2kLm9xRb, ref="exc_5Rt2.r1"`, "a.b"},
		{`sid="ses_Hq3vT8nW2kLm9xRb", ref=("exc_5Rt2.r1")`, "a.b"},
		{`sid="ses_Hq3vT8nW2kLm9xRb", ref="exc 5Rt2.r1"`, "a b.c"},
		{`sid="ses_Hq3vT8nW2kLm9xRb", ref="../x"`, "../x"},
		{`sid="ses_Hq3vT8nW2kLm9xRb", ref="a.b", ref="c.d"`, "a..b"},
		{`sid="ses_Hq3vT8nW2kLm9xRb"; ref="a.b"`, ""},
		{`(`, ""},
	} {
		f.Add(seed[0], seed[1])
	}
	s := &Session{SID: sid, joined: true}
	f.Fuzz(func(t *testing.T, header, ref string) {
		got := s.OperationRef(&Page{Headers: map[string]string{"poppy-operation": header}})
		if got != "" {
			d, err := httpsfv.UnmarshalDictionary([]string{header})
			if err != nil {
				t.Fatalf("took %q from %q, not a Dictionary", got, header)
			}
			m, _ := d.Get("sid")
			if it, ok := m.(httpsfv.Item); !ok || it.Value != sid {
				t.Fatalf("took %q from %q, not this Session's", got, header)
			}
		}
		if (&Session{SID: sid}).OperationRef(&Page{Headers: map[string]string{"poppy-operation": header}}) != "" {
			t.Fatalf("took a ref from %q in a Session no browser joined", header)
		}
		if _, _, ok := operations.ParseRef(ref); !ok {
			return
		}
		d := httpsfv.NewDictionary()
		d.Add("sid", httpsfv.NewItem(sid))
		d.Add("ref", httpsfv.NewItem(ref))
		written, err := httpsfv.Marshal(d)
		if err != nil {
			t.Fatalf("reference %q cannot be written: %v", ref, err)
		}
		if back := s.OperationRef(&Page{Headers: map[string]string{"poppy-operation": written}}); back != ref {
			t.Fatalf("%s gave %q, not %q", written, back, ref)
		}
	})
}
