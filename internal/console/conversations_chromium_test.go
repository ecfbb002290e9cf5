package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/testkit/chrome"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// paEvent is an event a Personal Agent read from a conversation's stream.
type paEvent struct {
	Type      string         `json:"type"`
	Status    string         `json:"status"`
	Responder string         `json:"responder"`
	Message   map[string]any `json:"message"`
}

// paStream reads a conversation as a Personal Agent does, by server-sent
// events (spec 8.6), in the background.
func paStream(t *testing.T, r *rig, pa *peers.Agent, aud, id string) <-chan paEvent {
	t.Helper()
	req := peers.NewRequest(t, http.MethodGet, aud+"/poppy/conversations/"+id+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	pa.Sign(t, req, peers.SessionClaims{Aud: aud}, peers.SessionOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp, err := (&http.Client{Transport: r.env.Client.Transport}).Do(req.WithContext(ctx))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	out := make(chan paEvent, 100)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		rd := bufio.NewReader(resp.Body)
		for {
			data, err := nextSSE(rd)
			if err != nil {
				return
			}
			var e paEvent
			if json.Unmarshal([]byte(data), &e) == nil && e.Type != "" {
				out <- e
			}
		}
	}()
	return out
}

// nextSSE returns the data of the next server-sent event of rd, its lines
// joined as EventSource joins them; comments and other fields are
// skipped.
func nextSSE(rd *bufio.Reader) (string, error) {
	var data []string
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" && data != nil {
			return strings.Join(data, "\n"), nil
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, v)
		}
	}
}

// nextWhere returns the next event the Personal Agent reads that is
// what want says, skipping the others.
func nextWhere(t *testing.T, events <-chan paEvent, what string, want func(paEvent) bool) paEvent {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e, ok := <-events:
			require.True(t, ok, "the stream ended before %s", what)
			if want(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("the Personal Agent did not read %s", what)
		}
	}
}

// TestChromiumTakeAndReply: a Personal Agent hands a conversation off;
// the inbox, open in Chromium, shows it without a reload; the agent takes
// it and replies, and the Personal Agent, reading the conversation by
// server-sent events, sees a person join and the staff member's message
// (spec 8.7, 8.8); its answer appears in the transcript without a reload.
// Screenshots: inbox, conversation. Another Company's conversation's URL
// is the 404 page.
func TestChromiumTakeAndReply(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	pa := r.env.StartAgent(t, "agent.test")
	aud := r.env.PublicURL("/t/" + r.Slug)
	send := func(path string, body any, status int) map[string]any {
		t.Helper()
		req := peers.NewRequest(t, http.MethodPost, aud+"/poppy/conversations"+path, body)
		pa.Sign(t, req, peers.SessionClaims{Aud: aud}, peers.SessionOptions{})
		resp := peers.Send(t, r.env.Client, req)
		require.Equal(t, status, resp.Status, "%s", resp.Body)
		return resp.JSON(t)
	}

	b := r.browser(t, console.RoleAgent)
	b.Load(chromedp.Navigate(r.url("/inbox")))
	// The feed has sent the inbox as it is: from now on it sends changes.
	b.Do(chromedp.WaitVisible(`#inbox[data-updated]`))
	require.Contains(t, chrome.Run(b, chromedp.Text(`#inbox`)), "Nobody is waiting")

	id := send("", map[string]any{"message": map[string]any{"id": "msg_1", "author": map[string]any{"type": "agent"},
		"text": "The jacket from order #1042 isn't warm enough. The user wants to return it."}}, http.StatusCreated)["conversation_id"].(string)
	send("/"+id+"/messages", map[string]any{"message": map[string]any{"id": "msg_2", "author": map[string]any{"type": "human"},
		"text": "Can a person look at this? <b>Thanks</b>"}}, http.StatusAccepted)
	send("/"+id+"/handoff", map[string]any{}, http.StatusAccepted)
	events := paStream(t, r, pa, aud, id)
	nextWhere(t, events, "the handoff", func(e paEvent) bool { return e.Type == "state" && e.Status == "queued" })

	take := `#inbox button[aria-label="Take ` + id + `"]`
	b.Do(chromedp.WaitVisible(take))
	require.Contains(t, chrome.Run(b, chromedp.Text(`#inbox`)), "Handed off")
	r.screenshot(t, b, "inbox")

	b.Load(chromedp.Click(take))
	require.True(t, strings.HasSuffix(chrome.Run(b, chromedp.Location()), "/conversations/"+id))
	joined := nextWhere(t, events, "a state event after the handoff", func(e paEvent) bool { return e.Type == "state" })
	require.Equal(t, []string{"idle", "human"}, []string{joined.Status, joined.Responder}, "a person joined")

	b.Do(chromedp.SendKeys(`#reply-text`, "Hi, I'm from the team. Which size would you like instead?"))
	b.Load(chromedp.Click(`.reply button[type="submit"]`))
	m := nextWhere(t, events, "the reply", func(e paEvent) bool { return e.Type == "message" }).Message
	require.Equal(t, "Hi, I'm from the team. Which size would you like instead?", m["text"])
	require.Equal(t, "company", m["role"])
	author := m["author"].(map[string]any)
	require.Equal(t, "human", author["type"], "a staff member's message")
	require.True(t, strings.HasPrefix(author["id"].(string), "staff_"), "%v", author)
	require.True(t, strings.HasPrefix(author["name"].(string), "agent "), "%v", author)

	// The Personal Agent answers; the transcript shows it by itself.
	send("/"+id+"/messages", map[string]any{"message": map[string]any{"id": "msg_3", "author": map[string]any{"type": "human"},
		"text": "Medium, please."}}, http.StatusAccepted)
	require.True(t, chrome.Run(b, chromedp.Poll[bool](`document.querySelector("#transcript").textContent.includes("Medium, please.")`)))
	text := chrome.Run(b, chromedp.Text(`#transcript`))
	require.Contains(t, text, "Can a person look at this? <b>Thanks</b>", "message text is text")
	require.Contains(t, text, "staff")
	r.screenshot(t, b, "conversation")

	// Another Company's conversation: the 404 page, nothing of it.
	_, rivalID := r.company(t, "rival")
	secret := "Rival's customer text"
	theirs, err := conversations.NewStore(r.env.Pool, conversations.StoreOptions{}).Start(context.Background(), rivalID,
		conversations.Owner{ClientID: "https://agent.test/", UserID: "usr_1"}, conversations.StartRequest{Message: &conversations.Message{
			ID: "msg_r", Author: conversations.Author{Type: conversations.ResponderAgent}, Text: &secret}}, conversations.Policy{})
	require.NoError(t, err)
	resp := b.Load(chromedp.Navigate(r.url("/conversations/" + theirs.ID)))
	require.EqualValues(t, http.StatusNotFound, resp.Status)
	require.NotContains(t, chrome.Run(b, chromedp.Text("body")), secret)
}
