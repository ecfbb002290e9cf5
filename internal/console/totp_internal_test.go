package console

import (
	"testing"
	"time"
)

// TestTOTPVectors checks the codes of RFC 6238 Appendix B (SHA-1, the
// last six digits of its eight) and that a code is accepted in its step
// and the ones either side, but never twice.
func TestTOTPVectors(t *testing.T) {
	secret := []byte("12345678901234567890")
	for unix, want := range map[int64]string{
		59: "287082", 1111111109: "081804", 1111111111: "050471",
		1234567890: "005924", 2000000000: "279037", 20000000000: "353130",
	} {
		if got := totpCode(secret, totpStepAt(time.Unix(unix, 0))); got != want {
			t.Errorf("at %d: got %s, want %s", unix, got, want)
		}
	}
	now := time.Unix(1111111111, 0)
	code := totpCode(secret, totpStepAt(now))
	step, ok := totpMatch(secret, code, now.Add(totpStep), 0)
	if !ok || step != totpStepAt(now) {
		t.Fatalf("a code of the previous step is refused")
	}
	if _, ok := totpMatch(secret, code, now, step); ok {
		t.Fatalf("a code is accepted twice")
	}
	if _, ok := totpMatch(secret, code, now.Add(2*totpStep), 0); ok {
		t.Fatalf("a code two steps old is accepted")
	}
}
