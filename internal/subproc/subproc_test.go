package subproc

import (
	"net"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEnv(t *testing.T) {
	t.Setenv("POPPYHOST_PUBLIC_URL", "https://parent.example")
	t.Setenv("SSL_CERT_FILE", "/parent/ca.pem")
	t.Setenv("SUBPROC_KEPT", "yes")
	env := Env(map[string]string{"POPPYHOST_DEV": "true"})
	require.Contains(t, env, "SUBPROC_KEPT=yes")
	require.Contains(t, env, "POPPYHOST_DEV=true")
	require.False(t, slices.Contains(env, "POPPYHOST_PUBLIC_URL=https://parent.example"))
	require.False(t, slices.Contains(env, "SSL_CERT_FILE=/parent/ca.pem"))
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	port, err := FreePort()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	require.NoError(t, err, "the port is free to listen on")
	require.NoError(t, ln.Close())
}
