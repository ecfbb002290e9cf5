package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/agent"
)

// story runs the jacket story in a conversation: a signed-out question,
// sign-in when the Company Agent needs the account, the exchange it
// proposes approved (by the User at the terminal, or on --approve-under),
// and sign-out with the conversation continuing signed out.
func story(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	var c common
	var under, scopes string
	var yes bool
	var via string
	var specialist bool
	var j jacket
	fs := flag.NewFlagSet("story", flag.ContinueOnError)
	fs.BoolVar(&specialist, "specialist", false, "ask for a specialist, accept the Company's request for the User, and hand off")
	fs.StringVar(&via, "via", "conversation", "the interface: conversation, api, mcp or web")
	fs.StringVar(&j.order, "order", "", "the order to exchange an item of (default: a fresh copy of the demo's jacket order, so the story can be run again)")
	fs.StringVar(&j.item, "item", "itm_4Qa", "the item to exchange")
	fs.StringVar(&j.sku, "sku", "stormline-insulated-m", "the replacement's SKU")
	c.register(fs)
	c.registerAccount(fs)
	fs.StringVar(&under, "approve-under", "", `approve as the agent, on the instruction "approve exchanges under this many USD"`)
	fs.StringVar(&scopes, "scopes", "orders:read orders:write", "scopes to sign in with when the Company does not name them")
	fs.BoolVar(&yes, "yes", false, "answer yes for the User (no terminal prompt)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	user, err := c.account()
	if err != nil {
		return err
	}
	ctx, a, co, done, err := c.open(ctx, out, 5*time.Minute)
	if err != nil {
		return err
	}
	defer done()
	fmt.Fprintf(out, "\n1. Discovered %s at %s (issuer %s)\n", co.Name(), co.Domain, co.Issuer)

	s := co.NewSession()
	prompt := terminalUser(in, out, yes)
	var approver agent.Approver = agent.AsUser(prompt)
	if under != "" {
		approver = agent.AsAgent(agent.Instruction{Text: "approve exchanges under $" + under, Under: under, Currency: "USD", Else: agent.AsUser(prompt)})
	}
	if via != "conversation" {
		return storyVia(ctx, a, s, via, j, strings.Fields(scopes), user, approver, out)
	}
	conv, events, err := s.StartConversation(ctx, agent.Message{
		Text:    "The jacket from my last order isn't warm enough. Can I exchange it for a warmer one?",
		Context: map[string]any{"locale": "en-US", "user_available": true},
	}, 10)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n2. Asked signed out in conversation %s\n", conv.ID)
	printEvents(out, events)

	saidYes := false
	for round := 0; round < 6; round++ {
		if ev := find(events, "authorization"); ev != nil && !co.SignedIn() {
			want := strings.Fields(ev.Scope)
			if len(want) == 0 {
				want = strings.Fields(scopes)
			}
			fmt.Fprintf(out, "\n3. The Company Agent needs the account (%s): Direct Sign-In in headless Chromium\n", ev.Scope)
			if err := a.SignInDirect(ctx, co, want, user); err != nil {
				return err
			}
			fmt.Fprintf(out, "   signed in with %s\n", strings.Join(co.Grant().Scopes, " "))
			if j.order == "" {
				if j.order, err = freshOrder(ctx, s, out); err != nil {
					return err
				}
			}
			events, err = conv.Send(ctx, agent.Message{Text: "I've signed in. Please go ahead: exchange the jacket on order " + j.order +
				" for the insulated jacket in the same size."}, 10)
			if err != nil {
				return err
			}
			printEvents(out, events)
			continue
		}
		if op := lastOperation(events); op != nil {
			fmt.Fprintf(out, "\n4. The Company proposes operation %s: %s\n", op.OperationID, op.Summary)
			// What the agent asked for: the replacement, not an order
			// (the User said "my last order").
			asked := map[string]any{"replacement_sku": j.sku}
			res, more, err := conv.ApproveOperation(ctx, op, asked, approver, 10)
			printEvents(out, more)
			var declined *agent.Declined
			switch {
			case errors.As(err, &declined):
				fmt.Fprintf(out, "   declined by the Company: %s (not performed; not sent again)\n", declined.Reason)
			case errors.Is(err, agent.ErrNotApproved):
				fmt.Fprintln(out, "   not approved: nothing performed")
			case err != nil:
				return err
			default:
				fmt.Fprintf(out, "   approved by the %s and sent; the Company answered: %s\n", res.Approval.Approver, res.Reply)
			}
			break
		}
		if !saidYes {
			// The Company Agent offered the exchange: say yes.
			saidYes = true
			sayYes := "Yes, please set up the exchange."
			if j.order != "" {
				sayYes = "Yes, please set up the exchange of the jacket on order " + j.order + "."
			}
			fmt.Fprintf(out, "\n   agent: %s (replies read by SSE)\n", sayYes)
			if events, err = conv.Send(ctx, agent.Message{Text: sayYes}, -1); err != nil {
				return err
			}
			more, err := untilReply(ctx, conv)
			if err != nil {
				return err
			}
			events = append(events, more...)
			printEvents(out, events)
			continue
		}
		if events, err = conv.Events(ctx, 10); err != nil {
			return err
		}
		printEvents(out, events)
		if len(events) == 0 {
			break
		}
	}

	if specialist {
		if err := askSpecialist(ctx, conv, out); err != nil {
			return err
		}
	}
	if co.SignedIn() {
		fmt.Fprintln(out, "\n5. Sign out (revoke the refresh token); the conversation continues signed out")
		if err := co.SignOut(ctx); err != nil {
			return err
		}
		_, err := conv.Send(ctx, agent.Message{Text: "Is my exchange on its way?"}, 5)
		var ce *agent.ConversationError
		if errors.As(err, &ce) {
			fmt.Fprintf(out, "   signed out, the conversation answers with a challenge: %d %s%s\n", ce.Status, ce.Code, ce.Challenge)
		} else if err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "\nDone.")
	return nil
}

// terminalUser asks the User at the terminal (extension 5: the Company's
// name and the terms, the answer through the agent's own interface).
func terminalUser(in io.Reader, out io.Writer, yes bool) agent.UserFunc {
	r := bufio.NewReader(in)
	return func(_ context.Context, ask *agent.Ask) (bool, string, error) {
		fmt.Fprintf(out, "\n   %s asks for your approval:\n   %s\n   terms: %s\n", ask.Company, ask.Operation.Summary, ask.Operation.Terms)
		for _, d := range ask.Differences {
			fmt.Fprintf(out, "   differs from what was asked: %s\n", d)
		}
		if yes {
			fmt.Fprintln(out, "   approve? [y/N] y (--yes)")
			return true, "typed", nil
		}
		fmt.Fprint(out, "   approve? [y/N] ")
		line, err := r.ReadString('\n')
		if err != nil && line == "" {
			return false, "", nil
		}
		return strings.EqualFold(strings.TrimSpace(line), "y"), "typed", nil
	}
}

func printEvents(out io.Writer, events []agent.Event) {
	for _, e := range events {
		switch e.Type {
		case "message":
			if e.Message != nil && e.Message.Role == "company" {
				fmt.Fprintf(out, "   company (%s): %s\n", e.Message.Author.Type, e.Message.Text)
			}
		case "state":
			fmt.Fprintf(out, "   [%s, %s]\n", e.Status, e.Responder)
		case "authorization":
			fmt.Fprintf(out, "   [authorization: %s %s]\n", e.Error, e.Scope)
		case "user_requested":
			fmt.Fprintf(out, "   [the Company asks for the User: %s]\n", e.Reason)
		}
	}
}

func find(events []agent.Event, typ string) *agent.Event {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type == typ {
			return &events[i]
		}
	}
	return nil
}

