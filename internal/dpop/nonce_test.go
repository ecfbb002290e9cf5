package dpop_test

import (
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/dpop/dpoptest"
)

// clock is a settable test clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// secrets gives each Company its own secret.
func secrets(_ context.Context, companyID int64) ([]byte, error) {
	return []byte{byte(companyID), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, nil
}

func nonceVerifier(c *clock) (*dpop.Verifier, *dpop.Nonces) {
	n := dpop.NewNonces(secrets, 5*time.Minute, c.now)
	return dpop.New(&dpoptest.Replays{}, dpop.Options{Now: c.now, Nonces: n}), n
}

func nonceReq(token string) dpop.Request {
	r := req(token)
	r.Nonce = true
	return r
}

// requireUseNonce checks err is RFC 9449's use_dpop_nonce refusal and
// returns the nonce it hands out.
func requireUseNonce(t *testing.T, err error, n *dpop.Nonces, companyID int64) string {
	t.Helper()
	var perr *dpop.Error
	require.True(t, errors.As(err, &perr), "want a *dpop.Error, got %v", err)
	require.NotEmpty(t, perr.Nonce, "a refusal for the nonce carries a fresh one")
	cur, err := n.Current(context.Background(), companyID)
	require.NoError(t, err)
	require.Equal(t, cur, perr.Nonce)
	return perr.Nonce
}

// TestNonceFlow runs RFC 9449 §8's flow: a proof without the nonce is
// refused with one, the retry with it is accepted, and a nonce lives for
// its step and the next only.
func TestNonceFlow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock{t: now}
	v, n := nonceVerifier(c)
	k := dpoptest.NewKey()

	_, err := v.Verify(ctx, k.Valid("GET", htu, token, c.t), nonceReq(token))
	nonce := requireUseNonce(t, err, n, 7)

	p, err := v.Verify(ctx, k.WithNonce("GET", htu, token, nonce, c.t), nonceReq(token))
	require.NoError(t, err)
	require.Equal(t, k.JKT, p.JKT)
	require.Empty(t, p.NextNonce, "a current nonce needs no successor")

	// One step later the nonce still works, and the answer hands out the
	// new one (RFC 9449 §8.2).
	c.t = c.t.Add(5 * time.Minute)
	p, err = v.Verify(ctx, k.WithNonce("GET", htu, token, nonce, c.t), nonceReq(token))
	require.NoError(t, err)
	cur, err := n.Current(ctx, 7)
	require.NoError(t, err)
	require.NotEqual(t, nonce, cur)
	require.Equal(t, cur, p.NextNonce)

	// Two steps later it has lapsed.
	c.t = c.t.Add(5 * time.Minute)
	_, err = v.Verify(ctx, k.WithNonce("GET", htu, token, nonce, c.t), nonceReq(token))
	requireUseNonce(t, err, n, 7)

	// A request that needs no nonce ignores one.
	_, err = v.Verify(ctx, k.WithNonce("GET", htu, token, "anything", c.t), req(token))
	require.NoError(t, err)
}

// TestNonceRefusals breaks the nonce rule in each way a client can.
func TestNonceRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock{t: now}
	v, n := nonceVerifier(c)
	k := dpoptest.NewKey()
	good, err := n.Current(ctx, 7)
	require.NoError(t, err)
	otherCompany, err := n.Current(ctx, 8)
	require.NoError(t, err)
	raw, err := base64.RawURLEncoding.DecodeString(good)
	require.NoError(t, err)
	raw[len(raw)-1] ^= 1
	tampered := base64.RawURLEncoding.EncodeToString(raw)
	future := dpop.NewNonces(secrets, 5*time.Minute, func() time.Time { return now.Add(5 * time.Minute) })
	ahead, err := future.Current(ctx, 7)
	require.NoError(t, err)

	for name, nonce := range map[string]string{
		"another Company's nonce": otherCompany,
		"tampered MAC":            tampered,
		"a nonce from the future": ahead,
		"empty":                   "",
		"not base64url":           "!!!!",
		"too short":               good[:10],
		"too long":                good + "AAAA",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := v.Verify(ctx, k.WithNonce("GET", htu, token, nonce, now), nonceReq(token))
			requireUseNonce(t, err, n, 7)
		})
	}
	t.Run("refused proofs record no jti", func(t *testing.T) {
		p := k.For("GET", htu, token, now)
		p.Claims["nonce"] = tampered
		proof := k.Make(p)
		_, err := v.Verify(ctx, proof, nonceReq(token))
		requireUseNonce(t, err, n, 7)
		// The same proof is accepted where no nonce is needed: its jti
		// was not recorded by the refusal.
		_, err = v.Verify(ctx, proof, req(token))
		require.NoError(t, err)
	})
	t.Run("no Nonces configured", func(t *testing.T) {
		_, err := newVerifier().Verify(ctx, k.WithNonce("GET", htu, token, good, now), nonceReq(token))
		var perr *dpop.Error
		require.Error(t, err)
		require.False(t, errors.As(err, &perr), "a missing configuration is a server error, not the client's")
	})
}

// TestNonceSharedAcrossReplicas: two Nonces over the same secrets accept
// each other's nonces, as two replicas do.
func TestNonceSharedAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock{t: now}
	_, a := nonceVerifier(c)
	vb, _ := nonceVerifier(c)
	nonce, err := a.Current(ctx, 7)
	require.NoError(t, err)
	k := dpoptest.NewKey()
	_, err = vb.Verify(ctx, k.WithNonce("GET", htu, token, nonce, now), nonceReq(token))
	require.NoError(t, err)
}
