package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func noEnv(string) string { return "" }

// TestFlags: the required settings, and a control handler only on loopback.
func TestFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"-issuer", "https://p.test/t/s"},
		{"-issuer", "https://p.test/t/s", "-base-url", "https://shop.test"},
		{"-issuer", "https://p.test/t/s", "-base-url", "https://shop.test", "-plain-http", "-control-addr", "0.0.0.0:1"},
		{"-issuer", "https://p.test/t/s", "-base-url", "http://shop.test", "-plain-http"},
	} {
		err := run(context.Background(), args, noEnv, io.Discard, io.Discard, nil)
		require.Error(t, err, "%v", args)
	}
}

// TestServe: the command serves the shop and its control handler, and
// stops with its context.
func TestServe(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]net.Addr, 1)
	done := make(chan error, 1)
	env := func(name string) string {
		return map[string]string{"DEMO_ORIGIN_PLAIN_HTTP": "true", "DEMO_ORIGIN_SEED_ACCOUNT": "42"}[name]
	}
	var out strings.Builder
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-control-addr", "127.0.0.1:0", "-issuer", "https://p.test/t/s",
			"-base-url", "https://shop.test"}, env, &out, io.Discard, func(shop, control net.Addr) { addrs <- [2]net.Addr{shop, control} })
	}()
	var a [2]net.Addr
	select {
	case a = <-addrs:
	case err := <-done:
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + a[0].String() + "/openapi.json")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get("http://" + a[0].String() + "/api/orders")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no Poppy-Verified")
	resp, err = http.Post("http://"+a[1].String()+"/seed", "application/json", strings.NewReader(`{"account": "43"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Contains(t, out.String(), "orders API  https://shop.test/api")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("did not stop")
	}
}