func lastOperation(events []agent.Event) *agent.Operation {
	for i := len(events) - 1; i >= 0; i-- {
		if op := events[i].Message.Operation(); op != nil {
			return op
		}
	}
	return nil
}

// storyVia signs in and makes the exchange through one interface.
func storyVia(ctx context.Context, a *agent.Agent, s *agent.Session, via string, j jacket, scopes []string,
	user agent.UserStep, approver agent.Approver, out io.Writer) error {
	do := map[string]func(context.Context, *agent.Session, jacket, agent.Approver, io.Writer) error{
		"api": viaAPI, "mcp": viaMCP, "web": viaWeb,
	}[via]
	if do == nil {
		return fmt.Errorf("--via %q: want conversation, api, mcp or web", via)
	}
	fmt.Fprintf(out, "\n2. Direct Sign-In in headless Chromium for %s\n", strings.Join(scopes, " "))
	if err := a.SignInDirect(ctx, s.Company, scopes, user); err != nil {
		return err
	}
	if j.order == "" {
		var err error
		if j.order, err = freshOrder(ctx, s, out); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\n3. The exchange through the %s\n", via)
	if err := do(ctx, s, j, approver, out); err != nil {
		return err
	}
	fmt.Fprintln(out, "\n4. Sign out (revoke the refresh token)")
	if err := s.Company.SignOut(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nDone.")
	return nil
}

// untilReply streams events (spec 8.6) until the Company says something
// the agent acts on, or 15 seconds pass.
func untilReply(ctx context.Context, conv *agent.Conversation) ([]agent.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var got []agent.Event
	err := conv.Stream(ctx, func(e agent.Event) bool {
		got = append(got, e)
		switch {
		case e.Type == "authorization", e.Type == "user_requested":
			return false
		case e.Type == "message" && e.Message != nil && e.Message.Role == "company":
			return false
		}
		return true
	})
	if errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}
	return got, err
}

// askSpecialist asks for a specialist; when the Company asks for the User
// (user_requested), the User agrees and the agent opens the Direct
// Conversation (spec 8.10), then asks for a person there (spec 8.9).
func askSpecialist(ctx context.Context, conv *agent.Conversation, out io.Writer) error {
	fmt.Fprintln(out, "\n   agent: Could a specialist look at this?")
	events, err := conv.Send(ctx, agent.Message{Text: "Could a specialist look at this?"}, 10)
	if err != nil {
		return err
	}
	printEvents(out, events)
	ev := find(events, "user_requested")
	for i := 0; ev == nil && i < 5; i++ {
		more, err := conv.Events(ctx, 10)
		if err != nil {
			return err
		}
		printEvents(out, more)
		ev = find(more, "user_requested")
		if len(more) == 0 {
			break
		}
	}
	if ev == nil {
		fmt.Fprintln(out, "   (the Company did not ask for the User)")
		return nil
	}
	fmt.Fprintln(out, "   the User agrees: opening a Direct Conversation")
	direct, replies, err := conv.AcceptUserRequested(ctx, *ev, 10)
	if err != nil {
		return err
	}
	printEvents(out, replies)
	fmt.Fprintf(out, "   direct conversation %s: asking for a person\n", direct.ID)
	if err := direct.Handoff(ctx); err != nil {
		return err
	}
	replies, err = direct.Events(ctx, 10)
	if err != nil {
		return err
	}
	printEvents(out, replies)
	return direct.Close(ctx)
}
