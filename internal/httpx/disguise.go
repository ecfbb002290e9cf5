package httpx

import (
	"encoding/json"
	"fmt"
)

// Disguising returns the first code point of s that can make text read
// otherwise than it is, and true; or false when there is none. These are
// refused in free text that people and models read (feedback, messages,
// names): bidirectional embeddings, overrides and isolates (U+202A–U+202E,
// U+2066–U+2069; "Trojan Source"), invisible characters with no place in
// text (U+200B, U+2060–U+2064, U+FEFF, U+180E, the Hangul fillers), and
// Unicode tag characters (U+E0000–U+E007F), which models read and people
// do not, except in the emoji tag sequences of subdivision flags. Joiners
// (U+200C, U+200D) and the directional marks (U+200E, U+200F), which
// scripts and emoji need, are left alone.
func Disguising(s string) (rune, bool) {
	inFlag := false // after U+1F3F4, within its tag sequence
	for _, r := range s {
		switch {
		case r == 0x1F3F4:
			inFlag = true
			continue
		case r >= 0xE0020 && r <= 0xE007E && inFlag:
			continue
		case r == 0xE007F && inFlag:
			inFlag = false
			continue
		}
		inFlag = false
		switch {
		case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069,
			r == 0x200B, r >= 0x2060 && r <= 0x2064, r == 0xFEFF, r == 0x180E,
			r == 0x115F, r == 0x1160, r == 0x3164, r == 0xFFA0,
			r >= 0xE0000 && r <= 0xE007F:
			return r, true
		}
	}
	return 0, false
}

// DisguisingJSON is Disguising for every string of a JSON value, member
// names included: the first disguising code point and true, or false when
// there is none or raw is not JSON (which its caller refuses anyway).
func DisguisingJSON(raw []byte) (rune, bool) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return 0, false
	}
	return disguisingValue(v)
}

func disguisingValue(v any) (rune, bool) {
	switch v := v.(type) {
	case string:
		return Disguising(v)
	case []any:
		for _, e := range v {
			if r, ok := disguisingValue(e); ok {
				return r, true
			}
		}
	case map[string]any:
		for k, e := range v {
			if r, ok := Disguising(k); ok {
				return r, true
			}
			if r, ok := disguisingValue(e); ok {
				return r, true
			}
		}
	}
	return 0, false
}

// DisguiseProblem says why s is refused for a disguising code point, or
// returns "".
func DisguiseProblem(s string) string {
	r, ok := Disguising(s)
	if !ok {
		return ""
	}
	return fmt.Sprintf("must not contain U+%04X: bidirectional controls, invisible characters and tag characters "+
		"can make text read otherwise than it is", r)
}
