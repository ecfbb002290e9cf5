package plans_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/testkit/plancheck"
)

// TestConsoleStatementPlans checks the staff console's lists of
// conversations as TestHotStatementPlans checks the hot paths: the inbox
// reads the index of waiting conversations in the order it shows them
// (migration 00037), and the search the Company list's indexes, whatever
// the Company's size and the statistics.
func TestConsoleStatementPlans(t *testing.T) {
	w := newWorld(t)
	convs := conversations.NewStore(w.pool, conversations.StoreOptions{})
	owner := conversations.Owner{ClientID: client, UserID: "usr_1"}
	text := "a person, please"
	var checks []plancheck.Checked
	for _, c := range w.companies[:2] {
		conv, err := convs.Start(w.ctx, c.ID, owner, conversations.StartRequest{Message: &conversations.Message{
			ID: "m1", Author: conversations.Author{Type: conversations.ResponderHuman}, Text: &text}}, conversations.Policy{})
		require.NoError(t, err)
		_, err = convs.Handoff(w.ctx, c.ID, owner, conv.ID)
		require.NoError(t, err)
		since := time.Now().Add(-24 * time.Hour)
		paths := []hot{
			{name: "inbox", run: func(t *testing.T) {
				_, _, err := convs.Inbox(w.ctx, c.ID, conversations.MaxInbox)
				require.NoError(t, err)
			}, wants: []plancheck.Want{{Index: map[string]string{"conversations": "conversations_company_waiting"}, Ordered: true}}},
			{name: "search by status", run: func(t *testing.T) {
				_, err := convs.CompanyList(w.ctx, c.ID, conversations.ListFilter{Limit: 50, Status: "closed", From: since})
				require.NoError(t, err)
			}, wants: []plancheck.Want{{Index: map[string]string{"conversations": "conversations_company_status_created"}, Ordered: true}}},
		}
		for _, p := range paths {
			stmts := w.rec.Record(func() { p.run(t) })
			checks = append(checks, plancheck.Pair(t, c.Slug+": "+p.name, stmts, p.wants)...)
		}
	}
	plancheck.Phases(t, w.conn, checks, w.load)
}
