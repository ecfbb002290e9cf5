// Command poppy-agent is the reference Personal Agent as a command-line
// client (package agent): it discovers a Company, signs the User in,
// talks with the Company Agent, calls its APIs, and approves operations,
// printing each step and writing a transcript with secrets redacted.
//
//	poppy-agent discover --company https://stormline.localhost:8443 --ca .data/dev-ca.pem
//	poppy-agent story    --company https://stormline.localhost:8443 --ca .data/dev-ca.pem \
//	    --ca-key .data/dev-ca-key.pem --user ada --password-file .data/demo-password
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "poppy-agent:", err)
		os.Exit(1)
	}
}

const usage = `usage: poppy-agent <command> [flags]

commands:
  discover   fetch and check a Company's poppy.json (spec 3)
  browse     join the agent's browser to a Session and open a page
  signin     sign in (Direct, or Device with --device), refresh, sign out
  story      run the jacket story against a running demo, step by step

run "poppy-agent <command> -h" for its flags`

// run dispatches a subcommand.
func run(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	switch args[0] {
	case "discover":
		return discover(ctx, args[1:], out)
	case "browse":
		return browse(ctx, args[1:], out)
	case "signin":
		return signin(ctx, args[1:], out)
	case "story":
		return story(ctx, args[1:], in, out)
	case "-h", "--help", "help":
		fmt.Fprintln(out, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}
