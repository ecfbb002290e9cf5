package jose

import (
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func seg(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestDecodeSegment(t *testing.T) {
	t.Parallel()
	var v map[string]any
	require.NoError(t, DecodeSegment(seg(`{"a":1}`), &v))
	require.Equal(t, json.Number("1"), v["a"])
	for _, bad := range []string{"!!", seg(``), seg(`[1]`), seg(`"x"`), seg(`{"a":1}{}`), seg(`{"a":`)} {
		require.Error(t, DecodeSegment(bad, &v), bad)
	}
}

func TestNumericDate(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]int64{"1790900000": 1790900000, "1790900000.9": 1790900000, "0": 0} {
		got, ok := NumericDate(json.RawMessage(raw))
		require.True(t, ok, raw)
		require.Equal(t, time.Unix(want, 0), got)
	}
	for _, raw := range []string{``, `"1790900000"`, `-1`, `1e12`, `null`, `true`} {
		_, ok := NumericDate(json.RawMessage(raw))
		require.False(t, ok, raw)
	}
}

func TestHasPrivateMembers(t *testing.T) {
	t.Parallel()
	require.False(t, HasPrivateMembers(map[string]json.RawMessage{"kty": nil, "x": nil, "y": nil}))
	require.True(t, HasPrivateMembers(map[string]json.RawMessage{"kty": nil, "d": nil}))
	require.True(t, HasPrivateMembers(map[string]json.RawMessage{"kty": nil, "k": nil}))
}

func TestAgentAlg(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"ES256", "PS384"} {
		alg, ok := AgentAlg(&name)
		require.True(t, ok)
		require.Equal(t, name, alg.String())
	}
	for _, name := range []string{"RS256", "PS256", "ES384", "none", "HS256", "es256", ""} {
		_, ok := AgentAlg(&name)
		require.False(t, ok, name)
	}
	_, ok := AgentAlg(nil)
	require.False(t, ok)
}
