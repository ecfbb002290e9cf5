package httpx

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDisguisingJSON(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`"a\u202eb"`, `{"k": "x\u200b"}`, `{"a\u2066": 1}`, `[1, {"n": ["ok", "\u202a"]}]`} {
		_, bad := DisguisingJSON([]byte(raw))
		require.True(t, bad, raw)
	}
	for _, raw := range []string{`"ok"`, `{"k": "می\u200cخواهم"}`, `[1, true, null]`, `not json`} {
		_, bad := DisguisingJSON([]byte(raw))
		require.False(t, bad, raw)
	}
}

func TestDisguising(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]string{
		"right-to-left override":  "refund \u202e$100 of 0001$",
		"left-to-right embedding": "a\u202ab",
		"pop directional":         "a\u202cb",
		"first strong isolate":    "a\u2068b\u2069",
		"zero-width space":        "pay\u200bpal",
		"word joiner":             "a\u2060b",
		"invisible times":         "a\u2062b",
		"byte order mark":         "\ufeffhello",
		"Mongolian separator":     "a\u180eb",
		"Hangul filler":           "\u3164",
		"tag characters":          "ok\U000E0049\U000E0047\U000E004E\U000E004F\U000E0052\U000E0045",
		"tags without a flag":     "\U000E0067\U000E0062\U000E007F",
		"flag then stray tag":     "\U0001F3F4\U000E0067\U000E0062\U000E007F\U000E0041",
	} {
		_, bad := Disguising(s)
		require.True(t, bad, name)
		require.NotEmpty(t, DisguiseProblem(s), name)
		require.NotEmpty(t, TextProblem(s, true, 1000, true), name)
	}
	for name, s := range map[string]string{
		"plain":                 "Exchange the jacket for size M",
		"Arabic":                "مرحبا بالعالم",
		"Hebrew with a mark":    "שלום\u200f world",
		"Persian with ZWNJ":     "می\u200cخواهم",
		"family emoji with ZWJ": "\U0001F468\u200d\U0001F469\u200d\U0001F467",
		"flag of Scotland":      "\U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F",
		"newlines and tabs":     "a\n\tb",
		"empty":                 "",
	} {
		_, bad := Disguising(s)
		require.False(t, bad, name)
		require.Empty(t, DisguiseProblem(s), name)
	}
}
