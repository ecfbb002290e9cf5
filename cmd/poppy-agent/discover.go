package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

// discover fetches and checks a Company's poppy.json and prints what it
// offers.
func discover(ctx context.Context, args []string, out io.Writer) error {
	var c common
	fs := flag.NewFlagSet("discover", flag.ContinueOnError)
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, _, co, done, err := c.open(ctx, out, 0)
	if err != nil {
		return err
	}
	defer done()
	ops, endpoint := co.Operations()
	fmt.Fprintf(out, "Company        %s (%s)\nidentifier     %s\nconversations  %s\nbrowser join   %s\noperations v3  %v %s\n",
		co.Name(), co.Domain, co.Identifier, co.ConversationEndpoint(), co.BrowserSessionEndpoint(), ops, endpoint)
	for _, api := range co.Doc.APIs {
		fmt.Fprintf(out, "api            %s %s\n", api.Type, api.URL)
	}
	return nil
}

// writeTranscript writes the transcript and says where.
func writeTranscript(r interface{ WriteFile(string) error }, path string, out io.Writer) {
	if path == "" {
		return
	}
	if err := r.WriteFile(path); err != nil {
		fmt.Fprintln(out, "transcript:", err)
		return
	}
	fmt.Fprintln(out, "transcript written to", path)
}
