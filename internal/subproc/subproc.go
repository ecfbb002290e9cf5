// Package subproc holds what starting the built server as a child process
// needs, for the e2e tests and the load generator alike: a free port and
// an environment free of the parent's settings.
package subproc

import (
	"net"
	"os"
	"strings"
)

// Env is this process's environment without POPPYHOST_* settings and
// SSL_CERT_* overrides, which would change what the child serves and
// trusts, plus extra.
func Env(extra map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POPPYHOST_") && !strings.HasPrefix(kv, "SSL_CERT_") {
			env = append(env, kv)
		}
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port, nil
}
